"""The demo's own history on a real Prometheus (Debian's 2.42): every panel has data, the right alerts are on.

tests/integration/test_prometheus_live.py proves the rules and panels on a hand-made 26-hour history. This
module does the same with what `slurmscope demo` builds, at the size of the shared `demo_run` (64 GPUs, 3
simulated days) but with seed SEED: the shared seed 7 has no fault open at the end of its period (its only
node fault, an XID 79 on day 1, was resolved two hours later), so every alert is quiet there and nothing could
be shown firing. A scan of seeds 1-89 (simulate only) found faults open at the end in 1, 4, 10, 13, 21, 43,
47 and 79; seed 4 ends with h100-001 DOWN ("Not responding") for three hours, an under-served account
(alignment) starved, and jobs pending.

The simulated period is exported with `export_instants` (every 30 minutes, then every 5 minutes for the last
FINE hours), shifted so that its end lands 30 s ago, turned into TSDB blocks by `promtool tsdb
create-blocks-from openmetrics`, the recording rules are backfilled over it (`promtool tsdb create-blocks-from
rules`), and Prometheus starts on loopback with the generated rules, scraping a `demo` job (serve_metrics with
the demo's final render, as `slurmscope demo` serves it) and a node agent on the fake NVML.

What is expected is derived without asking Prometheus: from the simulator's ground truth (events.jsonl:
node faults, job ends, requeues; the snapshot schedule in the file names) or from the raw DuckDB tables
by a separate computation in this file. Alerts and panels that the demo cannot exercise are listed with the
reason (IMPOSSIBLE_IN_DEMO, NO_DATA_IN_DEMO) and each reason is itself checked against the data, so that
the lists go stale loudly when the simulator or the exporter starts producing what they lack.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from slurmscope.alerts import thresholds as th
from slurmscope.alerts.build import render_rules
from slurmscope.alerts.rules import ALERTS, XID_ALERTS
from slurmscope.dashboards.build import MODULES, generate
from slurmscope.dashboards.common import LIVE, panel_queries, substitute

from slurmscope import xid as xids
from slurmscope.config import load_config
from slurmscope.demo import Progress, run_demo
from slurmscope.exporter import export_instants, render, serve_metrics
from slurmscope.slurm_states import JOB_FAILURE_CLASSES, JOB_PENDING_SCHEDULER_REASONS, job_failure_class
from tests.demo_fixture import DEMO_DAYS, DEMO_GPUS, DemoRun
from tests.integration.test_prometheus_live import (
    _api,
    _blocks,
    _for_state,
    _free_port,
    _start,
    _start_agent,
    _start_scraping,
    _stop,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

# Half-hourly far back: any 1h window then holds two samples, so 1h rates (recording rules, job alerts) have a
# value at every instant, and t - 1h and t - 6h are instants too (exact increases). Every instant costs ~70
# DuckDB queries, so the fine part is kept to what the alerts need: the 15m event windows and the longest
# `for:` (1h).
SEED = 4  # see the module docstring: the shared demo's seed 7 ends with no fault open
COARSE_STEP = timedelta(minutes=30)
FINE = timedelta(hours=3)
STEP = timedelta(minutes=5)
LAG = timedelta(seconds=30)  # the history's last instant lands this long before Prometheus starts


def failure_of(e: dict, hardware_kills: set[tuple[int, str]]) -> str:
    """The failure class of an `end` event by the simulator's own account: the split of
    docs/pipelines.md#job-failures, with a FAILED attempt the system's when a hardware fault event of
    events.jsonl lists it among the jobs it killed (the pipeline finds the same from the node records)."""
    return job_failure_class(
        e["state"].split(" by ")[0],
        e["state"],
        started=e.get("elapsed", 0) > 0 or e["state"] in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "REQUEUED"),
        incident=(e["job_id_raw"], e["t"]) in hardware_kills,
    )


def hardware_kills(ev: list[dict]) -> set[tuple[int, str]]:
    """(job id, time) of the attempts the simulator's hardware faults killed."""
    return {
        (j, e["t"])
        for e in ev
        if e["type"] == "fault" and e.get("cause") == "hardware"
        for j in e.get("jobs") or ()
    }


_NO_BUDGETS = "no budgets in the demo config, no GrpTRESMins in its sshare: mart_budget_period is empty"
# Alerts the 3-day demo cannot raise at all, each with why; test_impossible_alerts_have_no_cause checks the
# reasons hold in the demo's data (so this list fails when the simulator learns to produce the cause).
IMPOSSIBLE_IN_DEMO = {
    "GpuEccUncorrectable": "the simulator's NVML telemetry writes ecc_uncorrected_total = 0 for every minute",
    "GpuRowRemapFailed": "the simulator's NVML telemetry never sets remapped_failed",
    "GpuCountMismatch": "the simulated inventory lists every GPU of a telemetry node (a GPU that falls off the bus "
    "is not removed from it)",
    "SlurmControllerUnreachable": "the simulator writes no `scontrol ping` snapshots (controller_pings is empty)",
    "SlurmAccountBudgetSpent": _NO_BUDGETS,
    "SlurmAccountBudgetForecastOver": _NO_BUDGETS,
    "SlurmscopeCollectorStale": "the demo's ingest runs are recorded at wall-clock time, after the simulated "
    "period: no collector run is at or before the rendered instant",
    "SlurmscopeCollectorFailing": "as SlurmscopeCollectorStale: no collector run inside the simulated period",
}


