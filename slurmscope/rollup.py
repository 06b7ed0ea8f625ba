"""Hourly rollups of the NVML minute rows: one aggregate rule per gpu_samples column, and the SQL built from it.

Retention (slurmscope/retention.py) replaces minute rows older than `retention.gpu_minutes_days` by one
`gpu_samples_hourly` row per GPU, UTC hour, set of jobs holding the GPU (`jobs`, from gpu_jobs) and activity
source, with each minute that counted errors (EVENT_COLUMNS) a row of its own. An hour in which one job ended
and the next began becomes several rows (the minutes each job held in part are rows of their own), so a
job's minutes are never averaged with another's and per-job efficiency, cost and energy keep their
attribution; the minutes whose activity GPM measured are never averaged with those GPU_UTIL measured, so
useful GPU-hours and the GPM-measured seconds keep theirs; and health's per-minute error limits see each
error minute as it was. RULES is the one list of how each column rolls up; the rollup query, the reader
macros and the lake's hourly table are generated from it, and a test fails when a gpu_samples column has no
rule. A column added to gpu_samples is one line here (sql/0021_retention.sql creates gpu_samples_hourly
from gpu_samples' columns; a later migration adding a gpu_samples column adds it to both tables).

Why these aggregates (docs/configuration.md#retention lists each column):

- SUM: time and counts that add up over the hour: `samples`, `gpm_samples`, energy (the delta of NVML's
  total-energy counter, nvmlDeviceGetTotalEnergyConsumption), throttled and per-cause clock-event seconds,
  NVML's violation times per policy (nvmlDeviceGetViolationStatus), the per-minute deltas of the ECC,
  PCIe-replay and NVLink (aggregate and per-counter) counters, `null_fields`.
- MAX: the minute maxima (utilisation, memory used, power, temperatures): the hour's maximum is the maximum
  of its minutes' maxima; and the NVLink error totals, remapped rows and retired pages, counters that only
  grow (NVML API reference, nvmlDeviceGetNvLinkErrorCounter, nvmlDeviceGetRemappedRows,
  nvmlDeviceGetRetiredPages; r570 docs), whose maximum is the hour's last reading, as well as the PCIe link
  generation and width (nvmlDeviceGetCurrPcieLinkGeneration / Width): the best link the hour had.
- MEAN: the minute means (utilisation, power, clocks), weighted by each minute's `samples`. The agent reads
  the GPU once per `nvml.interval_seconds`, so a minute's `samples` are its sampled seconds divided by that
  interval: this is the mean over all sampled seconds of the hour, the same weighting the loader uses to
  merge two partial records of one minute (collectors/nvml.py, merge_samples). The GPM means (SM activity,
  SM occupancy, tensor and DRAM activity) are weighted by `gpm_samples`, the readings that had GPM values,
  as the loader weights them.
- BIT_OR: `throttle_reasons`, the OR of NVML's clock-event reason bits seen (a bit set in any minute is set
  for the hour). BOOL_OR: `retired_pages_pending`, a retirement waiting for a reset in any minute.
- LAST: state and identity read at the minute (aggregate ECC totals, remapped-row flags, retired pages, GPU
  index, bus id, model): the last non-null value of the hour, as the loader keeps the latest of two partial
  minutes.
- SOURCE: `activity_source`, derived per minute by the loader's rule ('gpm' when any reading had GPM values,
  else 'gpu_util' when one had GPU_UTIL, else null) and a key of the row: the minutes of a row share it, so
  pipelines/common.py activity_sources() over the minutes read back ('gpm', 'gpu_util', 'mixed' or null)
  is what it was over the stored minutes.

Read back as minutes (`gpu_minutes`, for the pipelines), a row becomes one row per minute that had a row
(`minute_mask`): SUM columns are spread evenly over those minutes (integers by whole units, the first
`total mod n` minutes getting one more, so the sum is exact), every other rule repeats the row's value.
Sums, maxima, sampled minutes and means over whole rows are therefore what the minutes gave; what varied
inside one job's part of an hour (which of its minutes were idle, a minute it held only in part) becomes
that part's average.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

import duckdb


class Agg(StrEnum):
    SUM = "sum"
    MAX = "max"
    MEAN = "mean"
    BIT_OR = "bit_or"
    BOOL_OR = "bool_or"
    LAST = "last"
    SOURCE = "source"


KEYS = ("cluster", "node", "gpu_uuid")
HOURLY_KEYS = (*KEYS, "hour", "jobs")
WEIGHT = "samples"
"""The MEAN rules' weight: NVML readings in the minute (one per sampling interval)."""
GPM_WEIGHT = "gpm_samples"
"""The weight of the GPM means: the readings that had GPM values (the loader merges them alike)."""
GPM_MEANS = ("sm_active_mean", "sm_occupancy_mean", "tensor_active_mean", "dram_active_mean")

