"""Fair-share drift's target share against Slurm's own normalisation: the NormShares sshare printed on the real
Slurm 22.05 test bed, `parent` shares included (tests/fixtures/slurm-22.05-fairshare/, PROVENANCE.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from slurmscope.collectors import sshare
from slurmscope.pipelines.fairshare.tree import association_tree, closure, normalised_shares

from tests.paths import FIXTURES

CAPTURES = FIXTURES / "slurm-22.05-fairshare"
AT = datetime(2026, 12, 4, 14, 55, 37, tzinfo=UTC)


def _shares(name: str) -> pl.DataFrame:
    argv = (CAPTURES / f"{name}.argv").read_text().split() if (CAPTURES / f"{name}.argv").exists() else None
    if argv is not None:
        assert argv[1:] == ["--all", "--long", "--parsable2"]  # the live collector's sshare line
    p = sshare.parse(
        (CAPTURES / f"{name}.txt").read_bytes(), cluster="slurmbed", snapshot_time=AT, tz=ZoneInfo("UTC")
    )
    assert p.quarantine.height == 0
    return p.tables["shares"]


def _normalised(shares: pl.DataFrame) -> pl.DataFrame:
    snaps = shares.select("cluster", "snapshot_time").unique().lazy()
    no_jobs = pl.LazyFrame(schema={"cluster": pl.String, "account": pl.String, "user": pl.String})
    tree = association_tree({"shares": shares.lazy()}, snaps, no_jobs)
    got = normalised_shares(tree, closure(tree)).collect()
    return got.join(
        shares.select("account", pl.col("user").fill_null(""), pl.col("norm_shares").alias("sshare")),
        on=["account", "user"],
    )


@pytest.mark.parametrize("name", ["sshare", "sshare_parent"])
def test_normalised_shares_equal_sshare_normshares(name):
    shares = _shares(name)
    got = _normalised(shares)
    assert got.height == shares.height
    # sshare prints six decimals
    off = got.filter((pl.col("norm_shares") - pl.col("sshare")).abs() > 5e-7)
    assert off.height == 0, off.select("account", "user", "norm_shares", "sshare")


def test_parent_shares_pool_children_and_hold_no_target_of_their_own():
    got = {(r["account"], r["user"]): r for r in _normalised(_shares("sshare_parent")).to_dicts()}
    # research (60 of root's 60 + 25 + 15 + 1 = 101) has pretraining 40 and vision 20 under it, and the
    # `parent` account pooled, whose sub-accounts pooled-a 30 and pooled-b 10 join research's level: 100
    assert got["pooled-a", ""]["level_shares"] == got["pretraining", ""]["level_shares"] == 100
    assert (got["pooled-a", ""]["fs_account"], got["pooled", ""]["fs_account"]) == ("research", "research")
    research = 60 / 101
    # target share of the machine: 0.3 x 60/101 for pooled-a; pooled holds what it pools: (30 + 10)/100 of it
    assert got["pooled-a", ""]["target_share"] == pytest.approx(0.3 * research)
    assert got["pooled", ""]["target_share"] == pytest.approx(0.4 * research)
    assert got["pretraining", ""]["target_share"] == pytest.approx(0.4 * research)
    # sbbob's `parent` association in pretraining takes pretraining's NormShares and no target; sbalice, alone
    # with shares there, holds all of it
    assert got["pretraining", "sbbob"]["norm_shares"] == pytest.approx(0.4)
    assert got["pretraining", "sbbob"]["target_share"] == 0.0
    assert got["pretraining", "sbalice"]["target_share"] == pytest.approx(0.4 * research)
    # under root a `parent` user takes root's NormShares, which is 0 (no level above root)
    assert got["root", "sbcarol"]["norm_shares"] == 0.0
    # the machine is shared out exactly: the leaves' targets (users with shares, and pooled-b, an account
    # with none) add up to 1
    leaves = [r for r in got.values() if r["user"] or r["account"] == "pooled-b"]
    assert sum(r["target_share"] for r in leaves) == pytest.approx(1.0)
