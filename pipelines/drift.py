"""Drift: signals that something is slowly going wrong, each with a score and the threshold alerts use.

Four families, one row per (as_of, signal, entity):
* GPU behaviour against the fleet at comparable utilisation: a GPU running hotter, drawing different
  power or clocking slower than GPUs of the same model doing the same work is degrading (paste, fans,
  power delivery) long before it throws an XID.
* Per-node error rates (XID events, ECC corrected/uncorrected) against the node's own history.
* Usage, cost, failure rate and wait time against their own trailing baseline.
* Fleet skew: driver/CUDA versions that differ from the fleet, GPUs NVML sees vs GRES configured.

Scores are robust z-scores, (x - median) / (1.4826 * MAD), with a per-signal floor on the scale: the median
and the MAD ignore the outliers that an EWMA would absorb into its baseline (one runaway week would raise an
EWMA for weeks after), need no smoothing constant, and read directly as "how many typical deviations away".
The floor keeps a perfectly flat history (MAD 0) from turning any blip into an infinite score.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

import polars as pl
from slurmscope.pipelines.calendar import DAY_US, HOUR_US, UTC_DT, day_start, local_day
from slurmscope.pipelines.common import with_columns_of
from slurmscope.pipelines.params import Params

NAME = "drift"
MART_TABLES: dict[str, str | None] = {"mart_drift": "as_of"}

HISTORY = (
    "INTERVAL 61 DAY"  # longest trailing baseline read (drift.baseline_days at most 59, plus the day before)
)
JOBS = f"""cluster = $cluster AND coalesce(end_time, $end) >= $start - {HISTORY}
           AND coalesce(start_time, submit_time) < $end"""

SAMPLES = "gpu_minutes($cluster, $start - INTERVAL 2 DAY, $end)"
ONCE = "$batch = 0"
"""The inputs no GPU row needs are read in the first group of nodes only: their signals are computed once (an
empty frame gives no rows) and the jobs queries run once, however many groups the GPU minutes need."""

CALENDAR_SQL = f"""
    SELECT least(min(coalesce(start_time, submit_time)), min(end_time),
                 (SELECT min(minute) FROM gpu_samples WHERE cluster = $cluster
                  AND minute >= $start - INTERVAL 2 DAY AND minute < $end),
                 (SELECT min(hour) FROM gpu_samples_hourly WHERE cluster = $cluster
                  AND hour > $start - INTERVAL 2 DAY - INTERVAL 1 HOUR AND hour < $end)), $end
    FROM jobs WHERE {JOBS}"""  # noqa: S608 - module constants; values are $parameters
"""The instants whose billing day the jobs and fleet queries look up in the runner's `billing_hours` /
`billing_days`: the attempts' and the GPU minutes' (gpu_minutes expands an hour from its start)."""


def _day(us: str, hour: str) -> str:
    """SQL: the billing day (calendar.DayLookup.day) of the instant `us` (epoch microseconds), `hour` being
    its `billing_hours` row joined by `_hour_join`; the division rounds down before 1970 too."""
    local = f"({us} + CASE WHEN {us} >= {hour}.switch THEN {hour}.o1 ELSE {hour}.o0 END)"
    return f"DATE '1970-01-01' + CAST(({local} - ({local} % {DAY_US} + {DAY_US}) % {DAY_US}) // {DAY_US} AS INTEGER)"


def _hour_join(us: str, hour: str) -> str:
    """SQL: the `billing_hours` row of the instant `us`, by the same rounded-down division. A LEFT JOIN (every
    instant has its row): DuckDB plans the inner join of a registered table twice as slowly."""
    h = f"(({us}) - (({us}) % {HOUR_US} + {HOUR_US}) % {HOUR_US}) // {HOUR_US}"
    return f"LEFT JOIN billing_hours {hour} ON {hour}.h = {h}"


# (signal, column, direction: +1 higher is worse, -1 lower is worse, 0 either way, scale floor, unit)
GPU_METRICS = [
    ("gpu_temperature_vs_fleet", "temp_gpu_max_celsius", 1, 1.0, "C"),
    ("gpu_power_vs_fleet", "power_mean_watts", 0, 5.0, "W"),
    ("gpu_sm_clock_vs_fleet", "sm_clock_mean_mhz", -1, 15.0, "MHz"),
]


def _binned_minutes(nodes: str) -> str:
    """SQL: the window's GPU minutes with a utilisation, with their billing day and utilisation bin and the
    metrics as DOUBLE, of the nodes for which the SQL condition `nodes` holds."""
    return f"""
        SELECT cluster, node, gpu_uuid, model, {_day("us", "h")} AS day, util_bin,
               {", ".join(c for _, c, *_ in GPU_METRICS)}
        FROM (
            SELECT cluster, node, gpu_uuid, coalesce(model, '') AS model, epoch_us(minute) AS us,
                   least(greatest(floor(CAST(util_gpu_mean AS DOUBLE) / $util_bin_percent), 0),
                         100.0 / $util_bin_percent) AS util_bin,
                   {", ".join(f"CAST({c} AS DOUBLE) AS {c}" for _, c, *_ in GPU_METRICS)}
            FROM {SAMPLES} WHERE util_gpu_mean IS NOT NULL AND {nodes}
        ) {_hour_join("us", "h")}"""  # noqa: S608 - module constants; `nodes` is a condition from this module


_GPU_MEDIANS = ", ".join(
    f"median({c}) AS value_{c}, median(fleet_{c}) FILTER (WHERE {c} IS NOT NULL) AS fleet_{c}, "
    f"median({c} - fleet_{c}) AS dev_{c}, count({c}) AS n_{c}"
    for _, c, *_ in GPU_METRICS
)

INPUTS: dict[str, str] = {
    # The fleet medians over every node's minutes, read once for every group: per billing day (local_day), model
    # and utilisation bin; DuckDB's median interpolates the middle two values as Polars' does
    "gpu_fleet": f"""
        SELECT cluster, day, model, util_bin, {", ".join(f"median({c}) AS {c}" for _, c, *_ in GPU_METRICS)}
        FROM ({_binned_minutes("true")}) GROUP BY ALL""",  # noqa: S608 - module constants; values are $parameters
    # Each GPU's deviation from those medians, reduced in DuckDB to a row per GPU and billing day: per signal,
    # the median of its minutes' values, of their fleet medians and of the differences, and the minutes with a
    # value. Reading the minutes into Polars for this instead took twice the CPU seconds.
    "gpu_deviations": f"""
        WITH f AS (
            SELECT cluster, day, model, util_bin, {", ".join(f"{c} AS fleet_{c}" for _, c, *_ in GPU_METRICS)}
            FROM input_gpu_fleet
        )
        SELECT cluster, day, node, gpu_uuid, model, {_GPU_MEDIANS}
        FROM ({_binned_minutes("$node_group")}) JOIN f USING (cluster, day, model, util_bin)
        GROUP BY ALL""",  # noqa: S608 - module constants; values are $parameters
    # error counters are sparse: only minutes that counted something; before retention's boundary, the
    # rolled-up hours that did, dated at the hour (node_errors sums them per node and day)
    "gpu_errors": f"""
        SELECT cluster, node, minute, coalesce(ecc_corrected_delta, 0) AS ecc_corrected,
               coalesce(ecc_uncorrected_delta, 0) AS ecc_uncorrected
        FROM gpu_samples WHERE cluster = $cluster AND minute >= $start - {HISTORY} AND minute < $end
          AND minute >= gpu_rollup_boundary($cluster)
          AND (coalesce(ecc_corrected_delta, 0) > 0 OR coalesce(ecc_uncorrected_delta, 0) > 0) AND {ONCE}
        UNION ALL
        SELECT cluster, node, hour AS minute, coalesce(ecc_corrected_delta, 0) AS ecc_corrected,
               coalesce(ecc_uncorrected_delta, 0) AS ecc_uncorrected
        FROM gpu_samples_hourly WHERE cluster = $cluster AND hour >= $start - {HISTORY} AND hour < $end
          AND hour < gpu_rollup_boundary($cluster)
          AND (coalesce(ecc_corrected_delta, 0) > 0 OR coalesce(ecc_uncorrected_delta, 0) > 0) AND {ONCE}""",  # noqa: S608 - HISTORY and column lists are module constants; values are $parameters
    "gpu_events": f"""
        SELECT cluster, node, event_time, event_type, xid FROM gpu_events
        WHERE cluster = $cluster AND event_time >= $start - {HISTORY} AND event_time < $end AND {ONCE}""",  # noqa: S608 - HISTORY and column lists are module constants; values are $parameters
    "gpu_inventory": f"""
        SELECT cluster, node, gpu_uuid, seen_at, model, driver_version, cuda_version FROM gpu_inventory
        WHERE cluster = $cluster AND {ONCE}
        QUALIFY seen_at >= max(seen_at) OVER (PARTITION BY node) - INTERVAL 1 HOUR""",  # noqa: S608 - module constants; values are $parameters
    "node_states": f"""
        SELECT cluster, node, snapshot_time, gpus_total FROM node_states
        WHERE cluster = $cluster AND {ONCE}
        QUALIFY snapshot_time = max(snapshot_time) OVER (PARTITION BY node)""",  # noqa: S608 - module constants; values are $parameters
    # Attempts never reach Polars: DuckDB reduces them to the few thousand (entity, billing day) values the
    # trends score. $tz is the billing zone; $end is the run's now (drift is not SLICEABLE).
    "gpu_hours": f"""
        WITH a AS (  -- [s, e) in epoch microseconds
            SELECT coalesce(account, '') AS account, gpus, epoch_us(start_time) AS s,
                   epoch_us(least(coalesce(end_time, $end), $end)) AS e
            FROM jobs WHERE {JOBS} AND gpus > 0 AND start_time IS NOT NULL AND {ONCE}
        ), k AS (
            SELECT account, gpus, s, e, {_day("s", "h0")} AS first, {_day("e - 1", "h1")} AS last
            FROM a {_hour_join("s", "h0")} {_hour_join("e - 1", "h1")}
            WHERE e > s
        ), parts AS (  -- common.split_calendar: a row per attempt and billing day it overlaps
            SELECT *, first + CAST(unnest(range(last - first + 1)) AS INTEGER) AS day FROM k
        ), pieces AS (
            SELECT p.account, p.day, p.gpus, CASE WHEN p.first = p.last THEN p.e - p.s
                   ELSE least(p.e, m1.start_us) - greatest(p.s, m0.start_us) END AS us
            FROM parts p LEFT JOIN billing_days m0 ON m0.day = p.day LEFT JOIN billing_days m1 ON m1.day = p.day + 1
        )  -- an exact integer sum: the same GPU-hours whatever order the rows come in
        SELECT $cluster AS cluster, account, day, CAST(sum(us * CAST(gpus AS HUGEINT)) AS DOUBLE) / 3.6e9 AS x
        FROM pieces WHERE us > 0 GROUP BY ALL""",  # noqa: S608 - module constants; values are $parameters
    "failures": f"""
        SELECT cluster, coalesce("partition", '') AS "partition", {_day("epoch_us(end_time)", "h")} AS day,
               count(*) FILTER (WHERE slurm_job_failure_class(state, state_raw, start_time) <> 'none') / count(*) AS x
        FROM jobs {_hour_join("epoch_us(end_time)", "h")}
        WHERE {JOBS} AND end_time <= $end AND {ONCE} GROUP BY ALL""",  # noqa: S608 - module constants; values are $parameters
    "waits": f"""
        SELECT cluster, coalesce("partition", '') AS "partition", {_day("epoch_us(start_time)", "h")} AS day,
               median((epoch_us(start_time) - epoch_us(coalesce(eligible_time, submit_time))) // 1000000) AS x
        FROM jobs {_hour_join("epoch_us(start_time)", "h")}
        WHERE {JOBS} AND start_time <= $end AND {ONCE} GROUP BY ALL""",  # noqa: S608 - module constants; values are $parameters
    "cost": f"""
        SELECT cluster, day, account, sum(cost_usd) AS cost_usd FROM mart_cost_daily
        WHERE cluster = $cluster AND day >= CAST($start - {HISTORY} AS DATE) AND {ONCE}
        GROUP BY ALL""",  # noqa: S608 - HISTORY and column lists are module constants; values are $parameters
}
BATCH_INPUTS = ("gpu_deviations",)
BATCH_ROWS_SQL = f"SELECT count(*) FROM {SAMPLES}"  # noqa: S608 - module constants; values are $parameters
BATCH_ROWS = 1_000_000
"""GPU minutes judged at once: DuckDB's median keeps every value it is given (about 0.4 GB a million minutes,
it cannot spill them), so a fleet runs per group of nodes, each comparing its GPUs' minutes with the fleet
medians that `gpu_fleet` computes once over every node's."""

