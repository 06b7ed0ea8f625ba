"""Run the registered pipelines: read raw tables, compute (pure, lazy), write marts per window.

The runner owns all I/O so that pipelines stay pure functions of LazyFrames. For each pipeline it
(1) fixes a window [start, now), (2) runs the pipeline's declared input queries (DuckDB → Arrow → Polars),
(3) calls `compute`, collects every output together, and (4) in ONE transaction deletes each mart's rows in
the rebuilt window and inserts the new ones, so a reader never sees half a run and a second run with the same
inputs writes the same rows.

Pipeline module contract (see docs/pipelines.md):
    NAME: str
    MART_TABLES: dict[str, str | None]   # mart -> window column (DATE or TIMESTAMPTZ); None = whole table
    INPUTS: dict[str, str]               # alias -> SELECT with named parameters ($cluster, $start, $end,
                                         #   $start_date, $start_month); the runner adds nothing to it
    def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]
    optional: WIDEN_SQL: str  # a SELECT of one DATE (billing-zone day) the window must start at or before
    optional: CALENDAR_SQL: str  # a SELECT of the first and last instant the INPUTS cut into billing days
    optional: ENGINE: str  # Polars engine that collects the outputs ("streaming" where not set)
    optional: WHOLE_DAYS: bool  # False: an incremental window starts where it is asked to, not at the
                                         #   midnight of its billing day (marts of instants, not of days)
    optional: BATCH_ROWS_SQL: str, BATCH_ROWS: int  # a SELECT of one count; above BATCH_ROWS the pipeline
                                         #   runs per group of nodes (the inputs filtered have a `node`
                                         #   column; without `combine`, compute treats nodes independently)
    optional: BATCH_INPUTS: tuple[str, ...]  # the INPUTS filtered by group of nodes (default: every one);
                                         #   the others are read whole in every group ($batch, $batches:
                                         #   the group and their count, 0 and 1 in one pass)
    optional: def combine(parts: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]
                                         # then compute returns partial frames (names of the module's own),
                                         #   each collected per group and concatenated over the groups, and
                                         #   combine makes the marts of them (also with one group)
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import duckdb
import polars as pl
from slurmscope.pipelines import (
    backfill,
    calendar,
    cost,
    cpu_mem_efficiency,
    drift,
    efficiency,
    fairshare,
    health,
    reliability,
)
from slurmscope.pipelines.params import Params, from_config

from slurmscope.config import Config, ConfigError
from slurmscope.db import transaction

log = logging.getLogger(__name__)

PIPELINES: tuple[ModuleType, ...] = (
    cost,
    reliability,
    backfill,
    fairshare,
    efficiency,
    cpu_mem_efficiency,
    drift,
    health,
)
"""Run in this order: a pipeline reading another's mart comes after it (drift reads fair-share's)."""


def pipeline_names() -> list[str]:
    return [m.NAME for m in PIPELINES]


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HISTORY_MARGIN = timedelta(days=62)
"""The longest history a pipeline reads before its window (drift's 61-day baselines, drift.HISTORY), plus a
day: a rebuild starts this far after the first month whose attempts are all still in DuckDB."""
_PARAM = re.compile(r"\$([a-z_]+)")
_JOBS = re.compile(r"\bjobs\b")
# Inputs whose late rows leave no trace of their arrival (the events collector re-reads a window of node
# events every run): a pipeline reading one re-reads pipelines.incremental_lookback_seconds, the others
# pipelines.incremental_margin_seconds (see default_start).
_UNTRACKED = re.compile(r"\bnode_events\b")


@dataclass(frozen=True)
class Window:
    start: datetime  # UTC, inclusive
    end: datetime  # UTC, exclusive: the run's `now`, or the end of a full rebuild's slice
    full: bool
    now: datetime | None = None  # when a slice ends before now: running attempts still accrue to now


def _parse_since(since: str | date | datetime, tz: ZoneInfo) -> datetime:
    if isinstance(since, datetime):
        return since if since.tzinfo else since.replace(tzinfo=tz)
    if isinstance(since, str):
        try:
            since = date.fromisoformat(since)
        except ValueError:
            raise ValueError(f"--since expects YYYY-MM-DD, got {since!r}") from None
    return datetime(since.year, since.month, since.day, tzinfo=tz).astimezone(UTC)


def default_start(
    con: duckdb.DuckDBPyConnection, cluster: str, pipeline: str, lookback: float, reads_jobs: bool = True
) -> datetime | None:
    """Start of an incremental window: the last good run minus `lookback`, pulled earlier to the oldest
    instant of what arrived since that run. None = no previous run (rebuild everything).

    Two arrivals are tracked: a job row ingested or changed since the run (a late sacct record; an attempt
    that ended, whose earlier days' failed/running split changes with it), when the pipeline reads `jobs`;
    and a file loaded since the run (an NVML spool file of a node that was unreachable, a recorded capture),
    whose run window is the span of instants its rows are about (collectors/base.py, data_span). A live
    collection's window is its query's, not its rows': its snapshots are about its own time (the margin
    covers one that commits just after a run) and its sacct rows carry ingested_at.
    """
    row = con.execute(
        "SELECT max(run_at) FROM pipeline_runs WHERE cluster = ? AND pipeline = ? AND status = 'ok'",
        [cluster, pipeline],
    ).fetchone()
    if row is None or row[0] is None:
        return None
    last = row[0].astimezone(UTC)
    start = last - timedelta(seconds=lookback)
    late = [
        con.execute(
            "SELECT min(window_start) FROM collector_runs WHERE cluster = ? AND finished_at > ? AND status = 'ok'"
            " AND source <> 'live'",
            [cluster, last],
        ).fetchone()[0]
    ]
    if reads_jobs:
        late.append(
            con.execute(
                "SELECT min(coalesce(start_time, submit_time)) FROM jobs WHERE cluster = ? AND ingested_at > ?",
                [cluster, last],
            ).fetchone()[0]
        )
    for t in late:
        if t is not None and t.astimezone(UTC) < start:
            start = t.astimezone(UTC)
    return start


HISTORY_TABLES = ("jobs", "node_states", "pending_jobs", "shares")
"""Raw tables whose old months retention may leave to the lake alone (slurmscope/retention.py)."""


def history_floor(con: duckdb.DuckDBPyConnection, cluster: str) -> datetime | None:
    """The earliest instant a rebuild may start at when retention moved sacct or snapshot months to the lake
    only (slurmscope/retention.py): the marts before it were built from rows DuckDB no longer has, so they are
    kept as they are rather than rebuilt from a partial history. None when no month left."""
    row = con.execute(
        "SELECT max(boundary) FROM retention_state WHERE cluster = ? AND list_contains(?, name)",
        [cluster, list(HISTORY_TABLES)],
    ).fetchone()
    return row[0].astimezone(UTC) + HISTORY_MARGIN if row and row[0] is not None else None


def pipeline_params(cfg: Config, window: Window) -> Params:
    return from_config(cfg, window.start, window.end, window.now or window.end, window.full)


def _read(con: duckdb.DuckDBPyConnection, sql: str, values: Mapping[str, Any]) -> pl.LazyFrame:
    used = {name: values[name] for name in set(_PARAM.findall(sql)) if name in values}
    con.complete()  # a caller's half-read execute() result would block the relation API
    table = con.sql(sql, params=used).to_arrow_table()
    lf = pl.from_arrow(table).lazy()
    # TIMESTAMPTZ arrives in the session's zone; pipelines compare against UTC literals (metadata-only cast).
    schema = lf.collect_schema()
    tz_cols = [
        c for c, t in schema.items() if isinstance(t, pl.Datetime) and t.time_zone not in (None, "UTC")
    ]
    return lf.with_columns(pl.col(c).dt.convert_time_zone("UTC") for c in tz_cols) if tz_cols else lf


NODE_GROUP = "$node_group"


def read_inputs(
    con: duckdb.DuckDBPyConnection,
    module: ModuleType,
    params: Params,
    batch: tuple[int, int] | None = None,
    shared: dict[str, pl.LazyFrame] | None = None,
) -> dict[str, pl.LazyFrame]:
    """The pipeline's INPUTS. With a CALENDAR_SQL (the earliest and latest instant whose billing day its
    queries look up), they can join `billing_hours` (h, o0, o1, switch: calendar.DayLookup's table) and
    `billing_days` (day, start_us: each day's first instant) over that span, so that DuckDB cuts days as
    the calendar module does. `batch` (i, n) keeps the rows of the nodes whose name hashes to i of n, in the
    module's BATCH_INPUTS (every input where it declares none); every query may use $batch and $batches (0 and
    1 in one pass), e.g. to read an input in the first group only. An input neither filtered by group nor
    using $batch is the same in every group: it is read once into `shared` and taken from there after. A
    query may read an input listed before it as the table `input_<alias>` (drift's GPUs against the fleet
    medians it reads once), registered for the rest of the call."""
    i, n = batch or (0, 1)
    values = {**params.sql(), "batch": i, "batches": n}
    queries = dict(module.INPUTS)
    grouped = getattr(module, "BATCH_INPUTS", tuple(queries))

    # the group's numbers as literals: with $parameters there DuckDB filters the whole input after the fact
    # (1.3 s against 0.3 s for a fifth of 4.3 M GPU minutes through gpu_minutes()). A query that reduces its
    # rows places `$node_group` where its minutes are read, since DuckDB does not push a filter on its output
    # through a join and a GROUP BY down to the scan; any other grouped query is wrapped in the filter.
    where = "true" if batch is None else f"hash(node) % {int(n)} = {int(i)}"
    for alias, sql in queries.items():
        if NODE_GROUP in sql:
            queries[alias] = sql.replace(NODE_GROUP, where)
        elif batch is not None and alias in grouped:
            queries[alias] = f"SELECT * FROM ({sql}) WHERE {where}"  # noqa: S608 - the module's own INPUTS; the group's numbers are ints
    # inputs that a later query reads as `input_<alias>` (DuckDB reducing rows against them)
    aliases = list(queries)
    staged = {
        alias: f"input_{alias}"
        for k, alias in enumerate(aliases)
        if any(f"input_{alias}" in queries[later] for later in aliases[k + 1 :])
    }

    def read(alias: str, sql: str) -> pl.LazyFrame:
        if shared is None or alias in grouped or "$batch" in sql:
            lf = _read(con, sql, values)
        else:
            if alias not in shared:
                shared[alias] = _read(con, sql, values)
            lf = shared[alias]
        if alias in staged:
            con.register(staged[alias], lf.collect().to_arrow())
        return lf

    def read_all() -> dict[str, pl.LazyFrame]:
        try:
            return {alias: read(alias, sql) for alias, sql in queries.items()}
        finally:
            for alias in staged:
                con.unregister(staged[alias])

    span = getattr(module, "CALENDAR_SQL", None)
    if span is None:
        return read_all()
    lo, hi = _read(con, span, values).collect().row(0)
    hours, days = calendar.sql_tables(params.tz, lo, hi)
    con.register("billing_hours", hours.to_arrow())
    con.register("billing_days", days.to_arrow())
    try:
        return read_all()
    finally:
        con.unregister("billing_hours")
        con.unregister("billing_days")


def node_batches(con: duckdb.DuckDBPyConnection, module: ModuleType, params: Params) -> int:
    """How many groups of nodes the pipeline runs in: its BATCH_ROWS_SQL count over BATCH_ROWS, at least 1.

    A pipeline whose memory grows with its largest input's rows (health: a day and its look-back of every GPU's
    minutes) would otherwise hold the whole fleet's window at once; per group of nodes it holds one group's."""
    sql = getattr(module, "BATCH_ROWS_SQL", None)
    if sql is None:
        return 1
    rows = _read(con, sql, params.sql()).collect().item() or 0
    return max(1, -(-int(rows) // int(module.BATCH_ROWS)))


def _column_types(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    rows = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return dict(rows)


def _lower_bound(col: str, col_type: str, window: Window, params: Params) -> Any:
    """First value of `col` inside the window: a `month` DATE column holds first-of-month dates."""
    if col_type == "DATE":
        return params.start_month if col == "month" else params.start_date
    return window.start


def _write(
    con: duckdb.DuckDBPyConnection,
    table: str,
    col: str | None,
    df: pl.DataFrame,
    window: Window,
    params: Params,
) -> int:
    """Delete the window of `table` for this cluster and insert `df` (rows outside the window are dropped)."""
    types = _column_types(con, table)
    if not types:
        raise RuntimeError(f"mart table {table} does not exist (missing migration?)")
    if "cluster" not in df.columns:
        df = df.with_columns(pl.lit(params.cluster).alias("cluster"))
    unknown = [c for c in df.columns if c not in types]
    if unknown:
        raise RuntimeError(f"{table}: compute returned columns not in the table: {unknown}")
    qcol = '"' + (col or "") + '"'
    if col is None or window.full:
        con.execute(f"DELETE FROM {table} WHERE cluster = ?", [params.cluster])  # noqa: S608 - mart table and column from the pipeline registry (MART_TABLES); values are ? parameters
    else:
        bound = _lower_bound(col, types[col], window, params)
        con.execute(f"DELETE FROM {table} WHERE cluster = ? AND {qcol} >= ?", [params.cluster, bound])  # noqa: S608 - mart table and column from the pipeline registry (MART_TABLES); values are ? parameters
        if df.height:
            lit = pl.lit(bound) if types[col] == "DATE" else pl.lit(bound, dtype=pl.Datetime("us", "UTC"))
            df = df.filter(pl.col(col) >= lit)
    if df.height == 0:
        return 0
    cols = ", ".join('"' + c + '"' for c in df.columns)
    con.register("_mart_src", df.to_arrow())
    try:
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _mart_src")  # noqa: S608 - mart table and column from the pipeline registry (MART_TABLES); values are ? parameters
    finally:
        con.unregister("_mart_src")
    return df.height


def _marts(module: ModuleType, outputs: Mapping[str, pl.LazyFrame], step: str) -> list[pl.LazyFrame]:
    missing = set(module.MART_TABLES) - set(outputs)
    if missing:
        raise RuntimeError(f"{module.NAME}: {step} returned no frame for {sorted(missing)}")
    return [outputs[t] for t in module.MART_TABLES]


def run_pipeline(
    con: duckdb.DuckDBPyConnection, cfg: Config, module: ModuleType, window: Window
) -> dict[str, int]:
    """Compute one pipeline over `window` and write all its marts in one transaction."""
    tz = ZoneInfo(cfg.get("billing", "timezone"))
    widen = getattr(module, "WIDEN_SQL", None)
    if widen and not window.full:  # e.g. cost: back to the first month not yet frozen
        day = _read(con, widen, pipeline_params(cfg, window).sql()).collect()
        if day.height and day.item(0, 0) is not None:
            first = day.item(0, 0)
            window = Window(
                min(window.start, datetime(first.year, first.month, first.day, tzinfo=tz).astimezone(UTC)),
                window.end,
                False,
                window.now,
            )
    # Whole billing days: a day is deleted and rebuilt from its midnight (not for the marts of instants).
    if not window.full and getattr(module, "WHOLE_DAYS", True):
        local = window.start.astimezone(tz)
        window = Window(
            datetime(local.year, local.month, local.day, tzinfo=tz).astimezone(UTC),
            window.end,
            False,
            window.now,
        )
    params = pipeline_params(cfg, window)
    tables = list(module.MART_TABLES)
    engine = getattr(module, "ENGINE", "streaming")
    combine = getattr(module, "combine", None)
    batches = node_batches(con, module, params)
    parts: list[dict[str, pl.DataFrame]] = []
    shared: dict[str, pl.LazyFrame] = {}
    for i in range(batches):
        frames = read_inputs(con, module, params, (i, batches) if batches > 1 else None, shared)
        outputs = module.compute(frames, params)
        if combine is None:
            outputs = dict(zip(tables, _marts(module, outputs, "compute"), strict=True))
        parts.append(dict(zip(outputs, pl.collect_all(list(outputs.values()), engine=engine), strict=True)))
        del frames, outputs
    del shared
    # one chunk per frame (concat returns a lone frame as it is, chunks and all): Polars 2.1's streaming engine
    # can panic (`i < self.len()`) reading string columns of several chunks
    merged = {name: pl.concat([p[name] for p in parts], how="vertical").rechunk() for name in parts[0]}
    del parts
    if combine is None:
        collected = [merged[t] for t in tables]
    else:
        outputs = combine({name: df.lazy() for name, df in merged.items()}, params)
        collected = pl.collect_all(_marts(module, outputs, "combine"), engine=engine)
    written: dict[str, int] = {}
    t0 = time.monotonic()
    with transaction(con):
        for table, df in zip(tables, collected, strict=True):
            written[table] = _write(con, table, module.MART_TABLES[table], df, window, params)
        con.execute(
            "INSERT OR REPLACE INTO pipeline_runs (cluster, pipeline, run_at, window_start, window_end, rows,"
            " status, error, duration_seconds) VALUES (?, ?, ?, ?, ?, ?, 'ok', NULL, ?)",
            [
                cfg.cluster,
                module.NAME,
                window.end,
                window.start,
                window.end,
                sum(written.values()),
                time.monotonic() - t0,
            ],
        )
    return written


def _slices(con: duckdb.DuckDBPyConnection, cfg: Config, module: ModuleType, window: Window) -> list[Window]:
    """A full rebuild of a SLICEABLE pipeline, cut into `pipelines.full_slice_days` windows run in turn.

    Each slice reads only the attempts that began before its end, so only a slice's attempts are in memory,
    but they run to their real end (or `now`); rows a slice writes past its end are rewritten by the next
    slices. Marts come out as from one full run (tested).
    """
    days = int(cfg.get("pipelines", "full_slice_days"))
    if not window.full or days <= 0 or not getattr(module, "SLICEABLE", False):
        return [window]
    first = con.execute(
        "SELECT min(coalesce(start_time, eligible_time, submit_time)) FROM jobs WHERE cluster = ?",
        [cfg.cluster],
    ).fetchall()[0][0]
    if first is None:
        return [window]
    tz = ZoneInfo(cfg.get("billing", "timezone"))
    local = first.astimezone(tz)
    edge = datetime(local.year, local.month, local.day, tzinfo=tz)
    ends = []
    while True:
        edge = (edge + timedelta(days=days)).astimezone(tz)
        edge = datetime(edge.year, edge.month, edge.day, tzinfo=tz)  # local midnight across DST
        if edge.astimezone(UTC) >= window.end:
            break
        ends.append(edge.astimezone(UTC))
    parts = [Window(EPOCH, ends[0], True, window.end)] if ends else []
    parts += [Window(a, b, False, window.end) for a, b in zip(ends, ends[1:], strict=False)]
    parts.append(Window(ends[-1], window.end, False) if ends else window)
    return parts


def _mart_rows(con: duckdb.DuckDBPyConnection, table: str, cluster: str) -> int:
    """A sliced full rebuild's rows: each slice rewrites some of the one before, so counts do not add up."""
    return con.execute(f"SELECT count(*) FROM {table} WHERE cluster = ?", [cluster]).fetchall()[0][0]  # noqa: S608 - mart table from the pipeline registry (MART_TABLES); the cluster is a ? parameter


