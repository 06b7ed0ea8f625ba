"""What migration 0041's outputs cost: cost + reliability full rebuild with and without them (A/B, one process).

    .venv/bin/python benchmarks/bench_cost_reliability_0041.py --jobs 1000000 --db /tmp/bench-0041.duckdb

History from benchmarks/bench_pipelines.py's generator (jobs, sinfo, node events), plus NVML telemetry for
`--tele-nodes` nodes over the last `--tele-days` days (gpu_jobs intervals for the jobs that ran there and one
sample per GPU-minute), so the usage-weighted join has work to do. Each round runs `run_pipelines(full=True)`
for cost and reliability twice: "without" = the pipelines with mart_cost_efficiency_daily and
mart_job_outcomes_node_daily dropped from their outputs (and billing.idle_cost = separate), "with" = as
shipped with billing.idle_cost = spread. Rounds alternate so machine load hits both alike; CPU seconds are the
honest figure on a shared machine. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

from slurmscope.pipelines import cost, reliability
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.db import connect

sys.path.insert(0, str(Path(__file__).parent))
from bench_pipelines import START, generate  # noqa: E402

NEW = {"mart_cost_efficiency_daily", "mart_job_outcomes_node_daily"}


def add_telemetry(con, nodes: int, days: int, now) -> int:
    """Map the GPUs of jobs on the first `nodes` nodes (by NodeList) to gpu_jobs and sample every minute."""
    since = now - timedelta(days=days)
    con.execute(
        """
        INSERT OR IGNORE INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance,
                                        source)
        SELECT 'bench', node_list, node_list || '-g' || g, CAST(job_id_raw AS VARCHAR), start_time, end_time, '', 'prolog'
        FROM jobs, range(0, 8) r(g)
        WHERE cluster = 'bench' AND start_time IS NOT NULL AND coalesce(end_time, $now) > $since
          AND node_list IN (SELECT DISTINCT node_list FROM jobs WHERE node_list IS NOT NULL ORDER BY 1 LIMIT $n)
          AND g < gpus""",
        {"now": now, "since": since, "n": nodes},
    )
    con.execute(
        """
        INSERT OR IGNORE INTO gpu_samples (cluster, node, gpu_uuid, minute, samples, util_gpu_mean, energy_joules,
                                           power_mean_watts)
        SELECT 'bench', node, node || '-g' || g, m, 6, (hash(node, g, m) % 101)::DOUBLE,
               (hash(m, g) % 40000)::DOUBLE, NULL
        FROM (SELECT DISTINCT node FROM gpu_jobs WHERE cluster = 'bench') n, range(0, 8) r(g),
             range($since::TIMESTAMP, $now::TIMESTAMP, INTERVAL 1 MINUTE) t(m)""",
        {"now": now, "since": since},
    )
    return con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]


def without_new(module):
    """The pipeline module as before migration 0041's outputs: same compute, the new marts dropped."""
    orig_compute, orig_tables = module.compute, dict(module.MART_TABLES)

    def compute(frames, params):
        return {k: v for k, v in orig_compute(frames, params).items() if k not in NEW}

    module.compute = compute
    module.MART_TABLES = {k: v for k, v in orig_tables.items() if k not in NEW}
    return orig_compute, orig_tables


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--db", default="/tmp/bench-0041.duckdb")
    ap.add_argument("--tele-nodes", type=int, default=16)
    ap.add_argument("--tele-days", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if os.path.exists(args.db):
        os.remove(args.db)
    now = START + timedelta(days=args.days)
    con = connect(args.db)
    con.execute("SET memory_limit = '1GB'")
    generate(con, args.jobs, args.days, now)
    samples = add_telemetry(con, args.tele_nodes, args.tele_days, now)
    base = load_config(env={}).with_overrides(
        cluster={"name": "bench"},
        billing={"timezone": "Europe/Berlin"},
        pipelines={"node_snapshot_max_gap_seconds": 6 * 3600},
    )
    spread = base.with_overrides(billing={"idle_cost": "spread"})
    out: dict[str, object] = {
        "jobs": args.jobs,
        "gpu_samples": samples,
        "load_average_before": os.getloadavg()[0],
        "without": [],
        "with": [],
    }
    for _ in range(args.rounds):
        for label in ("without", "with"):
            saved = [without_new(m) for m in (cost, reliability)] if label == "without" else None
            t, c = time.perf_counter(), time.process_time()
            rows = run_pipelines(
                con, spread if label == "with" else base, full=True, now=now, only=["cost", "reliability"]
            )
            out[label].append(
                {"wall_s": round(time.perf_counter() - t, 1), "cpu_s": round(time.process_time() - c, 1)}
            )
            if saved:
                for m, (compute, tables) in zip((cost, reliability), saved, strict=True):
                    m.compute, m.MART_TABLES = compute, tables
            else:
                out["rows_with"] = {k: v for k, v in rows.items() if k in NEW}
    out["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
