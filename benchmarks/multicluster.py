"""N clusters × M attempts in one database: full rebuild of every mart per cluster, an incremental day of
every cluster, and the Parquet export of a month of every cluster.

    .venv/bin/python -m benchmarks.multicluster --db /tmp/mc.duckdb --lake /tmp/mc-lake --clusters 10 \\
        --jobs 1000000 --step generate
    .venv/bin/python -m benchmarks.multicluster --db /tmp/mc.duckdb --lake /tmp/mc-lake --clusters 10 \\
        --jobs 1000000 --step full          # then --step incremental, --step export, --step restore

The history of each cluster is benchmarks/history.py's (one year; `--jobs` attempts, 1,024 eight-GPU nodes
snapshotted every 6 h, node events, sdiag every 5 minutes, `--gpus` GPUs of NVML minutes over the last
`--sample-days`), generated cluster after cluster into the same tables (`c00`, `c01`, ...; each with its
own hash salt, so their attempts differ), so only one cluster's rows are built in memory at a time.

- `full`: `run_pipelines(full=True)` for each cluster in turn, in this process, as `slurmscope pipelines run
  --cluster all --full` and serve's nightly rebuild do; per-cluster wall and CPU seconds, peak RSS of the
  whole run. `--each` runs each cluster in its own process instead (each its own peak RSS).
- `incremental`: one more day of attempts (and a late record) for every cluster, then the incremental run
  of every cluster a day later; needs `full` at the same `--days`.
- `restore`: the lake as the scale-out store. A fresh worker database per cluster named by `--restore`
  (default `c00`) filled from `--lake` by `slurmscope restore` (after `--step export`, whose initial export
  wrote the whole history), then that cluster's full rebuild there, as a worker machine would run it, as of
  the collecting database's last pipeline run of it; mart row counts compared with that database's.
- `export`: `slurmscope export` of every cluster. The first run into an empty `--lake` writes the whole
  history (timed apart as `initial`). The measured run is the scheduled one, `--since` the last full month
  of the history: it exports that month and the open one of every table and cluster, and leaves the months
  before untouched (the manifest lists them). So that it writes every one of those partitions, as after a
  day of new data everywhere, their manifest entries and files are removed first.

`full` and `incremental` first put the database back to the generated history (later job ids and pipeline
runs deleted), so they can be repeated. Config as benchmarks/pipelines.py: billing zone Europe/Berlin, a
6-hour snapshot gap, `--slice-days`, DuckDB `memory_limit` from `--duckdb-memory`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
from slurmscope.pipelines import runner

from benchmarks.harness import in_child, parser, peak_rss_mib, run, timer
from benchmarks.history import START, generate, gpu_data, next_day
from slurmscope.config import Config, load_config
from slurmscope.db import connect
from slurmscope.lake import MANIFEST


def names(n: int) -> list[str]:
    return [f"c{i:02d}" for i in range(n)]


def _connect(args: argparse.Namespace) -> duckdb.DuckDBPyConnection:
    con = connect(args.db)
    if args.threads:
        con.execute(f"SET threads = {int(args.threads)}")
    if args.duckdb_memory:
        con.execute("SET memory_limit = ?", [args.duckdb_memory])
    return con


def config(args: argparse.Namespace) -> Config:
    """Every cluster listed, with the settings of benchmarks/pipelines.py."""
    text = "".join(f'[[clusters]]\nname = "{name}"\n' for name in names(args.clusters))
    path = Path(args.db).with_suffix(".toml")
    path.write_text(
        '[billing]\ntimezone = "Europe/Berlin"\n'
        f"[pipelines]\nnode_snapshot_max_gap_seconds = 21600\nfull_slice_days = {args.slice_days}\n{text}"
    )
    return load_config(path, env={})


def build(args: argparse.Namespace) -> dict[str, Any]:
    """A fresh database with every cluster's generated history, appended one cluster at a time."""
    Path(args.db).unlink(missing_ok=True)
    Path(args.db + ".wal").unlink(missing_ok=True)
    con = _connect(args)
    now = START + timedelta(days=args.days)
    per: dict[str, float] = {}
    try:
        with timer() as t:
            for i, name in enumerate(names(args.clusters)):
                with timer() as one:
                    generate(con, args.jobs, args.days, now, cluster=name, salt=i * 1_000_003)
                    if args.gpus:
                        gpu_data(con, args.gpus, args.sample_days, now, cluster=name)
                    con.execute("CHECKPOINT")
                per[name] = one["wall_s"]
        rows = {
            table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608 - fixed names
            for table in ("jobs", "node_states", "node_events", "sched_stats", "gpu_samples")
        }
    finally:
        con.close()
    return {
        "generate": t,
        "per_cluster_wall_s": per,
        "rows": rows,
        "db_mib": round(Path(args.db).stat().st_size / 2**20),
    }


