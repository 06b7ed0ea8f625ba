"""The one rule against counting a GPU twice: every rule and panel selects one source of slurmscope_gpu_*.

The node agents serve slurmscope_gpu_* series with source="agent", the central exporter copies with
source="central" (docs/architecture.md, "Agent and central GPU series"). A selector without an exact
`source` matcher would add the two; these tests read every generated rule and every panel query.
"""

from __future__ import annotations

import json
import re

import yaml
from slurmscope.alerts.build import render_rules
from slurmscope.alerts.rules import REALTIME_GROUP, REALTIME_INTERVAL
from slurmscope.dashboards.build import MODULES, generate
from slurmscope.dashboards.common import LIVE, panel_queries

from slurmscope.catalog import CATALOG

# A metric name not preceded by a name character or ':' (so recording-rule names are not read as families),
# then its matchers if any.
SELECTOR = re.compile(r"(?<![\w:])(slurmscope_gpu_[a-z0-9_]+)(?![\w:])(\{[^}]*\})?")
# Slurm's allocation counters (gpu_seconds_*) have one source, Slurm, and no `source` label.
ACCOUNTING = re.compile(r"slurmscope_gpu_seconds_")
RECORD_NAME = re.compile(r"(?<![\w])([a-z_]+:slurmscope_[a-z0-9_]+:[a-z0-9_]+)")


def sources(expr: str) -> list[tuple[str, str | None]]:
    """(family, source) of every slurmscope_gpu_* selector; source None unless one exact source="..." matcher."""
    out = []
    for m in SELECTOR.finditer(expr):
        name, matchers = m.group(1), m.group(2) or ""
        if ACCOUNTING.match(name):
            continue
        found = re.findall(r'\bsource\s*(=~|!=|!~|=)\s*"([^"]*)"', matchers)
        ok = len(found) == 1 and found[0][0] == "=" and found[0][1] in ("agent", "central")
        out.append((name, found[0][1] if ok else None))
    return out


def _rules() -> list[tuple[str, dict]]:
    return [(g["name"], r) for g in yaml.safe_load(render_rules())["groups"] for r in g["rules"]]


def _record_sources() -> dict[str, set[str | None]]:
    return {r["record"]: {s for _, s in sources(r["expr"])} for _, r in _rules() if "record" in r}


def test_the_selector_parser_sees_what_prometheus_would_add():
    assert sources('sum(slurmscope_gpu_power_watts{cluster="c1"})') == [("slurmscope_gpu_power_watts", None)]
    assert sources("slurmscope_gpu_lost") == [("slurmscope_gpu_lost", None)]
    assert sources('x{source=~"agent|central"} + slurmscope_gpu_lost{source=~"agent|central"}') == [
        ("slurmscope_gpu_lost", None)
    ]
    assert sources('max(slurmscope_gpu_lost{node="a", source="agent"}) unless slurmscope_gpu_info') == [
        ("slurmscope_gpu_lost", "agent"),
        ("slurmscope_gpu_info", None),
    ]
    assert sources("cluster:slurmscope_gpu_power_watts:sum + slurmscope_gpu_seconds_total") == []


def test_every_rule_selects_one_source():
    unsourced = [
        (r.get("alert") or r.get("record"), fam)
        for _, r in _rules()
        for fam, src in sources(r["expr"])
        if src is None
    ]
    assert unsourced == []
    # and the GPU rules are many: the check is not vacuous
    assert sum(1 for _, r in _rules() if sources(r["expr"])) >= 8


def test_realtime_alerts_read_the_agents_and_are_evaluated_as_often_as_they_are_scraped():
    groups = {g["name"]: g for g in yaml.safe_load(render_rules())["groups"]}
    live = groups[f"slurmscope.{REALTIME_GROUP}"]
    assert live["interval"] == REALTIME_INTERVAL == "15s"
    assert live["rules"]
    for r in live["rules"]:
        assert {s for _, s in sources(r["expr"])} == {"agent"}, r["alert"]
        assert r["for"] == "0s", r["alert"]
    # no other alert reads the agents: a fault has one real-time alert, not two
    for name, r in _rules():
        if name != f"slurmscope.{REALTIME_GROUP}" and "alert" in r:
            assert "agent" not in {s for _, s in sources(r["expr"])}, r["alert"]


def test_every_panel_selects_one_source_and_live_panels_read_the_agents():
    records = _record_sources()
    checked = 0
    for m in MODULES:
        board = json.loads(generate()[f"dashboards/{m.SLUG}.json"])
        for title, expr, _ in panel_queries(board):
            found = {s for _, s in sources(expr)}
            for rec in RECORD_NAME.findall(expr):
                found |= records.get(rec, set())
            if not found:
                continue
            checked += 1
            assert None not in found, (m.SLUG, title, expr)
            assert found == ({"agent"} if LIVE in title else {"central"}), (m.SLUG, title, expr)
    assert checked >= 10


def test_every_gpu_family_of_the_catalog_carries_source():
    gpu = [m for m in CATALOG if m.name.startswith("slurmscope_gpu_") and not ACCOUNTING.match(m.name)]
    assert len(gpu) >= 10
    assert [m.name for m in gpu if "source" not in m.labels] == []


UNLESS_SCRAPED = "unless on (cluster, node) (slurmscope_agent_nvml_up == 1)"


def _xid_matcher(expr: str) -> set[str]:
    return set(re.findall(r'xid(?:=~|!~)"[^"]*"', expr))


def test_each_xid_class_has_a_live_copy_with_its_codes_and_its_central_alert_yields_to_it():
    from slurmscope.alerts.rules import XID_ALERTS, alerts

    # 79 moved to reset_gpu by the operator (health.xid_actions): both copies move it
    for overrides in (None, {79: "reset_gpu"}):
        by_name = {a.name: a for a in alerts(overrides)}
        for name, _sev, _todo in XID_ALERTS.values():
            central, live = by_name[name], by_name[f"{name}Live"]
            assert central.expr.endswith(UNLESS_SCRAPED), name
            assert UNLESS_SCRAPED not in live.expr and live.group == REALTIME_GROUP, name
            assert _xid_matcher(live.expr) == _xid_matcher(central.expr) and len(_xid_matcher(live.expr)) == 1
            assert (
                (central.severity, central.runbook_name) == (live.severity, live.runbook_name) == (_sev, name)
            )
        reboot = _xid_matcher(by_name["GpuXidRebootNodeLive"].expr).pop()
        reset = _xid_matcher(by_name["GpuXidResetGpuLive"].expr).pop()
        assert ("|79|" in f"|{reset[6:-1]}|") == (overrides is not None)
        assert ("|79|" in f"|{reboot[6:-1]}|") == (overrides is None)
    assert "GpuXidCriticalLive" not in {a.name for a in alerts()}
