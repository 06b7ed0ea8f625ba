"""What every collector shares: the contract, the parse result, quarantine rows, and the one-transaction loader.

A collector is fetch (I/O) -> parse (pure: bytes to typed rows, bad lines to quarantine) -> load. `load`
upserts on the table's natural key and writes the collector_runs row and the quarantine rows in the same
transaction, so a crash leaves either the whole run or none of it. Fetching never happens under the
database write lock: `serve` holds that lock only for the load, so a source that hangs until its timeout
delays only itself.

The contract of a collector module (one line in collectors/registry.py lists it):
- `KIND` (its registry kind) and `TABLES`: each raw table it writes, with its natural key (TableSpec).
- `parse(data, *, cluster, snapshot_time, tz, fmt=None, delimiter=None, source="") -> Parsed`: pure, never
  raises on bad input; what `ingest KIND FILE...` and the live run both call. `Parsed.warnings` carries
  what was stored but should be known (e.g. host names standing in for node names); both callers add a
  warning when rows name another cluster than the configured one, and print and record them all.
- `command(cfg, *, start=None, end=None) -> list[str]`: the argument list of the live call, run by
  collectors/command.py (timeout, TZ=UTC, never a shell). Or, for a source that is not a command (an HTTP
  API), `fetch(cfg, window) -> bytes` with window = (start, end), either None, raising OSError
  (TimeoutError for a timeout) when the source fails; without `fetch` a live run runs `command(...)`.
- Optional: `check_input(head, fmt, delimiter)` (refuse an unusable file before anything loads),
  `after_upsert(parsed)` (a hook run inside the load transaction, e.g. recomputing job attempts), and
  `streams(head, fmt=None, delimiter=None) -> bool` with `parse_stream(fh, **parse kwargs)`: `ingest`
  hands an open file instead of its bytes when `streams` says so (Slurm's JSON: a month of sacct's is
  gigabytes, and is never read whole).
The NVML spool (`spool=True` in the registry) loads whole files, one transaction each, so it keeps its own
loader: `fetch(cfg, window)` pulls the files (HTTP or a shared path, no database), `load(con, cfg, pulls)`
loads them, and `acknowledge(pulls)` tells each source it may prune what committed.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb
import polars as pl
import pyarrow as pa

from slurmscope.db import transaction

QUARANTINE_SCHEMA = {
    "line_no": pl.Int64,
    "raw_text": pl.String,
    "raw_bytes": pl.Binary,
    "reason": pl.String,
}


def quarantine_frame(rows: list[dict] | None = None) -> pl.DataFrame:
    """Quarantine rows: line_no (1-based), raw_text (decoded with replacement), raw_bytes (when not UTF-8)."""
    return pl.DataFrame(rows or [], schema=QUARANTINE_SCHEMA)


@dataclass
class Outcome:
    """What one collector run did, as `collect` reports it and serve logs it."""

    collector: str
    status: str  # 'ok' | 'error' | 'timeout'
    rows: int = 0
    error: str | None = None
    warning: str | None = None  # also in collector_runs.warning: e.g. rows of another cluster


@dataclass(frozen=True)
class IngestResult:
    """One loaded file: a recorded file given to `ingest`, or an NVML spool file."""

    path: str
    rows: int
    quarantined: int
    skipped: bool = False  # a spool file already loaded (same name and checksum)
    node: str | None = None
    error: str | None = None
    status: str = "ok"  # 'failed' when the file was judged garbage (docs/ingest.md): nothing loaded
    warnings: tuple[str, ...] = ()  # also in collector_runs.warning: empty input, snapshot time from mtime


@dataclass
class Parsed:
    """Output of a pure parser: typed rows per table, and the lines it could not use."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    quarantine: pl.DataFrame = field(default_factory=quarantine_frame)
    warnings: list[str] = field(
        default_factory=list
    )  # stored, but the operator should know (stderr, run record)

    @property
    def rows(self) -> int:
        return sum(df.height for df in self.tables.values())


def cluster_mismatch(parsed: Parsed, cluster: str) -> str | None:
    """A warning when rows name a cluster other than the configured one, naming both; else None.

    An input's own `Cluster` column (sacct, sacctmgr events, JSON) wins, because it says where the rows came
    from; every other kind takes the configured cluster. Rows that land under another name are invisible to
    pipelines and reports run for the configured one, so the split is reported rather than left silent
    (issue 14: a site's sacct under `slurmbed`, its sinfo under `default`, every mart empty).
    """
    return clusters_mismatch(clusters_of(parsed), cluster)


def clusters_of(parsed: Parsed) -> set[str]:
    """The clusters the parsed rows name."""
    found: set[str] = set()
    for df in parsed.tables.values():
        if df.height and "cluster" in df.columns:
            found.update(c for c in df["cluster"].unique().to_list() if c)
    return found


