"""`slurmscope export`: the accounting history as a Parquet lake that DuckDB, Polars, Spark or Trino read.

Layout `DIR/<table>/cluster=<name>/month=<YYYY-MM>/data.parquet` (Hive style), one file per partition so
that one rename (local) or one object write (object store) swaps a month: a reader globbing the lake sees
either the previous complete month or the new one, never half of each. The file is written aside under a
dot name (which DuckDB/Polars globs on `*.parquet`, pyarrow datasets and Spark all skip), then moved over
the old one; `DIR/_manifest.json` (same rename) lists the complete partitions with their checksums.
Layout, month rule per table and manifest format: docs/lake.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from urllib.parse import quote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from slurmscope.db import setting, transaction

log = logging.getLogger("slurmscope.lake")

SCHEMA_VERSION = 1
"""Version of the lake layout and of the manifest; bumped when a reader would have to change."""

MANIFEST = "_manifest.json"
DATA_FILE = "data.parquet"
TMP_PREFIX = ".data.parquet.tmp-"
ROW_GROUP_ROWS = 1_000_000
"""Rows per row group: big enough that Spark and DuckDB split work on whole row groups of a few tens of MB
(zstd), small enough that one batch in memory stays bounded (a million rows of the widest table)."""
ZSTD_LEVEL = 3

SNAPSHOT = None
"""Month column of a table that holds only the current state (no time column): it is filed under the
month of the export run, so each month keeps the state as of its last export."""

RAW_TABLES: dict[str, str] = {
    "jobs": "submit_time",
    "job_steps": "job_submit_time",
    "node_states": "snapshot_time",
    "pending_jobs": "snapshot_time",
    "shares": "snapshot_time",
    "sched_stats": "snapshot_time",
    "node_events": "time_start",
    "gpu_samples": "minute",
    "gpu_samples_hourly": "hour",
    "gpu_nvlink_errors": "minute",
    "gpu_events": "event_time",
    "gpu_jobs": "interval_start",
    "gpu_inventory": "seen_at",
    "reservations": "start_time",
    "slurm_config": "snapshot_time",
    "slurm_partitions": "snapshot_time",
}
"""Raw tables and the column whose UTC month files a row. Each is part of the natural key, so a row never
moves to another month when an upsert updates it. With the last four (what the pipelines read besides the
Slurm and NVML history: GPU models, reservations, the scheduler's and partitions' settings) the lake holds
every input of every pipeline, so `restore` can rebuild the marts from it on another machine."""

SOURCES: dict[str, str] = {"gpu_samples_hourly": "gpu_hours(?, ?, ?)"}
"""Tables exported from a query rather than read as stored: every hour of NVML history rolled up, the hours
retention rolled up and the minutes it still keeps alike (slurmscope.rollup), so that the lake's hourly table
is complete whatever `retention.gpu_minutes_days` says. Parameters: cluster, month start, month end."""

NATURAL_KEYS: dict[str, tuple[str, ...]] = {
    "gpu_samples": ("node", "gpu_uuid", "minute"),
    "jobs": ("job_id_raw", "submit_time"),
    "job_steps": ("job_id_raw", "job_submit_time", "step_id"),
    "node_states": ("snapshot_time", "node", "partition"),
    "pending_jobs": ("snapshot_time", "job_id"),
}
"""The tables retention thins (slurmscope/retention.py), by natural key (besides `cluster`). Re-exporting a
month retention has removed rows from merges the lake's file with the database: rows only the lake still
has are kept, a row in both is the database's."""

