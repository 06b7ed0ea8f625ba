"""A GPU fleet's NVML history at scale: storage with and without retention, one minute of central ingest, the
GPU pipelines' incremental day, and what retention itself costs.

    .venv/bin/python -m benchmarks.fleet --gpus 1000 --days 7 --workdir /tmp/fleet --step all
    .venv/bin/python -m benchmarks.fleet --gpus 10000 --days 30 --workdir /data/fleet --step all   # full scale

History (`generate`, SQL straight into the raw tables, one day at a time in minute order as the collector
writes it): `--gpus` GPUs on 8-GPU nodes, a minute row per GPU for `--days` days (10,000 x 30 = 432 M);
each node runs back-to-back 8-GPU jobs of 2-24 h with idle gaps (`jobs`, `gpu_jobs`), busy at 85-100 % or,
like ~30 % of jobs, nearly idle; sinfo snapshots every `--sinfo-seconds`; hourly GPU inventory; and the
per-file run log the collector writes for each agent's minute (`collector_runs`, `spool_files`).

Steps (`all` runs them in this order, each measured on its own):

- `ingest` (a): `--agents` agents (8 GPUs each) close one minute's spool file (the minute after the
  history), written with the agent's own spool writer (slurmscope.spool.write_spool_file, as
  simulator/writers/nvml_spool.py does); `collect nvml` (collectors.collect.collect_with over
  `nvml.spool_paths`: read, one transaction per file, acknowledge) loads them into the history, in a child
  process (its CPU seconds and peak RSS). Reference in the same run (`--keyed`): the same files into a copy
  whose gpu_samples keeps the primary-key index of migrations 0001-0020, loaded with INSERT ... ON CONFLICT
  DO UPDATE (the loader before 0021).
- `pipelines` (b): the pipelines that read NVML minutes (cost, efficiency, drift, health), incremental, as
  serve runs them once a day: the last good run of each is set to one day before the end, a midnight, so
  the window starts `pipelines.incremental_margin_seconds` before it, i.e. at the midnight before for the
  pipelines of days: two days (health, whose marts are of instants, starts there: a day and the margin),
  and each pipeline's own look-back, in a child process (peak RSS). `--last-run-minutes M` sets the last
  run M minutes after that midnight instead: with M at least the margin, every window is the last day.
  Every spool file's run carries the minute it holds as its window, as the collector records it, so no file
  counts as late. Run once on the minutes, once more after `retention`.
- `retention`: `slurmscope.retention.run_retention` keeping `--keep-days` of minutes (a benchmark override:
  the config's minimum is 7 days), every older hour rolled up in its own transaction, then checkpointed, in a
  child process (its CPU seconds and peak RSS).
- `storage` (c): the database file, DuckDB's used bytes, and each big table copied alone into a freshly
  migrated file (bytes per row, its key index included), before and after retention; `--keyed` adds the same for a gpu_samples with its
  primary-key index. The full-scale estimate multiplies these per-row figures (docs/benchmarks.md).
- `steady`: one more day of minutes, then retention again (rolling up one more day): the file size before,
  with the new day, and after, i.e. whether the blocks retention freed are reused.
"""

from __future__ import annotations

import argparse
import re
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness import in_child, parser, run, timer

START = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTER = "fleet"
GPU_PIPELINES = ["cost", "efficiency", "drift", "health"]

# Node n runs blocks of block_minutes(n); block k is a job unless hash says idle. Utilisation per minute
# follows the block: busy 85-100 % (+-1.5 noise), a nearly idle job 0-2 %, no job 0 %.
BLOCKS = """
CREATE OR REPLACE TEMP MACRO block_minutes(n) AS 120 + CAST(hash(n, 'len') % 1320 AS BIGINT);
CREATE OR REPLACE TEMP MACRO is_job(n, k) AS hash(n, k, 'job') % 10 < 8;
CREATE OR REPLACE TEMP MACRO job_level(n, k) AS CASE WHEN hash(n, k, 'idle') % 10 < 3 THEN (hash(n, k) % 200) / 100.0
    ELSE 85 + (hash(n, k) % 1500) / 100.0 END;
CREATE OR REPLACE TEMP MACRO node_name(n) AS 'gpu' || lpad(CAST(n AS VARCHAR), 5, '0');
CREATE OR REPLACE TEMP MACRO gpu_uuid(g) AS 'GPU-' || lpad(CAST(g AS VARCHAR), 8, '0') || '-0000-0000-0000-' || lpad(CAST(g AS VARCHAR), 12, '0');
"""

