"""A writable copy of the shared demo's database for the pipeline tests that change it and run pipelines."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pytest
from slurmscope.pipelines import runner
from slurmscope.pipelines.params import Params

from slurmscope.config import Config, load_config
from slurmscope.db import connect


@dataclass
class Demo:
    con: duckdb.DuckDBPyConnection
    cfg: Config
    now: datetime
    params: Params


@pytest.fixture
def demo(demo_run, tmp_path):
    """A copy of the demo's database to change, with the config, `now` and full-rebuild params of its run."""
    db = tmp_path / "demo.duckdb"
    shutil.copy(demo_run.db_path, db)
    con = connect(db)
    now = con.execute("SELECT max(run_at) FROM pipeline_runs").fetchone()[0].astimezone(UTC)
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "simcluster"})
    yield Demo(con, cfg, now, runner.pipeline_params(cfg, runner.Window(runner.EPOCH, now, True)))
    con.close()
