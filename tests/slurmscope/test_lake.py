"""`slurmscope export`: the Parquet lake's layout, its atomic month swap under a crash, and the starter
queries of docs/lake.md, run as written, equal to slurmscope's own marts and report."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from slurmscope import lake, rollup
from slurmscope.cli import main
from slurmscope.db import connect, setting
from slurmscope.report import collect_data

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "lake.md").read_text()
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
FLOAT_REL = 1e-9
DOC_FAILED_STATES = (
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
)  # the states docs/lake.md's query names


def doc_queries() -> dict[tuple[str, str], str]:
    found = re.findall(r"<!-- query: (\w+) (\w+) -->\n```\w+\n(.*?)```", DOC, flags=re.S)
    return {(engine, name): body for engine, name, body in found}


def duckdb_query(name: str, lake_dir: Path) -> list[tuple]:
    sql = doc_queries()[("duckdb", name)].replace("'lake/", f"'{lake_dir}/")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'America/Los_Angeles'")  # the queries must not depend on the session zone
    return con.execute(sql).fetchall()


def spark_query(name: str, lake_dir: Path, spark) -> list[tuple]:
    for statement in doc_queries()[("spark", "setup")].split(";"):
        if statement.strip():
            spark.sql(statement.replace("'lake/", f"'{lake_dir}/"))
    return [tuple(r) for r in spark.sql(doc_queries()[("spark", name)]).collect()]


@pytest.fixture(scope="module")
def spark_session():
    """Spark in local mode on one core (the machine is shared), no UI, one shuffle partition."""
    if not shutil.which("java"):
        pytest.skip("no java on PATH: scripts/system-deps.sh installs Debian's openjdk-17-jre-headless")
    from pyspark.sql import SparkSession  # the test extra installs pyspark: missing is a failure

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("slurmscope-lake-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


ENGINES = ["duckdb", "polars", pytest.param("spark", marks=pytest.mark.spark)]


def run_query(engine: str, name: str, lake_dir: Path, request) -> list[tuple]:
    if engine == "duckdb":
        return duckdb_query(name, lake_dir)
    if engine == "polars":
        return polars_query(name, lake_dir)
    return spark_query(name, lake_dir, request.getfixturevalue("spark_session"))


def polars_query(name: str, lake_dir: Path) -> list[tuple]:
    ns: dict = {}
    setup = doc_queries()[("polars", "setup")].replace('LAKE = "lake"', f"LAKE = {str(lake_dir)!r}")
    exec(setup, ns)  # noqa: S102 - the documented query, run as a user would paste it
    exec(doc_queries()[("polars", name)], ns)  # noqa: S102
    return ns["result"].rows()


def test_every_mart_and_raw_table_has_a_month_column(tmp_path):
    """A migration that adds a mart must say which column files its rows into months."""
    con = connect(tmp_path / "m.duckdb")
    cols = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " JOIN information_schema.tables USING (table_name) WHERE table_type = 'BASE TABLE'"
    ).fetchall()
    tables = {t for t, _, _ in cols}
    assert {t for t in tables if t.startswith("mart_")} == set(lake.MART_TABLES)
    assert set(lake.RAW_TABLES) <= tables
    types = {(t, c): d for t, c, d in cols}
    for table, column in lake.TABLES.items():
        if column is not None:
            assert types[(table, column)] in ("DATE", "TIMESTAMP WITH TIME ZONE"), table
        row = [line for line in DOC.splitlines() if line.startswith(f"| `{table}` |")]
        assert len(row) == 1, table
        assert row[0].split(" | ")[2] == (f"`{column}`" if column else "(export run)"), table


def test_layout_and_rows_equal_the_database(demo_run, demo_lake):
    con = demo_run.connect()
    manifest = json.loads((demo_lake / "_manifest.json").read_text())
    listed = {(p["table"], p["cluster"], p["month"]): p for p in manifest["partitions"]}
    for table, column in lake.TABLES.items():
        # a SOURCES table is its query's rows: gpu_samples_hourly = the demo's minutes rolled up per hour
        rows = (
            "gpu_hours('simcluster', TIMESTAMPTZ '2026-11-01 00:00:00+00', TIMESTAMPTZ '2026-12-01 00:00:00+00')"
            if table in lake.SOURCES
            else f'"{table}"'
        )
        count = con.execute(f"SELECT count(*) FROM {rows}").fetchone()[0]  # noqa: S608
        if not count:
            assert not (demo_lake / table).exists()
            continue
        month = (
            "2026-12" if column is None else "2026-11"
        )  # the demo is 2026-11-01..04; snapshots: export run
        path = demo_lake / table / "cluster=simcluster" / f"month={month}" / "data.parquet"
        meta = pq.read_metadata(path)
        entry = listed[(table, "simcluster", month)]
        assert meta.num_rows == count == entry["rows"]
        if column is not None:  # the time range the manifest gives is the rows' own
            lo, hi = con.execute(f'SELECT min("{column}"), max("{column}") FROM {rows}').fetchone()  # noqa: S608
            assert (entry["min_time"], entry["max_time"]) == (lake._iso(lo), lake._iso(hi)), table
        assert meta.row_group(0).column(0).compression == "ZSTD"
        assert "cluster" not in meta.schema.names
        drop = "cluster, month" if column == "month" else "cluster"  # month is the partition key
        with setting(con, "threads", 1):  # gpu_hours sums in scan order: read it as the export does
            ours = con.execute(f"SELECT * EXCLUDE ({drop}) FROM {rows} ORDER BY ALL")  # noqa: S608
            names = [d[0] for d in ours.description]
            ours = ours.fetchall()
        theirs = duckdb.connect().execute(
            f"SELECT * FROM read_parquet('{path}', hive_partitioning = false) ORDER BY ALL"
        )  # noqa: S608
        assert [d[0] for d in theirs.description] == names, table
        assert theirs.fetchall() == ours, table
    assert lake.verify(str(demo_lake)) == []


def _db(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """Two clusters, jobs either side of the month boundary (UTC) and a DATE mart."""
    con = connect(tmp_path / "small.duckdb")
    jobs = [
        ("alpha", 1, "2026-10-31 23:59:59+00", "FAILED"),
        ("alpha", 2, "2026-11-01 00:00:00+00", "COMPLETED"),
        ("alpha", 3, "2026-11-15 08:00:00+00", "COMPLETED"),
        ("beta", 4, "2026-10-02 10:00:00+00", "COMPLETED"),
    ]
    for cluster, jid, submit, state in jobs:
        con.execute(
            "INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, state, gpus, ingested_at)"
            " VALUES (?, ?, ?, ?::TIMESTAMPTZ, ?, 8, TIMESTAMPTZ '2026-12-01 00:00:00+00')",
            [cluster, str(jid), jid, submit, state],
        )
    con.execute(
        "INSERT INTO mart_job_outcomes_daily VALUES ('alpha', DATE '2026-10-31', 'gpu', 'a', 'FAILED', 1, 8.0, 'user'),"
        " ('alpha', DATE '2026-11-01', 'gpu', 'a', 'COMPLETED', 1, 8.0, 'none')"
    )
    return con


def _listed(out: Path) -> dict:
    m = json.loads((out / "_manifest.json").read_text())
    return {(p["table"], p["cluster"], p["month"]): p for p in m["partitions"]}


def test_months_follow_the_documented_column_and_utc(tmp_path):
    con = _db(tmp_path)
    out = tmp_path / "lake"
    lake.export(con, str(out), now=NOW, tables=["jobs", "mart_job_outcomes_daily"])
    listed = _listed(out)
    assert sorted(k for k in listed if k[0] == "jobs") == [
        ("jobs", "alpha", "2026-10"),
        ("jobs", "alpha", "2026-11"),
        ("jobs", "beta", "2026-10"),
    ]
    oct_ = listed[("jobs", "alpha", "2026-10")]
    assert (oct_["rows"], oct_["min_time"], oct_["max_time"]) == (
        1,
        "2026-10-31T23:59:59Z",
        "2026-10-31T23:59:59Z",
    )
    nov = listed[("jobs", "alpha", "2026-11")]
    assert (nov["rows"], nov["min_time"], nov["max_time"]) == (
        2,
        "2026-11-01T00:00:00Z",
        "2026-11-15T08:00:00Z",
    )
    day = listed[("mart_job_outcomes_daily", "alpha", "2026-10")]
    assert (day["rows"], day["min_time"]) == (1, "2026-10-31")
    rows = (
        duckdb.connect()
        .execute(
            f"SELECT cluster, month, job_id_raw FROM read_parquet('{out}/jobs/*/*/*.parquet', hive_partitioning = true)"
            " ORDER BY job_id_raw"
        )
        .fetchall()
    )
    assert rows == [
        ("alpha", "2026-10", 1),
        ("alpha", "2026-11", 2),
        ("alpha", "2026-11", 3),
        ("beta", "2026-10", 4),
    ]


def test_reexport_is_byte_stable_and_replaces_only_changed_months(tmp_path):
    con = _db(tmp_path)
    out = tmp_path / "lake"
    first = lake.export(con, str(out), now=NOW, tables=["jobs"])
    assert {w.status for w in first} == {"written"}
    manifest_bytes = (out / "_manifest.json").read_bytes()
    oct_file = out / "jobs/cluster=alpha/month=2026-10/data.parquet"
    nov_file = out / "jobs/cluster=alpha/month=2026-11/data.parquet"
    oct_stat, nov_bytes = oct_file.stat(), nov_file.read_bytes()

    again = lake.export(con, str(out), since="2026-10", now=NOW, tables=["jobs"])
    assert {w.status for w in again} == {"unchanged"} and len(again) == 3
    assert (out / "_manifest.json").read_bytes() == manifest_bytes
    assert oct_file.stat().st_mtime_ns == oct_stat.st_mtime_ns and oct_file.stat().st_ino == oct_stat.st_ino

    con.execute("UPDATE jobs SET state = 'FAILED' WHERE job_id_raw = 3")
    con.execute(
        "UPDATE jobs SET state = 'FAILED' WHERE job_id_raw = 4"
    )  # beta October: before the default window
    changed = lake.export(con, str(out), now=NOW, tables=["jobs"])  # default: 2026-11 and 2026-12
    assert [(w.partition.cluster, w.partition.month, w.status) for w in changed] == [
        ("alpha", "2026-11", "written")
    ]
    assert nov_file.read_bytes() != nov_bytes
    assert oct_file.stat().st_ino == oct_stat.st_ino
    states = dict(
        duckdb.connect()
        .execute(f"SELECT job_id_raw, state FROM read_parquet('{out}/jobs/*/*/*.parquet')")
        .fetchall()
    )
    assert states == {1: "FAILED", 2: "COMPLETED", 3: "FAILED", 4: "COMPLETED"}
    lake.export(con, str(out), since="2026-10", now=NOW, tables=["jobs"])
    assert duckdb.connect().execute(
        f"SELECT state FROM read_parquet('{out}/jobs/cluster=beta/*/*.parquet')"
    ).fetchall() == [("FAILED",)]
    assert lake.verify(str(out)) == []


def test_hourly_gpu_partitions_are_the_minute_ordered_rollup_with_the_same_bytes_every_run(
    demo_run, tmp_path
):
    """gpu_samples_hourly is rolled up on the fly with unordered sums on one thread (db.setting): three
    exports from a two-thread database give the same files, equal to the rollup whose sums are ordered by
    minute (the demo stores its minutes in load order). With two threads the sums add in whatever order the
    threads finish and the files differ from run to run."""
    con = demo_run.connect()
    try:
        assert con.execute("SELECT count(*) FROM gpu_samples_hourly").fetchone()[0] == 0  # all still minutes
        con.execute("SET threads = 2")
        listings = []
        for i in range(3):
            out = tmp_path / f"lake{i}"
            lake.export(con, str(out), now=NOW, since="2000-01", tables=["gpu_samples_hourly"])
            listings.append(
                sorted(
                    (e["path"], e["sha256"])
                    for e in lake.read_manifest(lake.open_target(str(out)))["partitions"]
                )
            )
        assert listings[0] and listings[0] == listings[1] == listings[2]
        assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 2
        minute_cols = ", ".join(f'"{c}"' for c in rollup.column_types(con, "gpu_samples"))
        hourly = {c: t for c, t in rollup.column_types(con, "gpu_samples_hourly").items() if c != "cluster"}
        ordered = rollup.aggregate_sql(rollup.segment_sql(f"SELECT {minute_cols} FROM gpu_samples"))
        cast = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in hourly.items())
        truth = con.execute(f"SELECT {cast} FROM ({ordered}) ORDER BY ALL").fetchall()  # noqa: S608 - names from the catalog
    finally:
        con.close()
    names = ", ".join(f'"{c}"' for c in hourly)
    got = (
        duckdb.connect()
        .execute(
            f"SELECT {names} FROM read_parquet('{tmp_path}/lake0/gpu_samples_hourly/*/*/*.parquet',"  # noqa: S608
            " hive_partitioning = false) ORDER BY ALL"
        )
        .fetchall()
    )
    assert len(got) == len(truth) > 1000 and got == truth


def test_a_failure_mid_write_leaves_the_previous_month(tmp_path, monkeypatch):
    con = _db(tmp_path)
    out = tmp_path / "lake"
    lake.export(con, str(out), now=NOW, tables=["jobs"])
    manifest_bytes = (out / "_manifest.json").read_bytes()
    before = (out / "jobs/cluster=alpha/month=2026-11/data.parquet").read_bytes()
    con.execute("UPDATE jobs SET state = 'TIMEOUT' WHERE cluster = 'alpha'")

    calls = []

    def broken(self, table, row_group_size=None):
        calls.append(table.num_rows)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", broken)
    with pytest.raises(OSError, match="No space left"):
        lake.export(con, str(out), since="2026-10", now=NOW, tables=["jobs"])
    assert calls
    monkeypatch.undo()
    assert (out / "jobs/cluster=alpha/month=2026-11/data.parquet").read_bytes() == before
    assert (out / "_manifest.json").read_bytes() == manifest_bytes
    assert lake.verify(str(out)) == []
    leftovers = list(out.glob("jobs/cluster=alpha/month=*/.data.parquet.tmp-*"))
    assert leftovers  # the half-written file is there, under a name no reader globs
    rows = (
        duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{out}/jobs/*/*/*.parquet')").fetchone()
    )
    assert rows == (4,)
    lake.export(con, str(out), since="2026-10", now=NOW, tables=["jobs"])
    assert not list(out.glob("jobs/*/*/.data.parquet.tmp-*"))


KILLER = """
import os, signal, sys
import pyarrow.parquet as pq
from datetime import datetime, timezone
from slurmscope import lake
from slurmscope.db import connect