SCHEMA = {
    "cluster": pl.String,
    "as_of": UTC_DT,
    "signal": pl.String,
    "entity_type": pl.String,
    "entity": pl.String,
    "node": pl.String,
    "value": pl.Float64,
    "baseline": pl.Float64,
    "score": pl.Float64,
    "threshold": pl.Float64,
    "breached": pl.Boolean,
    "method": pl.String,
    "detail": pl.String,
}
MAD_TO_SIGMA = 1.4826


def settings(params: Params) -> dict[str, Any]:
    """The drift config section with the run's now, billing zone and window start (None: a full run)."""
    return {
        **asdict(params.drift),
        "now": params.now,
        "start": None if params.full else params.start,
        "tz": params.tz,
    }


# ---------------------------------------------------------------------------------------------------------
# Small expressions


def day_as_of(day: pl.Expr, tz: str, now: datetime) -> pl.Expr:
    """A day's rows are as of its end (local midnight); today's as of `now`."""
    return pl.min_horizontal(day_start(day + pl.duration(days=1), tz), pl.lit(now, dtype=UTC_DT))


def first_day(st: dict[str, Any]) -> pl.Expr:
    """First billing day an incremental run rewrites. Its window starts at a local midnight and the runner
    deletes the rows as of that instant or later, which includes the day before (as of its end)."""
    return local_day(pl.lit(st["start"], dtype=UTC_DT), st["tz"]) - pl.duration(days=1)