SAMPLES = """
INSERT INTO gpu_samples BY NAME
SELECT $cluster AS cluster, node_name(n) AS node, gpu_uuid(g) AS gpu_uuid, $t0::TIMESTAMPTZ + to_minutes(m) AS minute,
  CAST(g % 8 AS INTEGER) AS gpu_index, CAST(g % 8 AS INTEGER) AS gpu_minor,
  '00000000:' || printf('%02X', 24 + 16 * (g % 8)) || ':00.0' AS pci_bus_id, 'NVIDIA H100 80GB HBM3' AS model,
  6 AS samples, round(u, 2) AS util_gpu_mean, round(least(100, u * 1.05), 2) AS util_gpu_max,
  round(u * 0.45, 2) AS util_mem_mean, CAST(85899345920 * (0.05 + 0.008 * u) AS BIGINT) AS mem_used_max_bytes,
  85899345920 AS mem_total_bytes, round(70 + 5.67 * u, 1) AS power_mean_watts,
  round((70 + 5.67 * u) * 1.08, 1) AS power_max_watts, round((70 + 5.67 * u) * 60, 1) AS energy_joules,
  round(31 + 0.35 * u + (hash(g, m, 't') % 80) / 100.0, 1) AS temp_gpu_max_celsius,
  round(37 + 0.35 * u, 1) AS temp_mem_max_celsius, round(345 + 16.35 * least(100, u * 4)) AS sm_clock_mean_mhz,
  2619.0 AS mem_clock_mean_mhz, 0.0 AS throttle_seconds, CASE WHEN u > 5 THEN 0 ELSE 1 END AS throttle_reasons,
  0 AS pcie_replay_delta, CAST(hash(g, m, 'ecc') % 200000 = 0 AS INTEGER) AS ecc_corrected_delta,
  0 AS ecc_uncorrected_delta, 0 AS ecc_corrected_total, 0 AS ecc_uncorrected_total, false AS remapped_pending,
  false AS remapped_failed, 0 AS retired_pages, 0 AS nvlink_errors_delta, 0 AS null_fields,
  CASE WHEN u > 95 THEN 30.0 ELSE 0.0 END AS sw_power_cap_seconds, 0.0 AS hw_slowdown_seconds,
  0.0 AS sw_thermal_seconds, 0.0 AS hw_thermal_seconds, 0.0 AS hw_power_brake_seconds
FROM range($m0, $m1) b(m), range($gpus) a(g),
  LATERAL (SELECT g // 8 AS n),
  LATERAL (SELECT m // block_minutes(n) AS k),
  LATERAL (SELECT CASE WHEN is_job(n, k) THEN greatest(0, least(100, job_level(n, k)
      + CASE WHEN job_level(n, k) > 5 THEN (CAST(hash(g, m) % 300 AS BIGINT) - 150) / 100.0 ELSE 0 END)) ELSE 0 END AS u)
"""