RULES: dict[str, Agg] = {
    "gpu_index": Agg.LAST,
    "gpu_minor": Agg.LAST,
    "pci_bus_id": Agg.LAST,
    "model": Agg.LAST,
    "samples": Agg.SUM,
    "util_gpu_mean": Agg.MEAN,
    "util_gpu_max": Agg.MAX,
    "util_mem_mean": Agg.MEAN,
    "mem_used_max_bytes": Agg.MAX,
    "mem_total_bytes": Agg.MAX,
    "power_mean_watts": Agg.MEAN,
    "power_max_watts": Agg.MAX,
    "energy_joules": Agg.SUM,
    "temp_gpu_max_celsius": Agg.MAX,
    "temp_mem_max_celsius": Agg.MAX,
    "sm_clock_mean_mhz": Agg.MEAN,
    "mem_clock_mean_mhz": Agg.MEAN,
    "throttle_seconds": Agg.SUM,
    "throttle_reasons": Agg.BIT_OR,
    "pcie_replay_delta": Agg.SUM,
    "ecc_corrected_delta": Agg.SUM,
    "ecc_uncorrected_delta": Agg.SUM,
    "ecc_corrected_total": Agg.LAST,
    "ecc_uncorrected_total": Agg.LAST,
    "remapped_pending": Agg.LAST,
    "remapped_failed": Agg.LAST,
    "retired_pages": Agg.LAST,
    "nvlink_errors_delta": Agg.SUM,
    "null_fields": Agg.SUM,
    "sw_power_cap_seconds": Agg.SUM,
    "hw_slowdown_seconds": Agg.SUM,
    "sw_thermal_seconds": Agg.SUM,
    "hw_thermal_seconds": Agg.SUM,
    "hw_power_brake_seconds": Agg.SUM,
    "nvlink_crc_flit_delta": Agg.SUM,
    "nvlink_crc_data_delta": Agg.SUM,
    "nvlink_replay_delta": Agg.SUM,
    "nvlink_recovery_delta": Agg.SUM,
    "nvlink_crc_flit_total": Agg.MAX,
    "nvlink_crc_data_total": Agg.MAX,
    "nvlink_replay_total": Agg.MAX,
    "nvlink_recovery_total": Agg.MAX,
    "pcie_link_gen": Agg.MAX,
    "pcie_link_width": Agg.MAX,
    "remapped_correctable": Agg.MAX,
    "remapped_uncorrectable": Agg.MAX,
    "retired_pages_sbe": Agg.MAX,
    "retired_pages_dbe": Agg.MAX,
    "retired_pages_pending": Agg.BOOL_OR,
    "violation_power_seconds": Agg.SUM,
    "violation_thermal_seconds": Agg.SUM,
    "violation_sync_boost_seconds": Agg.SUM,
    "violation_board_limit_seconds": Agg.SUM,
    "violation_low_util_seconds": Agg.SUM,
    "violation_reliability_seconds": Agg.SUM,
    "gpm_samples": Agg.SUM,
    "sm_active_mean": Agg.MEAN,
    "sm_occupancy_mean": Agg.MEAN,
    "tensor_active_mean": Agg.MEAN,
    "dram_active_mean": Agg.MEAN,
    "activity_source": Agg.SOURCE,
}
"""gpu_samples column -> how its minutes roll up into the hour (every column but the key and `minute`)."""


def weight_of(col: str) -> str:
    """The weight of a MEAN column: `gpm_samples` for the GPM means, `samples` for the others."""
    return GPM_WEIGHT if col in GPM_MEANS else WEIGHT


MINUTE_SOURCE = (
    "CASE WHEN sum(coalesce(gpm_samples, 0)) OVER _m > 0 THEN 'gpm'"
    " WHEN bool_or(util_gpu_mean IS NOT NULL) OVER _m THEN 'gpu_util' END"
)
"""SQL: a minute's activity source from all its rows (two partial records of one minute: the loader's rule,
collectors/nvml.py activity_source): 'gpm' when any reading had GPM values, else 'gpu_util' when one had
GPU_UTIL, else null. `_m` is the window of one GPU-minute."""

