"""GPU efficiency: per job attempt, what the allocated GPUs actually did; and who holds idle GPUs.

The question sites ask (Princeton's jobstats made it famous): which jobs hold GPUs at ~0% utilisation,
and whose are they? Slurm knows what was allocated, NVML knows what the GPU did; `gpu_jobs` (written by the
prolog mapping, cross-checked with cgroups) says which GPU belonged to which job when. Allocations are cut
into minutes and joined to the per-minute NVML samples of the same GPU, so a GPU shared over time by
several jobs, or two GPUs of one job, are each counted once per minute they were held.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl
from slurmscope.pipelines.common import split_buckets
from slurmscope.pipelines.fairshare import to_utc

NAME = "efficiency"
MART_TABLES: dict[str, str | None] = {"mart_job_efficiency": "alloc_end", "mart_idle_gpus_daily": "day"}
INPUTS: dict[str, str] = {
    # Every interval of the jobs holding a GPU at or after the window start (all of a job's GPUs, so its
    # row is whole); whole GPUs only (MIG slices have no per-slice utilisation in NVML's device counters).
    "gpu_jobs": """
        SELECT cluster, node, gpu_uuid, job_id, interval_start, interval_end FROM gpu_jobs
        WHERE cluster = $cluster AND coalesce(mig_instance, '') = '' AND interval_start < $end
          AND job_id IN (SELECT job_id FROM gpu_jobs WHERE cluster = $cluster
                         AND coalesce(interval_end, $end) >= $start AND interval_start < $end)""",
    # Samples back to the earliest of those intervals, so a long job's efficiency covers its whole run.
    "gpu_samples": """
        SELECT cluster, node, gpu_uuid, minute, samples, util_gpu_mean, util_gpu_max, mem_used_max_bytes,
               energy_joules
        FROM gpu_samples
        WHERE cluster = $cluster AND minute < $end AND minute >= coalesce((
            SELECT min(interval_start) FROM gpu_jobs
            WHERE cluster = $cluster AND coalesce(mig_instance, '') = '' AND interval_start < $end
              AND job_id IN (SELECT job_id FROM gpu_jobs WHERE cluster = $cluster
                             AND coalesce(interval_end, $end) >= $start AND interval_start < $end)
        ) - INTERVAL 1 MINUTE, $start)""",
    # Only the attempts of the jobs mapped above can be matched (by job_id_raw): a full run would otherwise
    # read and sort every attempt of the history (10M rows, 4 GB) to attribute a few thousand intervals.
    # The regexp is attribute_intervals' extraction (ASCII digits: other digits fail its strict cast, and
    # the run, as before); TRY_CAST keeps this query from failing first.
    "jobs": """
        SELECT cluster, job_id, job_id_raw, attempt, submit_time, start_time, end_time, account, "user", gpus
        FROM jobs WHERE cluster = $cluster AND start_time IS NOT NULL AND start_time < $end
          AND (end_time IS NULL OR end_time >= $start - INTERVAL 1 DAY)
          AND job_id_raw IN (SELECT TRY_CAST(regexp_extract(job_id, '^([0-9]+)', 1) AS BIGINT) FROM gpu_jobs
                             WHERE cluster = $cluster AND coalesce(interval_end, $end) >= $start
                               AND interval_start < $end)""",
}

IDLE_UTIL_PERCENT = 5.0
"""Default: a GPU-minute whose mean utilisation is below this is idle (drift.idle_util_percent)."""
MATCH_TOLERANCE = "1h"
"""A mapping interval belongs to the attempt of its job whose Start is nearest, within this tolerance."""

UTC_DT = pl.Datetime("us", "UTC")
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


def _get(params: Any, name: str, default: Any = None) -> Any:
    if isinstance(params, dict):
        return params.get(name, default)
    return getattr(params, name, default)


def _threshold(params: Any) -> float:
    cfg = _get(params, "config") or {}
    cfg = getattr(cfg, "raw", cfg)
    return float(cfg.get("drift", {}).get("idle_util_percent", IDLE_UTIL_PERCENT))


def _with(frame: pl.LazyFrame | None, schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    if frame is None:
        return pl.LazyFrame(schema=schema)
    have = frame.collect_schema()
    return frame.with_columns(
        *[pl.lit(None, t).alias(c) for c, t in schema.items() if c not in have], *to_utc(have)
    )


def mapped_job_id_raw(job_id: pl.Expr) -> pl.Expr:
    """The sacct JobIDRaw a gpu_jobs.job_id (SLURM_JOB_ID) belongs to: its leading digits (the jobs INPUT's
    semi-join extracts the same)."""
    return job_id.str.extract(r"^(\d+)").cast(pl.Int64)


def attribute_intervals(gpu_jobs: pl.LazyFrame, jobs: pl.LazyFrame, now: datetime) -> pl.LazyFrame:
    """Each whole-GPU mapping interval with the job attempt it belongs to.

    gpu_jobs.job_id is SLURM_JOB_ID (= sacct JobIDRaw); a requeued job has one attempt per Start, so the
    interval goes to the attempt whose Start is nearest its own start. An open interval ends at the
    attempt's End, else at `now`.
    """
    now_lit = pl.lit(now, dtype=UTC_DT)
    g = gpu_jobs.with_columns(job_id_raw=mapped_job_id_raw(pl.col("job_id"))).drop("job_id")
    j = jobs.select(
        "cluster",
        "job_id_raw",
        "job_id",
        "attempt",
        "submit_time",
        "start_time",
        "end_time",
        "account",
        "user",
        pl.col("gpus").alias("alloc_gpus"),
    )
    out = g.sort("interval_start").join_asof(
        j.sort("start_time"),
        left_on="interval_start",
        right_on="start_time",
        by=["cluster", "job_id_raw"],
        strategy="nearest",
        tolerance=MATCH_TOLERANCE,
        check_sortedness=False,
    )
    end = pl.coalesce("interval_end", "end_time", now_lit)
    return out.with_columns(interval_end=pl.min_horizontal(end, now_lit)).filter(
        pl.col("interval_end") > pl.col("interval_start")
    )


def gpu_minutes(intervals: pl.LazyFrame, samples: pl.LazyFrame, threshold: float) -> pl.LazyFrame:
    """One row per (interval, minute) it held the GPU, with that minute's NVML sample when there is one.

    `held` = seconds of the minute inside the interval; a sample's energy is pro-rated by `held`/60.
    `idle` = the minute was sampled and its mean utilisation was below `threshold` percent.
    """
    m = split_buckets(intervals, "interval_start", "interval_end", 60, out="minute").rename(
        {"overlap_seconds": "held"}
    )
    return m.join(samples, on=["cluster", "node", "gpu_uuid", "minute"], how="left").with_columns(
        sampled=pl.col("util_gpu_mean").is_not_null(),
        idle=pl.col("util_gpu_mean") < threshold,
        energy=pl.col("energy_joules") * pl.col("held") / 60.0,
    )


def job_efficiency(minutes: pl.LazyFrame, threshold: float) -> pl.LazyFrame:
    """Per attempt: time-weighted mean and max utilisation, peak memory, energy, GPU-seconds held,
    idle GPU-seconds and `zero_util` (sampled, and no sample ever reached the threshold)."""
    sampled_held = pl.col("held").filter(pl.col("sampled"))
    keys = ["cluster", "job_id_raw", "submit_time"]
    agg = (
        minutes.filter(pl.col("submit_time").is_not_null())
        .group_by(keys)
        .agg(
            pl.col("job_id").first(),
            pl.col("attempt").first(),
            pl.col("account").first(),
            pl.col("user").first(),
            pl.col("gpu_uuid").n_unique().cast(pl.Int32).alias("gpus"),
            (
                (pl.col("util_gpu_mean") * pl.col("held")).filter(pl.col("sampled")).sum()
                / sampled_held.sum()
            ).alias("util_mean"),
            pl.col("util_gpu_max").max().alias("util_max"),
            pl.col("mem_used_max_bytes").max().cast(pl.Int64).alias("mem_peak_bytes"),
            pl.col("energy").sum().alias("energy_joules"),
            pl.col("energy").count().alias("_energy_n"),
            pl.col("held").sum().alias("gpu_seconds"),
            sampled_held.sum().alias("sampled_gpu_seconds"),
            pl.col("held").filter(pl.col("idle")).sum().alias("idle_gpu_seconds"),
            pl.col("util_gpu_max").max().alias("_peak"),
            pl.col("interval_start").min().alias("alloc_start"),
            pl.col("interval_end").max().alias("alloc_end"),
        )
    )
    return agg.with_columns(
        energy_joules=pl.when(pl.col("_energy_n") > 0).then(pl.col("energy_joules")),
        zero_util=(pl.col("sampled_gpu_seconds") > 0) & (pl.col("_peak").fill_null(0.0) < threshold),
    )


def idle_daily(minutes: pl.LazyFrame, jobs_eff: pl.LazyFrame, tz: str) -> pl.LazyFrame:
    """Allocated and idle GPU-hours per local day, account and user; zero-util jobs by their end day."""
    day = pl.col("minute").dt.convert_time_zone(tz).dt.date().alias("day")
    keys = ["cluster", "day", "account", "user"]
    daily = (
        minutes.filter(pl.col("submit_time").is_not_null())
        .with_columns(day)
        .group_by(keys)
        .agg(
            (pl.col("held").sum() / 3600).alias("allocated_gpu_hours"),
            (pl.col("held").filter(pl.col("sampled")).sum() / 3600).alias("sampled_gpu_hours"),
            (pl.col("held").filter(pl.col("idle")).sum() / 3600).alias("idle_gpu_hours"),
        )
    )
    zero = (
        jobs_eff.filter(pl.col("zero_util"))
        .with_columns(day=pl.col("alloc_end").dt.convert_time_zone(tz).dt.date())
        .group_by(keys)
        .agg(pl.len().cast(pl.Int64).alias("zero_util_jobs"))
    )
    return daily.join(zero, on=keys, how="left").with_columns(
        pl.col("zero_util_jobs").fill_null(0),
        idle_share=pl.when(pl.col("sampled_gpu_hours") > 0).then(
            pl.col("idle_gpu_hours") / pl.col("sampled_gpu_hours")
        ),
    )


def compute(frames: dict[str, pl.LazyFrame], params: Any) -> dict[str, pl.LazyFrame]:
    """mart_job_efficiency (per attempt with mapped GPUs) and mart_idle_gpus_daily."""
    now = _get(params, "now") or datetime.now(UTC)
    tz = _get(params, "tz") or "UTC"
    threshold = _threshold(params)
    gpu_jobs = _with(
        frames.get("gpu_jobs"),
        {
            "cluster": pl.String,
            "node": pl.String,
            "gpu_uuid": pl.String,
            "job_id": pl.String,
            "interval_start": UTC_DT,
            "interval_end": UTC_DT,
        },
    )
    samples = _with(
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
    )
    jobs = _with(
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
        },
    )
    intervals = attribute_intervals(gpu_jobs, jobs, now)
    minutes = gpu_minutes(intervals, samples, threshold).cache()
    eff = job_efficiency(minutes, threshold).cache()
    return {
        "mart_job_efficiency": eff.select(list(JOB_SCHEMA)).cast(JOB_SCHEMA),
        "mart_idle_gpus_daily": idle_daily(minutes, eff, tz).select(list(IDLE_SCHEMA)).cast(IDLE_SCHEMA),
    }
