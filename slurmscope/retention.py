"""Retention: what the database keeps, so that a fleet's history stays a bounded file.

Four kinds of history grow without end, and each has its own rule (docs/configuration.md#retention):

- **NVML minute rows** (`gpu_samples`, 14.4 M a day at 10,000 GPUs): minutes older than
  `retention.gpu_minutes_days` are rolled up into `gpu_samples_hourly` by the rules of slurmscope.rollup and
  deleted, and so are the per-link NVLink rows of those hours (`gpu_nvlink_errors`; the minutes hold each
  GPU's sum over its links). `retention_state` keeps, per cluster, the boundary before which readers take
  the rollups (the `gpu_minutes` / `gpu_hours` macros), so a reader sees each minute once, raw or rolled up.
- **sacct history** (`jobs`, `job_steps`): with `retention.sacct_lake_months`, an attempt that ended
  before the first kept month leaves DuckDB once the Parquet lake (slurmscope/lake.py) holds it: the
  manifest lists its month, the file's checksum matches the manifest, and every row to delete is in that
  file, column for column. A month that fails a check stays and is reported as `waiting`.
- **Slurm snapshots** (`node_states`, a row per node and partition at every `sinfo`; `pending_jobs`, a row per
  queued job at every `squeue`: 1.8 M and more rows a day on a 1,250-node cluster sampled every minute;
  `shares`, a row per association at every `sshare`, every 5 minutes: 0.6 M a day for 2,000 associations):
  with `retention.snapshot_lake_months`, a month of snapshots older than that leaves DuckDB once the lake
  holds it, checked as for the sacct history.
- **Run logs** (`collector_runs`, one row per loaded spool file; `spool_files`, the ledger that stops a
  file loading twice): rows older than `retention.run_log_days` go, except each collector's latest run and
  latest successful run (what `status` and the collector metrics show) and its first run (serve's monthly
  report catch-up asks since when the database has been collecting).

Each step (one UTC hour of minutes, one month of attempts, one run-log table) is one transaction that also
records what it removed in `retention_runs` and moves the boundary: a crash between steps leaves every
minute either raw or rolled up and every attempt either here or in the lake. An hour, not a day: at
10,000 GPUs a day in one step took 41 CPU-s and 13.6 GB of memory, 24 hourly steps 30 CPU-s and 0.7 GB
at most (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa

from slurmscope import lake, rollup
from slurmscope.config import Config
from slurmscope.db import transaction

log = logging.getLogger("slurmscope.retention")

HOUR = timedelta(hours=1)

SNAPSHOT_TABLES = ("node_states", "pending_jobs", "shares")
"""Periodic Slurm snapshots that `retention.snapshot_lake_months` moves to the lake; each keeps its own
boundary in `retention_state` under its table name."""
SNAPSHOT_DELETABLE = "cluster = $cluster AND snapshot_time >= $lo AND snapshot_time < $hi"


@dataclass(frozen=True)
class Step:
    """One unit of retention work, done in one transaction."""

    kind: str  # 'gpu_samples' | 'jobs' | a SNAPSHOT_TABLES name | 'collector_runs' | 'spool_files'
    cluster: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Done:
    step: Step
    table: str
    rows_removed: int
    rows_written: int
    status: str  # 'ok' | 'waiting'
    detail: str | None = None


def _midnight(t: datetime) -> datetime:
    t = t.astimezone(UTC)
    return datetime(t.year, t.month, t.day, tzinfo=UTC)


def _month_start(t: datetime, back: int = 0) -> datetime:
    t = t.astimezone(UTC)
    index = t.year * 12 + (t.month - 1) - back
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def gpu_cutoff(now: datetime, days: int) -> datetime:
    """Minutes before this instant are rolled up: UTC midnight `days` days before `now`."""
    return _midnight(now) - timedelta(days=days)


def jobs_cutoff(now: datetime, months: int) -> datetime:
    """Attempts that ended before this instant may leave DuckDB: the first day of the month `months`
    months before `now`'s UTC month."""
    return _month_start(now, months)


def _month_step(kind: str, cluster: str, month: str) -> Step:
    """The step of one UTC month ('YYYY-MM') of a table that retention moves to the lake."""
    first, nxt = lake.month_bounds(month)
    return Step(kind, cluster, *(datetime(d.year, d.month, 1, tzinfo=UTC) for d in (first, nxt)))