def data_span(parsed: Parsed, tables: dict[str, TableSpec]) -> tuple[datetime | None, datetime | None]:
    """The earliest and latest instant the parsed rows are about: the time column of each table's key.

    A file's run records it as its window (collector_runs.window_start/_end), so an incremental pipeline run
    starts no later than the oldest instant a file loaded since its last run delivered (pipelines/runner.py,
    default_start): a spool file of a node that was unreachable for days, an old sinfo capture ingested now.
    """
    lo: datetime | None = None
    hi: datetime | None = None
    for name, df in parsed.tables.items():
        spec = tables.get(name)
        if spec is None or not df.height:
            continue
        col = next((k for k in spec.key if isinstance(df.schema.get(k), pl.Datetime)), None)
        if col is None:
            continue
        first, last = df.select(pl.col(col).min().alias("first"), pl.col(col).max().alias("last")).row(0)
        if first is not None:
            lo = first if lo is None else min(lo, first)
            hi = last if hi is None else max(hi, last)
    return lo, hi


def clusters_mismatch(found: set[str], cluster: str) -> str | None:
    """cluster_mismatch for the clusters an input's rows named (an input loaded slice by slice)."""
    others = sorted(found - {cluster})
    if not others:
        return None
    names = ", ".join(repr(c) for c in others)
    return (
        f"rows name cluster {names} (the input's own Cluster column), not the configured cluster {cluster!r}"
        f" (--cluster or cluster.name): they are stored under {names}"
    )


@dataclass(frozen=True)
class TableSpec:
    """Natural key of a raw table: an upsert replaces the stored row with the same key.

    `touch` names the columns whose change matters downstream: when an upsert changes one of them, the
    row's `ingested_at` moves to the load time, so incremental pipelines see the change (re-reading an
    unchanged row, as the collection overlap does every run, moves nothing).
    """

    name: str
    key: tuple[str, ...]
    touch: tuple[str, ...] = ()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _quote(col: str) -> str:
    return '"' + col.replace('"', '""') + '"'


@dataclass(frozen=True)
class Rows:
    """A frame ready for `write`: unique by its table's key and handed over in Arrow's layout.

    `prepare` is pure Polars, so a loader can run it in the thread that parses ahead while the connection's
    thread writes the slice before (collectors/ingest.py): that thread, DuckDB's single-threaded insert into
    keyed tables, is what a long load waits for.
    """

    spec: TableSpec
    columns: tuple[str, ...]
    table: pa.Table


def prepare(spec: TableSpec, df: pl.DataFrame) -> Rows:
    """`df` deduplicated by `spec.key` (the last row for a key wins) and converted for DuckDB."""
    # the check costs a quarter of unique()
    if df.height and df.select(pl.struct(list(spec.key)).is_duplicated().any()).item():
        df = df.unique(subset=list(spec.key), keep="last", maintain_order=True)
    # Polars' own string layout (Arrow string views) is handed over as is; the default large-string copy
    # doubles the text of every slice a big load passes through
    return Rows(spec, tuple(df.columns), df.to_arrow(compat_level=pl.CompatLevel.newest()))


def upsert(con: duckdb.DuckDBPyConnection, spec: TableSpec, df: pl.DataFrame) -> int:
    """Insert or replace rows by natural key; the last row for a key within `df` wins.

    Runs inside the caller's transaction. Columns missing from `df` keep their table defaults.
    """
    if df.height == 0:
        return 0
    return write(con, prepare(spec, df))


def write(con: duckdb.DuckDBPyConnection, rows: Rows, *, new: bool = False) -> int:
    """`upsert` of rows already prepared; `new`: the caller knows no key of `rows` is stored (a plain INSERT,
    without the lookup that finds out)."""
    spec, table = rows.spec, rows.table
    if table.num_rows == 0:
        return 0
    cols = rows.columns
    col_sql = ", ".join(_quote(c) for c in cols)
    key_sql = ", ".join(_quote(c) for c in spec.key)
    updates = [c for c in cols if c not in spec.key]
    batches = table.to_batches()

    def source() -> None:
        # DuckDB keeps every object registered in an open transaction until it ends, unregistered or not:
        # a registered table would hold each slice of a long load (1M sacct lines: 0.5 GiB). A reader of the
        # batches lets go of them once a statement has read it through.
        con.register("_upsert_src", pa.RecordBatchReader.from_batches(table.schema, iter(batches)))

    # ON CONFLICT DO UPDATE costs DuckDB more than twice a plain INSERT, so only rows whose key is already
    # stored take that path (first, while "already stored" still means before this call); new keys, the
    # bulk of any first load, go in with a plain INSERT.
    match = " AND ".join(f"t.{_quote(k)} = s.{_quote(k)}" for k in spec.key)
    exists = f"EXISTS (SELECT 1 FROM {spec.name} t WHERE {match})"  # noqa: S608 - table (TableSpec) and quoted column names from code, never input
    try:
        # a first load (every key new) pays at most one semi-join and a plain INSERT, not a semi- and an anti-join
        if not new:
            source()
            new = not con.execute(f"SELECT count(*) FROM _upsert_src s WHERE {exists}").fetchall()[0][0]  # noqa: S608 - as below
        source()
        if new:
            con.execute(f"INSERT INTO {spec.name} ({col_sql}) SELECT {col_sql} FROM _upsert_src")  # noqa: S608 - as below
            return table.num_rows
        if updates:
            set_sql = ", ".join(f"{_quote(c)} = excluded.{_quote(c)}" for c in updates)
            touched = [c for c in spec.touch if c in updates]
            if touched:
                changed = " OR ".join(
                    f"excluded.{_quote(c)} IS DISTINCT FROM {spec.name}.{_quote(c)}" for c in touched
                )
                set_sql += f", ingested_at = CASE WHEN {changed} THEN now() ELSE {spec.name}.ingested_at END"
            con.execute(
                f"INSERT INTO {spec.name} ({col_sql}) SELECT {col_sql} FROM _upsert_src s WHERE {exists} "  # noqa: S608 - table (TableSpec) and quoted column names from code, never input
                f"ON CONFLICT ({key_sql}) DO UPDATE SET {set_sql}"
            )
            source()
        con.execute(
            f"INSERT INTO {spec.name} ({col_sql}) SELECT {col_sql} FROM _upsert_src s WHERE NOT {exists}"  # noqa: S608 - table (TableSpec) and quoted column names from code, never input
        )
    finally:
        con.unregister("_upsert_src")
    return table.num_rows


