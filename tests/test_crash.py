"""kill -9 at random points during ingest, collect and pipelines: the database opens, its migrations are
intact, and re-running yields exactly the state of an uninterrupted run (nothing lost, nothing doubled)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmscope.db import applied_versions, connect, migrations

FIX = Path(__file__).parent / "fixtures"
XDMOD_FORMAT = ("jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,"
                "elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname")
SLURMSCOPE = [sys.executable, "-m", "slurmscope.cli"]
# Tables whose content must not depend on how often a run was interrupted (load-time columns excluded).
STATE_TABLES = {
    "jobs": "SELECT * EXCLUDE (ingested_at) FROM jobs ORDER BY cluster, job_id_raw, submit_time",
    "job_steps": "SELECT * EXCLUDE (ingested_at) FROM job_steps ORDER BY ALL",
    "quarantine": "SELECT * EXCLUDE (ingested_at) FROM quarantine ORDER BY ALL",
}


def state_digest(db: Path, tables: dict[str, str]) -> dict[str, tuple[int, str]]:
    con = connect(db, read_only=True)
    try:
        out = {}
        for name, sql in tables.items():
            rows = con.execute(sql).fetchall()
            out[name] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        return out
    finally:
        con.close()


def run(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.monotonic()
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    return time.monotonic() - t0


def kill_at(cmd: list[str], env: dict[str, str], delay: float) -> bool:
    """Start cmd, SIGKILL it after `delay` seconds; True if it was killed before finishing."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def assert_intact(db: Path) -> None:
    """The database opens read-only and its recorded migrations are a gap-free prefix of the shipped ones
    (a kill during migration leaves the last one wholly applied or wholly absent)."""
    con = connect(db, read_only=True)
    try:
        applied = applied_versions(con)
        shipped = [m.version for m in migrations()]
        assert applied == shipped[: len(applied)]
    finally:
        con.close()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURMSCOPE_")}


@pytest.mark.slow
def test_kill_during_ingest_then_rerun_equals_uninterrupted(tmp_path):
    env = _env()
    src = FIX / "xdmod" / "pozidriv.log"
    ref = tmp_path / "ref.duckdb"
    cmd = lambda db: [*SLURMSCOPE, "--db", str(db), "--cluster", "c", "ingest", "sacct", str(src),  # noqa: E731
                      "--format", XDMOD_FORMAT]
    duration = run(cmd(ref), env)
    expected = state_digest(ref, STATE_TABLES)
    assert expected["jobs"][0] == 11704
    rng = random.Random(20261202)
    killed = 0
    for i in range(8):
        db = tmp_path / f"k{i}.duckdb"
        if i % 2:  # half of the points hit a database that already holds an earlier complete run
            shutil.copy(ref, db)
        killed += kill_at(cmd(db), env, rng.uniform(0.05, duration))
        if db.exists():
            assert_intact(db)
        run(cmd(db), env)
        assert state_digest(db, STATE_TABLES) == expected, f"kill point {i}"
    assert killed >= 4, "the kill points should mostly land inside the run"
