"""slurmrestd as the queue source: `collect squeue` with `slurm.source = "rest"` stores the CLI's rows, and
sacct's by-id lookups read them as they read the CLI's.

A local server replays the test bed's real `/slurm/v0.0.38/jobs` answer; the CLI side is the live squeue
text captured in the same moment (tests/fixtures/slurm-22.05/json-state/).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from slurmscope.collectors import sacct
from slurmscope.collectors.collect import collect
from slurmscope.collectors.ingest import ingest_files

from slurmscope.config import load_config
from slurmscope.db import connect
from tests.collectors.rest_server import serve
from tests.paths import FIXTURES

STATE = FIXTURES / "slurm-22.05" / "json-state"
AT = datetime(2026, 12, 4, 14, 54, 50, tzinfo=UTC)


def _cfg(sock: str):
    return load_config(env={}).with_overrides(
        slurm={"source": "rest", "rest_socket": sock, "timeout_seconds": 5}, cluster={"name": "slurmbed"}
    )


def test_collect_squeue_reads_jobs_from_slurmrestd_into_the_cli_rows(tmp_path: Path) -> None:
    routes = {"/slurm/v0.0.38/jobs": (STATE / "rest_slurm_jobs_a.json").read_bytes()}
    with serve(tmp_path, routes) as (sock, requests):
        rest = connect(str(tmp_path / "rest.duckdb"))
        outs = collect(rest, _cfg(sock), "squeue", now=AT)
    assert [(o.collector, o.status, o.rows) for o in outs] == [("squeue_rest", "ok", 16)]
    assert [path for path, _ in requests] == ["/slurm/v0.0.38/jobs"]
    cli = connect(str(tmp_path / "cli.duckdb"))
    cfg = load_config(env={}).with_overrides(cluster={"name": "slurmbed"})
    ingest_files(cli, cfg, "squeue", [STATE / "squeue_text_a.txt"], timezone="UTC", at=AT)
    q = "SELECT * FROM pending_jobs ORDER BY job_id"
    assert rest.execute(q).fetchall() == cli.execute(q).fetchall()
    # the jobs sacct asks for by id (held, dependency, begin-later, ...) are the same from either source
    assert sacct.pending_job_ids(rest, "slurmbed") == sacct.pending_job_ids(cli, "slurmbed")
    assert {"9", "10", "11"} <= set(sacct.pending_job_ids(rest, "slurmbed"))


def test_slurmrestd_errors_fail_the_run_with_slurm_text(tmp_path: Path) -> None:
    with serve(tmp_path, {}) as (sock, _):
        con = connect(str(tmp_path / "db.duckdb"))
        [out] = collect(con, _cfg(sock), "squeue", now=AT)
    assert out.status == "error" and "HTTP 404" in out.error and "Unable find requested URL" in out.error
