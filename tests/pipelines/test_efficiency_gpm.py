"""GPM activity end to end: fake NVML -> agent -> spool -> collector -> efficiency and cost marts.

Job 777 holds two GPUs for ten minutes: an H100 (Hopper: NVML's GPM is "for Hopper or newer fully supported
devices", nvmlGpmQueryDeviceSupport) whose kernels keep 40 % of its SMs busy while GPU_UTIL reads 90 %, and an
L40S (Ada: no GPM) at 90 % GPU_UTIL. Useful GPU-seconds must count the H100 by its SM activity and the L40S by
its GPU_UTIL, and every mart row must say which (activity_source). The values are set in the fake, so the
expected numbers are worked out by hand below.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from slurmscope.agent.agent import Agent
from slurmscope.agent.fake import fake_from_spec
from slurmscope.collectors.nvml import ingest_spool_files
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
MINUTES = 10


@pytest.fixture
def held(tmp_path, con):
    t = [T0]
    gpus = [
        {"model": "h100", "state": "load", "values": {"util_gpu": 90, "sm_active": 40.0}},
        {"model": "l40s", "state": "load", "values": {"util_gpu": 90}},
    ]
    fake = fake_from_spec(
        {"gpus": gpus, "start": T0}, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s)
    )
    maps = tmp_path / "map"
    maps.mkdir()
    (maps / "job_777").write_text(f"job_id=777\nstart_time={T0:.0f}\ndevices=0,1\n")
    agent = Agent(fake, node="gpu01", spool_dir=tmp_path / "spool", mapping_dir=maps, clock=lambda: t[0])
    while t[0] <= T0 + MINUTES * 60:  # the round at 08:10:00 closes the minute 08:09
        agent.tick(t[0])
        t[0] += agent.interval
    agent.close(t[0])
    cfg = load_config(env={}).with_overrides(billing={"rates": {"default": 3.6}})
    ingest_spool_files(con, cfg, sorted((tmp_path / "spool").glob("*.jsonl")))
    start, now = datetime.fromtimestamp(T0, UTC), datetime.fromtimestamp(T0 + MINUTES * 60, UTC)
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", qos, state,'
        " start_time, end_time, gpus, gpu_type) VALUES ('default', '777', 777, ?, 'a', 'u', 'gpu', 'normal',"
        " 'RUNNING', ?, NULL, 2, 'h100')",
        [start - timedelta(minutes=1), start],
    )
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, gpus_total)'
        " VALUES ('default', ?, 'gpu01', 'gpu', 'ALLOCATED', 2)",
        [start],
    )
    run_pipelines(con, cfg, full=True, only=["efficiency", "cost"], now=now)
    return con, [g.uuid for g in fake.gpus]


def test_the_spool_names_the_activity_source_of_every_minute(held):
    con, (h100, l40s) = held
    rows = con.execute(
        "SELECT gpu_uuid, count(*), min(activity_source), max(activity_source), avg(sm_active_mean),"
        " avg(util_gpu_mean), sum(gpm_samples) FROM gpu_samples GROUP BY 1"
    ).fetchall()
    got = {r[0]: r[1:] for r in rows}
    # 61 rounds, 08:00:00 to 08:10:00 (the last one alone in minute 08:10, written at close); GPM needs two
    # samples, so the first round has no GPM value: 60 of 61
    assert got[h100] == (11, "gpm", "gpm", 40.0, 90.0, 60)
    assert got[l40s] == (11, "gpu_util", "gpu_util", None, 90.0, 0)


def test_useful_gpu_seconds_use_sm_activity_where_gpm_measured_it(held):
    con, _ = held
    row = con.execute(
        "SELECT gpu_seconds, sampled_gpu_seconds, util_mean, sm_active_mean, useful_gpu_seconds,"
        " gpm_gpu_seconds, activity_source FROM mart_job_efficiency WHERE job_id_raw = 777"
    ).fetchone()
    # 2 GPUs x 600 s held and sampled; GPU_UTIL 90 % on both; the H100's 600 s by GPM SM activity 40 %:
    # useful = 600 x 0.40 + 600 x 0.90 = 240 + 540 = 780 s (GPU_UTIL alone would say 1080 s)
    assert row == pytest.approx((1200.0, 1200.0, 90.0, 40.0, 780.0, 600.0, "mixed"))


def test_cost_per_useful_gpu_hour_counts_the_same_useful_seconds(held):
    con, _ = held
    row = con.execute(
        "SELECT sampled_gpu_seconds, sampled_cost_usd, useful_gpu_seconds, gpm_gpu_seconds, activity_source,"
        " cost_per_useful_gpu_hour FROM mart_cost_efficiency_daily WHERE account = 'a'"
    ).fetchone()
    # 1200 sampled GPU-s at $3.6/GPU-h = $1.20; useful 780 s = 0.21667 h: $1.20 / 0.21667 = $5.5385
    assert row == pytest.approx((1200.0, 1.2, 780.0, 600.0, "mixed", 1.2 / (780 / 3600)))
