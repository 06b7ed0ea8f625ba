"""GPU efficiency: per job attempt, what the allocated GPUs actually did; and who holds idle GPUs.

The question sites ask (Princeton's jobstats made it famous): which jobs hold GPUs at ~0% utilisation,
and whose are they? Slurm knows what was allocated, NVML knows what the GPU did; `gpu_jobs` (written by the
prolog mapping, cross-checked with cgroups) says which GPU belonged to which job when. Allocations are cut
into minutes and joined to the per-minute NVML samples of the same GPU, so a GPU shared over time by
several jobs, or two GPUs of one job, are each counted once per minute they were held.

Those minutes grow with the fleet, so a large window runs per group of nodes (runner.node_batches): compute
turns one group's minutes into sums that add up over groups (per attempt, per day and user, per MIG
instance), and combine finishes them into the marts, so a job on GPUs of several nodes is one row.
"""

from __future__ import annotations

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, local_day
from slurmscope.pipelines.common import (
    MIG_INVENTORY_COLUMNS,
    MIG_INVENTORY_SQL,
    activity,
    activity_sources,
    attribute_intervals,
    exploded_mig,
    split_buckets,
    with_columns_of,
    with_samples,
    with_slice_fractions,
)
from slurmscope.pipelines.params import Params

NAME = "efficiency"
MART_TABLES: dict[str, str | None] = {
    "mart_job_efficiency": "alloc_end",
    "mart_idle_gpus_daily": "day",
    "mart_mig_efficiency": "alloc_end",
}
GPU_JOBS_SQL = """
        SELECT cluster, node, gpu_uuid, job_id, interval_start, interval_end,
               coalesce(mig_instance, '') AS mig_instance
        FROM gpu_jobs
        WHERE cluster = $cluster AND interval_start < $end
          AND job_id IN (SELECT job_id FROM gpu_jobs WHERE cluster = $cluster
                         AND coalesce(interval_end, $end) >= $start AND interval_start < $end)"""
"""Every interval of the jobs holding a GPU or a MIG slice at or after the window start (all of a job's
GPUs, so its row is whole once its nodes' groups are combined)."""

INPUTS: dict[str, str] = {
    "gpu_jobs": GPU_JOBS_SQL,
    # The MIG intervals of every node: an attempt's sacct MIG GPUs are shared over all the instances it held
    # (common.with_slice_fractions), not over one group's.
    "mig_intervals": GPU_JOBS_SQL + " AND mig_instance <> ''",
    # Samples back to the earliest of those intervals, so a long job's efficiency covers its whole run
    # (minutes older than retention's boundary read back from their hourly rollups, slurmscope/rollup.py).
    "gpu_samples": """
        SELECT cluster, node, gpu_uuid, minute, samples, util_gpu_mean, util_gpu_max, mem_used_max_bytes,
               energy_joules, sm_active_mean, activity_source
        FROM gpu_minutes($cluster, coalesce((
            SELECT min(interval_start) FROM gpu_jobs
            WHERE cluster = $cluster AND interval_start < $end
              AND job_id IN (SELECT job_id FROM gpu_jobs WHERE cluster = $cluster
                             AND coalesce(interval_end, $end) >= $start AND interval_start < $end)
        ) - INTERVAL 1 MINUTE, $start), $end)""",
    # Only the attempts of the jobs mapped above can be matched (by job_id_raw): a full run would otherwise
    # read and sort every attempt of the history (10M rows, 4 GB) to attribute a few thousand intervals.
    # The regexp is attribute_intervals' extraction (ASCII digits: other digits fail its strict cast, and
    # the run, as before); TRY_CAST keeps this query from failing first.
    "jobs": """
        SELECT cluster, job_id, job_id_raw, attempt, submit_time, start_time, end_time, account, "user", gpus,
               CASE WHEN mig_slices > 0 THEN alloc_tres END AS mig_tres
        FROM jobs WHERE cluster = $cluster AND start_time IS NOT NULL AND start_time < $end
          AND (end_time IS NULL OR end_time >= $start - INTERVAL 1 DAY)
          AND job_id_raw IN (SELECT TRY_CAST(regexp_extract(job_id, '^([0-9]+)', 1) AS BIGINT) FROM gpu_jobs
                             WHERE cluster = $cluster AND coalesce(interval_end, $end) >= $start
                               AND interval_start < $end)""",
    "mig_inventory": MIG_INVENTORY_SQL,
}
BATCH_INPUTS = ("gpu_jobs", "gpu_samples", "mig_inventory")
"""The inputs read per group of nodes: `jobs` has no node (an attempt's row, whole in every group) and
`mig_intervals` is every node's on purpose."""

