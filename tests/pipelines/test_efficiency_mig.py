"""Efficiency rows per MIG slice, on tiny literal frames; every expected value is worked out in the comments.

Node n3 has an H100 (g9) in MIG mode, named by NVML as the agent records it in gpu_inventory (the H100 MIG
capture: "NVIDIA H100 80GB HBM3 MIG 1g.10gb"); node n4 an A100 whose MIG device name carries no profile
(telegraf's A100 XML, as the fake backend names it).
- job 20 holds MIG-a (1g.10gb, 1/7 of the H100) for an hour; no sample of the instance (NVML gives no
  utilisation per MIG device): its activity is unavailable, nothing is inferred.
- job 21 holds MIG-b (3g.40gb, 3/7) for 30 minutes, with samples of the instance itself at 0 %: the path a
  per-instance source would take (none writes them today), idle 30 min x 3/7 GPU.
- job 22 holds MIG-c for 10 minutes; its fraction comes from its sacct record (gres/gpu:a100_1g.10gb=1, 1/7).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from slurmscope.pipelines import efficiency as eff
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config

UTC_DT = pl.Datetime("us", "UTC")
T = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
NOW = T + timedelta(hours=2)


def at(minutes: int) -> datetime:
    return T + timedelta(minutes=minutes)


def frames() -> dict[str, pl.LazyFrame]:
    jobs = pl.LazyFrame(
        {
            "cluster": ["c"] * 3,
            "job_id": ["20", "21", "22"],
            "job_id_raw": [20, 21, 22],
            "attempt": [1, 1, 1],
            "submit_time": [T - timedelta(minutes=1)] * 3,
            "start_time": [T, T, T],
            "end_time": [at(60), at(30), at(10)],
            "account": ["a", "a", "b"],
            "user": ["u", "u", "v"],
            "gpus": [0, 0, 0],
            "mig_tres": [
                "billing=1,cpu=1,gres/gpu:1g.10gb=1,gres/gpu=1,node=1",
                "billing=1,cpu=1,gres/gpu:3g.40gb=1,gres/gpu=1,node=1",
                "billing=1,cpu=1,gres/gpu:a100_1g.10gb=1,gres/gpu=1,node=1",
            ],
        },
        schema_overrides={"submit_time": UTC_DT, "start_time": UTC_DT, "end_time": UTC_DT},
    )
    gpu_jobs = pl.LazyFrame(
        {
            "cluster": ["c"] * 3,
            "node": ["n3", "n3", "n4"],
            "gpu_uuid": ["g9", "g9", "g7"],
            "job_id": ["20", "21", "22"],
            "interval_start": [T, T, T],
            "interval_end": [at(60), at(30), at(10)],
            "mig_instance": ["MIG-a", "MIG-b", "MIG-c"],
        },
        schema_overrides={"interval_start": UTC_DT, "interval_end": UTC_DT},
    )
    minutes = list(range(30))
    samples = pl.LazyFrame(
        {
            "cluster": ["c"] * (len(minutes) + 1),
            "node": ["n3"] * (len(minutes) + 1),
            # the parent GPU's own row: utilisation NotSupported in MIG mode
            "gpu_uuid": ["MIG-b"] * len(minutes) + ["g9"],
            "minute": [at(i) for i in minutes] + [at(0)],
            "util_gpu_mean": [0.0] * len(minutes) + [None],
            "util_gpu_max": [0.0] * len(minutes) + [None],
            "mem_used_max_bytes": [1] * len(minutes) + [None],
            "energy_joules": [None] * (len(minutes) + 1),
        },
        schema_overrides={"minute": UTC_DT, "energy_joules": pl.Float64, "util_gpu_mean": pl.Float64},
    )
    inventory = pl.LazyFrame(
        {
            "node": ["n3", "n3", "n4"],
            "mig_instance": ["MIG-a", "MIG-b", "MIG-c"],
            "device_name": [
                "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                "NVIDIA A100-SXM4-80GB MIG",
            ],
        }
    )
    return {"jobs": jobs, "gpu_jobs": gpu_jobs, "gpu_samples": samples, "mig_inventory": inventory}


def run(**billing) -> dict[str, pl.DataFrame]:
    cfg = load_config(env={}).with_overrides(billing=billing)
    p = pipeline_params(cfg, Window(EPOCH, NOW, True))
    out = eff.combine(eff.compute(frames(), p), p)
    return {k: v.collect() for k, v in out.items()}


def test_one_row_per_slice_with_its_fraction_as_the_gpu_count():
    got = run()["mart_mig_efficiency"].sort("job_id_raw")
    cols = [
        "job_id_raw",
        "node",
        "gpu_uuid",
        "mig_instance",
        "gpu_model",
        "mig_profile",
        "gpu_fraction",
        "fraction_source",
        "held_seconds",
        "gpu_seconds",
        "sampled_gpu_seconds",
        "idle_gpu_seconds",
        "util_mean",
        "activity",
    ]
    assert got.select(cols).rows() == [
        # 3600 s x 1/7 = 514.29 GPU-s, unsampled
        (20, "n3", "g9", "MIG-a", "NVIDIA H100 80GB HBM3", "1g.10gb", pytest.approx(1 / 7), "nvml", 3600.0,
         pytest.approx(3600 / 7), 0.0, 0.0, None, "unavailable"),
        # 1800 s x 3/7 = 771.43 GPU-s, every minute sampled at 0 % (< drift.idle_util_percent 5): all idle
        (21, "n3", "g9", "MIG-b", "NVIDIA H100 80GB HBM3", "3g.40gb", pytest.approx(3 / 7), "nvml", 1800.0,
         pytest.approx(1800 * 3 / 7), pytest.approx(1800 * 3 / 7), pytest.approx(1800 * 3 / 7), 0.0, "sampled"),
        # NVML named no profile: sacct's 1g.10gb of an A100 (a100_ names the GPU) = 1/7; 600 s -> 85.71
        (22, "n4", "g7", "MIG-c", "NVIDIA A100-SXM4-80GB", None, pytest.approx(1 / 7), "sacct", 600.0,
         pytest.approx(600 / 7), 0.0, 0.0, None, "unavailable"),
    ]  # fmt: skip


def test_job_rows_count_slices_as_fractions_and_say_activity_is_unavailable():
    got = run()["mart_job_efficiency"].sort("job_id_raw")
    cols = ["job_id_raw", "gpus", "mig_gpus", "gpu_seconds", "sampled_gpu_seconds", "idle_gpu_seconds"]
    assert got.select(*cols, "zero_util", "mig_activity").rows() == [
        (20, 0, pytest.approx(1 / 7), pytest.approx(3600 / 7), 0.0, 0.0, False, "unavailable"),
        (21, 0, pytest.approx(3 / 7), pytest.approx(1800 * 3 / 7), pytest.approx(1800 * 3 / 7),
         pytest.approx(1800 * 3 / 7), True, "sampled"),
        (22, 0, pytest.approx(1 / 7), pytest.approx(600 / 7), 0.0, 0.0, False, "unavailable"),
    ]  # fmt: skip


def test_idle_hours_by_account_weigh_slices_by_fraction():
    got = run()["mart_idle_gpus_daily"].sort("account")
    # a: 1 h x 1/7 + 0.5 h x 3/7 = 5/14 GPU-h held, of which 3/14 sampled and idle; b: 1/6 h x 1/7
    assert got.select("account", "allocated_gpu_hours", "sampled_gpu_hours", "idle_gpu_hours").rows() == [
        ("a", pytest.approx(5 / 14), pytest.approx(3 / 14), pytest.approx(3 / 14)),
        ("b", pytest.approx(1 / 42), 0.0, 0.0),
    ]


def test_a_slice_without_a_profile_or_sacct_record_gets_no_made_up_share():
    f = frames()
    f["jobs"] = f["jobs"].with_columns(pl.lit(None, dtype=pl.String).alias("mig_tres"))
    cfg = load_config(env={})
    p = pipeline_params(cfg, Window(EPOCH, NOW, True))
    out = eff.combine(eff.compute(f, p), p)
    got = out["mart_mig_efficiency"].collect().filter(pl.col("job_id_raw") == 22).row(0, named=True)
    assert (got["gpu_fraction"], got["fraction_source"], got["gpu_seconds"]) == (None, "unknown", None)