def _reset(con: duckdb.DuckDBPyConnection, args: argparse.Namespace) -> None:
    now = START + timedelta(days=args.days)
    con.execute("DELETE FROM jobs WHERE job_id_raw >= ?", [args.jobs])
    con.execute("DELETE FROM pipeline_runs WHERE run_at > ?", [now])


def pipelines(args: argparse.Namespace, clusters: list[str], incremental: bool) -> dict[str, Any]:
    """Every pipeline of each cluster in `clusters`, one cluster after the other, in this process."""
    cfg = config(args)
    now = START + timedelta(days=args.days)
    per: dict[str, Any] = {}
    con = _connect(args)
    try:
        _reset(con, args)
        if incremental:
            for name in clusters:
                done = con.execute(
                    "SELECT count(*) FROM pipeline_runs WHERE cluster = ? AND run_at = ? AND status = 'ok'",
                    [name, now],
                ).fetchone()[0]
                if done < len(runner.PIPELINES):
                    raise SystemExit(f"no full rebuild of {name} at {now}: run --step full first")
            with timer() as added:
                for i, name in enumerate(names(args.clusters)):
                    if name in clusters:
                        next_day(con, args.jobs, args.days, now, cluster=name, salt=i * 1_000_003)
            per["add_day"] = added
            now += timedelta(days=1)
        with timer() as t:
            for name in clusters:
                with timer() as one:
                    rows = runner.run_pipelines(con, cfg.for_cluster(name), full=not incremental, now=now)
                failed = [k for k, v in rows.items() if v < 0]
                per[name] = {**one, "rows": sum(v for v in rows.values() if v > 0), "failed": failed}
    finally:
        con.close()
    return {**t, "peak_rss_mib": peak_rss_mib(), "clusters": per}


def step(args: argparse.Namespace, incremental: bool) -> dict[str, Any]:
    every = names(args.clusters)
    if not args.each:
        return pipelines(args, every, incremental)
    common = ["--db", args.db, "--clusters", str(args.clusters), "--jobs", str(args.jobs)]
    common += ["--days", str(args.days), "--slice-days", str(args.slice_days)]
    common += ["--duckdb-memory", args.duckdb_memory, "--threads", str(args.threads)]
    common += ["--step", "incremental" if incremental else "full"]
    each = {name: in_child("benchmarks.multicluster", *common, "--child", name) for name in every}
    return {
        "each": each,
        "sum_wall_s": round(sum(r.get("wall_s", 0) for r in each.values()), 1),
        "sum_cpu_s": round(sum(r.get("cpu_s", 0) for r in each.values()), 1),
        "max_peak_rss_mib": max(r.get("peak_rss_mib", 0) for r in each.values()),
    }


def _forget(lake: str, since: str) -> int:
    """Drop the manifest entries and files of the months from `since` on, as if a day of new data had
    changed every one of them: the next export writes each of those partitions anew."""
    path = Path(lake) / MANIFEST
    manifest = json.loads(path.read_text())
    keep = [p for p in manifest["partitions"] if p["month"] < since]
    for p in manifest["partitions"]:
        if p["month"] >= since:
            (Path(lake) / p["path"]).unlink(missing_ok=True)
    dropped = len(manifest["partitions"]) - len(keep)
    manifest["partitions"] = keep
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return dropped