BATCH_ROWS_SQL = f"""
    WITH iv AS ({GPU_JOBS_SQL})
    SELECT (SELECT count(*) FROM gpu_minutes($cluster,
                coalesce((SELECT min(interval_start) FROM iv) - INTERVAL 1 MINUTE, $start), $end))
         + (SELECT coalesce(sum(ceil(epoch(least(coalesce(interval_end, $end), $end) - interval_start) / 60)), 0)
            FROM iv)"""  # noqa: S608 - GPU_JOBS_SQL is a module constant; values are $parameters
BATCH_ROWS = 2_000_000
"""NVML minutes read plus GPU-minutes held (split_buckets' rows), the two frames the minute join holds, per group
of nodes, so that memory is bounded by this rather than by the fleet. Not yet measured per group: the fleet
benchmark's one-pass peak (4.7 GiB at 1,000 GPUs x 7 days, a window of 4-7 M minutes; docs/benchmarks.md)
puts a group at roughly 0.7-1 GiB."""

GPU_JOBS_SCHEMA = {
    "cluster": pl.String,
    "node": pl.String,
    "gpu_uuid": pl.String,
    "job_id": pl.String,
    "interval_start": UTC_DT,
    "interval_end": UTC_DT,
    "mig_instance": pl.String,
}
"""The gpu_jobs columns the GPU-to-attempt attribution reads (also `slurmscope job`'s)."""

JOB_SCHEMA = {
    "cluster": pl.String,
    "job_id": pl.String,
    "job_id_raw": pl.Int64,
    "attempt": pl.Int32,
    "submit_time": UTC_DT,
    "account": pl.String,
    "user": pl.String,
    "gpus": pl.Int32,
    "util_mean": pl.Float64,
    "util_max": pl.Float64,
    "mem_peak_bytes": pl.Int64,
    "energy_joules": pl.Float64,
    "gpu_seconds": pl.Float64,
    "sampled_gpu_seconds": pl.Float64,
    "idle_gpu_seconds": pl.Float64,
    "zero_util": pl.Boolean,
    "alloc_start": UTC_DT,
    "alloc_end": UTC_DT,
    "sm_active_mean": pl.Float64,
    "useful_gpu_seconds": pl.Float64,
    "gpm_gpu_seconds": pl.Float64,
    "activity_source": pl.String,
    "mig_gpus": pl.Float64,
    "mig_activity": pl.String,
}
IDLE_SCHEMA = {
    "cluster": pl.String,
    "day": pl.Date,
    "account": pl.String,
    "user": pl.String,
    "allocated_gpu_hours": pl.Float64,
    "sampled_gpu_hours": pl.Float64,
    "idle_gpu_hours": pl.Float64,
    "idle_share": pl.Float64,
    "zero_util_jobs": pl.Int64,
}
MIG_SCHEMA = {
    "cluster": pl.String,
    "job_id": pl.String,
    "job_id_raw": pl.Int64,
    "attempt": pl.Int32,
    "submit_time": UTC_DT,
    "account": pl.String,
    "user": pl.String,
    "node": pl.String,
    "gpu_uuid": pl.String,
    "mig_instance": pl.String,
    "gpu_model": pl.String,
    "mig_profile": pl.String,
    "gpu_fraction": pl.Float64,
    "fraction_source": pl.String,
    "held_seconds": pl.Float64,
    "gpu_seconds": pl.Float64,
    "sampled_gpu_seconds": pl.Float64,
    "idle_gpu_seconds": pl.Float64,
    "util_mean": pl.Float64,
    "activity": pl.String,
    "alloc_start": UTC_DT,
    "alloc_end": UTC_DT,
}


