"""`serve` with several clusters: each cluster has its own collector, pipeline and report jobs, run with its
own settings, under the one write lock; the report layout per cluster; what runs after new rows."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from slurmscope.collectors.registry import active

from slurmscope.config import load_config
from slurmscope.scheduler import Service, build_scheduler
from tests.collectors.test_collect_clusters import site  # noqa: F401  (the two-cluster fake site)

TWO = """\
[slurm]
timeout_seconds = 7

[[clusters]]
name = "alpha"
[clusters.slurm]
conf = "/etc/slurm-alpha/slurm.conf"

[[clusters]]
name = "beta"
[clusters.slurm]
cluster_flag = true
source = "rest"
rest_url = "http://beta-rest:6820"
"""


def _jobs(service: Service, intervals=None) -> dict:
    sched = build_scheduler(service, intervals)
    sched.start(paused=True)
    try:
        return {j.id: j for j in sched.get_jobs()}
    finally:
        sched.shutdown(wait=False)


def test_each_cluster_has_its_collectors_pipelines_and_report(tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    cfg = load_config(tmp_path / "s.toml", env={})
    jobs = _jobs(Service(cfg, str(tmp_path / "x.duckdb")))
    cli = {c.kind for c in active("cli")}
    rest = {c.kind for c in active("rest")}
    # alpha reads Slurm through its own slurm.conf: every CLI collector, ping included.
    # beta is reached by -M through slurmdbd and reads jobs from slurmrestd: no ping (scontrol ping asks
    # the local slurm.conf's controllers), sacct_rest instead of sacct.
    want = {f"collect-{k}@alpha" for k in cli} | {f"collect-{k}@beta" for k in rest - {"ping"}}
    assert {j for j in jobs if j.startswith("collect-")} == want
    for cluster in ("alpha", "beta"):
        for base in ("pipelines-incremental", "pipelines-full", "report-monthly"):
            assert jobs[f"{base}@{cluster}"].kwargs["cluster"] == cluster
    assert jobs["collect-sacct@alpha"].args == ("sacct",)
    assert jobs["collect-sacct@alpha"].kwargs == {"cluster": "alpha"}
    assert jobs["collect-sacct_rest@beta"].trigger.interval.total_seconds() == 300
    assert jobs["pipelines-full@beta"].kwargs == {"full": True, "cluster": "beta"}


def test_a_cluster_job_runs_with_that_cluster_s_settings(tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    service = Service(load_config(tmp_path / "s.toml", env={}), str(tmp_path / "x.duckdb"))
    alpha, beta = service.cluster_config("alpha"), service.cluster_config("beta")
    assert (alpha.cluster, alpha.get("slurm", "conf"), alpha.get("slurm", "source")) == (
        "alpha",
        "/etc/slurm-alpha/slurm.conf",
        "cli",
    )
    assert (beta.cluster, beta.get("slurm", "conf"), beta.get("slurm", "rest_url")) == (
        "beta",
        "",
        "http://beta-rest:6820",
    )
    assert alpha.get("slurm", "timeout_seconds") == beta.get("slurm", "timeout_seconds") == 7
    assert service.cluster_config(None).cluster == "alpha"  # the first listed is the default


def test_one_cluster_keeps_the_job_ids_and_report_layout_it_always_had(tmp_path):
    service = Service(load_config(env={}), str(tmp_path / "x.duckdb"), report_dir=tmp_path)
    jobs = _jobs(service, {"sacct": 300})
    assert {"collect-sacct", "pipelines-incremental", "pipelines-full", "report-monthly"} <= set(jobs)
    assert service.report_path("2026-11", "default") == tmp_path / "2026-11"


def test_several_clusters_report_under_month_then_cluster(tmp_path):
    (tmp_path / "s.toml").write_text(TWO)
    service = Service(load_config(tmp_path / "s.toml", env={}), ":memory:", report_dir=tmp_path)
    assert service.report_path("2026-11", "beta") == tmp_path / "2026-11" / "beta"


def test_new_rows_run_the_pipelines_of_that_cluster_only(tmp_path, monkeypatch):
    from slurmscope.pipelines import runner

    (tmp_path / "s.toml").write_text(TWO)
    service = Service(load_config(tmp_path / "s.toml", env={}), str(tmp_path / "x.duckdb"))
    ran = []
    monkeypatch.setattr(runner, "run_pipelines", lambda con, cfg, **kw: ran.append(cfg.cluster) or {})
    service.dirty.add("beta")
    service.run_pipelines(cluster="alpha")  # nothing new for alpha
    service.run_pipelines(cluster="beta")
    service.run_pipelines(cluster="beta")  # done: beta is clean again
    assert ran == ["beta"]
    service.run_pipelines(full=True, cluster="alpha")  # the nightly full rebuild runs, new rows or not
    assert ran == ["beta", "alpha"]


def test_missed_report_is_per_cluster(tmp_path):
    """alpha has collected since October, beta was added in November: only alpha's October report is due."""
    from slurmscope.db import connect

    (tmp_path / "s.toml").write_text(TWO)
    db = tmp_path / "x.duckdb"
    con = connect(db)
    con.execute(
        "INSERT INTO collector_runs (cluster, collector, started_at, status) VALUES"
        " ('alpha', 'sacct', '2026-10-20 00:00+00', 'ok'), ('beta', 'sacct', '2026-11-02 00:00+00', 'ok')"
    )
    con.close()
    now = datetime(2026, 11, 3, 10, tzinfo=timezone.utc)
    service = Service(
        load_config(tmp_path / "s.toml", env={}), str(db), clock=lambda: now, report_dir=tmp_path
    )
    assert service.missed_report_month("alpha") == "2026-10"
    assert service.missed_report_month("beta") is None
    jobs = _jobs(service, {"sacct": 300})
    assert jobs["report-catch-up@alpha"].args == ("2026-10",)
    assert "report-catch-up@beta" not in jobs


@pytest.mark.slow
def test_serve_collects_both_clusters_and_serves_both_in_one_metrics_body(site):  # noqa: F811 - the fixture
    """A real `serve` on the two-cluster site of tests/collectors/test_collect_clusters.py (a fake client
    answering per cluster with the 22.05 captures): both clusters' collectors run and /metrics has both."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    tmp_path, config, _log = site
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config.write_text(f"[exporter]\nport = {port}\n" + config.read_text())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurmscope.cli",
            "--config",
            str(config),
            "--db",
            str(tmp_path / "s.duckdb"),
            "serve",
        ],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    want = [
        f'slurmscope_collector_success{{cluster="{c}",collector="{k}"}} 1.0'
        for c in ("alpha", "beta")
        for k in ("sinfo", "sacct", "sshare")
    ]
    body = ""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read().decode()
                if all(w in body for w in want):
                    break
            except OSError:
                pass
            time.sleep(1)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    missing = [w for w in want if w not in body]
    assert not missing, missing
    assert 'slurmscope_controller_up{cluster="alpha"' in body
    assert 'slurmscope_controller_up{cluster="beta"' not in body  # no ping for a cluster reached by -M
    assert 'slurmscope_nodes{cluster="alpha"' in body and 'slurmscope_nodes{cluster="beta"' in body
