"""Backfill efficiency: who started the jobs, sdiag deltas, occupancy holes, and wait-time percentiles.

Backfill exists to fill holes: GPUs idle while a job that would fit waits behind a larger one. Slurm's own
record of which scheduler started a job (sacct Flags SchedMain/SchedBackfill/StartReceived) gives the share
started by backfill; a sweep over allocations and node states gives how many idle GPU-seconds there were
while a pending GPU job would have fitted, and how much of that backfill filled. docs/pipelines.md has the
definitions and their approximations.
"""

from __future__ import annotations

import polars as pl
from slurmscope.pipelines.calendar import lookup_of
from slurmscope.pipelines.common import (
    NODE_STATES_SQL,
    UTC_DT,
    clip_interval,
    ensure_columns,
    gpu_class,
    node_intervals,
    split_calendar,
    usage_interval,
)
from slurmscope.pipelines.params import Params

NAME = "backfill"

SLICEABLE = True  # a full rebuild may run as consecutive windows (pipelines.full_slice_days)

MART_TABLES: dict[str, str | None] = {
    "mart_backfill_daily": "day",
    "mart_sched_deltas": "snapshot_time",
    "mart_occupancy": "bucket_start",
    "mart_wait_times": "day",
}

INPUTS: dict[str, str] = {
    # Attempts running or pending at some point of the window.
    "jobs": """
        SELECT submit_time, eligible_time, start_time, end_time, account, "partition", gpus, gpu_type, sched_by
        FROM jobs
        WHERE cluster = $cluster AND (end_time IS NULL OR end_time >= $start)
          AND coalesce(eligible_time, submit_time) < $end""",
    "sched_stats": """
        SELECT * EXCLUDE (cluster, raw_text) FROM sched_stats
        WHERE cluster = $cluster AND snapshot_time >= $start - INTERVAL 2 DAY AND snapshot_time < $end""",
    "node_states": NODE_STATES_SQL,
}

DAILY_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "sched_by": pl.String,
    "jobs": pl.Int64,
    "gpu_hours": pl.Float64,
    "share": pl.Float64,
    "gpu_hours_share": pl.Float64,
}
WAIT_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "account": pl.String,
    "gpu_class": pl.String,
    "gpu_model": pl.String,
    "jobs": pl.Int64,
    "p50_seconds": pl.Float64,
    "p90_seconds": pl.Float64,
    "p99_seconds": pl.Float64,
    "mean_seconds": pl.Float64,
    "max_seconds": pl.Float64,
}
DELTA_COUNTERS = {
    # mart column: sdiag counter (all reset at midnight UTC and on restart, except bf_backfilled_jobs)
    "jobs_submitted": "jobs_submitted",
    "jobs_started": "jobs_started",
    "jobs_completed": "jobs_completed",
    "jobs_canceled": "jobs_canceled",
    "jobs_failed": "jobs_failed",
    "main_cycles": "main_total_cycles",
    "bf_cycles": "bf_total_cycles",
    "bf_backfilled_jobs": "bf_backfilled_jobs",
}
GAUGES = (
    "bf_mean_cycle_us",
    "bf_max_cycle_us",
    "bf_last_cycle_us",
    "bf_depth_mean",
    "bf_last_depth",
    "main_mean_cycle_us",
    "main_max_cycle_us",
    "jobs_pending",
    "jobs_running",
)
DELTA_SCHEMA = {
    "snapshot_time": UTC_DT,
    "prev_snapshot_time": UTC_DT,
    "reset": pl.Boolean,
    "interval_seconds": pl.Float64,
    **{c: pl.Int64 for c in DELTA_COUNTERS},
    **{g: pl.Int64 for g in GAUGES},
}
OCC_SCHEMA = {
    "bucket_start": UTC_DT,
    "partition": pl.String,
    "gpu_model": pl.String,
    "available_gpus": pl.Float64,
    "allocated_gpus": pl.Float64,
    "idle_gpu_seconds": pl.Float64,
    "pending_gpu_jobs": pl.Int64,
    "min_pending_gpus": pl.Int32,
    "hole_gpu_seconds": pl.Float64,
    "backfill_gpu_seconds": pl.Float64,
    "hole_filled_share": pl.Float64,
}