MART_TABLES: dict[str, str | None] = {
    "mart_cost_daily": "day",
    "mart_capacity_daily": "day",
    "mart_cost_monthly": "month",
    "mart_cost_unallocated_monthly": "month",
    "mart_cost_reservation_daily": "day",
    "mart_budget_monthly": "month",
    "mart_cost_rates_daily": "day",
    "mart_cost_reconciliation_daily": "day",
    "mart_cost_reconciliation_monthly": "month",
    "mart_cost_waste_daily": "day",
    "mart_budget_period": SNAPSHOT,
    "mart_usage_counters": SNAPSHOT,
    "mart_cost_efficiency_daily": "day",
    "mart_job_outcomes_daily": "day",
    "mart_job_outcomes_node_daily": "day",
    "mart_requeues_daily": "day",
    "mart_fault_impact": "fault_time",
    "mart_node_incidents": SNAPSHOT,
    "mart_node_reliability": SNAPSHOT,
    "mart_goodput": SNAPSHOT,
    "mart_backfill_daily": "day",
    "mart_sched_deltas": "snapshot_time",
    "mart_occupancy": "bucket_start",
    "mart_wait_times": "day",
    "mart_fairshare": "as_of",
    "mart_fairshare_drift": "day",
    "mart_fairshare_daily": "day",
    "mart_fairshare_submits": "day",
    "mart_job_efficiency": "submit_time",
    "mart_job_cpu_mem_efficiency": "submit_time",
    "mart_idle_gpus_daily": "day",
    "mart_mig_efficiency": "submit_time",
    "mart_drift": "as_of",
    "mart_node_health": "since",
    "mart_gpu_health": "since",
}
"""Every mart and its month column: a DATE column files by its own (billing-zone) calendar month, a
TIMESTAMPTZ column by its UTC month. tests/slurmscope/test_lake.py fails when a migration adds a mart
that is not listed here."""

TABLES: dict[str, str | None] = {**RAW_TABLES, **MART_TABLES}


class ExportError(RuntimeError):
    """An export that cannot start (bad target, a table the lake does not know); the message says why."""


@dataclass(frozen=True)
class Target:
    """Where the lake lives: a pyarrow filesystem and the base path inside it."""

    fs: pafs.FileSystem
    base: str

    def path(self, *parts: str) -> str:
        return "/".join([self.base.rstrip("/"), *parts])

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)


def open_target(out: str) -> Target:
    """A local directory, or any URL pyarrow's filesystem layer opens (s3://bucket/prefix?endpoint_override=...)."""
    if "://" in out:
        try:
            fs, base = pafs.FileSystem.from_uri(out)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise ExportError(f"cannot open lake target {out}: {exc}") from None
    else:
        fs, base = pafs.LocalFileSystem(), os.path.abspath(out)
    if isinstance(fs, pafs.LocalFileSystem):
        os.makedirs(base, exist_ok=True)
    return Target(fs, base)


@dataclass(frozen=True)
class Partition:
    table: str
    cluster: str
    month: str  # YYYY-MM

    @property
    def rel_dir(self) -> str:
        return f"{self.table}/cluster={quote(self.cluster, safe='')}/month={self.month}"

    @property
    def rel_path(self) -> str:
        return f"{self.rel_dir}/{DATA_FILE}"


@dataclass(frozen=True)
class Written:
    partition: Partition
    rows: int
    status: str  # 'written' | 'unchanged'


def month_bounds(month: str) -> tuple[date, date]:
    year, mon = int(month[:4]), int(month[5:7])
    first = date(year, mon, 1)
    return first, date(year + mon // 12, mon % 12 + 1, 1)


def columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return con.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_name = ? AND table_schema = 'main' ORDER BY ordinal_position",
        [table],
    ).fetchall()


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _month_expr(column: str, data_type: str) -> str:
    """The first of a row's UTC month. Through the epoch, so a naive timestamp is truncated: on 100M jobs
    DISTINCT over this took 2.3 s where `strftime(timezone('UTC', col), '%Y-%m')` (the zone library on
    every row) took 13.3 s, for the same 120 months."""
    if data_type == "DATE":
        return f"date_trunc('month', {_q(column)})"
    return f"date_trunc('month', make_timestamp(epoch_us({_q(column)})))"


def _bounds_sql(column: str, data_type: str, month: str) -> tuple[str, list]:
    first, nxt = month_bounds(month)
    if data_type == "DATE":
        return f"{_q(column)} >= ? AND {_q(column)} < ?", [first, nxt]
    lo = datetime(first.year, first.month, 1, tzinfo=timezone.utc)
    hi = datetime(nxt.year, nxt.month, 1, tzinfo=timezone.utc)
    return f"{_q(column)} >= ? AND {_q(column)} < ?", [lo, hi]