# ---------------------------------------------------------------------------------------------- fixture


@dataclass
class DemoProm:
    port: int
    end: datetime  # end of the simulated period (simulated time)
    shift: timedelta  # simulated time + shift = Prometheus time
    instants: list[datetime]  # the exported instants (simulated time)
    events: list[dict]
    con: object  # read-only DuckDB connection to the demo database
    cluster: str
    tele_nodes: set[str]
    sinfo_times: list[datetime]
    telemetry_days: float  # the simulator writes NVML telemetry (and kmsg XIDs) for the last N days


# promtool 2.42 (cmd/promtool/rules.go, importRule) walks 2-hour blocks from the one holding --start and
# `break`s, writing nothing and exiting 0, when the group's first evaluation after --start falls past the
# end of that block: a --start in the last interval before an even UTC hour backfills no rule at all.
BACKFILL_BLOCK_SECONDS = 7200


def backfill_start(t: int) -> int:
    """`t` moved back to the start of its 2-hour block, where promtool's first evaluation is inside it."""
    return t - t % BACKFILL_BLOCK_SECONDS


def _record_blocks(
    promtool: str, tmp: Path, port: int, group: list[dict], t0: int, t1: int, name: str, expect: bool
) -> None:
    """Backfill recording rules over [t0, t1] from the running Prometheus into tmp/name, every 5 minutes:
    promtool evaluates on its own grid, and 5 minutes (the lookback) is what lets every sample be seen.
    promtool exits 0 when it writes nothing (see BACKFILL_BLOCK_SECONDS), so with `expect` (rules over
    series the history holds) the blocks are counted."""
    path = tmp / f"{name}.rules.yaml"
    path.write_text(
        yaml.safe_dump(
            {"groups": [{"name": name, "interval": "5m", "rules": group}]}, sort_keys=False, width=10_000
        )
    )
    res = subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "rules",
            f"--start={t0}",
            f"--end={t1}",
            f"--url=http://127.0.0.1:{port}",
            f"--output-dir={tmp / name}",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    log = (res.stdout + res.stderr)[-4000:]
    assert not expect or list((tmp / name).glob("*/meta.json")), (
        f"promtool backfilled no block of {name} over [{t0}, {t1}]:\n{log}"
    )


def _move_blocks(src: Path, data: Path) -> None:
    """Blocks written by promtool go into the data directory while Prometheus is stopped."""
    if src.is_dir():
        for block in src.iterdir():
            if block.is_dir() and (block / "meta.json").exists():
                shutil.move(str(block), str(data / block.name))


@pytest.fixture(scope="module")
def demo_run_faulty(tmp_path_factory) -> DemoRun:
    """`slurmscope demo --gpus 64 --days 3 --seed SEED --no-serve`, the shared demo's size with another seed."""
    base = tmp_path_factory.mktemp("demo_faulty")
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "simcluster"})
    result = run_demo(
        cfg,
        str(base / "demo.duckdb"),
        gpus=DEMO_GPUS,
        days=DEMO_DAYS,
        seed=SEED,
        port=0,
        out_dir=base / "out",
        serve=False,
        progress=Progress(stream=io.StringIO()),
    )
    return DemoRun(out_dir=base / "out", db_path=base / "demo.duckdb", result=result)