def plan(con: duckdb.DuckDBPyConnection, cfg: Config, now: datetime) -> list[Step]:
    """Every step due at `now`, in the order they must run (each kind's steps oldest first)."""
    steps: list[Step] = []
    days = int(cfg.get("retention", "gpu_minutes_days"))
    if days:
        cutoff = gpu_cutoff(now, days)
        rows = con.execute(
            "SELECT DISTINCT cluster, CAST(epoch_us(minute) // 3600000000 AS BIGINT) AS h FROM ("
            " SELECT cluster, minute FROM gpu_samples WHERE minute < $cutoff"
            " UNION ALL SELECT cluster, minute FROM gpu_nvlink_errors WHERE minute < $cutoff) ORDER BY cluster, h",
            {"cutoff": cutoff},
        ).fetchall()
        for cluster, h in rows:
            start = datetime.fromtimestamp(h * 3600, UTC)
            steps.append(Step("gpu_samples", cluster, start, min(start + HOUR, cutoff)))
    months = int(cfg.get("retention", "sacct_lake_months"))
    if months:
        cutoff = jobs_cutoff(now, months)
        rows = con.execute(
            "SELECT DISTINCT cluster, strftime(timezone('UTC', submit_time), '%Y-%m') AS m FROM jobs"
            " WHERE submit_time < ? AND end_time IS NOT NULL AND end_time < ? ORDER BY cluster, m",
            [cutoff, cutoff],
        ).fetchall()
        steps += [_month_step("jobs", cluster, month) for cluster, month in rows]
    months = int(cfg.get("retention", "snapshot_lake_months"))
    if months:
        cutoff = jobs_cutoff(now, months)
        for table in SNAPSHOT_TABLES:
            rows = con.execute(
                f"SELECT DISTINCT cluster, strftime(timezone('UTC', snapshot_time), '%Y-%m') AS m FROM {table}"  # noqa: S608 - names from SNAPSHOT_TABLES
                " WHERE snapshot_time < ? ORDER BY cluster, m",
                [cutoff],
            ).fetchall()
            steps += [_month_step(table, cluster, month) for cluster, month in rows]
    run_days = int(cfg.get("retention", "run_log_days"))
    if run_days:
        before = now - timedelta(days=run_days)
        for table, column in (("collector_runs", "started_at"), ("spool_files", "loaded_at")):
            rows = con.execute(
                f"SELECT DISTINCT cluster FROM {table} WHERE {column} < ? ORDER BY cluster",  # noqa: S608 - table and column names are the literals above
                [before],
            ).fetchall()
            steps += [Step(table, cluster, datetime.min.replace(tzinfo=UTC), before) for (cluster,) in rows]
    return steps


def _record(con: duckdb.DuckDBPyConnection, done: Done, now: datetime, lo: object, hi: object) -> None:
    con.execute(
        "INSERT INTO retention_runs (cluster, run_at, table_name, range_start, range_end, rows_removed,"
        " rows_written, status, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            done.step.cluster,
            now,
            done.table,
            lo,
            hi,
            done.rows_removed,
            done.rows_written,
            done.status,
            done.detail,
        ],
    )


def _move_boundary(
    con: duckdb.DuckDBPyConnection, cluster: str, name: str, to: datetime, now: datetime
) -> None:
    con.execute(
        "INSERT INTO retention_state (cluster, name, boundary, updated_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (cluster, name) DO UPDATE SET boundary = greatest(boundary, excluded.boundary),"
        " updated_at = excluded.updated_at",
        [cluster, name, to, now],
    )


