"""Proof on a real Prometheus (Debian's 2.42): history backfilled, rules loaded, exporter scraped.

The hand-made history of tests/exporter_data.py is replayed as the last 26 hours (exported as OpenMetrics
and turned into TSDB blocks by `promtool tsdb create-blocks-from openmetrics`), Prometheus starts on
loopback with the generated rules (group interval shortened to 5 s so the test does not wait minutes)
scraping a live `serve_metrics` that serves the state at the end of the history, and the HTTP API must
show: every rule healthy, every dashboard panel query returning data, the alerts the history implies
pending or firing and the others inactive.
"""

from __future__ import annotations

import io
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from slurmscope.alerts.build import render_rules
from slurmscope.alerts.rules import ALERTS
from slurmscope.dashboards.build import MODULES, generate
from slurmscope.dashboards.common import CG, panel_queries, substitute

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.exporter import export_instants, render, serve_metrics
from tests.exporter_data import END, EXPECTED_ALERTS, EXPECTED_FIRING, QUIET_ALERTS, build

pytestmark = pytest.mark.prometheus

HISTORY = timedelta(hours=26)  # covers the 1d-offset baselines of the drift alerts
STEP = timedelta(minutes=10)  # the last FINE of history: shorter than the 15m windows of the event alerts
FINE = timedelta(hours=3)
COARSE_STEP = timedelta(minutes=30)  # before that, enough for baselines and drained-for-a-day, and fast


