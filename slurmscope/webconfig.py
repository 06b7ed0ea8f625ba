"""TLS and basic auth for slurmscope's HTTP endpoints, from a Prometheus exporter-toolkit web config file.

Shared by the central exporter (`serve`, `demo`) and the node agent (`agent`), which serves spool files
that the central collector acknowledges (deletes): the agent needs the same protection as /metrics.
The client side (`client_context`, `basic_auth_header`) is what `collect nvml` uses to reach agents.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class WebConfig:
    """The subset of the Prometheus exporter-toolkit web config file that slurmscope honours."""

    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash


def load_web_config(path: str | Path) -> WebConfig:
    """Parse an exporter-toolkit web config (tls_server_config, basic_auth_users); paths relative to it."""
    import yaml

    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: web config must be a mapping")
    unknown = set(data) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise ValueError(f"{path}: unsupported web config keys {sorted(unknown)}")
    tls = data.get("tls_server_config") or {}

    def rel(key: str) -> Path | None:
        value = tls.get(key)
        if not value:
            return None
        p = Path(value)
        return p if p.is_absolute() else path.parent / p

    cert, key = rel("cert_file"), rel("key_file")
    if (cert is None) != (key is None):
        raise ValueError(f"{path}: tls_server_config needs both cert_file and key_file")
    users = {str(u): str(h).encode() for u, h in (data.get("basic_auth_users") or {}).items()}
    for user, hashed in users.items():
        if not hashed.startswith((b"$2a$", b"$2b$", b"$2y$")):
            raise ValueError(f"{path}: basic_auth_users.{user} must be a bcrypt hash")
    return WebConfig(cert_file=cert, key_file=key, client_ca_file=rel("client_ca_file"), users=users)


class BasicAuth:
    """bcrypt checks cost ~100 ms by design; remember the digests of credentials that passed."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        import bcrypt

        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        digest = hashlib.sha256(user.encode() + b"\0" + password.encode() + b"\0" + hashed).digest()
        with self._lock:
            if any(hmac.compare_digest(digest, d) for d in self._ok):
                return True
        if bcrypt.checkpw(password.encode(), hashed):
            with self._lock:
                self._ok.add(digest)
            return True
        return False


def server_context(wc: WebConfig) -> ssl.SSLContext | None:
    """The TLS context a server wraps its socket in, or None when the web config names no certificate."""
    if wc.cert_file is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(wc.cert_file), str(wc.key_file))
    if wc.client_ca_file is not None:
        ctx.load_verify_locations(str(wc.client_ca_file))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(ca_file: str | Path | None) -> ssl.SSLContext:
    """Verifying client context: the system trust store, or only `ca_file` when one is given."""
    ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def basic_auth_header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