def _count(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> int:
    return int(con.execute(sql, params).fetchall()[0][0])


def roll_up(con: duckdb.DuckDBPyConnection, step: Step, now: datetime) -> list[Done]:
    """Replace the step's minutes by hourly rollups, merging into hours already rolled up (minutes that
    arrived after their hour was), delete the hour's per-link NVLink rows, and move the boundary to the step's
    end; one transaction.

    The per-link rows go with the minutes: each GPU's NVLink counters, summed over its links, are in the
    minutes and so in the rollup (`nvlink_*_delta`); what a link alone did is detail kept as long as the
    minutes are (the lake keeps it by month)."""
    types = rollup.column_types(con, "gpu_samples")
    cols = ", ".join(f'"{c}"' for c in [*rollup.KEYS, "minute", *rollup.RULES])
    where = "cluster = $cluster AND minute >= $lo AND minute < $hi"
    raw = f"SELECT {cols}, epoch_us(minute) * 2 + 1 AS _order FROM gpu_samples WHERE {where}"  # noqa: S608 - column names from rollup.RULES
    touched = (
        f"SELECT DISTINCT node, gpu_uuid, {rollup.hour_of('minute')} AS hour FROM gpu_samples WHERE {where}"  # noqa: S608 - a constant filter
    )
    stored = (
        "SELECT h.* FROM gpu_samples_hourly h SEMI JOIN (" + touched + ") t"  # noqa: S608 - a constant filter
        " ON h.node = t.node AND h.gpu_uuid = t.gpu_uuid AND h.hour = t.hour"
        " WHERE h.cluster = $cluster AND h.hour >= $lo AND h.hour < $hi"
    )
    expanded = f"SELECT {cols}, epoch_us(minute) * 2 AS _order FROM ({rollup.expand_sql(stored, types)})"  # noqa: S608 - column names from rollup.RULES
    # the hours already rolled up are read back and cut by today's gpu_jobs like the new minutes, so that a
    # minute that comes twice (a partial minute loaded late) lands in one row
    source = rollup.segment_sql(f"{raw} UNION ALL {expanded}")
    params = {"cluster": step.cluster, "lo": step.start, "hi": step.end}
    with transaction(con):
        span = f"SELECT count(*), min(minute), max(minute) FROM gpu_samples WHERE {where}"  # noqa: S608 - a constant filter
        n, lo, hi = con.execute(span, params).fetchall()[0]
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _rollup AS {rollup.aggregate_sql(source, order='_order', repeated_minutes=True)}",
            params,
        )
        con.execute(
            "DELETE FROM gpu_samples_hourly h WHERE h.cluster = $cluster AND h.hour >= $lo AND h.hour < $hi"
            " AND EXISTS (SELECT 1 FROM _rollup r WHERE r.node = h.node AND r.gpu_uuid = h.gpu_uuid"
            " AND r.hour = h.hour)",
            params,
        )
        written = _count(con, "SELECT count(*) FROM _rollup", [])
        con.execute("INSERT INTO gpu_samples_hourly BY NAME SELECT * FROM _rollup")
        con.execute("DROP TABLE _rollup")
        con.execute(f"DELETE FROM gpu_samples WHERE {where}", params)  # noqa: S608 - a constant filter
        done = [Done(step, "gpu_samples", int(n), written, "ok")]
        _record(con, done[0], now, lo, hi)
        links, link_lo, link_hi = con.execute(
            f"SELECT count(*), min(minute), max(minute) FROM gpu_nvlink_errors WHERE {where}",  # noqa: S608 - a constant filter
            params,
        ).fetchall()[0]
        if links:
            con.execute(f"DELETE FROM gpu_nvlink_errors WHERE {where}", params)  # noqa: S608 - a constant filter
            done.append(Done(step, "gpu_nvlink_errors", int(links), 0, "ok"))
            _record(con, done[1], now, link_lo, link_hi)
        _move_boundary(con, step.cluster, "gpu_samples", step.end, now)
    return done


JOBS_DELETABLE = "cluster = $cluster AND submit_time >= $lo AND submit_time < $hi AND end_time IS NOT NULL AND end_time < $cutoff"
STEPS_OF_DELETABLE = (
    "cluster = $cluster AND (job_id_raw, job_submit_time) IN"  # noqa: S608 - a constant filter
    f" (SELECT job_id_raw, submit_time FROM jobs WHERE {JOBS_DELETABLE})"
)