def _norm(jobs: pl.LazyFrame) -> pl.LazyFrame:
    return jobs.with_columns(
        pl.col("partition").fill_null(""),
        pl.col("account").fill_null(""),
        pl.col("gpu_type").fill_null("").alias("gpu_model"),
        pl.col("sched_by").fill_null("unknown"),
        pl.col("gpus").fill_null(0),
    )


def _start_day(lf: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Billing-zone day of each started attempt's start, from the window's first day on."""
    days = lookup_of(params.tz, lf.select(pl.col("start_time").dt.epoch("us").alias("us")))
    return (
        lf.filter(pl.col("start_time").is_not_null())
        .with_columns(days.day_of(pl.col("start_time")).alias("day"))
        .filter(pl.col("day") >= pl.lit(params.start_date))
    )


def backfill_daily(jobs: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Per billing day, partition and sched_by: the attempts started that day (`jobs`) and the GPU-hours that
    attempts held that day (`gpu_hours`: the overlap of [start, end or now) with the day, whatever day they
    started), so that a month's rows add up to the GPU-hours inside the month, as mart_cost_daily charges
    them, and a day that has ended never changes.

    Overlaps are summed in integer GPU-microseconds, so a sum is the same whatever window computed it."""
    j = _norm(jobs).filter(pl.col("start_time").is_not_null())
    keys = ["day", "partition", "sched_by"]
    started = _start_day(j, params).group_by(keys).agg(pl.len().cast(pl.Int64).alias("jobs"))
    held = (
        j.filter(pl.col("gpus") > 0)
        .with_columns(usage_interval(params.now))
        .with_columns(clip_interval("use_start", "use_end", params.start, params.now))
    )
    parts = split_calendar(held, "use_start", "use_end", params.tz, every="1d", out="day")
    micro = (pl.col("overlap_seconds") * 1e6).round().cast(pl.Int64) * pl.col("gpus").cast(pl.Int64)
    hours = (
        parts.filter(pl.col("day") >= pl.lit(params.start_date)).group_by(keys).agg(micro.sum().alias("_us"))
    )
    total_jobs = pl.col("jobs").sum().over("day", "partition")
    total_hours = pl.col("gpu_hours").sum().over("day", "partition")
    out = (
        started.join(hours, on=keys, how="full", coalesce=True)
        .with_columns(pl.col("jobs").fill_null(0), (pl.col("_us").fill_null(0) / 3.6e9).alias("gpu_hours"))
        .with_columns(
            pl.when(total_jobs > 0).then(pl.col("jobs") / total_jobs).alias("share"),
            pl.when(total_hours > 0).then(pl.col("gpu_hours") / total_hours).alias("gpu_hours_share"),
        )
    )
    return ensure_columns(out, DAILY_SCHEMA)


def _sorted_percentile(values: pl.Expr, nulls: pl.Expr, q: float) -> pl.Expr:
    """`percentile` (linear, 'type 7') of a sorted list whose first `nulls` items are null, computed as Polars
    does, to the bit: x[i] + (p − i)·(x[j] − x[i]), p = (non-null count − 1)·q + nulls, i = ⌊p⌋, j = ⌈p⌉.
    One sort per group serves all three percentiles, where each `quantile` would select within the group."""
    pos = (values.list.len() - nulls - 1).cast(pl.Float64) * q + nulls.cast(pl.Float64)
    lo = pos.floor()
    lo_v = values.list.get(lo.cast(pl.Int64), null_on_oob=True)
    hi_v = values.list.get(pos.ceil().cast(pl.Int64), null_on_oob=True)
    return (
        pl.when(values.list.len() == nulls)
        .then(None)
        .when(lo_v == hi_v)
        .then(lo_v)
        .otherwise((pos - lo) * (hi_v - lo_v) + lo_v)
    )


def wait_times(jobs: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Wait = start − eligible (submit when eligible is unknown), seconds, by start day; linear percentiles."""
    j = _start_day(_norm(jobs), params).with_columns(
        ((pl.col("start_time") - pl.coalesce("eligible_time", "submit_time")).dt.total_microseconds() / 1e6)
        .clip(lower_bound=0)
        .alias("wait"),
        gpu_class(pl.col("gpus")).alias("gpu_class"),
    )
    out = (
        j.group_by("day", "partition", "account", "gpu_class", "gpu_model")
        .agg(
            pl.len().cast(pl.Int64).alias("jobs"),
            pl.col("wait").sort().alias("_sorted"),
            pl.col("wait").null_count().alias("_nulls"),
            pl.col("wait").mean().alias("mean_seconds"),
        )
        .with_columns(
            _sorted_percentile(pl.col("_sorted"), pl.col("_nulls"), 0.5).alias("p50_seconds"),
            _sorted_percentile(pl.col("_sorted"), pl.col("_nulls"), 0.9).alias("p90_seconds"),
            _sorted_percentile(pl.col("_sorted"), pl.col("_nulls"), 0.99).alias("p99_seconds"),
            pl.col("_sorted").list.last().alias("max_seconds"),  # nulls sort first
        )
    )
    return ensure_columns(out, WAIT_SCHEMA)


def sched_deltas(stats: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Counter increase between consecutive sdiag snapshots.

    sdiag counters restart at midnight UTC and when slurmctld restarts. A restart between two snapshots is
    seen as a changed `data_since`, or any counter lower than before; a counter then counts from zero, so its
    delta is its current value (the part before the reset, after the previous snapshot, is not recoverable).
    `bf_backfilled_jobs` (since slurmctld start) survives the midnight reset; its own decrease marks a restart.
    """
    s = stats.sort("snapshot_time").with_columns(
        pl.col("snapshot_time").shift(1).alias("prev_snapshot_time"),
        pl.col("data_since").shift(1).alias("_prev_since"),
        *[pl.col(src).shift(1).alias(f"_prev_{src}") for src in DELTA_COUNTERS.values()],
    )
    reset_since = (
        pl.col("data_since").is_not_null()
        & pl.col("_prev_since").is_not_null()
        & (pl.col("data_since") != pl.col("_prev_since"))
    )
    reset_drop = pl.any_horizontal(
        *[
            (pl.col(src) < pl.col(f"_prev_{src}")).fill_null(False)
            for src in DELTA_COUNTERS.values()
            if src != "bf_backfilled_jobs"
        ]
    )
    s = s.with_columns((reset_since | reset_drop).alias("reset"))
    deltas = []
    for col, src in DELTA_COUNTERS.items():
        cur, prev = pl.col(src), pl.col(f"_prev_{src}")
        own_reset = (cur < prev).fill_null(False)
        reset = own_reset if src == "bf_backfilled_jobs" else (pl.col("reset") | own_reset)
        deltas.append(
            pl.when(pl.col("prev_snapshot_time").is_null())
            .then(None)
            .when(reset)
            .then(cur)
            .otherwise(cur - prev)
            .alias(col)
        )
    out = s.with_columns(
        *deltas,
        ((pl.col("snapshot_time") - pl.col("prev_snapshot_time")).dt.total_microseconds() / 1e6).alias(
            "interval_seconds"
        ),
    ).filter(pl.col("snapshot_time") >= pl.lit(params.start, dtype=UTC_DT))
    return ensure_columns(out, DELTA_SCHEMA)


def _sweep(
    intervals: pl.LazyFrame, weights: dict[str, pl.Expr], keys: list[str], bucket: int, *, present: str
) -> pl.LazyFrame:
    """Per key and fixed bucket, ∫ level dt (seconds) for each of `weights`, level = sum of the weight over
    intervals [s, e) open at t; a row only where the `present` integral (a weight ≥ 0) is not zero.

    Integer difference arrays over bucket indexes, not a sweep split into buckets: with B the bucket length,
    each end t (index b = t // B, rem = t − b·B) adds ±w, and a bucket's integral is B·L(b) − Σ ±w·rem over
    its ends, L(b) the level after them. Buckets without an end hold B·L of the previous one. Rows sorted by
    key and bucket need no per-key window: every interval closes in its own key, so the running sum is back
    to 0 at each key's last row. Microsecond integers: the sums are exact. A `present` weight of 1 keeps
    buckets with a level of 0 while an interval is open (availability: 0 usable GPUs on a known-down node is
    a value; no snapshot at all is a gap).
    """
    us = bucket * 1_000_000
    names = list(weights)

    def ends(col: str, sign: int) -> pl.LazyFrame:
        t = pl.col(col).dt.epoch("us")
        return intervals.select(
            *keys,
            (t // us).alias("b"),
            *[(sign * w.cast(pl.Int64)).alias(n) for n, w in weights.items()],
            (t % us).alias("_rem"),
        )

    ev = (
        pl.concat([ends("s", 1), ends("e", -1)], how="vertical")
        .group_by(*keys, "b")
        .agg(
            *[pl.col(n).sum() for n in names],
            *[(pl.col(n) * pl.col("_rem")).sum().alias(f"_r_{n}") for n in names],
        )
        .sort(*keys, "b")
        .with_columns(
            *[pl.col(n).cum_sum().alias(f"_l_{n}") for n in names],
            pl.col("b").shift(-1).alias("_b_next"),
        )
    )
    at_ends = ev.select(*keys, "b", *[(pl.col(f"_l_{n}") * us - pl.col(f"_r_{n}")).alias(n) for n in names])
    between = (
        ev.filter((pl.col(f"_l_{present}") != 0) & (pl.col("_b_next") > pl.col("b") + 1))
        .select(
            *keys,
            pl.int_ranges(pl.col("b") + 1, "_b_next").alias("b"),
            *[(pl.col(f"_l_{n}") * us).alias(n) for n in names],
        )
        .explode("b")
    )
    return (
        pl.concat([at_ends, between], how="vertical")
        .filter(pl.col(present) != 0)
        .select(
            *keys,
            pl.from_epoch(pl.col("b") * us, time_unit="us").dt.replace_time_zone("UTC").alias("bucket_start"),
            *[(pl.col(n) / 1e6) for n in names],
        )
    )


def _pending_cover(pending: pl.LazyFrame, keys: list[str], bucket: int) -> pl.LazyFrame:
    """Per bucket: number of GPU attempts pending at some point in it and the smallest GPU request, via
    bucket-index ranges (+1 at the first bucket, −1 after the last), so long waits cost no explosion."""
    us = bucket * 1_000_000
    p = pending.with_columns(
        (pl.col("s").dt.epoch("us") // us).alias("b0"),
        ((pl.col("e").dt.epoch("us") - 1) // us).alias("b1"),
    )
    ev = (
        pl.concat(
            [
                p.select(*keys, "gpus", pl.col("b0").alias("b"), pl.lit(1, dtype=pl.Int64).alias("d")),
                p.select(*keys, "gpus", (pl.col("b1") + 1).alias("b"), pl.lit(-1, dtype=pl.Int64).alias("d")),
            ],
            how="vertical",
        )
        .group_by(*keys, "gpus", "b")
        .agg(pl.col("d").sum())
    )
    span = ev.group_by(*keys, "gpus").agg(pl.col("b").min().alias("lo"), pl.col("b").max().alias("hi"))
    grid = span.with_columns(pl.int_ranges("lo", "hi").alias("b")).explode("b").drop("lo", "hi")
    cov = (
        grid.join(ev, on=[*keys, "gpus", "b"], how="left")
        .with_columns(pl.col("d").fill_null(0))
        .with_columns(pl.col("d").cum_sum().over([*keys, "gpus"], order_by="b").alias("n"))
        .filter(pl.col("n") > 0)
    )
    return (
        cov.group_by(*keys, "b")
        .agg(
            pl.col("n").sum().cast(pl.Int64).alias("pending_gpu_jobs"),
            pl.col("gpus").min().cast(pl.Int32).alias("min_pending_gpus"),
        )
        .with_columns(
            pl.from_epoch(pl.col("b") * us, time_unit="us").dt.replace_time_zone("UTC").alias("bucket_start")
        )
        .drop("b")
    )


def occupancy(jobs: pl.LazyFrame, node_states: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """mart_occupancy per bucket, partition and GPU model.

    available = GPUs of nodes neither down/drained nor reserved (a node in several partitions counts in
    each); allocated from job attempts; idle = available − allocated; a hole is idle GPU-time in a bucket in
    which a pending GPU attempt of that partition (same model, or untyped) asked for no more GPUs than the
    bucket's mean idle GPUs (partition totals: node packing is not modelled).
    """
    bucket = int(params.pipelines.occupancy_bucket_seconds)
    start, now = params.start, params.now
    now_l = pl.lit(now, dtype=UTC_DT)
    keys = ["partition", "gpu_model"]
    j = _norm(jobs).filter(pl.col("gpus") > 0)
    run = (
        j.filter(pl.col("start_time").is_not_null())
        .with_columns(usage_interval(now))
        .with_columns(clip_interval("use_start", "use_end", start, now))
        .select(*keys, "gpus", "sched_by", pl.col("use_start").alias("s"), pl.col("use_end").alias("e"))
        .filter(pl.col("e") > pl.col("s"))
    )
    # Backfill's GPUs are part of the allocated ones: one pass, and its buckets are alloc's.
    bf_gpus = pl.when(pl.col("sched_by") == "backfill").then(pl.col("gpus")).otherwise(0)
    alloc = _sweep(
        run, {"alloc_gs": pl.col("gpus"), "backfill_gpu_seconds": bf_gpus}, keys, bucket, present="alloc_gs"
    )
    pend = (
        j.select(
            *keys,
            "gpus",
            pl.coalesce("eligible_time", "submit_time").alias("s"),
            pl.min_horizontal(pl.coalesce("start_time", "end_time", now_l), now_l).alias("e"),
        )
        .with_columns(clip_interval("s", "e", start, now))
        .filter(pl.col("e") > pl.col("s"))
    )
    pend_typed = _pending_cover(pend.filter(pl.col("gpu_model") != ""), keys, bucket)
    pend_any = _pending_cover(pend.filter(pl.col("gpu_model") == ""), ["partition"], bucket).rename(
        {"pending_gpu_jobs": "pending_any", "min_pending_gpus": "min_any"}
    )
    iv = node_intervals(node_states, params).with_columns(clip_interval("snapshot_time", "until", start, now))
    iv = (
        iv.with_columns(pl.col("partition").str.split(","))
        .explode("partition")
        .with_columns((pl.col("total") - pl.col("down") - pl.col("reserved")).alias("usable"))
        .select(*keys, "usable", pl.col("snapshot_time").alias("s"), pl.col("until").alias("e"))
        .filter(pl.col("e") > pl.col("s"))
    )
    avail = _sweep(
        iv, {"avail_gs": pl.col("usable"), "_open": pl.lit(1)}, keys, bucket, present="_open"
    ).drop("_open")
    k = [*keys, "bucket_start"]
    occ = (
        alloc.join(avail, on=k, how="full", coalesce=True)
        .join(pend_typed, on=k, how="left")
        .join(pend_any, on=["partition", "bucket_start"], how="left")
        .filter(pl.col("bucket_start") >= pl.lit(start, dtype=UTC_DT))
    )
    idle_gpus = (pl.col("avail_gs") - pl.col("alloc_gs").fill_null(0.0)).clip(lower_bound=0) / bucket
    min_pend = pl.min_horizontal("min_pending_gpus", "min_any")
    occ = (
        occ.with_columns(
            (pl.col("avail_gs") / bucket).alias("available_gpus"),
            (pl.col("alloc_gs").fill_null(0.0) / bucket).alias("allocated_gpus"),
            (idle_gpus * bucket).alias("idle_gpu_seconds"),
            (pl.col("pending_gpu_jobs").fill_null(0) + pl.col("pending_any").fill_null(0)).alias(
                "pending_gpu_jobs"
            ),
            min_pend.alias("min_pending_gpus"),
            pl.col("backfill_gpu_seconds").fill_null(0.0),
        )
        .with_columns(
            pl.when(pl.col("available_gpus").is_null())
            .then(None)
            .when(pl.col("min_pending_gpus").is_not_null() & (pl.col("min_pending_gpus") <= idle_gpus))
            .then(pl.col("idle_gpu_seconds"))
            .otherwise(0.0)
            .alias("hole_gpu_seconds")
        )
        .with_columns(
            pl.when((pl.col("hole_gpu_seconds").fill_null(0.0) + pl.col("backfill_gpu_seconds")) > 0)
            .then(
                pl.col("backfill_gpu_seconds")
                / (pl.col("hole_gpu_seconds").fill_null(0.0) + pl.col("backfill_gpu_seconds"))
            )
            .alias("hole_filled_share")
        )
    )
    return ensure_columns(occ, OCC_SCHEMA)


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    return {
        "mart_backfill_daily": backfill_daily(frames["jobs"], params),
        "mart_sched_deltas": sched_deltas(frames["sched_stats"], params),
        "mart_occupancy": occupancy(frames["jobs"], frames["node_states"], params),
        "mart_wait_times": wait_times(frames["jobs"], params),
    }
