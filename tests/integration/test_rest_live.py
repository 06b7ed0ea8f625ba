"""slurmrestd 22.05 as the Slurm source on the live test bed: the same rows as the CLI path.

After the shared workload (conftest `live`), slurmrestd is started on a unix socket (rest_auth/local) and
`slurmscope collect squeue` and `collect sacct --once` run twice as a user runs them, into two fresh
databases: once with `slurm.source = "cli"`, once with `slurm.source = "rest"`. Both must store the same
jobs and steps, except the columns docs/collectors.md names (JSON has no uid; 22.05's v0.0.38 prints exit
codes as 0; the text state names the canceller; the text Flags add StartRecieved) and the run's own source
label. Then nodes, the queue and diag: the CLI collector, the REST collector and the CLI collector again,
repeated until the two CLI runs agree (the scheduler's counters and pending priorities move every few
seconds), so the REST rows were read in the state the CLI rows show; they must be equal but for the
snapshot time (each run's own) and the columns v0.0.38 does not print (sched_stats).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from slurmscope.collectors.collect import collect

from slurmscope import doctor
from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.doctor import FAIL, PASS

pytestmark = pytest.mark.slurm

NAMED = {"uid", "exit_code", "signal", "state_raw", "flags", "source", "ingested_at"}
# Snapshot tables: the collection's own time differs by construction; v0.0.38's diag has no last depth
# (src/plugins/openapi/v0.0.38/diag.c), and raw_text is what was read (sdiag's text, or the JSON).
SNAPSHOT_NAMED = {
    ("sinfo", "node_states"): {"snapshot_time"},
    ("squeue", "pending_jobs"): {"snapshot_time"},
    ("sdiag", "sched_stats"): {"snapshot_time", "raw_text", "bf_last_depth", "bf_last_depth_try"},
}


def _collect(bed, tmp, name: str, extra: str) -> tuple[duckdb.DuckDBPyConnection, str]:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(bed.config.read_text().replace("[slurm]\n", "[slurm]\n" + extra, 1))
    db = tmp / f"{name}.duckdb"
    argv = [
        sys.executable,
        "-c",
        "from slurmscope.cli import main; main()",
        "--config",
        str(cfg),
        "--db",
        str(db),
    ]
    # as `collect all` does: squeue first, whose pending jobs sacct then asks for by id
    for kind in ("squeue", "sacct"):
        r = subprocess.run(
            [*argv, "collect", kind, "--once"],
            env=bed.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert r.returncode == 0, r.stderr
    return duckdb.connect(str(db), read_only=True), r.stderr


def test_rest_source_gives_the_cli_rows(slurmbed, live, tmp_path) -> None:
    bed = slurmbed
    if shutil.which("slurmrestd") is None and not Path("/usr/sbin/slurmrestd").exists():
        pytest.skip("slurmrestd not installed (Debian package slurmrestd)")
    sock = bed.cluster.start_slurmrestd()
    try:
        cli, _ = _collect(bed, tmp_path, "cli", 'source = "cli"\n')
        rest, _ = _collect(bed, tmp_path, "rest", f'source = "rest"\nrest_socket = "{sock}"\n')
        # `slurmscope doctor` pings the same slurmrestd with the same client, and names a wrong socket
        live_cfg = load_config(tmp_path / "rest.toml", env={})
        ok = doctor.check_rest(live_cfg)
        assert ok.status == PASS and str(sock) in ok.detail, ok
        wrong = doctor.check_rest(live_cfg.with_overrides(slurm={"rest_socket": str(tmp_path / "nope.sock")}))
        assert wrong.status == FAIL and "nope.sock" in wrong.detail, wrong
    finally:
        bed.cluster.stop_slurmrestd()
    runs = rest.execute(
        "SELECT collector, status FROM collector_runs WHERE collector LIKE 'sacct%'"
    ).fetchall()
    assert runs and all(r == ("sacct_rest", "ok") for r in runs), runs
    for table, key in (
        ("jobs", "job_id_raw, submit_time"),
        ("job_steps", "job_id_raw, job_submit_time, step_id"),
    ):
        cols = [r[0] for r in cli.execute(f"DESCRIBE {table}").fetchall() if r[0] not in NAMED]
        sql = f"SELECT {', '.join(cols)} FROM {table} ORDER BY {key}"  # noqa: S608 - names from DESCRIBE
        a, b = cli.execute(sql).fetchall(), rest.execute(sql).fetchall()
        # 18 attempts in the window (12 and 13 twice) + 17, 18, 19 by id + 16 (cancelled while held) as an id
        # hole; 15 batch steps
        assert len(a) >= (21 if table == "jobs" else 15), (table, len(a))
        assert len(a) == len(b), table
        diffs = [
            (ra[:3], c, x, y)
            for ra, rb in zip(a, b, strict=True)
            for c, x, y in zip(cols, ra, rb, strict=True)
            if x != y
        ]
        assert diffs == [], (table, diffs[:10])
    # by meaning: the same states and the window-hidden pending jobs found by id in both
    states = "SELECT job_id, state FROM jobs ORDER BY job_id_raw, submit_time"
    assert cli.execute(states).fetchall() == rest.execute(states).fetchall()
    pending = rest.execute("SELECT count(*) FROM jobs WHERE state = 'PENDING'").fetchone()[0]
    assert pending >= 3  # held, dependency, begin-later (docs/testbed.md)
    # uid is not in JSON: the REST path leaves it empty rather than wrong
    assert rest.execute("SELECT count(*) FROM jobs WHERE uid IS NOT NULL").fetchone()[0] == 0


def _rows(tmp: Path, cfg, kind: str, table: str, skip: set[str]) -> tuple[str, list[tuple]]:
    """One in-process `collect <kind>` into a fresh database: (collector that ran, rows but `skip`)."""
    path = tmp / f"{kind}-{len(list(tmp.glob('*.duckdb')))}.duckdb"
    assert not path.exists()
    con = connect(str(path))
    try:
        [out] = collect(con, cfg, kind, now=datetime.now(UTC))
        assert out.status == "ok", out
        cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall() if r[0] not in skip]
        rows = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY ALL").fetchall()  # noqa: S608
        return out.collector, rows
    finally:
        con.close()


def test_rest_nodes_queue_and_diag_give_the_cli_rows(slurmbed, live, tmp_path, monkeypatch) -> None:
    bed = slurmbed
    if shutil.which("slurmrestd") is None and not Path("/usr/sbin/slurmrestd").exists():
        pytest.skip("slurmrestd not installed (Debian package slurmrestd)")
    for k, v in bed.env().items():  # SLURM_CONF for the in-process CLI collectors
        monkeypatch.setenv(k, v)
    base = load_config(bed.config, env={})
    sock = bed.cluster.start_slurmrestd()
    try:
        cli_cfg = base.with_overrides(slurm={"source": "cli"})
        rest_cfg = base.with_overrides(slurm={"source": "rest", "rest_socket": str(sock)})
        for (kind, table), skip in SNAPSHOT_NAMED.items():
            for _attempt in range(15):
                by_cli, before = _rows(tmp_path, cli_cfg, kind, table, skip)
                by_rest, rest = _rows(tmp_path, rest_cfg, kind, table, skip)
                _, after = _rows(tmp_path, cli_cfg, kind, table, skip)
                if before == after:
                    break
                time.sleep(1)
            else:
                pytest.fail(f"{kind}: the cluster's state kept changing between two CLI runs")
            assert (by_cli, by_rest) == (kind, f"{kind}_rest")
            assert before, kind  # the post-workload state has nodes, pending jobs and counters
            if rest != before:
                only_rest = [r for r in rest if r not in before]
                only_cli = [r for r in before if r not in rest]
                pytest.fail(f"{kind}: REST rows {only_rest} where the CLI has {only_cli}", pytrace=False)
        # `collect all` as a user runs it with source = "rest": the four REST sources replace the commands
        cfg = tmp_path / "rest-all.toml"
        cfg.write_text(
            bed.config.read_text().replace(
                "[slurm]\n", f'[slurm]\nsource = "rest"\nrest_socket = "{sock}"\n', 1
            )
        )
        db = tmp_path / "rest-all.duckdb"
        argv = [sys.executable, "-c", "from slurmscope.cli import main; main()", "--config", str(cfg)]
        r = subprocess.run(
            [*argv, "--db", str(db), "collect", "all", "--once"],
            env=bed.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert r.returncode == 0, r.stderr
    finally:
        bed.cluster.stop_slurmrestd()
    with duckdb.connect(str(db), read_only=True) as con:
        runs = dict(con.execute("SELECT collector, status FROM collector_runs").fetchall())
        assert {
            k: runs.get(k) for k in ("sinfo_rest", "squeue_rest", "sdiag_rest", "sacct_rest")
        } == dict.fromkeys(("sinfo_rest", "squeue_rest", "sdiag_rest", "sacct_rest"), "ok")
        assert not {"sinfo", "squeue", "sdiag", "sacct"} & set(runs)
        drained = con.execute("SELECT count(*) FROM node_states WHERE state_flags LIKE '%DRAIN%'").fetchone()[
            0
        ]
        assert drained >= 1  # on-drained-node's node ends DRAINED (docs/testbed.md)