def _lake_check(
    con: duckdb.DuckDBPyConnection,
    target: lake.Target,
    manifest: dict,
    table: str,
    step: Step,
    where: str,
    params: dict,
) -> str | None:
    """Why the lake does not yet hold every row `where` selects from `table` (None when it does)."""
    month = step.start.strftime("%Y-%m")
    n = _count(con, f"SELECT count(*) FROM {table} WHERE {where}", params)  # noqa: S608 - table names from TABLES_BY_STEP; a constant filter
    if n == 0:
        return None
    entry = next(
        (
            p
            for p in manifest["partitions"]
            if (p["table"], p["cluster"], p["month"]) == (table, step.cluster, month)
        ),
        None,
    )
    if entry is None:
        return f"{table} {month} is not in the lake manifest yet"
    problem = lake.verify_partition(target, entry)
    if problem:
        return problem
    cols = lake.columns(con, table)
    if entry["schema_hash"] != lake.schema_hash(cols):
        return f"{table} {month}: the lake file has another schema (a migration since the export)"
    con.register("_lake_file", lake.read_partition(target, entry))
    try:
        names = ", ".join(f'"{c}"' for c, _ in cols if c not in lake.PARTITION_KEYS)
        missing = _count(
            con,
            f"SELECT count(*) FROM (SELECT {names} FROM {table} WHERE {where} EXCEPT SELECT {names} FROM _lake_file)",  # noqa: S608 - names from the catalog
            params,
        )
    finally:
        con.unregister("_lake_file")
    if missing:
        return f"{table} {month}: {missing} row(s) differ from or are missing in the lake file"
    return None


def _waiting(con: duckdb.DuckDBPyConnection, step: Step, table: str, problem: str, now: datetime) -> Done:
    """A month the lake does not yet hold whole: nothing removed, the reason and its fix recorded."""
    export = f"`slurmscope export --since {step.start:%Y-%m}`"
    done = Done(step, table, 0, 0, "waiting", f"{problem}; kept until {export} writes it")
    _record(con, done, now, None, None)
    return done


def prune_jobs(con: duckdb.DuckDBPyConnection, cfg: Config, step: Step, now: datetime) -> list[Done]:
    """Delete a month's ended attempts (and their steps) that the lake provably holds; one transaction."""
    cutoff = jobs_cutoff(now, int(cfg.get("retention", "sacct_lake_months")))
    params = {"cluster": step.cluster, "lo": step.start, "hi": step.end, "cutoff": cutoff}
    target = lake.open_target(cfg.get("lake", "export_dir"))
    manifest = lake.read_manifest(target)
    with transaction(con):
        problem = _lake_check(con, target, manifest, "jobs", step, JOBS_DELETABLE, params) or _lake_check(
            con, target, manifest, "job_steps", step, STEPS_OF_DELETABLE, params
        )
        if problem:
            return [_waiting(con, step, "jobs", problem, now)]
        n_steps, s_lo, s_hi = con.execute(
            f"SELECT count(*), min(job_submit_time), max(job_submit_time) FROM job_steps WHERE {STEPS_OF_DELETABLE}",  # noqa: S608 - a constant filter
            params,
        ).fetchall()[0]
        n_jobs, j_lo, j_hi = con.execute(
            f"SELECT count(*), min(submit_time), max(submit_time) FROM jobs WHERE {JOBS_DELETABLE}",  # noqa: S608 - a constant filter
            params,  # noqa: S608 - a constant filter
        ).fetchall()[0]
        con.execute(f"DELETE FROM job_steps WHERE {STEPS_OF_DELETABLE}", params)  # noqa: S608 - a constant filter
        con.execute(f"DELETE FROM jobs WHERE {JOBS_DELETABLE}", params)  # noqa: S608 - a constant filter
        done = [Done(step, "jobs", int(n_jobs), 0, "ok"), Done(step, "job_steps", int(n_steps), 0, "ok")]
        _record(con, done[0], now, j_lo, j_hi)
        _record(con, done[1], now, s_lo, s_hi)
        _move_boundary(con, step.cluster, "jobs", step.end, now)
    return done