def robust_z(x: pl.Expr, median: pl.Expr, mad: pl.Expr, floor: pl.Expr | float) -> pl.Expr:
    """(x - median) / max(1.4826 * MAD, floor)."""
    scale = pl.max_horizontal(mad * MAD_TO_SIGMA, floor if isinstance(floor, pl.Expr) else pl.lit(floor))
    return (x - median) / scale


def directed(z: pl.Expr, direction: int) -> pl.Expr:
    """Score where larger is worse: +z, -z, or |z| for two-sided signals."""
    return z if direction > 0 else (-z if direction < 0 else z.abs())


def rows(frame: pl.LazyFrame, **cols: pl.Expr | str | float | None) -> pl.LazyFrame:
    """Project `frame` to the mart's columns (literal strings become constants)."""
    exprs = []
    for name, dtype in SCHEMA.items():
        value = cols.get(name, pl.col(name) if name in ("cluster", "as_of") else None)
        if isinstance(value, pl.Expr):
            exprs.append(value.cast(dtype).alias(name))
        else:
            exprs.append(pl.lit(value, dtype).alias(name))
    return frame.select(exprs)


# ---------------------------------------------------------------------------------------------------------
# GPU behaviour against the fleet


def gpu_deviations(wide: pl.LazyFrame, st: dict[str, Any]) -> pl.LazyFrame:
    """A row per GPU, billing day and signal from `gpu_deviations`' row per GPU and day (its median value, the
    median fleet median of its minutes, its median deviation from that, its minutes), for GPUs with at least
    drift.min_gpu_minutes minutes of the signal."""
    keys = ["cluster", "day", "node", "gpu_uuid", "model"]
    return pl.concat(
        [
            wide.select(
                *keys,
                pl.col(f"value_{c}").alias("value"),
                pl.col(f"fleet_{c}").alias("fleet"),
                pl.col(f"dev_{c}").alias("dev"),
                pl.col(f"n_{c}").alias("n"),
                signal=pl.lit(signal),
            ).filter((pl.col("n") > 0) & (pl.col("n") >= int(st["min_gpu_minutes"])))
            for signal, c, *_ in GPU_METRICS
        ]
    )


