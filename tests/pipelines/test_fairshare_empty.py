"""A cluster with sshare snapshots but no started attempt yet (or an empty window)."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest
from slurmscope.pipelines import fairshare as fs
from slurmscope.pipelines.fairshare.schema import inputs
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config

NOW = datetime(2026, 1, 1, tzinfo=UTC)
UTC_DT = pl.Datetime("us", "UTC")


def shares() -> pl.LazyFrame:
    at = datetime(2025, 12, 31, 12, tzinfo=UTC)
    rows = [("root", None, None, None), ("a", None, "root", 1), ("a", "u", "a", 1)]
    return pl.LazyFrame(
        {
            "cluster": ["c"] * 3,
            "snapshot_time": [at] * 3,
            "account": [r[0] for r in rows],
            "user": [r[1] for r in rows],
            "parent": [r[2] for r in rows],
            "raw_shares": [r[3] for r in rows],
            "norm_shares": [1.0, 1.0, 1.0],
            "raw_usage": [0.0] * 3,
            "effectv_usage": [0.0] * 3,
            "level_fs": [None, None, None],
            "fairshare": [None, None, 1.0],
        },
        schema_overrides={"snapshot_time": UTC_DT, "raw_shares": pl.Int64, "level_fs": pl.Float64},
    )


def params(tz: str):
    cfg = load_config(env={}).with_overrides(billing={"timezone": tz})
    return pipeline_params(cfg, Window(EPOCH, NOW, True))


@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])
@pytest.mark.parametrize("with_jobs_frame", [False, True])
def test_no_attempts_gives_zero_usage_and_no_days(tz: str, with_jobs_frame: bool):
    frames = {"shares": shares()}
    if with_jobs_frame:  # what the runner reads for an empty window: the columns, no rows
        frames["jobs"] = pl.LazyFrame(schema=inputs({})["jobs"].collect_schema())
    out = {k: v.collect() for k, v in fs.compute(frames, params(tz)).items()}
    assert out["mart_fairshare_daily"].height == 0
    assert out["mart_fairshare_submits"].height == 0
    computed = out["mart_fairshare"].filter(pl.col("source") == "computed")
    assert computed.height > 0
    assert computed["raw_usage"].to_list() == [0.0] * computed.height
    assert out["mart_fairshare"].filter(pl.col("source") == "sshare").height == 3
