"""How long the health pipeline's compute takes on one day of a larger cluster, and how many rows it writes.

Synthetic inputs built in memory (no DuckDB, so this times `compute` and its one collect): N nodes with 8
GPUs each, a sinfo snapshot every 5 minutes, one NVML sample per GPU per minute, a few XIDs, a drained and a
down node, one GPU throttling: an incremental run's day-long window.

    nice -n 10 .venv/bin/python -m benchmarks.health --nodes 200 --hours 24
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from slurmscope.pipelines import health
from slurmscope.pipelines.runner import Window, pipeline_params

from benchmarks.harness import parser, run, timer
from slurmscope.config import load_config

START = datetime(2026, 3, 1, tzinfo=UTC)


def frames(nodes: int, hours: int, snapshot_minutes: int) -> dict[str, pl.LazyFrame]:
    names = [f"g{i:04d}" for i in range(nodes)]
    snaps = pl.datetime_range(
        START, START + timedelta(hours=hours), f"{snapshot_minutes}m", time_zone="UTC", eager=True
    )
    node_rows = (
        pl.DataFrame({"snapshot_time": snaps})
        .join(pl.DataFrame({"node": names}), how="cross")
        .with_columns(
            pl.when(pl.col("node") == names[0])
            .then(pl.lit("DOWN"))
            .otherwise(pl.lit("MIXED"))
            .alias("state"),
            pl.when(pl.col("node") == names[1])
            .then(pl.lit("DRAIN"))
            .otherwise(None)
            .cast(pl.String)
            .alias("state_flags"),
            pl.lit("").alias("reason"),
            pl.lit(8, dtype=pl.Int32).alias("gpus_total"),
        )
    )
    minutes = pl.datetime_range(
        START - timedelta(hours=1), START + timedelta(hours=hours), "1m", time_zone="UTC", eager=True
    )
    gpus = (
        pl.DataFrame({"node": names})
        .join(pl.DataFrame({"gpu_index": list(range(8))}, schema={"gpu_index": pl.Int32}), how="cross")
        .with_columns((pl.col("node") + "-" + pl.col("gpu_index").cast(pl.String)).alias("gpu_uuid"))
    )
    samples = (
        pl.DataFrame({"minute": minutes})
        .join(gpus, how="cross")
        .with_columns(
            pl.lit("h100").alias("model"),
            (60.0 + (pl.col("gpu_index") * 2)).alias("temp_gpu_max_celsius"),
            pl.when((pl.col("node") == names[2]) & (pl.col("gpu_index") == 3))
            .then(40.0)
            .otherwise(0.0)
            .alias("throttle_seconds"),
            pl.lit(0, dtype=pl.Int64).alias("ecc_uncorrected_delta"),
            pl.lit(0, dtype=pl.Int64).alias("ecc_uncorrected_total"),
            pl.lit(False).alias("remapped_pending"),
            pl.lit(False).alias("remapped_failed"),
        )
        .select(list(health_sample_columns()))
    )
    events = pl.DataFrame(
        {
            "node": [names[3], names[4 % nodes], names[5 % nodes]],
            "gpu_uuid": [f"{names[3]}-1", f"{names[4 % nodes]}-2", f"{names[5 % nodes]}-0"],
            "event_time": [
                START + timedelta(hours=2),
                START + timedelta(hours=5),
                START + timedelta(hours=9),
            ],
            "event_type": ["xid", "xid", "gpu_lost"],
            "xid": [79, 13, None],
        },
        schema={
            "node": pl.String,
            "gpu_uuid": pl.String,
            "event_time": pl.Datetime("us", "UTC"),
            "event_type": pl.String,
            "xid": pl.Int32,
        },
    )
    inventory = pl.DataFrame(
        {"node": names, "seen_at": [START - timedelta(hours=1)] * nodes, "gpus_visible": [8] * nodes},
        schema={"node": pl.String, "seen_at": pl.Datetime("us", "UTC"), "gpus_visible": pl.Int64},
    )
    return {
        "nodes": node_rows.lazy(),
        "samples": samples.lazy(),
        "events": events.lazy(),
        "inventory": inventory.lazy(),
    }


def health_sample_columns() -> tuple[str, ...]:
    return (
        "node",
        "gpu_uuid",
        "minute",
        "gpu_index",
        "model",
        "temp_gpu_max_celsius",
        "throttle_seconds",
        "ecc_uncorrected_delta",
        "ecc_uncorrected_total",
        "remapped_pending",
        "remapped_failed",
    )


def body(a: argparse.Namespace) -> dict[str, Any]:
    f = frames(a.nodes, a.hours, a.snapshot_minutes)
    n_samples = f["samples"].select(pl.len()).collect().item()
    params = pipeline_params(load_config(env={}), Window(START, START + timedelta(hours=a.hours), False))
    with timer() as t:
        out = health.compute(f, params)
        node_df, gpu_df = pl.collect_all(
            [out["mart_node_health"], out["mart_gpu_health"]], engine=health.ENGINE
        )
    evals = a.nodes * (a.hours * 60 // a.snapshot_minutes + 1)
    return {
        "gpus": a.nodes * 8,
        "nvml_samples": n_samples,
        "node_evaluations": evals,
        "gpu_evaluations": evals * 8,
        "compute_and_collect": t,
        "rows": {"mart_node_health": node_df.height, "mart_gpu_health": gpu_df.height},
        "verdicts": node_df.group_by("status", "reason").len().sort("status").rows(),
    }


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--snapshot-minutes", type=int, default=5)
    run("health", ap, body)


if __name__ == "__main__":
    main()