def gpu_minutes(intervals: pl.LazyFrame, samples: pl.LazyFrame, threshold: float) -> pl.LazyFrame:
    """One row per (interval, minute) it held the GPU, with that minute's NVML sample when there is one.

    `held` = seconds of the minute inside the interval; a sample's energy is pro-rated by `held`/60.
    `gpu_held` = held × the interval's `gpu_fraction` (1 for a whole GPU, a MIG slice's share of its GPU):
    GPU-seconds. A MIG interval (`mig_instance`) is joined to samples of the MIG device itself, which NVML
    does not give (utilisation is not supported per MIG device, and the agents read GPM per whole GPU): its
    minutes are unsampled, and the parent GPU's activity is not attributed to a slice.
    `idle` = the minute was sampled and its mean utilisation was below `threshold` percent: GPU_UTIL, which is
    the instrument for "no kernel ran". `activity` = SM activity where GPM measured it, else GPU_UTIL
    (common.activity), and `gpm` says which.
    Intervals without `mig_instance` and `gpu_fraction` (a caller reading whole GPUs only) are whole GPUs.
    """
    names = intervals.collect_schema().names()
    if "mig_instance" not in names:
        intervals = intervals.with_columns(pl.lit("").alias("mig_instance"))
    if "gpu_fraction" not in names:
        intervals = intervals.with_columns(pl.lit(1.0).alias("gpu_fraction"))
    slice_ = pl.col("mig_instance") != ""
    m = split_buckets(
        intervals.with_columns(
            pl.col("gpu_uuid").alias("parent_uuid"),
            pl.when(slice_).then(pl.col("mig_instance")).otherwise(pl.col("gpu_uuid")).alias("gpu_uuid"),
        ),
        "interval_start",
        "interval_end",
        60,
        out="minute",
    ).rename({"overlap_seconds": "held"})
    return with_samples(m, samples, ("cluster", "node", "gpu_uuid")).with_columns(
        sampled=pl.col("util_gpu_mean").is_not_null(),
        idle=pl.col("util_gpu_mean") < threshold,
        energy=pl.col("energy_joules") * pl.col("held") / 60.0,
        gpu_held=pl.col("held") * pl.col("gpu_fraction"),
        slice=slice_,
        activity=activity(),
        gpm=(pl.col("activity_source") == "gpm").fill_null(False),
    )


ATTEMPT = ["cluster", "job_id_raw", "submit_time"]
_SUMMED = (
    "gpus",
    "_util_held",
    "energy_joules",
    "_energy_n",
    "gpu_seconds",
    "sampled_gpu_seconds",
    "idle_gpu_seconds",
    "_sm_held",
    "useful_gpu_seconds",
    "gpm_gpu_seconds",
)


