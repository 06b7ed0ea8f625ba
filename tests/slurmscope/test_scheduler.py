"""`slurmscope serve`: scheduled collectors, /metrics, readers alongside, a hung command cut, clean SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest
from slurmscope.collectors.registry import active

from slurmscope.config import load_config
from slurmscope.scheduler import MISFIRE_GRACE_SECONDS, Service, build_scheduler
from tests.dbhold import held

SLURMSCOPE = [sys.executable, "-m", "slurmscope.cli"]


def test_scheduler_jobs_are_single_instance_coalesced_utc(tmp_path):
    service = Service(config=load_config(env={}), db_path=str(tmp_path / "x.duckdb"))
    sched = build_scheduler(service)
    sched.start(paused=True)  # job defaults are applied when the scheduler adds the pending jobs
    jobs = {j.id: j for j in sched.get_jobs()}
    sched.shutdown(wait=False)
    assert {f"collect-{c.kind}" for c in active(service.config.get("slurm", "source"))} <= set(jobs)
    assert {"pipelines-incremental", "pipelines-full", "report-monthly"} <= set(jobs)
    for j in jobs.values():
        assert j.max_instances == 1 and j.coalesce is True and j.misfire_grace_time == MISFIRE_GRACE_SECONDS
    assert sched.timezone == timezone.utc
    assert jobs["collect-sinfo"].trigger.interval.total_seconds() == 60
    assert jobs["collect-sacct"].trigger.interval.total_seconds() == 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_slurm(bin_dir: Path) -> None:
    """Every Slurm command answers instantly with nothing, except sinfo, which hangs."""
    bin_dir.mkdir()
    for name in ("sacct", "squeue", "sshare", "sdiag", "sacctmgr", "scontrol"):
        p = bin_dir / name
        p.write_text("#!/bin/sh\nexit 0\n")
        p.chmod(0o755)
    p = bin_dir / "sinfo"
    p.write_text("#!/bin/sh\nexec sleep 600\n")
    p.chmod(0o755)


def _query(env, cfg: Path, db: Path, sql: str) -> str:
    out = subprocess.run(
        [*SLURMSCOPE, "--config", str(cfg), "--db", str(db), "query", sql, "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_serve_runs_collectors_serves_metrics_lets_readers_in_and_stops_on_sigterm(tmp_path):
    _fake_slurm(tmp_path / "bin")
    port = _free_port()
    cfg = tmp_path / "slurmscope.toml"
    cfg.write_text(
        f'[cluster]\nname = "t"\n[slurm]\nbin_dir = "{tmp_path / "bin"}"\ntimeout_seconds = 2\n'
        f"[exporter]\nport = {port}\n"
    )
    db = tmp_path / "s.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMSCOPE_")}
    proc = subprocess.Popen(
        [*SLURMSCOPE, "--config", str(cfg), "--db", str(db), "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body = r.read()
                if b"slurmscope_collector_success" in body:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert b"slurmscope_collector_success" in body
        # the hung sinfo is cut by its 2 s timeout and the other collectors still run
        deadline = time.monotonic() + 90
        rows = ""
        while time.monotonic() < deadline:
            rows = _query(env, cfg, db, "SELECT collector, status, error FROM collector_runs ORDER BY run_id")
            if "sinfo,timeout" in rows and "sdiag,ok" in rows and "squeue,ok" in rows:
                break
            time.sleep(1)
        assert "sinfo,timeout" in rows, rows  # with each run's error: what failed says why
        assert "sdiag,ok" in rows and "squeue,ok" in rows, rows
        status = subprocess.run(
            [*SLURMSCOPE, "--config", str(cfg), "--db", str(db), "status", "--format", "csv"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert status.returncode == 0 and "sinfo,timeout" in status.stdout, status.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err[-3000:]
    assert "stopped" in err


def test_fair_lock_serves_waiters_in_arrival_order():
    import threading

    from slurmscope.scheduler import FairLock

    lock, order, started = FairLock(), [], []

    def job(name: str) -> None:
        started.append(name)
        with lock:
            order.append(name)

    with lock:  # hold it while three jobs queue up, one after the other
        threads = []
        for name in ("sdiag", "sinfo", "squeue"):
            t = threading.Thread(target=job, args=(name,))
            t.start()
            while len(started) < len(threads) + 1:
                time.sleep(0.01)
            time.sleep(0.05)  # let it reach the wait
            threads.append(t)
    for t in threads:
        t.join(5)
    assert order == ["sdiag", "sinfo", "squeue"]


def test_a_hanging_slurm_command_does_not_hold_the_write_lock(tmp_path):
    """While sinfo hangs until its timeout, another job gets the database at once, and sinfo's failure
    is still recorded afterwards."""
    import threading

    from slurmscope.db import connect

    _fake_slurm(tmp_path / "bin")
    cfg = load_config(env={}).with_overrides(
        cluster={"name": "t"}, slurm={"bin_dir": str(tmp_path / "bin"), "timeout_seconds": 8}
    )
    service = Service(cfg, str(tmp_path / "db.duckdb"))
    service.with_db(lambda con: None)  # create and migrate the database
    collector = threading.Thread(target=service.run_collector, args=("sinfo",))
    collector.start()
    time.sleep(1.0)  # sinfo is now running (it sleeps far past the 8 s timeout)
    service.with_db(lambda con: con.execute("SELECT 1").fetchone())
    # Had the collector held the lock, this job would only have run after sinfo's timeout and load.
    assert collector.is_alive()
    collector.join(60)
    con = connect(tmp_path / "db.duckdb", read_only=True)
    try:
        status, error = con.execute(
            "SELECT status, error FROM collector_runs WHERE collector = 'sinfo'"
        ).fetchone()
    finally:
        con.close()
    assert status == "timeout" and "timed out after 8 s" in error


def test_a_hanging_nvml_agent_does_not_hold_the_write_lock(tmp_path):
    """An agent that accepts the connection and never answers: its pull waits out the timeout while
    another job gets the database at once, and the failure is recorded afterwards."""
    import threading

    from slurmscope.db import connect

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
    try:
        cfg = load_config(env={}).with_overrides(
            cluster={"name": "t"},
            slurm={"timeout_seconds": 8},
            nvml={"agents": [f"http://127.0.0.1:{silent.getsockname()[1]}"]},
        )
        service = Service(cfg, str(tmp_path / "db.duckdb"))
        service.with_db(lambda con: None)  # create and migrate the database
        collector = threading.Thread(target=service.run_collector, args=("nvml",))
        collector.start()
        time.sleep(1.0)  # the pull is now waiting for the agent's answer
        t0 = time.monotonic()
        service.with_db(lambda con: con.execute("SELECT 1").fetchone())
        assert time.monotonic() - t0 < 5 and collector.is_alive()
        collector.join(60)
    finally:
        silent.close()
    con = connect(tmp_path / "db.duckdb", read_only=True)
    try:
        status, error = con.execute(
            "SELECT status, error FROM collector_runs WHERE collector = 'nvml'"
        ).fetchone()
    finally:
        con.close()
    assert status == "timeout" and "timed out" in error


def _store(path: Path, first_run: str, cluster: str = "default") -> None:
    """A database whose first collector run of `cluster` started at `first_run` (UTC)."""
    from slurmscope.db import connect

    con = connect(path)
    con.execute(
        "INSERT INTO collector_runs (cluster, collector, started_at, status) VALUES (?, 'sacct', ?, 'ok')",
        [cluster, datetime.fromisoformat(first_run).replace(tzinfo=timezone.utc)],
    )
    con.close()


def _at(iso: str):
    t = datetime.fromisoformat(iso).replace(tzinfo=timezone.utc)
    return lambda: t


@pytest.mark.parametrize(
    ("first_run", "now", "missed"),
    [
        ("2026-10-20T00:00", "2026-11-03T10:00", "2026-10"),  # down over 1 Nov 04:00: October is made
        ("2026-09-15T00:00", "2026-11-01T03:00", "2026-09"),  # November's not due yet; October's run, 1 Oct
        ("2026-11-02T00:00", "2026-11-03T10:00", None),  # installed after it fell due: nothing to report
        ("2026-10-20T00:00", "2026-11-01T04:00:20", None),  # within the misfire grace the cron runs it
        ("2026-12-20T00:00", "2027-01-05T00:00", "2026-12"),  # across the year
    ],
)
def test_missed_monthly_report_is_the_latest_due_one_collected_for(tmp_path, first_run, now, missed):
    _store(tmp_path / "db.duckdb", first_run)
    service = Service(load_config(env={}), str(tmp_path / "db.duckdb"), clock=_at(now), report_dir=tmp_path)
    assert service.missed_report_month() == missed


def test_missed_monthly_report_is_made_at_start_and_not_again(demo_run, tmp_path):
    """The demo's November, with serve collecting since 20 November and down over 1 December 04:00."""
    import shutil

    db = tmp_path / "db.duckdb"
    shutil.copyfile(demo_run.db_path, db)
    _store(db, "2026-11-20T00:00", "simcluster")
    cfg = load_config(env={}).with_overrides(cluster={"name": "simcluster"})
    reports = tmp_path / "reports"
    service = Service(cfg, str(db), clock=_at("2026-12-05T10:00"), report_dir=reports)
    sched = build_scheduler(service, {"sacct": 300})
    job = sched.get_job("report-catch-up")
    assert job is not None and job.args == ("2026-11",)
    job.func(*job.args)
    assert (reports / "2026-11" / "report.html").is_file()
    assert service.missed_report_month() is None
    assert build_scheduler(service, {"sacct": 300}).get_job("report-catch-up") is None


