"""Alert rules: conventions, runbooks, committed file current, and promtool check/test on every alert."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from click.testing import CliRunner
from slurmscope.alerts import thresholds
from slurmscope.alerts.build import DEFAULT_RUNBOOK_BASE, RULES_FILE, render_rules
from slurmscope.alerts.rules import ALERTS, RECORDING, collector_intervals

from slurmscope.config import ConfigError, load_config
from tests.paths import ROOT

ROOT = ROOT
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
        assert re.search(r"\{\{[^}]*(\$labels\.|\$value)", a.description), a.name
        runbook = (ROOT / "docs" / "runbooks" / f"{a.runbook_name}.md").read_text(encoding="utf-8")
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in runbook, (a.name, section)
    for r in RECORDING:
        assert re.fullmatch(r"[a-z_]+:slurmscope_[a-z0-9_]+:[a-z0-9_]+", r.record), r.record


def test_every_runbook_page_belongs_to_an_alert():
    """A live copy shares its class's page, so a page of its own (or of a removed alert) would go stale unread;
    GpuXid.md is the XID class reference the class pages link to."""
    pages = {p.stem for p in (ROOT / "docs" / "runbooks").glob("*.md")}
    assert pages == {a.runbook_name for a in ALERTS} | {"GpuXid"}
    assert {a.runbook_name for a in ALERTS if a.name.endswith("Live")} == {
        "GpuXidResetGpu",
        "GpuXidRebootNode",
        "GpuXidContactSupport",
        "GpuXidInvestigate",
        "GpuFallenOffBus",
    }


def test_runbook_urls_are_absolute_under_the_base():
    rules = [r for g in yaml.safe_load(render_rules())["groups"] for r in g["rules"] if "alert" in r]
    assert DEFAULT_RUNBOOK_BASE.startswith("file:///")
    assert {r["annotations"]["runbook_url"] for r in rules} == {
        f"{DEFAULT_RUNBOOK_BASE}{a.runbook_name}.md" for a in ALERTS
    }
    other = yaml.safe_load(render_rules("https://wiki.example.org/slurmscope/runbooks/"))
    urls = {r["annotations"]["runbook_url"] for g in other["groups"] for r in g["rules"] if "alert" in r}
    assert "https://wiki.example.org/slurmscope/runbooks/SlurmNodeDown.md" in urls
    with pytest.raises(ValueError, match="absolute URL"):
        render_rules("docs/runbooks/")


def test_runbook_base_comes_from_config_and_is_validated(tmp_path):
    assert load_config(env={}).get("alerts", "runbook_base_url") == DEFAULT_RUNBOOK_BASE
    p = tmp_path / "s.toml"
    p.write_text(
        '[alerts]\nrunbook_base_url = "https://git.example.org/hpc/slurmscope/-/blob/v0.1.0/docs/runbooks/"\n'
    )
    assert load_config(p, env={}).get("alerts", "runbook_base_url").startswith("https://git.example.org/")
    p.write_text('[alerts]\nrunbook_base_url = "docs/runbooks/"\n')
    with pytest.raises(ConfigError, match="alerts.runbook_base_url.*absolute URL"):
        load_config(p, env={})


def test_collector_intervals_are_those_serve_schedules():
    """The stale thresholds are per collector interval; they must follow the schedule if it changes."""
    from slurmscope.scheduler import Service, build_scheduler

    sched = build_scheduler(Service(config=load_config(env={}), db_path="unused.duckdb"))
    scheduled = {
        job.id.removeprefix("collect-"): int(job.trigger.interval.total_seconds())
        for job in sched.get_jobs()
        if job.id.startswith("collect-")
    }
    intervals = collector_intervals()
    assert scheduled == {k: i for i, kinds in intervals.items() for k in kinds if k in scheduled}
    rest = build_scheduler(
        Service(config=load_config(env={}).with_overrides(slurm={"source": "rest"}), db_path="unused.duckdb")
    )
    rest_jobs = {job.id.removeprefix("collect-") for job in rest.get_jobs() if job.id.startswith("collect-")}
    assert "sacct_rest" in rest_jobs
    assert set(scheduled) | rest_jobs == {k for kinds in intervals.values() for k in kinds}


def test_the_rest_job_source_is_stale_at_its_own_interval():
    """With slurm.source = "rest" the job collector is sacct_rest: judged as sacct (30 min), not by the
    longest interval (6 h) as a collector the rules do not know would be."""
    expr = next(a.expr for a in ALERTS if a.name == "SlurmscopeCollectorStale")
    bucket = next(sel for sel in expr.split(" or ") if "sacct_rest" in sel and "!~" not in sel)
    assert "> 1800" in bucket, bucket


def test_scrape_jobs_the_rules_select_are_those_deployment_documents():
    """SlurmscopeExporterDown and SlurmscopeAgentDown match on `job`: a renamed scrape job would silence them."""
    page = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    jobs = set(re.findall(r"job_name:\s*[\"']?([\w.-]+)", page))
    assert {thresholds.EXPORTER_JOB, thresholds.AGENT_JOB} <= jobs, jobs
    for a in ALERTS:
        for job in re.findall(r'\bjob="([^"]+)"', a.expr):
            assert job in jobs, (a.name, job)


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


def test_cli_runbook_base_moves_rules_and_their_tests(tmp_path):
    from slurmscope.cli import main

    base = "https://wiki.example.org/runbooks/"
    res = CliRunner().invoke(main, ["alerts", "build", "--out", str(tmp_path), "--runbook-base", base])
    assert res.exit_code == 0, res.output
    assert (tmp_path / RULES_FILE).read_text() == render_rules(base)
    cases = (tmp_path / "tests" / "nodes.yaml").read_text()
    assert f"runbook_url: {base}SlurmNodeDown.md" in cases and DEFAULT_RUNBOOK_BASE not in cases
    res = CliRunner().invoke(main, ["alerts", "build", "--out", str(tmp_path), "--runbook-base", "runbooks/"])
    assert res.exit_code == 2 and "absolute URL" in res.output


@pytest.mark.prometheus
def test_promtool_check_and_test_rules(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    from slurmscope.alerts.build import build_all

    build_all(tmp_path, "https://wiki.example.org/runbooks/")
    res = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / RULES_FILE)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
    tests = sorted(str(p) for p in (tmp_path / "tests").glob("*.yaml"))
    res = subprocess.run([promtool, "test", "rules", *tests], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("SUCCESS") == len(tests)


def test_the_throttle_alert_and_the_health_verdict_use_one_threshold():
    """Both count hardware clock-event causes only; a GPU the verdict calls throttling is the one paged on."""
    assert load_config(env={}).get("health", "throttle_ratio") == thresholds.THROTTLE_RATIO


def test_the_nvlink_alert_and_the_health_verdict_use_dcgms_limits():
    """GpuNvlinkErrors pages on what the verdict calls `nvlink_errors` (failing): any replay or recovery error,
    CRC errors at DCGM's 100 a second."""
    health = load_config(env={}).raw["health"]
    assert health["nvlink_crc_per_second"] == thresholds.NVLINK_CRC_PER_SECOND
    assert health["nvlink_replay_recovery"] == 1
    assert 'counter=~"replay|recovery"' in next(a.expr for a in ALERTS if a.name == "GpuNvlinkErrors")
