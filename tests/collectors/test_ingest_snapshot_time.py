"""Snapshot time from the content, else `ingest --at`, else the mtime with a warning (issue 14 item 6).

Ground truth: the real 22.05 captures of tests/fixtures/slurm-22.05/human, all taken at 17:29:57 UTC on
2026-12-03 (the date line of the -l outputs and sdiag's "sdiag output at ... (1796318997)"; the capture
ran with TZ=UTC). Each file is copied with its mtime set a day later, as a copy made later would have it.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from slurmscope.cli import main

HUMAN = Path(__file__).parents[1] / "fixtures" / "slurm-22.05" / "human"
TAKEN = datetime(2026, 12, 3, 17, 29, 57, tzinfo=UTC)
COPIED = datetime(2026, 12, 4, 9, 0, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_local_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("SLURMSCOPE_CONFIG", "SLURMSCOPE_DB"):
        monkeypatch.delenv(var, raising=False)


def copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copyfile(HUMAN / name, dst)
    os.utime(dst, (COPIED.timestamp(), COPIED.timestamp()))
    return dst


def ingest(tmp_path: Path, *args: str):
    db = tmp_path / f"s{len(list(tmp_path.glob('*.duckdb')))}.duckdb"  # a fresh database per call
    res = CliRunner().invoke(main, ["--db", str(db), "ingest", *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res, duckdb.connect(str(db), read_only=True)


@pytest.mark.parametrize(
    "kind, name, table",
    [
        ("sinfo", "human_sinfo_l.txt", "node_states"),
        ("sinfo", "human_sinfo_N_l.txt", "node_states"),
        ("squeue", "human_squeue_l.txt", "pending_jobs"),
        ("sdiag", "human_sdiag.txt", "sched_stats"),
    ],
)
def test_time_printed_in_the_output_wins_over_the_mtime(tmp_path, kind, name, table):
    res, con = ingest(tmp_path, kind, str(copy(tmp_path, name)))
    assert con.execute(f"SELECT DISTINCT snapshot_time FROM {table}").fetchall() == [(TAKEN,)]  # noqa: S608
    assert con.execute("SELECT warning FROM collector_runs").fetchall() == [(None,)]
    assert "warning" not in res.output
    # the run's window is the instant the file describes, what the next incremental pipeline run starts from
    assert con.execute("SELECT window_start, window_end FROM collector_runs").fetchall() == [(TAKEN, TAKEN)]


def test_date_line_is_local_time_of_the_capturing_machine(tmp_path):
    _res, con = ingest(
        tmp_path, "squeue", str(copy(tmp_path, "human_squeue_l.txt")), "--timezone", "Europe/Berlin"
    )
    [(t,)] = con.execute("SELECT DISTINCT snapshot_time FROM pending_jobs").fetchall()
    assert t == datetime(2026, 12, 3, 16, 29, 57, tzinfo=UTC)  # 17:29:57 CET


def test_at_gives_the_time_of_outputs_without_one(tmp_path):
    res, con = ingest(
        tmp_path, "sinfo", str(copy(tmp_path, "human_sinfo.txt")), "--at", "2026-12-03T17:29:57Z"
    )
    assert con.execute("SELECT DISTINCT snapshot_time FROM node_states").fetchall() == [(TAKEN,)]
    assert con.execute("SELECT warning FROM collector_runs").fetchall() == [(None,)]
    res, con = ingest(tmp_path, "squeue", str(copy(tmp_path, "human_squeue.txt")), "--at", "1796318997")
    assert con.execute("SELECT DISTINCT snapshot_time FROM pending_jobs").fetchall() == [(TAKEN,)]


def test_without_either_the_mtime_is_used_and_said(tmp_path):
    res, con = ingest(tmp_path, "sinfo", str(copy(tmp_path, "human_sinfo.txt")))
    assert con.execute("SELECT DISTINCT snapshot_time FROM node_states").fetchall() == [(COPIED,)]
    [(warning,)] = con.execute("SELECT warning FROM collector_runs").fetchall()
    assert "modification time" in warning and "--at" in warning
    assert "warning: snapshot time is the file's modification time" in res.output


def test_content_time_wins_over_a_different_at_and_says_so(tmp_path):
    res, con = ingest(
        tmp_path, "sinfo", str(copy(tmp_path, "human_sinfo_l.txt")), "--at", "2026-12-04T00:00:00Z"
    )
    assert con.execute("SELECT DISTINCT snapshot_time FROM node_states").fetchall() == [(TAKEN,)]
    assert "--at 2026-12-04T00:00:00+00:00 ignored" in res.output


def test_sacct_has_no_snapshot_and_no_warning(tmp_path):
    res, con = ingest(tmp_path, "sacct", str(copy(tmp_path, "human_sacct_aliases.txt")))
    assert con.execute("SELECT warning FROM collector_runs").fetchall() == [(None,)]


def test_a_bad_at_is_refused(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "--db",
            str(tmp_path / "s.duckdb"),
            "ingest",
            "sinfo",
            str(HUMAN / "human_sinfo.txt"),
            "--at",
            "noon",
        ],
    )
    assert res.exit_code != 0 and "--at 'noon' is not a time" in res.output
