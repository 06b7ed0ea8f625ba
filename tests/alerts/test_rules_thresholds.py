"""Alert thresholds from the config (`[alerts.thresholds]`): validated keys naming alerts/thresholds.py's
constants, the rules rendered with them, and promtool firing at the moved line rather than the default."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml
from click.testing import CliRunner
from slurmscope.alerts import thresholds
from slurmscope.alerts.build import RULES_FILE, config_thresholds, render_rules

from slurmscope.config import THRESHOLD_KEYS, ConfigError, _At, load_config
from tests.paths import ROOT

MOVED = """
[alerts.thresholds]
budget_spent_ratio = 0.9
budget_spent_for = "5m"
node_down_for = "20m"
wait_p90_drift_factor = 4
collector_stale_runs = 3
"""


def config(tmp_path, text: str):
    path = tmp_path / "slurmscope.toml"
    path.write_text(text)
    return load_config(path, env={})


def alerts_of(text: str) -> dict[str, dict]:
    return {r["alert"]: r for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "alert" in r}


def test_every_key_names_a_constant_whose_default_it_accepts():
    for key, spec in THRESHOLD_KEYS.items():
        default = getattr(thresholds, key.upper())
        assert spec.parse(default, _At("thresholds.py", key)) == default, key


def test_the_defaults_render_the_committed_file():
    cfg = load_config(env={})
    assert config_thresholds(cfg) == {"throttle_ratio": thresholds.THROTTLE_RATIO}
    assert render_rules(thresholds=config_thresholds(cfg)) == (ROOT / "alerts" / RULES_FILE).read_text()


def test_moved_thresholds_move_exactly_their_alerts(tmp_path):
    default = alerts_of(render_rules())
    moved = alerts_of(render_rules(thresholds=config_thresholds(config(tmp_path, MOVED))))
    changed = {name for name in default if default[name] != moved[name]}
    assert changed == {
        "SlurmAccountBudgetSpent",
        "SlurmNodeDown",
        "SlurmWaitTimeP90Drift",
        "SlurmscopeCollectorStale",
    }
    spent = moved["SlurmAccountBudgetSpent"]
    assert spent["expr"].endswith(">= 0.9") and default["SlurmAccountBudgetSpent"]["expr"].endswith(">= 0.8")
    assert spent["for"] == "5m" and "(alert from 90%)" in spent["annotations"]["description"]
    assert moved["SlurmNodeDown"]["for"] == "20m"
    assert "more than 20m" in moved["SlurmNodeDown"]["annotations"]["description"]
    assert "> 4 * max by" in moved["SlurmWaitTimeP90Drift"]["expr"]  # 4, not 4.0: an integer default
    # 3 missed runs of a 60-s collector is 180 s, under the 900-s floor; a 300-s one 900; the 6-h config 10800
    stale = moved["SlurmscopeCollectorStale"]["expr"]
    assert "> 900)" in stale and "> 10800)" in stale and "> 1800)" not in stale


def test_the_throttle_alert_follows_health_throttle_ratio(tmp_path):
    cfg = config(tmp_path, "[health]\nthrottle_ratio = 0.3\n")
    rule = alerts_of(render_rules(thresholds=config_thresholds(cfg)))["GpuThrottlingSustained"]
    assert rule["expr"].endswith("> 0.3")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "budget_spent_ratios = 0.9",
            r"unknown key 'alerts\.thresholds\.budget_spent_ratios'; did you mean budget_spent_ratio\?",
        ),
        (
            'node_down_for = "ten minutes"',
            r"key 'alerts\.thresholds\.node_down_for' expects a Prometheus duration",
        ),
        (
            "job_failure_ratio = 1.5",
            r"key 'alerts\.thresholds\.job_failure_ratio' expects a number > 0 and <= 1",
        ),
        (
            "collector_stale_runs = 2.5",
            r"key 'alerts\.thresholds\.collector_stale_runs' expects an integer >= 1",
        ),
        ("throttle_ratio = 0.2", r"unknown key 'alerts\.thresholds\.throttle_ratio'"),
    ],
)
def test_bad_thresholds_fail_at_load(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, f"[alerts.thresholds]\n{text}\n")


def test_cli_renders_the_config_s_thresholds_without_the_default_cases(tmp_path):
    from slurmscope.cli import main

    conf = tmp_path / "slurmscope.toml"
    conf.write_text(MOVED)
    out = tmp_path / "rules"
    res = CliRunner().invoke(main, ["--config", str(conf), "alerts", "build", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / RULES_FILE).read_text() == render_rules(
        thresholds=config_thresholds(load_config(conf, env={}))
    )
    assert list((out / "tests").glob("*.yaml")) == []  # written for the default lines, they would fail
    assert "no promtool cases written" in res.output


CASE = """
rule_files: [../slurmscope.rules.yaml]
evaluation_interval: 1m
tests:
  - name: SlurmAccountBudgetSpent at a site's 90% for 5 minutes
    interval: 1m
    input_series:
      - series: 'slurmscope_account_budget_spent_ratio{cluster="c1",account="a",budget="usd"}'
        values: '0.85x30 0.95x30'   # 85% would page at the default 80%; 95% from minute 31
    alert_rule_test:
      - eval_time: 30m
        alertname: SlurmAccountBudgetSpent
        exp_alerts: []
      - eval_time: 35m
        alertname: SlurmAccountBudgetSpent
        exp_alerts: []
      - eval_time: 36m
        alertname: SlurmAccountBudgetSpent
        exp_alerts:
          - exp_labels: {severity: warning, cluster: c1, account: a, budget: usd}
            exp_annotations:
              summary: An account has spent most of a budget or allocation.
              description: Account a of cluster c1 has used 95% of its usd budget for this period (alert from 90%).
              runbook_url: file:///opt/slurmscope/docs/runbooks/SlurmAccountBudgetSpent.md
"""


@pytest.mark.prometheus
def test_promtool_fires_at_the_moved_threshold_not_the_default(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    from slurmscope.alerts.build import build_all

    out = tmp_path / "rules"
    build_all(out, thresholds=config_thresholds(config(tmp_path, MOVED)))
    (out / "tests" / "moved.yaml").write_text(CASE)
    res = subprocess.run(
        [promtool, "test", "rules", str(out / "tests" / "moved.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    # the same case against the defaults' rules fails: at 80% the 85% series pages from minute 15
    (out / RULES_FILE).write_text(render_rules())
    res = subprocess.run(
        [promtool, "test", "rules", str(out / "tests" / "moved.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0


def test_configuration_md_lists_every_key_with_its_default():
    import re

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = page[page.index("## Alert thresholds") :]
    listed = set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, re.M))
    listed |= set(re.findall(r"`([a-z0-9_]+_for)` \d", section))
    assert listed == set(THRESHOLD_KEYS)
    for key in THRESHOLD_KEYS:
        default = getattr(thresholds, key.upper())
        shown = f"`{key}` {default}" if key.endswith("_for") else f"| `{key}` | `{default}` |"
        assert shown in section, key
