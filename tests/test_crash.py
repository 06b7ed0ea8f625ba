"""kill -9 at random points during ingest, collect and pipelines: the database opens, its migrations are
intact, and re-running yields exactly the state of an uninterrupted run (nothing lost, nothing doubled)."""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmscope.db import applied_versions, connect, migrations
from tests.paths import FAKES, FIXTURES

FIX = FIXTURES
XDMOD_FORMAT = (
    "jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,"
    "elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname"
)
SLURMSCOPE = [sys.executable, "-m", "slurmscope.cli"]
# Tables whose content must not depend on how often a run was interrupted (load-time columns excluded).
STATE_TABLES = {
    "jobs": "SELECT * EXCLUDE (ingested_at) FROM jobs ORDER BY cluster, job_id_raw, submit_time",
    "job_steps": "SELECT * EXCLUDE (ingested_at) FROM job_steps ORDER BY ALL",
    "quarantine": "SELECT * EXCLUDE (ingested_at) FROM quarantine ORDER BY ALL",
}


class State(dict):
    """Rows per table; equal when every row matches, floats to 1e-9 relative (parallel aggregation may
    add in another order from one run to the next, which changes the last bits and nothing else)."""

    def same_table(self, other: State, table: str) -> bool:
        a, b = self[table], other[table]
        return len(a) == len(b) and all(_same_row(x, y) for x, y in zip(a, b, strict=True))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, State)
            and self.keys() == other.keys()
            and all(self.same_table(other, t) for t in self)
        )

    __hash__ = None

    def count(self, table: str) -> int:
        return len(self[table])


def _same_row(x: tuple, y: tuple) -> bool:
    return len(x) == len(y) and all(
        math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-300)
        if isinstance(u, float) and isinstance(v, float)
        else u == v
        for u, v in zip(x, y, strict=True)
    )


def state_digest(db: Path, tables: dict[str, str]) -> State:
    con = connect(db, read_only=True)
    try:
        return State({name: con.execute(sql).fetchall() for name, sql in tables.items()})
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

    def cmd(db):
        return [
            *SLURMSCOPE,
            "--db",
            str(db),
            "--cluster",
            "c",
            "ingest",
            "sacct",
            str(src),  # noqa: E731
            "--format",
            XDMOD_FORMAT,
        ]

    duration = run(cmd(ref), env)
    expected = state_digest(ref, STATE_TABLES)
    assert expected.count("jobs") == 11704
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


FAKES = FAKES
NOW = "2026-12-01T00:00:00"


def _mart_tables(db: Path) -> dict[str, str]:
    """Every mart, ordered by all columns; bookkeeping columns that hold the wall clock are left out."""
    con = connect(db, read_only=True)
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'mart_%' ORDER BY 1"
            ).fetchall()
        ]
        out = {}
        for t in tables:
            cols = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                    [t],
                ).fetchall()
            ]
            keep = ", ".join(f'"{c}"' for c in cols if c not in {"updated_at", "issued_at", "computed_at"})
            out[t] = f"SELECT {keep} FROM {t} ORDER BY ALL"
        return out
    finally:
        con.close()


@pytest.mark.slow
def test_kill_during_pipelines_then_rerun_equals_uninterrupted(tmp_path):
    """Each mart is written in one transaction: after a kill, a mart holds the old or the new rows, never a
    mix, and a rerun gives exactly the uninterrupted result."""
    env = _env()
    src = FIX / "xdmod" / "pozidriv.log"
    base = tmp_path / "base.duckdb"
    run([*SLURMSCOPE, "--db", str(base), "ingest", "sacct", str(src), "--format", XDMOD_FORMAT], env)

    def cmd(db):
        return [
            *SLURMSCOPE,
            "--db",
            str(db),
            "--cluster",
            "pozidriv",
            "pipelines",
            "run",
            "--full",
            "--now",
            NOW,
        ]

    ref = tmp_path / "ref.duckdb"
    shutil.copy(base, ref)
    duration = run(cmd(ref), env)
    tables = _mart_tables(ref)
    expected = state_digest(ref, tables)
    assert expected.count("mart_job_outcomes_daily") > 0
    empty = state_digest(base, tables)
    rng = random.Random(7)
    killed = 0
    for i in range(6):
        db = tmp_path / f"p{i}.duckdb"
        shutil.copy(base, db)
        killed += kill_at(cmd(db), env, rng.uniform(0.3, duration))
        assert_intact(db)
        after_kill = state_digest(db, tables)
        for t in tables:
            assert after_kill.same_table(empty, t) or after_kill.same_table(expected, t), (
                f"half-written {t} visible at kill point {i}"
            )
        run(cmd(db), env)
        assert state_digest(db, tables) == expected, f"kill point {i}"
    assert killed >= 3