def prune_snapshots(con: duckdb.DuckDBPyConnection, cfg: Config, step: Step, now: datetime) -> Done:
    """Delete a month of a snapshot table that the lake provably holds, and move its boundary (before it,
    pipelines keep their marts rather than rebuild them: pipelines.runner.history_floor); one transaction."""
    params = {"cluster": step.cluster, "lo": step.start, "hi": step.end}
    target = lake.open_target(cfg.get("lake", "export_dir"))
    manifest = lake.read_manifest(target)
    with transaction(con):
        problem = _lake_check(con, target, manifest, step.kind, step, SNAPSHOT_DELETABLE, params)
        if problem:
            return _waiting(con, step, step.kind, problem, now)
        n, lo, hi = con.execute(
            f"SELECT count(*), min(snapshot_time), max(snapshot_time) FROM {step.kind} WHERE {SNAPSHOT_DELETABLE}",  # noqa: S608 - a SNAPSHOT_TABLES name, a constant filter
            params,
        ).fetchall()[0]
        con.execute(f"DELETE FROM {step.kind} WHERE {SNAPSHOT_DELETABLE}", params)  # noqa: S608 - a SNAPSHOT_TABLES name, a constant filter
        done = Done(step, step.kind, int(n), 0, "ok")
        _record(con, done, now, lo, hi)
        _move_boundary(con, step.cluster, step.kind, step.end, now)
    return done


def prune_run_log(con: duckdb.DuckDBPyConnection, step: Step, now: datetime) -> Done:
    """Old collector runs (each collector's first, latest and latest successful run stay) or spool-file
    ledger rows."""
    params = {"cluster": step.cluster, "before": step.end}
    if step.kind == "collector_runs":
        column = "started_at"
        where = (
            "cluster = $cluster AND started_at < $before AND run_id NOT IN ("
            "SELECT arg_max(run_id, started_at) FROM collector_runs WHERE cluster = $cluster GROUP BY collector"
            " UNION ALL SELECT arg_max(run_id, started_at) FROM collector_runs"
            " WHERE cluster = $cluster AND status = 'ok' GROUP BY collector"
            " UNION ALL SELECT arg_min(run_id, started_at) FROM collector_runs WHERE cluster = $cluster"
            " GROUP BY collector)"
        )
    else:
        column, where = "loaded_at", "cluster = $cluster AND loaded_at < $before"
    with transaction(con):
        n, lo, hi = con.execute(
            f"SELECT count(*), min({column}), max({column}) FROM {step.kind} WHERE {where}",  # noqa: S608 - table and column names from plan()'s literals
            params,  # noqa: S608 - table and column names from plan()'s literals
        ).fetchall()[0]
        con.execute(f"DELETE FROM {step.kind} WHERE {where}", params)  # noqa: S608 - table and column names from plan()'s literals
        done = Done(step, step.kind, int(n), 0, "ok")
        _record(con, done, now, lo, hi)
    return done


def run_step(con: duckdb.DuckDBPyConnection, cfg: Config, step: Step, now: datetime) -> list[Done]:
    if step.kind == "gpu_samples":
        return roll_up(con, step, now)
    if step.kind == "jobs":
        return prune_jobs(con, cfg, step, now)
    if step.kind in SNAPSHOT_TABLES:
        return [prune_snapshots(con, cfg, step, now)]
    return [prune_run_log(con, step, now)]


def run_retention(
    con: duckdb.DuckDBPyConnection | None,
    cfg: Config,
    now: datetime | None = None,
    *,
    turn: Callable[[Callable[[duckdb.DuckDBPyConnection], object]], object] | None = None,
) -> list[Done]:
    """Plan and run every due step, each in its own transaction, then checkpoint so that DuckDB can reuse
    the freed blocks. `turn(fn)` runs fn with the database (serve passes its write lock's turn, so that
    collectors load between steps); without it, `con` is used throughout."""
    if turn is None and con is None:
        raise ValueError("run_retention needs a connection or a turn")
    now = (now or datetime.now(UTC)).astimezone(UTC)
    run = turn or (lambda fn: fn(con))
    steps: list[Step] = run(lambda c: plan(c, cfg, now))  # type: ignore[assignment]
    done: list[Done] = []
    for step in steps:
        try:
            done += run(lambda c, s=step: run_step(c, cfg, s, now))  # type: ignore[operator]
        except (duckdb.Error, OSError, lake.ExportError, pa.ArrowException) as exc:
            log.error("retention step %s %s %s failed: %s", step.kind, step.cluster, step.start, exc)
    if any(d.rows_removed for d in done):
        run(lambda c: c.execute("CHECKPOINT"))
    return done
