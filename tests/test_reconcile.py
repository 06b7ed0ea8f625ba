"""The marts against the simulator's ground truth (events.jsonl) of the shared demo: exact reconciliation.

Expected values come from what the simulator did, never from the database, so a pipeline bug (or a parser
bug upstream) shows as a mismatch.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import pytest

from tests.demo_fixture import demo_run  # noqa: F401  (fixture)


def _t(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _attempts(events):
    gpus, account, start, end = {}, {}, {}, {}
    for e in events:
        if e["type"] == "submit":
            gpus[e["job_id_raw"]] = e["gpus"]
            account[e["job_id_raw"]] = e["account"]
        elif e["type"] == "start":
            start[(e["job_id_raw"], e["attempt"])] = e
        elif e["type"] == "end":
            end[(e["job_id_raw"], e["attempt"])] = e
    return gpus, account, start, end


def test_pipelines_ran_in_the_demo(demo_run):  # noqa: F811
    mine = ["mart_cost_daily", "mart_requeues_daily", "mart_backfill_daily", "mart_occupancy"]
    assert all(demo_run.result.pipelines[m] > 0 for m in mine), demo_run.result.pipelines


def test_gpu_seconds_per_account_match_the_simulator(demo_run):  # noqa: F811
    events = demo_run.events()
    gpus, account, start, end = _attempts(events)
    sim_end = _t(demo_run.result.summary["end"])
    expected: dict[str, float] = defaultdict(float)
    for key, s in start.items():
        used = end[key]["gpu_seconds"] if key in end else gpus[key[0]] * (sim_end - _t(s["t"]))
        expected[account[key[0]]] += used
    con = demo_run.connect()
    try:
        got = dict(
            con.execute(
                "SELECT account, sum(gpu_seconds) FROM mart_cost_daily GROUP BY account HAVING sum(gpu_seconds) > 0"
            ).fetchall()
        )
        counters = dict(
            con.execute(
                "SELECT account, sum(gpu_seconds_total) FROM mart_usage_counters GROUP BY account"
                " HAVING sum(gpu_seconds_total) > 0"
            ).fetchall()
        )
    finally:
        con.close()
    want = {a: v for a, v in expected.items() if v > 0}
    assert got == pytest.approx(want, rel=1e-12)
    assert counters == pytest.approx(want, rel=1e-12)


def test_requeues_match_the_simulator(demo_run):  # noqa: F811
    requeues = [e for e in demo_run.events() if e["type"] == "requeue"]
    con = demo_run.connect()
    try:
        got = con.execute("SELECT sum(requeues), sum(requeued_jobs) FROM mart_requeues_daily").fetchone()
    finally:
        con.close()
    assert requeues, "the demo should requeue at least one job"
    # requeued_jobs counts distinct jobs per day; the demo's requeues fall on distinct job-days or not,
    # so only the attempt count is exact.
    assert got[0] == len(requeues)


def test_backfilled_jobs_match_the_simulator(demo_run):  # noqa: F811
    events = demo_run.events()
    expected: dict[str, int] = defaultdict(int)
    for e in events:
        if e["type"] == "start":
            expected[e["sched_by"]] += 1
    con = demo_run.connect()
    try:
        got = dict(
            con.execute("SELECT sched_by, sum(jobs) FROM mart_backfill_daily GROUP BY sched_by").fetchall()
        )
    finally:
        con.close()
    assert got == dict(expected)


def test_gpu_hours_lost_to_hardware_faults_match_the_simulator(demo_run):  # noqa: F811
    events = demo_run.events()
    _g, _a, _s, end = _attempts(events)
    ended_at = defaultdict(list)
    for (raw, attempt), e in end.items():
        ended_at[raw].append((e["t"], e["gpu_seconds"], attempt))
    lost = 0.0
    killed = set()
    for e in events:
        if e["type"] == "fault" and e.get("cause") == "hardware":
            for raw in e.get("jobs") or []:
                for t, gs, attempt in ended_at[raw]:
                    if t == e["t"] and (raw, attempt) not in killed:
                        killed.add((raw, attempt))
                        lost += gs
    con = demo_run.connect()
    try:
        got = con.execute(
            "SELECT count(*), coalesce(sum(gpu_hours_lost), 0) FROM mart_fault_impact"
        ).fetchone()
    finally:
        con.close()
    assert got[0] == len(killed)
    assert got[1] == pytest.approx(lost / 3600.0, rel=1e-12)


def test_outcomes_by_node_match_the_simulator(demo_run):  # noqa: F811
    """Each ended attempt that ran counts once on every node of its start event's NodeList, with an equal
    share of its GPU-seconds; a per-node total of the simulator's own events must equal the mart."""
    from slurmscope.hostlist import expand_hostlist_lenient

    _g, _a, start, end = _attempts(demo_run.events())
    jobs: dict[tuple[str, str], int] = defaultdict(int)
    hours: dict[tuple[str, str], float] = defaultdict(float)
    for key, e in end.items():
        if key not in start:
            continue  # cancelled while pending: never on a node
        nodes = expand_hostlist_lenient(start[key]["nodes"])
        state = e["state"].split(" by ")[0]  # sacct's "CANCELLED by <uid>" is stored as CANCELLED
        for node in nodes:
            jobs[(node, state)] += 1
            hours[(node, state)] += e["gpu_seconds"] / 3600.0 / len(nodes)
    con = demo_run.connect()
    try:
        rows = con.execute(
            "SELECT node, state, sum(jobs), sum(gpu_hours) FROM mart_job_outcomes_node_daily GROUP BY ALL"
        ).fetchall()
        weekly = con.execute("SELECT sum(jobs), sum(gpu_hours) FROM mart_job_outcomes_node_weekly").fetchone()
    finally:
        con.close()
    assert len(jobs) > 10 and any(len(expand_hostlist_lenient(s["nodes"])) > 1 for s in start.values())
    assert {(n, s): j for n, s, j, _h in rows} == dict(jobs)
    assert {(n, s): h for n, s, _j, h in rows} == pytest.approx(dict(hours), rel=1e-12, abs=1e-9)
    assert weekly[0] == sum(jobs.values()) and weekly[1] == pytest.approx(sum(hours.values()), rel=1e-12)