HOURLY_EXTRA = ("minutes", "minute_mask")
"""Columns only gpu_samples_hourly has besides its key: minutes that had a row, and which (bit k = minute k)."""

INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER")
MINUTE_US = 60_000_000
HOUR_US = 3_600_000_000
MACRO_COMMENT = "slurmscope rollup sha256:"
"""Comment of the generated macros (not the sql/ files' checksum prefix, which db.sync_definitions owns)."""
MACROS = ("gpu_rollup_boundary", "gpu_minutes", "gpu_hours")


def hour_of(ts: str) -> str:
    """SQL: the UTC hour of a TIMESTAMPTZ expression, whatever the session's TimeZone."""
    return f"to_timestamp(CAST(epoch_us({ts}) // {HOUR_US} * 3600 AS DOUBLE))"


def minute_of_hour(ts: str) -> str:
    return f"CAST(epoch_us({ts}) // {MINUTE_US} % 60 AS INTEGER)"


def _q(name: str) -> str:
    return '"' + name + '"'


def segment_sql(source: str) -> str:
    """SQL: the minute rows of `source` with `jobs`: the whole-GPU jobs of gpu_jobs whose intervals overlap the
    minute (an open interval runs on), each marked `<` when its interval starts inside the minute and `>`
    when it ends inside it, sorted and comma-separated ('' when none). The minutes a job held only in part
    so stay rows of their own, and pro-rating them by the seconds held (efficiency, cost) stays exact."""
    inf = "CAST('infinity' AS TIMESTAMPTZ)"
    end = f"coalesce(j.interval_end, {inf})"
    mark = (
        "j.job_id || CASE WHEN j.interval_start > s.minute THEN '<' ELSE '' END"
        f" || CASE WHEN {end} < s.minute + INTERVAL 1 MINUTE THEN '>' ELSE '' END"
    )
    return (
        f"SELECT s.*, coalesce((SELECT array_to_string(list_sort(list_distinct(list({mark}))), ',')"  # noqa: S608 - source is SQL built in this package
        " FROM gpu_jobs j WHERE j.cluster = s.cluster AND j.node = s.node AND j.gpu_uuid = s.gpu_uuid"
        " AND coalesce(j.mig_instance, '') = '' AND j.interval_start < s.minute + INTERVAL 1 MINUTE"
        f" AND {end} > s.minute), '') AS jobs FROM ({source}) s"
    )


EVENT_COLUMNS = (
    "ecc_uncorrected_delta",
    "pcie_replay_delta",
    "nvlink_crc_flit_delta",
    "nvlink_crc_data_delta",
    "nvlink_replay_delta",
    "nvlink_recovery_delta",
)
"""The error counts the health rules judge minute by minute (pipelines/health.py, prepare_samples: DCGM's
per-minute NVLink and PCIe-replay limits, uncorrectable ECC errors as events). A minute that counted any is a
row of its own, so health reads back its counts, its minute and its link settings as they were; a healthy
GPU has none, so this costs rows only where errors were counted."""


