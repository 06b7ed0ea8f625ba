"""Per-link and per-counter GPU health and GPM in the agent: what it reads, spools and serves.

The agent samples a fake NVML every 10 s on an injected clock, its slow fields (NVLink, violation time,
remapped rows, retired pages, PCIe link) every 60 s from 08:00:00. The fake's counters are set by hand in each
test, so every expected number below is worked out from the schedule in the comments.
"""

from __future__ import annotations

import json

import pynvml
import pytest
from slurmscope.agent import agent as agent_mod
from slurmscope.agent.agent import Agent
from slurmscope.agent.fake import fake_from_spec
from slurmscope.agent.http import metric_families

from slurmscope.spool import GPM_FIELDS, NVLINK_COUNTERS, VIOLATION_POLICIES

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def run(tmp_path, gpus, seconds=180):
    """Sample every 10 s from 08:00:00 to 08:00:00 + `seconds`; the spool records and the metric families."""
    t = [T0]
    fake = fake_from_spec(
        {"gpus": gpus, "start": T0}, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s)
    )
    agent = Agent(fake, node="gpu01", spool_dir=tmp_path / "spool", mapping_dir=None, clock=lambda: t[0])
    while t[0] <= T0 + seconds:
        agent.tick(t[0])
        t[0] += agent.interval
    families = {f.name: f for f in metric_families(agent)}
    agent.close(t[0])
    records = []
    for path in sorted((tmp_path / "spool").glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines()[1:-1]]
    return fake, records, families


def samples(records, uuid):
    return {r["minute"][11:16]: r for r in records if r["type"] == "sample" and r["gpu_uuid"] == uuid}


def series(families, name, *keys):
    return {tuple(s.labels[k] for k in keys): s.value for s in families[name].samples}


def test_the_agents_nvml_names_follow_the_spools_order():
    assert tuple(agent_mod.NVLINK_COUNTER_IDS) == NVLINK_COUNTERS
    assert tuple(agent_mod.VIOLATION_POLICY_IDS) == VIOLATION_POLICIES
    assert tuple(agent_mod.GPM_METRIC_IDS) == GPM_FIELDS
    for names in (agent_mod.NVLINK_COUNTER_IDS, agent_mod.VIOLATION_POLICY_IDS, agent_mod.GPM_METRIC_IDS):
        assert all(hasattr(pynvml, n) for n in names.values())


def test_nvlink_errors_per_link_and_counter(tmp_path):
    # H100, 18 links (`nvidia-smi nvlink -s` of the capture). Link 2: 7 CRC flit errors from 08:00:30 and a
    # replay at 08:01:30; link 5: 3 CRC data errors from 08:01:30. Read at 08:00, 08:01, 08:02, 08:03.
    fake, records, families = run(
        tmp_path,
        [
            {
                "model": "h100",
                "state": "load",
                "nvlink_errors": [[30, 2, "crc_flit", 7], [90, 2, "replay", 1], [90, 5, "crc_data", 3]],
            }
        ],
    )
    uuid = fake.gpus[0].uuid
    per_minute = samples(records, uuid)
    cols = [f"nvlink_{c}_delta" for c in NVLINK_COUNTERS] + ["nvlink_errors_delta"]
    assert [[per_minute[m][c] for c in cols] for m in ("08:00", "08:01", "08:02", "08:03")] == [
        [0, 0, 0, 0, 0],  # the first reading is the baseline
        [7, 0, 0, 0, 7],  # 08:01:00 reads link 2's 7 CRC flit errors
        [0, 3, 1, 0, 4],  # 08:02:00: link 5's CRC data errors and link 2's replay
        [0, 0, 0, 0, 0],
    ]
    assert (
        per_minute["08:03"]["nvlink_crc_flit_total"] == 7 and per_minute["08:03"]["nvlink_replay_total"] == 1
    )
    links = [
        (r["minute"][11:16], r["link"], r["crc_flit_delta"], r["crc_data_delta"], r["replay_delta"])
        for r in records
        if r["type"] == "nvlink"
    ]
    # only the links and minutes whose counters rose: the other 16 links write nothing
    assert links == [("08:01", 2, 7, 0, 0), ("08:02", 2, 0, 0, 1), ("08:02", 5, 0, 3, 0)]
    per_gpu = series(families, "slurmscope_gpu_nvlink_errors", "counter")
    assert per_gpu == {("crc_flit",): 7.0, ("crc_data",): 3.0, ("replay",): 1.0, ("recovery",): 0.0}
    per_link = series(families, "slurmscope_gpu_nvlink_link_errors", "link", "counter")
    assert per_link == {("2", "crc_flit"): 7.0, ("2", "replay"): 1.0, ("5", "crc_data"): 3.0}


def test_no_nvlink_is_null_and_unserved(tmp_path):
    fake, records, families = run(tmp_path, [{"model": "l40s", "state": "load"}], seconds=60)
    rec = samples(records, fake.gpus[0].uuid)["08:00"]
    assert rec["nvlink_replay_delta"] is None and rec["nvlink_errors_delta"] is None  # not zero: not read
    assert "slurmscope_gpu_nvlink_errors" not in families
    assert not [r for r in records if r["type"] == "nvlink"]