@pytest.fixture(scope="module")
def demo_prom(demo_run_faulty, tmp_path_factory):
    demo_run = demo_run_faulty
    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or promtool is None:
        pytest.skip("Debian's prometheus/promtool not installed")
    tmp = tmp_path_factory.mktemp("promdemo")
    summary = demo_run.result.summary
    cluster = summary["cluster"]
    start = datetime.fromisoformat(summary["start"]).replace(tzinfo=UTC)
    end = datetime.fromisoformat(summary["end"]).replace(tzinfo=UTC)
    cfg = load_config(None, env={}).with_overrides(cluster={"name": cluster})
    last = datetime.now(UTC).replace(microsecond=0) - LAG
    shift = last - end
    coarse = [start + i * COARSE_STEP for i in range(int((end - FINE - start) / COARSE_STEP))]
    fine = [end - FINE + i * STEP for i in range(int(FINE / STEP) + 1)]
    instants = coarse + fine
    con = demo_run.connect()
    try:
        om = io.BytesIO()
        export_instants(con, cfg, instants, om, shift=shift)
        body = render(con, cfg, end, shift_seconds=shift.total_seconds())  # what `slurmscope demo` serves
    except BaseException:
        con.close()
        raise
    (tmp / "history.om").write_bytes(om.getvalue())
    _blocks(promtool, tmp / "history.om", tmp / "data")
    port = _free_port()
    server = agent = agent_stop = None
    try:
        rules = yaml.safe_load(render_rules())
        # Phase 1: the history alone. Recording rules are backfilled over it (`promtool tsdb create-blocks-from
        # rules`, in two passes because promtool cannot backfill a rule that reads another recording rule),
        # so that panels reading them have the whole simulated period, not just the minutes since start.
        recording = rules["groups"][0]["rules"]
        names = [r["record"] for r in recording]
        passes = [
            [r for r in recording if not any(n in r["expr"] for n in names)],
            [r for r in recording if any(n in r["expr"] for n in names)],
        ]
        t0, t1 = backfill_start(int((instants[0] + shift).timestamp())), int(last.timestamp()) + 1
        for i, group in enumerate(passes):
            proc = _start(prom, tmp, port, {"global": {"scrape_interval": "5s"}})
            try:
                if group:
                    # the second pass reads the usage counters, which the history has no past values of
                    _record_blocks(promtool, tmp, port, group, t0, t1, f"pass{i}", expect=i == 0)
                if i == len(passes) - 1:
                    for_state = _for_state(
                        port, (last - FINE).timestamp(), last.timestamp(), STEP.total_seconds()
                    )
            finally:
                _stop(proc)
            _move_blocks(tmp / f"pass{i}", tmp / "data")
        (tmp / "for_state.om").write_text(for_state)
        _blocks(promtool, tmp / "for_state.om", tmp / "data")
        for g in rules["groups"]:
            g["interval"] = "5s"  # instead of 1m, so the test does not wait minutes for an evaluation
        (tmp / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False, width=10_000))
        server = serve_metrics("127.0.0.1", 0, lambda: body)
        agent_port, agent_stop, agent = _start_agent(tmp)
        proc = _start_scraping(prom, tmp, port, "demo", server.server_address[1], agent_port)
        try:
            sinfo = sorted(
                datetime.fromtimestamp(int(p.stem), UTC)
                for p in (demo_run.sim_dir / "snapshots" / "sinfo").glob("*.txt")
            )
            tele = {p.name for p in (demo_run.sim_dir / "spool").iterdir() if p.is_dir()}
            yield DemoProm(
                port,
                end,
                shift,
                instants,
                demo_run.events(),
                con,
                cluster,
                tele,
                sinfo,
                float(summary["config"]["telemetry_days"]),
            )
        finally:
            _stop(proc)
    finally:
        con.close()
        if server is not None:
            server.shutdown()
        if agent is not None:
            agent_stop.set()
            agent.join(timeout=30)


# ------------------------------------------------------------------------- expectations, independently


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _decide(value: float, threshold: float, rel: float = 0.15) -> bool | None:
    """value > threshold, unless it is within rel of it: Prometheus's rate extrapolation and the exact
    instants of the live evaluations move a borderline value either way; None means 'either'."""
    if value > threshold * (1 + rel):
        return True
    if value < threshold * (1 - rel):
        return False
    return None


@dataclass
class Expected:
    on: dict[tuple[str, tuple], datetime | None]  # (alertname, key labels) -> since when it holds (sim time)
    either: dict[tuple[str, tuple], str]  # borderline: accepted active or not, with why


KEY_LABELS = {
    "SlurmNodeDown": ("node",),
    "SlurmNodeDrainedTooLong": ("node",),
    "SlurmNodeFlapping": ("node",),
    **{name: ("node", "xid") for name, _sev, _todo in XID_ALERTS.values()},
    "GpuFallenOffBus": ("node",),
    "GpuThrottlingSustained": ("node", "gpu"),
    "SlurmJobFailureRateHigh": ("partition", "failure"),
    "SlurmRequeueSpike": ("partition",),
    "SlurmNodeFaultJobKills": ("partition",),
    "SlurmWaitTimeP90Drift": ("partition",),
    "SlurmFairShareStarvation": ("account",),
    "SlurmBackfillStalled": (),
    "GpuUtilizationDrift": (),
    "GpuFleetDrift": ("entity", "signal"),
    "NodeErrorRateDrift": ("node", "signal"),
    "SlurmTrendDrift": ("entity_type", "entity", "signal"),
    "SlurmscopeMetricsStale": (),
    "GpuEccUncorrectable": ("node", "gpu"),
    "GpuRowRemapFailed": ("node", "gpu"),
    "GpuCountMismatch": ("node",),
    "SlurmControllerUnreachable": (),
    "SlurmAccountBudgetSpent": ("account", "budget"),
    "SlurmAccountBudgetForecastOver": ("account", "budget"),
    "SlurmscopeCollectorStale": ("collector",),
    "SlurmscopeCollectorFailing": ("collector",),
}


def _dur(text: str) -> timedelta:
    n, unit = int(text[:-1]), text[-1]
    return timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: n})


