"""Slurm's usage decay: the half-life and reset period in force per cluster, and the decayed usage carried
from day to day (priority_multifactor.c)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl
from slurmscope.pipelines.calendar import day_start
from slurmscope.pipelines.fairshare.schema import KEY
from slurmscope.pipelines.params import Params

SLURM_LN2 = 0.693
"""Slurm's per-second decay factor is 1 - 0.693/half_life (priority_multifactor.c), not exactly 2^(-1/hl)."""

ERA_HALF_LIVES = 60
"""Usage older than 60 half-lives weighs < 2^-60 and is dropped; this keeps exp() in float range."""

NO_DECAY_ERA = 1e18


@dataclass(frozen=True)
class Settings:
    """What the pipeline needs from the run and the config; Slurm's own config wins per cluster."""

    now: datetime
    since: datetime | None  # the window's start; None in a full run
    timezone: str
    half_life_seconds: float
    reset_period: str
    charge: str
    algorithm: str
    starved_ratio: float
    over_served_ratio: float


def settings(params: Params) -> Settings:
    fs = params.fairshare
    return Settings(
        now=params.now,
        since=None if params.full else params.start,
        timezone=params.tz,
        half_life_seconds=float(fs.decay_half_life_seconds),
        reset_period=str(fs.usage_reset_period).upper(),
        charge=fs.charge,
        algorithm=fs.algorithm,
        starved_ratio=float(params.drift.fairshare_starved_ratio),
        over_served_ratio=float(params.drift.fairshare_over_served_ratio),
    )


def parse_slurm_duration(col: pl.Expr) -> pl.Expr:
    """Seconds of a duration as `scontrol show config` prints it: 'D-HH:MM:SS', 'HH:MM:SS' or minutes."""
    parts = col.str.strip_chars().str.extract_groups(r"^(?:(\d+)-)?(\d+):(\d+):(\d+)$")
    days = parts.struct.field("1").cast(pl.Float64).fill_null(0.0)
    hms = (
        parts.struct.field("2").cast(pl.Float64) * 3600
        + parts.struct.field("3").cast(pl.Float64) * 60
        + parts.struct.field("4").cast(pl.Float64)
    )
    minutes = col.str.strip_chars().str.extract(r"^(\d+)$").cast(pl.Float64) * 60
    return pl.coalesce(days * 86400 + hms, minutes)


def decay_rate(half_life_seconds: pl.Expr) -> pl.Expr:
    """lambda such that Slurm's per-second factor (1 - 0.693/hl) equals exp(-lambda); 0 = no decay."""
    return (
        pl.when(half_life_seconds > SLURM_LN2)
        .then(-(1.0 - SLURM_LN2 / half_life_seconds).log())
        .otherwise(0.0)
    )


def seconds_between(later: pl.Expr, earlier: pl.Expr) -> pl.Expr:
    return (later - earlier).dt.total_microseconds().cast(pl.Float64) / 1e6


def decayed_usage(rate: pl.Expr, a: pl.Expr, b: pl.Expr, at: pl.Expr, lam: pl.Expr) -> pl.Expr:
    """Usage of `rate` units/s charged over [a, b], decayed to instant `at` (>= b).

    The integral of rate * exp(-lambda (at - t)) dt; Slurm sums the same thing in PriorityCalcPeriod steps
    (the difference is below 1e-4 relative for periods of minutes and half-lives of days).
    """
    span = seconds_between(b, a)
    age = seconds_between(at, b)
    return (
        pl.when(lam > 0)
        .then(rate * (-lam * age).exp() * (1.0 - (-lam * span).exp()) / lam)
        .otherwise(rate * span)
    )


def reset_epoch(day: pl.Expr, period: pl.Expr) -> pl.Expr:
    """First day of the PriorityUsageResetPeriod that contains `day` (Slurm resets at local midnight).

    WEEKLY resets on Sunday (priority_multifactor.c _next_reset); NONE and NOW never split history.
    """
    return (
        pl.when(period == "DAILY")
        .then(day)
        .when(period == "WEEKLY")
        .then(day - pl.duration(days=day.dt.weekday() % 7))
        .when(period == "MONTHLY")
        .then(day.dt.month_start())
        .when(period == "QUARTERLY")
        .then(day.dt.truncate("3mo"))
        .when(period == "YEARLY")
        .then(day.dt.truncate("1y"))
        .otherwise(pl.date(1970, 1, 1))
    )


