"""Every registered pipeline over a bulk-generated history: full rebuild, the next day incremental, peak RSS.

    .venv/bin/python -m benchmarks.pipelines --db /tmp/fs10m.duckdb --jobs 10000000 --step generate
    .venv/bin/python -m benchmarks.pipelines --db /tmp/fs10m.duckdb --jobs 10000000 --step full
    .venv/bin/python -m benchmarks.pipelines --db /tmp/fs10m.duckdb --jobs 10000000 --step incremental
    .venv/bin/python -m benchmarks.pipelines --db /tmp/fs10m.duckdb --jobs 10000000 --step full --each

The history is benchmarks/history.py's (generated once by `--step generate`, or by `--step all`, which then
runs the other two steps in the same process). `full` is one `run_pipelines(full=True)` over the pipelines
(`--only`, default every registered one), as `slurmscope pipelines run --full` runs them. `incremental`
adds one more day of attempts plus one late record (started 5 days earlier, ingested after the full run)
and times the incremental run a day later; it needs the full run of this script at the same `--days`.
`--each` runs the step for each pipeline in its own process, so each reports its own CPU seconds and peak
RSS. `--skip-marts` leaves the named marts out of the run (not computed, not written): the reference for what
those marts cost. Both steps first put the database back to the generated history (later job ids and later runs
deleted), so they can be repeated.

Config: billing zone Europe/Berlin (a DST zone, so the day split is really exercised), a 6-hour node
snapshot gap (the generated sinfo interval), `pipelines.full_slice_days` from `--slice-days`. Inside a run
the time spent reading inputs (DuckDB -> Arrow -> Polars) and writing marts is measured by wrapping the
runner's `_read` and `_write`; the rest is the pipelines' compute (planning and collecting LazyFrames).
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
from slurmscope.pipelines import runner

from benchmarks.harness import in_child, parser, peak_rss_mib, run, timer
from benchmarks.history import START, generate, gpu_data, next_day
from slurmscope.config import load_config
from slurmscope.db import connect


def _connect(args: argparse.Namespace) -> duckdb.DuckDBPyConnection:
    con = connect(args.db)
    if args.threads:
        con.execute(f"SET threads = {int(args.threads)}")
    if args.duckdb_memory:
        con.execute("SET memory_limit = ?", [args.duckdb_memory])
    return con


def build(args: argparse.Namespace) -> dict[str, Any]:
    """A fresh database with the generated history."""
    Path(args.db).unlink(missing_ok=True)
    Path(args.db + ".wal").unlink(missing_ok=True)
    con = _connect(args)
    try:
        now = START + timedelta(days=args.days)
        with timer() as t:
            generate(con, args.jobs, args.days, now)
            if args.gpus:
                gpu_data(con, args.gpus, args.sample_days, now)
                con.execute("CHECKPOINT")
        sizes = {
            table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("jobs", "node_states", "node_events", "sched_stats", "gpu_samples")
        }
    finally:
        con.close()
    return {"generate": t, "rows": sizes, "db_mib": round(Path(args.db).stat().st_size / 2**20)}


def skip_marts(names: set[str]) -> None:
    """The reference run: the pipelines without `names`, neither computed nor written (measures what marts
    cost, e.g. the cost pipeline's reconciliation, against the same pipeline on the same database)."""
    for module in runner.PIPELINES:
        if names & set(module.MART_TABLES):
            module.MART_TABLES = {k: v for k, v in module.MART_TABLES.items() if k not in names}
            compute = module.compute

            def without(frames, params, compute=compute):
                return {k: v for k, v in compute(frames, params).items() if k not in names}

            module.compute = without


def measure(args: argparse.Namespace, only: list[str], incremental: bool) -> dict[str, Any]:
    """One step in this process, with its read / compute / write split and each pipeline's share."""
    if args.skip_marts:
        skip_marts(set(args.skip_marts.split(",")))
    spent = {"read": 0.0, "write": 0.0}
    per: dict[str, dict[str, float]] = {}

    def timed(fn, key):
        def wrapper(*a, **kw):
            c = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[key] += time.process_time() - c

        return wrapper

    run_pipeline = runner.run_pipeline

    def per_pipeline(con, cfg, module, window):
        t, c = time.perf_counter(), time.process_time()
        try:
            return run_pipeline(con, cfg, module, window)
        finally:
            mine = per.setdefault(module.NAME, {"wall_s": 0.0, "cpu_s": 0.0})
            mine["wall_s"] += time.perf_counter() - t
            mine["cpu_s"] += time.process_time() - c

    runner._read = timed(runner._read, "read")
    runner._write = timed(runner._write, "write")
    runner.run_pipeline = per_pipeline
    con = _connect(args)
    cfg = load_config(None, env={}).with_overrides(
        cluster={"name": "bench"},
        billing={"timezone": "Europe/Berlin"},
        pipelines={"node_snapshot_max_gap_seconds": 6 * 3600, "full_slice_days": args.slice_days},
    )
    now = START + timedelta(days=args.days)
    try:
        con.execute("DELETE FROM jobs WHERE job_id_raw >= ?", [args.jobs])
        con.execute("DELETE FROM pipeline_runs WHERE run_at > ?", [now])
        if incremental:
            done = {
                p
                for (p,) in con.execute(
                    "SELECT pipeline FROM pipeline_runs WHERE run_at = ? AND status = 'ok'", [now]
                ).fetchall()
            }
            missing = sorted(set(only) - done)
            if missing:
                raise SystemExit(f"no full rebuild at {now} for {missing}: run --step full first")
            next_day(con, args.jobs, args.days, now)
            now += timedelta(days=1)
        with timer() as t:
            rows = runner.run_pipelines(con, cfg, full=not incremental, now=now, only=only)
    finally:
        con.close()
    return {
        **t,
        "read_cpu_s": round(spent["read"], 1),
        "write_cpu_s": round(spent["write"], 1),
        "compute_cpu_s": round(t["cpu_s"] - spent["read"] - spent["write"], 1),
        "peak_rss_mib": peak_rss_mib(),
        "rows": rows,
        "by_pipeline": {k: {m: round(v, 1) for m, v in d.items()} for k, d in per.items()},
    }


def step(args: argparse.Namespace, only: list[str], incremental: bool) -> dict[str, Any]:
    if not args.each:
        return measure(args, only, incremental)
    common = ["--db", args.db, "--jobs", str(args.jobs), "--days", str(args.days)]
    common += ["--slice-days", str(args.slice_days), "--duckdb-memory", args.duckdb_memory]
    common += ["--threads", str(args.threads), "--step", "incremental" if incremental else "full"]
    common += ["--skip-marts", args.skip_marts]
    each = {name: in_child("benchmarks.pipelines", *common, "--child", name) for name in only}
    return {
        "each": each,
        "sum_wall_s": round(sum(r.get("wall_s", 0) for r in each.values()), 1),
        "sum_cpu_s": round(sum(r.get("cpu_s", 0) for r in each.values()), 1),
    }


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.child:
        return measure(args, [args.child], args.step == "incremental")
    only = [n for n in args.only.split(",") if n] or runner.pipeline_names()
    out: dict[str, Any] = {"pipelines": only}
    if args.step in ("generate", "all"):
        out["generate"] = build(args)
    if args.step in ("full", "all"):
        out["full"] = step(args, only, incremental=False)
    if args.step in ("incremental", "all"):
        out["incremental"] = step(args, only, incremental=True)
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--db", default="/tmp/slurmscope-bench.duckdb")
    ap.add_argument("--jobs", type=int, default=10_000_000, help="attempts in the generated history")
    ap.add_argument("--days", type=int, default=365, help="days of generated history")
    ap.add_argument("--gpus", type=int, default=64, help="GPUs with NVML minutes (a multiple of 8; 0: none)")
    ap.add_argument("--sample-days", type=int, default=7, help="days of NVML minutes, up to the end")
    ap.add_argument("--step", choices=["all", "generate", "full", "incremental"], default="all")
    ap.add_argument("--only", default="", help="comma-separated pipelines (default: every registered one)")
    ap.add_argument("--each", action="store_true", help="each pipeline in its own process")
    ap.add_argument("--slice-days", type=int, default=30, help="pipelines.full_slice_days")
    ap.add_argument("--threads", type=int, default=0, help="DuckDB threads (0: DuckDB's default)")
    ap.add_argument("--duckdb-memory", default="1GB", help="DuckDB memory_limit ('': 80%% of RAM)")
    ap.add_argument("--skip-marts", default="", help="comma-separated marts left out (a reference run)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    run("pipelines", ap, body)


if __name__ == "__main__":
    main()