def gpu_vs_fleet(deviations: pl.LazyFrame, st: dict[str, Any]) -> pl.LazyFrame:
    """Each GPU's deviation (`gpu_deviations`, of every group of nodes) scored against the spread of those
    deviations across the GPUs of its model that day."""
    tz, now = st["tz"], st["now"]
    fleet = ["cluster", "day", "model"]
    thr = float(st["gpu_z_threshold"])
    out = []
    for signal, _, direction, floor, unit in GPU_METRICS:
        scored = (
            deviations.filter(pl.col("signal") == signal)
            .with_columns(center=pl.col("dev").median().over(fleet), gpus=pl.len().over(fleet))
            .with_columns(mad=(pl.col("dev") - pl.col("center")).abs().median().over(fleet))
            .filter(pl.col("gpus") >= int(st["min_fleet_gpus"]))
            .with_columns(
                score=directed(robust_z(pl.col("dev"), pl.col("center"), pl.col("mad"), floor), direction),
                as_of=day_as_of(pl.col("day"), tz, now),
            )
        )
        out.append(
            rows(
                scored,
                signal=signal,
                entity_type="gpu",
                entity=pl.col("gpu_uuid"),
                node=pl.col("node"),
                value=pl.col("value"),
                baseline=pl.col("fleet"),
                score=pl.col("score"),
                threshold=thr,
                breached=pl.col("score") > thr,
                method="robust_z_fleet_same_util",
                detail=pl.format(
                    "{} median {} {} vs fleet {} at the same utilisation ({} GPUs)",
                    pl.col("model"),
                    pl.col("value").round(1),
                    pl.lit(unit),
                    pl.col("fleet").round(1),
                    pl.col("gpus"),
                ),
            )
        )
    return pl.concat(out)


