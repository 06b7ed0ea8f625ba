"""Tree math: normalised shares, effective usage and the FairShare factor, by Fair Tree
(https://slurm.schedmd.com/fair_tree.html) and by the classic algorithm
(https://slurm.schedmd.com/classic_fair_share.html)."""

from __future__ import annotations

import polars as pl
from slurmscope.pipelines.fairshare.schema import ROOT
from slurmscope.pipelines.fairshare.tree import MAX_DEPTH

NO_VAL = 4294967294.0
"""Slurm's NO_VAL: the LevelFS Fair Tree gives an account whose shares are 'parent' (it sorts high)."""


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
