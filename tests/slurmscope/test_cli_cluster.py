"""Clusters that split silently (issue 14, item 7): a warning at ingest, a one-line failure at pipelines/report.

The scenario is the issue's own: one real cluster's captures (Slurm 22.05 from the test bed, ClusterName
`slurmbed`) ingested without --cluster. sacct rows carry their Cluster column and land under `slurmbed`,
sinfo and sshare take the configured name `default`; `pipelines run` and `report` used to exit 0 with
every mart empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.db import connect
from tests.paths import FIXTURES

REAL = FIXTURES / "slurm-22.05"


@pytest.fixture(autouse=True)
def _no_local_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./slurmscope.toml from the checkout
    for var in ("SLURMSCOPE_CONFIG", "SLURMSCOPE_DB"):
        monkeypatch.delenv(var, raising=False)


def cli(db: Path, *args: str):
    return CliRunner().invoke(main, ["--db", str(db), *args])


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def _allocations(path: Path) -> int:
    """Job allocation lines of a live-format sacct capture (JobID without a step suffix), read as text."""
    lines = path.read_text().splitlines()
    names = lines[0].split("\x1f")
    return sum("." not in dict(zip(names, line.split("\x1f"), strict=True))["JobID"] for line in lines[1:])


@pytest.fixture
def split_db(tmp_path) -> Path:
    """The issue's database: sacct, sinfo and sshare of one cluster ingested without --cluster."""
    db = tmp_path / "s.duckdb"
    for kind, name in (
        ("sacct", "sacct_final.txt"),
        ("sinfo", "sinfo_final.txt"),
        ("sshare", "sshare_final.txt"),
    ):
        args = ["ingest", kind, str(REAL / name)]
        if kind != "sacct":
            args += ["--at", "2026-12-02T14:04:41Z"]
        result = cli(db, *args)
        assert result.exit_code == 0, result.output
    return db


def test_ingest_warns_when_the_file_names_another_cluster(tmp_path):
    db = tmp_path / "w.duckdb"
    result = cli(db, "ingest", "sacct", str(REAL / "sacct_final.txt"))
    assert result.exit_code == 0, result.output
    # every row of the capture says Cluster=slurmbed (tests/fixtures/slurm-22.05/README.md)
    warning = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert len(warning) == 1
    assert "'slurmbed'" in warning[0] and "'default'" in warning[0] and "--cluster" in warning[0]
    con = connect(db, read_only=True)
    try:
        runs = con.execute("SELECT cluster, status, warning FROM collector_runs").fetchall()
        clusters = con.execute("SELECT DISTINCT cluster FROM jobs").fetchall()
    finally:
        con.close()
    assert [(c, s) for c, s, _ in runs] == [("default", "ok")]
    assert runs[0][2] in warning[0]
    assert clusters == [("slurmbed",)]  # the file's Cluster column wins


def test_ingest_with_the_matching_cluster_does_not_warn(tmp_path):
    result = cli(
        tmp_path / "m.duckdb", "--cluster", "slurmbed", "ingest", "sacct", str(REAL / "sacct_final.txt")
    )
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr


def test_pipelines_run_without_jobs_for_the_cluster_fails_listing_the_clusters(split_db):
    line = one_line_error(cli(split_db, "pipelines", "run"))
    jobs = _allocations(REAL / "sacct_final.txt")  # 18 allocation attempts, all Cluster=slurmbed
    assert line == (
        "Error: no jobs for cluster 'default' (--cluster or cluster.name), but the database holds jobs of "
        f"'slurmbed' ({jobs} rows): pass --cluster with one of them, or ingest with --cluster"
    )


def test_report_without_jobs_for_the_cluster_fails_listing_the_clusters(split_db, tmp_path):
    line = one_line_error(cli(split_db, "report", "--month", "2026-12", "--out", str(tmp_path / "r")))
    assert "no jobs for cluster 'default'" in line and "'slurmbed' (18 rows)" in line
    assert not (tmp_path / "r").exists()


def test_the_named_cluster_runs(split_db, tmp_path):
    (tmp_path / "slurmscope.toml").write_text("[billing.rates]\ndefault = 2.5\n")
    result = cli(split_db, "--cluster", "slurmbed", "pipelines", "run")
    assert result.exit_code == 0, result.output
    result = cli(
        split_db, "--cluster", "slurmbed", "report", "--month", "2026-12", "--out", str(tmp_path / "r")
    )
    assert result.exit_code == 0, result.output


def test_a_cluster_without_any_row_fails_naming_the_others(tmp_path):
    db = tmp_path / "n.duckdb"
    args = [
        "--cluster",
        "a",
        "ingest",
        "sinfo",
        str(REAL / "sinfo_final.txt"),
        "--at",
        "2026-12-02T14:04:41Z",
    ]
    assert cli(db, *args).exit_code == 0
    line = one_line_error(cli(db, "--cluster", "b", "pipelines", "run"))
    # sinfo --Node prints cpu01 once and gpu01-04 in two partitions each: 9 node_states rows
    assert line == (
        "Error: no data for cluster 'b' (--cluster or cluster.name), but the database holds 'a' (9 rows):"
        " pass --cluster with one of them"
    )


def test_an_empty_database_is_not_refused(tmp_path):
    db = tmp_path / "e.duckdb"
    connect(db).close()
    result = cli(db, "pipelines", "run")
    assert result.exit_code == 0, result.output