# ---------------------------------------------------------------------------------------------------------
# Trailing baselines


def trailing_baseline(daily: pl.LazyFrame, keys: list[str], days: int) -> pl.LazyFrame:
    """For each (keys, day, x): median, MAD and count of x over the `days` days before `day` (the rows of
    `daily` on those days; a dense input makes absent days count as zeros)."""
    lagged = (
        daily.select(*keys, "day")
        .with_columns(lag=pl.int_ranges(1, days + 1))
        .explode("lag")
        .with_columns(past=pl.col("day") - pl.duration(days=pl.col("lag")))
        .join(
            daily.select(*keys, pl.col("day").alias("past"), pl.col("x").alias("px")),
            on=[*keys, "past"],
        )
    )
    stats = (
        lagged.with_columns(med=pl.col("px").median().over(*keys, "day"))
        .group_by(*keys, "day")
        .agg(
            pl.col("med").first().alias("median"),
            (pl.col("px") - pl.col("med")).abs().median().alias("mad"),
            pl.len().alias("n"),
        )
    )
    return daily.join(stats, on=[*keys, "day"], how="left")


def dense_days(entities: pl.LazyFrame, data: pl.LazyFrame, st: dict[str, Any]) -> pl.LazyFrame:
    """Every entity on every local day up to today, from the baseline before the window start but not
    before the first day in `data`, so that days without events count as zeros."""
    tz, now = st["tz"], st["now"]
    today = local_day(pl.lit(now, dtype=UTC_DT) - pl.duration(microseconds=1), tz)  # the day now is in
    # Days before the first day with data are "not collected yet", not zeros: a full rebuild and an
    # incremental run must see the same baseline.
    firsts = data.group_by("cluster").agg(pl.col("day").min().alias("first"))
    if st["start"] is not None:
        first = first_day(st) - pl.duration(days=int(st["baseline_days"]))
        firsts = firsts.with_columns(first=pl.max_horizontal("first", first))
    return (
        entities.join(firsts, on="cluster")
        .with_columns(day=pl.date_ranges("first", today))
        .explode("day")
        .drop("first")
    )