def _iso(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def schema_hash(columns: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps(columns).encode()).hexdigest()[:16]


def read_manifest(target: Target) -> dict:
    try:
        with target.fs.open_input_stream(target.path(MANIFEST)) as fh:
            data = json.loads(fh.read().decode())
    except FileNotFoundError:
        return {"format": "slurmscope-lake", "schema_version": SCHEMA_VERSION, "tables": {}, "partitions": []}
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ExportError(
            f"lake manifest schema_version {data.get('schema_version')} is not {SCHEMA_VERSION}:"
            " export into a new directory"
        )
    return data


def _write_atomic(target: Target, rel: str, payload: bytes) -> None:
    final = target.path(rel)
    tmp = target.path(f".{rel}.tmp-{uuid.uuid4().hex}")
    with target.fs.open_output_stream(tmp) as fh:
        fh.write(payload)
    target.fs.move(tmp, final)


def write_manifest(target: Target, manifest: dict) -> None:
    manifest["partitions"].sort(key=lambda p: (p["table"], p["cluster"], p["month"]))
    # No indent: json's C encoder only runs without one, and the manifest is rewritten after every partition
    # (4,400 entries for 10 clusters × a year: 25 ms a write indented, 8 ms not; benchmarks/multicluster.py).
    payload = json.dumps(manifest, sort_keys=True).encode() + b"\n"
    _write_atomic(target, MANIFEST, payload)


def _sha256(target: Target, path: str) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with target.fs.open_input_stream(path) as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


PARTITION_KEYS = ("cluster", "month")
"""Hive-style keys, carried by the path and not stored in the files (readers would see two columns of one
name). A table's own `month` column can only be its month column (mart_cost_monthly): same value."""


def _batches(reader: pa.RecordBatchReader, drop: list[str], seen: _Range | None = None) -> Iterable[pa.Table]:
    """Row groups of ROW_GROUP_ROWS, without the partition keys; `seen` takes in the time column's range."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in reader:
        if seen is not None:
            seen.take(batch.column(seen.column))
        batch = batch.drop_columns(drop)
        pending.append(batch)
        count += batch.num_rows
        if count >= ROW_GROUP_ROWS:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, ROW_GROUP_ROWS)
            rest = table.slice(ROW_GROUP_ROWS)
            pending, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(pending)


@dataclass
class _Range:
    """The least and greatest value of one column over the batches written: the manifest's time range,
    taken from the rows as they stream by rather than by a second query (which, for a SOURCES table such
    as gpu_samples_hourly, computed the whole month's rollup again)."""

    column: str
    lo: object = None
    hi: object = None

    def take(self, values: pa.Array) -> None:
        mm = pc.min_max(values)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is not None and (self.lo is None or lo < self.lo):
            self.lo = lo
        if hi is not None and (self.hi is None or hi > self.hi):
            self.hi = hi


def write_partition_file(
    target: Target, rel_dir: str, reader: pa.RecordBatchReader, seen: _Range | None = None
) -> str:
    """Write a partition's rows aside (dot name, same directory) and return that temporary path."""
    target.fs.create_dir(target.path(rel_dir), recursive=True)
    for info in target.fs.get_file_info(pafs.FileSelector(target.path(rel_dir))):
        if info.base_name.startswith(TMP_PREFIX):  # left by an export that died mid-write
            target.fs.delete_file(info.path)
    tmp = target.path(rel_dir, TMP_PREFIX + uuid.uuid4().hex)
    drop = [k for k in PARTITION_KEYS if k in reader.schema.names]
    schema = pa.schema([f for f in reader.schema if f.name not in drop])
    with target.fs.open_output_stream(tmp) as sink:
        with pq.ParquetWriter(
            sink,
            schema,
            compression="zstd",
            compression_level=ZSTD_LEVEL,
            write_statistics=True,
        ) as writer:
            for table in _batches(reader, drop, seen):
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    return tmp


def _months(
    con: duckdb.DuckDBPyConnection,
    table: str,
    column: str | None,
    types: dict[str, str],
    now_month: str,
    clusters: list[str] | None,
) -> list[tuple[str, str]]:
    where, params = ("TRUE", []) if clusters is None else ("list_contains(?, cluster)", [clusters])
    if column is None:
        sql = f"SELECT DISTINCT cluster FROM {_q(table)} WHERE {where} ORDER BY 1"  # noqa: S608 - names from TABLES and the catalog, quoted; values are parameters
        rows = con.execute(sql, params).fetchall()
        return [(c, now_month) for (c,) in rows]
    expr = _month_expr(column, types[column])
    sql = f"SELECT DISTINCT cluster, {expr} AS m FROM {_q(table)} WHERE {where}"  # noqa: S608 - names from TABLES and the catalog, quoted; values are parameters
    if table == "gpu_samples_hourly":  # the hours still kept as minutes count too
        sql += f" UNION SELECT DISTINCT cluster, {_month_expr('minute', types[column])} FROM gpu_samples WHERE {where}"  # noqa: S608 - names from TABLES and the catalog, quoted
        params = params * 2
    return con.execute(f"SELECT cluster, strftime(m, '%Y-%m') FROM ({sql}) ORDER BY 1, 2", params).fetchall()  # noqa: S608 - built above from quoted names


def thinned_months(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str, str]]:
    """(table, cluster, month) of which retention has removed rows (from `retention_runs`)."""
    rows = con.execute(
        "SELECT DISTINCT table_name, cluster, strftime(timezone('UTC', m), '%Y-%m') FROM retention_runs,"
        " unnest(generate_series(date_trunc('month', timezone('UTC', range_start)),"
        " date_trunc('month', timezone('UTC', range_end)), INTERVAL 1 MONTH)) AS t(m)"
        " WHERE status = 'ok' AND rows_removed > 0 AND range_start IS NOT NULL"
    ).fetchall()
    return {(t, c, m) for t, c, m in rows if t in NATURAL_KEYS}


def _source(
    con: duckdb.DuckDBPyConnection,
    target: Target,
    table: str,
    cols: list[tuple[str, str]],
    part: Partition,
    column: str | None,
    merge_with: dict | None,
) -> tuple[str, list]:
    """The SELECT (and its parameters) of a partition's rows: the table's month, the SOURCES query, or the
    table's month merged with the lake's existing file (a month retention thinned)."""
    types = dict(cols)
    if table in SOURCES:
        first, nxt = month_bounds(part.month)
        lo = datetime(first.year, first.month, 1, tzinfo=timezone.utc)
        hi = datetime(nxt.year, nxt.month, 1, tzinfo=timezone.utc)
        return f"SELECT * FROM {SOURCES[table]}", [part.cluster, lo, hi]  # noqa: S608 - a query of SOURCES
    where, params = ("TRUE", []) if column is None else _bounds_sql(column, types[column], part.month)
    own = f"SELECT * FROM {_q(table)} WHERE cluster = ? AND {where}"  # noqa: S608 - names from TABLES and the catalog, quoted; values are parameters
    if merge_with is None:
        return own, [part.cluster, *params]
    con.register("_lake_old", read_partition(target, merge_with))
    names = ", ".join(_q(n) for n, _ in cols)
    same = " AND ".join(f"t.{_q(k)} = o.{_q(k)}" for k in NATURAL_KEYS[table])
    t_where = where.replace(_q(column), f"t.{_q(column)}")
    kept = (
        f"SELECT ? AS cluster, * FROM _lake_old o WHERE NOT EXISTS (SELECT 1 FROM {_q(table)} t"  # noqa: S608 - names from TABLES and the catalog, quoted; values are parameters
        f" WHERE t.cluster = ? AND {t_where} AND {same})"
    )
    return (
        f"SELECT {names} FROM ({kept} UNION ALL BY NAME {own})",  # noqa: S608 - names from TABLES and the catalog, quoted; values are parameters
        [part.cluster, part.cluster, *params, part.cluster, *params],
    )


def _default_since(now: datetime) -> str:
    """The open month and the one before: late sacct records and the billing close land there."""
    year, mon = (now.year, now.month - 1) if now.month > 1 else (now.year - 1, 12)
    return f"{year:04d}-{mon:02d}"


def export(
    con: duckdb.DuckDBPyConnection,
    out: str,
    *,
    since: str | None = None,
    now: datetime | None = None,
    tables: Iterable[str] | None = None,
    on_partition: Callable[[Written], None] | None = None,
    clusters: Iterable[str] | None = None,
) -> list[Written]:
    """Export every cluster's months (or only `clusters`') from `since` on (default: the month before
    `now`'s), plus every month the manifest does not list yet, one atomic partition at a time.

    A month whose new file has the checksum the manifest already lists is left as it is (byte-stable).
    """
    con = con.cursor()  # its own result slot: a caller's unfinished result must not block the stream below
    con.execute("SET TimeZone = 'UTC'")  # Arrow timestamps carry the session zone: keep the bytes stable
    now = now or datetime.now(timezone.utc)
    now_month = now.astimezone(timezone.utc).strftime("%Y-%m")
    since = since or _default_since(now.astimezone(timezone.utc))
    target = open_target(out)
    manifest = read_manifest(target)
    listed = {(p["table"], p["cluster"], p["month"]): p for p in manifest["partitions"]}
    present = {
        name
        for (name,) in con.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'main' AND table_type = 'BASE TABLE'"
        ).fetchall()
    }
    unknown = sorted(n for n in present if n.startswith("mart_") and n not in TABLES)
    if unknown:
        raise ExportError(
            f"mart table(s) {', '.join(unknown)} have no month column in slurmscope.lake.MART_TABLES"
        )
    wanted = list(tables) if tables is not None else list(TABLES)
    thinned = thinned_months(con) if "retention_runs" in present else set()
    only = None if clusters is None else list(clusters)
    done: list[Written] = []
    for table in wanted:
        if table not in present:
            continue
        column = TABLES[table]
        cols = columns(con, table)
        types = dict(cols)
        if "month" in types and column != "month":
            raise ExportError(f"{table}.month would clash with the month= partition key")
        manifest["tables"][table] = {
            "kind": "raw" if table in RAW_TABLES else ("snapshot" if column is None else "mart"),
            "time_column": column,
            "columns": [[n, t] for n, t in cols if n not in PARTITION_KEYS],
            "schema_hash": schema_hash(cols),
        }
        order = ", ".join(([_q(column)] if column else []) + [_q(n) for n, _ in cols if n != column])
        for cluster, month in _months(con, table, column, types, now_month, only):
            if month < since and (table, cluster, month) in listed:
                continue
            part = Partition(table, cluster, month)
            old = listed.get((table, cluster, month))
            merge = old if (table, cluster, month) in thinned and old and _exists(target, old) else None
            source, params = _source(con, target, table, cols, part, column, merge)
            try:
                # a SOURCES query sums floats in scan order: on one thread, the same bytes every run
                with setting(con, "threads", 1) if table in SOURCES else nullcontext():
                    rel = con.sql(f"SELECT * FROM ({source}) ORDER BY {order}", params=params)  # noqa: S608 - built by _source from quoted names
                    seen = _Range(column) if column is not None else None
                    reader = rel.to_arrow_reader(ROW_GROUP_ROWS)
                    tmp = write_partition_file(target, part.rel_dir, reader, seen)
                lo, hi = (seen.lo, seen.hi) if seen is not None else (None, None)
            finally:
                if merge is not None:
                    con.unregister("_lake_old")
            sha, size = _sha256(target, tmp)
            with target.fs.open_input_file(tmp) as fh:
                meta = pq.read_metadata(fh)
            rows = meta.num_rows
            final = target.path(part.rel_path)
            if old and old["sha256"] == sha and target.fs.get_file_info(final).type == pafs.FileType.File:
                target.fs.delete_file(tmp)
                result = Written(part, rows, "unchanged")
            else:
                target.fs.move(tmp, final)
                entry = {
                    "table": table,
                    "cluster": cluster,
                    "month": month,
                    "path": part.rel_path,
                    "rows": rows,
                    "row_groups": meta.num_row_groups,
                    "time_column": column,
                    "min_time": _iso(lo),
                    "max_time": _iso(hi) if column is not None else None,
                    "as_of": _iso(now) if column is None else None,
                    "schema_version": SCHEMA_VERSION,
                    "schema_hash": schema_hash(cols),
                    "sha256": sha,
                    "bytes": size,
                }
                listed[(table, cluster, month)] = entry
                manifest["partitions"] = list(listed.values())
                write_manifest(target, manifest)
                result = Written(part, rows, "written")
            done.append(result)
            if on_partition:
                on_partition(result)
    manifest["partitions"] = list(listed.values())
    write_manifest(target, manifest)
    return done


