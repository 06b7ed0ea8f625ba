"""One XID vocabulary: for every code of NVIDIA's catalogue the agent, the health verdict and the alerts agree.

Ground truth is the catalogue sheet (slurmscope/nvidia_xid_catalog.csv, hand-checked entries in
tests/test_xid.py): NVIDIA's immediate resolution gives the action, and the action gives what each consumer
must do. Each case drives the real consumers: the agent on the fake NVML receives the XID as an NVML event and
its /metrics families are read; the agent's spooled event is judged by the health pipeline; the generated
alert rules' XID selectors are matched against the series the central exporter serves for it
(`slurmscope_gpu_xid_events_total{xid="<code>"}`; Prometheus regexes are anchored, as re.fullmatch).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from slurmscope.agent.agent import Agent
from slurmscope.agent.fake import fake_from_spec
from slurmscope.agent.http import metric_families
from slurmscope.alerts.rules import alerts
from slurmscope.pipelines import health
from slurmscope.pipelines.common import UTC_DT
from slurmscope.pipelines.runner import Window, pipeline_params

from slurmscope import xid
from slurmscope.config import load_config

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CODES = [*sorted(xid.catalog()), 999]  # 999: a code this catalogue version does not list

EXPECTED = {
    # action -> (verdict, agent healthy, alert)
    "ignore": ("ok", True, None),
    "restart_app": ("ok", True, None),
    "reset_gpu": ("failing", False, "GpuXidResetGpu"),
    "reboot_node": ("failing", False, "GpuXidRebootNode"),
    "contact_support": ("failing", False, "GpuXidContactSupport"),
    "investigate": ("degraded", True, "GpuXidInvestigate"),
}


def _agent_side(tmp: Path, code: int, overrides: dict[int, str] | None = None) -> tuple[int, list[dict]]:
    """(slurmscope_gpu_healthy of the GPU, the event records the agent spooled) after XID `code` at T0+5."""
    t = [T0]
    fake = fake_from_spec(
        {"gpus": [{"model": "h100", "xid_events": [[5.0, code]]}], "start": T0},
        clock=lambda: t[0],
        sleep=lambda s: t.__setitem__(0, t[0] + s),
    )
    agent = Agent(
        fake,
        node="gpu01",
        spool_dir=tmp / "spool",
        mapping_dir=None,
        clock=lambda: t[0],
        xid_actions=overrides,
    )
    agent.tick(T0)
    t[0] = T0 + 1
    agent.wait_events(T0 + 10)
    agent.tick(T0 + 10)
    healthy = [
        s.value for f in metric_families(agent) if f.name == "slurmscope_gpu_healthy" for s in f.samples
    ]
    assert len(healthy) == 1
    return int(healthy[0]), [
        r for r in agent.journal.records if r["type"] == "event" and r["event_type"] == "xid"
    ]


def _verdict(events: list[dict], overrides: dict[int, str] | None = None) -> tuple[str, str, str]:
    """The GPU's (status, reason, detail) when the events are judged a minute after T0 + 10."""
    now = datetime.fromtimestamp(T0 + 70, UTC)
    uuid = events[0]["gpu_uuid"]
    minutes = [now - timedelta(minutes=k) for k in range(20, -1, -1)]
    samples = pl.LazyFrame(
        {
            "node": "gpu01",
            "gpu_uuid": uuid,
            "minute": minutes,
            "gpu_index": 0,
            "model": "h100",
            "temp_gpu_max_celsius": 50.0,
            "throttle_seconds": 0.0,
            "ecc_uncorrected_delta": 0,
            "ecc_uncorrected_total": 0,
            "remapped_pending": False,
            "remapped_failed": False,
        },
        schema_overrides={"minute": UTC_DT, "gpu_index": pl.Int32},
    )
    ev = pl.LazyFrame(
        {
            "node": ["gpu01"] * len(events),
            "gpu_uuid": [e["gpu_uuid"] for e in events],
            "event_time": [datetime.fromisoformat(e["event_time"].replace("Z", "+00:00")) for e in events],
            "event_type": [e["event_type"] for e in events],
            "xid": [e["xid"] for e in events],
        },
        schema={
            "node": pl.String,
            "gpu_uuid": pl.String,
            "event_time": UTC_DT,
            "event_type": pl.String,
            "xid": pl.Int32,
        },
    )
    nodes = pl.LazyFrame(
        {
            "snapshot_time": [now],
            "node": ["gpu01"],
            "state": ["IDLE"],
            "state_flags": [None],
            "reason": [None],
            "gpus_total": [1],
        },
        schema={
            "snapshot_time": UTC_DT,
            "node": pl.String,
            "state": pl.String,
            "state_flags": pl.String,
            "reason": pl.String,
            "gpus_total": pl.Int32,
        },
    )
    inventory = pl.LazyFrame(schema={"node": pl.String, "seen_at": UTC_DT, "gpus_visible": pl.Int64})
    conf = load_config(env={})
    if overrides:
        conf = conf.with_overrides(health={"xid_actions": overrides})
    params = pipeline_params(conf, Window(now - timedelta(hours=1), now + timedelta(minutes=1), False))
    out = health.compute({"nodes": nodes, "samples": samples, "events": ev, "inventory": inventory}, params)
    row = out["mart_gpu_health"].collect().sort("since").row(-1, named=True)
    return row["status"], row["reason"], row["detail"]


