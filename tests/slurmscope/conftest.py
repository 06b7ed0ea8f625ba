"""The demo's Parquet lake, exported once for the lake and restore tests, which only read it (a test that
changes a lake copies it first)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from slurmscope import lake

LAKE_NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="session")
def demo_lake(demo_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lake") / "lake"
    con = demo_run.connect()
    try:
        lake.export(con, str(out), now=LAKE_NOW)
    finally:
        con.close()
    return out
