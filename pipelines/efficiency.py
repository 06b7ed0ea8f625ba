"""GPU efficiency: per job attempt, what the allocated GPUs actually did; and who holds idle GPUs.

The question sites ask (Princeton's jobstats made it famous): which jobs hold GPUs at ~0% utilisation,
and whose are they? Slurm knows what was allocated, NVML knows what the GPU did; `gpu_jobs` (written by the
prolog mapping, cross-checked with cgroups) says which GPU belonged to which job when. Allocations are cut
into minutes and joined to the per-minute NVML samples of the same GPU, so a GPU shared over time by
several jobs, or two GPUs of one job, are each counted once per minute they were held.
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
    with_slice_fractions,
)
from slurmscope.pipelines.params import Params

NAME = "efficiency"
MART_TABLES: dict[str, str | None] = {
    "mart_job_efficiency": "alloc_end",
    "mart_idle_gpus_daily": "day",
    "mart_mig_efficiency": "alloc_end",
}
INPUTS: dict[str, str] = {
    # Every interval of the jobs holding a GPU or a MIG slice at or after the window start (all of a job's
    # GPUs, so its row is whole).
    "gpu_jobs": """
        SELECT cluster, node, gpu_uuid, job_id, interval_start, interval_end,
               coalesce(mig_instance, '') AS mig_instance
        FROM gpu_jobs
        WHERE cluster = $cluster AND interval_start < $end
          AND job_id IN (SELECT job_id FROM gpu_jobs WHERE cluster = $cluster
                         AND coalesce(interval_end, $end) >= $start AND interval_start < $end)""",
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
    return m.join(samples, on=["cluster", "node", "gpu_uuid", "minute"], how="left").with_columns(
        sampled=pl.col("util_gpu_mean").is_not_null(),
        idle=pl.col("util_gpu_mean") < threshold,
        energy=pl.col("energy_joules") * pl.col("held") / 60.0,
        gpu_held=pl.col("held") * pl.col("gpu_fraction"),
        slice=slice_,
        activity=activity(),
        gpm=(pl.col("activity_source") == "gpm").fill_null(False),
    )


def job_efficiency(minutes: pl.LazyFrame, threshold: float) -> pl.LazyFrame:
    """Per attempt: time-weighted mean and max utilisation, peak memory, energy, GPU-seconds held (a MIG
    slice by its fraction), idle GPU-seconds and `zero_util` (sampled, and no sample ever reached the
    threshold); the useful GPU-seconds (held x activity / 100 over sampled minutes), the SM activity over the
    GPM-measured minutes and which source the activity came from (whole GPUs only: a slice has no sample);
    `gpus` counts whole GPUs, the slices are in mig_gpus (mig_efficiency)."""
    sampled_held = pl.col("gpu_held").filter(pl.col("sampled"))
    gpm_held = pl.col("gpu_held").filter(pl.col("gpm"))
    keys = ["cluster", "job_id_raw", "submit_time"]
    agg = (
        minutes.filter(pl.col("submit_time").is_not_null())
        .group_by(keys)
        .agg(
            pl.col("job_id").first(),
            pl.col("attempt").first(),
            pl.col("account").first(),
            pl.col("user").first(),
            pl.col("gpu_uuid").filter(~pl.col("slice")).n_unique().cast(pl.Int32).alias("gpus"),
            pl.when(sampled_held.sum() > 0)
            .then(
                (pl.col("util_gpu_mean") * pl.col("gpu_held")).filter(pl.col("sampled")).sum()
                / sampled_held.sum()
            )
            .alias("util_mean"),
            pl.col("util_gpu_max").max().alias("util_max"),
            pl.col("mem_used_max_bytes").max().cast(pl.Int64).alias("mem_peak_bytes"),
            pl.col("energy").sum().alias("energy_joules"),
            pl.col("energy").count().alias("_energy_n"),
            pl.col("gpu_held").sum().alias("gpu_seconds"),
            sampled_held.sum().alias("sampled_gpu_seconds"),
            pl.col("gpu_held").filter(pl.col("idle")).sum().alias("idle_gpu_seconds"),
            pl.col("util_gpu_max").max().alias("_peak"),
            pl.col("interval_start").min().alias("alloc_start"),
            pl.col("interval_end").max().alias("alloc_end"),
            (pl.col("sm_active_mean") * pl.col("gpu_held")).filter(pl.col("gpm")).sum().alias("_sm_held"),
            (pl.col("gpu_held") * pl.col("activity") / 100.0)
            .filter(pl.col("sampled"))
            .sum()
            .alias("useful_gpu_seconds"),
            gpm_held.sum().alias("gpm_gpu_seconds"),
        )
    )
    return agg.with_columns(
        energy_joules=pl.when(pl.col("_energy_n") > 0).then(pl.col("energy_joules")),
        zero_util=(pl.col("sampled_gpu_seconds") > 0) & (pl.col("_peak").fill_null(0.0) < threshold),
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


def idle_daily(minutes: pl.LazyFrame, jobs_eff: pl.LazyFrame, tz: str) -> pl.LazyFrame:
    """Allocated and idle GPU-hours per local day, account and user; zero-util jobs by their end day."""
    day = local_day(pl.col("minute"), tz).alias("day")
    keys = ["cluster", "day", "account", "user"]
    daily = (
        minutes.filter(pl.col("submit_time").is_not_null())
        .with_columns(day)
        .group_by(keys)
        .agg(
            (pl.col("gpu_held").sum() / 3600).alias("allocated_gpu_hours"),
            (pl.col("gpu_held").filter(pl.col("sampled")).sum() / 3600).alias("sampled_gpu_hours"),
            (pl.col("gpu_held").filter(pl.col("idle")).sum() / 3600).alias("idle_gpu_hours"),
        )
    )
    zero = (
        jobs_eff.filter(pl.col("zero_util"))
        .with_columns(day=local_day(pl.col("alloc_end"), tz))
        .group_by(keys)
        .agg(pl.len().cast(pl.Int64).alias("zero_util_jobs"))
    )
    return daily.join(zero, on=keys, how="left").with_columns(
        pl.col("zero_util_jobs").fill_null(0),
        idle_share=pl.when(pl.col("sampled_gpu_hours") > 0).then(
            pl.col("idle_gpu_hours") / pl.col("sampled_gpu_hours")
        ),
    )


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    """mart_job_efficiency (per attempt with mapped GPUs or MIG slices), mart_idle_gpus_daily and
    mart_mig_efficiency (per attempt and MIG instance)."""
    now, tz = params.now, params.tz
    threshold = float(params.drift.idle_util_percent)
    gpu_jobs = with_columns_of(frames.get("gpu_jobs"), GPU_JOBS_SCHEMA).with_columns(
        pl.col("mig_instance").fill_null("")
    )
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
    intervals = with_slice_fractions(
        attribute_intervals(gpu_jobs, jobs.drop("mig_tres"), now), inventory, sacct_slices
    )
    minutes = gpu_minutes(intervals, samples, threshold).cache()
    slices = mig_efficiency(minutes).cache()
    eff = with_mig(job_efficiency(minutes, threshold), slices).cache()
    return {
        "mart_job_efficiency": eff.select(list(JOB_SCHEMA)).cast(JOB_SCHEMA),
        "mart_idle_gpus_daily": idle_daily(minutes, eff, tz).select(list(IDLE_SCHEMA)).cast(IDLE_SCHEMA),
        "mart_mig_efficiency": slices.select(list(MIG_SCHEMA)).cast(MIG_SCHEMA),
    }