def _exists(target: Target, entry: dict) -> bool:
    return target.fs.get_file_info(target.path(entry["path"])).type == pafs.FileType.File


def verify_partition(target: Target, entry: dict) -> str | None:
    """Why a manifest entry's file cannot be trusted (missing, or bytes other than the manifest's), or None."""
    path = target.path(entry["path"])
    if not _exists(target, entry):
        return f"{entry['path']}: missing"
    sha, _ = _sha256(target, path)
    if sha != entry["sha256"]:
        return f"{entry['path']}: checksum differs from the manifest"
    return None


def read_partition(target: Target, entry: dict) -> pa.Table:
    """A partition's rows as written (without the partition keys, which the path carries)."""
    with target.fs.open_input_file(target.path(entry["path"])) as fh:
        return pq.read_table(fh)


def verify(out: str) -> list[str]:
    """Problems found: a listed partition whose file is missing or whose bytes differ from the manifest."""
    target = open_target(out)
    return [p for p in (verify_partition(target, e) for e in read_manifest(target)["partitions"]) if p]


# ------------------------------------------------------------------------------------------------ restore


class RestoreError(RuntimeError):
    """A restore that cannot run (no lake, a damaged file, a cluster already in the database); says why."""


@dataclass(frozen=True)
class Restored:
    partition: Partition
    rows: int


