"""Fair-share: Slurm's decayed usage, NormShares, EffectvUsage and FairShare factor per association.

sshare only shows the present, and only from the day it was first collected. Recomputing Slurm's numbers
from the job history extends fair-share back in time, answers "why is my priority low" for any past day,
and, where sshare snapshots exist, checks that our reading of the accounting matches what Slurm used: both
are emitted side by side (source 'computed' and 'sshare') at the same as_of instants.

The formulas follow Slurm's priority/multifactor plugin (https://slurm.schedmd.com/priority_multifactor.html),
Fair Tree (https://slurm.schedmd.com/fair_tree.html) and the classic algorithm
(https://slurm.schedmd.com/classic_fair_share.html); docs/pipelines.md lists every formula.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import polars as pl

from slurmscope.slurm_states import JOB_ENDED_STATES, JOB_STATE_WORD

NAME = "fairshare"
MART_TABLES: dict[str, str | None] = {
    "mart_fairshare": "as_of",
    "mart_fairshare_drift": "day",
    # The pipeline's own state: day-level charge per association. Decayed usage depends on the whole
    # history (back to the last reset); keeping its day sums lets an incremental run read only the attempts
    # that overlap its window and carry the stored days forward (docs/pipelines.md, "Incremental runs").
    "mart_fairshare_daily": "day",
    # Its attempt counts per association, start day and submit day: drift's demand counts an attempt on its
    # submit day once it has started, so keyed by start day the stored rows stay complete like the charges.
    "mart_fairshare_submits": "day",
}
INPUTS: dict[str, str] = {
    # Attempts charged inside the window: those still running or ending after its start. A full run's
    # start is 1970, so it reads every attempt. Late records are inside the window because the runner
    # starts it at the earliest attempt ingested since the last run. The state only matters without an End
    # (charged_until); leaving it out elsewhere keeps a 10M-row read smaller.
    "jobs": """
        SELECT cluster, account, "user", submit_time, start_time, end_time, billing, cpus, gpus,
               CASE WHEN end_time IS NULL THEN state END AS state
        FROM jobs WHERE cluster = $cluster AND start_time IS NOT NULL
          AND (end_time IS NULL OR end_time > $start OR start_time >= $start)""",
    # The stored days before the window (none in a full run); the days from the window on are recomputed.
    "fairshare_daily": """
        SELECT cluster, day, account, "user", charge, raw
        FROM mart_fairshare_daily WHERE cluster = $cluster AND day < $start_date""",
    # The stored attempt counts of attempts started before the window (none in a full run).
    "fairshare_submits": """
        SELECT cluster, day, submit_day, account, "user", submitted
        FROM mart_fairshare_submits WHERE cluster = $cluster AND day < $start_date""",
    # Only the last sshare snapshot of each day is used (as tree and as the compared record); before the
    # window only the tree in force at its start (the last snapshot before it) matters.
    "shares": """
        SELECT cluster, snapshot_time, account, "user", parent, raw_shares, norm_shares, raw_usage,
               effectv_usage, level_fs, fairshare
        FROM shares WHERE cluster = $cluster
          AND snapshot_time >= coalesce((SELECT max(snapshot_time) FROM shares
                                         WHERE cluster = $cluster AND snapshot_time < $start),
                                        '-infinity'::TIMESTAMPTZ)
        QUALIFY snapshot_time = max(snapshot_time)
            OVER (PARTITION BY CAST(timezone($tz, snapshot_time) AS DATE))""",
    "slurm_config": """
        SELECT cluster, snapshot_time, key, value FROM slurm_config
        WHERE cluster = $cluster
          AND key IN ('PriorityDecayHalfLife', 'PriorityUsageResetPeriod', 'PriorityFlags')""",
}

WIDEN_SQL = """
    SELECT CASE WHEN EXISTS (SELECT 1 FROM mart_fairshare_daily WHERE cluster = $cluster)
                 AND EXISTS (SELECT 1 FROM mart_fairshare_submits WHERE cluster = $cluster)
                THEN (SELECT CAST(timezone($tz, max(run_at)) AS DATE) FROM pipeline_runs
                      WHERE cluster = $cluster AND pipeline = 'fairshare' AND status = 'ok')
                ELSE DATE '1970-01-01' END"""
"""The stored days are complete before the day of the last good run (that day was charged up to its `now`):
an incremental window (`--since` included) starts at that day at the latest. Without stored days (a
database migrated from before mart_fairshare_daily) it starts in 1970, i.e. recomputes everything."""

NO_VAL = 4294967294.0
"""Slurm's NO_VAL: the LevelFS Fair Tree gives an account whose shares are 'parent' (it sorts high)."""
SLURM_LN2 = 0.693
"""Slurm's per-second decay factor is 1 - 0.693/half_life (priority_multifactor.c), not exactly 2^(-1/hl)."""
ERA_HALF_LIVES = 60
"""Usage older than 60 half-lives weighs < 2^-60 and is dropped; this keeps exp() in float range."""
MAX_DEPTH = 16
"""Deepest association tree handled (root = 0). Real trees rarely exceed 6 levels."""
NO_DECAY_ERA = 1e18
UTC_DT = pl.Datetime("us", "UTC")
KEY = ["cluster", "account", "user"]
ROOT = "root"

FAIRSHARE_SCHEMA = {
    "cluster": pl.String,
    "as_of": UTC_DT,
    "account": pl.String,
    "user": pl.String,
    "parent": pl.String,
    "raw_shares": pl.Int64,
    "norm_shares": pl.Float64,
    "raw_usage": pl.Float64,
    "effectv_usage": pl.Float64,
    "level_fs": pl.Float64,
    "fairshare": pl.Float64,
    "source": pl.String,
}
DAILY_SCHEMA = {
    "cluster": pl.String,
    "day": pl.Date,
    "account": pl.String,
    "user": pl.String,
    "charge": pl.Float64,
    "raw": pl.Float64,
}
SUBMITS_SCHEMA = {
    "cluster": pl.String,
    "day": pl.Date,
    "submit_day": pl.Date,
    "account": pl.String,
    "user": pl.String,
    "submitted": pl.Int64,
}
DRIFT_SCHEMA = {
    "cluster": pl.String,
    "day": pl.Date,
    "account": pl.String,
    "usage_share_7d": pl.Float64,
    "usage_share_30d": pl.Float64,
    "target_share": pl.Float64,
    "ratio": pl.Float64,
    "state": pl.String,
    "starved_since": pl.Date,
    "over_served_since": pl.Date,
    "days_starved": pl.Int32,
    "days_over_served": pl.Int32,
}


@dataclass(frozen=True)
class Settings:
    """What the pipeline needs from the run and the config; Slurm's own config wins per cluster."""

    now: datetime
    since: datetime | None = None
    timezone: str = "UTC"
    half_life_seconds: float = 7 * 86400.0
    reset_period: str = "NONE"
    charge: str = "billing"
    algorithm: str = "fair_tree"
    starved_ratio: float = 0.5
    over_served_ratio: float = 2.0


def _param(params: Any, name: str) -> Any:
    if params is None:
        return None
    if isinstance(params, Mapping):
        return params.get(name)
    return getattr(params, name, None)


def _utc(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):  # a date
        value = datetime(value.year, value.month, value.day)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _config_raw(params: Any) -> dict[str, Any]:
    cfg = _param(params, "config") or _param(params, "cfg")
    if cfg is None and hasattr(params, "raw"):
        cfg = params
    if cfg is None:
        return {}
    return getattr(cfg, "raw", cfg) or {}


