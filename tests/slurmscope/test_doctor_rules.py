"""`doctor`'s rule check against the config's render: alerts Prometheus loaded at other thresholds or `for`
than `slurmscope alerts build` writes with this config are named (hand-made answers, and a real Prometheus)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from slurmscope.alerts.build import render_rules

from slurmscope import doctor
from slurmscope.config import load_config
from slurmscope.doctor import PASS, WARN, Response

MOVED = '[alerts.thresholds]\nbudget_spent_ratio = 0.9\nnode_down_for = "20m"\n'


def moved_config(tmp_path):
    path = tmp_path / "slurmscope.toml"
    path.write_text(MOVED)
    return load_config(path, env={})


def api(rules: list[dict]):
    body = {"status": "success", "data": {"groups": [{"rules": rules}]}}
    return lambda url, **kw: Response(200, {}, json.dumps(body).encode())


def loaded_as_rendered(expected: dict, **changes) -> list[dict]:
    """Every rule of `expected` as Prometheus' /api/v1/rules lists it: query, `for` in seconds."""
    out = []
    for g in expected["groups"]:
        for r in g["rules"]:
            name = r.get("alert") or r["record"]
            rule = {"name": name, "health": "ok", "query": r["expr"]}
            if "alert" in r:
                rule["duration"] = doctor._seconds(r["for"])
            out.append({**rule, **changes.get(name, {})})
    return out


def test_loaded_rules_at_other_thresholds_are_named(tmp_path):
    default = doctor.config_rules(load_config(env={}))
    moved = doctor.config_rules(moved_config(tmp_path))
    r = doctor.check_prometheus_rules("http://p:9090", api(loaded_as_rendered(default)), default)
    assert r.status == PASS
    # Prometheus re-prints a loaded query ([7d] as [1w], spacing): the numbers are what is compared
    reprinted = {
        "SlurmWaitTimeP90Drift": {
            "query": next(
                x["expr"].replace("[7d]", "[1w]")
                for g in default["groups"]
                for x in g["rules"]
                if x.get("alert") == "SlurmWaitTimeP90Drift"
            )
        }
    }
    assert (
        doctor.check_prometheus_rules(
            "http://p:9090", api(loaded_as_rendered(default, **reprinted)), default
        ).status
        == PASS
    )
    r = doctor.check_prometheus_rules("http://p:9090", api(loaded_as_rendered(default)), moved)
    assert r.status == WARN
    assert r.detail == (
        "loaded, but not at this config's thresholds: SlurmNodeDown (for 600 s, the config says 20m), "
        "SlurmAccountBudgetSpent (thresholds 0.8, 0.9 differ)"
    )
    assert "alerts build" in r.fix


@pytest.mark.prometheus
def test_a_real_prometheus_loading_the_default_rules_is_off_a_moved_config(tmp_path):
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("Debian's prometheus not installed")
    (tmp_path / "rules.yaml").write_text(render_rules())
    (tmp_path / "prometheus.yml").write_text(f"rule_files: [{tmp_path / 'rules.yaml'}]\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            prom,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=2) as resp:
                    if json.loads(resp.read())["data"]["groups"]:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "prometheus did not load the rules"
            time.sleep(0.3)
        results = {
            r.check: r
            for r in doctor.run_checks(load_config(env={}), str(tmp_path / "x.duckdb"), prometheus=url)
        }
        assert results["prometheus.rules"].status == PASS, results["prometheus.rules"]
        moved = doctor.run_checks(moved_config(tmp_path), str(tmp_path / "x.duckdb"), prometheus=url)
        r = next(r for r in moved if r.check == "prometheus.rules")
        assert r.status == WARN and "SlurmNodeDown (for 600 s, the config says 20m)" in r.detail
    finally:
        proc.terminate()
        proc.wait(timeout=30)
