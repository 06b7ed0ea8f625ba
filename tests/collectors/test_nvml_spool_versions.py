"""Rolling upgrade: spool files that agents of format versions 1 and 2 really wrote still load with the meaning
their version documented (docs/nvml.md, "Versions"), next to version 3's per-counter and GPM fields.

tests/fixtures/nvml-spool/v1 and v2 were written by the agents of those releases (commits 25aba12 and 199a56b,
tests/fixtures/PROVENANCE.md) with the fake backend and tests/fixtures/nvml-spool/gen_spool.py: GPU 0 at its
power cap in minute 08:00, at its power cap and in HW slowdown in 08:01, neither in 08:02; at 08:01:10 its
NVLink link 2 counts 5 CRC flit errors and 1 replay and a row remapping becomes pending. GPU 1 idles.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from slurmscope.collectors.nvml import ingest_spool_files, merge_samples
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.spool import read_spool_bytes, write_spool_file
from tests.paths import FIXTURES

SPOOLS = FIXTURES / "nvml-spool"
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
MINUTES = ("08:00", "08:01", "08:02")


def load(tmp_path, version):
    con = connect(tmp_path / f"v{version}.duckdb")
    files = sorted((SPOOLS / f"v{version}").glob("*.jsonl"))
    assert read_spool_bytes(files[0].read_bytes()).header["version"] == version
    res = ingest_spool_files(con, load_config(env={}), files)
    assert [(r.quarantined, r.error) for r in res] == [(0, None)]
    return con


def rows(con, columns):
    got = con.execute(
        f"SELECT gpu_index, strftime(minute, '%H:%M'), {columns} FROM gpu_samples ORDER BY 1, 2"  # noqa: S608 - test literal
    ).fetchall()
    return {(g, m): tuple(r) for g, m, *r in got}


@pytest.mark.parametrize(
    ("version", "gpu0"),
    [
        # version 1: `throttle_seconds` counted all five causes and the minute keeps the OR of reasons; 08:00
        # held the power cap alone (0x4: not throttled), 08:01 the cap and HW slowdown (0xC: how much was
        # hardware is unknown, null), 08:02 nothing
        (1, [(0.0, 60.0, 0.0), (None, None, None), (0.0, 0.0, 0.0)]),
        # version 2 counted each cause: 60 s at the cap in 08:00; 60 s of both in 08:01
        (2, [(0.0, 60.0, 0.0), (60.0, 60.0, 60.0), (0.0, 0.0, 0.0)]),
    ],
)
def test_real_older_files_keep_their_documented_meaning(tmp_path, version, gpu0):
    con = load(tmp_path, version)
    got = rows(con, "throttle_seconds, sw_power_cap_seconds, hw_slowdown_seconds")
    assert [got[(0, m)] for m in MINUTES] == gpu0
    assert [got[(1, m)] for m in MINUTES] == [(0.0, 0.0, 0.0)] * 3  # idle (0x1) is no cause
    # what versions 1 and 2 knew of NVLink is one sum over links and counters: 5 + 1 in 08:02, not split
    links = rows(con, "nvlink_errors_delta, nvlink_crc_flit_delta, nvlink_replay_delta, remapped_pending")
    assert links[(0, "08:02")] == (6, None, None, True)
    assert con.execute("SELECT count(*) FROM gpu_nvlink_errors").fetchone() == (0,)
    # no GPM before version 3: their activity is GPU_UTIL, named so
    assert set(rows(con, "activity_source, sm_active_mean, gpm_samples").values()) == {
        ("gpu_util", None, None)
    }
    con.close()


def test_a_version_2_nvlink_sum_is_not_judged_as_replay_errors(tmp_path):
    """The unsplit sum could be CRC errors (degraded) or replays (failing): the NVLink rules leave it alone, and
    GPU 0 is judged on what version 2 does say: its pending row remapping, and a minute of HW slowdown in the three
    it was sampled (0.33 > health.throttle_ratio)."""
    con = load(tmp_path, 2)
    end = datetime(2027, 1, 15, 8, 3, tzinfo=UTC)
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, gpus_total)'
        " VALUES ('default', ?, 'gpu01', 'gpu', 'ALLOCATED', 2)",
        [end],
    )
    run_pipelines(con, load_config(env={}), full=True, only=["health"], now=end)
    got = con.execute(
        "SELECT gpu_index, status, reasons FROM mart_gpu_health ORDER BY gpu_index, since DESC"
    ).fetchall()
    assert got[0] == (0, "degraded", "row_remap_pending,throttling")
    con.close()


def test_two_chunks_of_a_version_3_minute_merge_exactly(tmp_path):
    """An agent restart splits a minute: counters add, GPM means weigh by their readings, totals take the later
    chunk; per-link rows add. The database merge and the in-file merge give the same row."""
    base = {"type": "sample", "gpu_uuid": "GPU-a", "gpu_index": 0, "minute": "2027-01-15T08:00:00Z"}
    a = {
        **base,
        "samples": 2,
        "util_gpu_mean": 90.0,
        "gpm_samples": 1,
        "sm_active_mean": 20.0,
        "nvlink_replay_delta": 1,
        "nvlink_replay_total": 4,
        "violation_power_seconds": 15.0,
        "remapped_uncorrectable": 1,
    }
    b = {
        **base,
        "samples": 4,
        "util_gpu_mean": 90.0,
        "gpm_samples": 3,
        "sm_active_mean": 60.0,
        "nvlink_replay_delta": 2,
        "nvlink_replay_total": 6,
        "violation_power_seconds": 30.0,
        "remapped_uncorrectable": 2,
    }
    link_a = {"type": "nvlink", "gpu_uuid": "GPU-a", "minute": base["minute"], "link": 3, "replay_delta": 1}
    link_b = {**link_a, "replay_delta": 2, "crc_flit_delta": 5}
    cols = (
        "samples, gpm_samples, sm_active_mean, activity_source, nvlink_replay_delta, nvlink_replay_total,"
        " violation_power_seconds, remapped_uncorrectable"
    )
    # GPM (1 x 20 + 3 x 60) / 4 = 50; replays 1 + 2; the later total 6; 15 + 30 s at the power limit
    want = (6, 4, 50.0, "gpm", 3, 6, 45.0, 2)
    results = []
    for name, files in (
        ("split", [[a, link_a], [b, link_b]]),
        ("one", [[a, link_a, b, link_b]]),
    ):
        con = connect(tmp_path / f"{name}.duckdb")
        paths = [
            write_spool_file(tmp_path / name / str(i), "gpu01", recs, opened_at=T0 + i)
            for i, recs in enumerate(files)
        ]
        ingest_spool_files(con, load_config(env={}), paths)
        results.append(con.execute(f"SELECT {cols} FROM gpu_samples").fetchone())  # noqa: S608 - test literal
        assert con.execute(
            "SELECT link, crc_flit_delta, crc_data_delta, replay_delta FROM gpu_nvlink_errors"
        ).fetchall() == [(3, 5, None, 3)]
        con.close()
    assert results == [want, want]
    merged = merge_samples(a, b)
    assert tuple(merged[c.strip()] for c in cols.split(",")) == want