def expected_at_end(d: DemoProm, now: datetime) -> Expected:
    """Which alerts the demo's history implies at its end, from events.jsonl and the raw tables.

    `now` is the instant Prometheus evaluates at, in simulated time (the end plus however long the setup
    took): its windows reach back from there, and after the end the demo's final render is all it sees.
    """
    end, ev = d.end, d.events
    on: dict[tuple[str, tuple], datetime | None] = {}
    either: dict[tuple[str, tuple], str] = {}

    # Nodes (events.jsonl: node_down / drain / drained / resume). sinfo is hourly: a node shows DOWN from the
    # first snapshot at or after it went down.
    state: dict[str, tuple[str, datetime]] = {}
    node_events: dict[str, list[datetime]] = {}
    for e in ev:
        t = _t(e["t"])
        if t > end:
            continue
        if e["type"] == "node_down":
            state[e["node"]] = ("down", t)
            node_events.setdefault(e["node"], []).append(t)
        elif e["type"] == "drained":  # the time sacctmgr's DRAIN event starts
            state[e["node"]] = ("drain", t)
            node_events.setdefault(e["node"], []).append(t)
        elif e["type"] == "drain" and e["node"] not in state:
            state[e["node"]] = ("draining", t)
        elif e["type"] == "resume":
            state.pop(e["node"], None)
    seen = [s for s in d.sinfo_times if s <= end]
    for node, (kind, t) in state.items():
        shown = next((s for s in seen if s >= t), None)
        if kind == "down" and shown is not None:
            on[("SlurmNodeDown", (node,))] = shown
        if kind in ("drain", "draining") and now - t > timedelta(seconds=th.NODE_DRAINED_MAX_SECONDS):
            on[("SlurmNodeDrainedTooLong", (node,))] = t + timedelta(seconds=th.NODE_DRAINED_MAX_SECONDS)
    flap = _dur(th.NODE_FLAP_WINDOW)
    for node, times in node_events.items():
        recent = sorted(t for t in times if t > now - flap)
        if len(recent) >= th.NODE_FLAP_EVENTS:
            on[("SlurmNodeFlapping", (node,))] = recent[th.NODE_FLAP_EVENTS - 1]

    # GPU events: only the telemetry nodes have an NVML agent (and kmsg) in the simulation.
    window = _dur(th.EVENT_WINDOW)
    tele_from = end - timedelta(days=d.telemetry_days)
    for e in ev:
        if e["type"] != "fault" or not e.get("xid") or e["node"] not in d.tele_nodes:
            continue
        t = _t(e["t"])
        if not (tele_from <= t <= end and t > now - window):
            continue
        action = xids.action_of(e["xid"])
        if action in XID_ALERTS:
            on[(XID_ALERTS[action][0], (e["node"], str(e["xid"])))] = t
        if e["xid"] == 79:
            on[("GpuFallenOffBus", (e["node"],))] = t

    # Throttling, from gpu_samples: throttled share of each GPU's minutes in the last window.
    tw = _dur(th.THROTTLE_WINDOW)
    rows = d.con.execute(
        "SELECT node, CAST(gpu_index AS VARCHAR), avg(least(coalesce(throttle_seconds, 0) / 60.0, 1.0))"
        " FROM gpu_samples WHERE minute > ? AND minute <= ? GROUP BY ALL",
        [now - tw, end],
    ).fetchall()
    for node, gpu, share in rows:
        verdict = _decide(share, th.THROTTLE_RATIO)
        if verdict:
            on[("GpuThrottlingSustained", (node, gpu))] = None
        elif verdict is None:
            either[("GpuThrottlingSustained", (node, gpu))] = f"throttled share {share:.2f}"

    # Jobs, from the job ends and requeues of events.jsonl (partition from the submit records).
    part = {e["job_id_raw"]: e["partition"] for e in ev if e["type"] == "submit"}
    for e in ev:
        if e["type"] == "submit_array":
            part.setdefault(e["job_id_raw"], e["partition"])
    hour = timedelta(hours=1)
    ends: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    requeues: dict[str, int] = {}
    killed = hardware_kills(ev)
    for e in ev:
        t = _t(e["t"])
        if not (now - hour < t <= end):
            continue
        if e["type"] == "end":
            ends.setdefault(part.get(e["job_id_raw"], ""), []).append(e["state"])
            classes.setdefault(part.get(e["job_id_raw"], ""), []).append(failure_of(e, killed))
        elif e["type"] == "requeue":
            p = part.get(e["job_id_raw"], "")
            requeues[p] = requeues.get(p, 0) + 1
    for p, states in ends.items():
        n = len(states)
        for cls in JOB_FAILURE_CLASSES:
            failed = sum(c == cls for c in classes[p])
            ratio, many = _decide(failed / n, th.JOB_FAILURE_RATIO), _decide(n, th.JOB_FAILURE_MIN_JOBS - 0.5)
            if ratio and many:
                on[("SlurmJobFailureRateHigh", (p, cls))] = None
            elif ratio is not False and many is not False and (ratio is None or many is None):
                either[("SlurmJobFailureRateHigh", (p, cls))] = (
                    f"{failed} {cls} failures of {n} ended in the last hour"
                )
        kills = sum(s == "NODE_FAIL" for s in states)
        if kills >= th.NODE_FAIL_KILLS_PER_HOUR:
            on[("SlurmNodeFaultJobKills", (p,))] = None
    for p, n in requeues.items():
        verdict = _decide(n, th.REQUEUES_PER_HOUR)
        if verdict:
            on[("SlurmRequeueSpike", (p,))] = None
        elif verdict is None:
            either[("SlurmRequeueSpike", (p,))] = f"{n} requeues in the last hour"

    # Fair-share starvation, from the raw squeue and sshare snapshots at the end.
    pend = dict(
        d.con.execute(
            "SELECT account, min(submit_time) FROM pending_jobs WHERE cluster = ? AND state = 'PENDING' AND"
            " snapshot_time = (SELECT max(snapshot_time) FROM pending_jobs WHERE cluster = ? AND snapshot_time <= ?)"
            " AND list_contains(?, reason) GROUP BY ALL",
            [d.cluster, d.cluster, end, list(JOB_PENDING_SCHEDULER_REASONS)],
        ).fetchall()
    )
    shares = {
        a: (s, u)
        for a, s, u in d.con.execute(
            "SELECT account, norm_shares, effectv_usage FROM shares WHERE cluster = ? AND \"user\" = '' AND"
            " snapshot_time = (SELECT max(snapshot_time) FROM shares WHERE cluster = ? AND snapshot_time <= ?)",
            [d.cluster, d.cluster, end],
        ).fetchall()
    }
    for account, submit in pend.items():
        s, u = shares.get(account, (None, None))
        if s is None or u is None:
            continue
        if (
            now - submit
        ).total_seconds() > th.STARVATION_PENDING_SECONDS and u < th.STARVATION_USAGE_OVER_SHARES * s:
            # Since when: the oldest job passed 12 h pending, if the account stayed under half its share
            # in every sshare snapshot from then on (else unknown).
            crossed = submit + timedelta(seconds=th.STARVATION_PENDING_SECONDS)
            over = d.con.execute(
                "SELECT count(*) FROM shares WHERE cluster = ? AND account = ? AND \"user\" = '' AND snapshot_time"
                " BETWEEN ? AND ? AND NOT (effectv_usage < ? * norm_shares)",
                [d.cluster, account, crossed, end, th.STARVATION_USAGE_OVER_SHARES],
            ).fetchone()[0]
            on[("SlurmFairShareStarvation", (account,))] = crossed if over == 0 else None

    # Backfill: the last cycle time in the latest sdiag, while jobs are pending.
    row = d.con.execute(
        "SELECT bf_last_cycle_when, jobs_pending FROM sched_stats WHERE cluster = ? AND snapshot_time ="
        " (SELECT max(snapshot_time) FROM sched_stats WHERE cluster = ? AND snapshot_time <= ?)",
        [d.cluster, d.cluster, end],
    ).fetchone()
    if row and row[0] is not None and (now - row[0]).total_seconds() > th.BACKFILL_STALL_SECONDS and pend:
        on[("SlurmBackfillStalled", ())] = row[0] + timedelta(seconds=th.BACKFILL_STALL_SECONDS)

    # GPU utilisation drift, from gpu_samples at the exported instants (what the gauge showed then).
    def util_at(t: datetime) -> list[float]:
        return [
            r[0]
            for r in d.con.execute(
                "SELECT util_gpu_mean / 100.0 FROM gpu_samples WHERE cluster = ? AND minute <= ? AND"
                " minute > ? - INTERVAL 15 MINUTE QUALIFY row_number() OVER (PARTITION BY node, gpu_uuid"
                " ORDER BY minute DESC) = 1",
                [d.cluster, t, t],
            ).fetchall()
            if r[0] is not None
        ]

    recent = [u for t in d.instants if now - hour <= t <= end for u in util_at(t)]
    before = [u for t in d.instants if now - hour - timedelta(days=1) <= t <= now - hour for u in util_at(t)]
    if recent and before:
        ratio = (sum(recent) / len(recent)) / max(sum(before) / len(before), 1e-9)
        verdict = _decide(th.UTIL_DRIFT_FACTOR, ratio)  # alert when ratio < factor
        if verdict:
            on[("GpuUtilizationDrift", ())] = None
        elif verdict is None:
            either[("GpuUtilizationDrift", ())] = f"last hour / day before = {ratio:.2f}"

    # Wait-time p90 drift, from mart_wait_times as the gauge showed it at each exported instant.
    waits = d.con.execute(
        'SELECT day, "partition", account, gpu_class, gpu_model, p90_seconds, jobs FROM mart_wait_times'
        " WHERE cluster = ?",
        [d.cluster],
    ).fetchall()
    days = sorted({w[0] for w in waits})

    def latest_day(t: datetime):
        ok = [x for x in days if x <= t.date()]
        return ok[-1] if ok else None

    now_day = latest_day(end)
    baseline: dict[tuple, list[float]] = {}
    for t in d.instants:
        if now - timedelta(days=8) <= t <= now - timedelta(days=1):
            for w in waits:
                if w[0] == latest_day(t) and w[5] is not None:
                    baseline.setdefault(w[1:5], []).append(w[5])
    for p in sorted({w[1] for w in waits}):
        cur = [
            w[5]
            for w in waits
            if w[0] == now_day and w[1] == p and w[6] >= th.WAIT_P90_MIN_JOBS and w[5] is not None
        ]
        base = [sum(v) / len(v) for k, v in baseline.items() if k[0] == p]
        if not cur or not base:
            continue
        value, ref = max(cur), max(base)
        a = _decide(value, th.WAIT_P90_DRIFT_FACTOR * ref)
        b = _decide(value, th.WAIT_P90_MIN_SECONDS)
        if a and b:
            on[("SlurmWaitTimeP90Drift", (p,))] = None
        elif a is not False and b is not False and (a is None or b is None):
            either[("SlurmWaitTimeP90Drift", (p,))] = f"p90 {value:.0f} s vs baseline {ref:.0f} s"

    # Drift alerts page on what the drift pipeline marked breached at its latest run (mart_drift).
    for signal, etype, entity, node in d.con.execute(
        "SELECT signal, entity_type, entity, coalesce(node, '') FROM mart_drift WHERE cluster = ? AND as_of <= ?"
        " QUALIFY row_number() OVER (PARTITION BY signal, entity ORDER BY as_of DESC) = 1 AND breached",
        [d.cluster, end],
    ).fetchall():
        if etype == "gpu":
            on[("GpuFleetDrift", (entity, signal))] = None
        elif etype == "node" and signal.startswith("node_"):
            on[("NodeErrorRateDrift", (node, signal))] = None
        elif etype in ("account", "partition"):
            on[("SlurmTrendDrift", (etype, entity, signal))] = None
    # The served metrics are the render at the end: stale once the setup took longer than the threshold.
    age = (now - end).total_seconds()
    if abs(age - th.METRICS_STALE_SECONDS) < 30:
        either[("SlurmscopeMetricsStale", ())] = f"the render is {age:.0f} s old"
    elif age > th.METRICS_STALE_SECONDS:
        on[("SlurmscopeMetricsStale", ())] = end + timedelta(seconds=th.METRICS_STALE_SECONDS)
    return Expected(on, either)


