"""Slurm's JSON of the jobs gives the pending_jobs rows of the live squeue text (real captures, ground truth).

The 22.05 captures in tests/fixtures/slurm-22.05/json-state/ hold the live `squeue --all --array
--states=all --format=...` line, `squeue --json` and slurmrestd's `/slurm/v0.0.38/jobs` of one state (the
text taken again after them and found unchanged: tests/slurmbed/capture_state_json.py). Later versions are
real slurmrestd responses of other clusters, their values read off the JSON by hand in the comments.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from slurmscope.collectors import squeue
from slurmscope.collectors.ingest import ingest_files
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.config import load_config
from slurmscope.db import connect
from tests.paths import FIXTURES

STATE = FIXTURES / "slurm-22.05" / "json-state"
HUMAN = FIXTURES / "slurm-22.05" / "human"
WEB = FIXTURES / "rackslab__Slurm-web" / "slurmrestd"
T0 = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)


def parse(path: Path | bytes) -> squeue.Parsed:
    data = path if isinstance(path, bytes) else path.read_bytes()
    return squeue.parse(data, cluster="c", snapshot_time=T0, tz=UTC)


def job(df: pl.DataFrame, job_id: str) -> dict:
    rows = df.filter(pl.col("job_id") == job_id).to_dicts()
    assert len(rows) == 1, (job_id, rows)
    return rows[0]


@pytest.mark.parametrize("tag", ["a", "b"])
def test_json_and_rest_give_the_text_rows_of_the_same_moment(tag: str) -> None:
    text = parse(STATE / f"squeue_text_{tag}.txt")
    assert text.quarantine.height == 0
    a = text.tables["pending_jobs"].sort("job_id")
    assert a.height == 16  # 13 job records, the pending array record printed as its 4 tasks
    for other in (parse(STATE / f"squeue_json_{tag}.json"), parse(STATE / f"rest_slurm_jobs_{tag}.json")):
        assert other.quarantine.height == 0
        b = other.tables["pending_jobs"].sort("job_id")
        assert b.schema == a.schema
        assert [c for c in a.columns if not a[c].equals(b[c])] == []  # no column differs


def test_values_are_the_jobs_the_bed_was_given() -> None:
    """state_record.json holds what capture_state_json.py submitted and expected, never read from Slurm."""
    record = json.loads((STATE / "state_record.json").read_text())["jobs"]
    df = parse(STATE / "rest_slurm_jobs_a.json").tables["pending_jobs"]
    for key, want in record.items():
        if key == "array":
            continue
        row = job(df, want["job_id"])
        assert (row["user"], row["name"], row["state"]) == (want["user"], want["name"], want["state"]), key
        if "reason" in want:
            assert row["reason"] == want["reason"], key
    four = job(df, record["four_nodes"]["job_id"])  # -N 4 --exclusive --gres=gpu:8
    assert (four["nodes"], four["gpus"], four["tres_per_node"]) == (4, 32, "gres:gpu:8")
    assert four["reason"] == (
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    )
    assert job(df, record["on_down_node"]["job_id"])["reason"] == "ReqNodeNotAvail, UnavailableNodes:gpu01"
    held = record["held"]["job_id"]
    assert job(df, record["after_held"]["job_id"])["dependency"] == f"afterok:{held}(unfulfilled)"
    # --array=0-5%2: tasks 0 and 1 run as their own jobs, 2-5 wait as one record that squeue --array prints
    # once per task, each with the record's own job id
    arr = record["array"]["job_id"]
    tasks = df.filter(pl.col("array_job_id") == int(arr)).sort("job_id")
    assert tasks["job_id"].to_list() == [f"{arr}_{t}" for t in range(6)]
    assert tasks["state"].to_list() == ["RUNNING"] * 2 + ["PENDING"] * 4
    assert set(tasks.filter(pl.col("state") == "PENDING")["job_id_raw"]) == {int(arr)}
    assert set(tasks.filter(pl.col("state") == "PENDING")["reason"]) == {"JobArrayTaskLimit"}


def test_the_human_capture_of_another_moment() -> None:
    """human_squeue_json.txt (2026-12-03) against human_record.json, the set-up of that moment."""
    record = json.loads((HUMAN / "human_record.json").read_text())["jobs"]
    p = parse(HUMAN / "human_squeue_json.txt")
    df = p.tables["pending_jobs"]
    assert p.quarantine.height == 0 and df.height == len(record)
    for key, want in record.items():
        row = job(df, want["job_id"])
        assert (row["user"], row["name"], row["state"]) == (want["user"], want["name"], want["state"]), key
        if "reason" in want:
            assert row["reason"] == want["reason"], key


# (file, job id, (state, reason, user, account, partition, priority, nodes, cpus, timelimit s), submit,
# start): read by hand. The GPU requests of these jobs are per job (`tres_per_job` gres/gpu:4), which
# the live line's %b (per node) does not print, so gpus is 0 as in the text.
LATER = [
    (
        "24.05/0.0.41/slurm-job-gpus-pending.json",
        "2",
        ("PENDING", "BeginTime", "mcarrillo", "acoustic", "gpu", 1000, 1, 1, 60, 0),
        1762529003,
        1762532603,
    ),
    (
        "24.11/0.0.42/slurm-job-gpus-pending.json",
        "6376",
        ("PENDING", "BeginTime", "progers", "biology", "ia", 727, 1, 1, 60, 0),
        1762788934,
        1762792534,
    ),
    (
        "25.05/0.0.43/slurm-job-pending.json",
        "4743",
        ("PENDING", "BeginTime", "progers", "biology", "normal", 545, 2, 128, 60, 0),
        1762789015,
        1762792615,
    ),
    (
        "25.11/0.0.44/slurm-job-gpus-pending.json",
        "4965",
        ("PENDING", "BeginTime", "jwilson", "admin", "gpu", 909, 1, 1, 60, 0),
        1762783691,
        1762787291,
    ),
]
COLUMNS = (
    "state",
    "reason",
    "user",
    "account",
    "partition",
    "priority",
    "nodes",
    "cpus",
    "timelimit_seconds",
    "gpus",
)


@pytest.mark.parametrize(("path", "job_id", "want", "submit", "start"), LATER)
def test_slurmrestd_jobs_of_later_versions(
    path: str, job_id: str, want: tuple, submit: int, start: int
) -> None:
    p = parse(WEB / path)
    assert p.quarantine.height == 0
    row = job(p.tables["pending_jobs"], job_id)
    assert tuple(row[c] for c in COLUMNS) == want
    assert row["submit_time"] == datetime.fromtimestamp(submit, UTC)
    assert row["start_time"] == datetime.fromtimestamp(start, UTC)  # the expected start of a pending job


def test_v0_0_40_pending_array_is_one_row_per_task() -> None:
    """lcrownover's 23.11.1 response: task 411 of array 7725337 runs as job 7745162; the array record
    7725337 waits with tasks 412-9999 (Resources): 9999 - 412 + 1 = 9588 rows, as squeue --array prints."""
    df = parse(FIXTURES / "lcrownover__prometheus-slurm-exporter" / "V0040OpenapiJobInfoResp.json").tables[
        "pending_jobs"
    ]
    assert df.height == 1 + 9588
    running = job(df, "7725337_411")
    assert (running["job_id_raw"], running["state"], running["timelimit_seconds"]) == (
        7745162,
        "RUNNING",
        86400,
    )
    pending = df.filter(pl.col("state") == "PENDING")
    assert pending.height == 9588 and set(pending["job_id_raw"]) == {7725337}
    ids = pending["array_task_id"].cast(pl.Int64)
    assert (ids.min(), ids.max(), ids.n_unique()) == (412, 9999, 9588)
    assert job(df, "7725337_9999")["reason"] == "Resources"


def test_v0_0_38_of_another_cluster() -> None:
    """Telegraf's real 22.05.9 response: three atlas jobs without account or QOS, time limit 3600 min."""
    df = parse(FIXTURES / "influxdata__telegraf" / "slurm_rest" / "jobs.json").tables["pending_jobs"]
    assert df.sort("job_id")["job_id"].to_list() == ["20464", "20468", "23772"]
    first = job(df, "20464")
    assert (first["state"], first["cpus"], first["priority"]) == ("RUNNING", 2, 4294881265)
    assert (first["account"], first["qos"], first["timelimit_seconds"]) == (None, None, 3600 * 60)
    assert job(df, "23772")["state"] == "COMPLETED"