def attempt_sums(minutes: pl.LazyFrame) -> pl.LazyFrame:
    """Per attempt, what its mart row is made of (attempt_rows), as sums, counts and extremes that add up over
    groups of nodes: GPU-seconds held (a MIG slice by its fraction), sampled, idle and GPM-measured; held x
    utilisation and held x SM activity, of which the means are made; the useful GPU-seconds (held x activity /
    100 over sampled minutes); energy and its count of rows (none: NULL, not 0); peaks; the span held.
    `gpus` counts whole GPUs (the slices are in mig_gpus, mig_efficiency) and adds up too: a GPU is on one
    node."""
    held = pl.col("gpu_held")
    return (
        minutes.filter(pl.col("submit_time").is_not_null())
        .group_by(ATTEMPT)
        .agg(
            *[pl.col(c).first() for c in ("job_id", "attempt", "account", "user")],
            pl.col("gpu_uuid").filter(~pl.col("slice")).n_unique().cast(pl.Int32).alias("gpus"),
            (pl.col("util_gpu_mean") * held).filter(pl.col("sampled")).sum().alias("_util_held"),
            pl.col("util_gpu_max").max().alias("util_max"),
            pl.col("mem_used_max_bytes").max().cast(pl.Int64).alias("mem_peak_bytes"),
            pl.col("energy").sum().alias("energy_joules"),
            pl.col("energy").count().alias("_energy_n"),
            held.sum().alias("gpu_seconds"),
            held.filter(pl.col("sampled")).sum().alias("sampled_gpu_seconds"),
            held.filter(pl.col("idle")).sum().alias("idle_gpu_seconds"),
            pl.col("interval_start").min().alias("alloc_start"),
            pl.col("interval_end").max().alias("alloc_end"),
            (pl.col("sm_active_mean") * held).filter(pl.col("gpm")).sum().alias("_sm_held"),
            (held * pl.col("activity") / 100.0).filter(pl.col("sampled")).sum().alias("useful_gpu_seconds"),
            held.filter(pl.col("gpm")).sum().alias("gpm_gpu_seconds"),
        )
    )


def attempt_rows(sums: pl.LazyFrame, threshold: float) -> pl.LazyFrame:
    """Per attempt, from the attempt_sums of every group of nodes: time-weighted mean utilisation and SM
    activity (over the GPM-measured seconds), which source the activity came from, and `zero_util` (sampled,
    and no sample of any of its GPUs ever reached the threshold)."""
    agg = sums.group_by(ATTEMPT).agg(
        *[pl.col(c).first() for c in ("job_id", "attempt", "account", "user")],
        *[pl.col(c).sum() for c in _SUMMED],
        pl.col("util_max", "mem_peak_bytes", "alloc_end").max(),
        pl.col("alloc_start").min(),
    )
    return agg.with_columns(
        util_mean=pl.when(pl.col("sampled_gpu_seconds") > 0).then(
            pl.col("_util_held") / pl.col("sampled_gpu_seconds")
        ),
        energy_joules=pl.when(pl.col("_energy_n") > 0).then(pl.col("energy_joules")),
        zero_util=(pl.col("sampled_gpu_seconds") > 0) & (pl.col("util_max").fill_null(0.0) < threshold),
        activity_source=activity_sources(pl.col("gpm_gpu_seconds"), pl.col("sampled_gpu_seconds")),
        sm_active_mean=pl.when(pl.col("gpm_gpu_seconds") > 0).then(
            pl.col("_sm_held") / pl.col("gpm_gpu_seconds")
        ),
    )


def mig_efficiency(minutes: pl.LazyFrame) -> pl.LazyFrame:
    """mart_mig_efficiency: per attempt and MIG instance it held, the slice's fraction of its GPU, its
    seconds and GPU-seconds held, and what samples of the instance itself say (`activity` 'unavailable'
    when there are none: NVML reports no utilisation per MIG device, so nothing is inferred)."""
    keys = ["cluster", "job_id_raw", "submit_time", "mig_instance"]
    gpu_held = pl.col("gpu_held")
    agg = (
        minutes.filter(pl.col("slice") & pl.col("submit_time").is_not_null())
        .group_by(keys)
        .agg(
            *[pl.col(c).first() for c in ("job_id", "attempt", "account", "user", "node")],
            pl.col("parent_uuid").first().alias("gpu_uuid"),
            *[pl.col(c).first() for c in ("gpu_model", "mig_profile", "gpu_fraction", "fraction_source")],
            pl.col("held").sum().alias("held_seconds"),
            gpu_held.sum().alias("gpu_seconds"),
            gpu_held.filter(pl.col("sampled")).sum().alias("sampled_gpu_seconds"),
            gpu_held.filter(pl.col("idle")).sum().alias("idle_gpu_seconds"),
            pl.when(pl.col("held").filter(pl.col("sampled")).sum() > 0)
            .then(
                (pl.col("util_gpu_mean") * pl.col("held")).filter(pl.col("sampled")).sum()
                / pl.col("held").filter(pl.col("sampled")).sum()
            )
            .alias("util_mean"),
            pl.col("held").filter(pl.col("sampled")).sum().alias("_sampled"),
            pl.col("interval_start").min().alias("alloc_start"),
            pl.col("interval_end").max().alias("alloc_end"),
        )
    )
    return agg.with_columns(
        pl.when(pl.col("gpu_fraction").is_null())
        .then(None)
        .otherwise(pl.col("gpu_seconds"))
        .alias("gpu_seconds"),
        slice_activity(pl.col("_sampled"), pl.col("held_seconds")).alias("activity"),
    )


