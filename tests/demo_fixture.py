"""One small shared demo (64 GPUs, 3 days, --no-serve) for every end-to-end test, built once per session.

tests/conftest.py imports the fixture, so any test just names it (do not import `demo_run` into a test
module: pytest would register a second session fixture there and build the demo twice):

    def test_something(demo_run):
        con = demo_run.connect()          # read-only DuckDB connection to the demo database
        events = demo_run.events()        # the simulator's ground truth (events.jsonl), parsed
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

DEMO_GPUS, DEMO_DAYS, DEMO_SEED = 64, 3, 7


@dataclass
class DemoRun:
    out_dir: Path
    db_path: Path
    result: object  # slurmscope.demo.DemoResult

    @property
    def sim_dir(self) -> Path:
        return self.out_dir / "sim"

    def connect(self):
        from slurmscope.db import connect

        return connect(self.db_path, read_only=True)

    def events(self) -> list[dict]:
        with open(self.sim_dir / "events.jsonl", encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> DemoRun:
    from slurmscope.config import load_config
    from slurmscope.demo import Progress, run_demo

    base = tmp_path_factory.mktemp("demo")
    db = base / "demo.duckdb"
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "simcluster"})
    result = run_demo(
        cfg,
        str(db),
        gpus=DEMO_GPUS,
        days=DEMO_DAYS,
        seed=DEMO_SEED,
        port=0,
        out_dir=base / "out",
        serve=False,
        progress=Progress(stream=io.StringIO()),
    )
    return DemoRun(out_dir=base / "out", db_path=db, result=result)