def settings(params: Any) -> Settings:
    """Settings from the runner's params (attributes or keys: now, since, config) with config defaults."""
    if isinstance(params, Settings):
        return params
    raw = _config_raw(params)
    fs = raw.get("fairshare", {})
    drift = raw.get("drift", {})
    now = _utc(_param(params, "now")) or datetime.now(UTC)
    since = None if _param(params, "full") else _utc(_param(params, "start") or _param(params, "since"))
    tz = _param(params, "tz") or raw.get("billing", {}).get("timezone") or "UTC"
    return Settings(
        now=now,
        since=since,
        timezone=tz,
        half_life_seconds=float(fs.get("decay_half_life_seconds", 7 * 86400)),
        reset_period=str(fs.get("usage_reset_period", "NONE")).upper(),
        charge=fs.get("charge", "billing"),
        algorithm=fs.get("algorithm", "fair_tree"),
        starved_ratio=float(drift.get("fairshare_starved_ratio", 0.5)),
        over_served_ratio=float(drift.get("fairshare_over_served_ratio", 2.0)),
    )


# ---------------------------------------------------------------------------------------------------------
# Small expressions


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


def charge_rate(charge: str) -> pl.Expr:
    """Units per second a job is charged: billing TRES (Slurm's default: CPUs when no billing) or GPUs."""
    if charge == "gpu_seconds":
        return pl.col("gpus").cast(pl.Float64).fill_null(0.0)
    return pl.coalesce(pl.col("billing").cast(pl.Float64), pl.col("cpus").cast(pl.Float64)).fill_null(0.0)


def local_date(ts: pl.Expr, tz: str) -> pl.Expr:
    if tz == "UTC":  # the common case, without a time-zone database lookup per row
        return ts.dt.date()
    return ts.dt.convert_time_zone(tz).dt.date()


HOUR_US = 3_600_000_000
DAY_US = 86_400_000_000
MAX_SPAN_HOURS = 1_000_000


def zone_offsets(instants: pl.LazyFrame, tz: str) -> pl.LazyFrame:
    """h, o0, o1, switch: the UTC offset of `tz` (microseconds) at the start and at the end of every UTC hour
    `h` holding one of the instants (column `us`, epoch microseconds; every hour between them, unless they
    span over a century), and where the two differ, the first instant of the hour on the new offset (tz
    database transitions fall on whole seconds). Computed now: it is small, and its size decides how."""

    def offset(us: pl.Expr) -> pl.Expr:
        t = pl.from_epoch(us, "us").dt.replace_time_zone("UTC")
        wall = t.dt.convert_time_zone(tz).dt.replace_time_zone(None)
        return (wall - t.dt.replace_time_zone(None)).dt.total_microseconds()

    start = pl.col("h") * HOUR_US
    # every hour between the first and the last instant: hashing 30M instants to find the hours present
    # cost more than converting the 9k hours of a year (a span of junk dates falls back to that)
    h = pl.col("us") // HOUR_US
    lo, hi = instants.select(h.min().alias("lo"), h.max().alias("hi")).collect().row(0)
    if lo is not None and hi - lo < MAX_SPAN_HOURS:
        hours = pl.LazyFrame({"h": pl.int_range(lo, hi + 1, dtype=pl.Int64, eager=True)})
    else:
        hours = instants.select(h=h).drop_nulls().unique()
    hours = hours.with_columns(o0=offset(start), o1=offset(start + (HOUR_US - 1)))
    at = start + pl.col("s") * 1_000_000
    switch = (
        hours.filter(pl.col("o0") != pl.col("o1"))
        .with_columns(s=pl.int_ranges(0, 3600, dtype=pl.Int64))
        .explode("s")
        .filter(offset(at) == pl.col("o1"))
        .group_by("h")
        .agg(at.min().alias("switch"))
    )
    return hours.join(switch, on="h", how="left")


