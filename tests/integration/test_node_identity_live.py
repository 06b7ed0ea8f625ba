"""Nodes that share a host name, on the real Slurm bed: one row each, and a DOWN one pages (issue 14, item 5).

The bed's five slurmd share one NodeHostname (the machine's short host name; tests/slurmbed/cluster.py, the
multiple-slurmd set-up of the Slurm programmer guide), as on the 22.05 cluster where `serve` stored six
nodes as one node `vm` and no alert fired for a DOWN gpu03. Here sinfo is collected as `serve` collects it
(slurmscope.scheduler.Service.run_collector: the registry's live command, parse, load, render), gpu03 is set
DOWN with a reason, and within one collection it is DOWN in node_states, `slurmscope_node_down{node="gpu03"}`
is 1 on /metrics, and a real Prometheus running the shipped rule file raises SlurmNodeDown for gpu03.

SlurmNodeDown has `for: 10m` and its group evaluates every minute: the shipped file, unchanged, must bring the
alert to pending with its exact labels; a copy whose only changes are that rule's `for` and its group's
interval (its expression asserted equal to the shipped one) then shows it firing, so the test does not wait
ten minutes. gpu03 is resumed (and re-drained if it was drained) at the end, whatever happened.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from slurmscope.alerts.rules import ALERTS
from slurmscope.collectors import sinfo

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.exporter import serve_metrics
from slurmscope.scheduler import Service
from tests.integration.test_prometheus_live import _api, _free_port, _start, _stop

pytestmark = [pytest.mark.slurm, pytest.mark.prometheus]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "slurmscope.rules.yaml"
NODE = "gpu03"
REASON = "Xid 79: GPU has fallen off the bus"
ALERT = "SlurmNodeDown"


def _node_down(metrics: bytes) -> dict[str, float]:
    return {
        s.labels["node"]: s.value
        for fam in text_string_to_metric_families(metrics.decode())
        if fam.name == "slurmscope_node_down"
        for s in fam.samples
    }


def _latest(db: Path) -> list[tuple]:
    con = connect(db, read_only=True)
    try:
        return con.execute(
            "SELECT node, \"partition\", node_host, state, coalesce(state_flags, ''), reason FROM node_states"
            " WHERE snapshot_time = (SELECT max(snapshot_time) FROM node_states) ORDER BY 1, 2"
        ).fetchall()
    finally:
        con.close()


def _scontrol_node(bed, node: str) -> dict[str, str]:
    """`scontrol show node -o` as key=value pairs (Reason, the only value with spaces, is the last key)."""
    text = bed.slurm("scontrol", "show", "node", node, "-o").strip()
    head, _, reason = text.partition(" Reason=")
    out = dict(kv.split("=", 1) for kv in head.split() if "=" in kv)
    if reason:
        out["Reason"] = reason.rsplit(" [", 1)[0]
    return out


def _alerts(port: int) -> list[dict]:
    return [a for a in _api(port, "alerts")["alerts"] if a["labels"]["alertname"] == ALERT]


def _wait_alert(port: int, state: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [a for a in _alerts(port) if a["state"] == state]
        if found:
            assert len(found) == 1, found
            return found[0]
        time.sleep(1)
    pytest.fail(f"{ALERT} not {state} within {timeout:g} s: {_alerts(port)}")


def test_nodes_sharing_a_host_are_separate_rows_and_a_down_one_fires_slurm_node_down(
    slurmbed, tmp_path, monkeypatch
):
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("Debian's prometheus not installed")
    bed = slurmbed
    monkeypatch.setenv("SLURM_CONF", bed.env()["SLURM_CONF"])  # for the in-process collector, as serve's
    nodes = sorted(bed.cluster.NODE_PORTS)
    # The premise, from Slurm itself: five nodes, one host name.
    hosts = {n: _scontrol_node(bed, n)["NodeHostName"] for n in nodes}
    assert len(set(hosts.values())) == 1, hosts
    host = hosts[NODE]
    before = _scontrol_node(bed, NODE)

    cfg = load_config(str(bed.config), env={})
    db = tmp_path / "nodes.duckdb"
    connect(db).close()
    service = Service(config=cfg, db_path=str(db))
    service.run_collector("sinfo")
    rows = _latest(db)
    assert sorted({r[0] for r in rows}) == nodes  # was one node named after the host
    assert {r[2] for r in rows} == {host}
    assert len(rows) == 9  # cpu01 in cpu, gpu01-04 in gpu and debug
    assert _node_down(service.metrics) == dict.fromkeys(nodes, 0.0)

    exporter = serve_metrics("127.0.0.1", 0, lambda: service.metrics)
    rules = tmp_path / "rules.yaml"
    shutil.copyfile(RULES, rules)  # the shipped file, unchanged
    port = _free_port()
    config = {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "slurmscope",
                "static_configs": [{"targets": [f"127.0.0.1:{exporter.server_address[1]}"]}],
            }
        ],
    }
    proc = _start(prom, tmp_path, port, config)
    try:
        deadline = time.monotonic() + 60
        while not _api(port, "query", query=f'slurmscope_node_down{{node="{NODE}"}} == 0')["result"]:
            assert time.monotonic() < deadline, "Prometheus has not scraped the exporter"
            time.sleep(1)
        bed.slurm("scontrol", "update", f"nodename={NODE}", "state=down", f"reason={REASON}")
        try:
            service.run_collector("sinfo")  # one collection
            down = [r for r in _latest(db) if r[0] == NODE]
            assert [(r[3], r[5]) for r in down] == [("DOWN", REASON), ("DOWN", REASON)]  # debug and gpu
            assert {r[0] for r in _latest(db) if r[3] == "DOWN"} == {NODE}
            assert _node_down(service.metrics) == {n: float(n == NODE) for n in nodes}
            _capture(bed)

            pending = _wait_alert(port, "pending", 150)  # a 1-minute group: the first evaluation that sees it
            assert pending["labels"] == {
                "alertname": ALERT,
                "cluster": bed.cluster.CLUSTER,
                "node": NODE,
                "severity": "warning",
            }
            # The same rule with a shorter wait: expression (the one evaluated above) unchanged.
            doc = yaml.safe_load(RULES.read_text())
            group = next(g for g in doc["groups"] if any(r.get("alert") == ALERT for r in g["rules"]))
            rule = next(r for r in group["rules"] if r.get("alert") == ALERT)
            assert rule["expr"] == next(a.expr for a in ALERTS if a.name == ALERT)
            assert rule["for"] == "10m"
            rule["for"], group["interval"] = "5s", "5s"
            rules.write_text(yaml.safe_dump(doc, sort_keys=False, width=10_000))
            os.kill(proc.pid, signal.SIGHUP)
            firing = _wait_alert(port, "firing", 60)
            assert firing["labels"] == pending["labels"]
        finally:
            bed.slurm("scontrol", "update", f"nodename={NODE}", "state=resume")
            if "DRAIN" in before["State"]:
                bed.slurm(
                    "scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={before['Reason']}"
                )
    finally:
        _stop(proc)
        exporter.shutdown()
    deadline = time.monotonic() + 60  # slurmctld takes the resumed node back at its next contact with slurmd
    while _scontrol_node(bed, NODE)["State"] != before["State"]:
        assert time.monotonic() < deadline, _scontrol_node(bed, NODE)
        time.sleep(1)
    service.run_collector("sinfo")
    assert _node_down(service.metrics) == dict.fromkeys(nodes, 0.0)


def _capture(bed) -> None:
    """Real outputs of this moment (gpu03 DOWN, every node on one host) for tests/collectors/test_sinfo.py."""
    argvs = {
        "hosts_live": sinfo.command(load_config(env={})),
        "hosts_previous": ["sinfo", "--Node", "--noheader", f"--Format={sinfo.PREVIOUS_LIVE_FORMAT}"],
        "hosts_names": ["sinfo", "--Node", "-o", "%N|%n|%P|%T|%E"],
        "hosts_only": ["sinfo", "--Node", "-o", "%n|%P|%T"],
        "hosts_groups": ["sinfo", "-o", "%n|%P|%T|%D"],
    }
    for tag, argv in argvs.items():
        bed.capture.write_capture(bed.captures, f"sinfo_{tag}", argv)
        bed.publish("sinfo", tag)
