"""Throttling by cause, end to end: fake NVML -> agent -> spool -> collector -> health verdict and exporter.

NVML's clock-event reasons (nvmlClocksEventReasons,
https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html): SW power cap 0x4 means "the
clocks have been optimized to ensure not to exceed currently set power limits", the normal state of a GPU
training at its limit; HW slowdown 0x8 is "reducing the core clocks by a factor of 2 or more". The agent
samples every 10 s on an injected clock; the shares below are counted by hand from the schedule.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from slurmscope.agent.agent import Agent
from slurmscope.agent.fake import fake_from_spec
from slurmscope.agent.http import metric_families
from slurmscope.collectors.nvml import ingest_spool_files
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.exporter import render

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
MINUTES = 15


@pytest.fixture
def fleet(tmp_path, con):
    """GPU 0 at its power cap for 15 minutes; GPU 1 in HW slowdown for 3 of them (20 %); GPU 2 both."""
    t = [T0]
    gpus = [
        {"model": "h100", "state": "load", "clock_events": [[0, 901, 0x4]]},
        {"model": "h100", "state": "load", "clock_events": [[300, 480, 0x8]]},  # minutes 5, 6 and 7
        {"model": "h100", "state": "load", "clock_events": [[0, 901, 0x4], [300, 480, 0x4 | 0x8]]},
    ]
    fake = fake_from_spec(
        {"gpus": gpus, "start": T0}, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s)
    )
    agent = Agent(fake, node="gpu01", spool_dir=tmp_path / "spool", mapping_dir=None, clock=lambda: t[0])
    while t[0] < T0 + MINUTES * 60:
        agent.tick(t[0])
        t[0] += agent.interval
    agent.tick(t[0])  # 08:15:00 closes the last minute
    families = {f.name: f for f in metric_families(agent)}
    agent.close(t[0])
    cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})
    ingest_spool_files(con, cfg, sorted((tmp_path / "spool").glob("*.jsonl")))
    end = datetime.fromtimestamp(t[0], UTC)
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, gpus_total)'
        " VALUES ('c1', ?, 'gpu01', 'gpu', 'ALLOCATED', 3)",
        [end],
    )
    run_pipelines(con, cfg, full=True, only=["health"], now=end)
    uuids = [g.uuid for g in fake.gpus]
    return con, cfg, end, families, uuids


def _verdicts(con, uuids):
    rows = con.execute(
        "SELECT gpu_uuid, status, reason, detail FROM mart_gpu_health QUALIFY"
        " row_number() OVER (PARTITION BY gpu_uuid ORDER BY since DESC) = 1"
    ).fetchall()
    by = {r[0]: r[1:] for r in rows}
    return [by[u] for u in uuids]


def test_a_gpu_at_its_power_cap_is_ok_and_hw_slowdown_a_fifth_of_the_window_is_degraded(fleet):
    con, _cfg, _end, _families, uuids = fleet
    cap, slow, both = _verdicts(con, uuids)
    assert cap == ("ok", "", "")
    # 3 of the 15 minutes of the 900 s window: 0.2 > health.throttle_ratio 0.1
    assert slow == ("degraded", "throttling", "HW throttled 20.0%")
    assert both == ("degraded", "throttling", "HW throttled 20.0%")  # the power cap adds nothing


def test_each_cause_is_stored_and_served_as_its_own_series(fleet):
    con, cfg, end, families, uuids = fleet
    per_cause = con.execute(
        "SELECT gpu_uuid, sum(throttle_seconds), sum(sw_power_cap_seconds), sum(hw_slowdown_seconds),"
        " sum(hw_thermal_seconds) FROM gpu_samples GROUP BY 1"
    ).fetchall()
    got = {r[0]: r[1:] for r in per_cause}
    # 91 samples (08:00:00 .. 08:15:00) x 10 s at the cap, none throttled; HW slowdown 18 samples x 10 s
    assert got[uuids[0]] == (0.0, 910.0, 0.0, 0.0)
    assert got[uuids[1]] == (180.0, 0.0, 180.0, 0.0)
    assert got[uuids[2]] == (180.0, 910.0, 180.0, 0.0)
    # the agent's own counters: per cause, and the throttle counter for hardware causes only
    thr = {s.labels["uuid"]: s.value for s in families["slurmscope_gpu_throttle_seconds"].samples}
    assert thr == {uuids[0]: 0.0, uuids[1]: 180.0, uuids[2]: 180.0}
    ce = {
        (s.labels["uuid"], s.labels["reason"]): s.value
        for s in families["slurmscope_gpu_clock_event_seconds"].samples
    }
    assert ce[(uuids[0], "sw_power_cap")] == 910.0 and ce[(uuids[0], "hw_slowdown")] == 0.0
    assert ce[(uuids[1], "hw_slowdown")] == 180.0 and ce[(uuids[1], "sw_power_cap")] == 0.0
    # the central exporter just before 08:15: the latest minute (08:14) of GPU 0 is all power cap, not throttled
    body = render(con, cfg, end - timedelta(seconds=1)).decode()
    assert (
        'slurmscope_gpu_clock_event_ratio{cluster="c1",node="gpu01",gpu="0",gpu_model="NVIDIA H100 80GB HBM3",'
        'reason="sw_power_cap",source="central"} 1.0'
    ) in body
    assert (
        'slurmscope_gpu_throttle_ratio{cluster="c1",node="gpu01",gpu="0",gpu_model="NVIDIA H100 80GB HBM3",'
        'source="central"} 0.0'
    ) in body
