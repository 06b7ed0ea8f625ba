"""slurmrestd as the live source of `jobs` and `job_steps` (`slurm.source = "rest"`), instead of the sacct CLI.

Why it is shaped like this:
- A site that runs slurmrestd often has no Slurm client on the monitoring host, or wants one long-lived
  authenticated endpoint instead of munge on every box. The accounting query is the same one: slurmrestd's
  `/slurmdb/<version>/jobs` answers from slurmdbd exactly what `sacct --json` prints (on the test bed its
  `jobs` array is byte-for-byte the same), so the rows come from the same parser (sacct.parse, which
  reads JSON through collectors/slurm_json.py) and load into the same tables with the same key.
- `fetch` is the only I/O and runs outside the write lock (collectors/base.py): HTTP/1.1 to a local unix
  socket (slurmrestd's `rest_auth/local`: the peer's uid authenticates) or to a URL with a JWT (`auth/jwt`:
  the `X-SLURM-USER-NAME` / `X-SLURM-USER-TOKEN` headers, the token read from a file at each call so a
  rotated token is picked up).
- The window is sent as `now-Nseconds` / `now+Nseconds`: slurmrestd parses absolute times in its own zone,
  which the collector cannot know; relative times mean the same instant in any zone.
- Jobs the window hides (held, dependency, future `--begin`) are asked for by id, one `/job/<id>` call
  each (v0.0.38 has no id filter on `/jobs`), merged into one document.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from slurmscope.collectors import sacct

from slurmscope.config import Config

KIND = "sacct_rest"
TABLES = sacct.TABLES
parse = sacct.parse
streams = sacct.streams
parse_stream = sacct.parse_stream
after_upsert = sacct.after_upsert


class _HTTPError(OSError):
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
    conn, prefix = _connection(cfg)
    try:
        conn.request("GET", prefix + path, headers=_headers(cfg))
        resp = conn.getresponse()
        body = resp.read()
    except TimeoutError:
        raise TimeoutError(
            f"slurmrestd {path}: no answer within {cfg.get('slurm', 'timeout_seconds')} s"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        raise OSError(f"slurmrestd {path}: {exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise _HTTPError(f"slurmrestd {path}: HTTP {resp.status} {resp.reason}: {_errors(body)}")
    return body


def _errors(body: bytes) -> str:
    try:
        errs = json.loads(body).get("errors") or []
        return (
            "; ".join(str(e.get("error") or e.get("description") or e) for e in errs) or body[:200].decode()
        )
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", errors="replace")


def _relative(t: datetime, now: datetime) -> str:
    delta = int((t.astimezone(UTC) - now).total_seconds())
    return f"now%2B{delta}seconds" if delta >= 0 else f"now-{-delta}seconds"


def fetch(cfg: Config, window: tuple[datetime | None, datetime | None]) -> bytes:
    """The jobs of the window, as slurmrestd's JSON (what `sacct --json -S -E` prints)."""
    version = cfg.get("slurm", "rest_api_version")
    now = datetime.now(UTC)
    query = []
    if window[0] is not None:
        query.append(f"start_time={_relative(window[0], now)}")
    if window[1] is not None:
        query.append(f"end_time={_relative(window[1], now)}")
    return get(cfg, f"/slurmdb/{version}/jobs" + ("?" + "&".join(query) if query else ""))


def fetch_ids(cfg: Config, job_ids: Iterable[str]) -> bytes:
    """The given jobs (every attempt), one `/job/<id>` call each, as one document."""
    version = cfg.get("slurm", "rest_api_version")
    meta, jobs = None, []
    for jid in sacct.valid_job_ids(job_ids):
        try:
            doc = json.loads(get(cfg, f"/slurmdb/{version}/job/{jid}"))
        except _HTTPError:  # a job slurmdbd no longer knows (purged) must not block the others
            continue
        meta = meta or doc.get("meta")
        jobs += doc.get("jobs") or []
    return (
        json.dumps({"meta": meta or {"plugin": {"type": f"openapi/db{version}"}}, "jobs": jobs}).encode()
        + b"\n"
    )