def aggregate_sql(
    source: str, order: str = "epoch_us(minute)", *, repeated_minutes: bool = False, ordered_sums: bool = True
) -> str:
    """SQL: `source` (minute-shaped rows: the key, `minute`, `jobs` and the RULES columns) rolled up per GPU,
    UTC hour, jobs and activity source, each minute that counted errors (EVENT_COLUMNS) apart, in
    gpu_samples_hourly's column order. `order` ranks rows for LAST (the greatest wins) and orders the sums:
    a parallel sum of floats adds in whatever order its threads finish, so the same minutes gave sums a few
    ulps apart from one run to the next, and the lake rewrote unchanged months (measured on the demo: 150-285
    of 1,283 hours differed between two runs; ordered, none, at 4x the time of this query). `ordered_sums=False`
    drops the ORDER BY from the sums, which then add in the order the rows arrive: run such a query on one
    thread (`slurmscope.db.setting(con, "threads", 1)`) and that is the order the source is scanned in, the
    same every run and, for minutes stored as they were loaded, the minute order (gpu_hours, for the lake:
    2.5-3x less CPU than ordered sums on two threads, docs/lake.md). `repeated_minutes`: a minute may come in several rows (retention merging a late
    partial minute into its rolled-up hour), so its source and whether it counted errors are worked out over
    all of them (MINUTE_SOURCE)."""
    hit = " OR ".join(f"coalesce({_q(c)}, 0) > 0" for c in EVENT_COLUMNS)
    if repeated_minutes:
        source = (
            f"SELECT * REPLACE ({MINUTE_SOURCE} AS activity_source),"  # noqa: S608 - SQL built in this package
            f" CASE WHEN bool_or({hit}) OVER _m THEN minute END AS _event FROM ({source})"
            " WINDOW _m AS (PARTITION BY cluster, node, gpu_uuid, minute)"
        )
    else:
        source = f"SELECT *, CASE WHEN {hit} THEN minute END AS _event FROM ({source})"  # noqa: S608 - SQL built in this package
    by = f" ORDER BY {order}" if ordered_sums else ""
    parts = [*KEYS, f"{hour_of('minute')} AS hour", "jobs"]
    parts.append("CAST(count(DISTINCT minute) AS INTEGER) AS minutes")
    parts.append(f"bit_or(CAST(1 AS BIGINT) << {minute_of_hour('minute')}) AS minute_mask")
    for col, agg in RULES.items():
        c = _q(col)
        if agg is Agg.SUM:
            parts.append(f"sum({c}{by}) AS {c}")
        elif agg is Agg.MAX:
            parts.append(f"max({c}) AS {c}")
        elif agg is Agg.BIT_OR:
            parts.append(f"bit_or({c}) AS {c}")
        elif agg is Agg.BOOL_OR:
            parts.append(f"bool_or({c}) AS {c}")
        elif agg is Agg.LAST:
            parts.append(f"arg_max({c}, {order}) FILTER (WHERE {c} IS NOT NULL) AS {c}")
        elif agg is Agg.SOURCE:
            parts.append(c)  # a grouping key: a row's minutes all have the same source
        else:
            w = f"CAST(coalesce({_q(weight_of(col))}, 0) AS DOUBLE)"
            weighted = f"sum({w}{by}) FILTER (WHERE {c} IS NOT NULL)"
            parts.append(
                f"CASE WHEN {weighted} > 0 THEN sum({c} * {w}{by}) FILTER (WHERE {c} IS NOT NULL)"
                f" / {weighted} ELSE avg({c}{by}) END AS {c}"
            )
    group = ", ".join([*KEYS, "hour", "jobs", _q("activity_source"), "_event"])
    return f"SELECT {', '.join(parts)} FROM ({source}) GROUP BY {group}"  # noqa: S608 - column names from RULES


def expand_sql(source: str, types: dict[str, str]) -> str:
    """SQL: hourly rows of `source` (gpu_samples_hourly's columns) back as one row per minute that had a row,
    with gpu_samples' columns in `types`' order (gpu_samples' column types, `minute` after the key)."""
    n = "_h.minutes"
    cols = [f"_h.{k}" for k in KEYS] + ["_h.hour + to_minutes(_k) AS minute"]
    for col in (c for c in types if c in RULES):
        agg = RULES[col]
        c = f"_h.{_q(col)}"
        if agg is not Agg.SUM:
            cols.append(f"{c} AS {_q(col)}")
        elif types[col].split("(")[0] in INTEGER_TYPES:
            cols.append(
                f"CAST({c} // {n} + CASE WHEN _i < {c} % {n} THEN 1 ELSE 0 END AS {types[col]}) AS {_q(col)}"
            )
        else:
            cols.append(f"CAST({c} / {n} AS {types[col]}) AS {_q(col)}")
    sampled = "list_filter(range(60), lambda k: (minute_mask >> k) & 1 = 1)"
    return (
        f"SELECT {', '.join(cols)} FROM ("  # noqa: S608 - column names from RULES
        f"SELECT *, unnest({sampled}) AS _k, generate_subscripts({sampled}, 1) - 1 AS _i FROM ({source})) _h"
    )


