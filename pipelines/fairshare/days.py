"""The incremental day table: the charge calendar of billing days, one streaming pass over the attempts, and
the stored days before the window carried forward (docs/pipelines.md, "Incremental runs")."""

from __future__ import annotations

from typing import Any

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, day_start, local_day, lookup_of
from slurmscope.pipelines.fairshare.decay import Settings
from slurmscope.pipelines.fairshare.schema import DAILY_SCHEMA, SUBMITS_SCHEMA, reuse
from slurmscope.pipelines.fairshare.tree import tree_snapshots
from slurmscope.pipelines.fairshare.usage import day_charges, job_submits, own_day_usage, usage_slices


def charge_calendar(jobs: pl.LazyFrame, cs: pl.LazyFrame, snaps: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """cluster, day, day_start, day_end, lam, t_snap, t_now: every local day an attempt can be charged on,
    from the day before the first start (a zone may turn its clocks back over midnight) to the day after
    `now`, with the instants inside it at which usage is reported (the day's kept sshare snapshot; `now`
    on its own day, unless that snapshot is `now`)."""
    tz = s.timezone
    now = pl.lit(s.now, dtype=UTC_DT)
    days = (
        jobs.select(first=local_day(pl.col("start_time").min(), tz) - pl.duration(days=1))
        .drop_nulls()  # no attempt: no day
        .select(day=pl.date_ranges("first", local_day(now, tz) + pl.duration(days=1)))
        .explode("day")
    )
    return (
        days.with_columns(
            day_start=day_start(pl.col("day"), tz),
            day_end=day_start(pl.col("day") + pl.duration(days=1), tz),
        )
        .join(cs.select("cluster", "lam"), how="cross")
        .join(
            snaps.select("cluster", "day", pl.col("snapshot_time").alias("t_snap")),
            on=["cluster", "day"],
            how="left",
        )
        .with_columns(
            t_now=pl.when(
                (pl.col("day") == local_day(now, tz)) & (pl.col("t_snap") != now).fill_null(True)
            ).then(now)
        )
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
    first = local_day(pl.lit(s.since, dtype=UTC_DT), s.timezone)
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
    now = pl.lit(s.now, dtype=UTC_DT)
    ends = pl.min_horizontal(pl.col("end_time").fill_null(now), now)
    instants = pl.concat(
        [jobs.select(pl.col(c).dt.epoch("us").alias("us")) for c in ("start_time", "submit_time")]
        + [jobs.select((ends - pl.duration(microseconds=1)).dt.epoch("us").alias("us"))]
    )
    days = lookup_of(s.timezone, instants)
    instants = tuple(
        t for t in ("t_snap", "t_now") if calendar.select(pl.col(t).is_not_null().any()).collect().item()
    )
    charges, submits = pl.collect_all(
        [day_charges(usage_slices(jobs, calendar, days, s), instants), job_submits(jobs, days)],
        engine="streaming",
    )
    used = window_rows(f, "fairshare_daily", charges.lazy(), DAILY_SCHEMA, s, stored)
    submits = window_rows(f, "fairshare_submits", submits.lazy(), SUBMITS_SCHEMA, s, stored)
    return reuse(used), reuse(submits), reuse(own_day_usage(charges.lazy(), calendar))
