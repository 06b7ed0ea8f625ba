"""slurmrestd as the scheduler statistics source: `collect sdiag` with `slurm.source = "rest"`.

A local server replays the test bed's real `/slurm/v0.0.38/diag` answer, taken between two sdiag texts
that agreed (tests/fixtures/slurm-22.05/json-state/); the row equals the text's but for the fields v0.0.38
does not print (tests/collectors/test_sdiag_json.py names them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from slurmscope.collectors.collect import collect
from slurmscope.collectors.ingest import ingest_files

from slurmscope.config import load_config
from slurmscope.db import connect
from tests.collectors.rest_server import serve
from tests.paths import FIXTURES

STATE = FIXTURES / "slurm-22.05" / "json-state"


def _cfg(sock: str, version: str = "v0.0.38"):
    return load_config(env={}).with_overrides(
        slurm={"source": "rest", "rest_socket": sock, "rest_api_version": version, "timeout_seconds": 5}
    )


def test_collect_sdiag_reads_diag_from_slurmrestd(tmp_path: Path) -> None:
    with serve(tmp_path, {"/slurm/v0.0.38/diag": (STATE / "rest_diag_a.json").read_bytes()}) as (sock, _):
        rest = connect(str(tmp_path / "rest.duckdb"))
        outs = collect(rest, _cfg(sock), "sdiag", now=datetime(2030, 1, 1, tzinfo=UTC))
    assert [(o.collector, o.status, o.rows) for o in outs] == [("sdiag_rest", "ok", 1)]
    cli = connect(str(tmp_path / "cli.duckdb"))
    ingest_files(cli, load_config(env={}), "sdiag", [STATE / "sdiag_text_a.txt"])
    cols = "snapshot_time, data_since, jobs_submitted, jobs_started, main_total_cycles, bf_backfilled_jobs"
    q = f"SELECT {cols}, bf_last_depth FROM sched_stats"
    (r,), (c,) = rest.execute(q).fetchall(), cli.execute(q).fetchall()
    assert r[:-1] == c[:-1]  # the snapshot is slurmctld's req_time, not the collection time (2030)
    assert (r[-1], c[-1]) == (None, 2)  # not in v0.0.38


def test_diag_of_a_version_without_a_capture_fails_naming_it(tmp_path: Path) -> None:
    """slurmrestd 25.11 serves v0.0.41 to v0.0.44; diag is read up to v0.0.41 (the last real capture)."""
    with serve(tmp_path, {}) as (sock, requests):
        con = connect(str(tmp_path / "db.duckdb"))
        [out] = collect(con, _cfg(sock, "v0.0.44"), "sdiag", now=datetime(2030, 1, 1, tzinfo=UTC))
    assert out.status == "error" and requests == []
    assert "diag of data parser v0.0.44 is not read" in out.error and "v0.0.41" in out.error