def with_local_date(lf: pl.LazyFrame, ts: pl.Expr, out: str, zones: pl.LazyFrame | None) -> pl.LazyFrame:
    """`lf` with `out`, the local date of instant `ts` (the same as local_date), from the hour's offset in
    `zones` (zone_offsets of every instant `ts` takes; None in UTC).

    Converting each of 10M instants took 0.64 CPU-s per column; one join on its UTC hour takes 0.17.
    """
    if zones is None:
        return lf.with_columns(ts.dt.date().alias(out))
    us = pl.col("_us")
    off = pl.when(us >= pl.col("_switch")).then(pl.col("_o1")).otherwise(pl.col("_o0"))
    return (
        lf.with_columns(ts.dt.epoch("us").alias("_us"))
        .with_columns(_h=us // HOUR_US)
        .join(zones.select(pl.all().name.prefix("_")), on="_h", how="left", build_side="force_right")
        .with_columns(((us + off) // DAY_US).cast(pl.Int32).cast(pl.Date).alias(out))
        .drop("_us", "_h", "_o0", "_o1", "_switch")
    )


def local_midnight(day: pl.Expr, tz: str) -> pl.Expr:
    """UTC instant of 00:00 local time on `day` (DST-aware)."""
    if tz == "UTC":
        return day.cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    return (
        day.cast(pl.Datetime("us"))
        .dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
        .dt.convert_time_zone("UTC")
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


def reuse(frame: pl.LazyFrame) -> pl.LazyFrame:
    """A small frame several branches read, computed now.

    Everything after the day table is small (associations x days), whatever the number of attempts;
    planning the whole tree math as one lazy plan cost more than running it (1 CPU-s of optimisation and
    twice the work of computing each frame once, at any history size).
    """
    return frame.collect().lazy()


def _empty(schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    return pl.LazyFrame(schema=schema)


# ---------------------------------------------------------------------------------------------------------
# Per-cluster settings


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


# ---------------------------------------------------------------------------------------------------------
# Usage


def charged_until(now: datetime) -> pl.Expr:
    """Where an attempt's charge ends: its End (capped at `now`); `now` while it runs; null (nothing) when
    accounting already gives it a final state but not yet its End.

    slurmctld charges a job at every PriorityCalcPeriod while it runs and once more when it ends
    (priority_multifactor.c: decay_apply_new_usage skips finished jobs, priority_p_job_end charges up to
    the job's end_time), so a finished job never accrues past its end. sacct can show the final state
    before the End: a job that ran while slurmdbd was down reaches accounting with slurmctld's current
    state first and its end record later. Charging such a row up to `now` would grow without bound until
    the next collect brings the End; charging nothing undercounts only that one short window.
    """
    now_ = pl.lit(now, dtype=UTC_DT)
    state = pl.col("state").str.strip_chars().str.to_uppercase().str.extract(JOB_STATE_WORD)
    finished = state.is_in(JOB_ENDED_STATES).fill_null(False)
    return (
        pl.when(pl.col("end_time").is_null() & finished)
        .then(pl.lit(None, dtype=UTC_DT))
        .otherwise(pl.min_horizontal(pl.col("end_time").fill_null(now_), now_))
    )


def association() -> list[pl.Expr]:
    """account and user of an attempt ('' when null) as categoricals: the group-bys over every attempt
    hash them per row, and a few thousand names' codes hash faster than the names (0.4 of 6 CPU-s at
    10M attempts). Cast back to strings once aggregated."""
    return [pl.col(c).fill_null("").cast(pl.Categorical) for c in ("account", "user")]


def usage_slices(
    jobs: pl.LazyFrame, calendar: pl.LazyFrame, zones: pl.LazyFrame | None, s: Settings
) -> pl.LazyFrame:
    """Each job attempt's charged time cut at local midnights: one row per (job, day) it ran in.

    Running jobs (no End) accrue up to `now`; finished ones without an End are not charged (see
    charged_until). Columns: cluster, account, user, day, sa, sb, rate and the `calendar` columns of the
    day (day_end, lam, t_snap, t_now).

    Day bounds, decay rate and the day's instants come from one join with the calendar, local dates from
    the hour's offset (with_local_date): zone arithmetic per row cost more than all the rest at 10M attempts.
    """
    base = jobs.select(
        "cluster",
        *association(),
        pl.col("start_time").alias("a"),
        charged_until(s.now).alias("b"),
        charge_rate(s.charge).alias("rate"),
    ).filter(pl.col("a").is_not_null() & (pl.col("b") > pl.col("a")) & (pl.col("rate") > 0))
    base = with_local_date(base, pl.col("a"), "day", zones)
    base = with_local_date(base, pl.col("b") - pl.duration(microseconds=1), "_last", zones)
    # int_ranges + an integer add: date_ranges itself cost 2.7 of 3.6 s on 10M attempts
    n_days = (pl.col("_last") - pl.col("day")).dt.total_days() + 1
    pieces = (
        base.with_columns(_o=pl.int_ranges(0, n_days, dtype=pl.Int32))
        .explode("_o")
        .with_columns(day=(pl.col("day").cast(pl.Int32) + pl.col("_o")).cast(pl.Date))
        .drop("_last", "_o")
    )
    return (
        # force_right: the calendar is the hash table (Polars' own choice built it from the 14M pieces: +0.7 GB)
        pieces.join(calendar, on=["cluster", "day"], how="left", build_side="force_right")
        .with_columns(sa=pl.max_horizontal("a", "day_start"), sb=pl.min_horizontal("b", "day_end"))
        .drop("a", "b", "day_start")
    )


def charge_calendar(jobs: pl.LazyFrame, cs: pl.LazyFrame, snaps: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """cluster, day, day_start, day_end, lam, t_snap, t_now: every local day an attempt can be charged on,
    from the day before the first start (a zone may turn its clocks back over midnight) to the day after
    `now`, with the instants inside it at which usage is reported (the day's kept sshare snapshot; `now`
    on its own day, unless that snapshot is `now`)."""
    tz = s.timezone
    now = pl.lit(s.now, dtype=UTC_DT)
    days = (
        jobs.select(first=local_date(pl.col("start_time").min(), tz) - pl.duration(days=1))
        .drop_nulls()  # no attempt: no day
        .select(day=pl.date_ranges("first", local_date(now, tz) + pl.duration(days=1)))
        .explode("day")
    )
    return (
        days.with_columns(
            day_start=local_midnight(pl.col("day"), tz),
            day_end=local_midnight(pl.col("day") + pl.duration(days=1), tz),
        )
        .join(cs.select("cluster", "lam"), how="cross")
        .join(
            snaps.select("cluster", "day", pl.col("snapshot_time").alias("t_snap")),
            on=["cluster", "day"],
            how="left",
        )
        .with_columns(
            t_now=pl.when(
                (pl.col("day") == local_date(now, tz)) & (pl.col("t_snap") != now).fill_null(True)
            ).then(now)
        )
    )


def day_charges(slices: pl.LazyFrame, instants: tuple[str, ...] = ("t_snap", "t_now")) -> pl.LazyFrame:
    """cluster, account, user, day, charge, raw, v_snap, v_now: what each association was charged on each
    local day.

    `charge` is decayed to the day's end (C_i in daily_usage), `raw` is undecayed (drift's usage shares).
    This is the grain stored in mart_fairshare_daily: all the decayed usage needs from the job history.
    `v_snap` / `v_now` are the parts of the day before its instants t_snap / t_now, decayed to them
    (summed here in the same pass, so the slices are never kept); only those named in `instants` are
    computed (a calendar without any kept snapshot spares two exponentials per slice).
    """

    def before(t: str) -> pl.Expr:
        if t not in instants:
            return pl.lit(None, pl.Float64)
        v = decayed_usage(pl.col("rate"), pl.col("sa"), pl.min_horizontal("sb", t), pl.col(t), pl.col("lam"))
        return pl.when(pl.col("sa") < pl.col(t)).then(v)

    return (
        slices.with_columns(
            c=decayed_usage(pl.col("rate"), pl.col("sa"), pl.col("sb"), pl.col("day_end"), pl.col("lam")),
            r=pl.col("rate") * seconds_between(pl.col("sb"), pl.col("sa")),
            v_snap=before("t_snap"),
            v_now=before("t_now"),
        )
        .group_by("cluster", "account", "user", "day")
        .agg(
            pl.col("c").sum().alias("charge"),
            pl.col("r").sum().alias("raw"),
            pl.col("v_snap").sum(),
            pl.col("v_now").sum(),
            pl.col("v_snap").count().alias("n_snap"),
            pl.col("v_now").count().alias("n_now"),
        )
        .with_columns(pl.col("account", "user").cast(pl.String))
    )


def own_day_usage(charges: pl.LazyFrame, calendar: pl.LazyFrame) -> pl.LazyFrame:
    """cluster, as_of, account, user, v: usage of an instant's own day before it, decayed to it, for the
    associations with a slice starting before it."""
    inst = calendar.select("cluster", "day", "t_snap", "t_now")
    rows = charges.join(inst, on=["cluster", "day"])
    return pl.concat(
        [
            rows.filter(pl.col("n_snap") > 0).select(
                "cluster", pl.col("t_snap").alias("as_of"), "account", "user", pl.col("v_snap").alias("v")
            ),
            rows.filter(pl.col("n_now") > 0).select(
                "cluster", pl.col("t_now").alias("as_of"), "account", "user", pl.col("v_now").alias("v")
            ),
        ]
    )


def job_submits(jobs: pl.LazyFrame, zones: pl.LazyFrame | None) -> pl.LazyFrame:
    """cluster, day (start), submit_day, account, user, submitted: attempts per association, local start day
    and submit day. `submitted` counts those with a submit time, account and user (drift's demand joins on
    them); every started attempt has a row, so the rows also list every association that ran anything.
    `zones`: see with_local_date."""
    counted = (
        pl.col("submit_time").is_not_null() & pl.col("account").is_not_null() & pl.col("user").is_not_null()
    )
    rows = jobs.select(
        "cluster",
        "start_time",
        "submit_time",
        *association(),
        counted.alias("counted"),
    )
    rows = with_local_date(rows, pl.col("start_time"), "day", zones)
    rows = with_local_date(rows, pl.col("submit_time"), "submit_day", zones)
    return (
        rows.with_columns(pl.coalesce("submit_day", "day").alias("submit_day"))
        .group_by("cluster", "day", "submit_day", "account", "user")
        .agg(pl.col("counted").sum().cast(pl.Int64).alias("submitted"))
        .with_columns(pl.col("account", "user").cast(pl.String))
    )


def window_rows(
    frames: dict[str, pl.LazyFrame],
    name: str,
    fresh: pl.LazyFrame,
    schema: dict[str, Any],
    s: Settings,
    stored: bool,
) -> pl.LazyFrame:
    """The stored rows of `name` before the window's first day and `fresh` from it on (an incremental run,
    `stored`), or `fresh` alone (a full run, or a caller that passes the whole history as `jobs`)."""
    fresh = fresh.select(list(schema)).cast(schema)
    if not stored or s.since is None:
        return fresh
    first = local_date(pl.lit(s.since, dtype=UTC_DT), s.timezone)
    kept = frames[name].filter(pl.col("day") < first).select(list(schema)).cast(schema)
    return pl.concat([kept, fresh.filter(pl.col("day") >= first)])


def history_days(used: pl.LazyFrame, submits: pl.LazyFrame) -> pl.LazyFrame:
    """cluster, account, user, day, charge, raw, submitted: the day table of the whole history, from the
    charges per day and the attempt counts per start and submit day (counted on the submit day)."""
    subs = submits.group_by("cluster", "account", "user", pl.col("submit_day").alias("day")).agg(
        pl.col("submitted").sum()
    )
    key = ["cluster", "account", "user", "day"]
    return (
        used.filter(pl.col("raw") > 0)
        .join(subs, on=key, how="full", coalesce=True, nulls_equal=True)
        .with_columns(
            pl.col("charge").fill_null(0.0), pl.col("raw").fill_null(0.0), pl.col("submitted").fill_null(0)
        )
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
            local_midnight(pl.col("day") + pl.duration(days=1), s.timezone).alias("day_end"),
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


# ---------------------------------------------------------------------------------------------------------
# The as_of grid and the association tree in force at each instant


def tree_snapshots(shares: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """The last sshare snapshot of each local day: the trees used, and the instants compared with Slurm."""
    return (
        shares.select("cluster", "snapshot_time")
        .unique()
        .filter(pl.col("snapshot_time") <= pl.lit(s.now, dtype=UTC_DT))
        .with_columns(day=local_date(pl.col("snapshot_time"), s.timezone))
        .group_by("cluster", "day")
        .agg(pl.col("snapshot_time").max())
    )


def asof_grid(days: pl.LazyFrame, snaps: pl.LazyFrame, cs: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """cluster, as_of, day, lookup, epoch, partial: local day ends, compared sshare instants and now.

    A day-end row reads the day-level usage at `as_of`; a partial row (an instant inside a day) reads it
    at the day's start and adds the slices of its own day up to `as_of`.
    """
    tz = s.timezone
    today = s.now.astimezone(UTC)
    now = pl.lit(today, dtype=UTC_DT)
    first = (
        pl.concat(
            [
                days.filter(pl.col("raw") > 0).group_by("cluster").agg(pl.col("day").min().alias("first")),
                snaps.group_by("cluster").agg(pl.col("day").min().alias("first")),
            ]
        )
        .group_by("cluster")
        .agg(pl.col("first").min())
    )
    if s.since is not None:
        first = first.with_columns(
            # from the day ending at `since`, so an incremental run rewrites the as_of == since row too
            first=pl.max_horizontal(
                "first", local_date(pl.lit(s.since, dtype=UTC_DT), tz) - pl.duration(days=1)
            )
        )
    day_ends = (
        first.with_columns(day=pl.date_ranges("first", local_date(now, tz)))
        .explode("day")
        .drop_nulls("day")
        .with_columns(as_of=local_midnight(pl.col("day") + pl.duration(days=1), tz))
        .filter(pl.col("as_of") <= now)
        .select("cluster", "as_of", "day", pl.col("as_of").alias("lookup"), pl.lit(False).alias("partial"))
    )
    clusters = cs.select("cluster")
    points = pl.concat(
        [
            snaps.select("cluster", pl.col("snapshot_time").alias("as_of")),
            clusters.select("cluster", now.alias("as_of")),
        ]
    ).with_columns(day=local_date(pl.col("as_of"), tz))
    points = points.select(
        "cluster",
        "as_of",
        "day",
        local_midnight(pl.col("day"), tz).alias("lookup"),
        pl.lit(True).alias("partial"),
    )
    grid = pl.concat([day_ends, points]).sort("partial").unique(["cluster", "as_of"], keep="first")
    if s.since is not None:
        grid = grid.filter(pl.col("as_of") >= pl.lit(s.since, dtype=UTC_DT))
    return grid.join(cs.select("cluster", "reset", "lam"), on="cluster").with_columns(
        epoch=reset_epoch(pl.col("day"), pl.col("reset"))
    )


def association_tree(
    frames: dict[str, pl.LazyFrame], snaps: pl.LazyFrame, days: pl.LazyFrame
) -> pl.LazyFrame:
    """cluster, tree_time, account, user, parent_key, raw_shares, is_user, is_root.

    From the kept sshare snapshots; a cluster never collected gets Slurm's defaults (every association
    with Fairshare=1, accounts under root) built from the accounts and users seen in jobs (`days`: the
    day table, which lists every association that ran anything).
    """
    shares = frames["shares"].join(snaps.select("cluster", "snapshot_time"), on=["cluster", "snapshot_time"])
    real = shares.select(
        "cluster",
        pl.col("snapshot_time").alias("tree_time"),
        "account",
        pl.col("user").fill_null(""),
        pl.col("parent"),
        pl.col("raw_shares").cast(pl.Int64),
    )
    jobs = days.select("cluster", "account", "user")
    jobs = jobs.join(frames["shares"].select("cluster").unique(), on="cluster", how="anti").unique()
    epoch0 = pl.lit(datetime(1970, 1, 1, tzinfo=UTC), dtype=UTC_DT)
    synthetic = (
        pl.concat(
            [
                jobs.select("cluster")
                .unique()
                .with_columns(account=pl.lit(ROOT), user=pl.lit(""), parent=pl.lit(None, pl.String)),
                jobs.select("cluster", "account").unique().with_columns(user=pl.lit(""), parent=pl.lit(ROOT)),
                jobs.with_columns(parent=pl.lit(None, pl.String)),
            ],
            how="diagonal",
        )
        .select(
            "cluster",
            epoch0.alias("tree_time"),
            "account",
            "user",
            "parent",
            pl.when((pl.col("account") == ROOT) & (pl.col("user") == "") & pl.col("parent").is_null())
            .then(pl.lit(None, pl.Int64))
            .otherwise(pl.lit(1, pl.Int64))
            .alias("raw_shares"),
        )
        .unique(["cluster", "account", "user"])
    )
    tree = pl.concat([real, synthetic])
    is_user = pl.col("user") != ""
    is_root = (~is_user) & (pl.col("account") == ROOT)
    return tree.with_columns(
        is_user=is_user,
        is_root=is_root,
        parent_key=pl.when(is_user)
        .then(pl.col("account"))
        .when(is_root)
        .then(pl.lit(None, pl.String))
        .otherwise(pl.col("parent").str.strip_chars().replace("", None).fill_null(ROOT)),
    ).drop("parent")


def closure(tree: pl.LazyFrame) -> pl.LazyFrame:
    """Every node with each of its ancestors-or-self: cluster, tree_time, account, user, anc_account,
    anc_user, dist (0 = self). Ancestors of a user are accounts.

    Built by squaring (self+parent pairs composed with themselves 4 times reach distance 16): four joins
    instead of one per level keep the plan small.
    """
    t = ["cluster", "tree_time"]
    node = [*t, "account", "user"]
    selfs = tree.select(
        *node,
        pl.col("account").alias("anc_account"),
        pl.col("user").alias("anc_user"),
        pl.lit(0, pl.Int32).alias("dist"),
    )
    parents = tree.filter(pl.col("parent_key").is_not_null()).select(
        *node,
        pl.col("parent_key").alias("anc_account"),
        pl.lit("").alias("anc_user"),
        pl.lit(1, pl.Int32).alias("dist"),
    )
    pairs = pl.concat([selfs, parents])
    reach = 1
    while reach < MAX_DEPTH:
        step = pairs.select(
            *t,
            pl.col("account").alias("anc_account"),
            pl.col("user").alias("anc_user"),
            pl.col("anc_account").alias("far_account"),
            pl.col("anc_user").alias("far_user"),
            pl.col("dist").alias("far_dist"),
        )
        pairs = (
            pairs.join(step, on=[*t, "anc_account", "anc_user"])
            .select(
                *node,
                pl.col("far_account").alias("anc_account"),
                pl.col("far_user").alias("anc_user"),
                (pl.col("dist") + pl.col("far_dist")).alias("dist"),
            )
            .unique([*node, "anc_account", "anc_user"])
        )
        reach *= 2
    return pairs


def pick_tree(grid: pl.LazyFrame, tree: pl.LazyFrame) -> pl.LazyFrame:
    """The tree in force at each as_of: the latest kept snapshot at or before it, else the first one."""
    times = tree.select("cluster", "tree_time").unique().sort("tree_time")
    g = grid.sort("as_of")
    back = g.join_asof(
        times,
        left_on="as_of",
        right_on="tree_time",
        by="cluster",
        strategy="backward",
        check_sortedness=False,
    )
    fwd = g.join_asof(
        times, left_on="as_of", right_on="tree_time", by="cluster", strategy="forward", check_sortedness=False
    )
    return (
        back.join(
            fwd.select("cluster", "as_of", pl.col("tree_time").alias("tree_fwd")), on=["cluster", "as_of"]
        )
        .with_columns(tree_time=pl.coalesce("tree_time", "tree_fwd"))
        .drop("tree_fwd")
        .drop_nulls("tree_time")
    )


def user_usage_at(
    grid: pl.LazyFrame, tree: pl.LazyFrame, sparse: pl.LazyFrame, own_day: pl.LazyFrame
) -> pl.LazyFrame:
    """Decayed raw usage of every user association at every as_of (0 when it never ran).

    A partial as_of adds `own_day` (own_day_usage): its day's usage before it."""
    users = grid.join(
        tree.filter(pl.col("is_user")).select("cluster", "tree_time", "account", "user"),
        on=["cluster", "tree_time"],
    )
    carried = (
        users.sort("lookup")
        .join_asof(
            sparse.sort("t_last"),
            left_on="lookup",
            right_on="t_last",
            by=[*KEY, "epoch"],
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns(
            carry=(
                pl.col("u_last") * (-pl.col("lam") * seconds_between(pl.col("as_of"), pl.col("t_last"))).exp()
            ).fill_null(0.0)
        )
    )
    partial = own_day.join(
        grid.filter(pl.col("partial")).select("cluster", "as_of"), on=["cluster", "as_of"], how="semi"
    )
    return carried.join(partial, on=["cluster", "as_of", "account", "user"], how="left").select(
        "cluster",
        "as_of",
        "tree_time",
        "account",
        "user",
        (pl.col("carry") + pl.col("v").fill_null(0.0)).alias("raw_usage"),
    )


# ---------------------------------------------------------------------------------------------------------
# Tree math


def level_fs(norm: pl.Expr, eff: pl.Expr) -> pl.Expr:
    """Fair Tree LevelFS = S / U: 0 when S is 0, infinity when U is 0; 'parent' users rank first (inf),
    'parent' accounts get NO_VAL (fair_tree.c _calc_assoc_fs)."""
    return (
        pl.when(pl.col("is_root"))
        .then(pl.lit(None, pl.Float64))
        .when(pl.col("raw_shares").is_null() & pl.col("is_user"))
        .then(float("inf"))
        .when(pl.col("raw_shares").is_null())
        .then(NO_VAL)
        .when(norm == 0)
        .then(0.0)
        .when(eff == 0)
        .then(float("inf"))
        .otherwise(norm / eff)
    )


def tree_values(nodes: pl.LazyFrame) -> pl.LazyFrame:
    """Per node at each as_of: sibling-normalised shares, Fair Tree EffectvUsage and LevelFS, and the
    inputs of the classic algorithm. `nodes` has cluster, as_of, tree_time, account, user, parent_key,
    raw_shares, is_user, is_root, raw_usage."""
    at = ["cluster", "as_of"]
    sib = [*at, "parent_key"]
    accounts = nodes.filter(~pl.col("is_user")).select(
        *at,
        pl.col("account").alias("parent_key"),
        pl.col("raw_usage").alias("parent_raw"),
        pl.col("raw_shares").alias("parent_raw_shares"),
    )
    roots = nodes.filter(pl.col("is_root")).select(*at, pl.col("raw_usage").alias("root_raw"))
    v = (
        nodes.with_columns(level_shares=pl.col("raw_shares").sum().over(sib))
        .with_columns(
            sib_norm=pl.when(pl.col("level_shares") > 0)
            .then(pl.col("raw_shares") / pl.col("level_shares"))
            .otherwise(pl.when(pl.col("raw_shares").is_not_null()).then(0.0))
        )
        .join(accounts, on=sib, how="left")
        .join(roots, on=at, how="left")
    )
    parent_norm = v.filter(~pl.col("is_user")).select(
        *at, pl.col("account").alias("parent_key"), pl.col("sib_norm").alias("parent_sib_norm")
    )
    return (
        v.join(parent_norm, on=sib, how="left")
        .with_columns(
            norm_ft=pl.when(pl.col("is_root"))
            .then(1.0)
            .otherwise(pl.coalesce("sib_norm", "parent_sib_norm").fill_null(0.0)),
            eff_ft=pl.when(pl.col("is_root"))
            .then(1.0)
            .when(pl.col("parent_raw") > 0)
            .then(pl.col("raw_usage") / pl.col("parent_raw"))
            .otherwise(0.0),
        )
        .with_columns(level_fs=level_fs(pl.col("norm_ft"), pl.col("eff_ft")))
        .drop("parent_raw", "parent_raw_shares")
    )


def sibling_order(v: pl.LazyFrame) -> pl.LazyFrame:
    """Fair Tree's sort of each sibling set: LevelFS descending, users before accounts on ties
    (fair_tree.c _cmp_level_fs; names break remaining ties). `tied_local`: equal to the previous
    sibling's LevelFS (the first sibling compares with NO_VAL, as Slurm does)."""
    sib = ["cluster", "as_of", "parent_key"]
    order = [-pl.col("level_fs"), ~pl.col("is_user"), pl.col("account"), pl.col("user")]
    return (
        v.with_columns(
            pos=pl.int_range(pl.len()).over(sib, order_by=order),
        )
        .with_columns(
            prev_lfs=pl.col("level_fs").shift(1).over(sib, order_by=order).fill_null(NO_VAL),
        )
        .with_columns(tied_local=pl.col("level_fs") == pl.col("prev_lfs"), is_first=pl.col("pos") == 0)
    )


def with_ancestors(nodes: pl.LazyFrame, clos: pl.LazyFrame, attrs: pl.LazyFrame) -> pl.LazyFrame:
    """Each node (cluster, as_of, tree_time, account, user) once per ancestor-or-self, with that ancestor's
    `attrs` (keyed cluster, as_of, anc_account, anc_user) at the same as_of.

    The second join keeps the left order only so that it is not reordered: Polars (2.1) reorders chains
    of inner joins smallest relation first and would join nodes to attrs on (cluster, as_of) alone, every
    node times every node of its instant (100M rows and 13 CPU-s at 10M attempts, instead of 0.2).
    """
    return nodes.join(clos, on=["cluster", "tree_time", "account", "user"]).join(
        attrs, on=["cluster", "as_of", "anc_account", "anc_user"], maintain_order="left"
    )


def fair_tree_rank(v: pl.LazyFrame, clos: pl.LazyFrame) -> pl.LazyFrame:
    """Fair Tree's final factor: users ranked in depth-first pre-order of the sorted tree, rank/N.

    A user is tied (keeps the previous user's rank) when it, or an ancestor reached through first-child
    links only, equals its previous sibling's LevelFS (fair_tree.c _calc_tree_fs, `account_tied`).
    Returns cluster, as_of, account, user, fs_ft.
    """
    at = ["cluster", "as_of"]
    attrs = v.select(
        *at,
        pl.col("account").alias("anc_account"),
        pl.col("user").alias("anc_user"),
        "pos",
        "tied_local",
        "is_first",
        pl.col("is_root").alias("anc_is_root"),
    )
    users = v.filter(pl.col("is_user")).select(*at, "tree_time", "account", "user")
    chain = (
        with_ancestors(users, clos, attrs)
        .filter(~pl.col("anc_is_root"))
        .with_columns(stop=pl.col("dist").filter(~pl.col("is_first")).min().over([*at, "account", "user"]))
    )
    per_user = chain.group_by(*at, "account", "user").agg(
        path=pl.col("pos").sort_by("dist", descending=True).cast(pl.String).str.zfill(6).str.join("."),
        tied=(pl.col("tied_local") & (pl.col("dist") <= pl.col("stop").fill_null(MAX_DEPTH + 1))).any(),
    )
    n_users = pl.len().over(at)
    rnt = n_users - pl.int_range(pl.len()).over(at, order_by="path")
    return per_user.with_columns(
        rank=pl.when(pl.col("tied"))
        .then(pl.lit(None, pl.Int64))
        .otherwise(rnt.cast(pl.Int64))
        .forward_fill()
        .over(at, order_by="path")
    ).select(*at, "account", "user", (pl.col("rank").fill_null(n_users) / n_users).alias("fs_ft"))


def classic_values(v: pl.LazyFrame, clos: pl.LazyFrame) -> pl.LazyFrame:
    """The classic algorithm: S = product of sibling-normalised shares down the path, and
    UE = UA + (UE_parent - UA) * S_raw/S_all_siblings from root (UE_root = 1), unrolled along the path;
    FairShare = 2^(-UE/S). 'parent' users take their account's values, as Slurm's fs_assoc does.
    Returns cluster, as_of, account, user, norm_classic, eff_classic, fs_classic."""
    at = ["cluster", "as_of"]
    attrs = v.select(
        *at,
        pl.col("account").alias("anc_account"),
        pl.col("user").alias("anc_user"),
        pl.col("is_root").alias("anc_is_root"),
        pl.when(pl.col("is_root"))
        .then(1.0)
        .when(pl.col("root_raw") > 0)
        .then(pl.min_horizontal(pl.col("raw_usage") / pl.col("root_raw"), pl.lit(1.0)))
        .otherwise(0.0)
        .alias("ua"),
        pl.when(pl.col("is_root"))
        .then(0.0)
        .when(pl.col("level_shares") > 0)
        .then(pl.col("raw_shares") / pl.col("level_shares"))
        .otherwise(1.0)
        .alias("f"),
        pl.col("sib_norm").alias("anc_sib_norm"),
    )
    nodes = v.filter(pl.col("raw_shares").is_not_null() | pl.col("is_root")).select(
        *at, "tree_time", "account", "user"
    )
    chain = with_ancestors(nodes, clos, attrs)
    f_sorted = pl.col("f").sort_by("dist")
    own = chain.group_by(*at, "account", "user").agg(
        eff_classic=(
            pl.col("ua").sort_by("dist") * (1.0 - f_sorted) * f_sorted.cum_prod().shift(1, fill_value=1.0)
        ).sum(),
        norm_classic=pl.col("anc_sib_norm").filter(~pl.col("anc_is_root")).product(),
    )
    own = own.with_columns(
        norm_classic=pl.when(pl.col("account").eq(ROOT) & pl.col("user").eq(""))
        .then(1.0)
        .otherwise(pl.col("norm_classic"))
    )
    parent_users = (
        v.filter(pl.col("raw_shares").is_null() & pl.col("is_user"))
        .select(*at, "account", "user")
        .join(own.filter(pl.col("user") == "").drop("user"), on=[*at, "account"], how="left")
    )
    both = pl.concat([own, parent_users.select(own.collect_schema().names())])
    return both.with_columns(
        fs_classic=pl.when(pl.col("norm_classic") > 0)
        .then(pl.lit(2.0).pow(-(pl.col("eff_classic") / pl.col("norm_classic"))))
        .otherwise(0.0)
    )


def computed_rows(
    frames: dict[str, pl.LazyFrame], cs: pl.LazyFrame, own_day: pl.LazyFrame, days: pl.LazyFrame, s: Settings
) -> pl.LazyFrame:
    """The computed mart_fairshare rows at every as_of of the window.

    `days` (the day table of the whole history) carries usage up to each as_of's day; `own_day` (from
    the attempts of the window) adds the part of an as_of's own day before it.
    """
    # reuse(): these frames feed several branches; referenced lazily, the plan (and its optimisation)
    # grows with every reuse, and the closure's 16 joins alone take seconds to plan. The users' and nodes'
    # usage are collected too: run in one plan with the tree values they took 2.5 times as long.
    sparse = daily_usage(days, cs, s)
    snaps = reuse(tree_snapshots(frames["shares"], s))
    tree = reuse(association_tree(frames, snaps, days))
    clos = reuse(closure(tree))
    grid = reuse(pick_tree(asof_grid(days, snaps, cs, s), tree))
    users = reuse(user_usage_at(grid, tree, sparse, own_day))
    rolled = (
        users.join(clos, on=["cluster", "tree_time", "account", "user"])
        .group_by("cluster", "as_of", "anc_account", "anc_user")
        .agg(pl.col("raw_usage").sum())
        .rename({"anc_account": "account", "anc_user": "user"})
    )
    nodes = (
        grid.select("cluster", "as_of", "tree_time")
        .join(tree, on=["cluster", "tree_time"])
        .join(rolled, on=["cluster", "as_of", "account", "user"], how="left")
        .with_columns(pl.col("raw_usage").fill_null(0.0))
    )
    v = reuse(sibling_order(tree_values(reuse(nodes))))
    # each cluster reads only its algorithm's values: the other one's would cost as much again
    classic_clusters = cs.filter(pl.col("algorithm") == "classic").select("cluster")
    ft = fair_tree_rank(v.join(classic_clusters, on="cluster", how="anti"), clos)
    cl = classic_values(v.join(classic_clusters, on="cluster", how="semi"), clos)
    key = ["cluster", "as_of", "account", "user"]
    classic = pl.col("algorithm") == "classic"
    out = (
        v.join(ft, on=key, how="left")
        .join(cl, on=key, how="left")
        .join(cs.select("cluster", "algorithm"), on="cluster", how="left")
        .select(
            "cluster",
            "as_of",
            "account",
            "user",
            pl.col("parent_key").alias("parent"),
            "raw_shares",
            pl.when(classic).then(pl.col("norm_classic")).otherwise(pl.col("norm_ft")).alias("norm_shares"),
            "raw_usage",
            pl.when(classic).then(pl.col("eff_classic")).otherwise(pl.col("eff_ft")).alias("effectv_usage"),
            pl.when(classic).then(pl.lit(None, pl.Float64)).otherwise(pl.col("level_fs")).alias("level_fs"),
            pl.when(classic)
            .then(pl.col("fs_classic"))
            .when(pl.col("is_user"))
            .then(pl.col("fs_ft"))
            .otherwise(pl.lit(None, pl.Float64))
            .alias("fairshare"),
            pl.lit("computed").alias("source"),
        )
    )
    return out


def sshare_rows(frames: dict[str, pl.LazyFrame], s: Settings) -> pl.LazyFrame:
    """What Slurm itself reported at the compared instants (the last snapshot of each local day)."""
    snaps = tree_snapshots(frames["shares"], s)
    rows = frames["shares"].join(snaps.select("cluster", "snapshot_time"), on=["cluster", "snapshot_time"])
    if s.since is not None:
        rows = rows.filter(pl.col("snapshot_time") >= pl.lit(s.since, dtype=UTC_DT))
    user = pl.col("user").fill_null("")
    return rows.select(
        "cluster",
        pl.col("snapshot_time").alias("as_of"),
        "account",
        user.alias("user"),
        pl.when(user != "").then(pl.col("account")).otherwise(pl.col("parent")).alias("parent"),
        pl.col("raw_shares").cast(pl.Int64),
        "norm_shares",
        "raw_usage",
        "effectv_usage",
        "level_fs",
        "fairshare",
        pl.lit("sshare").alias("source"),
    )


def drift_rows(frames: dict[str, pl.LazyFrame], days: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """Each account's share of (undecayed) usage over trailing 7 and 30 days against its target share of
    the machine (the product of normalised shares down its path), and how long it has been starved
    (ratio below drift.fairshare_starved_ratio while it had jobs submitted) or over-served."""
    tz = s.timezone
    snaps = tree_snapshots(frames["shares"], s)
    tree = association_tree(frames, snaps, days)
    latest = tree.group_by("cluster").agg(pl.col("tree_time").max())
    tree = reuse(tree.join(latest, on=["cluster", "tree_time"]))
    clos = reuse(closure(tree))
    accounts = tree.filter(~pl.col("is_user") & ~pl.col("is_root"))
    # target share: product of sibling-normalised shares of the account and its ancestors
    t = tree.with_columns(level_shares=pl.col("raw_shares").sum().over("cluster", "tree_time", "parent_key"))
    t = t.with_columns(
        sib_norm=pl.when(pl.col("level_shares") > 0).then(pl.col("raw_shares") / pl.col("level_shares"))
    )
    target = (
        accounts.select("cluster", "tree_time", "account", "user")
        .join(clos, on=["cluster", "tree_time", "account", "user"])
        .join(
            t.select(
                "cluster",
                pl.col("account").alias("anc_account"),
                pl.col("user").alias("anc_user"),
                "sib_norm",
                pl.col("is_root").alias("anc_is_root"),
            ),
            on=["cluster", "anc_account", "anc_user"],
        )
        .filter(~pl.col("anc_is_root"))
        .group_by("cluster", "account")
        .agg(pl.col("sib_norm").product().alias("target_share"))
    )
    user_to_acc = (
        tree.filter(pl.col("is_user"))
        .select("cluster", "tree_time", "account", "user")
        .join(clos, on=["cluster", "tree_time", "account", "user"])
        .filter(pl.col("anc_user") == "")
        .select("cluster", "account", "user", pl.col("anc_account").alias("node"))
    )
    used = (
        days.filter(pl.col("raw") > 0)
        .select("cluster", "account", "user", "day", "raw")
        .join(user_to_acc, on=["cluster", "account", "user"])
        .group_by("cluster", "node", "day")
        .agg(pl.col("raw").sum())
    )
    submitted = (
        days.filter(pl.col("submitted") > 0)
        .select("cluster", "account", "user", "day", "submitted")
        .join(user_to_acc, on=["cluster", "account", "user"])
        .group_by("cluster", "node", "day")
        .agg(pl.col("submitted").sum())
    )
    today = local_date(
        pl.lit(s.now, dtype=UTC_DT) - pl.duration(microseconds=1), tz
    )  # now at midnight: yesterday
    first = used.group_by("cluster").agg(pl.col("day").min().alias("first"))
    days = first.with_columns(day=pl.date_ranges("first", today)).explode("day").select("cluster", "day")
    grid = days.join(accounts.select("cluster", pl.col("account").alias("node")), on="cluster")
    dense = (
        grid.join(used, on=["cluster", "node", "day"], how="left")
        .join(submitted, on=["cluster", "node", "day"], how="left")
        .with_columns(pl.col("raw").fill_null(0.0), pl.col("submitted").fill_null(0))
    )
    totals = used.filter(pl.col("node") == ROOT).select("cluster", "day", pl.col("raw").alias("root_raw"))
    window = ["cluster", "node"]

    def trailing(col: str, days_: int) -> pl.Expr:
        return pl.col(col).rolling_sum(days_, min_samples=1).over(window, order_by="day")

    dense = dense.join(
        days.join(totals, on=["cluster", "day"], how="left")
        .with_columns(pl.col("root_raw").fill_null(0.0))
        .with_columns(
            root7=pl.col("root_raw").rolling_sum(7, min_samples=1).over("cluster", order_by="day"),
            root30=pl.col("root_raw").rolling_sum(30, min_samples=1).over("cluster", order_by="day"),
        ),
        on=["cluster", "day"],
        how="left",
    ).with_columns(u7=trailing("raw", 7), u30=trailing("raw", 30), demand7=trailing("submitted", 7))
    out = (
        dense.join(target, left_on=["cluster", "node"], right_on=["cluster", "account"], how="left")
        .with_columns(
            usage_share_7d=pl.when(pl.col("root7") > 0).then(pl.col("u7") / pl.col("root7")),
            usage_share_30d=pl.when(pl.col("root30") > 0).then(pl.col("u30") / pl.col("root30")),
        )
        .with_columns(
            ratio=pl.when(pl.col("target_share") > 0).then(pl.col("usage_share_7d") / pl.col("target_share"))
        )
        .with_columns(
            state=pl.when((pl.col("ratio") < s.starved_ratio) & (pl.col("demand7") > 0))
            .then(pl.lit("starved"))
            .when(pl.col("ratio") > s.over_served_ratio)
            .then(pl.lit("over_served"))
            .otherwise(pl.lit("ok"))
        )
        .with_columns(
            run=(pl.col("state") != pl.col("state").shift(1))
            .fill_null(True)
            .cum_sum()
            .over(window, order_by="day")
        )
        .with_columns(run_start=pl.col("day").min().over([*window, "run"]))
        .with_columns(run_days=((pl.col("day") - pl.col("run_start")).dt.total_days() + 1).cast(pl.Int32))
    )
    starved = pl.col("state") == "starved"
    over = pl.col("state") == "over_served"
    out = out.select(
        "cluster",
        "day",
        pl.col("node").alias("account"),
        "usage_share_7d",
        "usage_share_30d",
        "target_share",
        "ratio",
        "state",
        pl.when(starved).then(pl.col("run_start")).alias("starved_since"),
        pl.when(over).then(pl.col("run_start")).alias("over_served_since"),
        pl.when(starved).then(pl.col("run_days")).otherwise(0).cast(pl.Int32).alias("days_starved"),
        pl.when(over).then(pl.col("run_days")).otherwise(0).cast(pl.Int32).alias("days_over_served"),
    )
    if s.since is not None:
        out = out.filter(pl.col("day") >= local_date(pl.lit(s.since, dtype=UTC_DT), tz))
    return out


def _frames(frames: dict[str, pl.LazyFrame]) -> dict[str, pl.LazyFrame]:
    """Missing inputs become empty frames, so a database without sshare or config still computes."""
    schemas = {
        "jobs": {
            "cluster": pl.String,
            "account": pl.String,
            "user": pl.String,
            "submit_time": UTC_DT,
            "start_time": UTC_DT,
            "end_time": UTC_DT,
            "billing": pl.Float64,
            "cpus": pl.Int32,
            "gpus": pl.Int32,
            "state": pl.String,
        },
        "shares": {
            "cluster": pl.String,
            "snapshot_time": UTC_DT,
            "account": pl.String,
            "user": pl.String,
            "parent": pl.String,
            "raw_shares": pl.Int64,
            "norm_shares": pl.Float64,
            "raw_usage": pl.Float64,
            "effectv_usage": pl.Float64,
            "level_fs": pl.Float64,
            "fairshare": pl.Float64,
        },
        "slurm_config": {"cluster": pl.String, "snapshot_time": UTC_DT, "key": pl.String, "value": pl.String},
        "fairshare_daily": DAILY_SCHEMA,
        "fairshare_submits": SUBMITS_SCHEMA,
    }
    return {name: with_columns_of(frames.get(name), schema) for name, schema in schemas.items()}


def with_columns_of(frame: pl.LazyFrame | None, schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    """`frame` with any column of `schema` it lacks added as nulls (an empty frame when it is None)."""
    if frame is None:
        return _empty(schema)
    have = frame.collect_schema()
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in schema.items() if name not in have]
    return frame.with_columns(*missing, *to_utc(have)) if missing or to_utc(have) else frame


def to_utc(schema: Mapping[str, pl.DataType]) -> list[pl.Expr]:
    """Timestamps in the one zone the pipeline compares them in (a DuckDB session in another zone, or
    'Etc/UTC', would otherwise fail every comparison with a UTC literal)."""
    out = []
    for name, dtype in schema.items():
        if isinstance(dtype, pl.Datetime) and dtype.time_zone != "UTC":
            col = pl.col(name).cast(pl.Datetime("us", dtype.time_zone))
            col = (
                col.dt.replace_time_zone("UTC")
                if dtype.time_zone is None
                else col.dt.convert_time_zone("UTC")
            )
            out.append(col.alias(name))
    return out


def day_tables(
    f: dict[str, pl.LazyFrame], cs: pl.LazyFrame, s: Settings, stored: bool
) -> tuple[pl.LazyFrame, pl.LazyFrame, pl.LazyFrame]:
    """The day table's charges and attempt counts, and the own-day usage of the instants that are not day
    ends (own_day_usage), from one streaming pass over the attempts.

    The slices (14M rows at 10M attempts) are only ever aggregated: keeping them for the instants, as a
    second reader of the same stream, held them all in memory (+1.3 GB).
    """
    jobs = f["jobs"]
    calendar = reuse(charge_calendar(jobs, cs, tree_snapshots(f["shares"], s), s))
    zones = None
    if s.timezone != "UTC":
        now = pl.lit(s.now, dtype=UTC_DT)
        ends = pl.min_horizontal(pl.col("end_time").fill_null(now), now)
        instants = pl.concat(
            [jobs.select(pl.col(c).dt.epoch("us").alias("us")) for c in ("start_time", "submit_time")]
            + [jobs.select((ends - pl.duration(microseconds=1)).dt.epoch("us").alias("us"))]
        )
        zones = reuse(zone_offsets(instants, s.timezone))
    instants = tuple(
        t for t in ("t_snap", "t_now") if calendar.select(pl.col(t).is_not_null().any()).collect().item()
    )
    charges, submits = pl.collect_all(
        [day_charges(usage_slices(jobs, calendar, zones, s), instants), job_submits(jobs, zones)],
        engine="streaming",
    )
    used = window_rows(f, "fairshare_daily", charges.lazy(), DAILY_SCHEMA, s, stored)
    submits = window_rows(f, "fairshare_submits", submits.lazy(), SUBMITS_SCHEMA, s, stored)
    return reuse(used), reuse(submits), reuse(own_day_usage(charges.lazy(), calendar))


def compute(frames: dict[str, pl.LazyFrame], params: Any) -> dict[str, pl.LazyFrame]:
    """mart_fairshare (computed and sshare rows per association and as_of), mart_fairshare_drift, and the
    day table mart_fairshare_daily the next incremental run starts from.

    With `since` and the stored `fairshare_daily` / `fairshare_submits` rows of the days before the window,
    as the runner reads them, `jobs` need only hold the attempts charged or started from the window's first
    day on; otherwise `jobs` is the whole history.
    """
    s = settings(params)
    f = _frames(frames)
    stored = frames.get("fairshare_daily") is not None and frames.get("fairshare_submits") is not None
    cs = reuse(cluster_settings(f, s))
    used, submits, own_days = day_tables(f, cs, s, stored)
    days = reuse(history_days(used, submits))
    computed = computed_rows(f, cs, own_days, days, s)
    fairshare = pl.concat(
        [computed.select(list(FAIRSHARE_SCHEMA)), sshare_rows(f, s).select(list(FAIRSHARE_SCHEMA))]
    ).cast(FAIRSHARE_SCHEMA)
    drift = drift_rows(f, days, s).select(list(DRIFT_SCHEMA)).cast(DRIFT_SCHEMA)
    return {
        "mart_fairshare": fairshare,
        "mart_fairshare_drift": drift,
        "mart_fairshare_daily": used.filter(pl.col("raw") > 0),
        "mart_fairshare_submits": submits.filter(pl.col("day").is_not_null()),
    }


def sshare_agreement(mart: pl.LazyFrame) -> pl.LazyFrame:
    """Computed against sshare rows of mart_fairshare at the same instant, per association.

    sshare prints RawUsage truncated to an integer and the factors to 6 decimals, so `raw_ok` allows 1 %
    or 2 units, `effectv_ok` 1 % or 1e-6, and `fairshare_ok` equality at sshare's 6 decimals.
    """
    key = ["cluster", "as_of", "account", "user"]
    cols = ["raw_usage", "effectv_usage", "fairshare", "norm_shares", "level_fs"]
    comp = mart.filter(pl.col("source") == "computed").select(*key, *cols)
    ref = mart.filter(pl.col("source") == "sshare").select(
        *key, *[pl.col(c).alias(f"sshare_{c}") for c in cols]
    )

    def close(a: str, b: str, rel: float, abs_: float) -> pl.Expr:
        diff = (pl.col(a) - pl.col(b)).abs()
        return (diff <= abs_) | (diff <= rel * pl.col(b).abs())

    return comp.join(ref, on=key, how="inner").with_columns(
        raw_ok=close("raw_usage", "sshare_raw_usage", 0.01, 2.0),
        effectv_ok=close("effectv_usage", "sshare_effectv_usage", 0.01, 1e-6),
        fairshare_ok=pl.col("sshare_fairshare").is_null()
        | ((pl.col("fairshare") - pl.col("sshare_fairshare")).abs() <= 5e-7),
    )