def test_no_catch_up_without_a_database(tmp_path):
    service = Service(load_config(env={}), str(tmp_path / "none.duckdb"), clock=_at("2026-11-03T10:00"))
    assert service.missed_report_month() is None
    assert not (tmp_path / "none.duckdb").exists()


def test_retention_runs_on_its_interval_one_turn_at_the_lock_per_step(tmp_path):
    from datetime import UTC, datetime

    from slurmscope.db import connect

    off = load_config(env={}).with_overrides(retention={"gpu_minutes_days": 0, "run_log_days": 0})
    assert (
        build_scheduler(Service(config=off, db_path=str(tmp_path / "x.duckdb")), {"sacct": 300}).get_job(
            "retention"
        )
        is None
    )
    cfg = load_config(env={}).with_overrides(cluster={"name": "c"}, retention={"interval_seconds": 600})
    db = tmp_path / "r.duckdb"
    con = connect(db)
    con.execute(  # three days of minutes for one GPU, 40 days old
        "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, samples, energy_joules)"
        " SELECT 'c', 'n', 'g', TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_minutes(m), 6, 60.0 FROM range(3 * 1440) t(m)"
    )
    con.close()
    service = Service(config=cfg, db_path=str(db), clock=lambda: datetime(2026, 2, 10, tzinfo=UTC))
    job = build_scheduler(service, {"sacct": 300}).get_job("retention")
    assert job.trigger.interval.total_seconds() == 600
    turns = []
    with_db = service.with_db
    service.with_db = lambda fn, **kw: turns.append(1) or with_db(fn, **kw)
    service.run_retention()
    # the plan, one turn per hour rolled up, and the checkpoint: collectors take the lock in between
    assert len(turns) == 1 + 3 * 24 + 1
    con = connect(db, read_only=True)
    assert con.execute("SELECT count(*), sum(minutes) FROM gpu_samples_hourly").fetchone() == (72, 3 * 1440)
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 0
    con.close()


def test_a_reader_holding_the_file_delays_a_collector_instead_of_losing_its_snapshot(tmp_path):
    """DuckDB refuses a writer while another process reads the file; serve's job waits for the reader."""
    from slurmscope.db import connect

    db = tmp_path / "r.duckdb"
    connect(db).close()
    with held(db, read_only=True, seconds=1.5):
        service = Service(load_config(env={}), str(db))
        service.with_db(lambda con: con.execute("CREATE TABLE written AS SELECT 1 AS x"))
    con = connect(db, read_only=True)
    assert con.execute("SELECT x FROM written").fetchall() == [(1,)]
    con.close()
