"""The association tree in force at each instant: sshare's last snapshot of a day, or Slurm's defaults built
from the associations that ran anything, and its ancestor closure."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, local_day
from slurmscope.pipelines.fairshare.decay import Settings
from slurmscope.pipelines.fairshare.schema import ROOT

MAX_DEPTH = 16
"""Deepest association tree handled (root = 0). Real trees rarely exceed 6 levels."""


def tree_snapshots(shares: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """The last sshare snapshot of each local day: the trees used, and the instants compared with Slurm."""
    return (
        shares.select("cluster", "snapshot_time")
        .unique()
        .filter(pl.col("snapshot_time") <= pl.lit(s.now, dtype=UTC_DT))
        .with_columns(day=local_day(pl.col("snapshot_time"), s.timezone))
        .group_by("cluster", "day")
        .agg(pl.col("snapshot_time").max())
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
