"""`slurmscope doctor --prometheus URL` against a real Prometheus (Debian's) on loopback.

Three Prometheus set-ups, as an operator would get them wrong or right: the shipped rule file loaded and
both scrape jobs up (a real agent on loopback; Prometheus' own /metrics stands in for the exporter's
port); no rule files at all (doctor must fail naming the missing rules); an agent job whose target is
not listening (doctor must fail naming its scrape URL).
"""

from __future__ import annotations

import json
import shutil
import socket
import time
import urllib.request
from importlib import resources

import pytest
import yaml
from click.testing import CliRunner
from slurmscope.agent.http import start_http

from slurmscope import doctor
from slurmscope.cli import main
from slurmscope.config import load_config
from tests.agent.test_agent import Env
from tests.integration.test_prometheus_live import _free_port, _start, _stop

pytestmark = pytest.mark.prometheus


@pytest.fixture(scope="module")
def prom() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("Debian's prometheus not installed")
    return path


@pytest.fixture
def agent(tmp_path):
    env = Env(tmp_path, [{"model": "h100", "state": "load", "count": 1}], cluster="c1")
    server = start_http(env.agent, "127.0.0.1", 0, None)
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scraped(port: int, timeout: float = 60) -> None:
    """Until every target has been scraped once (health no longer 'unknown')."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=10) as r:
            targets = json.loads(r.read())["data"]["activeTargets"]
        if targets and all(t["health"] != "unknown" for t in targets):
            return
        time.sleep(0.5)
    pytest.fail(f"targets not scraped: {targets}")


def _config(port: int, agent: str, rules: list[str]) -> dict:
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "5s"},
        "rule_files": rules,
        "scrape_configs": [
            {"job_name": "slurmscope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
            {"job_name": "slurmscope-agent", "static_configs": [{"targets": [agent]}]},
        ],
    }


def _doctor(url: str, tmp_path) -> dict:
    conf = tmp_path / "slurmscope.toml"
    conf.write_text('[exporter]\naddress = "127.0.0.1"\n')
    res = CliRunner().invoke(
        main,
        [
            "--config",
            str(conf),
            "--db",
            str(tmp_path / "none.duckdb"),
            "doctor",
            "--prometheus",
            url,
            "--format",
            "json",
        ],
    )
    return {c["check"]: c for c in json.loads(res.stdout)["checks"]}


def test_shipped_rules_loaded_and_targets_up(prom, tmp_path, agent):
    rules = tmp_path / "slurmscope.rules.yaml"
    rules.write_text(resources.files("slurmscope.alerts").joinpath("slurmscope.rules.yaml").read_text())
    port = _free_port()
    proc = _start(prom, tmp_path, port, _config(port, agent, [str(rules)]))
    try:
        _scraped(port)
        url = f"http://127.0.0.1:{port}"
        records, alerts = doctor.shipped_rule_names()
        r = doctor.check_prometheus_rules(url, doctor.http_get)
        assert (r.status, r.detail) == (
            doctor.PASS,
            f"{len(records)} recording rules and {len(alerts)} alerts loaded",
        )
        r = doctor.check_prometheus_targets(load_config(env={}), url, doctor.http_get)
        assert (r.status, r.detail) == (doctor.PASS, "2 targets up (slurmscope, slurmscope-agent)")
        checks = _doctor(url, tmp_path)
        assert checks["prometheus.rules"]["status"] == "pass"
        assert checks["exporter.address"]["status"] == "pass"  # Prometheus is on loopback too
    finally:
        _stop(proc)


def test_without_rules_doctor_fails(prom, tmp_path, agent):
    port = _free_port()
    proc = _start(prom, tmp_path, port, _config(port, agent, []))
    try:
        checks = _doctor(f"http://127.0.0.1:{port}", tmp_path)
        rules = checks["prometheus.rules"]
        records, alerts = doctor.shipped_rule_names()
        assert rules["status"] == "fail"
        assert rules["detail"].startswith(
            f"none of slurmscope.rules.yaml is loaded ({len(records)} recording rules, {len(alerts)} alerts"
        )
        assert "slurmscope alerts build" in rules["fix"]
    finally:
        _stop(proc)


def test_an_old_rule_file_fails_naming_each_missing_rule(prom, tmp_path, agent):
    """The shipped file less its first group, and one alert of another group: exactly those are named."""
    shipped = yaml.safe_load(
        resources.files("slurmscope.alerts").joinpath("slurmscope.rules.yaml").read_text()
    )
    first, *rest = shipped["groups"]
    alert_group = next(g for g in rest if any("alert" in r for r in g["rules"]))
    dropped_alert = next(r for r in alert_group["rules"] if "alert" in r)
    alert_group["rules"].remove(dropped_alert)
    rules = tmp_path / "old.rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rest}, sort_keys=False))
    gone = {r.get("record") or r.get("alert") for r in first["rules"]} | {dropped_alert["alert"]}
    gone_records = sorted(r["record"] for r in first["rules"] if "record" in r)
    gone_alerts = sorted(gone - set(gone_records))
    port = _free_port()
    proc = _start(prom, tmp_path, port, _config(port, agent, [str(rules)]))
    try:
        r = doctor.check_prometheus_rules(f"http://127.0.0.1:{port}", doctor.http_get)
        expected = []
        if gone_records:
            expected.append("recording rules " + ", ".join(gone_records))
        expected.append("alerts " + ", ".join(gone_alerts))
        assert (r.status, r.detail) == (doctor.FAIL, "not loaded: " + "; ".join(expected))
    finally:
        _stop(proc)


def test_an_agent_target_down_is_named(prom, tmp_path):
    port, dead = _free_port(), _closed_port()
    proc = _start(prom, tmp_path, port, _config(port, f"127.0.0.1:{dead}", []))
    try:
        _scraped(port)
        r = doctor.check_prometheus_targets(load_config(env={}), f"http://127.0.0.1:{port}", doctor.http_get)
        assert r.status == doctor.FAIL
        assert r.detail.startswith(f"1 of 2 down: http://127.0.0.1:{dead}/metrics (")
        assert "connection refused" in r.detail
    finally:
        _stop(proc)
