"""MIG slices of sinfo snapshots as pseudo-nodes (common.mig_node_states), on a tiny literal frame shaped like
NODE_STATES_SQL's rows; every expected count is worked out in the comments.

Three snapshots ten minutes apart, partition gpu:
- node w1: two whole A100s, never MIG (mig_gres NULL in every row, as NODE_STATES_SQL writes it).
- node m1: an A100 that an operator puts in MIG mode after the first snapshot (NULL at t0), then cut into
  3g.20gb + 4 x 1g.5gb = 3/7 + 4/7 = one GPU (NVIDIA MIG user guide, A100-SXM4-40GB profiles); at t1 the 3g
  slice and one 1g slice are in use, at t2 none.
A slice count is kept in units of 1/MIG_UNITS GPU (28 units a GPU: 7, 4 and 2 slices all divide it).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from slurmscope.pipelines.common import MIG_NODE_SEP, MIG_UNITS, exploded_mig, mig_node_states

from slurmscope import mig

T0 = datetime(2026, 12, 1, tzinfo=UTC)
T1 = T0 + timedelta(minutes=10)
T2 = T0 + timedelta(minutes=20)
GRES = "gpu:a100_3g.20gb:1,gpu:a100_1g.5gb:4"


def snapshots() -> pl.LazyFrame:
    return pl.LazyFrame(
        {
            "snapshot_time": [T0, T0, T1, T1, T2, T2],
            "node": ["w1", "m1", "w1", "m1", "w1", "m1"],
            "partition": ["gpu"] * 6,
            "state": ["mixed", "idle", "mixed", "mixed", "mixed", "idle"],
            "state_flags": [""] * 6,
            "gpus_total": [2, 1, 2, 0, 2, 0],
            "gpus_used": [1, 0, 1, 0, 1, 0],
            "gpu_type": ["a100"] * 6,
            "mig_gres": [None, None, None, GRES, None, GRES],
            "mig_gres_used": [
                None,
                None,
                None,
                "gpu:a100_3g.20gb:1(IDX:0),gpu:a100_1g.5gb:1(IDX:1)",
                None,
                "gpu:a100_3g.20gb:0(IDX:N/A),gpu:a100_1g.5gb:0(IDX:N/A)",
            ],
        },
        schema_overrides={"snapshot_time": pl.Datetime("us", "UTC")},
    )


def test_only_nodes_with_slices_become_mig_pseudo_nodes_with_every_snapshot():
    got = mig_node_states(snapshots(), {}).sort("snapshot_time").collect()
    assert MIG_UNITS == 28
    # m1 only (w1 never had MIG: no row for it, not even a zero one); its t0 row stays, at 0, so that the
    # interval the slices start at t1 is not stretched back to t0. t1: 28 units (one GPU) in all, used the
    # 3g slice (3/7 = 12 units) and one 1g (1/7 = 4 units) = 16; t2: all 28 idle.
    assert got.select(
        "snapshot_time", "node", "partition", "state", "gpus_total", "gpus_used", "gpu_type"
    ).rows() == [
        (T0, "m1" + MIG_NODE_SEP + "a100", "gpu", "idle", 0, 0, "a100"),
        (T1, "m1" + MIG_NODE_SEP + "a100", "gpu", "mixed", 28, 16, "a100"),
        (T2, "m1" + MIG_NODE_SEP + "a100", "gpu", "idle", 28, 0, "a100"),
    ]
    assert "mig_gres" not in got.columns and "mig_gres_used" not in got.columns


def test_nodes_without_mig_give_no_rows_and_are_never_parsed(monkeypatch):
    """The node snapshots of a large cluster are mostly whole-GPU nodes with NULL MIG columns: they are
    dropped before the parse (a Python callback) and before the joins, and dropping them changes no result."""
    batches: list[str] = []
    parse = mig.holdings
    monkeypatch.setattr(mig, "holdings", lambda text, *a: batches.append(text) or parse(text, *a))
    without = snapshots().filter(pl.col("node") == "w1")
    assert mig_node_states(without, {}).collect().height == 0
    assert exploded_mig(without, "mig_gres", {}).collect().height == 0
    assert batches == []
    # m1's rows alone give exactly what the mixed frame gives
    alone = mig_node_states(snapshots().filter(pl.col("node") == "m1"), {}).sort("snapshot_time").collect()
    assert alone.equals(mig_node_states(snapshots(), {}).sort("snapshot_time").collect())


def test_exploded_mig_gives_one_row_per_type_of_the_rows_that_list_slices():
    got = exploded_mig(snapshots().select("snapshot_time", "node", "mig_gres"), "mig_gres", {}).sort(
        "snapshot_time", "mig_type"
    )
    # t1 and t2 of m1, each 1 x 3g (12 units) and 4 x 1g (4 units each)
    assert got.select(
        "snapshot_time", "node", "mig_model", "mig_type", "mig_units", "mig_count"
    ).collect().rows() == [
        (T1, "m1", "a100", "a100_1g.5gb", 16, 4),
        (T1, "m1", "a100", "a100_3g.20gb", 12, 1),
        (T2, "m1", "a100", "a100_1g.5gb", 16, 4),
        (T2, "m1", "a100", "a100_3g.20gb", 12, 1),
    ]
