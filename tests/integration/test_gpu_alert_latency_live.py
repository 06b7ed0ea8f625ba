"""End to end on a real Prometheus: an XID 79 on a fake-NVML node agent -> the alert firing, both paths.

One agent (`slurmscope agent` on the fake backend, default 10-s sampling, 60-s spool segments) gets XID 79
on one GPU at a chosen instant (agent/fake.py `xid_events`, delivered through the NVML event wait as a real
driver event is). Two Prometheus instances load the shipped rule file unchanged (global evaluation every
15 s; the GPU groups' own 15 s) and scrape as docs/deployment.md configures:

- "live": the agent every 15 s and the exporter every 60 s. The real-time alert must fire within 60 s,
  and the central copies of the same fault must stay quiet there (one fault, one page).
- "central": the exporter only (a site whose Prometheus cannot reach the nodes). The central collector
  pulls the agent as `serve` schedules it (`collect nvml` every 60 s, 20 s past the minute), the exporter
  renders after each run, and the central alert must fire within 3 minutes.

The alert is found by its `xid` (or `code`) label or by a fallen-off-the-bus alert name, not by one rule
name, so that whichever rule fires first is timed; at the end both Prometheus instances must fire the alert
of 79's class in NVIDIA's catalogue (reboot_node): GpuXidRebootNodeLive live, GpuXidRebootNode central. The
measured latencies are printed (run with -s) and quoted in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime

import pytest
import yaml
from slurmscope.alerts.build import render_rules
from slurmscope.alerts.rules import REALTIME_GROUP

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.exporter import serve_metrics
from slurmscope.scheduler import Service, build_scheduler
from tests.integration.test_prometheus_live import _api, _start, _stop

pytestmark = pytest.mark.prometheus

LIVE_GOAL_SECONDS = 60.0
CENTRAL_GOAL_SECONDS = 180.0
XID = "79"
FALLEN_OFF_BUS = {"GpuFallenOffBus", "GpuFallenOffBusLive"}
NODE = "gpu01"
CLUSTER = "c1"

AGENT = """
import sys
from slurmscope.agent.agent import run_agent
from slurmscope.config import load_config
cfg = load_config(env={}).with_overrides(cluster={"name": sys.argv[1]})
run_agent(cfg, port=int(sys.argv[2]), spool=sys.argv[3], fake=sys.argv[4], address="127.0.0.1", node=sys.argv[5])
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _matching(alerts: list[dict]) -> list[dict]:
    """Firing alerts for our node's XID 79, whatever the rule is called."""
    return [
        a
        for a in alerts
        if a["state"] == "firing"
        and a["labels"].get("node") == NODE
        and (
            XID in (a["labels"].get("xid"), a["labels"].get("code"))
            or a["labels"]["alertname"] in FALLEN_OFF_BUS
        )
    ]


def _active_at(alert: dict) -> float:
    return datetime.fromisoformat(alert["activeAt"].replace("Z", "+00:00")).timestamp()


def _wait_up(port: int, job: str, deadline: float) -> None:
    while time.time() < deadline:
        up = _api(port, "query", query=f'up{{job="{job}"}} == 1')["result"]
        if up:
            return
        time.sleep(0.5)
    pytest.fail(f"Prometheus on {port} has not scraped job {job} in time")