def _spool_records(run):
    """The telemetry the simulator wrote (spool JSON lines: header, records, footer), read with json only."""
    import json

    samples, intervals = {}, set()
    for path in sorted((run.sim_dir / "spool").rglob("*.jsonl")):
        lines = path.read_text().splitlines()
        node = json.loads(lines[0])["node"]
        for line in lines[1:-1]:
            r = json.loads(line)
            if r["type"] == "sample":
                samples[(node, r["gpu_uuid"], _t(r["minute"].rstrip("Z")))] = r
            elif r["type"] == "job" and not r.get("mig_instance"):
                end = _t(r["interval_end"].rstrip("Z")) if r.get("interval_end") else None
                intervals.add((node, r["gpu_uuid"], r["job_id"], _t(r["interval_start"].rstrip("Z")), end))
    return samples, intervals


def test_usage_weighted_cost_and_energy_match_the_simulators_telemetry(demo_run):  # noqa: F811
    """Per account: GPU-seconds the NVML samples cover, their utilisation-weighted (useful) seconds and
    joules, summed minute by minute over the simulator's own GPU-to-job intervals and samples."""
    events = demo_run.events()
    account = {e["job"]: e["account"] for e in events if e["type"] == "submit"}
    sim_end = _t(demo_run.result.summary["end"])
    samples, intervals = _spool_records(demo_run)
    want: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for node, uuid, job, s, e in intervals:
        e = sim_end if e is None else min(e, sim_end)
        m = s - s % 60
        while m < e:
            held = min(e, m + 60) - max(s, m)
            r = samples.get((node, uuid, m))
            if r is not None and held > 0:
                w = want[account[job]]
                w[0] += held
                w[1] += held * r["util_gpu_mean"] / 100.0
                w[2] += r["energy_joules"] * held / 60.0
            m += 60
    con = demo_run.connect()
    try:
        got = {
            a: [s, u, j]
            for a, s, u, j in con.execute(
                "SELECT account, sum(sampled_gpu_seconds), sum(useful_gpu_seconds), sum(energy_joules)"
                " FROM mart_cost_efficiency_daily GROUP BY account HAVING sum(sampled_gpu_seconds) > 0"
            ).fetchall()
        }
        charged = dict(
            con.execute(
                "SELECT account, sum(gpu_seconds) FROM mart_cost_efficiency_daily GROUP BY ALL"
                " HAVING sum(gpu_seconds) > 0"
            ).fetchall()
        )
        daily = dict(
            con.execute(
                "SELECT account, sum(gpu_seconds) FROM mart_cost_daily GROUP BY ALL"
                " HAVING sum(gpu_seconds) > 0"
            ).fetchall()
        )
    finally:
        con.close()
    assert len(want) >= 2
    assert set(got) == set(want)
    for a, (s, u, j) in want.items():
        assert got[a] == pytest.approx([s, u, j], rel=1e-9), a
    assert charged == pytest.approx(daily, rel=1e-12)  # the charged side is mart_cost_daily's