def export_step(args: argparse.Namespace) -> dict[str, Any]:
    """The scheduled export (the last full month and the open one) of every cluster, after an initial one."""
    from slurmscope.lake import export

    end = START + timedelta(days=args.days)
    now = end + timedelta(days=1)  # after the incremental day, when it ran
    last_full = (end.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    out: dict[str, Any] = {"since": last_full}
    con = connect(args.db, read_only=True)
    if args.threads:
        con.execute(f"SET threads = {int(args.threads)}")
    try:
        if args.fresh_lake:
            shutil.rmtree(args.lake, ignore_errors=True)
        if not (Path(args.lake) / MANIFEST).exists():
            with timer() as first:
                done = export(con, args.lake, now=now, since=last_full)
            out["initial"] = {**first, "partitions": len(done), "rows": sum(w.rows for w in done)}
        out["forgotten"] = _forget(args.lake, last_full)
        with timer() as t:
            done = export(con, args.lake, now=now, since=last_full)
    finally:
        con.close()
    out["month"] = {
        **t,
        "partitions": len(done),
        "written": sum(w.status == "written" for w in done),
        "rows": sum(w.rows for w in done),
        "months": sorted({w.partition.month for w in done}),
        "clusters": len({w.partition.cluster for w in done}),
    }
    out["lake_mib"] = round(sum(p.stat().st_size for p in Path(args.lake).rglob("*") if p.is_file()) / 2**20)
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def restore_step(args: argparse.Namespace) -> dict[str, Any]:
    """A worker database of one cluster from the lake, then that cluster's full rebuild in it."""
    from slurmscope.lake import MART_TABLES, restore

    name = args.restore
    count = "SELECT count(*) FROM {} WHERE cluster = ?"
    db = Path(args.db).with_name(f"{Path(args.db).stem}-worker-{name}.duckdb")
    db.unlink(missing_ok=True)
    Path(str(db) + ".wal").unlink(missing_ok=True)
    source, con = connect(args.db, read_only=True), connect(db)
    try:
        # as of the collecting database's last run of that cluster, so that the marts compare
        now = source.execute("SELECT max(run_at) FROM pipeline_runs WHERE cluster = ?", [name]).fetchone()[0]
        now = now or START + timedelta(days=args.days)
        if args.threads:
            con.execute(f"SET threads = {int(args.threads)}")
        if args.duckdb_memory:
            con.execute("SET memory_limit = ?", [args.duckdb_memory])
        with timer() as loaded:
            done = restore(con, args.lake, clusters=[name])
            con.execute("CHECKPOINT")
        out: dict[str, Any] = {
            "cluster": name,
            "restore": {**loaded, "partitions": len(done), "rows": sum(r.rows for r in done)},
            "worker_db_mib": round(db.stat().st_size / 2**20),
        }
        with timer() as rebuilt:
            rows = runner.run_pipelines(con, config(args).for_cluster(name), full=True, now=now)
        out["full"] = {**rebuilt, "failed": [k for k, v in rows.items() if v < 0]}
        worker = {m: con.execute(count.format(m), [name]).fetchone()[0] for m in MART_TABLES}
        theirs = {m: source.execute(count.format(m), [name]).fetchone()[0] for m in MART_TABLES}
    finally:
        con.close()
        source.close()
    out["mart_rows"] = sum(worker.values())
    out["mart_rows_differ"] = {m: [theirs[m], worker[m]] for m in MART_TABLES if theirs[m] != worker[m]}
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.child:
        return pipelines(args, [args.child], args.step == "incremental")
    out: dict[str, Any] = {"clusters": args.clusters, "jobs_per_cluster": args.jobs}
    if args.step in ("generate", "all"):
        out["generate"] = build(args)
    if args.step in ("full", "all"):
        out["full"] = step(args, incremental=False)
    if args.step in ("incremental", "all"):
        out["incremental"] = step(args, incremental=True)
    if args.step in ("export", "all"):
        out["export"] = export_step(args)
    if args.step in ("restore", "all"):
        out["restore"] = restore_step(args)
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--db", default="/tmp/slurmscope-multicluster.duckdb")
    ap.add_argument(
        "--lake", default="/tmp/slurmscope-multicluster-lake", help="lake directory of the export step"
    )
    ap.add_argument(
        "--fresh-lake", action="store_true", help="empty --lake first (the initial export runs again)"
    )
    ap.add_argument("--clusters", type=int, default=10, help="clusters in the database")
    ap.add_argument("--jobs", type=int, default=10_000_000, help="attempts per cluster")
    ap.add_argument("--days", type=int, default=365, help="days of generated history")
    ap.add_argument("--gpus", type=int, default=64, help="GPUs with NVML minutes per cluster (0: none)")
    ap.add_argument("--sample-days", type=int, default=7, help="days of NVML minutes, up to the end")
    ap.add_argument(
        "--step", choices=["all", "generate", "full", "incremental", "export", "restore"], default="all"
    )
    ap.add_argument("--restore", default="c00", help="cluster the restore step fills a worker database with")
    ap.add_argument("--each", action="store_true", help="each cluster's pipelines in its own process")
    ap.add_argument("--slice-days", type=int, default=30, help="pipelines.full_slice_days")
    ap.add_argument("--threads", type=int, default=0, help="DuckDB threads (0: DuckDB's default)")
    ap.add_argument("--duckdb-memory", default="1GB", help="DuckDB memory_limit ('': 80%% of RAM)")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    run("multicluster", ap, body)


if __name__ == "__main__":
    main()