JOBS = """
CREATE TEMP TABLE fleet_jobs AS
SELECT n, k, node_name(n) AS node, CAST(n AS BIGINT) * 100000 + k AS job_id_raw,
       $t0::TIMESTAMPTZ + to_minutes(k * block_minutes(n)) AS start_time,
       least($t0::TIMESTAMPTZ + to_minutes((k + 1) * block_minutes(n)), $t1::TIMESTAMPTZ) AS stop
FROM range($nodes) a(n), LATERAL (SELECT unnest(range(CAST($minutes // block_minutes(n) + 1 AS BIGINT))) AS k)
WHERE is_job(n, k) AND k * block_minutes(n) < $minutes;
INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, attempt, account, "user", "partition", qos, state,
                  eligible_time, start_time, end_time, elapsed_seconds, timelimit_seconds, nodes, cpus, gpus,
                  gpu_type, node_list, sched_by, ingested_at)
SELECT $cluster, CAST(job_id_raw AS VARCHAR), job_id_raw, start_time - INTERVAL 10 MINUTE, 1,
       'acct' || (hash(n, k) % 40), 'user' || (hash(n, k) % 400), 'gpu', 'normal',
       CASE WHEN stop >= $t1::TIMESTAMPTZ THEN 'RUNNING' ELSE 'COMPLETED' END, start_time - INTERVAL 10 MINUTE,
       start_time, CASE WHEN stop >= $t1::TIMESTAMPTZ THEN NULL ELSE stop END,
       CASE WHEN stop >= $t1::TIMESTAMPTZ THEN NULL ELSE CAST(epoch(stop) - epoch(start_time) AS BIGINT) END,
       86400, 1, 64, 8, 'h100', node, 'main', start_time
FROM fleet_jobs;
INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, gpu_index, mig_instance, source)
SELECT $cluster, node, gpu_uuid(n * 8 + i), CAST(job_id_raw AS VARCHAR), start_time,
       CASE WHEN stop >= $t1::TIMESTAMPTZ THEN NULL ELSE stop END, CAST(i AS INTEGER), '', 'prolog'
FROM fleet_jobs, range(8) g(i);
"""

SNAPSHOTS = """
INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags, gpus_total, gpus_used, gpu_type)
SELECT $cluster, $t0::TIMESTAMPTZ + to_seconds(s * $every), node_name(n), 'gpu',
       CASE WHEN is_job(n, k) THEN 'ALLOCATED' ELSE 'IDLE' END, '', 8,
       CASE WHEN is_job(n, k) THEN 8 ELSE 0 END, 'h100'
FROM range($s0, $s1) b(s), range($nodes) a(n), LATERAL (SELECT s * $every // 60 // block_minutes(n) AS k);
INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, gpu_index, gpu_minor, pci_bus_id, model, serial,
                           driver_version, cuda_version, mig_mode)
SELECT $cluster, node_name(g // 8), gpu_uuid(g), $t0::TIMESTAMPTZ + to_hours(h), CAST(g % 8 AS INTEGER),
       CAST(g % 8 AS INTEGER), '00000000:' || printf('%02X', 24 + 16 * (g % 8)) || ':00.0', 'NVIDIA H100 80GB HBM3',
       CAST(1650000000000 + g AS VARCHAR), '550.54.15', '12.4', false
FROM range($h0, $h1) b(h), range($gpus) a(g);
INSERT INTO collector_runs (cluster, collector, started_at, finished_at, window_start, window_end, rows,
                            quarantined, status, duration_seconds, source)
SELECT $cluster, 'nvml', t, t + INTERVAL 20 MILLISECOND, t - INTERVAL 80 SECOND, t - INTERVAL 80 SECOND, 8, 0,
       'ok', 0.02, 'nvml:' || node_name(n) || '_' || strftime(t, '%Y%m%dT%H%M%SZ') || '.jsonl'
FROM range($m0, $m1) b(m), range($nodes) a(n), LATERAL (SELECT $t0::TIMESTAMPTZ + to_minutes(m) + INTERVAL 80 SECOND AS t);
INSERT INTO spool_files (cluster, node, file_name, sha256, rows, loaded_at)
SELECT $cluster, node_name(n), node_name(n) || '_' || strftime($t0::TIMESTAMPTZ + to_minutes(m), '%Y%m%dT%H%M%SZ') || '.jsonl',
       sha256(node_name(n) || m), 8, $t0::TIMESTAMPTZ + to_minutes(m) + INTERVAL 80 SECOND
FROM range($m0, $m1) b(m), range($nodes) a(n);
"""

