"""mart_fairshare_drift: each account's share of usage against its target share, and how long it has been
starved or over-served."""

from __future__ import annotations

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, local_day
from slurmscope.pipelines.fairshare.decay import Settings
from slurmscope.pipelines.fairshare.schema import ROOT, reuse
from slurmscope.pipelines.fairshare.tree import association_tree, closure, normalised_shares, tree_snapshots


def drift_rows(frames: dict[str, pl.LazyFrame], days: pl.LazyFrame, s: Settings) -> pl.LazyFrame:
    """Each account's share of (undecayed) usage over trailing 7 and 30 days against its target share of
    the machine (Slurm's normalised shares multiplied down its path, `parent` shares pooled as Slurm pools
    them: tree.normalised_shares), and how long it has been starved
    (ratio below drift.fairshare_starved_ratio while it had jobs submitted) or over-served."""
    tz = s.timezone
    snaps = tree_snapshots(frames["shares"], s)
    tree = association_tree(frames, snaps, days)
    latest = tree.group_by("cluster").agg(pl.col("tree_time").max())
    tree = reuse(tree.join(latest, on=["cluster", "tree_time"]))
    clos = reuse(closure(tree))
    accounts = tree.filter(~pl.col("is_user") & ~pl.col("is_root"))
    # target share: the account's share of the machine, Slurm's normalisation (tree.normalised_shares)
    target = (
        accounts.select("cluster", "tree_time", "account", "user")
        .join(normalised_shares(tree, clos), on=["cluster", "tree_time", "account", "user"])
        .select("cluster", "account", "target_share")
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
    today = local_day(
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
        out = out.filter(pl.col("day") >= local_day(pl.lit(s.since, dtype=UTC_DT), tz))
    return out
