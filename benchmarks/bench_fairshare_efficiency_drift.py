"""Fair-share, GPU efficiency and drift on a bulk-generated history: full rebuild, one incremental day, RSS.

    .venv/bin/python benchmarks/bench_fairshare_efficiency_drift.py --jobs 10000000 --db /tmp/bench-fed.duckdb
    # one step per process (own CPU time and peak RSS), on the database generated above:
    .venv/bin/python benchmarks/bench_fairshare_efficiency_drift.py --reuse --db ... --only fairshare --step full
    .venv/bin/python benchmarks/bench_fairshare_efficiency_drift.py --reuse --db ... --only fairshare --step incremental

Jobs, node snapshots and events come from benchmarks/bench_pipelines.py's generator (one year, 500 users in
50 accounts; no sshare, so fair-share runs on Slurm's default tree). On top of it: per-minute NVML samples
for `--gpus` GPUs over the last `--sample-days` days, GPU-to-job intervals (one job per GPU per 3 hours),
an inventory with one odd driver, and XID events. Per-minute samples for a whole fleet-year would be
billions of rows; they live in Prometheus, and the pipelines only read the window they rebuild.
The incremental step adds one day of attempts and one late record (started 5 days earlier, ingested after
the full run) before running at `now` + 1 day. CPU seconds are the process's user + system time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_pipelines import JOBS_SQL, START, generate, rss_mb  # noqa: E402
from slurmscope.pipelines.runner import run_pipelines  # noqa: E402

from slurmscope.config import load_config  # noqa: E402
from slurmscope.db import connect  # noqa: E402

MINE = ["fairshare", "efficiency", "drift"]


def gpu_data(con, gpus: int, days: int, now) -> None:
    t0 = now - timedelta(days=days)
    con.execute(
        """
        INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, model, samples, util_gpu_mean, util_gpu_max,
                                 mem_used_max_bytes, power_mean_watts, energy_joules, temp_gpu_max_celsius,
                                 sm_clock_mean_mhz, ecc_corrected_delta)
        SELECT 'bench', 'gpu' || lpad(CAST(g // 8 AS VARCHAR), 4, '0'), 'GPU-' || g,
               $t0::TIMESTAMPTZ + to_minutes(m), 'h100', 6, u, least(100, u + 5), 40000000000,
               100 + 5 * u, 60 * (100 + 5 * u), 40 + 0.3 * u + CASE WHEN g = 3 THEN 9 ELSE 0 END,
               1980 - CASE WHEN g = 3 THEN 240 ELSE 0 END, CASE WHEN hash(g, m) % 50000 = 0 THEN 1 ELSE 0 END
        FROM range($gpus) a(g), range(CAST($days * 1440 AS BIGINT)) b(m),
             LATERAL (SELECT CAST(hash(g, m // 30) % 100 AS DOUBLE) AS u)
    """,
        {"t0": t0, "gpus": gpus, "days": days},
    )
    con.execute(
        """
        INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance, source)
        SELECT 'bench', 'gpu' || lpad(CAST(g // 8 AS VARCHAR), 4, '0'), 'GPU-' || g,
               CAST(j.job_id_raw AS VARCHAR), j.start_time, j.end_time, '', 'prolog'
        FROM range($gpus) a(g),
             LATERAL (SELECT job_id_raw, start_time, end_time FROM jobs
                      WHERE start_time >= $t0::TIMESTAMPTZ AND end_time IS NOT NULL
                        AND job_id_raw % $gpus = g AND job_id_raw % 97 = 0) j
    """,
        {"t0": t0, "gpus": gpus},
    )
    con.execute(
        """
        INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, model, driver_version, cuda_version)
        SELECT 'bench', 'gpu' || lpad(CAST(g // 8 AS VARCHAR), 4, '0'), 'GPU-' || g, $now, 'h100',
               CASE WHEN g // 8 = 1 THEN '535.104' ELSE '550.54' END, '12.4'
        FROM range($gpus) a(g)
    """,
        {"now": now, "gpus": gpus},
    )
    con.execute(
        """
        INSERT INTO gpu_events (cluster, node, gpu_uuid, event_time, event_type, xid, source)
        SELECT 'bench', 'gpu' || lpad(CAST(k % ($gpus // 8) AS VARCHAR), 4, '0'), '', $t0::TIMESTAMPTZ + to_minutes(k * 37),
               'xid', 79, 'kmsg'
        FROM range(CAST($days * 1440 / 37 AS BIGINT)) t(k)
    """,
        {"t0": t0, "gpus": gpus, "days": days},
    )
    con.execute("CHECKPOINT")


def reset(con, jobs: int, now, pipelines: list[str], full: bool) -> None:
    """Back to the generated history (and, for an incremental step, to the state right after the full run)."""
    con.execute("DELETE FROM jobs WHERE job_id_raw >= ?", [jobs])
    if full:
        for name in pipelines:
            module = importlib.import_module(f"slurmscope.pipelines.{name}")
            for table in module.MART_TABLES:
                con.execute(f"DELETE FROM {table}")
        con.execute("DELETE FROM pipeline_runs")
    else:
        con.execute("DELETE FROM pipeline_runs WHERE run_at > ?", [now])
    con.execute("CHECKPOINT")


def next_day(con, jobs: int, days: int, now) -> None:
    """One more day of attempts ingested after the full run, and one late record: an attempt that started
    5 days before the run and reached the database only now (slurmdbd backlog)."""
    later = now + timedelta(days=1)
    ingested = datetime.now(UTC) + timedelta(days=1)
    per_day = max(1, jobs // days)
    con.execute(
        JOBS_SQL,
        {
            "t0": now,
            "span_us": 86400 * 1_000_000,
            "n": per_day,
            "first": jobs + 10,
            "now": later,
            "ingested": ingested,
        },
    )
    con.execute(
        JOBS_SQL,
        {
            "t0": now - timedelta(days=5),
            "span_us": 1_000_000,
            "n": 1,
            "first": jobs + 10 + per_day + 1,
            "now": later,
            "ingested": ingested,
        },
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000_000)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--sample-days", type=int, default=7)
    ap.add_argument("--db", default="/tmp/slurmscope-bench-fed.duckdb")
    ap.add_argument("--only", default=",".join(MINE), help="comma-separated pipelines (default: all three)")
    ap.add_argument("--reuse", action="store_true", help="keep a database generated by an earlier run")
    ap.add_argument(
        "--step",
        choices=["all", "generate", "full", "incremental"],
        default="all",
        help="run one step per process so that each gets its own CPU time and peak RSS",
    )
    args = ap.parse_args()
    only = [n for n in args.only.split(",") if n]
    for name in only:  # before any step: a run measures the code as it was when it started
        importlib.import_module(f"slurmscope.pipelines.{name}")
    now = START + timedelta(days=args.days)
    out: dict[str, object] = {
        "jobs": args.jobs,
        "days": args.days,
        "only": only,
        "step": args.step,
        "load_average_before": os.getloadavg()[0],
    }
    if not args.reuse:
        Path(args.db).unlink(missing_ok=True)
    con = connect(args.db)
    if not args.reuse:
        t = time.perf_counter()
        generate(con, args.jobs, args.days, now)
        gpu_data(con, args.gpus, args.sample_days, now)
        out["generate_seconds"] = round(time.perf_counter() - t, 1)
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "bench"})
    if args.step in ("all", "full"):
        if args.reuse:
            reset(con, args.jobs, now, only, full=True)
        t, c = time.perf_counter(), time.process_time()
        out["full_rows"] = run_pipelines(con, cfg, full=True, now=now, only=only)
        out["full_seconds"] = round(time.perf_counter() - t, 1)
        out["full_cpu_seconds"] = round(time.process_time() - c, 1)
        out["rss_after_full_mb"] = round(rss_mb())
    if args.step in ("all", "incremental"):
        if args.reuse and args.step == "incremental":
            reset(con, args.jobs, now, only, full=False)
        next_day(con, args.jobs, args.days, now)
        t, c = time.perf_counter(), time.process_time()
        out["incremental_rows"] = run_pipelines(con, cfg, now=now + timedelta(days=1), only=only)
        out["incremental_day_seconds"] = round(time.perf_counter() - t, 1)
        out["incremental_day_cpu_seconds"] = round(time.process_time() - c, 1)
    out["peak_rss_mb"] = round(rss_mb())
    out["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