def _free_port() -> int:
    for port in range(19090, 19100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 19090-19099")


def _api(port: int, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


def _start(prom: str, tmp: Path, port: int, config: dict, *extra: str) -> subprocess.Popen:
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [
            prom,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "a"),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    pytest.fail("prometheus not ready: " + (tmp / "prometheus.log").read_text()[-2000:])


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def _blocks(promtool: str, om: Path, data: Path) -> None:
    res = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _for_state(port: int, first: float, last: float, step: float = STEP.total_seconds()) -> str:
    """ALERTS_FOR_STATE over the history, as a Prometheus running through it would have written it.

    Prometheus itself evaluates each alert expression at every instant of the fine-grained part of the
    history (a range query stepping exactly on the backfilled samples); an alert whose expression holds up
    to the last instant has been active since the start of that unbroken run (at most FINE ago). Restored at
    startup, this is what lets an alert whose `for:` the history covers fire at once, as it would on a
    Prometheus that had been running all along. `step` is the spacing of the fine samples.
    """
    lines = ["# TYPE ALERTS_FOR_STATE gauge"]
    series: dict[str, list[str]] = {}
    for a in ALERTS:
        data = _api(port, "query_range", query=a.expr, start=first, end=last, step=step)
        for r in data["result"]:
            times = [float(t) for t, _ in r["values"]]
            if not times or times[-1] != last:
                continue
            k = len(times) - 1
            while k > 0 and times[k - 1] == times[k] - step:
                k -= 1
            active_at = times[k]
            labels = {n: v for n, v in r["metric"].items() if n != "__name__"}
            labels.update({"alertname": a.name, "severity": a.severity, **a.labels})
            key = ",".join(f'{n}="{_esc(v)}"' for n, v in sorted(labels.items()))
            series[key] = [f"ALERTS_FOR_STATE{{{key}}} {active_at} {t}" for t in times[k:]]
    for key in sorted(series):
        lines.extend(series[key])
    return "\n".join(lines) + "\n# EOF\n"


def _start_scraping(
    prom: str, tmp: Path, port: int, job: str, exporter_port: int, agent_port: int
) -> subprocess.Popen:
    """Prometheus with tmp/rules.yaml, scraping the exporter as `job` and the agent every 5 s; returns once it
    has scraped the exporter three times and evaluated every group once more."""
    config = {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "rule_files": [str(tmp / "rules.yaml")],
        # The backfilled history has no job/instance labels: drop them so scraped samples continue its series.
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
                "metric_relabel_configs": [{"action": "labeldrop", "regex": "job|instance"}],
            },
            {"job_name": "nvml-agent", "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]},
        ],
    }
    proc = _start(prom, tmp, port, config, "--rules.alert.for-grace-period=1s")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        up = _api(port, "query", query=f'count_over_time(up{{job="{job}"}}[1m])')["result"]
        if up and float(up[0]["value"][1]) >= 3:
            break
        time.sleep(1)
    time.sleep(6)
    return proc


def _start_agent(tmp: Path) -> tuple[int, threading.Event, threading.Thread]:
    """The node agent of cluster c1 on a fake NVML (two healthy H100s), as `slurmscope agent --fake` runs it."""
    from slurmscope.agent.agent import run_agent

    spec = tmp / "fake-nvml.json"
    spec.write_text(
        json.dumps(
            {"gpus": [{"model": "h100", "state": "load", "count": 2}], "mapping_dir": str(tmp / "map")}
        )
    )
    (tmp / "map").mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop = threading.Event()
    cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})  # the central exporter's cluster too
    thread = threading.Thread(
        target=run_agent,
        args=(cfg,),
        daemon=True,
        kwargs={
            "port": port,
            "spool": str(tmp / "spool"),
            "interval": 1,
            "fake": str(spec),
            "address": "127.0.0.1",
            "node": "g09",
            "stop": stop,
            "kmsg_path": str(tmp / "no-kmsg"),
        },
    )
    thread.start()
    return port, stop, thread


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or promtool is None:
        pytest.skip("Debian's prometheus/promtool not installed")
    tmp = tmp_path_factory.mktemp("prom")
    con = connect(tmp / "h.duckdb")
    build(con)
    cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})
    # The history's last instant (END) lands 30 s ago: inside the 5-minute lookback at the first evaluation.
    last = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
    shift = last - END
    om = io.BytesIO()
    coarse = [END - HISTORY + i * COARSE_STEP for i in range(int((HISTORY - FINE) / COARSE_STEP))]
    fine = [END - FINE + i * STEP for i in range(int(FINE / STEP) + 1)]
    export_instants(con, cfg, coarse + fine, om, shift=shift)
    (tmp / "history.om").write_bytes(om.getvalue())
    body = render(con, cfg, END, shift_seconds=shift.total_seconds())
    con.close()
    _blocks(promtool, tmp / "history.om", tmp / "data")
    port = _free_port()
    # Phase 1: the history alone, to let Prometheus say since when each alert has been active.
    proc = _start(prom, tmp, port, {"global": {"scrape_interval": "5s"}})
    try:
        for_state = _for_state(port, (last - FINE).timestamp(), last.timestamp())
    finally:
        _stop(proc)
    (tmp / "for_state.om").write_text(for_state)
    _blocks(promtool, tmp / "for_state.om", tmp / "data")
    # Phase 2: rules (group interval 5 s instead of 1 m so the test does not wait minutes) and the exporter.
    rules = yaml.safe_load(render_rules())
    for g in rules["groups"]:
        g["interval"] = "5s"
    (tmp / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False, width=10_000))
    server = serve_metrics("127.0.0.1", 0, lambda: body)
    agent_port, agent_stop, agent = _start_agent(tmp)
    proc = _start_scraping(prom, tmp, port, "slurmscope", server.server_address[1], agent_port)
    try:
        yield port
    finally:
        _stop(proc)
        server.shutdown()
        agent_stop.set()
        agent.join(timeout=30)


def test_history_was_loaded(prometheus):
    # g03 went down 2 h before the end of the history: an hour earlier it was up; a day of samples exists.
    r = _api(prometheus, "query", query='slurmscope_node_down{node="g03"} offset 3h')["result"]
    assert [float(x["value"][1]) for x in r] == [0.0]
    r = _api(prometheus, "query", query='count_over_time(slurmscope_node_down{node="g03"}[1d])')["result"]
    assert float(r[0]["value"][1]) >= 42 + 19  # half-hourly for 21 h, every 10 min for 3 h, then scrapes