def slice_activity(sampled: pl.Expr, held: pl.Expr) -> pl.Expr:
    """'unavailable' (no sample of the MIG instance), 'sampled' (every held second), else 'partial'."""
    return (
        pl.when(sampled <= 0)
        .then(pl.lit("unavailable"))
        .when(sampled >= held)
        .then(pl.lit("sampled"))
        .otherwise(pl.lit("partial"))
    )


def with_mig(jobs_eff: pl.LazyFrame, slices: pl.LazyFrame) -> pl.LazyFrame:
    """mart_job_efficiency rows with `mig_gpus` (the GPUs its slices add up to) and `mig_activity` (activity
    over all its slices; NULL for an attempt without slices)."""
    keys = ["cluster", "job_id_raw", "submit_time"]
    per_attempt = slices.group_by(keys).agg(
        pl.col("gpu_fraction").sum().alias("mig_gpus"),
        pl.col("_sampled").sum().alias("_s"),
        pl.col("held_seconds").sum().alias("_h"),
    )
    return (
        jobs_eff.join(per_attempt, on=keys, how="left")
        .with_columns(
            pl.when(pl.col("_h").is_not_null())
            .then(slice_activity(pl.col("_s"), pl.col("_h")))
            .alias("mig_activity")
        )
        .drop("_s", "_h")
    )


DAY = ["cluster", "day", "account", "user"]


def day_sums(minutes: pl.LazyFrame, tz: str) -> pl.LazyFrame:
    """GPU-seconds held, sampled and idle per local day, account and user (they add up over groups of nodes)."""
    held = pl.col("gpu_held")
    return (
        minutes.filter(pl.col("submit_time").is_not_null())
        .with_columns(day=local_day(pl.col("minute"), tz))
        .group_by(DAY)
        .agg(
            held.sum().alias("_held"),
            held.filter(pl.col("sampled")).sum().alias("_sampled"),
            held.filter(pl.col("idle")).sum().alias("_idle"),
        )
    )


def idle_daily(sums: pl.LazyFrame, jobs_eff: pl.LazyFrame, tz: str) -> pl.LazyFrame:
    """Allocated and idle GPU-hours per local day, account and user from the day_sums of every group of nodes;
    zero-util jobs by their end day, from the whole attempts (a job is zero-util only if none of its GPUs on
    any node was busy)."""
    daily = sums.group_by(DAY).agg(
        (pl.col("_held").sum() / 3600).alias("allocated_gpu_hours"),
        (pl.col("_sampled").sum() / 3600).alias("sampled_gpu_hours"),
        (pl.col("_idle").sum() / 3600).alias("idle_gpu_hours"),
    )
    zero = (
        jobs_eff.filter(pl.col("zero_util"))
        .with_columns(day=local_day(pl.col("alloc_end"), tz))
        .group_by(DAY)
        .agg(pl.len().cast(pl.Int64).alias("zero_util_jobs"))
    )
    return daily.join(zero, on=DAY, how="left").with_columns(
        pl.col("zero_util_jobs").fill_null(0),
        idle_share=pl.when(pl.col("sampled_gpu_hours") > 0).then(
            pl.col("idle_gpu_hours") / pl.col("sampled_gpu_hours")
        ),
    )


