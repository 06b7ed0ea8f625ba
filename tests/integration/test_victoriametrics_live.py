"""Long-term storage: a real Prometheus (Debian's 2.42) remote-writes into a real VictoriaMetrics (Debian's 1.79).

Both stores must hold the same samples before their answers can be compared, and remote write ships only what
Prometheus appends live (scrapes, rule evaluations, ALERTS), never the TSDB blocks a backfill creates. So:

- the hand-made 26-hour history of tests/exporter_data.py (as in test_prometheus_live.py) is exported once as
  OpenMetrics; Prometheus gets it as blocks (`promtool tsdb create-blocks-from openmetrics`), VictoriaMetrics
  gets the same lines through `/api/v1/import/prometheus` (timestamps turned into milliseconds, the external
  labels added with `extra_label`, as remote write would have added them);
- then Prometheus starts with the generated rules (group interval 5 s), scrapes the exporter's final render and
  a node agent on the fake NVML every 5 s, and remote-writes everything live to VictoriaMetrics with the
  `remote_write` and `external_labels` block of docs/deployment.md ("Long-term storage"), read from the page.

VictoriaMetrics starts on loopback with the flags block of the same page plus, for the test only, a free port,
a temporary `-storageDataPath`, `-search.latencyOffset=0s` (fresh samples are searchable at once, instead of
after 30 s) and `-search.disableCache` (no response cache filled while data still arrives).

Every dashboard panel query (range panels too, as instant queries: a range query is the same evaluation at
each step) and every recording-rule expression is evaluated at the same instants through both
`/api/v1/query`: 3 instants in the history's 10-minute part (30 s after a sample, so that no window boundary
falls on a sample: Prometheus 2.x windows are closed on the left, MetricsQL's open) and 2 in the live minute.
The half-hourly part of the history is not used: there a 1 h window holds one sample, which PromQL's rate
cannot use and MetricsQL's can.

What is compared, and where MetricsQL differs by design (https://docs.victoriametrics.com/MetricsQL.html,
the list of differences at its top; docs/deployment.md "Long-term storage" says what a user sees):

- Queries without `rate`/`increase`: the same series (labels, minus the external labels VictoriaMetrics
  carries and minus `__name__`, below) with the same values within a relative 1e-9 (VictoriaMetrics stores
  a float as a decimal mantissa and exponent, exact to about 15 significant digits). A NaN in Prometheus's
  answer must be absent from VictoriaMetrics's: MetricsQL removes NaN from its output (the cost-per-GPU-hour
  rule is 0/0 while no GPU-seconds accrue).
- Queries with `rate(x[w])`/`increase(x[w])`: MetricsQL takes the last sample before the window as the base
  and does not extrapolate (its rate divides by the time between the two samples it used); PromQL
  extrapolates from the samples inside the window. The answers differ (four jobs ended in an hour sampled
  every 10 minutes: 3.6 from Prometheus, 4 from VictoriaMetrics), so what is compared is the input: the raw
  samples of every `x[w]` the query reads (timestamps to the millisecond, values as above). The queries
  whose answers differed are printed. Recording rules are evaluated by Prometheus and remote-written, so the
  panels that read them (most rate panels) are in the first group and compared exactly.
- `__name__`: MetricsQL keeps the metric name after functions that do not change the meaning of a series,
  Prometheus drops it; the name is ignored only in that direction (VictoriaMetrics has one, Prometheus
  none) and those queries are printed; a name Prometheus has must be the same in VictoriaMetrics.
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from slurmscope.alerts.build import render_rules
from slurmscope.dashboards.build import MODULES, generate
from slurmscope.dashboards.common import panel_queries, substitute

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.exporter import export_instants, render, serve_metrics
from tests.exporter_data import END, build
from tests.integration.test_prometheus_live import (
    COARSE_STEP,
    FINE,
    HISTORY,
    STEP,
    _api,
    _blocks,
    _start,
    _start_agent,
    _stop,
)

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENT = ROOT / "docs" / "deployment.md"
REL = 1e-9
LIVE = 40  # seconds of live scrapes and rule evaluations before the comparison
OFFSET = 30  # seconds after a history sample: inside the 5m lookback, off every window boundary


def _doc_block(tag: str) -> str:
    """The fenced block after `<!-- tested: tag -->` in docs/deployment.md."""
    text = DEPLOYMENT.read_text()
    m = re.search(rf"<!-- tested: {re.escape(tag)} -->\n```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"docs/deployment.md has no block tagged {tag}"
    return m.group(1)


def _vm_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, data: bytes | None = None) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=60) as resp:
        return resp.read()


def _start_vm(binary: str, tmp: Path, port: int) -> subprocess.Popen:
    flags = {}
    for flag in _doc_block("victoriametrics-flags").split():
        name, _, value = flag.partition("=")
        flags[name] = value
    flags["-storageDataPath"] = str(tmp / "vmdata")
    flags["-httpListenAddr"] = f"127.0.0.1:{port}"
    flags["-search.latencyOffset"] = "0s"
    flags["-search.disableCache"] = "true"
    proc = subprocess.Popen(
        [binary, *(f"{k}={v}" for k, v in flags.items())],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "vm.log", "a"),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if _get(f"http://127.0.0.1:{port}/health").strip() == b"OK":
                return proc
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    pytest.fail("victoria-metrics not ready: " + (tmp / "vm.log").read_text()[-2000:])


def _to_prometheus_text(om: str) -> bytes:
    """OpenMetrics (timestamps in seconds) -> Prometheus text format (milliseconds), what VM's import reads."""
    out = []
    for line in om.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value, ts = line.rsplit(" ", 2)
        out.append(f"{series} {value} {round(float(ts) * 1000)}")
    return ("\n".join(out) + "\n").encode()