def test_xid79_to_firing_alert_live_within_60s_and_through_the_central_store_within_3min(tmp_path):
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("Debian's prometheus not installed")
    rules = tmp_path / "slurmscope.rules.yaml"
    rules.write_text(render_rules())
    realtime = {
        r["alert"]
        for g in yaml.safe_load(render_rules())["groups"]
        if g["name"] == f"slurmscope.{REALTIME_GROUP}"
        for r in g["rules"]
    }

    agent_port = _port()
    cfg = load_config(env={}).with_overrides(
        cluster={"name": CLUSTER}, nvml={"agents": [f"http://127.0.0.1:{agent_port}"]}
    )
    db = tmp_path / "central.duckdb"
    connect(db).close()
    service = Service(config=cfg, db_path=str(db))
    service.render_now()
    exporter = serve_metrics("127.0.0.1", 0, lambda: service.metrics)
    sched = build_scheduler(service, {"nvml": 60})  # the central collector as serve schedules it
    sched.start()
    agent = None

    exporter_job = {
        "job_name": "slurmscope",
        "scrape_interval": "60s",
        "static_configs": [{"targets": [f"127.0.0.1:{exporter.server_address[1]}"]}],
    }
    agent_job = {
        "job_name": "slurmscope-agent",
        "scrape_interval": "15s",
        "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}],
    }
    glob = {"scrape_interval": "15s", "evaluation_interval": "15s"}
    procs = {}
    try:
        for name, jobs in (("live", [exporter_job, agent_job]), ("central", [exporter_job])):
            d = tmp_path / name
            d.mkdir()
            port = _port()
            procs[name] = (
                port,
                _start(prom, d, port, {"global": glob, "rule_files": [str(rules)], "scrape_configs": jobs}),
            )
        # Prometheus spreads a target's first scrape over one scrape interval (60 s for the exporter), so
        # both instances are given two intervals to scrape the exporter before the agent starts.
        exporter_deadline = time.time() + 120
        for name in procs:
            _wait_up(procs[name][0], "slurmscope", exporter_deadline)

        # The XID is due 40 s after the agent starts: time for it to come up and for the live instance to
        # scrape it once (15 s interval). Latencies are measured from this instant.
        inject_at = round(time.time()) + 40.0
        (tmp_path / "map").mkdir()
        spec = tmp_path / "fake-nvml.json"
        spec.write_text(
            json.dumps(
                {
                    "start": 0.0,
                    "gpus": [
                        {"model": "h100", "state": "load", "xid_events": [[inject_at, int(XID)]]},
                        {"model": "h100", "state": "load"},
                    ],
                    "mapping_dir": str(tmp_path / "map"),
                    "kmsg_path": str(tmp_path / "no-kmsg"),
                }
            )
        )
        agent = subprocess.Popen(
            [sys.executable, "-c", AGENT, CLUSTER, str(agent_port), str(tmp_path / "spool"), str(spec), NODE],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "agent.log", "w"),  # noqa: SIM115 - closed with the process
        )
        _wait_up(procs["live"][0], "slurmscope-agent", inject_at)
        assert not _matching(_api(procs["live"][0], "alerts")["alerts"]), "an alert before the XID"

        seen: dict[str, tuple[float, dict]] = {}
        deadline = inject_at + CENTRAL_GOAL_SECONDS + 30
        while time.time() < deadline and len(seen) < 2:
            for name, (port, _) in procs.items():
                if name not in seen:
                    hits = _matching(_api(port, "alerts")["alerts"])
                    if hits:
                        seen[name] = (time.time(), min(hits, key=_active_at))
            if agent.poll() is not None:
                pytest.fail("agent died: " + (tmp_path / "agent.log").read_text()[-2000:])
            time.sleep(1)

        figures = {
            name: (
                round(polled - inject_at, 1),
                round(_active_at(a) - inject_at, 1),
                a["labels"]["alertname"],
            )
            for name, (polled, a) in seen.items()
        }
        print(f"\nXID {XID} -> firing (seen by polling s, Prometheus activeAt s, alert): {figures}")
        assert "live" in seen, f"no live alert within {deadline - inject_at:.0f} s"
        assert "central" in seen, f"no central alert within {deadline - inject_at:.0f} s: {figures}"
        live_polled, live_alert = seen["live"]
        assert live_polled - inject_at <= LIVE_GOAL_SECONDS, figures
        assert live_alert["labels"]["alertname"] in realtime, figures
        central_polled, central_alert = seen["central"]
        assert central_polled - inject_at <= CENTRAL_GOAL_SECONDS, figures
        assert central_alert["labels"]["alertname"] not in realtime, figures
        # By now the central copy of the fault has reached the live Prometheus too (same exporter, same
        # scrape interval): still only real-time alerts fire for it there.
        query = f'slurmscope_gpu_xid_events_total{{source="central", node="{NODE}"}}'
        until = time.time() + 75  # one exporter scrape interval, plus the rules' 15 s
        while time.time() < until and not _api(procs["live"][0], "query", query=query)["result"]:
            time.sleep(1)
        assert _api(procs["live"][0], "query", query=query)["result"], (
            "the live Prometheus has no central copy"
        )
        time.sleep(16)  # one evaluation of the GPU groups with both copies present
        live_now = _matching(_api(procs["live"][0], "alerts")["alerts"])
        assert live_now and {a["labels"]["alertname"] for a in live_now} <= realtime, live_now
        assert "GpuXidRebootNodeLive" in {a["labels"]["alertname"] for a in live_now}, live_now
        central_now = _matching(_api(procs["central"][0], "alerts")["alerts"])
        assert "GpuXidRebootNode" in {a["labels"]["alertname"] for a in central_now}, central_now
    finally:
        for _, proc in procs.values():
            _stop(proc)
        sched.shutdown(wait=True)
        exporter.shutdown()
        if agent is not None:
            agent.terminate()
            agent.wait(timeout=30)