def test_violation_time_per_policy(tmp_path):
    # At the power cap (SW power cap 0x4) from 08:00:00 to 08:01:30; the board limit holds clocks from 08:00:30
    # to 08:01:00. Violation time is cumulative ns (nvmlDeviceGetViolationStatus); the agent spools its rise
    # since the previous slow reading, in the minute of the reading.
    fake, records, families = run(
        tmp_path,
        [
            {
                "model": "h100",
                "state": "load",
                "clock_events": [[0, 90, 0x4]],
                "violations": [[30, 60, "board_limit"]],
            }
        ],
    )
    per_minute = samples(records, fake.gpus[0].uuid)
    got = [
        (per_minute[m]["violation_power_seconds"], per_minute[m]["violation_board_limit_seconds"])
        for m in ("08:00", "08:01", "08:02")
    ]
    assert got == [(0.0, 0.0), (60.0, 30.0), (30.0, 0.0)]
    assert per_minute["08:01"]["violation_reliability_seconds"] == 0.0
    totals = series(families, "slurmscope_gpu_violation_seconds", "policy")
    assert totals[("power",)] == 90.0 and totals[("board_limit",)] == 30.0 and totals[("thermal",)] == 0.0


def test_gpm_on_hopper_gpu_util_elsewhere(tmp_path):
    # The H100 at 80 % GPU_UTIL with SM activity 30 % for its first minute and 50 % after; the L40S (Ada) has no
    # GPM. GPM metrics are means between two samples, so the first round (08:00:00) has none.
    fake, records, families = run(
        tmp_path,
        [
            {"model": "h100", "state": "load", "values": {"util_gpu": 80, "sm_active": 30.0}},
            {"model": "l40s", "state": "load"},
        ],
        seconds=110,
    )
    h100, l40s = (samples(records, g.uuid) for g in fake.gpus)
    first = h100["08:00"]
    assert (first["gpm_samples"], first["sm_active_mean"], first["activity_source"]) == (5, 30.0, "gpm")
    # the fake's model for what the spec does not set: occupancy half, tensor 0.6 of SM activity, DRAM 0.4 x util
    assert (first["sm_occupancy_mean"], first["tensor_active_mean"], first["dram_active_mean"]) == (
        15.0,
        18.0,
        32.0,
    )
    assert (l40s["08:00"]["gpm_samples"], l40s["08:00"]["sm_active_mean"]) == (0, None)
    assert l40s["08:00"]["activity_source"] == "gpu_util"
    supported = series(families, "slurmscope_gpu_gpm_supported", "gpu")
    assert supported == {("0",): 1.0, ("1",): 0.0}
    assert series(families, "slurmscope_gpu_sm_active_ratio", "gpu") == {("0",): 0.3}


def test_a_gpm_interval_averages_what_changed_inside_it(tmp_path):
    t = [T0]
    fake = fake_from_spec(
        {"gpus": [{"model": "h200", "state": "load", "values": {"sm_active": 20.0}}], "start": T0},
        clock=lambda: t[0],
    )
    agent = Agent(fake, node="gpu01", spool_dir=tmp_path / "spool", mapping_dir=None, clock=lambda: t[0])
    agent.tick(t[0])
    t[0] = T0 + 4
    fake.set_values(0, sm_active=70.0)  # 4 s at 20 %, then 6 s at 70 %: (4 x 20 + 6 x 70) / 10 = 50
    t[0] = T0 + 10
    agent.tick(t[0])
    assert agent.devices[0].last.gpm["sm_active"] == pytest.approx(50.0)


def test_remapped_rows_counts_and_retired_pages_per_cause(tmp_path):
    # A GPU with 3 rows remapped for correctable and 1 for uncorrectable errors, a remapping pending; and one
    # with retired pages (2 for multiple single-bit errors, 1 for a double-bit error) and one pending.
    fake, records, families = run(
        tmp_path,
        [
            {"model": "h100", "state": "load", "values": {"remapped_rows": [3, 1, True, False]}},
            {
                "model": "l40s",
                "state": "load",
                "values": {"retired_pages": [2, 1], "retired_pages_pending": True},
            },
        ],
        seconds=60,
    )
    a, b = (samples(records, g.uuid)["08:00"] for g in fake.gpus)
    assert (a["remapped_correctable"], a["remapped_uncorrectable"], a["remapped_pending"]) == (3, 1, True)
    assert (b["retired_pages_sbe"], b["retired_pages_dbe"], b["retired_pages"]) == (2, 1, 3)
    assert b["retired_pages_pending"] is True
    assert a["retired_pages_pending"] is None  # Hopper has no retired pages: NotSupported, null
    assert series(families, "slurmscope_gpu_remapped_rows", "gpu", "cause") == {
        ("0", "correctable"): 3.0,
        ("0", "uncorrectable"): 1.0,
        ("1", "correctable"): 0.0,  # the L40S capture's remapped_rows: 0, 0 (Ada remaps rows too)
        ("1", "uncorrectable"): 0.0,
    }
    assert series(families, "slurmscope_gpu_retired_pages", "gpu", "cause") == {
        ("1", "multiple_single_bit"): 2.0,
        ("1", "double_bit"): 1.0,
    }
    assert series(families, "slurmscope_gpu_retired_pages_pending", "gpu") == {("1",): 1.0}
    events = [r["detail"] for r in records if r["type"] == "event" and r["event_type"] == "ecc"]
    assert events == [
        "row remapping pending (reset required)",
        "page retirement pending (reset or reboot required)",
    ]


def test_pcie_link_generation_and_width_from_the_captures(tmp_path):
    fake, records, _ = run(tmp_path, [{"model": "h200"}, {"model": "l40s"}], seconds=0)
    got = [
        (r["pcie_link_gen"], r["pcie_link_width"])
        for g in fake.gpus
        for r in samples(records, g.uuid).values()
    ]
    # pcie.link.gen.current / pcie.link.width.current of the H200 and L40S captures
    assert got == [(5, 16), (4, 16)]