def _record_error(con: duckdb.DuckDBPyConnection, cfg: Config, name: str, window: Window, error: str) -> None:
    try:
        con.execute(
            "INSERT OR REPLACE INTO pipeline_runs (cluster, pipeline, run_at, window_start, window_end, rows,"
            " status, error) VALUES (?, ?, ?, ?, ?, 0, 'error', ?)",
            [cfg.cluster, name, window.end, window.start, window.end, error[:2000]],
        )
    except duckdb.Error:  # the database itself is unusable; the log line below still says why
        log.exception("could not record the failure of pipeline %s", name)


def run_pipelines(
    con: duckdb.DuckDBPyConnection,
    cfg: Config,
    since: str | date | datetime | None = None,
    full: bool = False,
    only: list[str] | tuple[str, ...] | None = None,
    now: datetime | None = None,
) -> dict[str, int]:
    """Run the registered pipelines (or `only` those) and return rows written per mart.

    A pipeline that fails is logged, recorded in pipeline_runs and reported as `<name>: -1`; the others
    still run. Raises ValueError for an unknown name in `only` or a bad `since`.
    """
    now = (now or datetime.now(UTC)).astimezone(UTC)
    tz = ZoneInfo(cfg.get("billing", "timezone"))
    modules = list(PIPELINES)
    if only:
        names = [m.NAME for m in modules]
        unknown = [n for n in only if n not in names]
        if unknown:
            raise ValueError(f"unknown pipeline(s) {unknown}; registered: {names}")
        modules = [m for m in modules if m.NAME in only]
    lookback = float(cfg.get("pipelines", "incremental_lookback_seconds"))
    margin = float(cfg.get("pipelines", "incremental_margin_seconds"))
    floor = history_floor(con, cfg.cluster)
    results: dict[str, int] = {}
    for module in modules:
        name = module.NAME
        window = Window(EPOCH, now, True)
        if not full and since is not None:
            window = Window(_parse_since(since, tz), now, False)
        if not full and since is None:
            reads_jobs = any(_JOBS.search(sql) for sql in module.INPUTS.values())
            untracked = any(_UNTRACKED.search(sql) for sql in module.INPUTS.values())
            start = default_start(con, cfg.cluster, name, lookback if untracked else margin, reads_jobs)
            window = Window(EPOCH, now, True) if start is None else Window(start, now, False)
        if floor is not None and window.start < floor:
            log.warning(
                "pipeline %s: sacct history before %s is only in the lake; rebuilding from there", name, floor
            )
            window = Window(min(floor, now), now, False)
        try:
            parts = _slices(con, cfg, module, window)
            for part in parts:
                written = run_pipeline(con, cfg, module, part)
            if len(parts) > 1:
                written = {table: _mart_rows(con, table, cfg.cluster) for table in written}
            results.update(written)
        except ConfigError:
            raise  # a setting to fix (a GPU model missing from the price book): no pipeline result is right
        except Exception as exc:
            log.exception("pipeline %s failed", name)
            results[name] = -1
            _record_error(con, cfg, name, window, f"{type(exc).__name__}: {exc}")
    return results