BIG_TABLES = (
    "gpu_samples",
    "gpu_samples_hourly",
    "jobs",
    "gpu_jobs",
    "node_states",
    "gpu_inventory",
    "collector_runs",
    "spool_files",
)


def peak_rss_mib() -> float:
    """This process image's peak resident set (VmHWM). Not getrusage's ru_maxrss: across fork and exec
    Linux keeps the parent's peak there, so a child of a parent that copied gigabytes would report those."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _execute(con, script: str, params: dict[str, Any]) -> None:
    """Each statement of `script` with the parameters it names (DuckDB binds them in the last one only)."""
    for sql in (s.strip() for s in script.split(";")):
        if sql:
            con.execute(sql, {k: v for k, v in params.items() if re.search(rf"\${k}\b", sql)})


def _db(args: argparse.Namespace) -> Path:
    return Path(args.workdir) / "fleet.duckdb"


def _end(args: argparse.Namespace) -> datetime:
    return START + timedelta(days=args.days)


def _cfg(args: argparse.Namespace, **overrides: Any):
    from slurmscope.config import load_config

    return load_config(None, env={}).with_overrides(cluster={"name": CLUSTER}, **overrides)


def _connect(path: Path):
    from slurmscope.db import connect

    con = connect(path)
    if ARGS.duckdb_memory:
        con.execute("SET memory_limit = ?", [ARGS.duckdb_memory])
    return con


def generate(args: argparse.Namespace) -> dict[str, Any]:
    """The history, day by day; returns rows per table and the seconds it took."""
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    db = _db(args)
    db.unlink(missing_ok=True)
    Path(str(db) + ".wal").unlink(missing_ok=True)
    con = _connect(db)
    nodes = args.gpus // 8
    end = _end(args)
    try:
        con.execute(BLOCKS)
        with timer() as t:
            p = {"cluster": CLUSTER, "t0": START, "t1": end, "nodes": nodes, "minutes": args.days * 1440}
            _execute(con, JOBS, p)
            for d in range(args.days):
                m0, m1 = d * 1440, (d + 1) * 1440
                _execute(
                    con, SAMPLES, {"cluster": CLUSTER, "t0": START, "gpus": args.gpus, "m0": m0, "m1": m1}
                )
                every = args.sinfo_seconds
                _execute(
                    con,
                    SNAPSHOTS,
                    {
                        "cluster": CLUSTER,
                        "t0": START,
                        "every": every,
                        "s0": d * 86400 // every,
                        "s1": (d + 1) * 86400 // every,
                        "nodes": nodes,
                        "gpus": args.gpus,
                        "h0": d * 24,
                        "h1": (d + 1) * 24,
                        "m0": m0,
                        "m1": m1,
                    },
                )
            con.execute("CHECKPOINT")
        rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in BIG_TABLES}
    finally:
        con.close()
    return {"seconds": t, "rows": rows, "file_mib": round(db.stat().st_size / 2**20, 1)}


# ---- (a) one minute of central ingest ----------------------------------------------------------------------


def write_spool(args: argparse.Namespace, minute: datetime) -> Path:
    """One closed spool file per agent for `minute`: 8 sample records each, in the agent's format."""
    from slurmscope.spool import write_spool_file

    spool = Path(args.workdir) / "spool"
    shutil.rmtree(spool, ignore_errors=True)
    iso = minute.strftime("%Y-%m-%dT%H:%M:%SZ")
    for n in range(args.agents):
        node = f"gpu{n:05d}"
        records = []
        for i in range(8):
            g = n * 8 + i
            u = 85.0 + (g * 7919 % 1500) / 100.0
            records.append(
                {
                    "type": "sample",
                    "gpu_uuid": f"GPU-{g:08d}-0000-0000-0000-{g:012d}",
                    "minute": iso,
                    "gpu_index": i,
                    "gpu_minor": i,
                    "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                    "model": "NVIDIA H100 80GB HBM3",
                    "samples": 6,
                    "util_gpu_mean": u,
                    "util_gpu_max": min(100.0, u * 1.05),
                    "util_mem_mean": round(u * 0.45, 2),
                    "mem_used_max_bytes": int(85899345920 * (0.05 + 0.008 * u)),
                    "mem_total_bytes": 85899345920,
                    "power_mean_watts": round(70 + 5.67 * u, 1),
                    "power_max_watts": round((70 + 5.67 * u) * 1.08, 1),
                    "energy_joules": round((70 + 5.67 * u) * 60, 1),
                    "temp_gpu_max_celsius": 66.0,
                    "temp_mem_max_celsius": 72.0,
                    "sm_clock_mean_mhz": 1980.0,
                    "mem_clock_mean_mhz": 2619.0,
                    "throttle_seconds": 0.0,
                    "throttle_reasons": 0,
                    "sw_power_cap_seconds": 0.0,
                    "hw_slowdown_seconds": 0.0,
                    "sw_thermal_seconds": 0.0,
                    "hw_thermal_seconds": 0.0,
                    "hw_power_brake_seconds": 0.0,
                    "pcie_replay_delta": 0,
                    "ecc_corrected_delta": 0,
                    "ecc_uncorrected_delta": 0,
                    "ecc_corrected_total": 0,
                    "ecc_uncorrected_total": 0,
                    "remapped_pending": False,
                    "remapped_failed": False,
                    "retired_pages": 0,
                    "nvlink_errors_delta": 0,
                    "null_fields": 0,
                }
            )
        write_spool_file(spool / node, node, records, opened_at=minute.timestamp(), cluster=CLUSTER)
    return spool