@dataclass
class RunRecord:
    """One collector run, written to collector_runs together with the data it loaded."""

    cluster: str
    collector: str
    source: str
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    window_start: datetime | None = None
    window_end: datetime | None = None
    _t0: float = field(default_factory=time.monotonic, repr=False)

    def insert(
        self,
        con: duckdb.DuckDBPyConnection,
        *,
        status: str,
        rows: int = 0,
        quarantined: int = 0,
        error: str | None = None,
        warning: str | None = None,
    ) -> int:
        duration = time.monotonic() - self._t0
        return con.execute(
            "INSERT INTO collector_runs (cluster, collector, started_at, finished_at, window_start, window_end,"
            " rows, quarantined, status, error, duration_seconds, source, warning)"
            " VALUES (?, ?, ?, current_timestamp, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING run_id",
            [
                self.cluster,
                self.collector,
                self.started_at,
                self.window_start,
                self.window_end,
                rows,
                quarantined,
                status,
                error,
                duration,
                self.source,
                warning,
            ],
        ).fetchone()[0]


def load(
    con: duckdb.DuckDBPyConnection,
    parsed: Parsed,
    specs: dict[str, TableSpec],
    run: RunRecord,
    *,
    content: bytes | None = None,
    content_sha: str | None = None,
    watermark: datetime | None = None,
    watermark_key: str | None = None,
    after_upsert=None,
    error: str | None = None,
    status: str | None = None,
    warning: str | None = None,
) -> int:
    """Upsert every table of `parsed`, its quarantine, the run record and the watermark in one transaction.

    `after_upsert(con)` runs inside the transaction (e.g. to recompute job attempts). With `error`, the rows
    are stored but the run is recorded as an error with that text (output too damaged to trust: the caller
    then passes no watermark); `status` overrides the recorded status ('failed' for a garbage file given
    to `ingest`); `warning` is kept in collector_runs.warning; `watermark_key` names the watermark to move
    when it is not the collector's own (a history import keeps its own). Returns the collector_runs id.
    """
    digest = content_sha or (sha256(content) if content is not None else None)
    with transaction(con):
        total = 0
        for table, df in parsed.tables.items():
            df = df.with_columns(pl.lit(run.cluster).alias("cluster")) if "cluster" not in df.columns else df
            total += upsert(con, specs[table], df)
        q = parsed.quarantine
        if q.height:
            q = q.with_columns(
                pl.lit(run.cluster).alias("cluster"),
                pl.lit(run.source).alias("source"),
                pl.lit(digest or "").alias("content_sha256"),
            )
            upsert(con, TableSpec("quarantine", ("cluster", "source", "content_sha256", "line_no")), q)
        if after_upsert is not None:
            after_upsert(con)
        if watermark is not None:
            set_watermark(con, run.cluster, watermark_key or run.collector, watermark)
        return run.insert(
            con,
            status=status or ("ok" if error is None else "error"),
            rows=total,
            quarantined=q.height,
            error=error,
            warning=warning,
        )


def record_failure(con: duckdb.DuckDBPyConnection, run: RunRecord, status: str, error: str) -> int:
    """A failed run leaves data and watermark untouched and says why."""
    with transaction(con):
        return run.insert(con, status=status, error=error[:4000])


def set_watermark(con: duckdb.DuckDBPyConnection, cluster: str, collector: str, position: datetime) -> None:
    con.execute(
        "INSERT INTO watermarks (cluster, collector, position, updated_at) VALUES (?, ?, ?, current_timestamp)"
        " ON CONFLICT (cluster, collector) DO UPDATE SET position = excluded.position,"
        " updated_at = excluded.updated_at",
        [cluster, collector, position],
    )


def get_watermark(con: duckdb.DuckDBPyConnection, cluster: str, collector: str) -> datetime | None:
    row = con.execute(
        "SELECT position FROM watermarks WHERE cluster = ? AND collector = ?", [cluster, collector]
    ).fetchone()
    return row[0] if row else None