RESTORE_BATCH_ROWS = 262_144
"""Rows read from a Parquet file at a time: a partition is streamed into DuckDB, never held whole."""


def gpu_boundary(entries: list[dict]) -> datetime | None:
    """The hour before which a restored cluster reads its GPU history from gpu_samples_hourly: the hour of
    the lake's first minute row (None: the lake has no minute rows, every hour comes from the hourly table).

    The lake's hourly table covers every hour, those whose minutes it also holds included (`gpu_hours`):
    restoring both for one hour would count it twice. Minutes are kept from that hour on, the hours before
    it are the ones retention had already rolled up before the first export (retention's boundary is one
    instant per cluster, and a re-export keeps the minutes the lake had, NATURAL_KEYS)."""
    firsts = [e["min_time"] for e in entries if e["table"] == "gpu_samples" and e["rows"] and e["min_time"]]
    if not firsts:
        return None
    first = datetime.fromisoformat(min(firsts).replace("Z", "+00:00"))
    return first.replace(minute=0, second=0, microsecond=0)


def restore(
    con: duckdb.DuckDBPyConnection,
    src: str,
    *,
    clusters: Iterable[str] | None = None,
    now: datetime | None = None,
    on_partition: Callable[[Restored], None] | None = None,
) -> list[Restored]:
    """Load the raw tables of the lake's clusters (or only `clusters`) into a database that holds no rows of
    them, so that `pipelines run --full` rebuilds their marts there: the lake as the scale-out store, one
    worker database per cluster (docs/lake.md#rebuilding-marts-from-the-lake).

    Nothing is written unless every partition to load matches the manifest's checksum and every column of
    the lake exists in the database. Each partition is one transaction; a restore that fails removes the
    rows it loaded of that cluster. Marts are not read: they are what the worker recomputes.
    """
    target = open_target(src) if "://" in src or os.path.isdir(src) else None
    if target is None:
        raise RestoreError(f"{src}: no such lake directory")
    manifest = read_manifest(target)
    entries = [e for e in manifest["partitions"] if e["table"] in RAW_TABLES]
    if not entries:
        raise RestoreError(f"{src}: no raw table partitions in {MANIFEST} (is it a slurmscope lake?)")
    in_lake = sorted({e["cluster"] for e in entries})
    wanted = in_lake if clusters is None else list(dict.fromkeys(clusters))
    absent = [c for c in wanted if c not in in_lake]
    if absent:
        raise RestoreError(
            f"cluster(s) {', '.join(absent)} not in the lake {src}; it holds {', '.join(in_lake)}"
        )
    tables = [t for t in RAW_TABLES if t in {e["table"] for e in entries}]
    have = {t: {n for n, _ in columns(con, t)} - set(PARTITION_KEYS) for t in tables}
    for table in tables:
        extra = [n for n, _ in manifest["tables"][table]["columns"] if n not in have[table]]
        if extra:
            raise RestoreError(
                f"{table} in the lake has column(s) {', '.join(extra)} that this database lacks:"
                " restore with the slurmscope release that wrote the lake, or a newer one"
            )
        for cluster in wanted:
            if con.execute(f"SELECT 1 FROM {_q(table)} WHERE cluster = ? LIMIT 1", [cluster]).fetchall():  # noqa: S608 - table from RAW_TABLES
                raise RestoreError(
                    f"the database already holds {table} rows of cluster {cluster}: restore fills a database"
                    " without that cluster's rows (a fresh --db per worker)"
                )
    chosen = sorted(
        (e for e in entries if e["cluster"] in wanted),
        key=lambda e: (wanted.index(e["cluster"]), tables.index(e["table"]), e["month"]),
    )
    problems = [p for p in (verify_partition(target, e) for e in chosen) if p]
    if problems:
        raise RestoreError(f"{src}: nothing restored, the lake is damaged: {'; '.join(problems)}")
    now = now or datetime.now(timezone.utc)
    done: list[Restored] = []
    with setting(con, "write_buffer_row_group_count", 1):  # each partition's rows are written as they come
        for cluster in wanted:
            mine = [e for e in chosen if e["cluster"] == cluster]
            try:
                done += _restore_cluster(con, target, cluster, mine, have, now, on_partition)
            except BaseException:
                _forget_cluster(con, cluster, tables)
                raise
    return done