def _keyed_loader() -> None:
    """The sample merge as it was before migration 0021: INSERT ... ON CONFLICT DO UPDATE on the key index."""
    from slurmscope.collectors import nvml

    sets = [s.replace("g.", "") for s in nvml._sample_merge_sets()]  # stored row: bare names, as then
    cols = ", ".join(nvml._SAMPLE_COLS)
    sql = (
        f"INSERT INTO gpu_samples ({cols}) SELECT {cols} FROM _nvml_samples "
        "ON CONFLICT (cluster, node, gpu_uuid, minute) DO UPDATE SET " + ", ".join(sets)
    )

    def merge(con, cluster, node, df):
        con.register("_nvml_samples", df.to_arrow())
        try:
            con.execute(sql)
        finally:
            con.unregister("_nvml_samples")

    nvml._merge_samples = merge


def ingest_child(args: argparse.Namespace) -> dict[str, Any]:
    """Load the spool directory's files with `collect nvml` (shared-path mode) into `--child-db`."""
    from slurmscope.collectors.collect import collect_with

    if args.keyed_loader:
        _keyed_loader()
    spool = Path(args.workdir) / "spool"
    for ack in spool.glob("*/*.ack"):
        ack.unlink()
    dirs = sorted(str(p) for p in spool.iterdir())
    cfg = _cfg(args, nvml={"spool_paths": dirs})
    con = _connect(Path(args.child_db))
    before = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
    try:
        with timer() as t:
            outcomes = collect_with(lambda fn: fn(con), cfg, "nvml")
        after = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
    finally:
        con.close()
    return {
        **t,
        "files": len(dirs),
        "rows_added": after - before,
        "status": [o.status for o in outcomes],
        "ms_cpu_per_file": round(1000 * t["cpu_s"] / max(1, len(dirs)), 2),
        "peak_rss_mib": peak_rss_mib(),
    }


def ingest(args: argparse.Namespace) -> dict[str, Any]:
    minute = _end(args)
    with timer() as w:
        write_spool(args, minute)
    out: dict[str, Any] = {"agents": args.agents, "gpus": args.agents * 8, "write_spool_files": w}
    common = ["--gpus", str(args.gpus), "--days", str(args.days), "--workdir", args.workdir]
    common += ["--agents", str(args.agents), "--duckdb-memory", args.duckdb_memory, "--child", "ingest"]
    if args.keyed:  # first, from the history as generated
        keyed = Path(args.workdir) / "keyed.duckdb"
        _keyed_copy(_db(args), keyed, minute)
        out["keyed_reference"] = in_child(
            "benchmarks.fleet", *common, "--child-db", str(keyed), "--keyed-loader"
        )
        keyed.unlink()
    # into the history itself: the minute loaded is the pipelines' `now`, outside their window
    out["unkeyed"] = in_child("benchmarks.fleet", *common, "--child-db", str(_db(args)))
    return out


