"""The collector registry is the one list of kinds: the CLI, serve's schedule and the fuzzers derive from it,
and every registered module keeps the collector contract (collectors/base.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from slurmscope.collectors.base import TableSpec
from slurmscope.collectors.registry import COLLECTORS, collector

from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.scheduler import Service, build_scheduler
from tests.paths import ROOT

ROOT = ROOT
KINDS = [c.kind for c in COLLECTORS]


def test_kinds_are_unique_and_sacct_runs_after_squeue():
    assert len(set(KINDS)) == len(KINDS)
    assert KINDS.index("squeue") < KINDS.index("sacct")
    assert collector("sdiag").kind == "sdiag"
    with pytest.raises(ValueError, match="unknown collector"):
        collector("bogus")


def test_cli_choices_are_the_registry_kinds():
    assert list(main.commands["ingest"].params[0].type.choices) == [
        c.kind for c in COLLECTORS if c.ingestable
    ]
    assert list(main.commands["collect"].params[0].type.choices) == [c.kind for c in COLLECTORS if c.live] + [
        "all"
    ]


def test_importing_the_cli_imports_no_collector():
    """`slurmscope agent` runs on every GPU node: the CLI reads the registry only when a kind is needed."""
    code = "import sys, slurmscope.cli; print(sorted(m for m in ('polars', 'duckdb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("source", ["cli", "rest"])
def test_serve_schedules_every_live_collector_at_its_interval(tmp_path, source):
    cfg = load_config(env={}).with_overrides(slurm={"source": source})
    sched = build_scheduler(Service(config=cfg, db_path=str(tmp_path / "x.duckdb")))
    sched.start(paused=True)
    jobs = {j.id: j for j in sched.get_jobs() if j.id.startswith("collect-")}
    sched.shutdown(wait=False)
    # jobs, nodes, the queue and diag are read once: by their command (cli) or slurmrestd (rest), never both
    rest_kinds = {"sacct_rest", "sinfo_rest", "squeue_rest", "sdiag_rest"}
    assert {c.kind for c in COLLECTORS if c.replaces} == rest_kinds
    replaced = {k.removesuffix("_rest") for k in rest_kinds} if source == "rest" else rest_kinds
    assert {k: j.trigger.interval.total_seconds() for k, j in jobs.items()} == {
        f"collect-{c.kind}": c.interval_seconds for c in COLLECTORS if c.live and c.kind not in replaced
    }


def test_serve_pulls_the_spool_just_after_the_agents_close_their_minute(tmp_path):
    """Segments close on each epoch-aligned minute; the pull after the first runs 20 s past every minute."""
    from datetime import UTC, datetime

    sched = build_scheduler(Service(config=load_config(env={}), db_path=str(tmp_path / "x.duckdb")))
    trigger = next(j.trigger for j in sched.get_jobs() if j.id == "collect-nvml")
    now = datetime(2027, 1, 15, 8, 0, 47, 500000, tzinfo=UTC)
    assert trigger.get_next_fire_time(None, now) == datetime(2027, 1, 15, 8, 1, 20, tzinfo=UTC)
    later = trigger.get_next_fire_time(datetime(2027, 1, 15, 8, 1, 20, tzinfo=UTC), now)
    assert later == datetime(2027, 1, 15, 8, 2, 20, tzinfo=UTC)


def test_the_fuzzers_fuzz_every_text_parser():
    from tests.fuzz import fuzz_parsers

    assert fuzz_parsers.parsers() == {c.kind: c.module for c in COLLECTORS if c.ingestable and not c.spool}
    assert set(fuzz_parsers.specs()) == set(fuzz_parsers.parsers())


@pytest.mark.parametrize("c", COLLECTORS, ids=KINDS)
def test_every_module_keeps_the_contract(c):
    m = c.module
    assert m.KIND == c.kind
    assert m.TABLES and all(isinstance(t, TableSpec) and t.name == name for name, t in m.TABLES.items())
    if c.spool:
        for fn in ("fetch", "load", "acknowledge", "ingest_spool_files"):
            assert callable(getattr(m, fn)), fn
        return
    if c.ingestable:
        assert callable(m.parse)
    if c.live:
        assert callable(getattr(m, "fetch", None)) or callable(m.command)


def test_no_collector_is_found_by_name():
    for path in sorted((ROOT / "collectors").glob("*.py")):
        assert "import_module" not in path.read_text(), path.name