def _restore_cluster(
    con: duckdb.DuckDBPyConnection,
    target: Target,
    cluster: str,
    entries: list[dict],
    have: dict[str, set[str]],
    now: datetime,
    on_partition: Callable[[Restored], None] | None,
) -> list[Restored]:
    """One transaction per partition: a cluster as one transaction (10M attempts) needed more than DuckDB's
    1 GB memory limit to commit its primary-key indexes. The GPU rollup boundary is written last."""
    boundary = gpu_boundary(entries)
    done: list[Restored] = []
    hourly = 0
    for entry in entries:
        cut = boundary if entry["table"] == "gpu_samples_hourly" else None
        with transaction(con):
            rows = _load_partition(con, target, entry, have[entry["table"]], cut)
        hourly += rows if entry["table"] == "gpu_samples_hourly" else 0
        result = Restored(Partition(entry["table"], cluster, entry["month"]), rows)
        done.append(result)
        if on_partition:
            on_partition(result)
    if hourly:
        if boundary is None:  # no minute in the lake: every hour comes from the hourly rows
            last = max(e["max_time"] for e in entries if e["table"] == "gpu_samples_hourly" and e["rows"])
            boundary = datetime.fromisoformat(last.replace("Z", "+00:00")) + timedelta(hours=1)
        with transaction(con):
            con.execute(
                "INSERT INTO retention_state (cluster, name, boundary, updated_at) VALUES (?, 'gpu_samples', ?, ?)",
                [cluster, boundary, now],
            )
    return done