def _keyed_copy(src: Path, dst: Path, minute: datetime) -> None:
    """`src` with gpu_samples rebuilt under the primary key it had before migration 0021 (without the
    minute just ingested, so that the reference loads the same files into the same history)."""
    from slurmscope.db import connect

    shutil.copy(src, dst)
    con = connect(dst)
    try:
        cols = con.execute(
            "SELECT string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position)"
            " FROM information_schema.columns WHERE table_name = 'gpu_samples'"
        ).fetchone()[0]
        con.execute("ALTER TABLE gpu_samples RENAME TO gpu_samples_plain")
        con.execute(f"CREATE TABLE gpu_samples ({cols}, PRIMARY KEY (cluster, node, gpu_uuid, minute))")
        con.execute("INSERT INTO gpu_samples SELECT * FROM gpu_samples_plain WHERE minute < ?", [minute])
        con.execute("DROP TABLE gpu_samples_plain")
        con.execute("CHECKPOINT")
    finally:
        con.close()


# ---- (b) the GPU pipelines' incremental day ----------------------------------------------------------------


def pipelines_child(args: argparse.Namespace) -> dict[str, Any]:
    from slurmscope.pipelines import runner

    end = _end(args)
    last = end - timedelta(days=1) + timedelta(minutes=args.last_run_minutes)
    con = _connect(_db(args))
    try:
        con.execute("DELETE FROM pipeline_runs WHERE cluster = ?", [CLUSTER])
        for name in GPU_PIPELINES:
            con.execute(
                "INSERT INTO pipeline_runs (cluster, pipeline, run_at, window_start, window_end, rows, status)"
                " VALUES (?, ?, ?, ?, ?, 0, 'ok')",
                [CLUSTER, name, last, START, last],
            )
        reads: dict[str, int] = {}
        read = runner._read

        def counted(c, sql, values):
            lf = read(c, sql, values)
            if "gpu_minutes" in sql or "gpu_samples" in sql:
                reads[sql.strip()[:60]] = lf.select("*").collect().height
            return lf

        per: dict[str, float] = {}
        run_pipeline = runner.run_pipeline

        def timed(c, cfg, module, window):
            t0 = time.process_time()
            try:
                return run_pipeline(c, cfg, module, window)
            finally:
                per[module.NAME] = round(per.get(module.NAME, 0) + time.process_time() - t0, 1)

        runner.run_pipeline = timed
        if args.count_reads:
            runner._read = counted
        cfg = _cfg(args, pipelines={"node_snapshot_max_gap_seconds": max(3600, 2 * args.sinfo_seconds)})
        with timer() as t:
            rows = runner.run_pipelines(con, cfg, now=end, only=args.only.split(","))
    finally:
        con.close()
    return {
        **t,
        "peak_rss_mib": peak_rss_mib(),
        "cpu_s_by_pipeline": per,
        "rows": rows,
        "minute_rows_read": reads,
    }


def pipelines(args: argparse.Namespace) -> dict[str, Any]:
    common = ["--gpus", str(args.gpus), "--days", str(args.days), "--workdir", args.workdir]
    common += ["--sinfo-seconds", str(args.sinfo_seconds), "--duckdb-memory", args.duckdb_memory]
    common += ["--count-reads"] if args.count_reads else []
    common += ["--last-run-minutes", str(args.last_run_minutes)]
    if not args.each:
        return in_child("benchmarks.fleet", *common, "--only", args.only, "--child", "pipelines")
    each = {
        n: in_child("benchmarks.fleet", *common, "--only", n, "--child", "pipelines")
        for n in args.only.split(",")
    }
    return {
        "each": each,
        "sum_cpu_s": round(sum(r.get("cpu_s", 0) for r in each.values()), 1),
        "max_peak_rss_mib": max(r.get("peak_rss_mib", 0) for r in each.values()),
    }


