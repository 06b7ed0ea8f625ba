"""Shared fixtures: temporary databases and the path to the copied real captures."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

from slurmscope.db import connect
from tests.cluster_pair import cluster_pair  # noqa: F401  (two clusters from the demo, built once per session)
from tests.demo_fixture import demo_run  # noqa: F401  (the one shared small demo, built once per session)

FIXTURES = Path(__file__).parent / "fixtures"

settings.register_profile("ci", max_examples=2000, deadline=None)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile("fuzz", max_examples=100_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture
def con(db_path: Path):
    c = connect(db_path)
    yield c
    c.close()


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def tls_web_config(tmp_path: Path) -> Path:
    """An exporter-toolkit web config requiring TLS and basic auth (user `prom`, password `s3cret`).

    The self-signed certificate (cert.pem beside the file) names localhost and 127.0.0.1, so a verifying
    client that trusts it can connect.
    """
    import bcrypt

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(tmp_path / "key.pem"),
            "-out",
            str(tmp_path / "cert.pem"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
        f"basic_auth_users:\n  prom: '{hashed}'\n",
        encoding="utf-8",
    )
    return web
