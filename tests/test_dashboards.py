"""Dashboards: committed JSON is what the code generates, conventions hold, every query is valid PromQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from slurmscope.alerts.rules import RECORDING
from slurmscope.dashboards.build import MODULES, generate
from slurmscope.dashboards.common import DATASOURCE_UID, panel_queries, substitute

from slurmscope.catalog import CATALOG
from slurmscope.exporter import INTERNAL

ROOT = Path(__file__).resolve().parents[1]
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
    for rel, content in generate().items():
        path = GENERATED / rel
        assert path.exists(), f"{rel} missing: run slurmscope dashboards build --out dashboards/generated"
        assert path.read_text(encoding="utf-8") == content, f"{rel} is stale: rebuild it"


def test_cli_writes_the_same_files(tmp_path):
    from slurmscope.cli import main

    res = CliRunner().invoke(main, ["dashboards", "build", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for rel, content in generate().items():
        assert (tmp_path / rel).read_text(encoding="utf-8") == content


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
