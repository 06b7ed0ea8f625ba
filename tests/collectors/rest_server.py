"""A local slurmrestd stand-in for the REST sources' tests: replays recorded answers over a unix socket.

`serve(tmp_path, routes)` answers GET <path> with routes[path] (bytes, status 200) and anything else with
404 and a Slurm-shaped `errors` body; every request (path and headers) is recorded in `.requests`.
"""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        conn, _ = super().get_request()
        return conn, ("local", 0)


@contextmanager
def serve(tmp_path: Path, routes: dict[str, bytes]) -> Iterator[tuple[str, list]]:
    """(socket path, requests) of a server that answers `routes`; stopped on exit."""
    requests: list[tuple[str, dict]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            requests.append((self.path, dict(self.headers)))
            body = routes.get(urlsplit(self.path).path)
            status = 200 if body is not None else 404
            if body is None:
                body = b'{"errors": [{"error": "Unable find requested URL"}]}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    sock = str(tmp_path / "restd.sock")
    server = _UnixHTTPServer(sock, Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield sock, requests
    finally:
        server.shutdown()
        server.server_close()