# ---------------------------------------------------------------------------------------------- tests


def test_history_was_loaded(demo_prom):
    """The simulated period is in Prometheus: the first node that went DOWN shows DOWN from the first hourly
    sinfo after it, not in the one before, and now as the event log says (still down or resumed)."""
    d = demo_prom
    downs = [e for e in d.events if e["type"] == "node_down"]
    assert downs, "the demo's history has no node going down any more; pick another check"
    node, at = downs[0]["node"], _t(downs[0]["t"])
    shown = next(s for s in d.sinfo_times if s >= at)
    before = max(s for s in d.sinfo_times if s < at)
    back = min(
        (_t(e["t"]) for e in d.events if e["type"] == "resume" and e["node"] == node and _t(e["t"]) > at),
        default=None,
    )
    still_down = back is None or not any(back <= s <= d.end for s in d.sinfo_times)
    q = f'slurmscope_node_down{{node="{node}"}}'

    def value(t: datetime | None = None) -> list[float]:
        params = {} if t is None else {"time": (t + d.shift).timestamp() + 60}
        return [float(x["value"][1]) for x in _api(d.port, "query", query=q, **params)["result"]]

    assert value(shown) == [1.0]
    assert value(before) == [0.0]
    assert value() == [1.0 if still_down else 0.0]
    span = (d.end - d.instants[0]).total_seconds()
    r = _api(d.port, "query", query=f"count_over_time({q}[{int(span)}s])")
    assert float(r["result"][0]["value"][1]) >= len(d.instants) - 1