def macros_sql(types: dict[str, str], hourly_types: dict[str, str]) -> str:
    """The reader macros, generated from RULES and the two tables' column types:

    - `gpu_rollup_boundary(cluster_name)`: the instant before which that cluster's minutes are rolled up
      (-infinity when retention has not run);
    - `gpu_minutes(cluster_name, lo, hi)`: gpu_samples' rows for minutes in [lo, hi), stored minutes at and
      after the boundary, rolled-up hours before it read back as minutes (expand_sql);
    - `gpu_hours(cluster_name, lo, hi)`: gpu_samples_hourly's rows for hours in [lo, hi), stored rollups
      before the boundary, the stored minutes after it rolled up on the fly (aggregate_sql, sums in the
      order the minutes are scanned: read it on one thread, `slurmscope.db.setting(con, "threads", 1)`, for the same bytes every run).

    Each side is filtered by constants and the boundary before anything is expanded or grouped, so DuckDB
    prunes row groups by time on both tables.
    """
    cols = ", ".join(_q(c) for c in types)
    b = "gpu_rollup_boundary(cluster_name)"
    hour_lo = "CAST(lo AS TIMESTAMPTZ) - INTERVAL 1 HOUR"  # hour > this: the hours that end after lo
    hourly = (
        f"SELECT * FROM gpu_samples_hourly WHERE cluster = cluster_name AND hour > {hour_lo}"  # noqa: S608 - column names from RULES
        f" AND hour < hi AND hour < {b}"
    )
    minutes = (
        f"SELECT {cols} FROM gpu_samples WHERE cluster = cluster_name AND minute >= lo AND minute < hi"  # noqa: S608 - column names from RULES
        f" AND minute >= {b}"
    )
    cast = ", ".join(f"CAST({_q(c)} AS {t}) AS {_q(c)}" for c, t in hourly_types.items())
    return f"""
CREATE OR REPLACE MACRO gpu_rollup_boundary(cluster_name) AS coalesce(
    (SELECT max(boundary) FROM retention_state WHERE cluster = cluster_name AND name = 'gpu_samples'),
    CAST('-infinity' AS TIMESTAMPTZ));
CREATE OR REPLACE MACRO gpu_minutes(cluster_name, lo, hi) AS TABLE
    {minutes}
    UNION ALL
    SELECT * FROM ({expand_sql(hourly, types)}) WHERE minute >= lo AND minute < hi;
CREATE OR REPLACE MACRO gpu_hours(cluster_name, lo, hi) AS TABLE
    SELECT {cast} FROM gpu_samples_hourly WHERE cluster = cluster_name AND hour > {hour_lo} AND hour < hi
        AND hour < {b}
    UNION ALL
    SELECT {cast} FROM ({aggregate_sql(segment_sql(f"SELECT {cols} FROM gpu_samples WHERE cluster = cluster_name AND minute > {hour_lo} AND minute < hi AND minute >= {b}"), ordered_sums=False)})
    WHERE hour > {hour_lo} AND hour < hi;
"""  # noqa: S608 - column names and types from RULES and the catalog


def column_types(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    return dict(
        con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?"
            " AND table_schema = 'main' AND table_catalog = current_database() ORDER BY ordinal_position",
            [table],
        ).fetchall()
    )


def sync_macros(con: duckdb.DuckDBPyConnection) -> bool:
    """(Re)create the reader macros when their generated SQL changed (RULES, this module or a column type);
    True when it did.

    They are generated here rather than shipped as sql/ files because they follow RULES and the column types.
    The SQL's checksum is kept as gpu_samples_hourly's comment, so an unchanged database costs two catalog
    lookups (about 3 ms).
    """
    row = con.execute(
        "SELECT comment FROM duckdb_tables() WHERE table_name = 'gpu_samples_hourly' AND schema_name = 'main'"
        " AND database_name = current_database()"
    ).fetchall()
    if not row:
        return False
    types = column_types(con, "gpu_samples")
    missing = [c for c in [*KEYS, "minute", *RULES] if c not in types]
    if missing:
        raise RuntimeError(f"gpu_samples has no column(s) {missing} that slurmscope.rollup.RULES names")
    types = {c: t for c, t in types.items() if c in (*KEYS, "minute", *RULES)}  # the table's order
    sql = macros_sql(types, column_types(con, "gpu_samples_hourly"))
    checksum = MACRO_COMMENT + hashlib.sha256(sql.encode()).hexdigest()
    if row[0][0] == checksum:
        return False
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(sql)
        for name in MACROS:
            kind = "MACRO" if name == "gpu_rollup_boundary" else "MACRO TABLE"
            con.execute(f"COMMENT ON {kind} {name} IS '{checksum}'")  # noqa: S608 - names from MACROS
        con.execute(f"COMMENT ON TABLE gpu_samples_hourly IS '{checksum}'")  # noqa: S608 - a hex digest
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return True