@pytest.mark.parametrize(
    ("text", "tasks"),
    [
        ("2-5%2", [2, 3, 4, 5]),  # the bed's throttled array: the `%2` is the throttle, not a task
        ("1,3,7-9", [1, 3, 7, 8, 9]),
        ("0-20:4", [0, 4, 8, 12, 16, 20]),  # xlate_array_task_str's step form
        ("412-414", [412, 413, 414]),
    ],
)
def test_array_task_lists(text: str, tasks: list[int]) -> None:
    assert squeue.array_tasks(text) == tasks


@pytest.mark.parametrize("text", ["1-3,5-...", "a-b", "5-2", ""])
def test_array_task_lists_that_cannot_be_expanded(text: str) -> None:
    with pytest.raises(ValueError):
        squeue.array_tasks(text)


def test_state_is_what_squeue_prints_for_a_list_of_flags() -> None:
    """job_state_string(): COMPLETING wins over the base state; v0.0.40+ list both."""
    doc = json.loads((WEB / "25.11/0.0.44/slurm-job-gpus-pending.json").read_bytes())
    doc["jobs"][0]["job_state"] = ["RUNNING", "COMPLETING"]
    assert job(parse(json.dumps(doc).encode()).tables["pending_jobs"], "4965")["state"] == "COMPLETING"


