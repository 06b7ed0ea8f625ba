"""The fair-share marts' columns, the input frames' columns, and the small frames its parts share."""

from __future__ import annotations

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT
from slurmscope.pipelines.common import with_columns_of

KEY = ["cluster", "account", "user"]

ROOT = "root"

FAIRSHARE_SCHEMA = {
    "cluster": pl.String,
    "as_of": UTC_DT,
    "account": pl.String,
    "user": pl.String,
    "parent": pl.String,
    "raw_shares": pl.Int64,
    "norm_shares": pl.Float64,
    "raw_usage": pl.Float64,
    "effectv_usage": pl.Float64,
    "level_fs": pl.Float64,
    "fairshare": pl.Float64,
    "source": pl.String,
}

DAILY_SCHEMA = {
    "cluster": pl.String,
    "day": pl.Date,
    "account": pl.String,
    "user": pl.String,
    "charge": pl.Float64,
    "raw": pl.Float64,
}

SUBMITS_SCHEMA = {
    "cluster": pl.String,
    "day": pl.Date,
    "submit_day": pl.Date,
    "account": pl.String,
    "user": pl.String,
    "submitted": pl.Int64,
}

DRIFT_SCHEMA = {
    "cluster": pl.String,
    "day": pl.Date,
    "account": pl.String,
    "usage_share_7d": pl.Float64,
    "usage_share_30d": pl.Float64,
    "target_share": pl.Float64,
    "ratio": pl.Float64,
    "state": pl.String,
    "starved_since": pl.Date,
    "over_served_since": pl.Date,
    "days_starved": pl.Int32,
    "days_over_served": pl.Int32,
}


def reuse(frame: pl.LazyFrame) -> pl.LazyFrame:
    """A small frame several branches read, computed now.

    Everything after the day table is small (associations x days), whatever the number of attempts;
    planning the whole tree math as one lazy plan cost more than running it (1 CPU-s of optimisation and
    twice the work of computing each frame once, at any history size).
    """
    return frame.collect().lazy()


def inputs(frames: dict[str, pl.LazyFrame]) -> dict[str, pl.LazyFrame]:
    """Missing inputs become empty frames, so a database without sshare or config still computes."""
    schemas = {
        "jobs": {
            "cluster": pl.String,
            "account": pl.String,
            "user": pl.String,
            "submit_time": UTC_DT,
            "start_time": UTC_DT,
            "end_time": UTC_DT,
            "billing": pl.Float64,
            "cpus": pl.Int32,
            "gpus": pl.Int32,
            "state": pl.String,
        },
        "shares": {
            "cluster": pl.String,
            "snapshot_time": UTC_DT,
            "account": pl.String,
            "user": pl.String,
            "parent": pl.String,
            "raw_shares": pl.Int64,
            "norm_shares": pl.Float64,
            "raw_usage": pl.Float64,
            "effectv_usage": pl.Float64,
            "level_fs": pl.Float64,
            "fairshare": pl.Float64,
        },
        "slurm_config": {"cluster": pl.String, "snapshot_time": UTC_DT, "key": pl.String, "value": pl.String},
        "fairshare_daily": DAILY_SCHEMA,
        "fairshare_submits": SUBMITS_SCHEMA,
    }
    return {name: with_columns_of(frames.get(name), schema) for name, schema in schemas.items()}