def _sent_up_to(port: int) -> float:
    """Prometheus's own highest timestamp sent by remote write (its /metrics), 0 before the first send."""
    text = _get(f"http://127.0.0.1:{port}/metrics").decode()
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_remote_storage_queue_highest_sent_timestamp_seconds")
    ]
    return max(values, default=0.0)


@dataclass
class Stores:
    prom: int
    vm: int
    history: list[float]  # comparable instants inside the backfilled history
    live: list[float]  # comparable instants during the live minute
    external: dict[str, str]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    vm, prom, promtool = (shutil.which(b) for b in ("victoria-metrics", "prometheus", "promtool"))
    if vm is None:
        pytest.skip("Debian's victoria-metrics not installed (scripts/system-deps.sh)")
    if prom is None or promtool is None:
        pytest.skip("Debian's prometheus/promtool not installed")
    tmp = tmp_path_factory.mktemp("vm")
    con = connect(tmp / "h.duckdb")
    build(con)
    cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})
    last = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30)
    shift = last - END
    coarse = [END - HISTORY + i * COARSE_STEP for i in range(int((HISTORY - FINE) / COARSE_STEP))]
    fine = [END - FINE + i * STEP for i in range(int(FINE / STEP) + 1)]
    om = io.BytesIO()
    export_instants(con, cfg, coarse + fine, om, shift=shift)
    body = render(con, cfg, END, shift_seconds=shift.total_seconds())
    con.close()
    (tmp / "history.om").write_bytes(om.getvalue())
    _blocks(promtool, tmp / "history.om", tmp / "data")

    remote = yaml.safe_load(_doc_block("victoriametrics-prometheus"))
    external = remote["global"]["external_labels"]
    vm_port = _vm_port()
    vm_proc = _start_vm(vm, tmp, vm_port)
    server = agent = agent_stop = proc = None
    try:
        extra = urllib.parse.urlencode([("extra_label", f"{k}={v}") for k, v in external.items()])
        _get(
            f"http://127.0.0.1:{vm_port}/api/v1/import/prometheus?{extra}",
            _to_prometheus_text(om.getvalue().decode()),
        )
        _get(f"http://127.0.0.1:{vm_port}/internal/force_flush")

        rules = yaml.safe_load(render_rules())
        for g in rules["groups"]:
            g["interval"] = "5s"
        (tmp / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False, width=10_000))
        server = serve_metrics("127.0.0.1", 0, lambda: body)
        agent_port, agent_stop, agent = _start_agent(tmp)
        for w in remote["remote_write"]:
            w["url"] = re.sub(r"^http://[^/]+", f"http://127.0.0.1:{vm_port}", w["url"])
            w.setdefault("queue_config", {})["batch_send_deadline"] = "1s"  # test only: send at once
        config = {
            "global": {"scrape_interval": "5s", "evaluation_interval": "5s", **remote["global"]},
            "remote_write": remote["remote_write"],
            "rule_files": [str(tmp / "rules.yaml")],
            "scrape_configs": [
                {
                    "job_name": "slurmscope",
                    "static_configs": [{"targets": [f"127.0.0.1:{server.server_address[1]}"]}],
                    "metric_relabel_configs": [{"action": "labeldrop", "regex": "job|instance"}],
                },
                {"job_name": "nvml-agent", "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]},
            ],
        }
        from tests.integration.test_prometheus_live import _free_port  # noqa: PLC0415

        port = _free_port()
        proc = _start(prom, tmp, port, config)
        started = time.time()
        time.sleep(LIVE)
        now = time.time()
        live = [now - 15, now - 5]
        assert live[0] > started + 15, "the live instants must follow some scrapes and evaluations"
        deadline = time.monotonic() + 60
        while _sent_up_to(port) < now + 5:
            assert time.monotonic() < deadline, "remote write did not catch up: " + str(_sent_up_to(port))
            time.sleep(1)
        _get(f"http://127.0.0.1:{vm_port}/internal/force_flush")
        grid = [(t + shift).timestamp() for t in fine]
        # the fine part's samples 10, 60 and 110 minutes before its end, plus OFFSET; each 1h window is fine
        history = [grid[-2] + OFFSET, grid[-7] + OFFSET, grid[-12] + OFFSET]
        yield Stores(port, vm_port, history, live, {k: str(v) for k, v in external.items()})
    finally:
        if proc is not None:
            _stop(proc)
        if server is not None:
            server.shutdown()
        if agent is not None:
            agent_stop.set()
            agent.join(timeout=30)
        vm_proc.terminate()
        vm_proc.wait(timeout=30)


def _result(port: int, query: str, t: float) -> dict[tuple, tuple[str | None, float]]:
    data = _api(port, "query", query=query, time=f"{t:.3f}")
    if data["resultType"] == "scalar":
        return {(): (None, float(data["result"][1]))}
    out = {}
    for r in data["result"]:
        labels = dict(r["metric"])
        name = labels.pop("__name__", None)
        key = tuple(sorted(labels.items()))
        assert key not in out, f"{query}: two series differ only in their name"
        out[key] = (name, float(r["value"][1]))
    return out


SELECTOR = r"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?"
RANGE_FN = re.compile(rf"\b(?:rate|increase)\(({SELECTOR}\[\d+[smhd]\])\)")


def _raw(
    port: int, selector: str, t: float, external: dict[str, str]
) -> dict[tuple, list[tuple[int, float]]]:
    """The raw samples of a range selector at t (both APIs return them for an instant query of `x[w]`)."""
    out = {}
    for r in _api(port, "query", query=selector, time=f"{t:.3f}")["result"]:
        key = tuple(sorted((k, v) for k, v in r["metric"].items() if k not in external))
        out[key] = [(round(float(ts) * 1000), float(v)) for ts, v in r["values"]]
    return out


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _queries() -> list[tuple[str, str]]:
    out = []
    for m in MODULES:
        board = json.loads(generate()[f"dashboards/{m.SLUG}.json"])
        for title, expr, _instant in panel_queries(board):
            out.append((f"{m.SLUG}: {title}", substitute(expr)))
    for group in yaml.safe_load(render_rules())["groups"]:
        for r in group["rules"]:
            if "record" in r:
                out.append((f"rule {r['record']}", r["expr"]))
    return out


def test_remote_written_samples_arrive(stores):
    """Live samples reach VictoriaMetrics with the external labels: the agent's scrapes and a recording rule."""
    s = stores
    t = s.live[-1]
    vm = _api(s.vm, "query", query='up{job="nvml-agent"}', time=t)["result"]
    assert [(r["metric"].get(k) for k in s.external) for r in vm] and all(
        {k: r["metric"].get(k) for k in s.external} == s.external for r in vm
    ), vm
    assert [float(r["value"][1]) for r in vm] == [1.0]
    n = _api(s.vm, "query", query="count_over_time(cluster:slurmscope_gpu_utilization_ratio:avg[1m])", time=t)
    assert n["result"] and float(n["result"][0]["value"][1]) >= 3  # evaluated every 5 s, written live
    # The imported history is there too, a day back, and carries the same external labels.
    old = _api(s.vm, "query", query='slurmscope_node_down{node="g03"}', time=s.history[-1])["result"]
    assert [{k: r["metric"].get(k) for k in s.external} for r in old] == [s.external]


def test_every_panel_query_and_rule_returns_the_same_series(stores):
    s = stores
    queries = _queries()
    assert len(queries) > 90
    mismatches, kept_name, compared, nonempty, rate_diffs, nan_only = [], set(), 0, set(), [], set()
    for label, q in queries:
        for t in s.history + s.live:
            windows = RANGE_FN.findall(q)
            if windows:
                # rate/increase: the functions differ by definition (module docstring), the samples must not.
                for sel in windows:
                    p_raw, v_raw = _raw(s.prom, sel, t, s.external), _raw(s.vm, sel, t, s.external)
                    compared += 1
                    if p_raw:
                        nonempty.add(label)
                    if p_raw.keys() != v_raw.keys():
                        mismatches.append(
                            (label, t, "samples' series", sorted(p_raw.keys() ^ v_raw.keys())[:3])
                        )
                        continue
                    for key, samples in p_raw.items():
                        other = v_raw[key]
                        if [x for x, _ in samples] != [x for x, _ in other] or not all(
                            _same(a, b) for (_, a), (_, b) in zip(samples, other, strict=True)
                        ):
                            mismatches.append((label, t, "samples", sel, dict(key)))
                rate_diffs.append((label, t, _result(s.prom, q, t), _result(s.vm, q, t)))
                continue
            full = _result(s.prom, q, t)
            p = {k: x for k, x in full.items() if not math.isnan(x[1])}
            if len(p) < len(full):
                nan_only.add(label)
            v = {
                tuple((k, val) for k, val in key if k not in s.external): x
                for key, x in _result(s.vm, q, t).items()
            }
            compared += 1
            if p:
                nonempty.add(label)
            if p.keys() != v.keys():
                mismatches.append((label, t, "series", sorted(p.keys() ^ v.keys())[:3]))
                continue
            for key, (pname, pval) in p.items():
                vname, vval = v[key]
                if pname is not None and vname != pname:
                    mismatches.append((label, t, "name", pname, vname))
                elif pname is None and vname is not None:
                    kept_name.add(label)
                if not _same(pval, vval):
                    mismatches.append((label, t, "value", dict(key), pval, vval))
    print(
        f"{compared} evaluations of {len(queries)} queries; MetricsQL kept __name__ in: {sorted(kept_name)}"
    )
    differ = sorted(
        {
            label
            for label, _t, p, v in rate_diffs
            if p.keys() != v.keys() or any(not _same(x[1], v[k][1]) for k, x in p.items())
        }
    )
    print(f"NaN in Prometheus, absent in VictoriaMetrics: {sorted(nan_only)}")
    print(f"rate/increase answers that differ (same samples, other definition): {differ}")
    assert not mismatches, "\n".join(map(str, mismatches[:20])) + f"\n({len(mismatches)} in all)"
    # Comparing empty answers proves nothing: most queries must have data at some instant.
    empty = [label for label, _q in queries if label not in nonempty]
    assert len(empty) < len(queries) / 4, f"no data in Prometheus for {empty}"
    print("empty at every instant in both:", empty)
