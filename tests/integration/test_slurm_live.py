"""Live checks of `slurmscope collect` against a real Slurm 22.05 cluster (tests/slurmbed).

Expected values come from the workload driver's own record (what it submitted, the states it caused,
the RUNNING intervals it saw by polling squeue) or from Slurm's own tools (sshare, sacct), never from the
slurmscope database being checked.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

pytestmark = pytest.mark.slurm

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "REQUEUED"}


def _rows_by_raw(bed, raw_ids: list[int]) -> dict[int, list[dict]]:
    cols = [
        "job_id",
        "job_id_raw",
        "submit_time",
        "attempt",
        "state",
        "reason",
        "user",
        "account",
        "partition",
        "qos",
        "exit_code",
        "gpus",
        "gpu_type",
        "elapsed_seconds",
        "start_time",
        "sched_by",
        "priority",
        "array_job_id",
        "array_task_id",
    ]
    rows = bed.query(
        f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM jobs WHERE cluster = ? "
        f"AND job_id_raw IN ({', '.join('?' * len(raw_ids))}) ORDER BY job_id_raw, submit_time",
        [bed.cluster.CLUSTER, *raw_ids],
    )
    out: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        out[r[1]].append(dict(zip(cols, r, strict=True)))
    return out


def _driver_jobs(live) -> list[dict]:
    return live.record["jobs"]


def _by_name(live, name: str) -> dict:
    return next(j for j in _driver_jobs(live) if j["name"] == name and not j.get("array"))


def test_collect_all_once_succeeds_mid_workload_and_at_the_end(live):
    assert live.mid_collect.returncode == 0, live.mid_collect.stderr
    assert live.final_collect.returncode == 0, live.final_collect.stderr


def test_every_submitted_job_is_collected_with_the_state_the_driver_caused(slurmbed, live):
    jobs = _driver_jobs(live)
    rows = _rows_by_raw(slurmbed, [int(j["job_id_raw"]) for j in jobs])
    for j in jobs:
        attempts = rows.get(int(j["job_id_raw"]), [])
        assert attempts, f"{j['name']} ({j['job_id']}) missing from jobs"
        last = attempts[-1]
        assert last["job_id"] == j["job_id"], j["name"]
        assert last["state"] == j["final_state"], (j["name"], attempts)
        assert (last["user"], last["account"], last["partition"], last["qos"]) == (
            j["user"],
            j["account"],
            j["partition"],
            j["qos"],
        ), j["name"]
        if "exit_code" in j:
            assert last["exit_code"] == j["exit_code"], j["name"]
        if j.get("array_job_id"):
            assert last["array_job_id"] == int(j["array_job_id"])
            assert str(last["array_task_id"]) == str(j["array_task_id"])
        for a in attempts:
            if a["start_time"] is not None and a["state"] != "PENDING" and not j.get("never_started"):
                assert a["gpus"] == j["gpus"], (j["name"], a)
                if j["gpus"]:
                    assert a["gpu_type"] == "h100"


def test_requeued_jobs_have_one_row_per_attempt(slurmbed, live):
    jobs = [j for j in _driver_jobs(live) if not j.get("array")]
    rows = _rows_by_raw(slurmbed, [int(j["job_id_raw"]) for j in jobs])
    requeued = [j for j in jobs if j["attempts"] > 1]
    assert {j["name"] for j in requeued} == {"admin-requeue", "node-fail"}
    for j in jobs:
        attempts = rows[int(j["job_id_raw"])]
        assert len(attempts) == j["attempts"], (j["name"], attempts)
        assert [a["attempt"] for a in attempts] == list(range(1, j["attempts"] + 1))
        if j["attempts"] > 1:
            assert attempts[0]["state"] == j["first_attempt_state"]
            # The driver saw the job RUNNING once per attempt.
            assert len(j["intervals"]) == j["attempts"], j


def test_backfilled_job_is_marked_backfill(slurmbed, live):
    bf = _by_name(live, "cpu-backfill")
    wide = _by_name(live, "cpu-wide")
    rows = _rows_by_raw(slurmbed, [int(bf["job_id_raw"]), int(wide["job_id_raw"])])
    (b,), (w,) = rows[int(bf["job_id_raw"])], rows[int(wide["job_id_raw"])]
    # The scenario really needed backfill: the higher-priority wide job was waiting for the node
    # when the lower-priority one started ahead of it.
    assert w["priority"] > b["priority"]
    assert b["start_time"] < w["start_time"]
    assert b["sched_by"] == "backfill"


def test_gpu_seconds_per_account_match_the_drivers_record(slurmbed, live):
    raw_ids = sorted({int(j["job_id_raw"]) for j in _driver_jobs(live)})
    got = dict(
        slurmbed.query(
            f"SELECT account, sum(coalesce(gpus, 0) * coalesce(elapsed_seconds, 0)) FROM jobs "
            f"WHERE cluster = ? AND state <> 'PENDING' AND job_id_raw IN ({', '.join('?' * len(raw_ids))}) "
            "GROUP BY account",
            [slurmbed.cluster.CLUSTER, *raw_ids],
        )
    )
    expected = live.record["gpu_seconds_by_account"]
    slack = live.record["gpu_seconds_tolerance_by_account"]
    assert sum(expected.values()) > 500  # the workload ran real GPU work (not a vacuous comparison)
    # A job preempted within its first second has Elapsed 0 in sacct and ~0.5 s in the driver's record:
    # both within the slack, so compare every account either side knows.
    for account in set(expected) | set(got):
        assert got.get(account, 0) == pytest.approx(
            expected.get(account, 0.0), abs=slack.get(account, 0.0)
        ), account


def test_node_states_and_drain_reasons_match_what_the_driver_did(slurmbed, live):
    rec = live.record
    rows = slurmbed.query(
        "SELECT node, state, coalesce(state_flags, ''), reason FROM node_states WHERE cluster = ? "
        "AND snapshot_time = (SELECT max(snapshot_time) FROM node_states WHERE cluster = ?)",
        [slurmbed.cluster.CLUSTER, slurmbed.cluster.CLUSTER],
    )
    by_node = {r[0]: r[1:] for r in rows}
    assert set(by_node) == {"gpu01", "gpu02", "gpu03", "gpu04", "cpu01"}
    drained, down = rec["drain_node"], rec["down_node"]
    state, flags, reason = by_node[drained]
    assert state == "IDLE" and "DRAIN" in flags.split("+")
    assert reason == rec["nodes"][drained]["reason"]
    for node, (state, flags, _reason) in by_node.items():
        if node != drained:
            assert (state, flags) == ("IDLE", ""), node  # the downed node was resumed
    events = slurmbed.query(
        "SELECT node, state, reason, time_end FROM node_events WHERE cluster = ? AND node <> ''",
        [slurmbed.cluster.CLUSTER],
    )
    assert (down, "DOWN", rec["nodes"][down]["down_reason"]) in {(n, s, r) for n, s, r, _ in events}
    down_reason = rec["nodes"][down]["down_reason"]  # another test may down the same node with its own reason
    assert [e[3] is not None for e in events if e[:3] == (down, "DOWN", down_reason)] == [
        True
    ]  # ended on resume
    assert [(e[2], e[3]) for e in events if e[0] == drained and e[1] == "DRAIN"] == [
        (rec["nodes"][drained]["reason"], None)
    ]


def test_pending_jobs_carry_their_real_reasons(slurmbed, live):
    pending = [j for j in _driver_jobs(live) if j["final_state"] == "PENDING"]
    assert {j["pending_reason"] for j in pending} == {"JobHeldUser", "Dependency", "BeginTime"}
    snap = dict(
        (r[0], r[1:])
        for r in slurmbed.query(
            "SELECT job_id, state, reason FROM pending_jobs WHERE cluster = ? "
            "AND snapshot_time = (SELECT max(snapshot_time) FROM pending_jobs WHERE cluster = ?)",
            [slurmbed.cluster.CLUSTER, slurmbed.cluster.CLUSTER],
        )
    )
    rows = _rows_by_raw(slurmbed, [int(j["job_id_raw"]) for j in pending])
    for j in pending:
        assert snap[j["job_id"]] == ("PENDING", j["pending_reason"]), j["name"]
        assert j["last_squeue_reason"] == j["pending_reason"]  # the driver saw the same
        (row,) = rows[int(j["job_id_raw"])]
        assert row["state"] == "PENDING", j["name"]
        # sacct's Reason for a pending job is whatever slurmctld last sent slurmdbd: seen both as the real
        # reason and as 'None' (NULL) for the held and dependency jobs across runs. squeue (above) is
        # the authority; jobs.reason must never contradict it.
        assert row["reason"] in (j["pending_reason"], None), j["name"]


def test_incremental_collection_updates_attempts_in_place(slurmbed, live):
    jobs = _driver_jobs(live)
    raw_ids = {int(j["job_id_raw"]) for j in jobs}
    mid = {(r[1], r[2]): r for r in live.mid_jobs if r[1] in raw_ids}
    # The mid collect really saw work in flight, not only finished jobs.
    assert {"RUNNING", "PENDING"} <= {r[3] for r in mid.values()}
    final_rows = _rows_by_raw(slurmbed, sorted(raw_ids))
    final = {(a["job_id_raw"], a["submit_time"]): a for rows in final_rows.values() for a in rows}
    assert set(mid) <= set(final), "an attempt seen mid-workload was replaced instead of updated"
    assert len(final) == sum(j["attempts"] for j in jobs), "attempts doubled or missing"
    expected_last = {int(j["job_id_raw"]): j["final_state"] for j in jobs}
    for key, (_, raw, _, state) in mid.items():
        if state in ("RUNNING", "PENDING") and expected_last[raw] != "PENDING":
            last = final_rows[raw][-1]
            if (last["job_id_raw"], last["submit_time"]) == key:
                assert last["state"] == expected_last[raw], (key, state, last)


def test_jobs_the_sacct_window_hides_are_collected(slurmbed, live):
    hidden = [
        j for j in _driver_jobs(live) if j["name"] in ("cancel-pending", "held", "after-held", "begin-later")
    ]
    assert len(hidden) == 4
    mid_ids = {r[1] for r in live.mid_jobs}
    for j in hidden:
        assert int(j["job_id_raw"]) in mid_ids, f"{j['name']} missing after the mid-workload collect"
    rows = _rows_by_raw(slurmbed, [int(j["job_id_raw"]) for j in hidden])
    assert {j["name"]: rows[int(j["job_id_raw"])][-1]["state"] for j in hidden} == {
        "cancel-pending": "CANCELLED",
        "held": "PENDING",
        "after-held": "PENDING",
        "begin-later": "PENDING",
    }


def test_collect_sacct_alone_with_a_history_import_finds_every_attempt(slurmbed, live, tmp_path):
    """A fresh database that never saw an squeue snapshot: `collect sacct --since DATE` imports the history
    and asks slurmctld for the pending ids itself, so it holds the same attempts as `collect all`'s, the
    held, dependency and --begin jobs included."""
    import subprocess
    import sys
    from datetime import UTC, datetime, timedelta

    import duckdb

    day = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")
    db = tmp_path / "alone.duckdb"
    argv = [sys.executable, "-c", "from slurmscope.cli import main; main()", "--config", str(slurmbed.config)]
    r = subprocess.run(
        [*argv, "--db", str(db), "collect", "sacct", "--since", day],
        env=slurmbed.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    raw_ids = sorted({int(j["job_id_raw"]) for j in _driver_jobs(live)})
    sql = (
        "SELECT job_id_raw, submit_time, state FROM jobs WHERE cluster = ? AND list_contains(?, job_id_raw)"
        " ORDER BY ALL"
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        alone = con.execute(sql, [slurmbed.cluster.CLUSTER, raw_ids]).fetchall()
        marks = dict(con.execute("SELECT collector, position FROM watermarks").fetchall())
    finally:
        con.close()
    assert alone == slurmbed.query(sql, [slurmbed.cluster.CLUSTER, raw_ids])
    hidden = {
        int(j["job_id_raw"]) for j in _driver_jobs(live) if j["name"] in ("held", "after-held", "begin-later")
    }
    assert hidden <= {raw for raw, _, state in alone if state == "PENDING"}
    assert f"sacct:since={day}T00:00:00Z" in marks and "sacct" in marks


def test_reservation_is_collected(slurmbed, live):
    res = live.record["reservation"]
    rows = slurmbed.query(
        "SELECT name, node_list, flags FROM reservations WHERE cluster = ?", [slurmbed.cluster.CLUSTER]
    )
    assert [(n, nl) for n, nl, _ in rows] == [(res["name"], res["nodes"])]
    assert "MAINT" in rows[0][2]


def test_slurmdbd_outage_fails_collect_and_keeps_the_watermark(fault):
    assert fault.failed.returncode != 0
    failed = {c for c, _, _ in fault.errors}
    assert "sacct" in failed, fault.errors
    assert all(err for _, _, err in fault.errors)
    assert fault.watermark_before is not None
    assert fault.watermark_after_failure == fault.watermark_before


def test_collect_recovers_after_slurmdbd_returns(slurmbed, fault):
    assert fault.recovered.returncode == 0, fault.recovered.stderr
    assert fault.watermark_after_recovery > fault.watermark_before
    rows = slurmbed.query(
        'SELECT name, state, "user" FROM jobs WHERE cluster = ? AND job_id_raw = ?',
        [slurmbed.cluster.CLUSTER, int(fault.job_id)],
    )
    assert rows == [("during-outage", "COMPLETED", "sbdave")]


def _billing(tres: str) -> float:
    for part in tres.split(","):
        k, _, v = part.partition("=")
        if k == "billing":
            return float(v)
    return 0.0


def test_sshare_raw_usage_is_decayed_billing_seconds_from_sacct(fairshare):
    """RawUsage = sum over attempts of billing x elapsed, decayed by Slurm's per-second factor since the end.

    Slurm charges each running job every PriorityCalcPeriod and at its end, with decay_factor = 1 - 0.693 /
    PriorityDecayHalfLife per second; sshare prints the truncated integer.
    """
    half_life = 7 * 86400
    factor = 1 - 0.693 / half_life
    from datetime import UTC, datetime

    expected: dict[tuple[str, str], float] = defaultdict(float)
    lines = fairshare.sacct_text.splitlines()
    header = lines[0].split("|")
    for line in lines[1:]:
        rec = dict(zip(header, line.split("|"), strict=True))
        if rec["End"] in ("Unknown", "None") or int(rec["ElapsedRaw"]) == 0:
            continue
        end = datetime.fromisoformat(rec["End"]).replace(tzinfo=UTC).timestamp()
        usage = _billing(rec["AllocTRES"]) * int(rec["ElapsedRaw"]) * factor ** (fairshare.captured_at - end)
        expected[(rec["Account"], rec["User"])] += usage
    got: dict[tuple[str, str], float] = {}
    for line in fairshare.sshare_text.splitlines()[1:]:
        f = line.split("|")
        got[(f[0].strip(), f[1])] = float(f[4])
    users = {k: v for k, v in got.items() if k[1] and k[0] != "root"}
    assert {k for k, v in users.items() if v} == {k for k, v in expected.items() if v}
    for key, value in users.items():
        assert value == pytest.approx(expected.get(key, 0.0), abs=2.0), key
    # Account rows are the sums of their children all the way up.
    assert got[("research", "")] == pytest.approx(got[("pretraining", "")] + got[("vision", "")], abs=2)
    assert got[("root", "")] == pytest.approx(sum(v for k, v in users.items()), abs=4)


def test_start_is_idempotent(slurmbed):
    before = slurmbed.cluster.status()
    assert all(before.values()), before
    slurmbed.cluster.start()
    assert slurmbed.cluster.status() == before
