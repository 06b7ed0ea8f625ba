"""The agent's spool endpoints delete data on POST: with a web config they need TLS and basic auth.

A real HTTPS client (urllib with a verifying context) against the agent's server on loopback, and the
central `collect nvml` with the configured credentials and CA, end to end: listing, download, load, ack.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from slurmscope.agent.http import start_http
from slurmscope.agent.spool import list_spool
from slurmscope.collectors.collect import collect
from slurmscope.collectors.nvml import AgentClient

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.webconfig import basic_auth_header, client_context
from tests.agent.test_agent import Env


@pytest.fixture
def tls(tmp_path, tls_web_config):
    (tmp_path / "password").write_text("s3cret\n", encoding="utf-8")
    return tls_web_config


def _status(url: str, *, method: str = "GET", auth: str | None = None, ca=None) -> int:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=10, context=client_context(ca)) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_without_credentials_nothing_is_listed_downloaded_or_deleted(tmp_path, tls):
    env = Env(tmp_path, [{"model": "h100", "state": "load", "count": 2}], cluster="c1", rotate=3600)
    env.run(3700)  # one closed hourly file
    (name,) = [f["name"] for f in list_spool(env.spool)]
    server = start_http(env.agent, "127.0.0.1", 0, tls)
    base = f"https://localhost:{server.server_address[1]}"
    ca = tmp_path / "cert.pem"
    wrong = basic_auth_header("prom", "guess")
    try:
        for path in ("/metrics", "/spool", f"/spool/{name}"):
            assert _status(base + path, ca=ca) == 401
            assert _status(base + path, ca=ca, auth=wrong) == 401
        assert _status(f"{base}/spool/{name}/ack?sha256={'0' * 64}", method="POST", ca=ca) == 401
        assert (env.spool / name).exists()
        assert _status(f"{base}/healthz", ca=ca) == 200  # liveness probes need no secret
        assert _status(f"{base}/metrics", ca=ca, auth=basic_auth_header("prom", "s3cret")) == 200
        with pytest.raises(
            urllib.error.URLError
        ):  # the system trust store does not know the self-signed cert
            _status(f"{base}/metrics")
    finally:
        server.shutdown()
        server.server_close()


def test_central_collection_with_the_configured_credentials_loads_and_acks(tmp_path, tls):
    env = Env(tmp_path, [{"model": "h100", "state": "load", "count": 2}], cluster="c1", rotate=3600)
    env.run(3700)
    server = start_http(env.agent, "127.0.0.1", 0, tls)
    url = f"https://localhost:{server.server_address[1]}"
    con = connect(tmp_path / "db.duckdb")
    try:
        bare = load_config(env={}).with_overrides(
            cluster={"name": "c1"}, nvml={"agents": [url], "agent_ca_file": str(tmp_path / "cert.pem")}
        )
        [out] = collect(con, bare, "nvml")
        assert out.status == "error" and "HTTP Error 401" in out.error
        cfg = bare.with_overrides(
            nvml={"agent_username": "prom", "agent_password_file": str(tmp_path / "password")}
        )
        [out] = collect(con, cfg, "nvml")
        assert out.status == "ok" and out.rows > 0
        assert list_spool(env.spool) == []  # acknowledged, so the agent deleted it
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] > 0
    finally:
        con.close()
        server.shutdown()
        server.server_close()


def test_half_configured_credentials_are_a_clear_error(tmp_path):
    cfg = load_config(env={}).with_overrides(nvml={"agent_username": "central"})
    with pytest.raises(ValueError, match="agent_password_file"):
        AgentClient.from_config(cfg)
