"""Faults the product must survive (issue 9): a full or read-only NVML spool, a full disk or a locked
database under `serve`.

Full and read-only file systems are real ones: a small tmpfs mounted for the test (full = filled by a
filler file; read-only = remounted `ro`), because chmod does not stop root. Where `mount` is not permitted
the tests skip and say so. Expected values come from an undisturbed run of the same fake GPUs on the same
clock, loaded through the same loader: a fault may delay records, never lose or double them.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from slurmscope.agent.agent import Agent
from slurmscope.agent.fake import fake_from_spec
from slurmscope.agent.http import _Collector
from slurmscope.collectors.nvml import SCHEMAS, ingest_spool_files

from slurmscope.config import load_config
from slurmscope.db import applied_versions, connect, migrations
from slurmscope.scheduler import Service
from slurmscope.spool import read_spool_bytes
from tests.dbhold import held
from tests.paths import FIXTURES

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z, hour aligned
FIXTURES = FIXTURES / "slurm-22.05"


# --------------------------------------------------------------------------------------------------
# a real small file system
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def tmpfs():
    """mount(path, size) -> path; every mount is lazily unmounted at teardown."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> Path:
        if shutil.which("mount") is None:
            pytest.skip("no mount binary: the full/read-only file system cannot be made for real")
        path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here ({res.stderr.strip()}); needs root")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount(path: Path, mode: str) -> None:
    res = subprocess.run(
        ["mount", "-o", f"remount,{mode}", str(path)], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        pytest.skip(f"remount {mode} not permitted: {res.stderr.strip()}")


def fill(directory: Path) -> Path:
    """Write a filler file until the file system says ENOSPC; return it (unlink it to free the space)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


# --------------------------------------------------------------------------------------------------
# NVML agent: spool directory full or read-only
# --------------------------------------------------------------------------------------------------


class Node:
    """Fake NVML (2 H100 under load) + agent on an injected clock; `run` ticks every 10 s.

    Hourly spool segments: these faults hit one long journal and the close that ends it.
    """

    def __init__(self, spool: Path, start: float = T0):
        self.t = [start]
        gpus = [{"model": "h100", "state": "load", "count": 2}]
        self.fake = fake_from_spec({"gpus": gpus, "start": T0}, clock=lambda: self.t[0], sleep=self.advance)
        self.spool = spool
        self.agent = Agent(
            self.fake,
            node="gpu01",
            spool_dir=spool,
            mapping_dir=None,
            interval=10,
            clock=lambda: self.t[0],
            sleep=self.advance,
            rotate_seconds=3600,
        )

    def advance(self, s: float) -> None:
        self.t[0] += s

    def run_until(self, end: float) -> None:
        while self.t[0] < end:
            self.agent.tick(self.t[0])
            self.t[0] += self.agent.interval

    def metric(self, name: str) -> float:
        from prometheus_client import CollectorRegistry, generate_latest

        reg = CollectorRegistry(auto_describe=False)
        reg.register(_Collector(self.agent))
        for line in generate_latest(reg).decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not in /metrics")


def loaded(files: list[Path], db: Path) -> dict[str, list[tuple]]:
    """What the central loader makes of spool files: the rows a user queries (partial minutes merged)."""
    cfg = load_config(None, env={})
    con = connect(db)
    try:
        results = ingest_spool_files(con, cfg, files)
        assert all(r.quarantined == 0 for r in results), results
        out = {}
        for table in ("gpu_samples", "gpu_events"):
            cols = ", ".join(SCHEMAS[table])
            out[table] = con.execute(f"SELECT {cols} FROM {table} ORDER BY ALL").fetchall()  # noqa: S608
        return out
    finally:
        con.close()


def closed_files(spool: Path) -> list[Path]:
    files = sorted(p for p in spool.glob("*.jsonl") if not p.name.startswith("."))
    for p in files:
        content = read_spool_bytes(p.read_bytes())
        assert content.problem is None and not content.bad_lines, (p, content.problem)
    return files


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_spool_full_agent_keeps_running_reports_and_loses_nothing(tmp_path, tmpfs):
    end = T0 + 4500  # 75 minutes: crosses the hourly file close
    ref = Node(tmp_path / "ref")
    ref.run_until(end)
    ref.agent.close(ref.t[0])
    expected = loaded(closed_files(ref.spool), tmp_path / "ref.duckdb")
    assert len(expected["gpu_samples"]) == 2 * 75

    spool = tmpfs(tmp_path / "spool", "1m")
    node = Node(spool)
    node.run_until(T0 + 3000)  # 50 minutes spooled into the journal
    journal = node.agent.journal.path
    before = journal.read_bytes()
    assert node.metric("slurmscope_agent_spool_write_errors_total") == 0

    filler = fill(spool)
    ticks = node.agent.stats["ticks"]
    node.run_until(T0 + 4200)  # 20 minutes with the disk full, hour close included
    assert node.agent.stats["ticks"] == ticks + 120  # it kept sampling every round
    assert node.agent.stats["spool_write_errors"] > 0
    assert node.metric("slurmscope_agent_spool_write_errors_total") > 0
    assert node.metric("slurmscope_agent_spool_pending_records") > 0
    # what was spooled before the disk filled is still there, byte for byte, and nothing half-written
    assert journal.read_bytes()[: len(before)] == before
    assert journal.read_bytes().endswith(b"\n")
    assert not list(spool.glob(".tmp-*")) and not closed_files(spool)

    filler.unlink()  # space comes back: the held records go out
    node.run_until(end)
    assert node.metric("slurmscope_agent_spool_pending_records") == 0
    node.agent.close(node.t[0])
    assert loaded(closed_files(spool), tmp_path / "got.duckdb") == expected


def test_spool_read_only_agent_keeps_running_and_spooled_files_survive(tmp_path, tmpfs):
    # a previous run's closed file is waiting for the central loader
    prev = Node(tmp_path / "prev", start=T0 - 600)
    prev.run_until(T0)
    prev.agent.close(T0)
    (old,) = closed_files(prev.spool)

    end = T0 + 900
    ref = Node(tmp_path / "ref")
    ref.run_until(end)
    ref.agent.close(ref.t[0])
    expected = loaded([old, *closed_files(ref.spool)], tmp_path / "ref.duckdb")

    spool = tmpfs(tmp_path / "spool", "1m")
    shutil.copy2(old, spool / old.name)
    digest = sha(spool / old.name)
    remount(spool, "ro")
    node = Node(spool)
    assert node.agent.recover() == []
    node.run_until(T0 + 600)  # 10 minutes on a read-only spool
    assert node.agent.stats["ticks"] == 60
    assert node.agent.stats["spool_write_errors"] >= 60
    assert node.metric("slurmscope_agent_spool_write_errors_total") >= 60
    assert node.metric("slurmscope_agent_spool_pending_records") >= 2 * 10
    assert node.metric("slurmscope_agent_spool_files") == 1  # the old file is still listed
    assert sha(spool / old.name) == digest

    remount(spool, "rw")
    node.run_until(end)
    node.agent.close(node.t[0])
    files = closed_files(spool)
    assert sha(spool / old.name) == digest and len(files) == 2
    assert loaded(files, tmp_path / "got.duckdb") == expected


# --------------------------------------------------------------------------------------------------
# serve: a locked database, a full disk
# --------------------------------------------------------------------------------------------------


def serve_config(tmp_path: Path):
    """Config whose `sinfo` prints the real 22.05 capture (the only collector these tests run)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sinfo = bin_dir / "sinfo"
    sinfo.write_text(f"#!/bin/sh\nexec cat '{FIXTURES / 'sinfo_final.txt'}'\n")
    sinfo.chmod(0o755)
    return load_config(None, env={}).with_overrides(slurm={"bin_dir": str(bin_dir), "timeout_seconds": 10.0})


def expected_nodes() -> int:
    """Node rows the capture holds: one per line (sinfo --Node prints a node once per partition)."""
    return len([ln for ln in (FIXTURES / "sinfo_final.txt").read_text().splitlines() if ln.strip()])


def crashes(caplog, kind: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "slurmscope.serve" and r.getMessage() == f"collector {kind} of default crashed"
    ]


def test_serve_job_fails_cleanly_while_another_process_holds_the_database(tmp_path, caplog):
    db = tmp_path / "s.duckdb"
    connect(db).close()
    # a job waits for the holder, then fails: a second here, not the default 30
    service = Service(config=serve_config(tmp_path), db_path=str(db), lock_wait_seconds=1.0)
    with held(db):
        caplog.set_level(logging.INFO, logger="slurmscope.serve")
        service.run_collector("sinfo")  # must return, not raise, not hang
        (rec,) = crashes(caplog, "sinfo")
        assert rec.exc_info and "lock" in str(rec.exc_info[1]).lower()
        assert service.metrics == b"" and not service.dirty
        service.dirty = {"default"}
        service.run_pipelines()  # also refused; stays due for the next slot
        assert service.dirty == {"default"}
        assert any(r.getMessage() == "pipelines of default failed" for r in caplog.records)
    caplog.clear()
    service.dirty = set()
    service.run_collector("sinfo")  # the lock is gone: the next slot just works
    assert not crashes(caplog, "sinfo")
    assert b"slurmscope_" in service.metrics and service.dirty == {"default"}
    con = connect(db, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM node_states").fetchone()[0] == expected_nodes()
    finally:
        con.close()


def test_serve_and_ingest_on_a_full_disk_fail_clearly_and_corrupt_nothing(tmp_path, tmpfs, caplog):
    from click.testing import CliRunner

    from slurmscope.cli import main

    disk = tmpfs(tmp_path / "disk", "16m")
    db = disk / "s.duckdb"
    service = Service(config=serve_config(tmp_path), db_path=str(db))
    caplog.set_level(logging.INFO, logger="slurmscope.serve")
    service.run_collector("sinfo")  # prior data
    assert not crashes(caplog, "sinfo")
    nodes = expected_nodes()

    filler = fill(disk)
    caplog.clear()
    service.run_collector("sinfo")  # returns; the job's outcome names the cause
    said = [
        r.getMessage() + str(r.exc_info[1] if r.exc_info else "")
        for r in caplog.records
        if r.name == "slurmscope.serve"
    ]
    assert any(m.startswith("collector sinfo") and "No space left on device" in m for m in said), said

    # the CLI ingest of a new day on the same full disk: an error exit naming the cause
    day = tmp_path / "sacct.txt"
    day.write_bytes(sacct_lines(1_000_000, 20_000))
    result = CliRunner().invoke(main, ["--db", str(db), "ingest", "sacct", str(day)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "Error: ingest failed" in result.output and "No space left on device" in result.output

    # still full: a reader opens it, with every migration and the prior rows
    con = connect(db, read_only=True)
    try:
        assert applied_versions(con) == [m.version for m in migrations()]
        assert con.execute("SELECT count(*) FROM node_states").fetchone()[0] == nodes
        assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    finally:
        con.close()

    filler.unlink()
    caplog.clear()
    service.run_collector("sinfo")  # space back: the next slot succeeds
    assert not crashes(caplog, "sinfo")
    result = CliRunner().invoke(main, ["--db", str(db), "ingest", "sacct", str(day)])
    assert result.exit_code == 0, result.output
    con = connect(db, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM node_states").fetchone()[0] == 2 * nodes
        assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 20_000
    finally:
        con.close()


def sacct_lines(first_id: int, n: int) -> bytes:
    """n completed one-hour GPU jobs in the live sacct format (header + unit-separated fields)."""
    from slurmscope.collectors.sacct import LIVE_FIELDS

    names = LIVE_FIELDS.split(",")
    rows = ["\x1f".join(names)]
    for i in range(first_id, first_id + n):
        v = {
            "JobID": str(i),
            "JobIDRaw": str(i),
            "Cluster": "c",
            "Partition": "gpu",
            "QOS": "normal",
            "Account": "ml",
            "User": f"u{i % 50}",
            "UID": str(1000 + i % 50),
            "Submit": "2026-11-01T00:00:00",
            "Eligible": "2026-11-01T00:00:00",
            "Start": "2026-11-01T00:01:00",
            "End": "2026-11-01T01:01:00",
            "Elapsed": "01:00:00",
            "Timelimit": "02:00:00",
            "State": "COMPLETED",
            "ExitCode": "0:0",
            "NNodes": "1",
            "NCPUS": "8",
            "ReqMem": "16G",
            "AllocTRES": "cpu=8,gres/gpu=2,mem=16G,node=1",
            "NodeList": f"g{i % 100:03d}",
            "Flags": "SchedMain",
            "Priority": "1000",
            "Reason": "None",
            "JobName": f"train-{uuid.UUID(int=i).hex[:8]}",
        }
        rows.append("\x1f".join(v.get(k, "") for k in names))
    return ("\n".join(rows) + "\n").encode()


AGENT = (
    "import logging, sys; logging.basicConfig(level=logging.INFO); from slurmscope.config import load_config;"
    " from slurmscope.agent.agent import run_agent; run_agent(load_config(None, env={}), port=0,"
    " spool=sys.argv[1], interval=1, fake=sys.argv[2], address='127.0.0.1', node='gpu01',"
    " kmsg_path=sys.argv[3], flush_seconds=1)"
)


@pytest.mark.slow  # starts two real agent processes (~15-30 s on a loaded 2-core machine)
def test_agent_process_starts_on_a_read_only_spool_with_a_journal_left_behind(tmp_path, tmpfs):
    import json
    import signal

    from slurmscope.agent.spool import SpoolJournal

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"gpus": [{"model": "h100", "state": "load", "count": 2}]}))
    spool = tmpfs(tmp_path / "spool", "1m")
    killed = SpoolJournal(spool, "gpu01")  # what a SIGKILLed agent leaves: an open journal
    killed.open(T0)
    left = Node(tmp_path / "src").agent
    assert left._init(T0)
    records = left.inventory_records(T0)
    assert len(records) == 2
    killed.append(records)
    killed._fh.close()
    journal_bytes = killed.path.read_bytes()
    remount(spool, "ro")

    def start(log: Path):
        return subprocess.Popen(
            [sys.executable, "-c", AGENT, str(spool), str(spec), str(tmp_path / "no-kmsg")],
            cwd=tmp_path,
            stderr=log.open("w"),
        )

    def wait_for(pred) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not pred():
            time.sleep(0.1)

    def stop(proc, log: Path) -> str:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
        return log.read_text()

    log_a = tmp_path / "a.log"
    a = start(log_a)
    try:
        wait_for(lambda: log_a.read_text().count("agent on") and a.poll() is None)
        time.sleep(3)  # a few sampling rounds on the read-only spool
        assert a.poll() is None, log_a.read_text()  # still running
    finally:
        err = stop(a, log_a)
    assert "cannot close the spool journals" in err and "cannot write the spool" in err
    assert killed.path.read_bytes() == journal_bytes  # untouched, waiting for a writable start

    remount(spool, "rw")
    log_b = tmp_path / "b.log"
    b = start(log_b)
    try:
        wait_for(lambda: not killed.path.exists())
        time.sleep(2)
    finally:
        stop(b, log_b)
    files = closed_files(spool)
    assert not killed.path.exists() and len(files) >= 2  # the recovered journal + this run's file
    recovered = read_spool_bytes((spool / killed.name).read_bytes())
    assert [r for _, r in recovered.records] == records


def test_stop_on_a_full_spool_keeps_the_journal_for_the_next_start(tmp_path, tmpfs):
    from slurmscope.agent.spool import SpoolJournal

    spool = tmpfs(tmp_path / "spool", "1m")
    node = Node(spool)
    node.run_until(T0 + 600)
    written = list(node.agent.journal.records)  # everything appended (and fsynced) so far
    # ticks at T0 .. T0+590: minutes 0-8 are complete (minute 9 closes at the T0+600 tick): 2 GPUs x 9
    assert len([r for r in written if r["type"] == "sample"]) == 2 * 9
    journal = node.agent.journal.path
    filler = fill(spool)
    node.run_until(T0 + 900)
    assert node.agent.close(node.t[0]) is None  # a graceful stop on a full disk: logged, not raised
    assert journal.exists() and not closed_files(spool)
    filler.unlink()
    (out,) = SpoolJournal.recover(spool)  # what the next start does
    assert [r for _, r in read_spool_bytes(out.read_bytes()).records] == written