@pytest.mark.slow
def test_kill_during_collect_then_rerun_equals_uninterrupted(tmp_path):
    """Live sacct collection (a fake sacct printing a real dump with its header) killed mid-load: the
    watermark and the jobs move together or not at all, and the next run completes the same state."""
    # The live collector asks sacct for the unit separator, so the dump is rewritten with it.
    header = XDMOD_FORMAT.replace(",", "|")
    dump = tmp_path / "sacct.txt"
    body = header.encode() + b"\n" + (FIX / "xdmod" / "pozidriv.log").read_bytes()
    dump.write_bytes(body.replace(b"|", b"\x1f"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(FAKES / "sacct", bin_dir / "sacct")
    (bin_dir / "sacct").chmod(0o755)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[cluster]\nname = "pozidriv"\n[slurm]\nbin_dir = "{bin_dir}"\n'
        "[collect]\nsacct_initial_lookback_seconds = 172800\n"
    )
    env = {**_env(), "FAKE_SACCT_OUTPUT": str(dump)}

    def cmd(db):
        return [*SLURMSCOPE, "--config", str(cfg), "--db", str(db), "collect", "sacct", "--once"]  # noqa: E731

    ref = tmp_path / "ref.duckdb"
    duration = run(cmd(ref), env)
    expected = state_digest(ref, STATE_TABLES)
    assert expected.count("jobs") == 11704
    rng = random.Random(11)
    killed = 0
    for i in range(6):
        db = tmp_path / f"c{i}.duckdb"
        killed += kill_at(cmd(db), env, rng.uniform(0.3, duration))
        if db.exists():
            assert_intact(db)
            con = connect(db, read_only=True)
            wm = con.execute("SELECT count(*) FROM watermarks WHERE collector = 'sacct'").fetchone()[0]
            jobs = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
            con.close()
            assert wm == 0 or jobs == 11704, "a watermark never runs ahead of the data it covers"
        run(cmd(db), env)
        assert state_digest(db, STATE_TABLES) == expected, f"kill point {i}"
    assert killed >= 3


RETAIN = """
import sys
from datetime import datetime, timezone
from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.retention import run_retention

cfg = load_config(None, env={}).with_overrides(cluster={"name": "c"}, retention={"gpu_minutes_days": 7})
run_retention(connect(sys.argv[1]), cfg, datetime(2026, 3, 10, 6, tzinfo=timezone.utc))
"""
# every GPU-minute the readers see (raw or rolled up), and the totals a rollup must keep per GPU-hour
SEEN = {
    "minutes": "SELECT node, gpu_uuid, minute FROM gpu_minutes('c', '-infinity'::TIMESTAMPTZ,"
    " 'infinity'::TIMESTAMPTZ) ORDER BY ALL",
    "hour_sums": "SELECT node, gpu_uuid, date_trunc('hour', minute), sum(samples), sum(energy_joules),"
    " sum(ecc_corrected_delta) FROM gpu_minutes('c', '-infinity'::TIMESTAMPTZ, 'infinity'::TIMESTAMPTZ)"
    " GROUP BY ALL ORDER BY ALL",
}
RETAINED = {
    "gpu_samples": "SELECT * FROM gpu_samples ORDER BY ALL",
    "gpu_samples_hourly": "SELECT * FROM gpu_samples_hourly ORDER BY ALL",
    "retention_state": "SELECT cluster, name, boundary FROM retention_state ORDER BY ALL",
    "retention_runs": "SELECT * EXCLUDE (run_at) FROM retention_runs ORDER BY ALL",
}


@pytest.mark.slow
def test_kill_during_retention_leaves_every_minute_raw_or_rolled_up(tmp_path):
    """Each hour is rolled up, deleted and the boundary moved in one transaction: after a kill every minute
    is seen once (raw or rolled up) with its sums, and a rerun gives the uninterrupted result."""
    env = _env()
    base = tmp_path / "base.duckdb"
    con = connect(base)
    con.execute(
        "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, samples, util_gpu_mean, energy_joules,"
        " ecc_corrected_delta) SELECT 'c', 'n' || (g // 8), 'GPU-' || g, TIMESTAMPTZ '2026-03-01 00:00:00+00'"
        " + to_minutes(m), 6, (m * 7 + g) % 100, 60.0 * (100 + m % 500), CAST(m % 997 = 0 AS INTEGER)"
        " FROM range(16) a(g), range(5 * 1440) b(m)"
    )
    con.execute(  # jobs changing within hours, so that hours split into several rollup rows
        "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance)"
        " SELECT 'c', 'n' || (g // 8), 'GPU-' || g, CAST(k AS VARCHAR),"
        " TIMESTAMPTZ '2026-03-01 00:00:00+00' + to_seconds(k * 5000 + g), "
        " TIMESTAMPTZ '2026-03-01 00:00:00+00' + to_seconds(k * 5000 + 4000 + g), ''"
        " FROM range(16) a(g), range(90) b(k)"
    )
    con.close()
    cmd = lambda db: [sys.executable, "-c", RETAIN, str(db)]  # noqa: E731
    ref = tmp_path / "ref.duckdb"
    shutil.copy(base, ref)
    seen = state_digest(base, SEEN)
    duration = run(cmd(ref), env)
    expected = state_digest(ref, RETAINED)
    assert expected.count("retention_runs") == 2 * 24  # March 1-2 rolled up, an hour a step (cut at March 3)
    assert state_digest(ref, SEEN) == seen
    rng = random.Random(11)
    killed = 0
    for i in range(4):
        db = tmp_path / f"r{i}.duckdb"
        shutil.copy(base, db)
        killed += kill_at(cmd(db), env, rng.uniform(0.5, duration))
        assert_intact(db)
        assert state_digest(db, SEEN) == seen, f"kill point {i}"
        run(cmd(db), env)
        assert state_digest(db, RETAINED) == expected, f"kill point {i}"
    assert killed >= 2
