"""Foreseeable faults end in one line and a non-zero exit, never a traceback (issues 16, 17 and 19).

Config and price-book errors run the real `slurmscope` command in a subprocess: a traceback logged by the
pipeline runner would reach stderr there, where click's test runner cannot see it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.db import connect

SLURMSCOPE = [sys.executable, "-m", "slurmscope.cli"]


@pytest.fixture(autouse=True)
def _no_local_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./slurmscope.toml from the checkout
    for var in ("SLURMSCOPE_CONFIG", "SLURMSCOPE_DB"):
        monkeypatch.delenv(var, raising=False)


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURMSCOPE_")}
    return subprocess.run(
        [*SLURMSCOPE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The single `Error: ...` line click prints; fails on a traceback or extra lines."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return lines[0]


# --- config errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[billing.rates]\nh100 = { purchase = 15000 }\n",
            "unknown key 'billing.rates.h100.purchase'; did you mean purchase_usd?",
        ),
        ('[billing.rates]\nh100 = "cheap"\n', "key 'billing.rates.h100' expects a $/GPU-hour number"),
        ("[billing.rates]\nh100 = { power_kw = 0.7 }\n", "needs rate (a $/GPU-hour) or purchase_usd"),
        ("[exporter]\nport = 99999\n", "key 'exporter.port' expects a TCP port (an integer from 1 to 65535)"),
        ("[nvml]\nport = true\n", "key 'nvml.port' expects a TCP port"),
        ('[exporter]\naddress = "head node"\n', "key 'exporter.address' expects an IP address or host name"),
    ],
)
def test_a_config_error_is_one_line_naming_file_and_key(tmp_path, text, message):
    cfg = tmp_path / "site.toml"
    cfg.write_text(text)
    line = one_line_error(run("--config", str(cfg), "status", cwd=tmp_path))
    assert line.startswith(f"Error: {cfg}: ") and message in line


def _db_with_jobs(path: Path, gpu_types: list[str]) -> None:
    con = connect(path)
    for i, gpu_type in enumerate(gpu_types, start=1):
        con.execute(
            'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", qos,'
            " state, start_time, end_time, gpus, gpu_type)"
            " VALUES ('default', ?, ?, ?, 'a', 'u', 'gpu', 'normal', 'COMPLETED', ?, ?, 8, ?)",
            [
                str(i),
                i,
                datetime(2026, 2, 1, 9, tzinfo=timezone.utc),
                datetime(2026, 2, 1, 10, tzinfo=timezone.utc),
                datetime(2026, 2, 1, 12, tzinfo=timezone.utc),
                gpu_type,
            ],
        )
    con.close()


def test_a_gpu_model_without_a_rate_fails_the_pipeline_run_in_one_line(tmp_path):
    db = tmp_path / "s.duckdb"
    _db_with_jobs(db, ["h100", "a100", "l40s"])
    cfg = tmp_path / "site.toml"
    cfg.write_text("[billing.rates]\nh100 = 2.5\n")
    args = ["--config", str(cfg), "--db", str(db), "pipelines", "run", "--now", "2026-02-02T00:00:00"]
    line = one_line_error(run(*args, cwd=tmp_path))
    assert "no rate for GPU model(s) a100, l40s seen in the data" in line
    assert "add billing.rates.a100, billing.rates.l40s (or billing.rates.default)" in line
    con = connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM mart_cost_daily").fetchone()[0] == 0  # nothing half-charged
    con.close()

    cfg.write_text("[billing.rates]\nh100 = 2.5\ndefault = 1.0\n")
    proc = run(*args, "--only", "cost", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    con = connect(db, read_only=True)
    rates = con.execute(
        "SELECT gpu_model, sum(cost_usd) / sum(gpu_seconds) * 3600 FROM mart_cost_daily GROUP BY 1 ORDER BY 1"
    ).fetchall()
    con.close()
    assert rates == [("a100", pytest.approx(1.0)), ("h100", pytest.approx(2.5)), ("l40s", pytest.approx(1.0))]


# --- missing database, report month ---------------------------------------------------------------------


def test_pipelines_run_refuses_a_missing_database_and_creates_none(tmp_path):
    missing = tmp_path / "typo.duckdb"
    res = CliRunner().invoke(main, ["--db", str(missing), "pipelines", "run"])
    assert res.exit_code == 1
    assert (
        res.output.strip()
        == f"Error: database {missing} does not exist (run a collector or `slurmscope demo` first)"
    )
    assert not missing.exists()


def test_report_for_a_month_without_data_fails_in_one_line(tmp_path):
    db = tmp_path / "r.duckdb"
    _db_with_jobs(db, ["h100"])
    res = CliRunner().invoke(
        main, ["--db", str(db), "report", "--month", "2099-01", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 1
    assert res.output.strip().startswith("Error: no data for 2099-01 in cluster 'default'")
    assert "\n" not in res.output.strip()
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("month", ["13", "2026-13", "2026-00", "Nov"])
def test_report_month_out_of_range_is_a_usage_error(tmp_path, month):
    db = tmp_path / "r.duckdb"
    connect(db).close()
    res = CliRunner().invoke(
        main, ["--db", str(db), "report", "--month", month, "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2
    assert (
        f"Invalid value for '--month': expects YYYY-MM with a month from 01 to 12, got '{month}'"
        in res.output
    )


# --- ports ------------------------------------------------------------------------------------------------


@pytest.fixture
def busy_port():
    """A port something is listening on (127.0.0.1)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def test_demo_checks_its_port_before_building(tmp_path, busy_port):
    out = tmp_path / "demo"
    t0 = time.monotonic()
    res = CliRunner().invoke(
        main, ["--db", str(tmp_path / "d.duckdb"), "demo", "--port", str(busy_port), "--out", str(out)]
    )
    assert res.exit_code == 1, res.output
    assert res.output.startswith(
        f"Error: port {busy_port} on 127.0.0.1 is in use: Address already in use; pass --port"
    )
    assert time.monotonic() - t0 < 5 and not out.exists() and not (tmp_path / "d.duckdb").exists()


