"""Alert rules: conventions, runbooks, committed file current, and promtool check/test on every alert."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from slurmscope.alerts.build import RULES_FILE, render_rules
from slurmscope.alerts.rules import ALERTS, RECORDING

ROOT = Path(__file__).resolve().parents[1]
ALERTS_DIR = ROOT / "alerts"


def test_committed_rules_are_generated():
    assert (ALERTS_DIR / RULES_FILE).read_text(encoding="utf-8") == render_rules(), (
        "stale: run slurmscope alerts build --out alerts"
    )


def test_alert_conventions():
    assert len(ALERTS) >= 15
    assert len({a.name for a in ALERTS}) == len(ALERTS)
    for a in ALERTS:
        assert re.fullmatch(r"(?:[A-Z][a-z0-9]+)+", a.name), a.name
        assert re.fullmatch(r"\d+[smh]", a.for_), a.name
        assert a.severity in {"critical", "warning", "info"}
        assert "{{" not in a.summary and a.summary.endswith(".")
        assert "{{ $labels." in a.description or "{{ $value" in a.description
        assert a.runbook_url == f"docs/runbooks/{a.name}.md"
        runbook = (ROOT / a.runbook_url).read_text(encoding="utf-8")
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in runbook, (a.name, section)
    for r in RECORDING:
        assert re.fullmatch(r"[a-z_]+:slurmscope_[a-z0-9_]+:[a-z0-9_]+", r.record), r.record


def test_every_alert_has_a_quiet_and_a_firing_case():
    cases: dict[str, list] = {}
    for path in sorted((ALERTS_DIR / "tests").glob("*.yaml")):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                cases.setdefault(check["alertname"], []).append(check)
    for a in ALERTS:
        checks = cases.get(a.name, [])
        firing = [c for c in checks if c.get("exp_alerts")]
        quiet = [c for c in checks if not c.get("exp_alerts")]
        assert firing and quiet, a.name
        for c in firing:
            for exp in c["exp_alerts"]:
                assert exp["exp_labels"]["severity"] == a.severity
                assert set(exp["exp_annotations"]) == {"summary", "description", "runbook_url"}


def test_cli_builds_rules_and_tests(tmp_path):
    from slurmscope.cli import main

    res = CliRunner().invoke(main, ["alerts", "build", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / RULES_FILE).read_text() == render_rules()
    assert sorted(p.name for p in (tmp_path / "tests").glob("*.yaml")) == sorted(
        p.name for p in (ALERTS_DIR / "tests").glob("*.yaml")
    )


@pytest.mark.prometheus
def test_promtool_check_and_test_rules(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    from slurmscope.alerts.build import build_all

    build_all(tmp_path)
    res = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / RULES_FILE)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
    tests = sorted(str(p) for p in (tmp_path / "tests").glob("*.yaml"))
    res = subprocess.run([promtool, "test", "rules", *tests], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("SUCCESS") == len(tests)