def _mapping(frame: pl.LazyFrame | None) -> pl.LazyFrame:
    return with_columns_of(frame, GPU_JOBS_SCHEMA).with_columns(pl.col("mig_instance").fill_null(""))


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    """One group of nodes' partial rows (combine makes the marts of every group's): `attempts` (attempt_sums),
    `days` (day_sums) and `slices`, mart_mig_efficiency's rows (a MIG instance is one device of one node).
    Without `mig_intervals`, `gpu_jobs` is taken to hold every node's intervals."""
    now, tz = params.now, params.tz
    threshold = float(params.drift.idle_util_percent)
    gpu_jobs = _mapping(frames.get("gpu_jobs"))
    samples = with_columns_of(
        frames.get("gpu_samples"),
        {
            "cluster": pl.String,
            "node": pl.String,
            "gpu_uuid": pl.String,
            "minute": UTC_DT,
            "util_gpu_mean": pl.Float64,
            "util_gpu_max": pl.Float64,
            "mem_used_max_bytes": pl.Int64,
            "energy_joules": pl.Float64,
            "sm_active_mean": pl.Float64,
            "activity_source": pl.String,
        },
    ).select(
        "cluster",
        "node",
        "gpu_uuid",
        "minute",
        "util_gpu_mean",
        "util_gpu_max",
        "mem_used_max_bytes",
        "energy_joules",
        "sm_active_mean",
        "activity_source",
    )
    jobs = with_columns_of(
        frames.get("jobs"),
        {
            "cluster": pl.String,
            "job_id": pl.String,
            "job_id_raw": pl.Int64,
            "attempt": pl.Int32,
            "submit_time": UTC_DT,
            "start_time": UTC_DT,
            "end_time": UTC_DT,
            "account": pl.String,
            "user": pl.String,
            "gpus": pl.Int32,
            "mig_tres": pl.String,
        },
    )
    keys = ["job_id_raw", "submit_time"]
    sacct_slices = (
        exploded_mig(jobs.filter(pl.col("mig_tres").is_not_null()), "mig_tres", params.billing.mig_models)
        .group_by(keys)
        .agg(pl.col("mig_units").sum())
    )
    inventory = with_columns_of(frames.get("mig_inventory"), dict(MIG_INVENTORY_COLUMNS))
    attempts = jobs.drop("mig_tres")
    every_slice = frames.get("mig_intervals")
    intervals = with_slice_fractions(
        attribute_intervals(gpu_jobs, attempts, now),
        inventory,
        sacct_slices,
        None if every_slice is None else attribute_intervals(_mapping(every_slice), attempts, now),
    )
    minutes = gpu_minutes(intervals, samples, threshold).cache()
    return {
        "attempts": attempt_sums(minutes),
        "days": day_sums(minutes, tz),
        "slices": mig_efficiency(minutes),
    }


def combine(parts: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    """mart_job_efficiency (per attempt with mapped GPUs or MIG slices), mart_idle_gpus_daily and
    mart_mig_efficiency (per attempt and MIG instance) from compute's partial rows of every group of nodes."""
    slices = parts["slices"]
    eff = with_mig(attempt_rows(parts["attempts"], float(params.drift.idle_util_percent)), slices).cache()
    return {
        "mart_job_efficiency": eff.select(list(JOB_SCHEMA)).cast(JOB_SCHEMA),
        "mart_idle_gpus_daily": idle_daily(parts["days"], eff, params.tz)
        .select(list(IDLE_SCHEMA))
        .cast(IDLE_SCHEMA),
        "mart_mig_efficiency": slices.select(list(MIG_SCHEMA)).cast(MIG_SCHEMA),
    }
