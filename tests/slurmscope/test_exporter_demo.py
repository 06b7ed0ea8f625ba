"""The exporter on the shared demo (64 GPUs, 3 days): a full scrape is clean and reconciles with the
simulator's own ground truth (its summary and events.jsonl), not with slurmscope's computations."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurmscope.config import load_config
from slurmscope.exporter import render
from tests.demo_fixture import demo_run  # noqa: F401


def _sim_end(demo_run):  # noqa: F811
    return datetime.fromisoformat(demo_run.result.summary["end"]).replace(tzinfo=UTC)


@pytest.fixture(scope="module")
def scrape(demo_run):  # noqa: F811
    cfg = load_config(None, env={}).with_overrides(cluster={"name": demo_run.result.summary["cluster"]})
    con = demo_run.connect()
    try:
        return render(con, cfg, _sim_end(demo_run))
    finally:
        con.close()


def _sum(body: bytes, name: str, by: str | None = None):
    out: dict = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name == name:
                key = s.labels.get(by) if by else None
                out[key] = out.get(key, 0) + s.value
    return out if by else out.get(None, 0)


@pytest.mark.prometheus
def test_promtool_check_metrics_clean_on_full_demo_scrape(scrape):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    res = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, timeout=60)
    assert res.returncode == 0 and not res.stdout and not res.stderr, res.stderr.decode()


def test_every_family_source_is_readable(scrape):
    ups = [line for line in scrape.decode().splitlines() if line.startswith("slurmscope_exporter_family_up{")]
    assert ups and all(line.endswith(" 1.0") for line in ups), [u for u in ups if not u.endswith(" 1.0")]


def test_scrape_reconciles_with_the_simulator_summary(demo_run, scrape):  # noqa: F811
    summary = demo_run.result.summary
    ended = {k: v for k, v in _sum(scrape, "slurmscope_jobs_ended_total", "state").items() if v}
    assert ended == summary["finished_by_state"]
    assert _sum(scrape, "slurmscope_jobs_pending") == summary["pending_at_end"]
    assert _sum(scrape, "slurmscope_jobs_running") == summary["running_at_end"]
    assert _sum(scrape, "slurmscope_gpus") == summary["gpus"]
    assert _sum(scrape, "slurmscope_sdiag_backfilled_jobs") == summary["backfilled"]
    requeues = sum(1 for e in demo_run.events() if e["type"] == "requeue")
    assert _sum(scrape, "slurmscope_job_requeues_total") == requeues


def test_gpu_seconds_counter_includes_running_allocations(demo_run, scrape):  # noqa: F811
    """Ground truth from events.jsonl: ended attempts' GPU-seconds plus running ones up to the end."""
    events = demo_run.events()
    gpus = {e["job"]: e["gpus"] for e in events if e["type"] == "submit"}
    started = {(e["job"], e["attempt"]): e for e in events if e["type"] == "start"}
    ended = {(e["job"], e["attempt"]): e for e in events if e["type"] == "end"}
    end = datetime.fromisoformat(demo_run.result.summary["end"])
    running = [e for k, e in started.items() if k not in ended]
    assert running, "the demo should end with running jobs"
    truth = sum(e["gpu_seconds"] for e in ended.values())
    truth += sum(gpus[e["job"]] * (end - datetime.fromisoformat(e["t"])).total_seconds() for e in running)
    assert _sum(scrape, "slurmscope_gpu_seconds_total") == pytest.approx(truth, abs=1)
