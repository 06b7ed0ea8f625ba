"""End-to-end: `slurmscope demo --gpus 64 --days 3 --no-serve`, reconciled with the simulator's ground truth.

Every expected value is computed from events.jsonl (what the simulator did), never from the database or the
sacct text, so a parser, loader or simulator-writer bug shows up as a mismatch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime

from tests.demo_fixture import DEMO_DAYS, DEMO_GPUS

# `demo_run` comes from tests/conftest.py (defined once there, so the demo runs once per session).


def _t(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def _truth(events: list[dict]):
    """Per attempt (job_id_raw, attempt): submit info, start, end; plus arrays never split."""
    submit: dict[tuple[int, int], dict] = {}
    start: dict[tuple[int, int], dict] = {}
    end: dict[tuple[int, int], dict] = {}
    gpus: dict[int, int] = {}
    account: dict[int, str] = {}
    requeues: Counter = Counter()
    arrays: dict[int, int] = {}
    array_tasks_seen: Counter = Counter()
    for e in events:
        typ = e["type"]
        if typ == "submit":
            submit[(e["job_id_raw"], e["attempt"])] = e
            gpus[e["job_id_raw"]] = e["gpus"]
            account[e["job_id_raw"]] = e["account"]
            if "array_job_id" in e:
                array_tasks_seen[e["array_job_id"]] += 1
        elif typ == "submit_array":
            arrays[e["job_id_raw"]] = e["tasks"]
            account[e["job_id_raw"]] = e["account"]
        elif typ == "start":
            start[(e["job_id_raw"], e["attempt"])] = e
        elif typ == "end":
            end[(e["job_id_raw"], e["attempt"])] = e
        elif typ == "requeue":
            requeues[e["job_id_raw"]] += 1
            submit[(e["job_id_raw"], e["attempt"])] = {**e, "gpus": gpus[e["job_id_raw"]]}
    pending_arrays = [a for a, n in arrays.items() if array_tasks_seen[a] < n]
    return submit, start, end, gpus, account, requeues, pending_arrays


def test_no_quarantined_lines(demo_run):
    assert demo_run.result.ingested["sacct"][1] > 0
    for kind, (files, _rows, quarantined) in demo_run.result.ingested.items():
        assert files > 0 and quarantined == 0, kind
    con = demo_run.connect()
    try:
        assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0
    finally:
        con.close()


def test_jobs_per_state_match_event_log(demo_run):
    submit, start, end, _g, _a, _r, pending_arrays = _truth(demo_run.events())
    expected: Counter = Counter()
    for key in submit:
        if key in end:
            st = end[key]["state"]
            expected["CANCELLED" if st.startswith("CANCELLED") else st] += 1
        elif key in start:
            expected["RUNNING"] += 1
        else:
            expected["PENDING"] += 1
    expected["PENDING"] += len(pending_arrays)
    expected = +expected
    con = demo_run.connect()
    try:
        got = dict(con.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
    finally:
        con.close()
    assert got == dict(expected)
    assert expected["NODE_FAIL"] >= 1, "the CI demo should exercise at least one node failure"


def test_attempts_per_requeued_job(demo_run):
    *_, requeues, _p = _truth(demo_run.events())
    assert requeues, "the CI demo should requeue at least one job"
    con = demo_run.connect()
    try:
        got = dict(
            con.execute(
                "SELECT job_id_raw, count(*) FROM jobs GROUP BY job_id_raw HAVING count(*) > 1"
            ).fetchall()
        )
        attempts = con.execute(
            "SELECT job_id_raw, list(attempt ORDER BY submit_time) FROM jobs GROUP BY job_id_raw"
            " HAVING count(*) > 1"
        ).fetchall()
    finally:
        con.close()
    assert got == {j: n + 1 for j, n in requeues.items()}
    for _job, ranks in attempts:
        assert ranks == list(range(1, len(ranks) + 1))


def test_gpu_seconds_per_account(demo_run):
    submit, start, end, gpus, account, _r, _p = _truth(demo_run.events())
    sim_end = _t(demo_run.result.summary["end"])
    expected: dict[str, int] = defaultdict(int)
    for key, s in start.items():
        raw = key[0]
        if key in end:
            expected[account[raw]] += end[key]["gpu_seconds"]
        else:
            expected[account[raw]] += gpus[raw] * (sim_end - _t(s["t"]))
    con = demo_run.connect()
    try:
        got = dict(
            con.execute(
                "SELECT account, sum(gpus * elapsed_seconds) FROM jobs WHERE start_time IS NOT NULL"
                " GROUP BY account HAVING sum(gpus * elapsed_seconds) > 0"
            ).fetchall()
        )
    finally:
        con.close()
    assert got == {a: v for a, v in expected.items() if v > 0}


def test_jobs_started_by_backfill(demo_run):
    events = demo_run.events()
    by = Counter(e["sched_by"] for e in events if e["type"] == "start")
    assert by["backfill"] > 0 and by["main"] > 0 and by["submit"] > 0
    con = demo_run.connect()
    try:
        got = dict(
            con.execute(
                "SELECT sched_by, count(*) FROM jobs WHERE sched_by IS NOT NULL GROUP BY sched_by"
            ).fetchall()
        )
    finally:
        con.close()
    assert got == dict(by)


def test_backfill_never_delays_a_reservation(demo_run):
    """Every backfilled job that shares a node with a reservation made earlier in the same backfill
    cycle (for a higher-priority job) is expected to end (start + time limit) by the reserved start."""
    events = demo_run.events()
    reservations = [e for e in events if e["type"] == "bf_reservation"]
    starts = {
        (e["job_id_raw"], e["t"]): e for e in events if e["type"] == "start" and e["sched_by"] == "backfill"
    }
    bf = [e for e in events if e["type"] == "backfill_start"]
    assert reservations and bf
    checked = 0
    for e in bf:
        assert (e["job_id_raw"], e["t"]) in starts
        prio = starts[(e["job_id_raw"], e["t"])]["priority"]
        for reserved_job, reserved_start in e["shares_nodes_with"]:
            assert _t(e["expected_end"]) <= _t(reserved_start), (e, reserved_job)
            r = next(r for r in reservations if r["job_id_raw"] == reserved_job and r["t"] == e["t"])
            assert r["priority"] >= prio
            checked += 1
    # Independently of the log's own pairing: every reservation logged earlier in the same cycle whose
    # nodes overlap the backfilled job's nodes must start no earlier than the job's expected end.
    # (Reservations logged after the start were computed around the running job and may overlap.)
    made: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for i, ev in enumerate(events):
        if ev["type"] == "bf_reservation":
            made[ev["t"]].append((i, ev))
        elif ev["type"] == "backfill_start":
            mine = set(_nodes(ev["nodes"]))
            for _i, r in made[ev["t"]]:
                if mine & set(_nodes(r["nodes"])):
                    assert _t(ev["expected_end"]) <= _t(r["reserved_start"]), (ev, r)
                    checked += 1
    assert checked > 0, "no backfilled job ran next to a reservation: the check tested nothing"


def _nodes(hostlist: str) -> list[str]:
    from slurmscope.hostlist import expand_hostlist

    return list(expand_hostlist(hostlist))


def test_demo_built_every_stage(demo_run):
    r = demo_run.result
    assert r.summary["gpus"] == DEMO_GPUS
    assert r.summary["end"] > r.summary["start"]
    assert r.pipelines and all(v >= 0 for v in r.pipelines.values()), r.pipelines
    assert (demo_run.out_dir / "report" / "report.html").is_file()
    assert any(p.suffix == ".json" for p in r.built["dashboards"])
    assert r.report_month == "2026-11"
    assert DEMO_DAYS == 3


def test_report_month_is_the_last_full_month_in_the_period():
    from slurmscope.demo import last_full_month

    def d(text: str) -> datetime:
        return datetime.fromisoformat(text).replace(tzinfo=UTC)

    assert last_full_month(d("2026-11-01T00:00:00"), d("2026-12-01T00:00:00")) == "2026-11"
    assert last_full_month(d("2026-11-15T00:00:00"), d("2027-01-03T00:00:00")) == "2026-12"
    assert last_full_month(d("2026-11-01T00:00:00"), d("2026-11-04T00:00:00")) == "2026-11"  # no full month
    assert last_full_month(d("2026-10-31T12:00:00"), d("2026-12-01T00:00:00")) == "2026-11"


def test_progress_bar_is_plain_text_and_ends_each_stage_once():
    import io

    from slurmscope.demo import Progress

    buf = io.StringIO()
    p = Progress(stream=buf, width=10)
    bar = p.stage("ingest")
    for i in range(1, 5):
        bar(i, 4)
    bar(4, 4)
    out = buf.getvalue()
    assert out.count("\n") == 1 and out.endswith("s\n")
    assert "[1/8] ingest" in out and "[##########] 100%" in out


def test_progress_bar_redraws_only_on_a_terminal():
    """A CI log or a pipe gets one line per finished stage and no carriage returns."""
    import io

    from slurmscope.demo import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, redraws in ((io.StringIO(), False), (Tty(), True)):
        bar = Progress(stream=stream, width=10).stage("ingest")
        for i in range(1, 5):
            bar(i, 4)
        out = stream.getvalue()
        assert ("\r" in out) is redraws, out
        assert out.count("\n") == 1 and "[##########] 100%" in out


def test_summary_and_urls_are_printed_before_serving(tmp_path):
    """The summary (report, database, next commands, URLs) comes before the process blocks serving, not
    after Ctrl-C; a normal run logs no warning (the demo's fake node has no kernel log to read)."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slurmscope.cli",
            "--db",
            str(tmp_path / "d.duckdb"),
            "demo",
            "--gpus",
            "16",
            "--days",
            "1",
            "--seed",
            "3",
            "--port",
            str(port),
            "--out",
            str(tmp_path / "demo"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        lines = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "./scripts/test" in line:
                break
        out = "".join(lines)
        assert "slurmscope demo: built" in out and f"Serving http://127.0.0.1:{port}/metrics" in out, out
        assert out.index("slurmscope demo: built") < out.index("Serving http"), out
        assert "Next:" in out and "report --month" in out, out
        assert proc.poll() is None, "the demo stopped instead of serving"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "WARNING" not in err and "no-kmsg" not in err, err