def test_v0_0_38_without_a_cpu_count_takes_the_requested_cpus() -> None:
    """v0.0.38 prints `cpus` null when a job has no task count (seen live for a job cancelled while held);
    squeue's %C of job 13 is 4 (the text capture) and its tres_req_str says cpu=4."""
    doc = json.loads((STATE / "rest_slurm_jobs_a.json").read_bytes())
    [j13] = [j for j in doc["jobs"] if j["job_id"] == 13]
    assert j13["tres_req_str"].startswith("cpu=4,")
    j13["cpus"] = j13["tasks"] = None
    text = job(parse(STATE / "squeue_text_a.txt").tables["pending_jobs"], "13")
    assert job(parse(json.dumps(doc).encode()).tables["pending_jobs"], "13") == text


def test_an_accounting_document_is_not_a_queue() -> None:
    p = parse(FIXTURES / "slurm-22.05" / "json" / "sacct_jobs_json_final.json")
    assert p.rows == 0 and p.quarantine.height == 3
    assert all("use ingest sacct" in r for r in p.quarantine["reason"])


def test_ingest_squeue_json_loads_the_text_rows(tmp_path: Path) -> None:
    cfg = load_config(env={})
    text_db, json_db = connect(str(tmp_path / "t.duckdb")), connect(str(tmp_path / "j.duckdb"))
    at = "2026-12-04T14:54:50Z"
    ingest_files(text_db, cfg, "squeue", [STATE / "squeue_text_a.txt"], timezone="UTC", at=at)
    [res] = ingest_files(json_db, cfg, "squeue", [STATE / "squeue_json_a.json"], at=at)
    assert (res.rows, res.quarantined, res.status) == (16, 0, "ok")
    q = "SELECT * FROM pending_jobs ORDER BY job_id"
    assert text_db.execute(q).fetchall() == json_db.execute(q).fetchall()


@given(st.binary(max_size=400))
def test_broken_json_never_raises_and_every_line_is_quarantined(tail: bytes) -> None:
    data = b'{"meta": ' + tail
    p = squeue.parse(data, cluster="c", snapshot_time=T0, tz=UTC)
    lines = [i for i, ln in enumerate(data.split(b"\n"), 1) if not is_blank(ln.decode("utf-8", "replace"))]
    assert p.rows > 0 or sorted(p.quarantine["line_no"].to_list()) == lines