def test_demo_checks_the_agent_port_too(tmp_path, busy_port):
    res = CliRunner().invoke(main, ["demo", "--port", str(busy_port - 1), "--out", str(tmp_path / "demo")])
    if res.output.startswith(f"Error: port {busy_port - 1} "):
        pytest.skip("the port below the busy one is taken as well")
    assert res.exit_code == 1
    assert res.output.startswith(f"Error: port {busy_port} on 127.0.0.1 is in use")
    assert "the demo's node agent uses --port + 1; pass another --port" in res.output


def test_serve_on_a_busy_port_is_one_line(tmp_path, busy_port):
    res = CliRunner().invoke(main, ["--db", str(tmp_path / "s.duckdb"), "serve", "--port", str(busy_port)])
    assert res.exit_code == 1
    assert res.output.strip() == (
        f"Error: port {busy_port} on 127.0.0.1 is in use: Address already in use; "
        "pass --port or --address, or set exporter.port / exporter.address"
    )


def test_serve_on_an_address_not_on_this_host_is_one_line(tmp_path):
    res = CliRunner().invoke(main, ["serve", "--address", "192.0.2.1", "--port", "9400"])  # TEST-NET-1
    assert res.exit_code == 1
    assert res.output.startswith("Error: cannot listen on 192.0.2.1:9400: Cannot assign requested address;")


@pytest.mark.parametrize(("command", "port"), [("serve", "99999"), ("serve", "0"), ("demo", "65535")])
def test_out_of_range_port_options_are_usage_errors(tmp_path, command, port):
    res = CliRunner().invoke(main, [command, "--port", port])
    assert res.exit_code == 2 and "Invalid value for '--port'" in res.output


# --- query is read-only ---------------------------------------------------------------------------------


@pytest.fixture
def query_db(tmp_path):
    db = tmp_path / "q.duckdb"
    con = connect(db)
    con.execute("INSERT INTO watermarks (cluster, collector, position) VALUES ('c', 'sacct', now())")
    con.close()
    (tmp_path / "lake").mkdir()
    (tmp_path / "lake" / "x.csv").write_text("a\n1\n")
    return db


