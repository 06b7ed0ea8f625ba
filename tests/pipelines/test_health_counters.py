"""The per-counter health rules on hand-made minutes: NVLink, PCIe replays, retired pages, row-remap growth and
hardware violation time, each at its threshold edge.

The limits are DCGM's health watches (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp and
dcgmlib/src/DcgmGpuHardwareLimits.h): an NVLink replay or recovery error fails the GPU, CRC errors fail it at
100 a second and warn below; PCIe replays warn above ceil(rate per lane x width) a minute (1.92 per lane at
Gen5: 31 for x16) or 8 where the link is unknown; pending page retirements warn; 63 retired pages fail. Node n1
has one GPU sampled every minute for 20 minutes up to T; the counters sit in the minute named in each case.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from slurmscope.pipelines import health
from slurmscope.pipelines.runner import Window, pipeline_params

from slurmscope.config import load_config
from tests.pipelines.test_health import EVENT_SCHEMA, INV_SCHEMA, MIN, NODE_SCHEMA, SAMPLE_SCHEMA, T, snap

SCHEMA = {**SAMPLE_SCHEMA, **dict(health.COUNTER_COLUMNS)}


def minutes(n=20, end=T, at=None, **counters):
    """n minutes up to `end`, healthy; `counters` in the minute `at` (default: the last)."""
    at = end if at is None else at
    out = []
    for k in range(n - 1, -1, -1):
        m = end - k * MIN
        row = dict.fromkeys(SCHEMA)
        row.update(
            node="n1", gpu_uuid="GPU-a", minute=m, gpu_index=0, model="h100", temp_gpu_max_celsius=60.0
        )
        row.update(throttle_seconds=0.0, ecc_uncorrected_delta=0, ecc_uncorrected_total=0)
        row.update(remapped_pending=False, remapped_failed=False)
        row.update(pcie_link_gen=5, pcie_link_width=16, pcie_replay_delta=0)
        if m == at:
            row.update(counters)
        out.append(row)
    return out


def verdict(rows, now=T + MIN, **cfg):
    conf = load_config(env={}).with_overrides(health=cfg) if cfg else load_config(env={})
    params = pipeline_params(conf, Window(T - timedelta(hours=1), now, False))
    frames = {
        "nodes": pl.LazyFrame([snap(now - MIN)], schema=NODE_SCHEMA, orient="row"),
        "samples": pl.LazyFrame(rows, schema=SCHEMA),
        "events": pl.LazyFrame([], schema=EVENT_SCHEMA),
        "inventory": pl.LazyFrame([], schema=INV_SCHEMA),
    }
    g = health.compute(frames, params)["mart_gpu_health"].collect().sort("since")
    last = g.row(-1, named=True)
    return last["status"], last["reasons"], last["detail"]


def test_a_healthy_gpu_with_counters_read_is_ok():
    assert verdict(minutes()) == ("ok", "", "")


@pytest.mark.parametrize(
    ("counters", "want"),
    [
        ({"nvlink_replay_delta": 1}, ("failing", "nvlink_errors")),  # any replay: DCGM FAIL
        ({"nvlink_recovery_delta": 1}, ("failing", "nvlink_errors")),
        ({"nvlink_crc_flit_delta": 5999}, ("degraded", "nvlink_crc_errors")),  # 99.98/s: DCGM WARN
        ({"nvlink_crc_data_delta": 6000}, ("failing", "nvlink_errors")),  # 100/s: DCGM FAIL
        ({"nvlink_crc_flit_delta": 0, "nvlink_replay_delta": 0}, ("ok", "")),
    ],
)
def test_nvlink_errors(counters, want):
    status, reasons, _ = verdict(minutes(**counters))
    assert (status, reasons) == want


def test_nvlink_errors_hold_for_the_event_window_and_say_what_was_counted():
    rows = minutes(n=30, at=T - 20 * MIN, nvlink_replay_delta=2, nvlink_crc_flit_delta=7)
    assert verdict(rows) == (
        "failing",
        "nvlink_errors",
        "NVLink 2 replay/recovery, 7 CRC errors at 2026-03-02T11:40:00Z",
    )
    # judged 61 minutes after that minute: past health.event_window_seconds (3600 s)
    later = minutes(n=70, end=T + 41 * MIN, at=T - 20 * MIN, nvlink_replay_delta=2)
    assert verdict(later, now=T + 41 * MIN)[:2] == ("ok", "")
    assert verdict(later, now=T + 39 * MIN)[:2] == ("failing", "nvlink_errors")  # 59 minutes after
    # the operator's limit of 3 replays a minute: 2 is under it, the 7 CRC errors alone only degrade
    assert verdict(rows, nvlink_replay_recovery=3)[:2] == ("degraded", "nvlink_crc_errors")


@pytest.mark.parametrize(
    ("gen", "width", "replays", "want"),
    [
        (5, 16, 31, "ok"),  # Gen5 x16 may replay ceil(1.92 x 16) = 31 times a minute
        (5, 16, 32, "degraded"),
        (4, 16, 16, "ok"),  # ceil(0.96 x 16) = 16
        (4, 16, 17, "degraded"),
        (1, 16, 3, "ok"),  # an idle link trained down to Gen1: ceil(0.15 x 16) = 3
        (None, None, 8, "ok"),  # link unknown: DCGM's 8 a minute
        (None, None, 9, "degraded"),
    ],
)
def test_pcie_replay_rate(gen, width, replays, want):
    rows = minutes(pcie_replay_delta=replays, pcie_link_gen=gen, pcie_link_width=width)
    status, reasons, detail = verdict(rows)
    assert status == want
    if want == "degraded":
        assert (reasons, detail) == ("pcie_replay_rate", f"{replays} PCIe replays at 2026-03-02T12:00:00Z")


def test_retired_pages_pending_and_limit():
    pending = minutes(retired_pages_sbe=2, retired_pages_dbe=1, retired_pages_pending=True)
    assert verdict(pending) == ("degraded", "retired_pages_pending", "3 retired pages")
    assert verdict(minutes(retired_pages_sbe=40, retired_pages_dbe=22))[:2] == ("ok", "")  # 62
    assert verdict(minutes(retired_pages_sbe=40, retired_pages_dbe=23))[:2] == (
        "failing",
        "retired_pages_limit",
    )


def test_rows_remapped_for_uncorrectable_errors_twice_in_the_window_degrade():
    def growing(count_now):
        rows = minutes(n=30)
        for r in rows:
            r["remapped_uncorrectable"] = 1 if r["minute"] < T - 10 * MIN else count_now
        return rows

    assert verdict(growing(2))[:2] == ("ok", "")  # one new row: row_remap_pending told of it until the reset
    assert verdict(growing(3)) == (
        "degraded",
        "row_remap_growing",
        "2 rows remapped (uncorrectable) in the window",
    )
    assert verdict(growing(3), remap_growth_rows=3)[:2] == ("ok", "")


def test_hardware_violation_time_is_throttling():
    """Board limit and reliability only: the power, thermal, sync-boost and low-utilisation policies are not read
    (a GPU at its power cap accrues power violation time all day: tests/pipelines/test_health_throttle_causes.py
    keeps it ok end to end)."""
    # 12 s of board-limit violation in each of the last 15 minutes: 12/60 = 0.2 > health.throttle_ratio 0.1
    board = minutes()
    for r in board[-15:]:
        r["violation_board_limit_seconds"] = 12.0
    assert verdict(board)[:2] == ("degraded", "throttling")
    reliability = minutes()
    for r in reliability[-15:]:
        r["violation_reliability_seconds"] = 6.0  # 0.1: not above the threshold
    assert verdict(reliability)[:2] == ("ok", "")
    assert "violation_power_seconds" not in health.INPUTS["samples"]
