"""Health verdicts end to end, and the `source` / `cluster` labels that keep agent and central GPU series apart.

- the hand-made history of tests/exporter_data.py (faults placed by hand) scraped at END;
- the shared demo: the verdict in force at every sinfo snapshot agrees with the simulator's event log;
- the catalog and the node agent follow the labelling rule docs/dashboards.md states.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurmscope.catalog import CATALOG, by_name
from slurmscope.config import load_config
from slurmscope.exporter import render, snapshot
from tests.exporter_data import END, build
from tests.paths import ROOT

METRIC_SQL = ROOT / "sql" / "metrics"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    from slurmscope.db import connect

    con = connect(tmp_path_factory.mktemp("health") / "h.duckdb")
    build(con)
    yield con
    con.close()


def _series(body: bytes, name: str) -> dict[frozenset, float]:
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name == name:
                out[frozenset(s.labels.items())] = s.value
    return out


def test_history_verdicts_at_end(history):
    """g01: uncorrectable ECC on GPU 0 five minutes before END; g02: XID 79 on GPU 7, failed row remap on GPU 5,
    GPU 3 throttled half the time at 88 C, 7 of 8 GPUs in the last inventory; g03 DOWN; g04 drained."""
    cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})
    body = render(history, cfg, END)
    status = _series(body, "slurmscope_node_health_status")
    current = {dict(k)["node"]: dict(k)["status"] for k, v in status.items() if v == 1}
    assert current == {"g01": "failing", "g02": "failing", "g03": "failing", "g04": "degraded"}
    assert len(status) == 4 * 3  # a StateSet: every status of every node
    info = {dict(k)["node"]: dict(k)["reason"] for k in _series(body, "slurmscope_node_health_info")}
    assert info == {"g01": "gpu_failing", "g02": "gpu_failing", "g03": "slurm_down", "g04": "slurm_drain"}
    reasons = history.execute("""SELECT reasons FROM mart_node_health WHERE node = 'g02'
                                 ORDER BY since DESC LIMIT 1""").fetchone()[0]
    assert reasons == "gpu_failing,gpu_missing,gpu_degraded"
    gpu = {
        (dict(k)["node"], dict(k)["gpu"]): (dict(k)["status"], dict(k)["reason"])
        for k in _series(body, "slurmscope_gpu_health_info")
    }
    bad = {k: v for k, v in gpu.items() if v[0] != "ok"}
    assert bad == {
        ("g01", "0"): ("failing", "uncorrectable_ecc"),
        ("g02", "7"): ("failing", "fallen_off_bus"),
        ("g02", "5"): ("failing", "row_remap_failed"),
        ("g02", "3"): ("degraded", "throttling"),
    }
    assert len(gpu) == 16 and all(
        dict(k)["source"] == "central" for k in _series(body, "slurmscope_gpu_health_info")
    )
    # Three hours earlier g03 was up and g04 already drained (30 h); g01 and g02 had nothing yet.
    body = render(history, cfg, END - timedelta(hours=3))
    earlier = {
        dict(k)["node"]: dict(k)["status"]
        for k, v in _series(body, "slurmscope_node_health_status").items()
        if v == 1
    }
    assert earlier == {"g01": "ok", "g02": "ok", "g03": "ok", "g04": "degraded"}


def test_pipeline_is_idempotent(history):
    from slurmscope.pipelines.runner import run_pipelines

    cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})
    q = "SELECT * FROM {} ORDER BY ALL"
    before = {t: history.execute(q.format(t)).fetchall() for t in ("mart_node_health", "mart_gpu_health")}
    run_pipelines(history, cfg, full=True, only=["health"], now=END)
    assert {t: history.execute(q.format(t)).fetchall() for t in before} == before
    # an incremental run over the last day rewrites the day (its first instant starts a row) but changes no verdict
    run_pipelines(
        history, cfg, since=(END - timedelta(hours=20)).date().isoformat(), only=["health"], now=END
    )
    body = render(history, cfg, END)
    info = {dict(k)["node"]: dict(k)["reason"] for k in _series(body, "slurmscope_node_health_info")}
    assert info == {"g01": "gpu_failing", "g02": "gpu_failing", "g03": "slurm_down", "g04": "slurm_drain"}


def _intervals(events: list[dict], start: str, end: str) -> dict[str, list[tuple[datetime, datetime]]]:
    """node -> [since, until) from the simulator's `start` events to the node's next resume (or forever)."""
    out: dict[str, list] = {}
    open_: dict[str, datetime] = {}
    for e in events:
        t = datetime.fromisoformat(e["t"]).replace(tzinfo=UTC)
        if e["type"] == start and e["node"] not in open_:
            open_[e["node"]] = t
        elif e["type"] == end and e["node"] in open_:
            out.setdefault(e["node"], []).append((open_.pop(e["node"]), t))
    for node, t in open_.items():
        out.setdefault(node, []).append((t, datetime.max.replace(tzinfo=UTC)))
    return out


def test_demo_verdicts_agree_with_the_simulator(demo_run):
    """At every sinfo snapshot: a node the simulator had DOWN is failing, a drained one is not ok, and a node
    the simulator never faulted (application XIDs 13/43 included) is ok, as is every GPU it sampled."""
    events = demo_run.events()
    down = _intervals(events, "node_down", "resume")
    drained = _intervals(events, "drain", "resume")
    touched = (
        set(down)
        | set(drained)
        | {e["node"] for e in events if e["type"] == "fault" and e.get("cause") == "hardware"}
    )
    assert down, "the demo should contain at least one node failure"
    cfg = load_config(env={}).with_overrides(cluster={"name": "simcluster"})
    fams = [by_name()["slurmscope_node_health_status"], by_name()["slurmscope_gpu_health_status"]]
    con = demo_run.connect()
    try:
        times = [
            r[0] for r in con.execute("SELECT DISTINCT snapshot_time FROM node_states ORDER BY 1").fetchall()
        ]
        nodes_at = {
            t: {
                r[0]
                for r in con.execute(
                    "SELECT DISTINCT node FROM node_states WHERE snapshot_time = ?", [t]
                ).fetchall()
            }
            for t in times
        }
        checked = {"failing": 0, "not ok": 0, "ok": 0}
        for t in times:
            snap = snapshot(con, cfg, t, metrics=fams)
            current = {}
            for labels, value in snap.samples["slurmscope_node_health_status"]:
                if value == 1:
                    assert labels[1] not in current
                    current[labels[1]] = labels[2]
            assert set(current) == nodes_at[t], t
            for node, status in current.items():
                if any(a <= t < b for a, b in down.get(node, [])):
                    assert status == "failing", (node, t)
                    checked["failing"] += 1
                elif any(a <= t < b for a, b in drained.get(node, [])):
                    assert status != "ok", (node, t)
                    checked["not ok"] += 1
                elif node not in touched:
                    assert status == "ok", (node, t)
                    checked["ok"] += 1
            gpu_status = [
                labels[4] for labels, value in snap.samples["slurmscope_gpu_health_status"] if value == 1
            ]
            assert set(gpu_status) <= {"ok"}, t
        assert checked["failing"] >= 1 and checked["ok"] > 100, checked
        # the GPUs judged are those of the nodes with simulated telemetry, 8 each, with application XIDs seen
        judged = con.execute(
            "SELECT node, count(DISTINCT gpu_uuid) FROM mart_gpu_health GROUP BY 1"
        ).fetchall()
        sampled = con.execute("SELECT node, count(DISTINCT gpu_uuid) FROM gpu_samples GROUP BY 1").fetchall()
        assert sorted(judged) == sorted(sampled) and sampled
        assert con.execute("SELECT count(*) FROM gpu_events WHERE xid IN (13, 43)").fetchone()[0] > 0
    finally:
        con.close()


# ---- labels that keep agent and central GPU series apart ------------------------------------------------


def test_every_central_gpu_family_carries_source():
    for m in CATALOG:
        if m.name.startswith("slurmscope_gpu_") and not m.name.startswith("slurmscope_gpu_seconds"):
            query = (METRIC_SQL / f"{m.macro.removeprefix('metric_')}.sql").read_text()
            assert "source" in m.labels and "'central' AS source" in query, m.name
        else:
            assert "source" not in m.labels, m.name


def test_agent_series_carry_cluster_and_source(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest
    from slurmscope.agent.agent import Agent
    from slurmscope.agent.fake import fake_from_spec
    from slurmscope.agent.http import _Collector

    t = [1_800_000_000.0]
    fake = fake_from_spec(
        {"gpus": [{"model": "h100", "state": "load", "count": 2}], "start": t[0]},
        clock=lambda: t[0],
        sleep=lambda s: t.__setitem__(0, t[0] + s),
    )
    agent = Agent(
        fake,
        node="gpu01",
        spool_dir=tmp_path / "spool",
        mapping_dir=tmp_path / "map",
        cluster="c7",
        clock=lambda: t[0],
        sleep=lambda s: t.__setitem__(0, t[0] + s),
    )
    for _ in range(7):
        agent.tick(t[0])
        t[0] += 10
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(agent))
    fams = list(text_string_to_metric_families(generate_latest(reg).decode()))
    gpu = [s for f in fams if f.name.startswith("slurmscope_gpu_") for s in f.samples]
    own = [s for f in fams if f.name.startswith("slurmscope_agent_") for s in f.samples]
    assert len({s.name for s in gpu}) >= 10 and own
    assert all(s.labels.get("cluster") == "c7" and s.labels.get("source") == "agent" for s in gpu)
    assert all(s.labels.get("cluster") == "c7" and "source" not in s.labels for s in own)
    # the names both serve carry the same cluster, so only `source` tells them apart
    central = {m.name for m in CATALOG}
    assert {
        "slurmscope_gpu_utilization_ratio",
        "slurmscope_gpu_power_watts",
        "slurmscope_gpu_ecc_errors_total",
    } <= {s.name for s in gpu} & central
    json.dumps([s.labels for s in gpu])  # plain strings only


def test_reason_lists_are_documented():
    """The bounded `reason` values: every one the pipeline can give is named in the metric help and the docs."""

    from slurmscope.pipelines import health

    doc = (ROOT / "docs" / "pipelines.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Health") :]
    for family, reasons in (
        ("slurmscope_node_health_info", health.NODE_REASONS),
        ("slurmscope_gpu_health_info", health.GPU_REASONS),
    ):
        for r in reasons:
            assert r in by_name()[family].help, (family, r)
            assert f"| `{r}` |" in section, r
