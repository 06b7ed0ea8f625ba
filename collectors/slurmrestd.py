"""The slurmrestd client every REST source shares: one authenticated GET, over a unix socket or a URL.

Why it is shaped like this:
- A site that runs slurmrestd often has no Slurm client on the monitoring host, or wants one long-lived
  authenticated endpoint instead of munge on every box. The REST sources (`slurm.source = "rest"`:
  collectors/sacct_rest.py, sinfo_rest.py, squeue_rest.py, sdiag_rest.py) differ only in the path they ask
  for; the connection, the authentication and the error text are here, once.
- HTTP/1.1 to a local unix socket (slurmrestd's `rest_auth/local`: the peer's uid authenticates) or to a
  URL with a JWT (`auth/jwt`: the `X-SLURM-USER-NAME` / `X-SLURM-USER-TOKEN` headers, the token read from a
  file at each call so a rotated token is picked up), as https://slurm.schedmd.com/rest.html (22.05)
  describes both.
- Every failure is an OSError (TimeoutError past `slurm.timeout_seconds`) that names the path, the HTTP
  status and Slurm's own `errors` text, so a collector run records why and `doctor` can say it.
- A connection the server resets or drops before answering is retried (GET is idempotent), up to
  `ATTEMPTS` times in all: slurmrestd 22.05 resets a fresh unix-socket connection now and then under a
  run of short requests (its log says `_handle_poll_event: ... connection invalid`), and one reset among
  the hundreds of by-id requests of a sacct run would otherwise fail the whole run. Timeouts, refusals
  and HTTP errors are not retried: they say something about the server, not about one connection.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

from slurmscope.config import Config

ATTEMPTS = 3
_RETRY_PAUSE_S = 0.1


class HTTPError(OSError):
    """slurmrestd answered, with a status other than 200."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def _connection(cfg: Config) -> tuple[http.client.HTTPConnection, str]:
    timeout = float(cfg.get("slurm", "timeout_seconds"))
    sock = cfg.get("slurm", "rest_socket")
    if sock:
        return _UnixConnection(sock, timeout), ""
    url = cfg.get("slurm", "rest_url")
    if not url:
        raise OSError("slurm.source = 'rest' needs slurm.rest_socket or slurm.rest_url")
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname or "localhost", parts.port, timeout=timeout), parts.path.rstrip("/")


def _headers(cfg: Config) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    user, token_file = cfg.get("slurm", "rest_user"), cfg.get("slurm", "rest_token_file")
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise OSError(f"slurm.rest_token_file {token_file}: {exc.strerror or exc}") from None
        headers["X-SLURM-USER-TOKEN"] = token
        if user:
            headers["X-SLURM-USER-NAME"] = user
    return headers


def get(cfg: Config, path: str) -> bytes:
    """One GET to slurmrestd; OSError (TimeoutError for a timeout) names the status and Slurm's error text."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            status, reason, body = _get_once(cfg, path)
            break
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
            if attempt == ATTEMPTS:
                raise OSError(f"slurmrestd {path}: {exc} ({ATTEMPTS} attempts)") from None
            time.sleep(_RETRY_PAUSE_S * attempt)
        except TimeoutError:
            raise TimeoutError(
                f"slurmrestd {path}: no answer within {cfg.get('slurm', 'timeout_seconds')} s"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise OSError(f"slurmrestd {path}: {exc}") from None
    if status != 200:
        raise HTTPError(f"slurmrestd {path}: HTTP {status} {reason}: {_errors(body)}")
    return body


def _get_once(cfg: Config, path: str) -> tuple[int, str, bytes]:
    conn, prefix = _connection(cfg)
    try:
        conn.request("GET", prefix + path, headers=_headers(cfg))
        resp = conn.getresponse()
        return resp.status, resp.reason, resp.read()
    finally:
        conn.close()


def _errors(body: bytes) -> str:
    try:
        errs = json.loads(body).get("errors") or []
        return (
            "; ".join(str(e.get("error") or e.get("description") or e) for e in errs) or body[:200].decode()
        )
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", errors="replace")


def api_version(cfg: Config, read: tuple[str, ...], what: str) -> str:
    """`slurm.rest_api_version`, or OSError when this source does not read that version's documents.

    A version whose documents were never checked against a real response would store wrong or empty
    values; the run fails instead, naming the version and the ones that are read.
    """
    version = cfg.get("slurm", "rest_api_version")
    if version not in read:
        raise OSError(
            f"slurm.rest_api_version {version}: slurmrestd's {what} of data parser {version} is not read "
            f"(read: {', '.join(read)}); set slurm.rest_api_version to one of those that your slurmrestd "
            "serves (docs/collectors.md, JSON and slurmrestd)"
        )
    return version
