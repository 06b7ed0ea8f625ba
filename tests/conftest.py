"""Shared fixtures: temporary databases and the path to the copied real captures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from slurmscope.db import connect
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
