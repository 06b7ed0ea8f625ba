"""slurmrestd as the nodes source: `collect sinfo` with `slurm.source = "rest"` stores the CLI's rows.

A local server replays the test bed's real `/slurm/v0.0.38/nodes` answer; the CLI side is the live sinfo
text captured in the same moment (tests/fixtures/slurm-22.05/json-state/, tests/slurmbed/capture_state_json.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from slurmscope.collectors import sinfo_rest
from slurmscope.collectors.collect import collect
from slurmscope.collectors.ingest import ingest_files

from slurmscope.config import load_config
from slurmscope.db import connect
from tests.collectors.rest_server import serve
from tests.paths import FIXTURES

STATE = FIXTURES / "slurm-22.05" / "json-state"
AT = datetime(2026, 12, 4, 14, 54, 50, tzinfo=UTC)


def _cfg(sock: str, version: str = "v0.0.38"):
    return load_config(env={}).with_overrides(
        slurm={"source": "rest", "rest_socket": sock, "rest_api_version": version, "timeout_seconds": 5}
    )


def test_collect_sinfo_reads_nodes_from_slurmrestd_into_the_cli_rows(tmp_path: Path) -> None:
    routes = {"/slurm/v0.0.38/nodes": (STATE / "rest_nodes_a.json").read_bytes()}
    with serve(tmp_path, routes) as (sock, requests):
        rest = connect(str(tmp_path / "rest.duckdb"))
        outs = collect(rest, _cfg(sock), "sinfo", now=AT)
    assert [(o.collector, o.status, o.rows) for o in outs] == [("sinfo_rest", "ok", 9)]
    assert [path for path, _ in requests] == ["/slurm/v0.0.38/nodes"]  # one call: partitions come with it
    cli = connect(str(tmp_path / "cli.duckdb"))
    ingest_files(cli, load_config(env={}), "sinfo", [STATE / "sinfo_text_a.txt"], timezone="UTC", at=AT)
    q = "SELECT * FROM node_states ORDER BY node, partition"
    assert rest.execute(q).fetchall() == cli.execute(q).fetchall()
    run = rest.execute("SELECT collector, status, source FROM collector_runs").fetchall()
    assert run == [("sinfo_rest", "ok", "live")]


def test_a_version_not_read_fails_the_run_naming_it(tmp_path: Path) -> None:
    with serve(tmp_path, {}) as (sock, requests):
        con = connect(str(tmp_path / "db.duckdb"))
        [out] = collect(con, _cfg(sock, "v0.0.39"), "sinfo", now=AT)
    assert out.status == "error" and "v0.0.39" in out.error and "nodes" in out.error
    assert requests == []  # refused before asking
    assert con.execute("SELECT count(*) FROM node_states").fetchone()[0] == 0


def test_fetch_is_the_nodes_document(tmp_path: Path) -> None:
    body = (STATE / "rest_nodes_b.json").read_bytes()
    with serve(tmp_path, {"/slurm/v0.0.44/nodes": body}) as (sock, _):
        assert sinfo_rest.fetch(_cfg(sock, "v0.0.44"), (None, None)) == body
