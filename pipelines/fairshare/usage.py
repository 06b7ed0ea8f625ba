"""What each association was charged: attempts cut at the billing zone's days, their charges per day, and
attempt counts per start and submit day."""

from __future__ import annotations

from datetime import datetime

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, DayLookup
from slurmscope.pipelines.fairshare.decay import Settings, decayed_usage, seconds_between

from slurmscope.slurm_states import JOB_ENDED_STATES, JOB_STATE_WORD


def charge_rate(charge: str) -> pl.Expr:
    """Units per second a job is charged: billing TRES (Slurm's default: CPUs when no billing) or GPUs."""
    if charge == "gpu_seconds":
        return pl.col("gpus").cast(pl.Float64).fill_null(0.0)
    return pl.coalesce(pl.col("billing").cast(pl.Float64), pl.col("cpus").cast(pl.Float64)).fill_null(0.0)


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


def usage_slices(jobs: pl.LazyFrame, calendar: pl.LazyFrame, days: DayLookup, s: Settings) -> pl.LazyFrame:
    """Each job attempt's charged time cut at local midnights: one row per (job, day) it ran in.

    Running jobs (no End) accrue up to `now`; finished ones without an End are not charged (see
    charged_until). Columns: cluster, account, user, day, sa, sb, rate and the `calendar` columns of the
    day (day_end, lam, t_snap, t_now).

    Day bounds, decay rate and the day's instants come from one join with the calendar, local dates from
    `days` (calendar.DayLookup): zone arithmetic per row cost more than all the rest at 10M attempts.
    """
    base = jobs.select(
        "cluster",
        *association(),
        pl.col("start_time").alias("a"),
        charged_until(s.now).alias("b"),
        charge_rate(s.charge).alias("rate"),
    ).filter(pl.col("a").is_not_null() & (pl.col("b") > pl.col("a")) & (pl.col("rate") > 0))
    base = base.with_columns(
        days.day_of(pl.col("a")).alias("day"),
        days.day_of(pl.col("b") - pl.duration(microseconds=1)).alias("_last"),
    )
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


def job_submits(jobs: pl.LazyFrame, days: DayLookup) -> pl.LazyFrame:
    """cluster, day (start), submit_day, account, user, submitted: attempts per association, local start day
    and submit day. `submitted` counts those with a submit time, account and user (drift's demand joins on
    them); every started attempt has a row, so the rows also list every association that ran anything.
    `days`: the billing days of every start and submit time."""
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
    rows = rows.with_columns(
        days.day_of(pl.col("start_time")).alias("day"), days.day_of(pl.col("submit_time")).alias("submit_day")
    )
    return (
        rows.with_columns(pl.coalesce("submit_day", "day").alias("submit_day"))
        .group_by("cluster", "day", "submit_day", "account", "user")
        .agg(pl.col("counted").sum().cast(pl.Int64).alias("submitted"))
        .with_columns(pl.col("account", "user").cast(pl.String))
    )