def test_every_rule_is_healthy(demo_prom):
    rules = [r for g in _api(demo_prom.port, "rules")["groups"] for r in g["rules"]]
    assert len(rules) == len(ALERTS) + len(yaml.safe_load(render_rules())["groups"][0]["rules"])
    assert not [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]


# Panels that legitimately have no data in the 3-day demo, with why (checked: each must really be empty, and
# test_impossible_alerts_have_no_cause checks the cause in the demo's data).
_ONE_PIPELINE_RUN = (
    "the demo runs the pipelines once, at the end of the simulated period, so the usage and "
    "cost counters (mart_usage_counters) have one value in the history and no rate over it"
)
NO_DATA_IN_DEMO: dict[tuple[str, str], str] = {
    ("cost", "Budget used this period (burn-down)"): _NO_BUDGETS,
    ("cost", "Budget forecast at period end"): _NO_BUDGETS,
    ("cost", "Budgets: used and forecast now"): _NO_BUDGETS,
    ("cost", "Money budgets this period"): _NO_BUDGETS,
    ("cost", "Spend per hour by account"): _ONE_PIPELINE_RUN,
    ("cost", "GPUs in use by account"): _ONE_PIPELINE_RUN,
    ("cost", "Cost per GPU-hour by account"): _ONE_PIPELINE_RUN,
}


def _panels() -> list[tuple[str, str, str, bool]]:
    out = []
    files = generate()
    for m in MODULES:
        board = json.loads(files[f"dashboards/{m.SLUG}.json"])
        for title, expr, instant in panel_queries(board):
            out.append((m.SLUG, title, substitute(expr), instant))
    return out


def test_every_dashboard_query_returns_data(demo_prom):
    """Range panels over the simulated period (history only); stat, table and "(live)" panels now."""
    d = demo_prom
    begin, last = (d.instants[0] + d.shift).timestamp(), (d.end + d.shift).timestamp()
    empty: dict[tuple[str, str], list[str]] = {}
    for slug, title, q, instant in _panels():
        # live panels read the agents' own scrapes, which the backfilled history has none of: now
        if instant or LIVE in title:
            result = _api(d.port, "query", query=q)["result"]
        else:
            result = _api(
                d.port, "query_range", query=q, start=begin, end=last, step=COARSE_STEP.total_seconds()
            )["result"]
        if not result:
            empty.setdefault((slug, title), []).append(q)
    unexplained = {k: v for k, v in empty.items() if k not in NO_DATA_IN_DEMO}
    assert not unexplained, f"panels without data in the demo: {unexplained}"
    stale = set(NO_DATA_IN_DEMO) - set(empty)
    assert not stale, f"listed as empty but they have data now (remove them from NO_DATA_IN_DEMO): {stale}"


def _active(port: int) -> dict[tuple[str, tuple], set[str]]:
    out: dict[tuple[str, tuple], set[str]] = {}
    for a in _api(port, "alerts")["alerts"]:
        name = a["labels"]["alertname"]
        key = tuple(a["labels"].get(n, "") for n in KEY_LABELS.get(name, ()))
        out.setdefault((name, key), set()).add(a["state"])
    return out