def scored_trend(
    daily: pl.LazyFrame,
    keys: list[str],
    st: dict[str, Any],
    *,
    signal: str,
    entity_type: str,
    entity: pl.Expr,
    node: pl.Expr | None,
    direction: int,
    floor: pl.Expr,
    threshold: float,
    method: str,
    unit: str,
    keep: pl.Expr | None = None,
) -> pl.LazyFrame:
    """Rows for days inside the window whose baseline has at least drift.min_baseline_days values
    (and, for sparse counts, only days with events plus today: `keep`)."""
    tz, now = st["tz"], st["now"]
    b = trailing_baseline(daily, keys, int(st["baseline_days"]))
    if st["start"] is not None:
        b = b.filter(pl.col("day") >= first_day(st))
    if keep is not None:
        b = b.filter(keep)
    b = b.filter(pl.col("n") >= int(st["min_baseline_days"])).with_columns(
        score=directed(robust_z(pl.col("x"), pl.col("median"), pl.col("mad"), floor), direction),
        as_of=day_as_of(pl.col("day"), tz, now),
    )
    return rows(
        b,
        signal=signal,
        entity_type=entity_type,
        entity=entity,
        node=node,
        value=pl.col("x"),
        baseline=pl.col("median"),
        score=pl.col("score"),
        threshold=threshold,
        breached=pl.col("score") > threshold,
        method=method,
        detail=pl.format(
            "{} {} vs median {} over the previous {} days",
            pl.col("x").round(3),
            pl.lit(unit),
            pl.col("median").round(3),
            pl.col("n"),
        ),
    )


def node_errors(
    errors: pl.LazyFrame, events: pl.LazyFrame, inventory: pl.LazyFrame, st: dict[str, Any]
) -> pl.LazyFrame:
    """XID events and ECC error counts per node and day against the node's own trailing days."""
    tz = st["tz"]
    thr = float(st["error_z_threshold"])
    nodes = pl.concat(
        [
            inventory.select("cluster", "node"),
            errors.select("cluster", "node"),
            events.select("cluster", "node"),
        ]
    ).unique()
    counts = {
        "node_xid_events": events.filter(pl.col("event_type") == "xid")
        .group_by("cluster", "node", local_day(pl.col("event_time"), tz).alias("day"))
        .agg(pl.len().cast(pl.Float64).alias("x")),
        "node_ecc_corrected": errors.group_by(
            "cluster", "node", local_day(pl.col("minute"), tz).alias("day")
        ).agg(pl.col("ecc_corrected").sum().cast(pl.Float64).alias("x")),
        "node_ecc_uncorrected": errors.group_by(
            "cluster", "node", local_day(pl.col("minute"), tz).alias("day")
        ).agg(pl.col("ecc_uncorrected").sum().cast(pl.Float64).alias("x")),
    }
    today = local_day(pl.lit(st["now"], dtype=UTC_DT) - pl.duration(microseconds=1), tz)
    out = []
    for signal, c in counts.items():
        grid = dense_days(nodes, c, st)
        daily = grid.join(c, on=["cluster", "node", "day"], how="left").with_columns(
            pl.col("x").fill_null(0.0)
        )
        # counts: the scale floor is sqrt(median) (Poisson), at least 0.5 so a clean history still needs
        # thr/2 events in a day to breach
        floor = pl.max_horizontal(pl.col("median").sqrt(), pl.lit(0.5))
        scored = scored_trend(
            daily,
            ["cluster", "node"],
            st,
            signal=signal,
            entity_type="node",
            entity=pl.col("node"),
            node=pl.col("node"),
            direction=1,
            floor=floor,
            threshold=thr,
            method="robust_z_own_history",
            unit="per day",
            keep=(pl.col("x") > 0) | (pl.col("day") == today),
        )
        out.append(scored)
    return pl.concat(out)


