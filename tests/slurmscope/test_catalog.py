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
    """sql/metrics/<name>.sql defines metric_<name>, or the shared query the family names defines it
    among its `family` values; files starting with `_` hold the macros they share."""
    files = {p.stem: p.read_text(encoding="utf-8") for p in (ROOT / "sql" / "metrics").glob("*.sql")}
    own = {m.name.removeprefix("slurmscope_"): m for m in CATALOG if not m.shared_query}
    shared = {m.shared_query.removeprefix("metric_") for m in CATALOG if m.shared_query}
    assert {name for name in files if not name.startswith("_")} == set(own) | shared
    for name, m in own.items():
        assert f"CREATE OR REPLACE MACRO {m.macro}(cluster_name, now) AS TABLE" in files[name], name
    for m in CATALOG:
        if m.shared_query:
            text = files[m.shared_query.removeprefix("metric_")]
            assert f"CREATE OR REPLACE MACRO {m.macro}(cluster_name, now) AS TABLE" in text, m.name
            assert f"'{m.name}'" in text, m.name


def test_a_shared_query_gives_each_family_only_its_own_rows(con):
    """The per-GPU families share one scan; each must get the rows of its own family and no other's."""
    from datetime import UTC, datetime

    from slurmscope.config import load_config
    from slurmscope.exporter import snapshot

    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    con.execute(
        "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, gpu_index, model, util_gpu_mean,"
        " power_mean_watts, temp_gpu_max_celsius, throttle_seconds, remapped_pending, remapped_failed,"
        " ecc_corrected_total, ecc_uncorrected_total) VALUES"
        " ('c', 'n1', 'u0', ?, 0, 'H100', 50, 300, 61, 15, true, false, 7, NULL),"
        " ('c', 'n1', 'u0', ?, 0, 'H100', 90, 700, 80, 60, false, true, 1, 1)",
        [at, at.replace(hour=11, minute=50)],
    )
    cfg = load_config(env={}).with_overrides(cluster={"name": "c"})
    metrics = [m for m in CATALOG if m.shared_query]
    snap = snapshot(con, cfg, at, metrics=metrics)
    labels = ("c", "n1", "0", "H100", "central")
    assert snap.samples["slurmscope_gpu_utilization_ratio"] == [(labels, 0.5)]
    assert snap.samples["slurmscope_gpu_power_watts"] == [(labels, 300.0)]
    assert snap.samples["slurmscope_gpu_temperature_celsius"] == [(labels, 61.0)]
    assert snap.samples["slurmscope_gpu_throttle_ratio"] == [(labels, 0.25)]
    assert snap.samples["slurmscope_gpu_row_remap_pending"] == [(labels, 1.0)]
    assert snap.samples["slurmscope_gpu_row_remap_failed"] == [(labels, 0.0)]
    assert snap.samples["slurmscope_gpu_ecc_errors_total"] == [
        (("c", "n1", "0", "H100", "corrected", "central"), 7.0)
    ]