def test_alerts_at_the_end_match_the_history(demo_prom):
    """Active alerts are exactly those the ground truth implies at the end of the simulated period; each is
    firing where the history covers its `for:`, pending where it does not."""
    d = demo_prom
    now = datetime.now(UTC) - d.shift
    active = _active(d.port)
    exp = expected_at_end(d, now)
    missing = set(exp.on) - set(active)
    unexpected = set(active) - set(exp.on) - set(exp.either)
    print("expected at the end:", exp.on, "either:", exp.either, "active:", active)
    assert not missing, f"implied by the history but not active: {missing}"
    assert not unexpected, f"active without a cause in the history: { {k: active[k] for k in unexpected} }"
    fors = {a.name: _dur(a.for_) for a in ALERTS}
    for key, since in exp.on.items():
        if since is None:
            continue
        held = now - since
        if held >= fors[key[0]] + STEP:
            assert "firing" in active[key], (key, held, active[key])
        elif held < fors[key[0]] - STEP:
            assert active[key] == {"pending"}, (key, held, active[key])
    assert not ({n for n, _ in active} & set(IMPOSSIBLE_IN_DEMO))


def test_impossible_alerts_have_no_cause(demo_prom):
    """The reasons in IMPOSSIBLE_IN_DEMO hold in the demo's data (and those alerts are not active)."""
    d, c = demo_prom, demo_prom.cluster
    q = d.con.execute
    assert q("SELECT coalesce(max(ecc_uncorrected_total), 0) FROM gpu_samples").fetchone()[0] == 0
    assert q("SELECT count(*) FROM gpu_samples WHERE remapped_failed").fetchone()[0] == 0
    mismatch = q(
        """
        WITH inv AS (SELECT node, count(DISTINCT gpu_uuid) AS n FROM gpu_inventory WHERE cluster = $c
                       AND seen_at = (SELECT max(seen_at) FROM gpu_inventory i WHERE i.node = gpu_inventory.node)
                     GROUP BY node),
             gres AS (SELECT node, max(gpus_total) AS n FROM node_states WHERE cluster = $c
                        AND snapshot_time = (SELECT max(snapshot_time) FROM node_states) GROUP BY node)
        SELECT inv.node FROM inv JOIN gres USING (node) WHERE inv.n < gres.n""",
        {"c": c},
    ).fetchall()
    assert mismatch == []
    assert q("SELECT count(*) FROM controller_pings").fetchone()[0] == 0
    assert q("SELECT count(*) FROM mart_budget_monthly").fetchone()[0] == 0
    assert q("SELECT count(*) FROM mart_budget_period").fetchone()[0] == 0
    first_run = q("SELECT min(started_at) FROM collector_runs WHERE cluster = ?", [c]).fetchone()[0]
    assert first_run is None or first_run > d.end
    active = {n for n, _ in _active(d.port)}
    assert not active & set(IMPOSSIBLE_IN_DEMO)
    assert set(IMPOSSIBLE_IN_DEMO) <= {a.name for a in ALERTS}


# Alerts checked at every coarse instant of the history: their expression in Prometheus against the same
# condition computed from events.jsonl. Counters sampled every COARSE_STEP on a grid that includes t - 1h
# and t - 6h give exact increases (Prometheus 2.x range selectors include both ends), so these compare
# exactly; the event-window (15m) alerts need finer samples than the old history has.
HISTORY_ALERTS = (
    "SlurmNodeDown",
    "SlurmNodeFlapping",
    "SlurmJobFailureRateHigh",
    "SlurmNodeFaultJobKills",
    "SlurmRequeueSpike",
)


JOB_ALERTS = ("SlurmJobFailureRateHigh", "SlurmNodeFaultJobKills", "SlurmRequeueSpike")


