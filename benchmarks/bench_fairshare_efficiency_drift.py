"""Fair-share, GPU efficiency and drift on a bulk-generated history: full rebuild, one incremental day, RSS.

    .venv/bin/python benchmarks/bench_fairshare_efficiency_drift.py --jobs 10000000 --db /tmp/bench-fed.duckdb

Jobs, node snapshots and events come from benchmarks/bench_pipelines.py's generator (one year, 500 users in
50 accounts; no sshare, so fair-share runs on Slurm's default tree). On top of it: per-minute NVML samples
for `--gpus` GPUs over the last `--sample-days` days, GPU-to-job intervals (one job per GPU per 3 hours),
an inventory with one odd driver, and XID events. Per-minute samples for a whole fleet-year would be
billions of rows; they live in Prometheus, and the pipelines only read the window they rebuild.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_pipelines import START, generate  # noqa: E402
from slurmscope.pipelines.runner import run_pipelines  # noqa: E402

from slurmscope.config import load_config  # noqa: E402
from slurmscope.db import connect  # noqa: E402

MINE = ["fairshare", "efficiency", "drift"]


def gpu_data(con, gpus: int, days: int, now) -> None:
    t0 = now - timedelta(days=days)
    con.execute("""
        INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, model, samples, util_gpu_mean, util_gpu_max,
                                 mem_used_max_bytes, power_mean_watts, energy_joules, temp_gpu_max_celsius,
                                 sm_clock_mean_mhz, ecc_corrected_delta)
        SELECT 'bench', 'gpu' || lpad(CAST(g // 8 AS VARCHAR), 4, '0'), 'GPU-' || g,
               $t0::TIMESTAMPTZ + to_minutes(m), 'h100', 6, u, least(100, u + 5), 40000000000,
               100 + 5 * u, 60 * (100 + 5 * u), 40 + 0.3 * u + CASE WHEN g = 3 THEN 9 ELSE 0 END,
               1980 - CASE WHEN g = 3 THEN 240 ELSE 0 END, CASE WHEN hash(g, m) % 50000 = 0 THEN 1 ELSE 0 END
        FROM range($gpus) a(g), range(CAST($days * 1440 AS BIGINT)) b(m),
             LATERAL (SELECT CAST(hash(g, m // 30) % 100 AS DOUBLE) AS u)
    """, {"t0": t0, "gpus": gpus, "days": days})
    con.execute("""
        INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance, source)
        SELECT 'bench', 'gpu' || lpad(CAST(g // 8 AS VARCHAR), 4, '0'), 'GPU-' || g,
               CAST(j.job_id_raw AS VARCHAR), j.start_time, j.end_time, '', 'prolog'
        FROM range($gpus) a(g),
             LATERAL (SELECT job_id_raw, start_time, end_time FROM jobs
                      WHERE start_time >= $t0::TIMESTAMPTZ AND end_time IS NOT NULL
                        AND job_id_raw % $gpus = g AND job_id_raw % 97 = 0) j
    """, {"t0": t0, "gpus": gpus})
    con.execute("""
        INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, model, driver_version, cuda_version)
        SELECT 'bench', 'gpu' || lpad(CAST(g // 8 AS VARCHAR), 4, '0'), 'GPU-' || g, $now, 'h100',
               CASE WHEN g // 8 = 1 THEN '535.104' ELSE '550.54' END, '12.4'
        FROM range($gpus) a(g)
    """, {"now": now, "gpus": gpus})
    con.execute("""
        INSERT INTO gpu_events (cluster, node, gpu_uuid, event_time, event_type, xid, source)
        SELECT 'bench', 'gpu' || lpad(CAST(k % ($gpus // 8) AS VARCHAR), 4, '0'), '', $t0::TIMESTAMPTZ + to_minutes(k * 37),
               'xid', 79, 'kmsg'
        FROM range(CAST($days * 1440 / 37 AS BIGINT)) t(k)
    """, {"t0": t0, "gpus": gpus, "days": days})
    con.execute("CHECKPOINT")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000_000)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--sample-days", type=int, default=7)
    ap.add_argument("--db", default="/tmp/slurmscope-bench-fed.duckdb")
    args = ap.parse_args()
    Path(args.db).unlink(missing_ok=True)
    now = START + timedelta(days=args.days)
    con = connect(args.db)
    t = time.perf_counter()
    generate(con, args.jobs, args.days, now)
    gpu_data(con, args.gpus, args.sample_days, now)
    gen = time.perf_counter() - t
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "bench"})
    t = time.perf_counter()
    full = run_pipelines(con, cfg, full=True, now=now, only=MINE)
    full_s = time.perf_counter() - t
    t = time.perf_counter()
    incr = run_pipelines(con, cfg, now=now + timedelta(days=1), only=MINE)
    incr_s = time.perf_counter() - t
    print(json.dumps({
        "jobs": args.jobs, "days": args.days, "gpus": args.gpus, "sample_days": args.sample_days,
        "generate_seconds": round(gen, 1), "full_seconds": round(full_s, 1), "full_rows": full,
        "incremental_day_seconds": round(incr_s, 1), "incremental_rows": incr,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0),
    }, indent=2))


if __name__ == "__main__":
    main()
