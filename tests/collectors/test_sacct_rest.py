"""The slurmrestd jobs source against a local HTTP server replaying the test bed's real slurmrestd answers."""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from slurmscope.collectors import sacct_rest
from slurmscope.collectors.base import get_watermark
from slurmscope.collectors.collect import collect

from slurmscope.config import load_config
from slurmscope.db import connect

BED = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-22.05" / "json"
WINDOW = (BED / "rest_jobs_final.json").read_bytes()


class _Handler(http.server.BaseHTTPRequestHandler):
    requests: list[tuple[str, dict]] = []
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Handler.requests.append((self.path, dict(self.headers)))
        path = urlsplit(self.path).path
        if _Handler.status != 200:
            body, status = b'{"errors": [{"error": "Invalid user token"}]}', _Handler.status
        elif path.endswith("/jobs"):
            body, status = WINDOW, 200
        elif "/job/" in path:
            body, status = (BED / "sacct_jobs_json_final.json").read_bytes(), 200
        else:
            body, status = b"{}", 404
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        conn, _ = super().get_request()
        return conn, ("local", 0)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict]:
    _Handler.requests, _Handler.status = [], 200
    tcp = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    sock = str(tmp_path / "restd.sock")
    unix = _UnixHTTPServer(sock, _Handler)
    for s in (tcp, unix):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{tcp.server_address[1]}", "socket": sock}
    for s in (tcp, unix):
        s.shutdown()
        s.server_close()


def _cfg(**slurm):
    return load_config(env={}).with_overrides(
        slurm={"source": "rest", "timeout_seconds": 5, **slurm},
        collect={"sacct_initial_lookback_seconds": 3600},
    )


def test_window_is_sent_as_relative_times_over_the_unix_socket(server) -> None:
    now = datetime.now(UTC)
    from datetime import timedelta

    data = sacct_rest.fetch(
        _cfg(rest_socket=server["socket"]), (now - timedelta(hours=2), now + timedelta(minutes=5))
    )
    assert data == WINDOW
    path, headers = _Handler.requests[-1]
    q = parse_qs(urlsplit(path).query)
    assert urlsplit(path).path == "/slurmdb/v0.0.38/jobs"
    start, end = q["start_time"][0], q["end_time"][0]
    assert start.startswith("now-") and abs(int(start[4:].removesuffix("seconds")) - 7200) <= 2
    assert end.startswith("now+") and abs(int(end[4:].removesuffix("seconds")) - 300) <= 2
    assert "X-SLURM-USER-TOKEN" not in headers


def test_jwt_headers_and_token_file_read_at_each_call(server, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    cfg = _cfg(rest_url=server["url"], rest_user="slurmscope", rest_token_file=str(token))
    sacct_rest.fetch(cfg, (None, None))
    token.write_text("second\n")
    sacct_rest.fetch(cfg, (None, None))
    got = [(h["X-SLURM-USER-NAME"], h["X-SLURM-USER-TOKEN"]) for _, h in _Handler.requests]
    assert got == [("slurmscope", "first"), ("slurmscope", "second")]


def test_http_error_is_a_failed_run_with_slurm_text(server, tmp_path: Path) -> None:
    _Handler.status = 401
    con = connect(str(tmp_path / "db.duckdb"))
    outs = collect(con, _cfg(rest_url=server["url"]), "sacct", now=datetime.now(UTC))
    assert [(o.collector, o.status) for o in outs] == [("sacct_rest", "error")]
    assert "HTTP 401" in outs[0].error and "Invalid user token" in outs[0].error
    assert get_watermark(con, "default", "sacct_rest") is None
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_unreachable_is_an_error_not_a_crash(tmp_path: Path) -> None:
    con = connect(str(tmp_path / "db.duckdb"))
    outs = collect(con, _cfg(rest_socket=str(tmp_path / "none.sock")), "sacct", now=datetime.now(UTC))
    assert outs[0].status == "error" and "slurmrestd" in outs[0].error


def test_collect_sacct_with_rest_source_loads_the_cli_rows(server, tmp_path: Path) -> None:
    """The same 22.05 moment through the CLI text (ingest) and through slurmrestd (collect): same jobs."""
    from slurmscope.collectors.ingest import ingest_files
    from slurmscope.collectors.sacct import LIVE_DELIMITER

    now = datetime(2026, 12, 3, 17, 35, 9, tzinfo=UTC)
    rest = connect(str(tmp_path / "rest.duckdb"))
    cli = connect(str(tmp_path / "cli.duckdb"))
    cfg = _cfg(rest_socket=server["socket"])
    outs = collect(rest, cfg, "sacct", now=now)
    assert [(o.collector, o.status, o.rows) for o in outs] == [("sacct_rest", "ok", 36)]
    ingest_files(cli, cfg, "sacct", [BED / "sacct_text_final.txt"], delimiter=LIVE_DELIMITER, timezone="UTC")
    cols = (
        "job_id, job_id_raw, submit_time, attempt, state, start_time, end_time, gpus, nodes, cpus, sched_by"
    )
    q = f"SELECT {cols} FROM jobs ORDER BY job_id_raw, submit_time"  # noqa: S608 - fixed text
    assert rest.execute(q).fetchall() == cli.execute(q).fetchall()
    assert get_watermark(rest, "default", "sacct_rest") == now
    assert rest.execute("SELECT count(*) FROM jobs WHERE state = 'PENDING'").fetchone()[0] == 0


def test_pending_jobs_are_asked_for_by_id(server, tmp_path: Path) -> None:
    from slurmscope.collectors.ingest import ingest_files
    from slurmscope.collectors.sacct import LIVE_DELIMITER

    con = connect(str(tmp_path / "db.duckdb"))
    cfg = _cfg(rest_socket=server["socket"]).with_overrides(cluster={"name": "slurmbed"})
    ingest_files(
        con, cfg, "sacct", [BED / "sacct_jobs_text_final.txt"], delimiter=LIVE_DELIMITER, timezone="UTC"
    )
    outs = collect(con, cfg, "sacct", now=datetime(2026, 12, 3, 17, 35, 9, tzinfo=UTC))
    assert outs[0].status == "ok"
    asked = [urlsplit(p).path for p, _ in _Handler.requests if "/job/" in p]
    # 16 was cancelled while held: no window printed it, so its id is a hole between stored jobs
    assert asked == [f"/slurmdb/v0.0.38/job/{i}" for i in (16, 17, 18, 19)]
    rows = con.execute(
        "SELECT job_id_raw, state, reason FROM jobs WHERE state = 'PENDING' ORDER BY 1"
    ).fetchall()
    assert rows == [
        (17, "PENDING", "JobHeldUser"),
        (18, "PENDING", "Dependency"),
        (19, "PENDING", "BeginTime"),
    ]
