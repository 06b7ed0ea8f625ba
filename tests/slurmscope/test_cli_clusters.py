"""`--cluster all` on the commands that take it (pipelines run, report, export, status), on two clusters in
one database (tests/cluster_pair.py): each cluster's output is what that cluster alone gives."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.db import connect
from tests.cluster_pair import NAMES


def _run(pair, db, *args):
    return CliRunner().invoke(main, ["--config", str(pair.config_path), "--db", str(db), *args])


def test_report_all_writes_one_report_per_cluster_as_each_cluster_s_own_report(cluster_pair, tmp_path):
    """OUT/<cluster>/ holds, byte for byte, the report `--cluster <cluster>` writes (whose marts equal the
    cluster's alone: tests/pipelines/test_runner_clusters.py)."""
    res = _run(
        cluster_pair,
        cluster_pair.combined,
        "--cluster",
        "all",
        "report",
        "--month",
        cluster_pair.month,
        "--out",
        str(tmp_path / "all"),
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == sorted(NAMES)
    for name in NAMES:
        one = _run(
            cluster_pair,
            cluster_pair.combined,
            "--cluster",
            name,
            "report",
            "--month",
            cluster_pair.month,
            "--out",
            str(tmp_path / name),
        )
        assert one.exit_code == 0, one.output
        files = sorted(p.name for p in (tmp_path / name).iterdir())
        assert "report.html" in files and "chargeback_accounts.csv" in files
        assert sorted(p.name for p in (tmp_path / "all" / name).iterdir()) == files
        for f in files:
            assert (tmp_path / "all" / name / f).read_bytes() == (tmp_path / name / f).read_bytes(), f
        assert (
            f"<h1>slurmscope — {name} — {cluster_pair.month}</h1>"
            in (tmp_path / name / "report.html").read_text()
        )
    # each report charges its own cluster's accounts only
    accounts = {
        name: {
            line.split(",")[1]
            for line in (tmp_path / "all" / name / "chargeback_accounts.csv").read_text().splitlines()[1:]
        }
        for name in NAMES
    }
    assert accounts["b"] - {"TOTAL"} == {f"{a}-b" for a in accounts["simcluster"] - {"TOTAL"}}


def test_report_all_writes_what_it_can_and_names_the_cluster_without_data(cluster_pair, tmp_path):
    db = tmp_path / "x.duckdb"
    shutil.copyfile(cluster_pair.combined, db)
    con = connect(db)
    try:
        for table in ("mart_cost_monthly", "mart_capacity_daily", "mart_cost_daily"):
            con.execute(f"DELETE FROM {table} WHERE cluster = 'b'")  # noqa: S608 - fixed names
    finally:
        con.close()
    res = _run(
        cluster_pair,
        db,
        "--cluster",
        "all",
        "report",
        "--month",
        cluster_pair.month,
        "--out",
        str(tmp_path / "r"),
    )
    assert res.exit_code == 1 and "in cluster 'b'" in res.output
    assert (tmp_path / "r" / "simcluster" / "report.html").is_file()
    assert not (tmp_path / "r" / "b").exists()


def test_pipelines_run_all_runs_each_cluster(cluster_pair, tmp_path):
    db = tmp_path / "x.duckdb"
    shutil.copyfile(cluster_pair.combined, db)
    res = _run(
        cluster_pair,
        db,
        "--cluster",
        "all",
        "pipelines",
        "run",
        "--only",
        "backfill",
        "--now",
        cluster_pair.now.isoformat(),
    )
    assert res.exit_code == 0, res.output
    lines = [line for line in res.output.splitlines() if "mart_backfill_daily" in line]
    assert [line.split(":")[0] for line in lines] == list(NAMES)
    con = connect(db, read_only=True)
    try:
        runs = con.execute(
            "SELECT cluster, count(*) FROM pipeline_runs WHERE pipeline = 'backfill' AND run_at = ? GROUP BY 1",
            [cluster_pair.now],
        ).fetchall()
    finally:
        con.close()
    assert sorted(runs) == sorted((n, 1) for n in NAMES)


def test_status_all_has_a_cluster_column_and_one_cluster_keeps_its_columns(cluster_pair):
    both = _run(cluster_pair, cluster_pair.combined, "--cluster", "all", "status", "--format", "csv")
    assert both.exit_code == 0, both.output
    header, *rows = both.output.splitlines()
    assert header.startswith("cluster,collector,last_status,")
    assert {r.split(",")[0] for r in rows} == set(NAMES)
    one = _run(cluster_pair, cluster_pair.combined, "--cluster", "b", "status", "--format", "csv")
    assert one.output.splitlines()[0] == header.removeprefix("cluster,")
    assert one.output.splitlines()[1:] == [r.removeprefix("b,") for r in rows if r.startswith("b,")]
    default = _run(cluster_pair, cluster_pair.combined, "status", "--format", "csv")  # the first listed
    assert default.output.splitlines()[1:] == [
        r.removeprefix("simcluster,") for r in rows if r.startswith("simcluster,")
    ]


@pytest.mark.parametrize(
    ("args", "clusters"),
    [
        ((), {"simcluster", "b", "other"}),
        (("--cluster", "all"), {"simcluster", "b"}),
        (("--cluster", "b"), {"b"}),
    ],
)
def test_export_takes_every_cluster_in_the_database_the_configured_ones_or_one(
    cluster_pair, tmp_path, args, clusters
):
    db = tmp_path / "x.duckdb"
    shutil.copyfile(cluster_pair.combined, db)
    con = connect(db)
    try:  # a cluster ingested from a recorded file, not configured
        con.execute(
            "INSERT INTO jobs SELECT * REPLACE ('other' AS cluster) FROM jobs WHERE cluster = 'b' LIMIT 5"
        )
    finally:
        con.close()
    res = _run(
        cluster_pair, db, *args, "export", "--out", str(tmp_path / "lake"), "--since", cluster_pair.month
    )
    assert res.exit_code == 0, res.output
    written = {line.split("\t")[1] for line in res.output.splitlines() if line.startswith("jobs\t")}
    assert written == clusters
    assert {p.name for p in (tmp_path / "lake" / "jobs").iterdir()} == {f"cluster={c}" for c in clusters}


@pytest.mark.parametrize("command", [["ingest", "sacct", "x.txt"], ["doctor"], ["agent"]])
def test_commands_of_one_cluster_refuse_all(cluster_pair, command):
    res = _run(cluster_pair, cluster_pair.combined, "--cluster", "all", *command)
    assert (
        res.exit_code == 2
        and "'all' is for collect, export, pipelines, report, restore, serve, status" in res.output
    )


def test_a_cluster_name_that_is_no_name_is_refused(cluster_pair):
    res = _run(cluster_pair, cluster_pair.combined, "--cluster", "../x", "status")
    assert res.exit_code == 2 and "expects a cluster name" in res.output


def test_serve_refuses_a_cluster_the_file_does_not_list(cluster_pair):
    res = _run(cluster_pair, cluster_pair.combined, "--cluster", "gamma", "serve", "--port", "1")
    assert res.exit_code == 2 and "cluster 'gamma' is not in [[clusters]]" in res.output


def test_a_configured_cluster_without_data_is_named_and_the_others_still_run(cluster_pair, tmp_path):
    """A cluster just added to [[clusters]], nothing collected yet: `pipelines run --cluster all` names it
    with the clusters the database holds, runs the two others, and exits 1."""
    config = tmp_path / "s.toml"
    config.write_text(cluster_pair.config_path.read_text() + '\n[[clusters]]\nname = "gamma"\n')
    db = tmp_path / "x.duckdb"
    shutil.copyfile(cluster_pair.combined, db)
    res = CliRunner().invoke(
        main,
        [
            "--config",
            str(config),
            "--db",
            str(db),
            "--cluster",
            "all",
            "pipelines",
            "run",
            "--only",
            "backfill",
            "--now",
            cluster_pair.now.isoformat(),
        ],
    )
    assert res.exit_code == 1
    assert (
        "no jobs for cluster 'gamma'" in res.output and "'simcluster'" in res.output and "'b'" in res.output
    )
    assert [line.split(":")[0] for line in res.output.splitlines() if "mart_backfill_daily" in line] == list(
        NAMES
    )