def expected_over_history(d: DemoProm, grid: list[datetime]) -> tuple[set, set]:
    """(alertname, key, instant) whose condition holds per the ground truth, and the instants at which the
    job alerts cannot be compared exactly (a job-counter series born inside the window, a ratio exactly at
    the threshold)."""
    ev = d.events
    out: set[tuple[str, tuple, datetime]] = set()
    skip: set[datetime] = set()
    part = {e["job_id_raw"]: e["partition"] for e in ev if e["type"] in ("submit", "submit_array")}
    first_pair: dict[tuple, datetime] = {}
    for e in ev:
        if e["type"] in ("submit", "submit_array"):
            first_pair.setdefault((e["partition"], e["account"]), _t(e["t"]))
    downs = [(e["node"], _t(e["t"])) for e in ev if e["type"] == "node_down"]
    resumes = [(e["node"], _t(e["t"])) for e in ev if e["type"] == "resume"]
    node_ev = [(e["node"], _t(e["t"])) for e in ev if e["type"] in ("node_down", "drained")]
    killed = hardware_kills(ev)
    ends = [
        (part.get(e["job_id_raw"], ""), e["state"], _t(e["t"]), failure_of(e, killed))
        for e in ev
        if e["type"] == "end"
    ]
    requeues = [(part.get(e["job_id_raw"], ""), _t(e["new_submit"])) for e in ev if e["type"] == "requeue"]
    hour, six = timedelta(hours=1), _dur(th.NODE_FLAP_WINDOW)
    for t in grid:
        shown = max((s for s in d.sinfo_times if s <= t), default=None)
        if shown is not None:
            for node, td in downs:
                back = min((tr for n, tr in resumes if n == node and tr > td), default=None)
                if td <= shown and (back is None or shown < back):
                    out.add(("SlurmNodeDown", (node,), t))
        for node in {n for n, _ in node_ev}:
            if sum(1 for n, x in node_ev if n == node and t - six < x <= t) >= th.NODE_FLAP_EVENTS:
                out.add(("SlurmNodeFlapping", (node,), t))
        if any(t - hour < x <= t for x in first_pair.values()):
            skip.add(t)  # a series born inside the window: Prometheus extrapolates its first sample
        for p in {p for p, _, _, _ in ends}:
            states = [s for q, s, x, _ in ends if q == p and t - hour < x <= t]
            for cls in JOB_FAILURE_CLASSES:
                failed = sum(1 for q, _, x, c in ends if q == p and t - hour < x <= t and c == cls)
                if states and len(states) >= th.JOB_FAILURE_MIN_JOBS:
                    if math.isclose(failed / len(states), th.JOB_FAILURE_RATIO):
                        skip.add(t)
                    elif failed / len(states) > th.JOB_FAILURE_RATIO:
                        out.add(("SlurmJobFailureRateHigh", (p, cls), t))
            if sum(s == "NODE_FAIL" for s in states) >= th.NODE_FAIL_KILLS_PER_HOUR:
                out.add(("SlurmNodeFaultJobKills", (p,), t))
        for p in {p for p, _ in requeues}:
            if sum(1 for q, x in requeues if q == p and t - hour < x <= t) > th.REQUEUES_PER_HOUR:
                out.add(("SlurmRequeueSpike", (p,), t))
    return out, skip


def test_alert_conditions_over_the_history(demo_prom):
    """At every coarse instant of the simulated period, each HISTORY_ALERTS expression holds in Prometheus
    exactly where the simulator's event log says its condition held (and the demo has at least one)."""
    d = demo_prom
    step = COARSE_STEP
    grid = [t for t in d.instants if (t - d.instants[0]) % step == timedelta(0)]
    want, skip = expected_over_history(d, grid)
    got: set[tuple[str, tuple, datetime]] = set()
    by_ts = {int((t + d.shift).timestamp()): t for t in grid}
    exprs = {a.name: a.expr for a in ALERTS}
    for name in HISTORY_ALERTS:
        res = _api(
            d.port,
            "query_range",
            query=exprs[name],
            start=(grid[0] + d.shift).timestamp(),
            end=(grid[-1] + d.shift).timestamp(),
            step=step.total_seconds(),
        )["result"]
        for r in res:
            key = tuple(r["metric"].get(n, "") for n in KEY_LABELS[name])
            for ts, _v in r["values"]:
                got.add((name, key, by_ts[int(float(ts))]))
    # An instant whose window reaches before the history starts sees a partial window: not comparable.
    window = {"SlurmNodeFlapping": _dur(th.NODE_FLAP_WINDOW), "SlurmNodeDown": timedelta(0)}

    def comparable(x: tuple[str, tuple, datetime]) -> bool:
        if x[0] in JOB_ALERTS and x[2] in skip:
            return False
        return x[2] - window.get(x[0], timedelta(hours=1)) >= d.instants[0]

    got = {x for x in got if comparable(x)}
    want = {x for x in want if comparable(x)}
    assert len(skip) < len(grid) / 4, "most of the history was skipped"
    assert want, "the demo's history no longer implies any of HISTORY_ALERTS; pick another seed or alert"
    assert got - want == set(), f"in Prometheus without a cause in events.jsonl: {sorted(got - want)[:10]}"
    assert want - got == set(), f"implied by events.jsonl but not in Prometheus: {sorted(want - got)[:10]}"
    print(
        f"history check: {len(grid)} instants ({len(skip)} skipped for the job alerts), matched:",
        sorted((n, k, t.isoformat()) for n, k, t in want),
    )


def test_agent_is_scraped_and_kept_apart(demo_prom):
    """The fake-NVML agent's two GPUs are in Prometheus, and the central GPU series (what panels and rules
    read) are the demo's own: their power sum is the latest minute of each GPU in gpu_samples at the end."""
    d = demo_prom
    up = _api(d.port, "query", query='up{job="nvml-agent"}')["result"]
    assert [float(r["value"][1]) for r in up] == [1.0]
    agent = _api(d.port, "query", query='count(slurmscope_gpu_power_watts{source="agent"})')["result"]
    assert [float(r["value"][1]) for r in agent] == [2.0]
    want = d.con.execute(
        "SELECT sum(power_mean_watts) FROM (SELECT power_mean_watts FROM gpu_samples WHERE cluster = ? AND minute <= ?"
        " AND minute > ? - INTERVAL 15 MINUTE QUALIFY row_number() OVER (PARTITION BY node, gpu_uuid"
        " ORDER BY minute DESC) = 1)",
        [d.cluster, d.end, d.end],
    ).fetchone()[0]
    got = _api(
        d.port,
        "query",
        query=substitute('sum(slurmscope_gpu_power_watts{cluster=~"$cluster", source="central"})'),
    )
    assert float(got["result"][0]["value"][1]) == pytest.approx(want)