def query(db: Path, sql: str):
    return CliRunner().invoke(main, ["--db", str(db), "query", sql, "--format", "csv"])


@pytest.mark.parametrize(
    "sql",
    [
        "COPY watermarks TO 'out.parquet' (FORMAT parquet)",
        "COPY (SELECT 1 AS a) TO 'out.csv'",
        "SELECT 1; COPY watermarks TO 'out.csv'",
        "EXPORT DATABASE 'exported'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_parquet('lake/*.parquet')",
        "SELECT * FROM 'lake/x.csv'",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_json_auto('https://example.com/x.json')",
        "ATTACH 'other.duckdb' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        "DELETE FROM watermarks",
    ],
)
def test_query_refuses_writes_host_files_extensions_and_network(query_db, tmp_path, sql):
    res = query(query_db, sql)
    assert res.exit_code == 1, res.output
    line = res.output.strip()
    assert "\n" not in line
    assert line.startswith("Error: query is read-only: ") and line.endswith("; use `slurmscope export`")
    assert not any(
        (tmp_path / name).exists() for name in ("out.parquet", "out.csv", "exported", "other.duckdb")
    )


def test_query_still_reads_the_database(query_db):
    res = query(
        query_db,
        "SELECT count(*) AS n, max(position) > TIMESTAMPTZ '2020-01-01 00:00:00+00' AS recent,"
        " '{\"a\": 1}'::JSON ->> 'a' AS j, strftime(DATE '2026-01-31', '%Y-%m') AS m FROM watermarks",
    )
    assert res.exit_code == 0, res.output
    assert res.output == "n,recent,j,m\n1,True,1,2026-01\n"


def test_bad_sql_is_a_one_line_query_error(query_db):
    res = query(query_db, "SELECT * FROM no_such_table")
    assert res.exit_code == 1
    assert res.output.startswith(
        "Error: query failed: Catalog Error: Table with name no_such_table does not exist"
    )
    assert "\n" not in res.output.strip()


# --- files and databases ---------------------------------------------------------------------------------


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe[billing]\n")
    err = one_line_error(run("--config", "bad.toml", "status", cwd=tmp_path))
    assert err.startswith("Error: bad.toml: not UTF-8 text"), err


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["query", "SELECT 1"],
        ["report", "--month", "2026-11", "--out", "r"],
        ["export", "--out", "lake"],
        ["pipelines", "run"],
        ["job", "12"],
    ],
    ids=lambda a: a[0],
)
def test_a_reading_command_refuses_a_missing_database_and_creates_none(tmp_path, args):
    """A mistyped --db must not give an empty database and a run that succeeds on nothing."""
    err = one_line_error(run("--db", "typo.duckdb", *args, cwd=tmp_path))
    assert err == "Error: database typo.duckdb does not exist (run a collector or `slurmscope demo` first)"
    assert not (tmp_path / "typo.duckdb").exists()


@pytest.mark.parametrize(
    "args",
    [["dashboards", "build"], ["alerts", "build"], ["simulate", "--gpus", "8", "--days", "1", "--seed", "1"]],
)
def test_an_output_directory_that_cannot_be_made_is_one_line(tmp_path, args):
    (tmp_path / "afile").write_text("")
    err = one_line_error(run(*args, "--out", "afile/sub", cwd=tmp_path))
    assert "afile/sub" in err and "Not a directory" in err, err


def test_a_report_directory_that_cannot_be_made_is_one_line(tmp_path, demo_run):
    (tmp_path / "afile").write_text("")
    month = demo_run.result.report_month
    err = one_line_error(
        run(
            "--db",
            str(demo_run.db_path),
            "--cluster",
            "simcluster",
            "report",
            "--month",
            month,
            "--out",
            "afile/r",
            cwd=tmp_path,
        )
    )
    assert "afile/r" in err and "Not a directory" in err, err


def test_agent_port_out_of_range_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(main, ["agent", "--port", "99999"])
    assert res.exit_code == 2 and "Invalid value for '--port'" in res.output