def usage_trends(
    gpu: pl.LazyFrame, failure: pl.LazyFrame, wait: pl.LazyFrame, cost: pl.LazyFrame, st: dict[str, Any]
) -> pl.LazyFrame:
    """GPU-hours and cost per account, failure rate and median wait per partition, per day, against
    their trailing baselines (the daily values come from the INPUTS: `gpu_hours`, `failures`, `waits`)."""
    thr = float(st["trend_z_threshold"])
    accounts = pl.concat([gpu.select("cluster", "account"), cost.select("cluster", "account")]).unique()
    days = pl.concat([gpu.select("cluster", "day"), cost.select("cluster", "day")])
    grid = dense_days(accounts, days, st)
    gpu_daily = grid.join(gpu, on=["cluster", "account", "day"], how="left").with_columns(
        pl.col("x").fill_null(0.0)
    )
    cost_daily = grid.join(
        cost.select("cluster", "account", "day", pl.col("cost_usd").alias("x")),
        on=["cluster", "account", "day"],
        how="left",
    ).with_columns(pl.col("x").fill_null(0.0))
    rel = pl.col("median").abs() * 0.1
    acc, part = ["cluster", "account"], ["cluster", "partition"]
    return pl.concat(
        [
            scored_trend(
                gpu_daily,
                acc,
                st,
                signal="account_gpu_hours",
                entity_type="account",
                entity=pl.col("account"),
                node=None,
                direction=0,
                floor=pl.max_horizontal(rel, pl.lit(1.0)),
                threshold=thr,
                method="robust_z_trailing",
                unit="GPU-h",
            ),
            scored_trend(
                cost_daily,
                acc,
                st,
                signal="account_cost_usd",
                entity_type="account",
                entity=pl.col("account"),
                node=None,
                direction=0,
                floor=pl.max_horizontal(rel, pl.lit(1.0)),
                threshold=thr,
                method="robust_z_trailing",
                unit="USD",
            ),
            scored_trend(
                failure,
                part,
                st,
                signal="partition_failure_rate",
                entity_type="partition",
                entity=pl.col("partition"),
                node=None,
                direction=1,
                floor=pl.lit(0.02),
                threshold=thr,
                method="robust_z_trailing",
                unit="ratio",
            ),
            scored_trend(
                wait,
                part,
                st,
                signal="partition_wait_p50_seconds",
                entity_type="partition",
                entity=pl.col("partition"),
                node=None,
                direction=1,
                floor=pl.max_horizontal(rel, pl.lit(60.0)),
                threshold=thr,
                method="robust_z_trailing",
                unit="s",
            ),
        ]
    )


# ---------------------------------------------------------------------------------------------------------
# Fleet skew