def _forget_cluster(con: duckdb.DuckDBPyConnection, cluster: str, tables: list[str]) -> None:
    """After a failed restore, remove what it loaded of the cluster, so that the next one can start over."""
    try:
        with transaction(con):
            for table in tables:
                con.execute(f"DELETE FROM {_q(table)} WHERE cluster = ?", [cluster])  # noqa: S608 - table from RAW_TABLES
            con.execute("DELETE FROM retention_state WHERE cluster = ? AND name = 'gpu_samples'", [cluster])
    except duckdb.Error:
        log.exception("restore: could not remove the partial rows of cluster %s", cluster)


def _load_partition(
    con: duckdb.DuckDBPyConnection, target: Target, entry: dict, have: set[str], before: datetime | None
) -> int:
    """Insert one partition's rows under its cluster (for the hourly table only hours before `before`, when
    given), streamed in batches; the number inserted. `have`: the table's columns, the file's must be among
    them."""
    table = entry["table"]
    with target.fs.open_input_file(target.path(entry["path"])) as fh:
        pf = pq.ParquetFile(fh)
        names = pf.schema_arrow.names
        unknown = [n for n in names if n not in have]
        if unknown:
            raise RestoreError(f"{entry['path']}: column(s) {', '.join(unknown)} are not columns of {table}")
        reader = pa.RecordBatchReader.from_batches(
            pf.schema_arrow, pf.iter_batches(batch_size=RESTORE_BATCH_ROWS)
        )
        cols = ", ".join(_q(n) for n in names)
        where, params = ("", []) if before is None else (" WHERE hour < ?", [before])
        con.register("_lake_restore", reader)
        try:
            return con.execute(
                f"INSERT INTO {_q(table)} (cluster, {cols}) SELECT ?, {cols} FROM _lake_restore{where}",  # noqa: S608 - table from RAW_TABLES, quoted names from the file
                [entry["cluster"], *params],
            ).fetchone()[0]
        finally:
            con.unregister("_lake_restore")
