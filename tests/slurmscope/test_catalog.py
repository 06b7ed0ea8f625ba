"""The catalog follows the metric conventions, every query runs on the current schema, docs are current."""

from __future__ import annotations

import re

from slurmscope.catalog import CATALOG, render_markdown
from slurmscope.exporter import INTERNAL
from tests.paths import ROOT

ROOT = ROOT
UNITS = {"seconds", "bytes", "joules", "watts", "celsius", "ratio", "usd"}


def test_names_follow_conventions():
    names = [m.name for m in CATALOG]
    assert len(names) == len(set(names))
    for m in CATALOG:
        assert re.fullmatch(r"slurmscope_[a-z0-9_]+", m.name), m.name
        assert (m.type == "counter") == m.name.endswith("_total"), m.name
        assert (m.type == "info") == m.name.endswith("_info"), m.name
        if m.unit:
            assert m.unit in UNITS, m.name
            assert f"_{m.unit}" in m.name, m.name
        assert "cluster" in m.labels, m.name


def test_labels_are_bounded():
    for m in CATALOG:
        assert not {"job_id", "job", "job_id_raw", "jobid"} & set(m.labels), m.name
        assert ("user" in m.labels) == m.user_labels, m.name


def test_every_query_runs_on_the_migrated_schema(con):
    """An empty database of the current schema: every family whose tables exist runs without error."""
    from datetime import UTC, datetime

    from slurmscope.config import load_config
    from slurmscope.exporter import snapshot

    cfg = load_config(env={}).with_overrides(exporter={"user_labels": True})
    snap = snapshot(con, cfg, datetime(2026, 1, 1, tzinfo=UTC))
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for m in CATALOG:
        expected = all(t in tables for t in m.requires)
        assert snap.up[m.name] is expected, (m.name, m.requires)
        if expected:
            assert snap.samples[m.name] == [] or m.name in {"slurmscope_exporter_family_up"}


def test_metrics_doc_is_generated_from_the_catalog():
    committed = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert committed == render_markdown(INTERNAL), "run: python -m slurmscope.catalog > docs/metrics.md"


def test_every_family_has_its_query_file_and_every_query_file_a_family():
    """sql/metrics/<name>.sql defines metric_<name>; files starting with `_` hold the macros they share."""
    files = {p.stem: p.read_text(encoding="utf-8") for p in (ROOT / "sql" / "metrics").glob("*.sql")}
    families = {m.name.removeprefix("slurmscope_"): m for m in CATALOG}
    assert {name for name in files if not name.startswith("_")} == set(families)
    for name, m in families.items():
        assert f"CREATE OR REPLACE MACRO {m.macro}(cluster_name, now) AS TABLE" in files[name], name
