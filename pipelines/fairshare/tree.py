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


def normalised_shares(tree: pl.LazyFrame, clos: pl.LazyFrame) -> pl.LazyFrame:
    """Each association's NormShares as sshare prints it under Fair Tree, and its share of the machine.

    Slurm 22.05 (`assoc_mgr.c`): an association whose shares are `parent` (raw_shares NULL, root excepted)
    has no shares of its own; its children are attached to its first ancestor that is not `parent`
    (`fs_assoc_ptr`, `_find_assoc_parent`), and so are pooled with that ancestor's other children. The
    shares of a level are the sum over those children, a `parent` child adding its own pooled children
    (`_get_children_level_shares`). So for every association A, with F its first non-`parent` ancestor:

    * `norm_shares` = raw_shares(A) / Σ raw_shares of the non-`parent` associations whose F is the same
      (`_normalize_assoc_shares_fair_tree`); a `parent` association prints F's own norm_shares; root prints 0
      (no level above it);
    * `target_share` (its share of the machine, what the classic algorithm prints as NormShares,
      `_normalize_assoc_shares_traditional`) = the product of norm_shares over A and its non-`parent`
      ancestors below root; for a `parent` account, the sum of the target shares of the associations pooled
      through it (its descendants whose F lies above it); a `parent` user holds none.

    `clos` is closure(tree). Returns cluster, tree_time, account, user, fs_account, fs_user, level_shares,
    norm_shares, target_share.
    """
    t = ["cluster", "tree_time"]
    node = [*t, "account", "user"]
    attrs = tree.select(
        *node,
        "raw_shares",
        "is_root",
        (pl.col("raw_shares").is_null() & ~pl.col("is_root")).alias("pooled"),
    )
    anc = attrs.select(
        *t,
        pl.col("account").alias("anc_account"),
        pl.col("user").alias("anc_user"),
        pl.col("pooled").alias("anc_pooled"),
        pl.col("is_root").alias("anc_root"),
    )
    with_anc = clos.join(anc, on=[*t, "anc_account", "anc_user"])
    fs = (
        with_anc.filter((pl.col("dist") >= 1) & ~pl.col("anc_pooled"))
        .sort("dist")
        .group_by(node)
        .agg(
            pl.col("anc_account").first().alias("fs_account"),
            pl.col("anc_user").first().alias("fs_user"),
            pl.col("dist").first().alias("fs_dist"),
        )
    )
    own = attrs.join(fs, on=node, how="left")
    level = (
        own.filter(~pl.col("pooled") & ~pl.col("is_root"))
        .group_by(*t, "fs_account", "fs_user")
        .agg(pl.col("raw_shares").sum().alias("level_shares"))
    )
    own = own.join(level, on=[*t, "fs_account", "fs_user"], how="left")
    own = own.with_columns(
        pl.when(pl.col("is_root") | pl.col("pooled"))
        .then(None)
        .when(pl.col("level_shares") > 0)
        .then(pl.col("raw_shares") / pl.col("level_shares"))
        .otherwise(0.0)
        .alias("_norm")
    )
    norm_of = own.select(
        *t,
        pl.col("account").alias("fs_account"),
        pl.col("user").alias("fs_user"),
        pl.col("_norm").alias("_fs_norm"),
    )
    own = own.join(norm_of, on=[*t, "fs_account", "fs_user"], how="left").with_columns(
        pl.when(pl.col("is_root"))
        .then(0.0)
        .when(pl.col("pooled"))
        .then(pl.col("_fs_norm").fill_null(0.0))
        .otherwise(pl.col("_norm"))
        .alias("norm_shares")
    )
    chain_norm = own.select(
        *t, pl.col("account").alias("anc_account"), pl.col("user").alias("anc_user"), "_norm"
    )
    chain = (
        with_anc.filter(~pl.col("anc_pooled") & ~pl.col("anc_root"))
        .join(chain_norm, on=[*t, "anc_account", "anc_user"])
        .group_by(node)
        .agg(pl.col("_norm").product().alias("_chain"))
    )
    own = own.join(chain, on=node, how="left")
    # a `parent` account B: the non-`parent` descendants X whose F is above B (F farther from X than B is)
    pooled_b = with_anc.filter(pl.col("anc_pooled") & (pl.col("dist") >= 1)).select(
        *node, pl.col("anc_account").alias("b_account"), pl.col("anc_user").alias("b_user"), "dist"
    )
    through = (
        pooled_b.join(own.select(*node, "fs_dist", "pooled", "_chain"), on=node)
        .filter(~pl.col("pooled") & (pl.col("fs_dist") > pl.col("dist")))
        .group_by(*t, "b_account", "b_user")
        .agg(pl.col("_chain").sum().alias("_through"))
        .rename({"b_account": "account", "b_user": "user"})
    )
    own = own.join(through, on=node, how="left").with_columns(
        pl.when(pl.col("is_root"))
        .then(1.0)
        .when(pl.col("pooled"))
        .then(pl.col("_through").fill_null(0.0))
        .otherwise(pl.col("_chain"))
        .alias("target_share")
    )
    return own.select(*node, "fs_account", "fs_user", "level_shares", "norm_shares", "target_share")
