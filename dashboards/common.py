"""Shared defaults for every dashboard: datasource, template variables, panel helpers, JSON encoding.

Every dashboard reads one Prometheus datasource whose uid is fixed by the provisioning file, so the JSON
works unchanged on any Grafana that uses dashboards/generated/provisioning. Grafana's UI import into an
existing Grafana knows no such uid: `import_form` turns the same JSON into the shape Grafana's own "export
for sharing externally" writes (an `__inputs` entry DS_PROMETHEUS that the import dialog asks for, and a
datasource template variable that every panel and query variable reads). Every query filters on the
template variables cluster, partition and account through regex matchers (`=~"$var"`), whose "All"
value is `.+` for cluster and `.*` for the others, so a dashboard works for one cluster or many. Panels read recording rules where one exists
(alerts/rules.py) so the dashboards and the alerts agree on what a number means.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

DATASOURCE_UID = "slurmscope-prometheus"
DATASOURCE_NAME = "slurmscope Prometheus"
DATASOURCE = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
TAGS = ["slurmscope", "slurm"]
# The UI-import form: the import dialog's input, and the variable the panels read instead of the fixed uid.
IMPORT_INPUT = "DS_PROMETHEUS"
DATASOURCE_VARIABLE = "datasource"
GRAFANA_VERSION = "11.6.0"  # the schema of grafana-foundation-sdk 11.6.0, pinned in pyproject.toml
PANEL_PLUGINS = {"stat": "Stat", "table": "Table", "timeseries": "Time series"}

# Matchers every query uses; the dashboards substitute nothing else.
C = 'cluster=~"$cluster"'
CP = 'cluster=~"$cluster", partition=~"$partition"'
CA = 'cluster=~"$cluster", account=~"$account"'
CPA = 'cluster=~"$cluster", partition=~"$partition", account=~"$account"'
# slurmscope_gpu_* telemetry and health: the node agents serve some of the same names live (source="agent"),
# the central exporter serves copies from the spool (source="central"). Every query names one source
# (docs/architecture.md), so the two are never added: the live panels, titled "(live)", read the agents'
# 15-s series (CGA); the others read the central ones (CG: history, health verdicts, every node whose
# spool was ingested, present whether or not the agents are scraped).
CG = 'cluster=~"$cluster", source="central"'
CGA = 'cluster=~"$cluster", source="agent"'
LIVE = "(live)"


@dataclass(frozen=True)
class Q:
    """One query of a panel: PromQL and its legend."""

    expr: str
    legend: str = ""


def _variable(name: str, label: str, query: str, all_value: str = ".*") -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query({"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(all_value)
    )


def new_dashboard(slug: str, title: str, description: str, *, time_from: str = "now-24h") -> dash.Dashboard:
    """A dashboard with the shared uid scheme, tags, time settings and the three template variables."""
    return (
        dash.Dashboard(title)
        .uid(f"slurmscope-{slug}")
        .description(description)
        .tags(TAGS)
        .timezone("utc")
        .time(time_from, "now")
        .refresh("1m")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .readonly()
        # "All" clusters is `.+`, not `.*`: a series without a cluster label (an agent older than the `cluster`
        # label, a foreign exporter) cannot be attributed to a cluster and is left out.
        .with_variable(_variable("cluster", "Cluster", "label_values(slurmscope_nodes, cluster)", ".+"))
        .with_variable(
            _variable(
                "partition", "Partition", 'label_values(slurmscope_gpus{cluster=~"$cluster"}, partition)'
            )
        )
        .with_variable(
            _variable(
                "account",
                "Account",
                'label_values(slurmscope_jobs_ended_total{cluster=~"$cluster"}, account)',
            )
        )
    )


def _targets(panel, queries: list[Q], *, instant: bool = False):
    for i, q in enumerate(queries):
        target = prometheus.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(chr(ord("A") + i))
        target = target.instant() if instant else target.range()
        panel = panel.with_target(target)
    return panel


def ts(
    title: str,
    queries: list[Q],
    unit: str = "short",
    *,
    description: str = "",
    w: int = 12,
    h: int = 8,
    stacked: bool = False,
) -> timeseries.Panel:
    """A time-series panel."""
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(w)
        .height(h)
        .fill_opacity(10 if not stacked else 60)
    )
    if stacked:
        from grafana_foundation_sdk.builders.common import StackingConfig
        from grafana_foundation_sdk.models.common import StackingMode

        p = p.stacking(StackingConfig().mode(StackingMode.NORMAL))
    return _targets(p, queries)


def single(
    title: str, query: Q, unit: str = "short", *, description: str = "", w: int = 4, h: int = 4
) -> stat.Panel:
    """A stat panel showing one current value."""
    p = stat.Panel().title(title).description(description).datasource(DATASOURCE).unit(unit).span(w).height(h)
    return _targets(p, [query], instant=True)


def tbl(title: str, queries: list[Q], *, description: str = "", w: int = 24, h: int = 8) -> table.Panel:
    """A table of the current values (instant queries)."""
    p = table.Panel().title(title).description(description).datasource(DATASOURCE).span(w).height(h)
    return _targets(p, queries, instant=True)


def to_json(board: dash.Dashboard) -> str:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline, panel ids 1..n in layout order.

    Grafana needs unique panel ids for links and for keeping panel state; the builder leaves them unset.
    """
    data = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    next_id = 1
    for panel in data.get("panels") or []:
        panel["id"] = next_id
        next_id += 1
        for inner in panel.get("panels") or []:
            inner["id"] = next_id
            next_id += 1
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def import_form(provisioning_json: str) -> str:
    """The dashboard for Grafana's Dashboards > New > Import: same panels and queries, datasource chosen there."""
    data = json.loads(provisioning_json)
    fixed = {"type": DATASOURCE.type_val, "uid": DATASOURCE_UID}
    variable_ref = {"type": DATASOURCE.type_val, "uid": f"${{{DATASOURCE_VARIABLE}}}"}

    def swap(node):
        if isinstance(node, dict):
            return variable_ref if node == fixed else {k: swap(v) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    data = swap(data)
    chosen = f"${{{IMPORT_INPUT}}}"
    variable = (
        dash.DatasourceVariable(DATASOURCE_VARIABLE)
        .label("Data source")
        .type(DATASOURCE.type_val)
        .current(VariableOption(selected=True, text=chosen, value=chosen))
    )
    data["templating"]["list"].insert(0, json.loads(json.dumps(variable.build(), cls=JSONEncoder)))
    data["__inputs"] = [
        {
            "name": IMPORT_INPUT,
            "label": "Prometheus",
            "description": "The Prometheus that scrapes slurmscope and loads its recording rules",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    panel_types = sorted({p["type"] for p in _all_panels(data)})
    data["__requires"] = [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": t, "name": PANEL_PLUGINS[t], "version": ""} for t in panel_types),
    ]
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def _all_panels(board_json: dict) -> list[dict]:
    out = []

    def walk(panels):
        for p in panels or []:
            out.append(p)
            walk(p.get("panels"))

    walk(board_json.get("panels"))
    return out


def panel_queries(board_json: dict) -> list[tuple[str, str, bool]]:
    """(panel title, expr, instant) of every query of every panel, rows included."""
    return [
        (p.get("title", ""), t["expr"], bool(t.get("instant")))
        for p in _all_panels(board_json)
        for t in p.get("targets") or []
        if t.get("expr")
    ]


VARIABLE = re.compile(r"\$(cluster|partition|account|__rate_interval|__interval|__range)\b")


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """The query as Grafana would send it with "All" selected (variables -> `.*`, intervals -> 5m)."""
    values = {
        "cluster": ".+",
        "partition": ".*",
        "account": ".*",
        "__rate_interval": "5m",
        "__interval": "1m",
        "__range": "1d",
        **(values or {}),
    }
    return VARIABLE.sub(lambda m: values[m.group(1)], expr)