def fleet_skew(inventory: pl.LazyFrame, node_states: pl.LazyFrame, st: dict[str, Any]) -> pl.LazyFrame:
    """Per node, now: share of its GPUs whose driver / CUDA version differs from the fleet's most common,
    and the GPU count NVML sees against the GRES count Slurm has configured."""
    now = pl.lit(st["now"], dtype=UTC_DT)
    inv = inventory.unique(["cluster", "node", "gpu_uuid"], keep="last")
    out = []
    for signal, col in (("driver_version_skew", "driver_version"), ("cuda_version_skew", "cuda_version")):
        known = inv.filter(pl.col(col).is_not_null())
        mode = (
            known.group_by("cluster", col)
            .agg(pl.len().alias("gpus"))
            .sort(["gpus", col], descending=[True, False])
            .group_by("cluster", maintain_order=True)
            .first()
            .select("cluster", pl.col(col).alias("fleet"))
        )
        per_node = (
            known.join(mode, on="cluster")
            .group_by("cluster", "node")
            .agg(
                odd=(pl.col(col) != pl.col("fleet")).mean(),
                versions=pl.col(col).unique().sort().str.join(","),
                fleet=pl.col("fleet").first(),
            )
            .with_columns(as_of=now)
        )
        out.append(
            rows(
                per_node,
                signal=signal,
                entity_type="node",
                entity=pl.col("node"),
                node=pl.col("node"),
                value=pl.col("odd"),
                baseline=0.0,
                score=pl.col("odd"),
                threshold=0.0,
                breached=pl.col("odd") > 0,
                method="fleet_mode",
                detail=pl.format("{} vs fleet {}", pl.col("versions"), pl.col("fleet")),
            )
        )
    nvml = inv.group_by("cluster", "node").agg(pl.col("gpu_uuid").n_unique().cast(pl.Float64).alias("nvml"))
    gres = node_states.group_by("cluster", "node").agg(
        pl.col("gpus_total").max().cast(pl.Float64).alias("gres")
    )
    count = (
        nvml.join(gres, on=["cluster", "node"])
        .filter(pl.col("gres").is_not_null())
        .with_columns(diff=(pl.col("nvml") - pl.col("gres")).abs(), as_of=now)
    )
    out.append(
        rows(
            count,
            signal="gpu_count_nvml_vs_gres",
            entity_type="node",
            entity=pl.col("node"),
            node=pl.col("node"),
            value=pl.col("nvml"),
            baseline=pl.col("gres"),
            score=pl.col("diff"),
            threshold=0.5,
            breached=pl.col("diff") > 0.5,
            method="difference",
            detail=pl.format(
                "NVML sees {} GPUs, GRES configures {}",
                pl.col("nvml").cast(pl.Int64),
                pl.col("gres").cast(pl.Int64),
            ),
        )
    )
    return pl.concat(out)


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    """A group of nodes' partial rows: `deviations` of its GPUs against the fleet, and `signals`, the mart rows
    of the other families, from the inputs only the first group reads (ONCE; empty in the others)."""
    st = settings(params)
    s, d = pl.String, UTC_DT
    errors = with_columns_of(
        frames.get("gpu_errors"),
        {
            "cluster": s,
            "node": s,
            "minute": d,
            "ecc_corrected": pl.Int64,
            "ecc_uncorrected": pl.Int64,
        },
    )
    events = with_columns_of(
        frames.get("gpu_events"),
        {
            "cluster": s,
            "node": s,
            "event_time": d,
            "event_type": s,
            "xid": pl.Int32,
        },
    )
    inventory = with_columns_of(
        frames.get("gpu_inventory"),
        {
            "cluster": s,
            "node": s,
            "gpu_uuid": s,
            "seen_at": d,
            "model": s,
            "driver_version": s,
            "cuda_version": s,
        },
    )
    node_states = with_columns_of(
        frames.get("node_states"),
        {
            "cluster": s,
            "node": s,
            "snapshot_time": d,
            "gpus_total": pl.Int32,
        },
    )
    gpu = with_columns_of(
        frames.get("gpu_hours"), {"cluster": s, "account": s, "day": pl.Date, "x": pl.Float64}
    )
    failure = with_columns_of(
        frames.get("failures"), {"cluster": s, "partition": s, "day": pl.Date, "x": pl.Float64}
    )
    wait = with_columns_of(
        frames.get("waits"), {"cluster": s, "partition": s, "day": pl.Date, "x": pl.Float64}
    )
    cost = with_columns_of(
        frames.get("cost"), {"cluster": s, "day": pl.Date, "account": s, "cost_usd": pl.Float64}
    )
    wide = with_columns_of(
        frames.get("gpu_deviations"),
        {"cluster": s, "day": pl.Date, "node": s, "gpu_uuid": s, "model": s}
        | {
            f"{k}_{c}": pl.Int64 if k == "n" else pl.Float64
            for _, c, *_ in GPU_METRICS
            for k in ("value", "fleet", "dev", "n")
        },
    )
    signals = pl.concat(
        [
            node_errors(errors, events, inventory, st),
            usage_trends(gpu, failure, wait, cost, st),
            fleet_skew(inventory, node_states, st),
        ]
    )
    return {"deviations": gpu_deviations(wide, st), "signals": signals}


def combine(parts: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    """mart_drift: the GPUs of every group scored across the fleet, and the other families' rows."""
    st = settings(params)
    out = pl.concat([gpu_vs_fleet(parts["deviations"], st), parts["signals"]])
    if st["start"] is not None:
        out = out.filter(pl.col("as_of") >= pl.lit(st["start"], dtype=UTC_DT))
    return {"mart_drift": out}