def cluster_settings(frames: dict[str, pl.LazyFrame], s: Settings) -> pl.LazyFrame:
    """cluster, half_life_s, lam, era_s, reset, algorithm: scontrol show config where collected, else config."""
    clusters = pl.concat(
        [frames[name].select("cluster") for name in ("jobs", "shares", "fairshare_daily")], how="vertical"
    ).unique()
    keys = ["PriorityDecayHalfLife", "PriorityUsageResetPeriod", "PriorityFlags"]
    latest = (
        frames["slurm_config"]
        .filter(pl.col("key").is_in(keys))
        .sort("snapshot_time")
        .group_by("cluster", "key")
        .agg(pl.col("value").last())
    )
    wide = latest.group_by("cluster").agg(
        *[pl.col("value").filter(pl.col("key") == k).first().alias(k) for k in keys],
        pl.lit(True).alias("collected"),
    )
    flags = pl.col("PriorityFlags").str.to_uppercase()
    return (
        clusters.join(wide, on="cluster", how="left")
        .with_columns(
            half_life_s=parse_slurm_duration(pl.col("PriorityDecayHalfLife")).fill_null(s.half_life_seconds),
            reset=pl.col("PriorityUsageResetPeriod")
            .str.strip_chars()
            .str.to_uppercase()
            .fill_null(s.reset_period),
            # Slurm >= 19.05 runs Fair Tree unless PriorityFlags says NO_FAIR_TREE (an empty
            # PriorityFlags, as 22.05 prints by default, is Fair Tree)
            algorithm=pl.when(flags.fill_null("").str.contains("NO_FAIR_TREE"))
            .then(pl.lit("classic"))
            .when(pl.col("collected").fill_null(False))
            .then(pl.lit("fair_tree"))
            .otherwise(pl.lit(s.algorithm)),
        )
        .with_columns(lam=decay_rate(pl.col("half_life_s")))
        .with_columns(
            era_s=pl.when(pl.col("lam") > 0)
            .then(pl.col("half_life_s") * ERA_HALF_LIVES)
            .otherwise(NO_DECAY_ERA)
        )
        .select("cluster", "half_life_s", "lam", "era_s", "reset", "algorithm")
    )


def daily_usage(days: pl.LazyFrame, cs: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """Decayed raw usage per association at each local day end on which it had usage (sparse).

    U(D_k) = sum over days i <= k of the same reset epoch of C_i * exp(-lambda (D_k - D_i)), computed
    as cumulative sums in eras of 60 half-lives so that exp() never overflows. C_i are the day table's
    `charge`s, so the carry costs one row per association and day, however many attempts ran.
    """
    group = [*KEY, "epoch"]
    daily = (
        days.filter(pl.col("raw") > 0)
        .join(cs.select("cluster", "lam", "era_s", "reset"), on="cluster")
        .select(
            *KEY,
            reset_epoch(pl.col("day"), pl.col("reset")).alias("epoch"),
            "day",
            day_start(pl.col("day") + pl.duration(days=1), s.timezone).alias("day_end"),
            "lam",
            "era_s",
            pl.col("charge").alias("c"),
        )
        .with_columns(t_s=pl.col("day_end").dt.epoch("us").cast(pl.Float64) / 1e6)
        .with_columns(era=(pl.col("t_s") / pl.col("era_s")).floor())
        .with_columns(
            base=pl.col("era") * pl.col("era_s"),
        )
        .with_columns(cw=pl.col("c") * (pl.col("lam") * (pl.col("t_s") - pl.col("base"))).exp())
        .with_columns(cum=pl.col("cw").cum_sum().over([*group, "era"], order_by="day_end"))
    )
    prev = (
        daily.group_by(*group, "era")
        .agg(pl.col("cw").sum().alias("prev_tot"))
        .with_columns(era=pl.col("era") + 1)
    )
    return (
        daily.join(prev, on=[*group, "era"], how="left")
        .with_columns(
            u=(-pl.col("lam") * (pl.col("t_s") - pl.col("base"))).exp() * pl.col("cum")
            + (-pl.col("lam") * (pl.col("t_s") - pl.col("base") + pl.col("era_s"))).exp()
            * pl.col("prev_tot").fill_null(0.0)
        )
        .select(*group, pl.col("day_end").alias("t_last"), pl.col("u").alias("u_last"))
    )
