"""Dashboards: committed JSON is what the code generates, conventions hold, every query is valid PromQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml
from click.testing import CliRunner
from slurmscope.alerts.rules import RECORDING
from slurmscope.dashboards.build import MODULES, generate
from slurmscope.dashboards.common import (
    DATASOURCE_UID,
    DATASOURCE_VARIABLE,
    IMPORT_INPUT,
    panel_queries,
    substitute,
)

from slurmscope.catalog import CATALOG
from slurmscope.exporter import INTERNAL
from tests.paths import ROOT

ROOT = ROOT
GENERATED = ROOT / "dashboards" / "generated"
KNOWN = (
    {m.name for m in CATALOG}
    | {m.name for m in INTERNAL}
    | {r.record for r in RECORDING}
    | {"ALERTS", "ALERTS_FOR_STATE"}
)
FUNCS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "time",
    "vector",
    "by",
    "or",
    "and",
    "unless",
    "on",
    "offset",
    "label_values",
    "avg_over_time",
    "group_left",
    "sort_desc",
}


def test_committed_json_is_generated():
    files = generate()
    for rel, content in files.items():
        path = GENERATED / rel
        assert path.exists(), f"{rel} missing: run slurmscope dashboards build --out dashboards/generated"
        assert path.read_text(encoding="utf-8") == content, f"{rel} is stale: rebuild it"
    committed = {p.relative_to(GENERATED).as_posix() for p in GENERATED.rglob("*") if p.is_file()}
    assert committed == set(files), f"not generated any more: {sorted(committed - set(files))}"


def _datasource_refs(node, path=""):
    """(path, datasource) of every datasource reference in a dashboard JSON."""
    if isinstance(node, dict):
        if isinstance(node.get("datasource"), dict):
            yield path, node["datasource"]
        for k, v in node.items():
            yield from _datasource_refs(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _datasource_refs(v, f"{path}/{i}")


def test_both_forms_are_generated_and_consistent():
    """The UI-import form is the provisioning form with the datasource chosen at import, and nothing else."""
    files = generate()
    for m in MODULES:
        provisioned = json.loads(files[f"dashboards/{m.SLUG}.json"])
        imported = json.loads(files[f"import/{m.SLUG}.json"])
        assert [i["name"] for i in imported["__inputs"]] == [IMPORT_INPUT]
        assert imported["__inputs"][0]["type"] == "datasource"
        assert imported["__inputs"][0]["pluginId"] == "prometheus"
        variable = imported["templating"]["list"][0]
        assert variable["name"] == DATASOURCE_VARIABLE and variable["type"] == "datasource"
        assert variable["query"] == "prometheus" and variable["current"]["value"] == f"${{{IMPORT_INPUT}}}"
        refs = list(_datasource_refs(imported))
        assert any(p.startswith("/panels/") for p, _ in refs)
        assert all(ref == {"type": "prometheus", "uid": f"${{{DATASOURCE_VARIABLE}}}"} for _, ref in refs), (
            m.SLUG
        )
        assert DATASOURCE_UID not in files[f"import/{m.SLUG}.json"]
        panels = [p for p in imported["panels"] if p["type"] != "row"]
        assert panels and all(p["datasource"]["uid"] == "${datasource}" for p in panels)
        assert panel_queries(imported) == panel_queries(provisioned)
        # Apart from the datasource reference and the import metadata, the two are the same dashboard.
        restored = json.loads(json.dumps(imported).replace('"${datasource}"', json.dumps(DATASOURCE_UID)))
        del restored["__inputs"], restored["__requires"], restored["templating"]["list"][0]
        assert restored == provisioned, m.SLUG


def test_panels_read_only_recording_rules_the_rule_file_has():
    """A panel on a recording rule Prometheus does not load is empty: every one it names is in the rule file."""
    rule_file = yaml.safe_load((ROOT / "alerts" / "slurmscope.rules.yaml").read_text(encoding="utf-8"))
    recorded = {r["record"] for g in rule_file["groups"] for r in g["rules"] if "record" in r}
    used = set()
    for rel, content in generate().items():
        if rel.endswith(".json"):
            for _, expr, _ in panel_queries(json.loads(content)):
                used |= set(re.findall(r"\b[a-z_]+:[a-zA-Z0-9_]+:[a-zA-Z0-9_]+\b", expr))
    assert used, "no panel reads a recording rule: the check would prove nothing"
    assert used <= recorded, f"panels read recording rules the rule file lacks: {sorted(used - recorded)}"


def test_cli_writes_the_same_files(tmp_path):
    from slurmscope.cli import main

    res = CliRunner().invoke(main, ["dashboards", "build", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for rel, content in generate().items():
        assert (tmp_path / rel).read_text(encoding="utf-8") == content
    assert sorted(p.name for p in (tmp_path / "import").glob("*.json")) == sorted(
        f"{m.SLUG}.json" for m in MODULES
    )


def test_conventions():
    slugs = {"overview", "nodes", "jobs", "fairshare", "scheduler", "reliability", "cost", "efficiency"}
    assert {m.SLUG for m in MODULES} == slugs
    for m in MODULES:
        board = json.loads((GENERATED / "dashboards" / f"{m.SLUG}.json").read_text())
        assert board["uid"] == f"slurmscope-{m.SLUG}"
        assert [v["name"] for v in board["templating"]["list"]] == ["cluster", "partition", "account"]
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for p in board["panels"]:
            assert p["datasource"]["uid"] == DATASOURCE_UID
        assert panel_queries(board)
    ds = yaml.safe_load((GENERATED / "provisioning" / "datasources" / "slurmscope.yaml").read_text())
    assert ds["datasources"][0]["uid"] == DATASOURCE_UID


def test_queries_only_use_known_metrics_and_filter_by_cluster():
    for m in MODULES:
        board = json.loads(generate()[f"dashboards/{m.SLUG}.json"])
        for title, expr, _ in panel_queries(board):
            assert "$cluster" in expr, (m.SLUG, title)
            names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{\[(])", expr)) - FUNCS
            assert names <= KNOWN, (m.SLUG, title, names - KNOWN)


@pytest.mark.prometheus
def test_every_query_parses(tmp_path):
    """promtool parses each panel query (as Grafana sends it with All selected) inside a rule file."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    rules = []
    for m in MODULES:
        for i, (_, expr, _) in enumerate(panel_queries(json.loads(generate()[f"dashboards/{m.SLUG}.json"]))):
            rules.append({"record": f"dashboard:{m.SLUG}:q{i}", "expr": substitute(expr)})
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}))
    res = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
