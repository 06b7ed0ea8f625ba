"""The mart_fairshare rows: computed at every as_of of the window (day ends, sshare's instants, now), and
what sshare reported at the same instants."""

from __future__ import annotations

from datetime import UTC

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, day_start, local_day
from slurmscope.pipelines.fairshare.decay import Settings, daily_usage, reset_epoch, seconds_between
from slurmscope.pipelines.fairshare.factors import classic_values, fair_tree_rank, sibling_order, tree_values
from slurmscope.pipelines.fairshare.schema import KEY, reuse
from slurmscope.pipelines.fairshare.tree import association_tree, closure, pick_tree, tree_snapshots


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
                "first", local_day(pl.lit(s.since, dtype=UTC_DT), tz) - pl.duration(days=1)
            )
        )
    day_ends = (
        first.with_columns(day=pl.date_ranges("first", local_day(now, tz)))
        .explode("day")
        .drop_nulls("day")
        .with_columns(as_of=day_start(pl.col("day") + pl.duration(days=1), tz))
        .filter(pl.col("as_of") <= now)
        .select("cluster", "as_of", "day", pl.col("as_of").alias("lookup"), pl.lit(False).alias("partial"))
    )
    clusters = cs.select("cluster")
    points = pl.concat(
        [
            snaps.select("cluster", pl.col("snapshot_time").alias("as_of")),
            clusters.select("cluster", now.alias("as_of")),
        ]
    ).with_columns(day=local_day(pl.col("as_of"), tz))
    points = points.select(
        "cluster",
        "as_of",
        "day",
        day_start(pl.col("day"), tz).alias("lookup"),
        pl.lit(True).alias("partial"),
    )
    grid = pl.concat([day_ends, points]).sort("partial").unique(["cluster", "as_of"], keep="first")
    if s.since is not None:
        grid = grid.filter(pl.col("as_of") >= pl.lit(s.since, dtype=UTC_DT))
    return grid.join(cs.select("cluster", "reset", "lam"), on="cluster").with_columns(
        epoch=reset_epoch(pl.col("day"), pl.col("reset"))
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