# ---- retention and storage ----------------------------------------------------------------------------------


def retention_child(args: argparse.Namespace) -> dict[str, Any]:
    from slurmscope.retention import run_retention

    con = _connect(_db(args))
    off = {"gpu_minutes_days": 0, "sacct_lake_months": 0, "run_log_days": 0}
    try:
        with timer() as t:
            done = run_retention(
                con, _cfg(args, retention={**off, "gpu_minutes_days": args.keep_days}), _end(args)
            )
        peak = peak_rss_mib()
        with timer() as logs:
            logged = run_retention(
                con, _cfg(args, retention={**off, "run_log_days": args.keep_days}), _end(args)
            )
    finally:
        con.close()
    return {
        "gpu_samples": {
            **t,
            "hours_rolled_up": len(done),
            "minute_rows_removed": sum(d.rows_removed for d in done),
            "hourly_rows_written": sum(d.rows_written for d in done),
            "cpu_s_per_day": round(24 * t["cpu_s"] / max(1, len(done)), 1),
            "peak_rss_mib": peak,
        },
        "run_logs": {**logs, "rows_removed": {d.table: d.rows_removed for d in logged}},
    }


def retention(args: argparse.Namespace) -> dict[str, Any]:
    common = ["--gpus", str(args.gpus), "--days", str(args.days), "--workdir", args.workdir]
    common += ["--keep-days", str(args.keep_days), "--duckdb-memory", args.duckdb_memory]
    return in_child("benchmarks.fleet", *common, "--child", "retention")


def storage(args: argparse.Namespace, label: str) -> dict[str, Any]:
    """The file, DuckDB's used bytes, and bytes per row of each big table copied alone into a fresh file."""
    import duckdb

    db = _db(args)
    con = duckdb.connect(str(db), read_only=True)
    try:
        block, used, free = con.execute(
            "SELECT block_size, used_blocks, free_blocks FROM pragma_database_size()"
        ).fetchone()
    finally:
        con.close()
    out: dict[str, Any] = {
        "file_mib": round(db.stat().st_size / 2**20, 1),
        "used_mib": round(used * block / 2**20, 1),
        "free_mib": round(free * block / 2**20, 1),
        "tables": {},
    }
    from slurmscope.db import connect

    scratch = Path(args.workdir) / "table.duckdb"
    scratch.unlink(missing_ok=True)
    connect(scratch).close()
    empty = scratch.stat().st_size
    base = Path(args.workdir) / "empty.duckdb"
    shutil.move(scratch, base)
    for table in BIG_TABLES:  # into the migrated schema: the table's own key index counts
        shutil.copy(base, scratch)
        c = duckdb.connect(str(scratch))
        try:
            c.execute(f"ATTACH '{db}' AS src (READ_ONLY)")
            c.execute(f"INSERT INTO main.{table} SELECT * FROM src.{table}")
            n = c.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0]
            c.execute("DETACH src")
            c.execute("CHECKPOINT")
        finally:
            c.close()
        size = scratch.stat().st_size - empty
        out["tables"][table] = {
            "rows": n,
            "mib": round(size / 2**20, 1),
            "bytes_per_row": round(size / n, 1) if n else None,
        }
        scratch.unlink()
    base.unlink()
    if args.keyed and label == "before":
        keyed = Path(args.workdir) / "keyed.duckdb"
        _keyed_copy(db, keyed, _end(args) + timedelta(days=1))
        c = duckdb.connect(str(keyed), read_only=True)
        n = c.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
        c.close()
        out["keyed_database_mib"] = round(keyed.stat().st_size / 2**20, 1)
        out["keyed_extra_bytes_per_minute_row"] = round((keyed.stat().st_size - db.stat().st_size) / n, 1)
        keyed.unlink()
    return out