def _alerts_for(code: int, overrides: dict[int, str] | None = None) -> set[str]:
    """The XID alerts whose selector matches the central series of `code`."""
    out = set()
    for a in alerts(overrides):
        m = re.search(r'slurmscope_gpu_xid_events_total\{source="central", xid(=~|!~)"([^"]*)"\}', a.expr)
        if m is None:
            continue
        hit = re.fullmatch(m.group(2), str(code)) is not None
        if hit == (m.group(1) == "=~"):
            out.add(a.name)
    return out


@pytest.mark.parametrize("code", CODES)
def test_agent_verdict_and_alerts_follow_the_catalogue(tmp_path, code):
    entry = xid.lookup(code)
    verdict, healthy, alert = EXPECTED[entry.action]
    got_healthy, events = _agent_side(tmp_path, code)
    assert [e["xid"] for e in events] == [code]
    status, reason, detail = _verdict(events)
    assert status == verdict
    assert bool(got_healthy) == healthy == (status != "failing")
    assert _alerts_for(code) == ({alert} if alert else set())
    if verdict == "ok":
        assert reason == ""
    elif code == 79:
        assert reason == "fallen_off_bus"  # a GPU off the bus is reported as such; its action pages too
    else:
        assert reason == f"xid_{entry.action}" and f"XID {code} ({entry.action})" in detail
    if entry.application:
        assert status != "failing" and not entry.implicates_hardware


@pytest.mark.parametrize(("code", "action"), [(92, "reset_gpu"), (62, "ignore"), (149, "contact_support")])
def test_an_operator_override_moves_agent_verdict_and_alerts_together(tmp_path, code, action):
    overrides = {code: action}
    verdict, healthy, alert = EXPECTED[action]
    got_healthy, events = _agent_side(tmp_path, code, overrides)
    assert _verdict(events, overrides)[0] == verdict
    assert bool(got_healthy) == healthy
    assert _alerts_for(code, overrides) == ({alert} if alert else set())


def test_the_runbook_lists_each_class_with_the_catalogues_codes():
    page = (Path(__file__).resolve().parents[2] / "docs" / "runbooks" / "GpuXid.md").read_text(
        encoding="utf-8"
    )
    for action in xid.Action:
        section = page[page.index(f"\n## {action}\n") :]
        listed = section[section.index("Codes: ") + len("Codes: ") :]
        listed = listed[: listed.index("\n\n")]
        codes = tuple(int(c) for c in re.findall(r"\b\d+\b", listed.split(", and every")[0]))
        assert codes == xid.codes_of(action), action
