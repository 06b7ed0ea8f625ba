"""The slurmrestd client's retry of a reset connection, against a real unix-socket server that resets.

slurmrestd 22.05 on the test bed reset one fresh connection among a sacct run's by-id requests
(`[Errno 104] Connection reset by peer`, its log saying `_handle_poll_event: ... connection invalid`).
The server here resets the same way: it closes a connection whose request it has not read, which Linux
turns into ECONNRESET for the client.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from slurmscope.collectors import slurmrestd

from slurmscope.config import load_config

BODY = b'{"jobs": []}'


@contextmanager
def _server(tmp_path: Path, resets: int, status: int = 200) -> Iterator[tuple[str, list[str]]]:
    """A server that resets the first `resets` connections and answers the rest; yields (socket, log)."""
    path = str(tmp_path / "restd.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)
    log: list[str] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                if len(log) < resets:
                    log.append("reset")
                    time.sleep(0.05)
                    continue
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                log.append(data.split(b"\r\n", 1)[0].decode())
                reason = "OK" if status == 200 else "Internal Server Error"
                body = BODY if status == 200 else b'{"errors": [{"error": "slurmdbd down"}]}'
                conn.sendall(
                    f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
                )

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield path, log
    finally:
        stop.set()
        srv.shutdown(socket.SHUT_RDWR)
        srv.close()
        t.join(5)


def _cfg(sock: str):
    return load_config(env={}).with_overrides(
        slurm={"source": "rest", "rest_socket": sock, "timeout_seconds": 5}
    )


def test_a_reset_connection_is_retried_and_the_answer_kept(tmp_path: Path) -> None:
    with _server(tmp_path, resets=slurmrestd.ATTEMPTS - 1) as (sock, log):
        assert slurmrestd.get(_cfg(sock), "/slurmdb/v0.0.38/job/15") == BODY
    assert log == ["reset"] * (slurmrestd.ATTEMPTS - 1) + ["GET /slurmdb/v0.0.38/job/15 HTTP/1.1"]


def test_resets_past_the_attempts_fail_naming_path_and_attempts(tmp_path: Path) -> None:
    with _server(tmp_path, resets=slurmrestd.ATTEMPTS + 5) as (sock, log):
        with pytest.raises(
            OSError, match=rf"slurmrestd /slurmdb/v0.0.38/job/15: .*\({slurmrestd.ATTEMPTS} attempts\)"
        ):
            slurmrestd.get(_cfg(sock), "/slurmdb/v0.0.38/job/15")
    assert log == ["reset"] * slurmrestd.ATTEMPTS


def test_an_http_error_is_not_retried(tmp_path: Path) -> None:
    with _server(tmp_path, resets=0, status=500) as (sock, log):
        with pytest.raises(slurmrestd.HTTPError, match="HTTP 500 Internal Server Error: slurmdbd down"):
            slurmrestd.get(_cfg(sock), "/slurmdb/v0.0.38/jobs")
    assert len(log) == 1


def test_a_missing_socket_is_not_retried(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"slurmrestd /slurm/v0.0.38/diag: \[Errno 2\]"):
        slurmrestd.get(_cfg(str(tmp_path / "none.sock")), "/slurm/v0.0.38/diag")
