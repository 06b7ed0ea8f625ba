"""Reliability formulas on tiny literal frames; expected values worked out by hand in the comments."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from slurmscope.pipelines import reliability as rel
from slurmscope.pipelines.common import UTC_DT
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config

JOB_SCHEMA = {
    "job_id_raw": pl.Int64,
    "submit_time": UTC_DT,
    "attempt": pl.Int32,
    "account": pl.String,
    "partition": pl.String,
    "state": pl.String,
    "state_raw": pl.String,
    "start_time": UTC_DT,
    "end_time": UTC_DT,
    "elapsed_seconds": pl.Int64,
    "gpus": pl.Int32,
    "nodes": pl.Int32,
    "node_list": pl.String,
}
EVENT_SCHEMA = {
    "node": pl.String,
    "time_start": UTC_DT,
    "time_end": UTC_DT,
    "state": pl.String,
    "reason": pl.String,
    "reason_user": pl.String,
}
GPU_EVENT_SCHEMA = {"node": pl.String, "event_time": UTC_DT, "event_type": pl.String, "xid": pl.Int32}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def params(now: str, tz: str = "UTC", **reliability) -> dict:
    cfg = load_config(env={}).with_overrides(billing={"timezone": tz}, reliability=reliability)
    return pipeline_params(cfg, Window(EPOCH, ts(now), True))


def jobs(rows) -> pl.LazyFrame:
    """Rows as (job_id_raw, submit, attempt, account, partition, state, start, end, elapsed, gpus, nodes,
    node_list); state_raw is the state as sacct prints it for all but a cancel."""
    full = [(*r[:6], r[5], *r[6:]) for r in rows]
    return pl.LazyFrame(full, schema=JOB_SCHEMA, orient="row")


def events(rows) -> pl.LazyFrame:
    """Node events as (node, start, end, state, reason), set by root."""
    return pl.LazyFrame([(*r, "root") for r in rows], schema=EVENT_SCHEMA, orient="row")


SNAPSHOT_SCHEMA = {
    "node": pl.String,
    "snapshot_time": UTC_DT,
    "state": pl.String,
    "state_flags": pl.String,
    "reason": pl.String,
    "reason_user": pl.String,
}


def members(p, node_events=None, gpu_events=None, snapshots=None, times=None) -> pl.LazyFrame:
    """Every record of unavailability, as compute() gathers them."""
    return pl.concat(
        [
            rel.event_members(node_events if node_events is not None else events([]), p),
            rel.snapshot_members(
                snapshots if snapshots is not None else pl.LazyFrame(schema=SNAPSHOT_SCHEMA),
                times if times is not None else pl.LazyFrame(schema={"snapshot_time": UTC_DT}),
                p,
            ),
            rel.gpu_members(
                gpu_events if gpu_events is not None else pl.LazyFrame(schema=GPU_EVENT_SCHEMA), p
            ),
        ]
    )


D = "2026-02-01"
OUTCOME_JOBS = [
    # job 1: NODE_FAIL after 1 h on 2 GPUs (2 GPU-h), requeued; its second attempt completes in 30 min (1 GPU-h)
    (1, ts(f"{D} 08:00"), 1, "a", "gpu", "NODE_FAIL", ts(f"{D} 09:00"), ts(f"{D} 10:00"), 3600, 2, 1, "n1"),
    (1, ts(f"{D} 10:01"), 2, "a", "gpu", "COMPLETED", ts(f"{D} 13:30"), ts(f"{D} 14:00"), 1800, 2, 1, "n2"),
    # job 2: FAILED at 01:00 UTC next day after 15 min on 4 GPUs (1 GPU-h)
    (
        2,
        ts(f"{D} 23:00"),
        1,
        "b",
        "gpu",
        "FAILED",
        ts("2026-02-02 00:45"),
        ts("2026-02-02 01:00"),
        900,
        4,
        1,
        "n3",
    ),
    # job 3: ends 23:30 UTC, i.e. 00:30 on 2 Feb in Berlin; 1 GPU-h
    (3, ts(f"{D} 20:00"), 1, "b", "gpu", "TIMEOUT", ts(f"{D} 22:30"), ts(f"{D} 23:30"), 3600, 1, 1, "n3"),
    # still running: not an outcome
    (4, ts(f"{D} 20:00"), 1, "b", "gpu", "RUNNING", ts(f"{D} 22:30"), None, None, 1, 1, "n3"),
]


def test_outcomes_and_requeues_by_day():
    p = params("2026-02-03 00:00")
    days = rel.by_end_day(rel.ended_attempts(jobs(OUTCOME_JOBS)), p)
    got = rel.outcomes(days).collect().sort("day", "account", "state")
    # failure class from the state alone (no incident linked): NODE_FAIL is the system's, TIMEOUT and FAILED
    # (non-zero exit) the user's
    want = pl.DataFrame(
        [
            (date(2026, 2, 1), "gpu", "a", "COMPLETED", 1, 1.0, "none"),
            (date(2026, 2, 1), "gpu", "a", "NODE_FAIL", 1, 2.0, "system"),
            (date(2026, 2, 1), "gpu", "b", "TIMEOUT", 1, 1.0, "user"),
            (date(2026, 2, 2), "gpu", "b", "FAILED", 1, 1.0, "user"),
        ],
        schema=rel.OUTCOMES_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want)
    got = rel.requeues(days, days).collect().sort("day", "account")
    want = pl.DataFrame(
        [
            # 2 attempts ended, 1 of them requeued (rate 0.5), 2 GPU-h in the requeued attempt
            (date(2026, 2, 1), "gpu", "a", 2, 1, 1, 0.5, 2.0),
            (date(2026, 2, 1), "gpu", "b", 1, 0, 0, 0.0, 0.0),
            (date(2026, 2, 2), "gpu", "b", 1, 0, 0, 0.0, 0.0),
        ],
        schema=rel.REQUEUE_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want)
    # as compute finds them: the requeued attempts among the jobs with several attempts only
    candidates = rel.by_end_day(rel.requeue_candidates(jobs(OUTCOME_JOBS)), p)
    assert candidates.collect()["job_id_raw"].to_list() == [1, 1]
    days = rel.by_end_day(rel.ended_attempts(jobs(OUTCOME_JOBS)), p)
    assert_frame_equal(rel.requeues(days, candidates).collect().sort("day", "account"), want)


def test_outcome_day_is_cut_in_billing_zone():
    p = params("2026-02-03 00:00", tz="Europe/Berlin")
    days = rel.by_end_day(rel.ended_attempts(jobs(OUTCOME_JOBS)), p)
    got = rel.outcomes(days).collect().filter(pl.col("state") == "TIMEOUT")
    assert got["day"].to_list() == [date(2026, 2, 2)]


def test_young_daly():
    # C = 300 s, M = 60000 s: tau = sqrt(2 x 300 x 60000) = 6000 s; lost = 300/6000 + 6000/120000 = 0.1
    tau, lost = rel.young_daly(300, 60000)
    assert tau == 6000.0 and math.isclose(lost, 0.1)
    # and a restart of R = 600 s per interruption: + 600/60000 = 0.01
    assert math.isclose(rel.young_daly(300, 60000, 600)[1], 0.11)
    assert rel.young_daly(300, None) == (None, None)


def test_fault_impact_links_killed_attempts_to_faults():
    j = jobs(
        [
            # job 7: 8 GPUs on g[01-02], NODE_FAIL at 12:00 (2 h = 16 GPU-h); retried, completes in the same 2 h
            (
                7,
                ts(f"{D} 09:00"),
                1,
                "a",
                "gpu",
                "NODE_FAIL",
                ts(f"{D} 10:00"),
                ts(f"{D} 12:00"),
                7200,
                8,
                2,
                "g[01-02]",
            ),
            (
                7,
                ts(f"{D} 12:01"),
                2,
                "a",
                "gpu",
                "COMPLETED",
                ts(f"{D} 12:05"),
                ts(f"{D} 14:05"),
                7200,
                8,
                2,
                "g[01-02]",
            ),
            # failed on g01, where nothing happened; failed on g02 but 60 min after the fault; completed on g02
            (
                8,
                ts(f"{D} 08:00"),
                1,
                "a",
                "gpu",
                "FAILED",
                ts(f"{D} 09:00"),
                ts(f"{D} 12:30"),
                12600,
                1,
                1,
                "g01",
            ),
            (
                9,
                ts(f"{D} 08:00"),
                1,
                "a",
                "gpu",
                "FAILED",
                ts(f"{D} 09:00"),
                ts(f"{D} 13:00"),
                14400,
                1,
                1,
                "g02",
            ),
            (
                10,
                ts(f"{D} 08:00"),
                1,
                "a",
                "gpu",
                "COMPLETED",
                ts(f"{D} 09:00"),
                ts(f"{D} 12:00"),
                10800,
                1,
                1,
                "g02",
            ),
            # job 11: requeued 10 s after an XID on g03 after 1 h on 1 GPU; the retry completes in 10 min
            (
                11,
                ts(f"{D} 06:00"),
                1,
                "b",
                "gpu",
                "REQUEUED",
                ts(f"{D} 07:00:10"),
                ts(f"{D} 08:00:10"),
                3600,
                1,
                1,
                "g03",
            ),
            (
                11,
                ts(f"{D} 08:01"),
                2,
                "b",
                "gpu",
                "COMPLETED",
                ts(f"{D} 08:10"),
                ts(f"{D} 08:20"),
                600,
                1,
                1,
                "g03",
            ),
            # job 12: FAILED 1 min after an ECC event on g04, 30 min on 2 GPUs; never came back
            (
                12,
                ts(f"{D} 06:00"),
                1,
                "c",
                "gpu",
                "FAILED",
                ts(f"{D} 06:30"),
                ts(f"{D} 07:00"),
                1800,
                2,
                1,
                "g04",
            ),
        ]
    )
    node_events = events([("g02", ts(f"{D} 11:59:45"), ts(f"{D} 13:00"), "DOWN", "xid")])
    gpu_events = pl.LazyFrame(
        [
            ("g02", ts(f"{D} 11:59:00"), "xid", 79),  # also matches job 7; the later node event wins
            ("g03", ts(f"{D} 08:00:00"), "xid", 48),
            ("g04", ts(f"{D} 06:59:00"), "ecc", None),
            ("g04", ts(f"{D} 06:58:00"), "nvml_error", None),  # not a fault kind
        ],
        schema=GPU_EVENT_SCHEMA,
        orient="row",
    )
    p = params("2026-02-02 00:00")
    m = members(p, node_events, gpu_events)
    linked = rel.links(j, rel.fault_points(m, rel.incidents(m, p)), p)
    got = rel.fault_impact(j, linked, p).collect().sort("fault_time")
    cols = [
        "fault_time",
        "node",
        "fault_source",
        "fault_kind",
        "job_id_raw",
        "attempt",
        "gpu_hours_lost",
        "came_back",
        "completed_later",
        "resumed_from_checkpoint",
        "incident_start",
        "cause",
    ]
    want = pl.DataFrame(
        [
            (
                ts(f"{D} 06:59"),
                "g04",
                "gpu_event",
                "ecc",
                12,
                1,
                1.0,
                False,
                False,
                False,
                ts(f"{D} 06:59"),
                "hardware",
            ),
            # the retry took 10 min after 1 h was lost: it cannot have restarted from zero
            (
                ts(f"{D} 08:00"),
                "g03",
                "gpu_event",
                "xid:48",
                11,
                1,
                1.0,
                True,
                True,
                True,
                ts(f"{D} 08:00"),
                "hardware",
            ),
            # the retry took as long as the lost attempt: cannot tell. The XID 79 at 11:59 and the DOWN 45 s
            # later are one incident, started by the XID
            (
                ts(f"{D} 11:59:45"),
                "g02",
                "node_event",
                "DOWN",
                7,
                1,
                16.0,
                True,
                True,
                None,
                ts(f"{D} 11:59:00"),
                "hardware",
            ),
        ],
        schema={c: rel.FAULT_SCHEMA[c] for c in cols},
        orient="row",
    )
    assert_frame_equal(got.select(cols), want)
    # the same links decide the failure split: job 12 exited non-zero 1 min after an ECC error on its node,
    # job 9 60 min after the XID on its node (no link): the first is the system's, the second the user's
    split = rel.with_failure(rel._ended(j), linked).collect()
    failure = {(r["job_id_raw"], r["attempt"]): r["failure"] for r in split.to_dicts()}
    assert (failure[12, 1], failure[9, 1], failure[8, 1]) == ("system", "user", "user")
    assert (failure[7, 1], failure[7, 2]) == ("system", "none")  # NODE_FAIL is the system's whatever the link


def test_outcomes_by_node_share_a_multi_node_attempts_gpu_hours():
    rows = [
        # 2 nodes x 4 GPUs for 1 h = 8 GPU-h, NODE_FAIL: 1 attempt and 4 GPU-h on each of gpu01 and gpu02
        (
            7,
            ts(f"{D} 08:00"),
            1,
            "a",
            "gpu",
            "NODE_FAIL",
            ts(f"{D} 09:00"),
            ts(f"{D} 10:00"),
            3600,
            8,
            2,
            "gpu[01-02]",
        ),
        # 3 nodes x 1 GPU for 30 min = 1.5 GPU-h, COMPLETED: 0.5 GPU-h on each of gpu02, gpu03, gpu10
        (
            8,
            ts(f"{D} 08:00"),
            1,
            "a",
            "gpu",
            "COMPLETED",
            ts(f"{D} 11:00"),
            ts(f"{D} 11:30"),
            1800,
            3,
            3,
            "gpu[02-03],gpu10",
        ),
        # one node: gpu01, COMPLETED, 2 GPUs x 1 h = 2 GPU-h
        (
            9,
            ts(f"{D} 08:00"),
            1,
            "b",
            "gpu",
            "COMPLETED",
            ts(f"{D} 12:00"),
            ts(f"{D} 13:00"),
            3600,
            2,
            1,
            "gpu01",
        ),
        # cancelled while pending: no node, not in the node view (still in the partition/account view)
        (10, ts(f"{D} 08:00"), 1, "b", "gpu", "CANCELLED", None, ts(f"{D} 09:00"), 0, 0, 0, "None assigned"),
    ]
    days = rel.by_end_day(rel.ended_attempts(jobs(rows)), params("2026-02-03 00:00"))
    got = rel.outcomes_by_node(days).collect().sort("node", "state")
    want = pl.DataFrame(
        [
            (date(2026, 2, 1), "gpu01", "COMPLETED", 1, 2.0),
            (date(2026, 2, 1), "gpu01", "NODE_FAIL", 1, 4.0),
            (date(2026, 2, 1), "gpu02", "COMPLETED", 1, 0.5),
            (date(2026, 2, 1), "gpu02", "NODE_FAIL", 1, 4.0),
            (date(2026, 2, 1), "gpu03", "COMPLETED", 1, 0.5),
            (date(2026, 2, 1), "gpu10", "COMPLETED", 1, 0.5),
        ],
        schema=rel.NODE_OUTCOMES_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want)
    # Over nodes the GPU-hours add up to the partition/account view (8 + 1.5 + 2); the cancelled attempt
    # counts there only.
    by_part = rel.outcomes(days).collect()
    assert got["gpu_hours"].sum() == by_part["gpu_hours"].sum() == 11.5
    assert by_part["jobs"].sum() == 4


def test_weekly_outcome_views_sum_the_days():
    from slurmscope.db import connect

    con = connect(":memory:")
    for day, node, jobs_, hours in (
        (date(2026, 2, 1), "n1", 1, 1.0),
        (date(2026, 2, 2), "n1", 2, 3.0),
        (date(2026, 2, 8), "n1", 4, 5.0),
        (date(2026, 2, 9), "n1", 8, 7.0),
    ):
        con.execute(
            "INSERT INTO mart_job_outcomes_node_daily VALUES ('c', ?, ?, 'FAILED', ?, ?)",
            [day, node, jobs_, hours],
        )
        con.execute(
            "INSERT INTO mart_job_outcomes_daily VALUES ('c', ?, 'gpu', 'a', 'FAILED', ?, ?, 'user')",
            [day, jobs_, hours],
        )
    # ISO weeks start on Monday: 1 Feb 2026 is a Sunday (week of 26 Jan); 2-8 Feb; 9 Feb starts the next.
    want = [(date(2026, 1, 26), 1, 1.0), (date(2026, 2, 2), 6, 8.0), (date(2026, 2, 9), 8, 7.0)]
    assert (
        con.execute(
            "SELECT week, jobs, gpu_hours FROM mart_job_outcomes_node_weekly ORDER BY week"
        ).fetchall()
        == want
    )
    assert (
        con.execute("SELECT week, jobs, gpu_hours FROM mart_job_outcomes_weekly ORDER BY week").fetchall()
        == want
    )


# --- windows: what the runner deletes, the next run must write back -------------------------------------------

EDGE = datetime(2026, 3, 3, tzinfo=ZoneInfo("Europe/Berlin")).astimezone(UTC)
"""A Berlin midnight: the start of the incremental window below and the first edge of a 2-day sliced rebuild."""


def _add_attempt(
    con,
    job_id: int,
    submit: datetime,
    start: datetime,
    end: datetime,
    state: str,
    node_list: str = "g1",
    gpus: int = 4,
) -> None:
    # ingested when it ended, as the collector would have seen it: an earlier run then does not take it for a
    # late record (which would widen the next window to the whole history)
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, eligible_time, account, "user", "partition",'
        " state, start_time, end_time, elapsed_seconds, gpus, nodes, node_list, ingested_at)"
        " VALUES ('default', ?, ?, ?, ?, 'a', 'u', 'gpu', ?, ?, ?, ?, ?, 1, ?, ?)",
        [
            str(job_id),
            job_id,
            submit,
            submit,
            state,
            start,
            end,
            int((end - start).total_seconds()),
            gpus,
            node_list,
            end,
        ],
    )


def _seed_edge(con, fault_source: str) -> None:
    """Job 1 dies 30 s before EDGE on g1, whose fault is recorded 10 s after EDGE; it is requeued after EDGE
    and completes. Job 2 ends on g2 in the middle of the previous day, untouched by any fault. Job 3's two
    attempts overlap: the first ends after EDGE, the second (submitted later, so the first was requeued) ends
    two hours before it."""
    from datetime import timedelta

    _add_attempt(
        con,
        1,
        EDGE - timedelta(days=1, hours=12),
        EDGE - timedelta(days=1, hours=2),
        EDGE - timedelta(seconds=30),
        "NODE_FAIL",
    )
    _add_attempt(
        con,
        1,
        EDGE + timedelta(minutes=5),
        EDGE + timedelta(minutes=10),
        EDGE + timedelta(hours=2),
        "COMPLETED",
    )
    _add_attempt(
        con,
        2,
        EDGE - timedelta(hours=20),
        EDGE - timedelta(hours=14),
        EDGE - timedelta(hours=12),
        "FAILED",
        node_list="g2",
        gpus=1,
    )
    _add_attempt(
        con,
        3,
        EDGE - timedelta(hours=11),
        EDGE - timedelta(hours=10),
        EDGE + timedelta(hours=3),
        "PREEMPTED",
        node_list="g3",
        gpus=1,
    )
    _add_attempt(
        con,
        3,
        EDGE - timedelta(hours=10, minutes=59),
        EDGE - timedelta(hours=9),
        EDGE - timedelta(hours=2),
        "FAILED",
        node_list="g3",
        gpus=1,
    )
    fault = EDGE + timedelta(seconds=10)
    if fault_source == "gpu_event":
        con.execute(
            "INSERT INTO gpu_events (cluster, node, gpu_uuid, event_time, event_type, xid)"
            " VALUES ('default', 'g1', '', ?, 'xid', 79)",
            [fault],
        )
    else:
        con.execute(
            "INSERT INTO node_events (cluster, node, time_start, time_end, state, reason)"
            " VALUES ('default', 'g1', ?, ?, 'DOWN', 'not responding')",
            [fault, fault + timedelta(hours=1)],
        )


RELIABILITY_MARTS = [
    "mart_fault_impact",
    "mart_requeues_daily",
    "mart_job_outcomes_daily",
    "mart_job_outcomes_node_daily",
    "mart_goodput",
    "mart_node_reliability",
]


def _marts(con) -> dict[str, list[tuple]]:
    return {m: con.execute(f"SELECT * FROM {m} ORDER BY ALL").fetchall() for m in RELIABILITY_MARTS}  # noqa: S608 - mart names are literals above


def _cfg(**overrides):
    return load_config(env={}).with_overrides(billing={"timezone": "Europe/Berlin"}, **overrides)


@pytest.mark.parametrize("fault_source", ["gpu_event", "node_event"])
def test_attempt_ending_just_before_the_window_keeps_its_fault(con, fault_source):
    """The incremental run deletes the fault rows from its window's start on, so it must read back the
    attempts that ended up to FAULT_LEAD_SECONDS before that start."""
    from datetime import timedelta

    from slurmscope.pipelines.runner import run_pipelines

    _seed_edge(con, fault_source)
    now0, now1 = EDGE + timedelta(days=2, hours=1), EDGE + timedelta(days=2, hours=2)
    run_pipelines(con, _cfg(), full=True, now=now0, only=["reliability"])
    run_pipelines(con, _cfg(), now=now1, only=["reliability"])  # last run − 2-day lookback = EDGE + 1 h
    start = con.execute(
        "SELECT window_start FROM pipeline_runs WHERE pipeline = 'reliability' AND run_at = ?", [now1]
    ).fetchone()[0]
    assert start == EDGE  # the window begins at the Berlin midnight between the attempt's end and the fault
    incremental = _marts(con)
    run_pipelines(con, _cfg(), full=True, now=now1, only=["reliability"])
    full = _marts(con)
    kind = "xid:79" if fault_source == "gpu_event" else "DOWN"
    assert con.execute("SELECT fault_source, fault_kind, job_id_raw FROM mart_fault_impact").fetchall() == [
        (fault_source, kind, 1)
    ]
    for mart in RELIABILITY_MARTS:
        assert incremental[mart] == full[mart], mart


def test_sliced_rebuild_equals_one_window_across_a_slice_edge(con):
    """A slice ending at EDGE reads no attempt starting after it, and the next one no attempt ending before
    it: the fault just after the edge keeps its attempt, and the attempt that ended just before it is still
    requeued (its retry starts after the edge), as in one window."""
    from datetime import timedelta

    from slurmscope.pipelines.runner import run_pipelines

    _seed_edge(con, "gpu_event")
    now = EDGE + timedelta(days=3)
    run_pipelines(con, _cfg(), full=True, now=now, only=["reliability"])
    whole = _marts(con)
    assert con.execute("SELECT job_id_raw, came_back FROM mart_fault_impact").fetchall() == [(1, True)]
    # 2 March: job 1's first attempt (requeued), job 2's and job 3's second; 3 March: job 1's second attempt
    # and job 3's first (requeued)
    assert con.execute(
        "SELECT day, attempts_ended, requeues FROM mart_requeues_daily ORDER BY day"
    ).fetchall() == [(date(2026, 3, 2), 3, 1), (date(2026, 3, 3), 2, 1)]
    run_pipelines(con, _cfg(pipelines={"full_slice_days": 2}), full=True, now=now, only=["reliability"])
    runs = con.execute(
        "SELECT window_end FROM pipeline_runs WHERE pipeline = 'reliability' ORDER BY ALL"
    ).fetchall()
    assert (EDGE,) in runs  # a slice ended at the edge
    assert _marts(con) == whole