real = pq.ParquetWriter.write_table
state = {"n": 0}

def write_then_die(self, table, row_group_size=None):
    real(self, table, row_group_size=row_group_size)
    state["n"] += 1
    if state["n"] == 2:  # second row group of the month being written: the file is half there
        os.kill(os.getpid(), signal.SIGKILL)

pq.ParquetWriter.write_table = write_then_die
lake.ROW_GROUP_ROWS = 2
con = connect(sys.argv[1], read_only=True)
lake.export(con, sys.argv[2], since="2026-10", now=datetime(2026, 12, 3, tzinfo=timezone.utc), tables=["jobs"])
"""


def test_kill_9_mid_export_leaves_a_readable_lake_without_the_half_month(tmp_path):
    con = _db(tmp_path)
    out = tmp_path / "lake"
    lake.export(con, str(out), now=NOW, tables=["jobs"])  # October and November of alpha, October of beta
    con.execute("DELETE FROM jobs WHERE cluster = 'alpha' AND job_id_raw <> 1")  # alpha November: gone ...
    for jid in (10, 11, 12, 13, 14):  # ... and rebuilt with five attempts (three row groups of two)
        con.execute(
            "INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, state)"
            " VALUES ('alpha', ?, ?, TIMESTAMPTZ '2026-11-20 00:00:00+00' + to_seconds(?), 'COMPLETED')",
            [str(jid), jid, jid],
        )
    con.execute(
        "INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, state) VALUES ('gamma', '9', 9, TIMESTAMPTZ '2026-10-05 00:00:00+00', 'FAILED')"
    )
    con.close()
    manifest_before = (out / "_manifest.json").read_bytes()
    nov_before = (out / "jobs/cluster=alpha/month=2026-11/data.parquet").read_bytes()

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLER), str(tmp_path / "small.duckdb"), str(out)],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()

    listed = _listed(out)
    assert ("jobs", "gamma", "2026-10") not in listed  # never finished: not in the manifest
    assert (out / "jobs/cluster=alpha/month=2026-11/data.parquet").read_bytes() == nov_before
    assert (out / "_manifest.json").read_bytes() == manifest_before
    assert lake.verify(str(out)) == []
    ids = (
        duckdb.connect()
        .execute(f"SELECT job_id_raw FROM read_parquet('{out}/jobs/*/*/*.parquet') ORDER BY 1")
        .fetchall()
    )
    assert ids == [(1,), (2,), (3,), (4,)]  # the complete previous lake
    assert list(out.glob("jobs/cluster=alpha/month=2026-11/.data.parquet.tmp-*"))

    con = connect(tmp_path / "small.duckdb", read_only=True)
    lake.export(con, str(out), since="2026-10", now=NOW, tables=["jobs"])
    ids = (
        duckdb.connect()
        .execute(f"SELECT job_id_raw FROM read_parquet('{out}/jobs/*/*/*.parquet') ORDER BY 1")
        .fetchall()
    )
    assert ids == [(1,), (4,), (9,), (10,), (11,), (12,), (13,), (14,)]
    assert _listed(out)[("jobs", "alpha", "2026-11")]["row_groups"] == 1  # default row groups again
    assert lake.verify(str(out)) == []


def test_row_groups_and_an_unknown_mart(tmp_path, monkeypatch):
    con = _db(tmp_path)
    for jid in (5, 6, 7):
        con.execute(
            "INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time) VALUES ('alpha', ?, ?, TIMESTAMPTZ '2026-11-20 00:00:00+00')",
            [str(jid), jid],
        )
    con.execute("SET TimeZone = 'Asia/Tokyo'")  # a caller's session zone changes neither months nor bytes
    monkeypatch.setattr(lake, "ROW_GROUP_ROWS", 2)
    out = tmp_path / "lake"
    lake.export(con, str(out), now=NOW, tables=["jobs"])
    meta = pq.read_metadata(out / "jobs/cluster=alpha/month=2026-11/data.parquet")
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [2, 2, 1]
    entry = _listed(out)[("jobs", "alpha", "2026-11")]
    assert (entry["min_time"], entry["max_time"]) == ("2026-11-01T00:00:00Z", "2026-11-20T00:00:00Z")
    assert (
        pq.read_schema(out / "jobs/cluster=alpha/month=2026-11/data.parquet").field("submit_time").type.tz
        == "UTC"
    )
    con.execute("CREATE TABLE mart_new_thing (cluster VARCHAR, day DATE)")
    with pytest.raises(lake.ExportError, match="mart_new_thing"):
        lake.export(con, str(out), now=NOW)


def test_file_url_target_and_cli(demo_run, tmp_path):
    out = tmp_path / "via-url"
    result = CliRunner().invoke(
        main, ["--db", str(demo_run.db_path), "export", "--out", f"file://{out}", "--since", "2026-11"]
    )
    assert result.exit_code == 0, result.output
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert ["jobs", "simcluster", "2026-11", "532", "written"] in lines
    assert lake.verify(str(out)) == []
    again = CliRunner().invoke(
        main, ["--db", str(demo_run.db_path), "export", "--out", str(out), "--since", "2026-11"]
    )
    assert again.exit_code == 0 and all(line.endswith("\tunchanged") for line in again.stdout.splitlines())
    bad = CliRunner().invoke(
        main, ["--db", str(demo_run.db_path), "export", "--out", str(out), "--since", "2026-13"]
    )
    assert bad.exit_code == 2


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return a == b or math.isclose(a, b, rel_tol=FLOAT_REL, abs_tol=1e-12)
    return a == b


def _same(rows: list[tuple], truth: list[tuple]) -> None:
    assert len(rows) == len(truth) and rows
    for r, t in zip(rows, truth, strict=True):
        assert len(r) == len(t) and all(_close(a, b) for a, b in zip(r, t, strict=True)), (r, t)


@pytest.mark.parametrize("engine", ENGINES)
def test_cost_per_account_month_equals_the_report(engine, demo_run, demo_lake, request):
    rows = run_query(engine, "cost_per_account_month", demo_lake, request)
    con = demo_run.connect()
    truth = []
    for (month,) in con.execute("SELECT DISTINCT month FROM mart_cost_monthly ORDER BY 1").fetchall():
        d = collect_data(con, "simcluster", month)
        for a in sorted(d.accounts, key=lambda a: a["account"]):
            truth.append(("simcluster", month.strftime("%Y-%m"), a["account"], a["gpu_hours"], a["cost_usd"]))
    _same(rows, truth)
    assert all(isinstance(r[4], Decimal) for r in rows)  # cents, not floats


@pytest.mark.parametrize("engine", ENGINES)
def test_failures_per_partition_equal_the_outcomes_mart(engine, demo_run, demo_lake, request):
    rows = run_query(engine, "failures_per_partition", demo_lake, request)
    truth = (
        demo_run.connect()
        .execute(
            "SELECT cluster, strftime(day, '%Y-%m'), \"partition\", state, sum(jobs)::BIGINT"
            f" FROM mart_job_outcomes_daily WHERE state IN {DOC_FAILED_STATES}"
            " GROUP BY ALL ORDER BY ALL"
        )
        .fetchall()
    )
    assert rows == truth and sum(r[4] for r in rows) > 0


@pytest.mark.parametrize("engine", ENGINES)
def test_fairshare_per_association_equals_the_mart(engine, demo_run, demo_lake, request):
    rows = run_query(engine, "fairshare_per_association", demo_lake, request)
    truth = (
        demo_run.connect()
        .execute(
            'SELECT cluster, account, "user", raw_shares, norm_shares, raw_usage, effectv_usage, level_fs, fairshare'
            " FROM mart_fairshare WHERE source = 'computed'"
            " AND as_of = (SELECT max(as_of) FROM mart_fairshare WHERE source = 'computed')"
            ' ORDER BY cluster, account, "user"'
        )
        .fetchall()
    )
    _same(rows, truth)
    assert any(r[5] for r in rows)


def test_scheduled_export_is_off_by_default_and_validated():
    from slurmscope.config import ConfigError, load_config
    from slurmscope.scheduler import Service, build_scheduler

    cfg = load_config(None, env={})
    assert cfg.get("lake", "export_dir") == ""
    assert "lake-export" not in {
        j.id for j in build_scheduler(Service(cfg, ":memory:"), {"sacct": 60}).get_jobs()
    }
    on = cfg.with_overrides(lake={"export_dir": "/srv/lake", "export_interval_seconds": 900})
    job = build_scheduler(Service(on, ":memory:"), {"sacct": 60}).get_job("lake-export")
    assert job.trigger.interval.total_seconds() == 900
    env = {"SLURMSCOPE_LAKE_EXPORT_DIR": "ftp://host/x"}
    with pytest.raises(ConfigError, match="lake.export_dir"):
        load_config(None, env=env)
    with pytest.raises(ConfigError, match="lake.export_interval_seconds"):
        load_config(None, env={"SLURMSCOPE_LAKE_EXPORT_INTERVAL_SECONDS": "5"})


def test_serve_export_job_writes_the_lake(demo_run, tmp_path):
    from slurmscope.config import load_config
    from slurmscope.scheduler import Service

    cfg = load_config(None, env={}).with_overrides(lake={"export_dir": str(tmp_path / "lake")})
    Service(cfg, str(demo_run.db_path), clock=lambda: NOW).run_export()
    listed = _listed(tmp_path / "lake")
    assert ("jobs", "simcluster", "2026-11") in listed and ("mart_goodput", "simcluster", "2026-12") in listed
    assert os.path.exists(
        tmp_path / "lake" / "mart_goodput" / "cluster=simcluster" / "month=2026-12" / "data.parquet"
    )
    assert date(2026, 11, 1).strftime("%Y-%m") in {k[2] for k in listed}
