"""The simulator: determinism, Slurm text formats, workload and fault ground truth, scheduling rules."""

from __future__ import annotations

import filecmp
import json
from collections import Counter
from pathlib import Path

import pytest
from slurmscope.simulator import simulate
from slurmscope.simulator.calibration import calibration
from slurmscope.simulator.slurmtext import duration, hostlist, limit_str, ts
from slurmscope.simulator.writers.sacct import SACCT_FIELDS


def _files(d: Path) -> list[Path]:
    return sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim-a")
    simulate(gpus=64, days=2, seed=11, out_dir=out)
    return out


def test_same_seed_gives_byte_identical_files(small, tmp_path):
    again = tmp_path / "again"
    simulate(gpus=64, days=2, seed=11, out_dir=again)
    names = _files(small)
    assert names == _files(again)
    assert len([n for n in names if n.parts[0] == "snapshots"]) > 4 * 40
    match, mismatch, errors = filecmp.cmpfiles(small, again, [str(n) for n in names], shallow=False)
    assert mismatch == [] and errors == []


def test_different_seed_differs(small, tmp_path):
    other = tmp_path / "other"
    simulate(gpus=64, days=2, seed=12, out_dir=other)
    assert (small / "sacct.txt").read_bytes() != (other / "sacct.txt").read_bytes()
    assert (small / "events.jsonl").read_bytes() != (other / "events.jsonl").read_bytes()


def test_sacct_header_fields_and_steps(small):
    lines = (small / "sacct.txt").read_text().splitlines()
    assert lines[0] == "|".join(SACCT_FIELDS)
    width = len(SACCT_FIELDS)
    allocs = [ln.split("|") for ln in lines[1:] if "." not in ln.split("|", 1)[0]]
    steps = [ln.split("|") for ln in lines[1:] if "." in ln.split("|", 1)[0]]
    assert all(len(r) == width for r in allocs + steps)
    assert {r[0].split(".")[1] for r in steps} <= {"batch", "extern", "0"}
    # a step follows its allocation line
    prev = None
    for ln in lines[1:]:
        jid = ln.split("|", 1)[0]
        if "." in jid:
            assert prev is not None and jid.split(".")[0] == prev
        else:
            prev = jid
    flags = Counter(r[21] for r in allocs)
    assert set(flags) <= {
        "SchedMain,StartRecieved",
        "SchedBackfill,StartRecieved",
        "SchedSubmit,StartRecieved",
        "StartRecieved",
    }


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim-faulty")
    simulate(gpus=128, days=8, seed=3, out_dir=out, fault_rate=40.0, write_snapshots=False)
    return out


def test_requeued_attempts_keep_the_id_and_get_a_new_submit(faulty):
    events = [json.loads(x) for x in (faulty / "events.jsonl").read_text().splitlines()]
    requeues = [e for e in events if e["type"] == "requeue"]
    assert requeues
    rows = [
        ln.split("|")
        for ln in (faulty / "sacct.txt").read_text().splitlines()[1:]
        if "." not in ln.split("|", 1)[0]
    ]
    for rq in requeues:
        mine = [r for r in rows if r[1] == str(rq["job_id_raw"])]
        assert len(mine) >= 2
        attempt = [r for r in mine if r[8] == rq["new_submit"]]
        assert len(attempt) == 1
        earlier = [r for r in mine if r[8] < rq["new_submit"]]
        assert earlier[-1][14] == "NODE_FAIL"
        # Eligible = Submit + 121 s, as Slurm 22.05 does for a requeued attempt
        assert attempt[0][9] > attempt[0][8]
        # restart from the last checkpoint: what was lost is the progress since it
        assert 0 <= rq["lost_seconds"]
        k = rq["checkpoint_interval"]
        if k:
            assert rq["restart_from"] % k == 0 and rq["lost_seconds"] < k
        else:
            assert rq["restart_from"] == 0
    assert any(rq["checkpoint_interval"] and rq["restart_from"] for rq in requeues)


def test_fault_classes_and_drains_are_logged(faulty):
    tmp_path = faulty
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    xids = {e.get("xid") for e in events if e["type"] == "fault"}
    assert {79, 48, 94, 95, 13, 43} <= xids
    kinds = Counter(e["type"] for e in events)
    assert kinds["drain"] and kinds["drained"] and kinds["resume"] and kinds["node_down"]
    text = (tmp_path / "events.txt").read_text().splitlines()
    assert text[0] == "Cluster|Cluster Nodes|NodeName|TimeStart|TimeEnd|State|Reason|User"
    assert {ln.split("|")[5] for ln in text[1:]} == {"DOWN", "DRAIN"}
    states = Counter(
        ln.split("|")[14].split(" ")[0]
        for ln in (tmp_path / "sacct.txt").read_text().splitlines()[1:]
        if "." not in ln.split("|", 1)[0]
    )
    for st in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"):
        assert states[st] > 0, st
    deg = [e for e in events if e["type"] == "degradation_start"]
    assert len(deg) == 1 and deg[0]["gpu_uuid"].startswith("GPU-")


def test_calibration_is_in_range_of_the_traces(tmp_path):
    """The mix the docs quote (docs/simulator.md): near the Helios/Seren/Kalos/Philly summaries."""
    out = tmp_path / "cal"
    simulate(gpus=128, days=8, seed=5, out_dir=out, write_snapshots=False)
    c = calibration((out / "sacct.txt").read_text(), 128, 8 * 86400)
    assert 0.45 <= c["count_share"]["completed"] <= 0.75
    assert 0.10 <= c["count_share"]["failed"] <= 0.45
    assert c["median_run_s"] <= 900 < c["avg_run_s"]
    assert c["median_queue_s"] <= 60
    assert 1.9 <= c["avg_gpus"] <= 6
    assert 0.4 <= c["gpu_allocation_ratio"] <= 0.95


def test_formatting_helpers():
    assert ts(0) == "1970-01-01T00:00:00"
    assert ts(1793491200 + 3661) == "2026-11-01T01:01:01"  # 2026-11-01T00:00:00Z = 1793491200
    assert duration(59) == "00:00:59" and duration(86400 + 3600) == "1-01:00:00"
    assert limit_str(60) == "1:00" and limit_str(7200) == "2:00:00" and limit_str(3 * 86400) == "3-00:00:00"

    class N:
        def __init__(self, num: int, prefix: str = "h100-") -> None:
            self.prefix, self.num, self.width = prefix, num, 3
            self.name = f"{prefix}{num:03d}"

    assert hostlist([N(1), N(2), N(3), N(7)]) == "h100-[001-003,007]"
    assert hostlist([N(5)]) == "h100-005"
    assert hostlist([N(1), N(2, "a100-")]) == "h100-001,a100-002"
    assert hostlist([]) == "None assigned"


def test_rerun_into_the_same_directory_leaves_no_stale_snapshots(tmp_path):
    simulate(gpus=16, days=1, seed=1, out_dir=tmp_path)
    first = len(list((tmp_path / "snapshots" / "sinfo").glob("*.txt")))
    simulate(gpus=16, days=0.5, seed=1, out_dir=tmp_path)
    assert first == 24
    assert len(list((tmp_path / "snapshots" / "sinfo").glob("*.txt"))) == 12
    assert all("-" not in p.stem.split("_")[-1] for p in (tmp_path / "spool").rglob("*.jsonl"))