def steady(args: argparse.Namespace) -> dict[str, Any]:
    """One more day of minutes, then retention again: does the file grow by a day of minutes, or do the
    blocks the rolled-up day freed take them?"""
    from slurmscope.retention import run_retention

    db = _db(args)
    con = _connect(db)
    before = db.stat().st_size
    try:
        con.execute(BLOCKS)
        d = args.days
        _execute(
            con,
            SAMPLES,
            {"cluster": CLUSTER, "t0": START, "gpus": args.gpus, "m0": d * 1440, "m1": (d + 1) * 1440},
        )
        con.execute("CHECKPOINT")
        grown = db.stat().st_size
        cfg = _cfg(
            args, retention={"gpu_minutes_days": args.keep_days, "sacct_lake_months": 0, "run_log_days": 0}
        )
        done = run_retention(con, cfg, _end(args) + timedelta(days=1))
    finally:
        con.close()
    after = db.stat().st_size
    return {
        "file_mib_before": round(before / 2**20, 1),
        "file_mib_with_a_new_day": round(grown / 2**20, 1),
        "file_mib_after_retention": round(after / 2**20, 1),
        "hours_rolled_up": len(done),
    }


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.child == "ingest":
        return ingest_child(args)
    if args.child == "pipelines":
        return pipelines_child(args)
    if args.child == "retention":
        return retention_child(args)
    steps = args.step.split(",")
    every = "all" in steps
    out: dict[str, Any] = {}
    if every or "generate" in steps:
        out["generate"] = generate(args)
    if every or "storage" in steps:
        out["storage_before"] = storage(args, "before")
    if every or "ingest" in steps:
        out["ingest"] = ingest(args)
    if every or "pipelines" in steps:
        out["pipelines_minutes"] = pipelines(args)
    if every or "retention" in steps:
        out["retention"] = retention(args)
        out["storage_after"] = storage(args, "after")
    if every or "pipelines-after" in steps:
        out["pipelines_after_retention"] = pipelines(args)
    if every or "steady" in steps:
        out["steady"] = steady(args)
    return out


ARGS: argparse.Namespace


def main() -> None:
    global ARGS
    ap = parser(__doc__)
    ap.add_argument("--gpus", type=int, default=1000, help="GPUs (a multiple of 8)")
    ap.add_argument("--days", type=int, default=7, help="days of minute rows")
    ap.add_argument("--workdir", default="/tmp/slurmscope-fleet")
    ap.add_argument("--agents", type=int, default=1250, help="agents (8 GPUs each) in the ingest step")
    ap.add_argument("--keep-days", type=int, default=5, help="days of minutes retention keeps")
    ap.add_argument("--sinfo-seconds", type=int, default=60, help="sinfo snapshot interval")
    ap.add_argument("--keyed", action="store_true", help="also measure gpu_samples with its old primary key")
    ap.add_argument("--count-reads", action="store_true", help="count the minute rows each pipeline reads")
    ap.add_argument("--only", default=",".join(GPU_PIPELINES), help="pipelines of the pipelines step")
    ap.add_argument("--each", action="store_true", help="each pipeline in its own process")
    ap.add_argument(
        "--last-run-minutes",
        type=int,
        default=0,
        help="the pipelines' last run, in minutes after the midnight one day before the end",
    )
    ap.add_argument("--duckdb-memory", default="", help="DuckDB memory_limit ('': DuckDB's 80%% of RAM)")
    ap.add_argument(
        "--step",
        default="all",
        help="comma-separated: generate, storage, ingest, pipelines, retention (with storage after), "
        "pipelines-after, steady; or all",
    )
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--child-db", default="", help=argparse.SUPPRESS)
    ap.add_argument("--keyed-loader", action="store_true", help=argparse.SUPPRESS)
    ARGS = ap.parse_known_args()[0]
    run("fleet", ap, body)


if __name__ == "__main__":
    main()