def test_every_rule_is_healthy(prometheus):
    groups = _api(prometheus, "rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) > 30
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad


def test_every_dashboard_query_returns_data(prometheus):
    now = time.time()
    empty = []
    for m in MODULES:
        board = json.loads(generate()[f"dashboards/{m.SLUG}.json"])
        for title, expr, instant in panel_queries(board):
            q = substitute(expr)
            if instant:
                result = _api(prometheus, "query", query=q)["result"]
            else:
                result = _api(prometheus, "query_range", query=q, start=now - 3600, end=now, step=60)[
                    "result"
                ]
            if not result:
                empty.append((m.SLUG, title, q))
    assert not empty


def test_expected_alerts_are_active_and_others_inactive(prometheus):
    alerts = _api(prometheus, "alerts")["alerts"]
    states = {}
    for a in alerts:
        states.setdefault(a["labels"]["alertname"], set()).add(a["state"])
    active = set(states)
    assert EXPECTED_ALERTS <= active, f"missing: {EXPECTED_ALERTS - active}"
    assert not (QUIET_ALERTS & active), f"unexpected: {QUIET_ALERTS & active}"
    assert active <= EXPECTED_ALERTS, f"not predicted: {active - EXPECTED_ALERTS}"
    # Those whose condition held in the history for longer than their `for:` fire at once (restored state).
    firing = {name for name, st in states.items() if "firing" in st}
    assert EXPECTED_FIRING <= firing, f"pending instead of firing: {EXPECTED_FIRING - firing}"
    by_name = {a["labels"]["alertname"]: a for a in alerts}
    assert by_name["SlurmNodeDown"]["labels"]["node"] == "g03"
    assert by_name["SlurmNodeDrainedTooLong"]["labels"]["node"] == "g04"
    assert by_name["GpuCountMismatch"]["labels"]["node"] == "g02"
    assert by_name["SlurmFairShareStarvation"]["labels"]["account"] == "b"
    assert by_name["SlurmscopeCollectorFailing"]["labels"]["collector"] == "sshare"
    stale = {
        a["labels"]["collector"] for a in alerts if a["labels"]["alertname"] == "SlurmscopeCollectorStale"
    }
    assert "sacct" in stale and "sinfo" not in stale  # sshare may join: its last success is ~30 min old


def test_agent_is_scraped_and_kept_apart(prometheus):
    """The agent's GPU series carry the cluster, yet central panels and rules (source="central") do not count them."""
    up = _api(prometheus, "query", query='up{job="nvml-agent"}')["result"]
    assert [float(r["value"][1]) for r in up] == [1.0]
    info = _api(prometheus, "query", query='slurmscope_gpu_info{node="g09"}')["result"]
    assert [(r["metric"]["cluster"], r["metric"]["source"]) for r in info] == [("c1", "agent")] * 2
    # Same cluster, same metric name: the agent's two GPUs are in c1's power, the cluster label alone cannot split.
    power = _api(prometheus, "query", query='sum(slurmscope_gpu_power_watts{cluster="c1"})')["result"]
    assert float(power[0]["value"][1]) > 16 * 500.0
    # The central exporter's last render has 16 GPUs at 500 W and 20 % (tests/exporter_data.py); the panels'
    # matcher and the utilisation recording rule see those only.
    power = _api(prometheus, "query", query=substitute(f"sum(slurmscope_gpu_power_watts{{{CG}}})"))["result"]
    assert float(power[0]["value"][1]) == 16 * 500.0
    util = _api(prometheus, "query", query='cluster:slurmscope_gpu_utilization_ratio:avg{cluster="c1"}')[
        "result"
    ]
    assert float(util[0]["value"][1]) == pytest.approx(0.2)
