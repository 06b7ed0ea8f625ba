"""Node incidents, MTBF/MTTR from them, the user/system failure split and goodput with restart overhead, on
tiny literal frames; every expected value is worked out by hand in the comments."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

import polars as pl
from slurmscope.pipelines import reliability as rel
from slurmscope.pipelines.common import UTC_DT

from slurmscope import slurm_states as ss
from tests.pipelines.test_reliability import (
    GPU_EVENT_SCHEMA,
    SNAPSHOT_SCHEMA,
    events,
    members,
    params,
    ts,
)

D = "2026-03-02"
NOW = "2026-03-03 00:00"


def incidents_of(p, **sources) -> pl.DataFrame:
    return rel.incidents(members(p, **sources), p).collect().sort("node", "incident_start")


def one(df: pl.DataFrame, node: str) -> dict:
    rows = df.filter(pl.col("node") == node).to_dicts()
    assert len(rows) == 1, rows
    return rows[0]


def test_a_down_and_its_repair_drain_are_one_node_failure():
    p = params(NOW)
    got = incidents_of(
        p,
        node_events=events(
            [
                # slurmctld marks n1 DOWN at 10:00; an admin resumes it into DRAIN at 10:30 to repair it and
                # returns it to service at 12:00
                ("n1", ts(f"{D} 10:00"), ts(f"{D} 10:30"), "DOWN", "Not responding"),
                ("n1", ts(f"{D} 10:30"), ts(f"{D} 12:00"), "DRAIN", "swapping the IB cable, testing"),
            ]
        ),
    )
    i = one(got, "n1")
    # one incident from 10:00 to 12:00, unavailable 2 h = 7200 s; "Not responding" is a failure reason,
    # "testing" a maintenance one: the failure reason is the more specific evidence
    assert (i["incident_start"], i["incident_end"]) == (ts(f"{D} 10:00"), ts(f"{D} 12:00"))
    assert i["unavailable_seconds"] == 7200.0
    assert (i["cause"], i["failure"], i["node_events"]) == ("node_failure", True, 2)
    assert i["reason"] == "Not responding" and i["states"] == "DOWN,DRAIN"


def test_an_admin_drain_is_maintenance_not_a_failure():
    p = params(NOW)
    got = incidents_of(
        p,
        node_events=events(
            [
                ("n2", ts(f"{D} 08:00"), ts(f"{D} 09:00"), "DRAIN", "scheduled maintenance: kernel upgrade"),
                # a drain with a reason no rule knows is neither a failure nor maintenance
                ("n2", ts(f"{D} 15:00"), ts(f"{D} 15:30"), "IDLE+DRAIN", "ticket 4711"),
                # MAINT (a maintenance reservation) and POWERED_DOWN (power saving) are not unavailability
                ("n2", ts(f"{D} 18:00"), ts(f"{D} 19:00"), "MAINT", None),
                ("n2", ts(f"{D} 20:00"), ts(f"{D} 21:00"), "IDLE+POWERED_DOWN", None),
            ]
        ),
    )
    assert got["cause"].to_list() == ["maintenance", "other"]
    assert got["failure"].to_list() == [False, False]
    nodes = pl.LazyFrame(
        {"node": ["n2"], "first_seen": [ts("2026-03-01 00:00")], "partition": ["gpu"]},
        schema={"node": pl.String, "first_seen": UTC_DT, "partition": pl.String},
    )
    r = rel.node_reliability(got.lazy(), nodes, p).collect().row(0, named=True)
    # 2 days observed, 1.5 h unavailable, 2 incidents, no failure: no MTBF, no MTTR
    assert (r["observed_seconds"], r["down_seconds"], r["incidents"], r["failures"]) == (
        172800.0,
        5400.0,
        2,
        0,
    )
    assert r["mtbf_seconds"] is None and r["mttr_seconds"] is None


def test_overlapping_records_are_not_counted_twice():
    p = params(NOW)
    snaps = pl.LazyFrame(
        [
            # sinfo saw n3 down at 01:00 and 01:30 and back at 02:30 (the cluster's next snapshot)
            ("n3", ts(f"{D} 01:00"), "DOWN", "NOT_RESPONDING", "Kill task failed", "slurm"),
            ("n3", ts(f"{D} 01:30"), "DOWN", None, "Kill task failed", "slurm"),
        ],
        schema=SNAPSHOT_SCHEMA,
        orient="row",
    )
    times = pl.LazyFrame(
        {"snapshot_time": [ts(f"{D} 00:30"), ts(f"{D} 01:00"), ts(f"{D} 01:30"), ts(f"{D} 02:30")]},
        schema={"snapshot_time": UTC_DT},
    )
    got = incidents_of(
        p,
        node_events=events(
            [
                ("n3", ts(f"{D} 00:00"), ts(f"{D} 02:00"), "DOWN", "Kill task failed"),
                ("n3", ts(f"{D} 00:20"), ts(f"{D} 00:40"), "DRAIN", "Kill task failed"),
            ]
        ),
        snapshots=snaps,
        times=times,
    )
    i = one(got, "n3")
    # records [00:00, 02:00), [00:20, 00:40), [01:00, 01:30), [01:30, 02:30): their union is 00:00-02:30,
    # 2.5 h = 9000 s (summed they would be 2 h + 20 min + 30 min + 1 h = 13800 s)
    assert (i["incident_start"], i["incident_end"], i["unavailable_seconds"]) == (
        ts(f"{D} 00:00"),
        ts(f"{D} 02:30"),
        9000.0,
    )
    assert (i["node_events"], i["snapshots"], i["cause"]) == (2, 2, "node_failure")


def test_records_closer_than_the_merge_gap_are_one_incident():
    p = params(NOW, incident_merge_seconds=300)
    got = incidents_of(
        p,
        node_events=events(
            [
                ("n5", ts(f"{D} 00:00"), ts(f"{D} 00:10"), "DOWN", None),
                # back in service for 3 min (< 5 min): the repair did not hold, the same incident
                ("n5", ts(f"{D} 00:13"), ts(f"{D} 00:20"), "DOWN", None),
                # 5 h later: a new one
                ("n5", ts(f"{D} 05:20"), ts(f"{D} 05:30"), "DOWN", None),
            ]
        ),
    )
    assert got.select("incident_start", "incident_end", "unavailable_seconds").rows() == [
        # span 20 min, unavailable 10 + 7 = 17 min (the 3 bridged minutes are not downtime)
        (ts(f"{D} 00:00"), ts(f"{D} 00:20"), 1020.0),
        (ts(f"{D} 05:20"), ts(f"{D} 05:30"), 600.0),
    ]
    # a DOWN with no reason at all is a node failure (Slurm or an admin took the node out)
    assert got["cause"].to_list() == ["node_failure", "node_failure"]


def test_gpu_only_faults_are_hardware_incidents_by_the_catalogue():
    p = params(NOW)
    gpu = pl.LazyFrame(
        [
            ("n4", ts(f"{D} 05:00"), "xid", 79),  # fallen off the bus: reboot_node, hardware
            ("n4", ts(f"{D} 05:00:05"), "xid", 79),  # the same fault on a second GPU: the same incident
            ("n4", ts(f"{D} 07:00"), "xid", 13),  # graphics engine exception: the application's, not a fault
            ("n4", ts(f"{D} 08:00"), "xid", 63),  # row remapping pending: informational (ignore)
            ("n4", ts(f"{D} 09:00"), "nvml_error", None),  # not a fault type
            ("n6", ts(f"{D} 06:00"), "xid", 48),  # double-bit ECC: reset_gpu, hardware ...
        ],
        schema=GPU_EVENT_SCHEMA,
        orient="row",
    )
    got = incidents_of(
        p,
        gpu_events=gpu,
        # ... inside n6's DRAIN, which it explains (the drain's own reason says nothing)
        node_events=events([("n6", ts(f"{D} 05:50"), ts(f"{D} 08:00"), "DRAIN", "ticket 99")]),
    )
    n4 = one(got, "n4")
    assert (n4["cause"], n4["failure"], n4["gpu_faults"], n4["xids"]) == ("hardware", True, 2, "79")
    # an instant: no unavailability Slurm saw, the incident ends where it starts
    assert (n4["unavailable_seconds"], n4["incident_end"]) == (0.0, ts(f"{D} 05:00:05"))
    n6 = one(got, "n6")
    assert (n6["cause"], n6["unavailable_seconds"], n6["xids"]) == ("hardware", 7800.0, "48")
    nodes = pl.LazyFrame(
        {"node": ["n4", "n6"], "first_seen": [ts("2026-03-01 00:00")] * 2, "partition": ["gpu"] * 2},
        schema={"node": pl.String, "first_seen": UTC_DT, "partition": pl.String},
    )
    r = {x["node"]: x for x in rel.node_reliability(got.lazy(), nodes, p).collect().to_dicts()}
    # n4: 1 failure in 172800 s up: MTBF 172800; no repair time (GPU-only), MTTR NULL
    assert (r["n4"]["failures"], r["n4"]["mtbf_seconds"], r["n4"]["mttr_seconds"]) == (1, 172800.0, None)
    # n6: (172800 - 7800) / 1 = 165000; MTTR = the 2 h 10 min span = 7800 s
    assert (r["n6"]["mtbf_seconds"], r["n6"]["mttr_seconds"], r["n6"]["hardware_failures"]) == (
        165000.0,
        7800.0,
        1,
    )


def test_mtbf_and_mttr_count_failure_incidents_only():
    p = params("2026-01-31 00:00")
    got = incidents_of(
        p,
        node_events=events(
            [
                ("n1", ts("2026-01-10 00:00"), ts("2026-01-10 02:00"), "DOWN", "xid 79"),  # hardware, 2 h
                ("n1", ts("2026-01-10 02:00"), ts("2026-01-10 03:00"), "DRAIN", "reboot"),  # its repair: +1 h
                ("n1", ts("2026-01-20 00:00"), ts("2026-01-20 04:00"), "DRAIN", "ecc"),  # hardware, 4 h
                (
                    "n1",
                    ts("2026-01-22 00:00"),
                    ts("2026-01-22 01:00"),
                    "DRAIN",
                    "planned",
                ),  # maintenance, 1 h
                ("n3", ts("2026-01-25 00:00"), None, "DOWN", "dead"),  # ongoing node failure
            ]
        ),
    )
    nodes = pl.LazyFrame(
        {"node": ["n1", "n2"], "first_seen": [ts("2026-01-01 00:00"), ts("2026-01-30 00:00")]},
        schema={"node": pl.String, "first_seen": UTC_DT},
    ).with_columns(partition=pl.lit("gpu"))
    r = {x["node"]: x for x in rel.node_reliability(got.lazy(), nodes, p).collect().to_dicts()}
    # n1: 30 days = 2592000 s observed, 3 + 4 + 1 = 8 h = 28800 s unavailable, 2 failures (the 3 h DOWN+DRAIN
    # and the 4 h ECC drain; the planned drain is not one): MTBF = (2592000 - 28800) / 2 = 1281600;
    # MTTR = (3 h + 4 h) / 2 = 12600 s
    assert (r["n1"]["failures"], r["n1"]["incidents"], r["n1"]["down_seconds"]) == (2, 3, 28800.0)
    assert (r["n1"]["mtbf_seconds"], r["n1"]["mttr_seconds"]) == (1281600.0, 12600.0)
    # n2: seen 1 day, nothing happened
    assert (r["n2"]["observed_seconds"], r["n2"]["failures"], r["n2"]["mtbf_seconds"]) == (86400.0, 0, None)
    # n3: seen only through its ongoing event: down all 6 days observed, no repair yet
    assert (r["n3"]["observed_seconds"], r["n3"]["down_seconds"], r["n3"]["failures"]) == (
        518400.0,
        518400.0,
        1,
    )
    assert (r["n3"]["mtbf_seconds"], r["n3"]["mttr_seconds"]) == (0.0, None)
    ongoing = got.filter(pl.col("node") == "n3")
    assert ongoing["incident_end"].to_list() == [None]


def test_a_sinfo_snapshot_stands_at_most_the_max_gap():
    p = params(NOW, **{})
    snaps = pl.LazyFrame(
        [("n7", ts(f"{D} 10:00"), "DRAINED", "DRAIN", "Xid 79: GPU has fallen off the bus", "root")],
        schema=SNAPSHOT_SCHEMA,
        orient="row",
    )
    # the cluster's next snapshot comes 3 h later (collection stopped): the record stands 1 h
    # (pipelines.node_snapshot_max_gap_seconds), not 3
    times = pl.LazyFrame(
        {"snapshot_time": [ts(f"{D} 10:00"), ts(f"{D} 13:00")]}, schema={"snapshot_time": UTC_DT}
    )
    i = one(incidents_of(p, snapshots=snaps, times=times), "n7")
    assert (i["unavailable_seconds"], i["cause"], i["snapshots"]) == (3600.0, "hardware", 1)


# --- the failure split ----------------------------------------------------------------------------------------

SPLIT_JOBS = [
    # (job, state, state_raw, started, linked to an incident) -> expected class
    (1, "COMPLETED", "COMPLETED", True, False, "none"),
    (2, "FAILED", "FAILED", True, False, "user"),  # non-zero exit
    (3, "FAILED", "FAILED", True, True, "system"),  # non-zero exit because its node failed under it
    (4, "OUT_OF_MEMORY", "OUT_OF_MEMORY", True, True, "user"),  # its own memory, whatever the node did
    (5, "TIMEOUT", "TIMEOUT", True, False, "user"),
    (6, "CANCELLED", "CANCELLED by 1001", True, False, "user"),  # the owner (or a coordinator)
    (7, "CANCELLED", "CANCELLED by 0", True, False, "system"),  # root: an operator's decision
    (8, "CANCELLED", "CANCELLED by 1001", False, False, "none"),  # cancelled before it ran: nothing failed
    (9, "PREEMPTED", "PREEMPTED", True, False, "system"),
    (10, "NODE_FAIL", "NODE_FAIL", True, False, "system"),
    (11, "REQUEUED", "REQUEUED", True, False, "system"),
    (12, "BOOT_FAIL", "BOOT_FAIL", False, False, "system"),
    (13, "DEADLINE", "DEADLINE", True, False, "user"),
    (14, "REVOKED", "REVOKED", True, False, "none"),
]


def _split_frame(rows) -> pl.LazyFrame:
    t0 = ts(f"{D} 08:00")
    return pl.LazyFrame(
        {
            "job_id_raw": [r[0] for r in rows],
            "submit_time": [t0] * len(rows),
            "state": [r[1] for r in rows],
            "state_raw": [r[2] for r in rows],
            "start_time": [t0 if r[3] else None for r in rows],
        },
        schema={
            "job_id_raw": pl.Int64,
            "submit_time": UTC_DT,
            "state": pl.String,
            "state_raw": pl.String,
            "start_time": UTC_DT,
        },
    )


def test_failure_split_follows_the_documented_rule():
    frame = _split_frame(SPLIT_JOBS)
    linked = frame.filter(pl.col("job_id_raw").is_in([r[0] for r in SPLIT_JOBS if r[4]]))
    got = rel.with_failure(frame, linked).collect().sort("job_id_raw")
    assert got["failure"].to_list() == [r[5] for r in SPLIT_JOBS]
    for r in SPLIT_JOBS:
        assert ss.job_failure_class(r[1], r[2], started=r[3], incident=r[4]) == r[5], r


def test_the_polars_split_equals_the_reference_for_every_state():
    states = sorted(set(ss.JOB_STATE_CODES.values()))
    rows = [
        (i, state, raw, started, linked, None)
        for i, (state, raw, started, linked) in enumerate(
            itertools.product(
                states, ("X", "CANCELLED by 0", "CANCELLED by 7", None), (True, False), (True, False)
            )
        )
    ]
    frame = _split_frame(rows)
    linked = frame.filter(pl.col("job_id_raw").is_in([r[0] for r in rows if r[4]]))
    got = rel.with_failure(frame, linked).collect().sort("job_id_raw")["failure"].to_list()
    want = [ss.job_failure_class(r[1], r[2], started=r[3], incident=r[4]) for r in rows]
    assert got == want


# --- goodput -------------------------------------------------------------------------------------------------


def test_goodput_counts_checkpoints_rework_and_restarts_in_both_figures():
    node_rel = pl.LazyFrame(
        [
            ("n1", "gpu", 1_000_000.0, 2, 0.0, None, None, 2, 1),
            ("n2", "gpu", 200_000.0, 0, 0.0, None, None, 0, 0),
        ],
        schema=rel.NODE_SCHEMA,
        orient="row",
    )
    sizes = pl.LazyFrame({"partition": ["gpu"], "nodes": [10], "jobs": [5], "gpu_hours": [100.0]})
    killed = pl.LazyFrame(
        [
            (1, ts(f"{D} 01:00"), "gpu", 10, "hardware", 7000, 8),
            (2, ts(f"{D} 02:00"), "gpu", 10, "node_failure", 3000, 8),
            (3, ts(f"{D} 03:00"), "gpu", 10, "maintenance", 5000, 8),  # a planned stop is not a failure
        ],
        schema=dict(rel._KILLED),
        orient="row",
    )
    p = params(NOW, checkpoint_cost_seconds=300.0, restart_cost_seconds=600.0, job_sizes=[1, 10])
    got = {r["nodes"]: r for r in rel.goodput(node_rel, sizes, killed, p).collect().to_dicts()}
    # node MTBF = 1.2e6 up-seconds / 2 failures = 600000 s. N = 10: M = 60000 s, tau = sqrt(2 x 300 x 60000)
    # = 6000 s; expected lost = C/tau + (tau/2 + R)/M = 0.05 + (3000 + 600) / 60000 = 0.05 + 0.06 = 0.11
    g = got[10]
    assert (g["mtbi_seconds"], g["young_daly_interval_seconds"]) == (60000.0, 6000.0)
    assert math.isclose(g["expected_lost_share"], 0.11) and math.isclose(g["expected_goodput"], 0.89)
    # measured over T = 100 GPU-h = 360000 GPU-s: writes 0.05 x 360000 = 18000; the hardware kill after
    # 7000 s redoes 7000 mod 6000 = 1000 s and restarts (600 s) on 8 GPUs: 12800; the node-failure kill after
    # 3000 s redoes all 3000 s: (3000 + 600) x 8 = 28800; lost = 59600 / 360000
    assert g["interruptions"] == 2
    assert math.isclose(g["measured_lost_share"], 59600 / 360000)
    assert math.isclose(g["measured_goodput"], 1 - 59600 / 360000)
    # N = 1: M = 600000, tau = sqrt(3.6e8); expected = sqrt(2C/M) + R/M = sqrt(0.001) + 0.001; no N=1 jobs
    g = got[1]
    assert math.isclose(g["expected_lost_share"], math.sqrt(0.001) + 0.001)
    assert g["measured_lost_share"] is None and g["jobs"] == 0 and g["restart_cost_seconds"] == 600.0


# --- end to end through the runner ---------------------------------------------------------------------------


def test_the_runner_writes_incidents_and_the_failure_split(con):
    from slurmscope.pipelines.runner import run_pipelines

    from slurmscope.config import load_config

    now = datetime(2026, 3, 3, 12, tzinfo=UTC)
    t = now - timedelta(minutes=40)
    con.execute(
        "INSERT INTO node_events (cluster, node, time_start, time_end, state, reason, reason_user) VALUES"
        " ('default', 'g1', ?, ?, 'DOWN', 'Not responding', 'slurm'),"
        " ('default', 'g1', ?, NULL, 'DRAIN', 'RMA: replace GPU 3', 'root')",
        [t, t + timedelta(minutes=10), t + timedelta(minutes=10)],
    )
    for jid, state, raw, node in (
        (1, "FAILED", "FAILED", "g1"),  # exits non-zero as its node goes down: the system's
        (2, "FAILED", "FAILED", "g2"),  # exits non-zero on a healthy node: the user's
        (3, "CANCELLED", "CANCELLED by 0", "g2"),  # root cancelled it: the system's
        (4, "COMPLETED", "COMPLETED", "g2"),
    ):
        con.execute(
            'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", state,'
            " state_raw, start_time, end_time, elapsed_seconds, gpus, nodes, node_list, ingested_at)"
            " VALUES ('default', ?, ?, ?, 'a', 'u', 'gpu', ?, ?, ?, ?, 3600, 8, 1, ?, ?)",
            [str(jid), jid, t - timedelta(hours=2), state, raw, t - timedelta(hours=1), t, node, t],
        )
    run_pipelines(con, load_config(env={}), full=True, now=now, only=["reliability"])
    assert con.execute(
        "SELECT node, incident_start, incident_end, cause, failure, node_events FROM mart_node_incidents"
    ).fetchall() == [("g1", t, None, "hardware", True, 2)]  # one incident, ongoing, the RMA says hardware
    assert con.execute(
        "SELECT failure, sum(jobs) FROM mart_job_outcomes_daily GROUP BY ALL ORDER BY 1"
    ).fetchall() == [("none", 1), ("system", 2), ("user", 1)]
    assert con.execute(
        "SELECT failures, incidents, hardware_failures FROM mart_node_reliability WHERE node = 'g1'"
    ).fetchall() == [(1, 1, 1)]
