"""Health verdict rules on tiny hand-made frames: one case per rule, its threshold edge, and the run rows.

Each case builds one sinfo snapshot (or a few) of node n1 at T with the NVML rows the rule looks at, and
checks the verdict docs/pipelines.md#health says it must give. The thresholds are the config defaults
(event window 3600 s, hardware throttling > 0.1 over 900 s, hot >= 85 C, overheating >= 95 C, stale after 900 s).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from slurmscope.pipelines import health
from slurmscope.pipelines.common import UTC_DT
from slurmscope.pipelines.runner import Window, pipeline_params

from slurmscope.config import load_config

T = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)

NODE_SCHEMA = {
    "snapshot_time": UTC_DT,
    "node": pl.String,
    "state": pl.String,
    "state_flags": pl.String,
    "reason": pl.String,
    "gpus_total": pl.Int32,
}
SAMPLE_SCHEMA = {
    "node": pl.String,
    "gpu_uuid": pl.String,
    "minute": UTC_DT,
    "gpu_index": pl.Int32,
    "model": pl.String,
    "temp_gpu_max_celsius": pl.Float64,
    "throttle_seconds": pl.Float64,
    "ecc_uncorrected_delta": pl.Int64,
    "ecc_uncorrected_total": pl.Int64,
    "remapped_pending": pl.Boolean,
    "remapped_failed": pl.Boolean,
}
EVENT_SCHEMA = {
    "node": pl.String,
    "gpu_uuid": pl.String,
    "event_time": UTC_DT,
    "event_type": pl.String,
    "xid": pl.Int32,
}
INV_SCHEMA = {"node": pl.String, "seen_at": UTC_DT, "gpus_visible": pl.Int64}


def snap(t=T, state="IDLE", flags=None, reason=None, gpus=1, node="n1"):
    return (t, node, state, flags, reason, gpus)


def sample(
    minute,
    *,
    temp=60.0,
    thr=0.0,
    ecc=0,
    ecc_total=0,
    pending=False,
    failed=False,
    uuid="GPU-a",
    idx=0,
    node="n1",
):
    return (node, uuid, minute, idx, "h100", temp, thr, ecc, ecc_total, pending, failed)


def healthy(minutes=20, end=T, **kw):
    """One sample a minute for `minutes` minutes up to `end` (inclusive)."""
    return [sample(end - k * MIN, **kw) for k in range(minutes - 1, -1, -1)]


def event(t, event_type="xid", xid=None, uuid="GPU-a", node="n1"):
    return (node, uuid, t, event_type, xid)


def run(nodes, samples=(), events=(), inventory=(), *, start=T - timedelta(hours=1), now=T + MIN, **cfg):
    conf = load_config(env={}).with_overrides(health=cfg) if cfg else load_config(env={})
    params = pipeline_params(conf, Window(start, now, False))
    frames = {
        "nodes": pl.LazyFrame(list(nodes), schema=NODE_SCHEMA, orient="row"),
        "samples": pl.LazyFrame(list(samples), schema=SAMPLE_SCHEMA, orient="row"),
        "events": pl.LazyFrame(list(events), schema=EVENT_SCHEMA, orient="row"),
        "inventory": pl.LazyFrame(list(inventory), schema=INV_SCHEMA, orient="row"),
    }
    out = health.compute(frames, params)
    return out["mart_node_health"].collect(), out["mart_gpu_health"].collect()


def node_at(nodes, samples=(), events=(), inventory=(), **kw):
    """(status, reason, reasons) of n1's last row, and of its GPU GPU-a's last row (None without one)."""
    n, g = run(nodes, samples, events, inventory, **kw)
    nrow = n.filter(pl.col("node") == "n1").sort("since").row(-1, named=True)
    grows = g.filter(pl.col("gpu_uuid") == "GPU-a").sort("since")
    grow = grows.row(-1, named=True) if grows.height else None
    return (
        (nrow["status"], nrow["reason"], nrow["reasons"]),
        None if grow is None else (grow["status"], grow["reason"], grow["reasons"]),
    )


# ---- Slurm state ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "flags", "want"),
    [
        ("ALLOCATED", None, ("ok", "", "")),
        ("IDLE", "POWERED_DOWN", ("ok", "", "")),  # the word DOWN inside a flag is not DOWN
        ("DOWN", "NOT_RESPONDING", ("failing", "slurm_down", "slurm_down")),
        ("MIXED", "NOT_RESPONDING", ("failing", "slurm_down", "slurm_down")),
        ("INVAL", None, ("failing", "slurm_down", "slurm_down")),
        ("IDLE", "DRAIN", ("degraded", "slurm_drain", "slurm_drain")),
        ("DRAINING", "DRAIN", ("degraded", "slurm_drain", "slurm_drain")),
        ("DOWN", "DRAIN", ("failing", "slurm_down", "slurm_down")),  # down beats drain
        ("IDLE", "MAINTENANCE+RESERVED", ("degraded", "slurm_unavailable", "slurm_unavailable")),
        ("IDLE", "REBOOT_REQUESTED", ("degraded", "slurm_unavailable", "slurm_unavailable")),
        ("UNKNOWN", None, ("degraded", "slurm_unavailable", "slurm_unavailable")),
    ],
)
def test_slurm_state_alone(state, flags, want):
    node, gpu = node_at([snap(state=state, flags=flags, reason="why")])
    assert node == want and gpu is None
    n, _ = run([snap(state=state, flags=flags, reason="why")])
    assert n.item(0, "slurm_reason") == "why"
    assert n.item(0, "slurm_state") == (state if flags is None else f"{state}+{flags}")


# ---- GPU rules ------------------------------------------------------------------------------------------


def test_healthy_gpu_is_ok():
    assert node_at([snap()], healthy()) == (("ok", "", ""), ("ok", "", ""))


def test_row_remap_failed_fails_and_pending_degrades():
    s = healthy()[:-1] + [sample(T, failed=True)]
    assert node_at([snap()], s) == (
        ("failing", "gpu_failing", "gpu_failing"),
        ("failing", "row_remap_failed", "row_remap_failed"),
    )
    s = healthy()[:-1] + [sample(T, pending=True)]
    assert node_at([snap()], s) == (
        ("degraded", "gpu_degraded", "gpu_degraded"),
        ("degraded", "row_remap_pending", "row_remap_pending"),
    )


def test_failing_xid_fails_for_the_event_window_only():
    # XID 48 (NVIDIA: WORKFLOW_XID_48, reset the GPU) at 11:00:30: judged at 12:00 it is 59.5 minutes old
    # (< 3600 s): failing, the action in the reason.
    ev = [event(T - timedelta(minutes=59, seconds=30), xid=48)]
    assert node_at([snap()], healthy(), ev)[1] == ("failing", "xid_reset_gpu", "xid_reset_gpu")
    # exactly 3600 s old: out of the window (t - event < window).
    ev = [event(T - timedelta(hours=1), xid=48)]
    assert node_at([snap()], healthy(), ev)[1] == ("ok", "", "")
    # a shorter configured window
    ev = [event(T - timedelta(minutes=20), xid=48)]
    assert node_at([snap()], healthy(), ev, event_window_seconds=600)[1] == ("ok", "", "")


def test_application_and_ignorable_xids_have_no_effect_and_unresolved_ones_degrade():
    # 13 (RESTART_APP), 43 (IGNORE), 63 and 92 (IGNORE in NVIDIA's catalogue, failing before it was read)
    ev = [event(T - k * MIN, xid=x) for k, x in enumerate((13, 43, 63, 92), start=1)]
    assert node_at([snap()], healthy(), ev)[1] == ("ok", "", "")
    # 144 (WORKFLOW_NVLINK5_ERR) needs NVIDIA's intrinfo decode: investigate
    got = node_at([snap()], healthy(), [event(T - MIN, xid=144)])[1]
    assert got == ("degraded", "xid_investigate", "xid_investigate")
    # 62 (RESET_GPU): failing now, degraded ("xid_other") when the lists were hand-kept
    assert node_at([snap()], healthy(), [event(T - MIN, xid=62)])[1] == (
        "failing",
        "xid_reset_gpu",
        "xid_reset_gpu",
    )


def test_operator_override_of_an_xid_action():
    ev = [event(T - MIN, xid=92)]
    got = node_at([snap()], healthy(), ev, xid_actions={92: "reset_gpu"})[1]
    assert got == ("failing", "xid_reset_gpu", "xid_reset_gpu")
    assert node_at([snap()], healthy(), [event(T - MIN, xid=62)], xid_actions={62: "ignore"})[1] == (
        "ok",
        "",
        "",
    )


def test_fallen_off_the_bus_from_gpu_lost_or_xid_79():
    for ev in (event(T - MIN, "gpu_lost"), event(T - MIN, xid=79)):
        assert node_at([snap()], healthy(), [ev]) == (
            ("failing", "gpu_failing", "gpu_failing"),
            ("failing", "fallen_off_bus", "fallen_off_bus"),
        )


def test_uncorrectable_ecc_from_delta_or_from_the_counter_rising():
    s = healthy()[:-5] + [sample(T - 4 * MIN, ecc=2, ecc_total=2)] + healthy(4, ecc_total=2)
    assert node_at([snap()], s)[1] == ("failing", "uncorrectable_ecc", "uncorrectable_ecc")
    s = healthy(ecc_total=5)[:-5] + healthy(5, ecc_total=6)  # total 5 -> 6 four minutes ago, no delta column
    assert node_at([snap()], s)[1] == ("failing", "uncorrectable_ecc", "uncorrectable_ecc")
    # an old, constant total is history, not a new error
    assert node_at([snap()], healthy(ecc_total=7))[1] == ("ok", "", "")


def test_throttling_over_the_window_mean():
    # throttle_seconds counts hardware causes only (HW slowdown, HW thermal, HW power brake).
    # last 15 samples (the 900 s window ending at T) throttled 30 s of 60: mean 0.5 > 0.1
    s = healthy(20)[:5] + healthy(15, thr=30.0)
    assert node_at([snap()], s)[1] == ("degraded", "throttling", "throttling")
    # throttled exactly a tenth (6 s a minute): not above the threshold
    s = healthy(20)[:5] + healthy(15, thr=6.0)
    assert node_at([snap()], s)[1] == ("ok", "", "")
    # fully throttled for 3 of the 15 minutes: 0.2 > 0.1 (ok under the old 0.25, set while the power cap counted)
    s = healthy(20)[:17] + healthy(3, thr=60.0)
    assert node_at([snap()], s)[1] == ("degraded", "throttling", "throttling")
    # one minute of 15 fully throttled: 0.067
    s = healthy(20)[:19] + healthy(1, thr=60.0)
    assert node_at([snap()], s)[1] == ("ok", "", "")


def test_temperature_thresholds_and_override():
    assert node_at([snap()], healthy(temp=84.9))[1] == ("ok", "", "")
    assert node_at([snap()], healthy(temp=85.0))[1] == ("degraded", "hot", "hot")
    assert node_at([snap()], healthy(temp=95.0))[1] == ("failing", "overheating", "overheating,hot")
    assert node_at([snap()], healthy(temp=80.0), temp_degraded_celsius=80)[1] == ("degraded", "hot", "hot")


def test_stale_telemetry_degrades_and_old_state_is_not_reused():
    # last sample 15 minutes before the snapshot, and it said the row remap failed: only staleness counts
    s = healthy(5, end=T - timedelta(minutes=15), failed=True)
    assert node_at([snap()], s)[1] == ("degraded", "telemetry_stale", "telemetry_stale")
    assert node_at([snap()], healthy(5, end=T - timedelta(minutes=14, seconds=59)))[1] == ("ok", "", "")
    # not sampled for a day: the GPU is no longer judged (removed or replaced)
    assert node_at([snap()], healthy(5, end=T - timedelta(days=1)))[1] is None


def test_gpu_count_mismatch():
    inv7 = [("n1", T - timedelta(minutes=30), 7)]
    assert node_at([snap(gpus=8)], inventory=inv7)[0] == ("failing", "gpu_missing", "gpu_missing")
    assert node_at([snap(gpus=8)], inventory=[("n1", T - timedelta(minutes=30), 8)])[0] == ("ok", "", "")
    assert node_at([snap(gpus=8)], inventory=[("n1", T - timedelta(minutes=30), 9)])[0] == ("ok", "", "")
    assert node_at([snap(gpus=8)])[0] == ("ok", "", "")  # no inventory: nothing to compare
    # the latest inventory at or before the instant counts: 8 seen again after 7
    inv = inv7 + [("n1", T - timedelta(minutes=10), 8)]
    assert node_at([snap(gpus=8)], inventory=inv)[0] == ("ok", "", "")


def test_unattributed_critical_xid_counts_for_the_node():
    ev = [event(T - 5 * MIN, xid=79, uuid="")]
    assert node_at([snap()], healthy(), ev) == (("failing", "xid_critical", "xid_critical"), ("ok", "", ""))


def test_reason_order_failing_first():
    s = healthy()[:-1] + [sample(T, failed=True)]
    assert node_at([snap(state="DOWN")], s)[0] == ("failing", "gpu_failing", "gpu_failing,slurm_down")
    s = healthy(temp=86.0)
    assert node_at([snap(flags="DRAIN")], s)[0] == ("degraded", "gpu_degraded", "gpu_degraded,slurm_drain")
    # a drained node with a failing GPU is failing, and says why first
    s = healthy()[:-1] + [sample(T, failed=True)]
    assert node_at([snap(flags="DRAIN")], s)[0] == ("failing", "gpu_failing", "gpu_failing,slurm_drain")


# ---- evaluation instants and runs -----------------------------------------------------------------------


def test_runs_collapse_unchanged_verdicts_and_break_on_change_and_gap():
    q = timedelta(minutes=15)
    snaps = [snap(T + k * q) for k in range(4)]  # 12:00 .. 12:45 up
    snaps += [snap(T + k * q, flags="DRAIN", reason="rma") for k in range(4, 6)]  # 13:00, 13:15 drained
    snaps += [snap(T + timedelta(hours=3))]  # up again after 1 h 45 min unseen (> 1 h gap)
    snaps += [snap(T + timedelta(hours=3) + q)]
    n, g = run(snaps, start=T, now=T + timedelta(hours=4))
    got = [
        (r["since"] - T, r["last_seen"] - T, r["valid_until"] - T, r["status"], r["slurm_reason"])
        for r in n.sort("since").iter_rows(named=True)
    ]
    h = timedelta(hours=1)
    assert got == [
        (timedelta(0), 3 * q, 3 * q + h, "ok", ""),
        (4 * q, 5 * q, 5 * q + h, "degraded", "rma"),
        (3 * h, 3 * h + q, 3 * h + q + h, "ok", ""),  # same verdict as the first run, new row
    ]
    assert g.height == 0


def test_an_event_between_snapshots_is_an_evaluation_instant():
    # hourly snapshots at 11:00 and 12:00; XID 79 at 11:20 on a GPU sampled every minute
    snaps = [snap(T - timedelta(hours=1)), snap(T)]
    s = healthy(90)
    ev = [event(T - timedelta(minutes=40), xid=79)]
    n, g = run(snaps, s, ev, start=T - timedelta(hours=1))
    rows = [(r["since"], r["status"], r["reason"]) for r in n.sort("since").iter_rows(named=True)]
    assert rows == [(T - timedelta(hours=1), "ok", ""), (T - timedelta(minutes=40), "failing", "gpu_failing")]
    grow = g.sort("since").row(-1, named=True)
    assert (grow["since"], grow["reason"], grow["detail"]) == (
        T - timedelta(minutes=40),
        "fallen_off_bus",
        "lost at 2026-03-02T11:20:00Z",
    )
    # the same event after the last snapshot's gap is not judged (the node's Slurm state is unknown by then)
    n, _ = run([snap(T - timedelta(hours=3))], s, [event(T - MIN, xid=79)], start=T - timedelta(hours=4))
    assert n["status"].to_list() == ["ok"]


def test_each_node_instant_is_judged_once_on_the_snapshot_in_force():
    # n1: snapshots at 11:00 and 12:00, an inventory at 12:00 (a snapshot's instant) and an XID at 11:30;
    # n2: the same snapshots and nothing else
    snaps = [snap(T - timedelta(hours=1), node=n) for n in ("n1", "n2")] + [
        snap(T, node=n) for n in ("n1", "n2")
    ]
    inv = [("n1", T, 1)]
    ev = [event(T - timedelta(minutes=30), xid=31)]
    conf = load_config(env={})
    params = pipeline_params(conf, Window(T - timedelta(hours=1), T + MIN, False))
    frames = {
        "nodes": pl.LazyFrame(snaps, schema=NODE_SCHEMA, orient="row"),
        "samples": pl.LazyFrame([], schema=SAMPLE_SCHEMA),
        "events": pl.LazyFrame(ev, schema=EVENT_SCHEMA, orient="row"),
        "inventory": pl.LazyFrame(inv, schema=INV_SCHEMA, orient="row"),
    }
    got = health.evaluations(
        frames["nodes"],
        health.prepare_samples(frames["samples"], health.settings(params.health)),
        frames["events"],
        frames["inventory"],
        params,
        3600.0,
    ).collect()
    assert sorted(got.select("node", "t").rows()) == [
        ("n1", T - timedelta(hours=1)),
        ("n1", T - timedelta(minutes=30)),
        ("n1", T),
        ("n2", T - timedelta(hours=1)),
        ("n2", T),
    ]
    # only n1 has an inventory: it is missing its GPU, n2 has nothing to compare and stays ok
    n, _ = run(snaps, inventory=[("n1", T - timedelta(minutes=30), 0)])
    last = {r["node"]: r["reason"] for r in n.sort("since").iter_rows(named=True)}
    assert last == {"n1": "gpu_missing", "n2": ""}


def test_nodes_input_is_one_row_per_node_and_snapshot(con):
    """sinfo -N lists g1 in two partitions (drained in one of them); n1 in one partition only."""
    rows = [
        ("g1", "gpu", "IDLE", None, None, 8),
        ("g1", "debug", "IDLE", "DRAIN", "rma", 8),
        ("n1", "gpu", "MIXED", None, None, 4),
    ]
    for t in (T - timedelta(hours=1), T):
        for node, part, state, flags, reason, gpus in rows:
            con.execute(
                'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags, '
                "reason, gpus_total) VALUES ('c', ?, ?, ?, ?, ?, ?, ?)",
                [t, node, part, state, flags, reason, gpus],
            )
    con.execute(
        "INSERT INTO node_states (cluster, snapshot_time, node, \"partition\", state) VALUES ('other', ?, 'x', 'p', 'DOWN')",
        [T],
    )
    params = {"cluster": "c", "start": T - timedelta(hours=1), "end": T}
    got = sorted(con.execute(health.INPUTS["nodes"], params).fetchall())
    assert [(r[0].astimezone(UTC), *r[1:]) for r in got] == [
        (t, node, state, flags, reason, gpus)
        for t in (T - timedelta(hours=1), T)
        for node, state, flags, reason, gpus in (
            ("g1", "IDLE", "DRAIN", "rma", 8),
            ("n1", "MIXED", None, None, 4),
        )
    ]


def test_nodes_input_has_each_nodes_latest_snapshot_before_the_window(con):
    for node, t in (("n1", T - 3 * H), ("n1", T - 2 * H), ("n1", T), ("n2", T - 5 * H)):
        con.execute(
            "INSERT INTO node_states (cluster, snapshot_time, node, \"partition\", state) VALUES ('c', ?, ?, 'p', 'IDLE')",
            [t, node],
        )
    params = {"cluster": "c", "start": T - H, "end": T}
    got = sorted((r[1], r[0].astimezone(UTC)) for r in con.execute(health.INPUTS["nodes"], params).fetchall())
    assert got == [("n1", T - 2 * H), ("n1", T), ("n2", T - 5 * H)]
    # the earlier snapshot is in force at the window's first instants but is not judged itself
    n, _ = run(
        [snap(T - H - 10 * MIN, node="n1"), snap(T + H, node="n1"), snap(T - 5 * H, node="n2")],
        events=[event(T - H + 5 * MIN, event_type="gpu_lost", uuid="")],
        start=T - H,
        now=T + H + MIN,
    )
    assert n.select("node", "since", "status").rows() == [
        ("n1", T - H + 5 * MIN, "failing"),
        ("n1", T + H, "ok"),
    ]


def test_outputs_match_the_mart_tables(con):
    """Every column compute returns exists in sql/0010_health.sql with a compatible type (the runner checks)."""
    cols = {
        t: {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [t]
            ).fetchall()
        }
        for t in health.MART_TABLES
    }
    n, g = run([snap()], healthy())
    assert set(n.columns) | {"cluster"} == cols["mart_node_health"]
    assert set(g.columns) | {"cluster"} == cols["mart_gpu_health"]


# ---- incremental windows --------------------------------------------------------------------------------

H = timedelta(hours=1)
Q = timedelta(minutes=15)
DAY0 = datetime(2026, 3, 2, tzinfo=UTC)


def _history():
    """Twelve hours of sinfo snapshots of six nodes, and GPU-a of g1 sampled every minute.

    n1 is up throughout (one run across every window); n2 is drained 3:00-5:00, up again, unseen
    6:30-7:45 (more than the gap: a new run); n3 is unseen 5:40-6:20 (within the gap: one run across the
    6:00 window start); n4 goes down at 6:05, its first snapshot after the 6:00 window start; n5 is last seen
    at 8:30. GPU-a of g1 runs hot (its temperature, in `detail`, is that of the run's first evaluation) with
    a critical XID at 6:10, and falls off the bus at 6:52 (judged on g1's 6:45 snapshot).
    """

    def every(a, b, step=Q):
        t, out = DAY0 + a, []
        while t <= DAY0 + b:
            out.append(t)
            t += step
        return out

    snaps = [snap(t, node="n1") for t in every(timedelta(0), 12 * H)]
    snaps += [
        snap(
            t,
            node="n2",
            flags="DRAIN" if 3 * H <= t - DAY0 <= 5 * H else None,
            reason="rma" if 3 * H <= t - DAY0 <= 5 * H else None,
        )
        for t in every(timedelta(0), 12 * H)
        if not 6 * H + 2 * Q < t - DAY0 < 7 * H + 3 * Q
    ]
    snaps += [
        snap(t, node="n3") for t in every(timedelta(0), 5 * H + timedelta(minutes=40), timedelta(minutes=10))
    ]
    snaps += [snap(t, node="n3") for t in every(6 * H + timedelta(minutes=20), 12 * H, timedelta(minutes=10))]
    snaps += [
        snap(t, node="n4", state="DOWN" if t - DAY0 > 6 * H else "IDLE")
        for t in every(timedelta(0), 5 * H + timedelta(minutes=50), timedelta(minutes=10))
        + every(6 * H + timedelta(minutes=5), 12 * H, timedelta(minutes=10))
    ]
    snaps += [snap(t, node="n5") for t in every(timedelta(0), 8 * H + 2 * Q)]
    snaps += [snap(t, node="g1") for t in every(timedelta(0), 12 * H)]
    samples = [
        sample(t, node="g1", temp=86.0 + (t - DAY0).seconds // 60 % 7)
        for t in every(timedelta(0), 12 * H, MIN)
    ]
    events = [
        event(DAY0 + 6 * H + timedelta(minutes=10), xid=48, node="g1"),
        event(DAY0 + 6 * H + timedelta(minutes=52), xid=79, node="g1"),
    ]
    return snaps, samples, events


def _frames(snaps, samples, events, start, end, seeds=None):
    """What the runner's INPUTS read for the window [start, end] (end itself included)."""
    day = timedelta(days=1)
    before = {}
    for s in snaps:
        if s[0] < start and (s[1] not in before or before[s[1]][0] < s[0]):
            before[s[1]] = s
    frames = {
        "nodes": pl.LazyFrame(
            [s for s in snaps if start <= s[0] <= end] + list(before.values()),
            schema=NODE_SCHEMA,
            orient="row",
        ),
        "samples": pl.LazyFrame(
            [s for s in samples if start - day <= s[2] <= end], schema=SAMPLE_SCHEMA, orient="row"
        ),
        "events": pl.LazyFrame(
            [e for e in events if start - day <= e[2] <= end], schema=EVENT_SCHEMA, orient="row"
        ),
        "inventory": pl.LazyFrame([], schema=INV_SCHEMA),
    }
    if seeds is not None:
        for table, name in (("mart_node_health", "node_seeds"), ("mart_gpu_health", "gpu_seeds")):
            s = seeds[table]
            frames[name] = s.filter((pl.col("since") < start) & (pl.col("valid_until") >= start)).lazy()
    return frames


def _replay(windows, with_seeds=True):
    """The marts after a full run to windows[0] and incremental runs over the other (start, now) windows,
    stored the runner's way: rows with valid_until >= start deleted, the computed ones from there inserted."""
    snaps, samples, events = _history()
    conf = load_config(env={})
    stored = None
    for k, (start, now) in enumerate(windows):
        full = k == 0
        params = pipeline_params(conf, Window(start, now, full))
        seeds = None if full or not with_seeds else stored
        out = health.compute(_frames(snaps, samples, events, start, now, seeds), params)
        got = dict(zip(out, pl.collect_all(list(out.values())), strict=True))
        if full:
            stored = got
            continue
        for table, col in health.MART_TABLES.items():
            bound = pl.lit(start, dtype=UTC_DT)
            stored[table] = pl.concat(
                [stored[table].filter(pl.col(col) < bound), got[table].filter(pl.col(col) >= bound)]
            )
    return {t: df.sort(df.columns) for t, df in stored.items()}


def test_incremental_windows_equal_one_full_run():
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    # At the 6:00 start n3's stored run was last seen at 5:40 (continued at 6:20, within the gap) and n4's at
    # 5:50 (down at 6:05: not continued); at 6:50 n2's at 6:30 (next seen at 7:45, past the gap) and g1's
    # GPU falls off the bus before g1's first snapshot of the window; at 9:00 n5 has a stored run and no
    # evaluation; n1 and n3 run across every start.
    windows = [
        (epoch, DAY0 + 4 * H),
        (DAY0 + 3 * H, DAY0 + 6 * H + timedelta(minutes=10)),
        (DAY0 + 6 * H, DAY0 + 7 * H),
        (DAY0 + 6 * H + timedelta(minutes=50), DAY0 + 10 * H),
        (DAY0 + 9 * H, DAY0 + 12 * H),
    ]
    full = _replay([(epoch, DAY0 + 12 * H)])
    incremental = _replay(windows)
    for table, df in full.items():
        assert_frame_equal(incremental[table], df, check_dtypes=True)
    nodes = full["mart_node_health"]
    spans = {
        n: nodes.filter(pl.col("node") == n).select("since", "last_seen").rows() for n in ("n1", "n3", "n5")
    }
    assert spans == {
        "n1": [(DAY0, DAY0 + 12 * H)],
        "n3": [(DAY0, DAY0 + 12 * H)],
        "n5": [(DAY0, DAY0 + 8 * H + 2 * Q)],
    }
    assert nodes.filter(pl.col("node") == "n2")["since"].to_list() == [
        DAY0,
        DAY0 + 3 * H,
        DAY0 + 5 * H + Q,
        DAY0 + 7 * H + 3 * Q,
    ]
    assert nodes.filter(pl.col("node") == "n4").select("since", "status").rows() == [
        (DAY0, "ok"),
        (DAY0 + 6 * H + timedelta(minutes=5), "failing"),
    ]
    gpu = full["mart_gpu_health"].select("since", "reason", "detail").rows()
    assert [r[:2] for r in gpu] == [
        (DAY0, "hot"),
        (DAY0 + 6 * H + timedelta(minutes=10), "xid_reset_gpu"),
        (DAY0 + 6 * H + timedelta(minutes=52), "fallen_off_bus"),
        (DAY0 + 7 * H + Q, "fallen_off_bus"),
        (DAY0 + 8 * H, "hot"),
    ]
    assert gpu[0][2] == "86.0 C"
    assert nodes.filter(pl.col("node") == "g1")["status"].to_list() == ["degraded", "failing", "degraded"]
    # not vacuous: without the stored runs the ones crossing a window start are lost or cut there
    naive = _replay(windows, with_seeds=False)
    assert not any(naive[t].equals(df) for t, df in full.items())
