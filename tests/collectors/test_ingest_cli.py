"""`slurmscope ingest sacct` end to end on real captures, then `slurmscope query` to read the result back.

Expected counts were computed independently of the parser with awk on the files (see
tests/fixtures/PROVENANCE.md) and agree with the upstream provenance notes.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from slurmscope.collectors.ingest import IngestError, ingest_files

from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.db import connect
from tests.paths import FIXTURES

FIX = FIXTURES
XDMOD_FORMAT = (
    "jobid,jobidraw,cluster,partition,qos,account,group,gid,user,uid,submit,eligible,start,end,elapsed,"
    "exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqtres,alloctres,timelimit,nodelist,jobname"
)
HB_FORMAT = (
    "JobID,JobName,User,Partition,NodeList,NNodes,NCPUs,NTasks,State,Submit,Start,End,Timelimit,Elapsed,"
    "TotalCPU,CPUTime,UserCPU,SystemCPU,ReqMem,MaxRSS,MaxVMSize,ReqTRES,AllocTRES,TRESUsageInMax,"
    "TRESUsageInTot,TRESUsageOutTot,MaxDiskRead,MaxDiskWrite,MaxRSSNode,MaxRSSTask,MaxVMSizeNode,"
    "MaxVMSizeTask,MaxDiskReadNode,MaxDiskReadTask,MaxDiskWriteNode,MaxDiskWriteTask,Comment"
)
JOBINFO_FORMAT = (
    "JobID,JobName,User,Partition,NodeList,NNodes,ncpus,NTasks,State,Submit,start,end,timelimit,elapsed,"
    "TotalCPU,UserCPU,SystemCPU,ReqMem,MaxRSS,TRESUsageInTot,TRESUsageOutTot,MaxDiskWrite,MaxDiskRead,"
    "MaxRSSNode,MaxDiskWriteNode,MaxDiskReadNode,Comment"
)


@pytest.fixture(autouse=True)
def _no_local_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./slurmscope.toml from the checkout
    for var in ("SLURMSCOPE_CONFIG", "SLURMSCOPE_DB"):
        monkeypatch.delenv(var, raising=False)


def cli(db: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["--db", str(db), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def query(db: Path, sql: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(cli(db, "query", sql, "--format", "csv"))))


def state_counts(db: Path) -> dict[str, int]:
    return {
        r["state"]: int(r["n"]) for r in query(db, "SELECT state, count(*) AS n FROM jobs GROUP BY state")
    }


def test_pozidriv_counts_via_cli(tmp_path):
    db = tmp_path / "x.duckdb"
    cli(db, "ingest", "sacct", str(FIX / "xdmod/pozidriv.log"), "--format", XDMOD_FORMAT)
    assert state_counts(db) == {
        "COMPLETED": 10134,
        "FAILED": 1007,
        "CANCELLED": 468,
        "PREEMPTED": 86,
        "TIMEOUT": 9,
    }
    assert query(db, "SELECT count(*) AS n FROM quarantine")[0]["n"] == "0"
    # first line of the file, checked by hand
    r = query(db, "SELECT * FROM jobs WHERE job_id = '977669'")[0]
    assert r["cluster"] == "pozidriv" and r["partition"] == "croutons" and r["user"] == "turdo"
    assert r["submit_time"].startswith("2016-12-21 21:43:34")
    assert r["elapsed_seconds"] == str(7 * 86400 + 20 * 3600 + 39 * 60 + 39)
    assert r["timelimit_seconds"] == str(125 * 86400)
    assert (
        r["cpus"] == "12" and r["gpus"] == "0" and r["attempt"] == "1" and r["source"] == "sacct:pozidriv.log"
    )
    assert r["req_mem_bytes"] == str(48000 * 1024 * 1024)  # 48000Mn on 1 node


def test_phillips_counts_and_hand_checked_rows(tmp_path):
    db = tmp_path / "x.duckdb"
    cli(db, "ingest", "sacct", str(FIX / "xdmod/phillips.log"), "--format", XDMOD_FORMAT)
    assert state_counts(db) == {"COMPLETED": 2324, "FAILED": 1717, "CANCELLED": 243, "TIMEOUT": 1}
    assert query(db, "SELECT sum(gpus) AS g, count(*) FILTER (WHERE gpus > 0) AS n FROM jobs")[0] == {
        "g": "4",
        "n": "2",
    }
    c = query(db, "SELECT * FROM jobs WHERE job_id = '163485'")[0]
    assert (c["state"], c["state_raw"], c["gpus"], c["billing"]) == (
        "CANCELLED",
        "CANCELLED by 380693",
        "2",
        "12.0",
    )
    t = query(db, "SELECT * FROM jobs WHERE job_id = '165381'")[0]
    assert (t["state"], t["exit_code"], t["signal"], t["nodes"], t["cpus"]) == (
        "TIMEOUT",
        "1",
        "0",
        "8",
        "64",
    )
    assert t["node_list"] == "cpn-f13-03-[01-02],cpn-f13-04-[01-02],cpn-f13-05-[01-02],cpn-f13-06-[01-02]"
    assert t["elapsed_seconds"] == str(5 * 86400 + 26) and t["timelimit_seconds"] == str(5 * 86400)
    assert t["req_mem_bytes"] == str(8000 * 8 * 1024 * 1024)  # 8000Mn x 8 nodes


def test_robertson_single_line_without_newline(tmp_path):
    db = tmp_path / "x.duckdb"
    cli(db, "ingest", "sacct", str(FIX / "xdmod/robertson-filter-test.log"), "--format", XDMOD_FORMAT)
    rows = query(db, "SELECT * FROM jobs")
    assert len(rows) == 1
    r = rows[0]
    assert (r["job_id"], r["cluster"], r["nodes"], r["cpus"], r["state"]) == (
        "6120900",
        "robertson",
        "9",
        "108",
        "COMPLETED",
    )
    assert r["node_list"].endswith("cpn-k16-40-02") and r["elapsed_seconds"] == str(15 * 60 + 38)


def test_habrok_snowman_delimiter_parsable_with_trailing_delimiter(tmp_path):
    db = tmp_path / "x.duckdb"
    cli(
        db,
        "ingest",
        "sacct",
        str(FIX / "rug-cit-hpc__hb-jobinfo/sacct.txt"),
        "--format",
        HB_FORMAT,
        "--delimiter",
        "☃",
    )
    assert state_counts(db) == {
        "CANCELLED": 8,
        "COMPLETED": 47,
        "FAILED": 6,
        "NODE_FAIL": 1,
        "PENDING": 7,
        "RUNNING": 2,
        "TIMEOUT": 5,
    }
    assert query(db, "SELECT count(*) AS n FROM job_steps")[0]["n"] == "114"
    assert query(db, "SELECT sum(gpus) AS g FROM jobs")[0]["g"] == "14"
    # array tasks: the capture has no JobIDRaw column, so their job id is unknowable -> quarantined, said why
    q = query(db, "SELECT reason, count(*) AS n FROM quarantine GROUP BY reason")
    assert len(q) == 1 and q[0]["n"] == "52" and "JobIDRaw" in q[0]["reason"]
    j = query(db, "SELECT * FROM jobs WHERE job_id = '7971484'")[0]
    assert (j["gpus"], j["gpu_type"], j["nodes"], j["cpus"], j["node_list"]) == (
        "4",
        "a100",
        "2",
        "16",
        "a100gpu[2,4]",
    )
    assert j["submit_time"].startswith("2024-04-05 00:34:52") and j["elapsed_seconds"] == "233"
    assert j["timelimit_seconds"] == str(3 * 86400) and j["name"] == "86I"
    steps = query(db, "SELECT step_id, gpus FROM job_steps WHERE job_id_raw = 7971484 ORDER BY step_id")
    assert steps == [
        {"step_id": "0", "gpus": "4"},
        {"step_id": "batch", "gpus": "2"},
        {"step_id": "extern", "gpus": "4"},
    ]


def test_peregrine_old_reqmem_suffix(tmp_path):
    db = tmp_path / "x.duckdb"
    cli(
        db,
        "ingest",
        "sacct",
        str(FIX / "rug-cit-hpc__slurm-jobinfo/sacct.txt"),
        "--format",
        JOBINFO_FORMAT,
        "--delimiter",
        "☃",
    )
    # the capture prints most jobs twice (35 job lines, 19 distinct (JobID, Submit) pairs by awk | sort -u):
    # the natural key keeps one row per attempt
    assert state_counts(db) == {"COMPLETED": 8, "FAILED": 1, "PENDING": 3, "RUNNING": 7}
    assert query(db, "SELECT count(*) AS n FROM job_steps")[0]["n"] == "23"
    r = query(db, "SELECT * FROM jobs WHERE job_id = '20872560'")[0]
    assert r["req_mem_bytes"] == str(100 * 1024**3)  # 100Gn x 1 node
    assert r["elapsed_seconds"] == str(86400 + 6 * 3600 + 51 * 60 + 32)


def test_capture_without_submit_is_declined_with_a_reason(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "--db",
            str(tmp_path / "x.duckdb"),
            "ingest",
            "sacct",
            str(FIX / "SckyzO__slurm_exporter/sacct_efficiency.txt"),
            "--format",
            "JobID,User,Account,AllocCPUS,Elapsed,TotalCPU,CPUTime,MaxRSS,ReqMem",
        ],
    )
    assert result.exit_code != 0
    assert "without submit" in result.output


def test_headerless_without_format_is_an_error(tmp_path):
    result = CliRunner().invoke(
        main,
        ["--db", str(tmp_path / "x.duckdb"), "ingest", "sacct", str(FIX / "xdmod/robertson-filter-test.log")],
    )
    assert result.exit_code != 0 and "--format" in result.output


def _dump(db: Path) -> dict[str, list[tuple]]:
    con = connect(db, read_only=True)
    try:
        return {
            t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
            for t in ("jobs", "job_steps", "quarantine")
        }
    finally:
        con.close()


def test_reingest_is_a_noop_including_quarantine(tmp_path):
    db = tmp_path / "x.duckdb"
    args = [
        "ingest",
        "sacct",
        str(FIX / "rug-cit-hpc__hb-jobinfo/sacct.txt"),
        "--format",
        HB_FORMAT,
        "--delimiter",
        "☃",
    ]
    cli(db, *args)
    first = _dump(db)
    cli(db, *args)
    assert _dump(db) == first
    assert len(first["quarantine"]) == 52


HEADER = "JobID|JobIDRaw|State|Submit|Start|End|Elapsed|AllocTRES|JobName\n"


def write(tmp_path: Path, name: str, body: str) -> str:
    p = tmp_path / name
    p.write_text(HEADER + body)
    return str(p)


def test_requeued_job_has_one_row_per_attempt_ranked_over_all_loads(tmp_path):
    db = tmp_path / "x.duckdb"
    a1 = write(
        tmp_path,
        "a1",
        "9|9|REQUEUED|2024-01-01T00:00:00|2024-01-01T00:01:00|2024-01-01T01:00:00|00:59:00||j\n",
    )
    a2 = write(
        tmp_path,
        "a2",
        "9|9|REQUEUED|2024-01-01T01:00:05|2024-01-01T01:02:00|2024-01-01T02:00:00|00:58:00||j\n",
    )
    a3 = write(
        tmp_path,
        "a3",
        "9|9|COMPLETED|2024-01-01T02:00:05|2024-01-01T02:01:00|2024-01-01T03:00:00|00:59:00||j\n",
    )
    # loaded out of order: the rank must come from all stored rows, not from one file
    for f in (a3, a1, a2):
        cli(db, "ingest", "sacct", f)
    rows = query(db, "SELECT attempt, restarts, state FROM jobs WHERE job_id_raw = 9 ORDER BY submit_time")
    assert rows == [
        {"attempt": "1", "restarts": "0", "state": "REQUEUED"},
        {"attempt": "2", "restarts": "1", "state": "REQUEUED"},
        {"attempt": "3", "restarts": "2", "state": "COMPLETED"},
    ]


def test_overlapping_windows_update_one_attempt_in_place(tmp_path):
    db = tmp_path / "x.duckdb"
    sub = "2024-01-01T00:00:00"
    w1 = write(tmp_path, "w1", f"7|7|PENDING|{sub}|Unknown|Unknown|00:00:00||j\n")
    w2 = write(
        tmp_path,
        "w2",
        f"7|7|RUNNING|{sub}|2024-01-01T00:10:00|Unknown|00:05:00|cpu=8,gres/gpu=2|j\n"
        f"7.batch|7.batch|RUNNING|2024-01-01T00:10:00|2024-01-01T00:10:00|Unknown|00:05:00||batch\n",
    )
    w3 = write(
        tmp_path,
        "w3",
        f"7|7|COMPLETED|{sub}|2024-01-01T00:10:00|2024-01-01T01:10:00|01:00:00|cpu=8,gres/gpu=2|j\n"
        f"7.batch|7.batch|COMPLETED|2024-01-01T00:10:00|2024-01-01T00:10:00|2024-01-01T01:10:00|01:00:00||batch\n",
    )
    cli(db, "ingest", "sacct", w1)
    assert query(db, "SELECT state, gpus FROM jobs") == [{"state": "PENDING", "gpus": "0"}]
    cli(db, "ingest", "sacct", w2)
    assert query(db, "SELECT state, gpus, end_time FROM jobs") == [
        {"state": "RUNNING", "gpus": "2", "end_time": ""}
    ]
    cli(db, "ingest", "sacct", w3)
    rows = query(db, "SELECT state, attempt, end_time, elapsed_seconds FROM jobs")
    assert len(rows) == 1
    assert (
        rows[0]["state"] == "COMPLETED" and rows[0]["attempt"] == "1" and rows[0]["elapsed_seconds"] == "3600"
    )
    assert rows[0]["end_time"].startswith("2024-01-01 01:10:00")
    assert query(db, "SELECT step_id, state FROM job_steps") == [{"step_id": "batch", "state": "COMPLETED"}]


def test_pending_array_record_is_replaced_by_the_task_that_keeps_its_id(tmp_path):
    db = tmp_path / "x.duckdb"
    sub = "2024-01-01T00:00:00"
    f1 = write(
        tmp_path,
        "f1",
        f"20_[5-9%2]|20|PENDING|{sub}|Unknown|Unknown|00:00:00||arr\n"
        f"20_4|24|RUNNING|{sub}|2024-01-01T00:01:00|Unknown|00:01:00||arr\n",
    )
    f2 = write(tmp_path, "f2", f"20_5|20|RUNNING|{sub}|2024-01-01T00:02:00|Unknown|00:01:00||arr\n")
    cli(db, "ingest", "sacct", f1)
    cli(db, "ingest", "sacct", f2)
    rows = query(db, "SELECT job_id, job_id_raw, array_task_id, state FROM jobs ORDER BY job_id_raw")
    assert rows == [
        {"job_id": "20_5", "job_id_raw": "20", "array_task_id": "5", "state": "RUNNING"},
        {"job_id": "20_4", "job_id_raw": "24", "array_task_id": "4", "state": "RUNNING"},
    ]


def test_timezone_option_converts_local_times(tmp_path):
    db = tmp_path / "x.duckdb"
    f = write(
        tmp_path,
        "tz",
        "5|5|COMPLETED|2024-07-01T12:00:00|2024-07-01T12:00:00|2024-07-01T13:00:00|01:00:00||j\n",
    )
    cli(db, "ingest", "sacct", f, "--timezone", "Europe/Berlin")
    r = query(db, "SELECT epoch(submit_time) AS s FROM jobs")[0]
    assert float(r["s"]) == datetime(2024, 7, 1, 10, tzinfo=UTC).timestamp()  # CEST = UTC+2


def test_ingest_files_errors(tmp_path):
    cfg = load_config(None, env={})
    con = connect(tmp_path / "x.duckdb")
    try:
        f = Path(write(tmp_path, "ok", "5|5|COMPLETED|2024-07-01T12:00:00|||||j\n"))
        with pytest.raises(IngestError, match="unknown kind"):
            ingest_files(con, cfg, "bogus", [f])
        with pytest.raises(IngestError, match="time zone"):
            ingest_files(con, cfg, "sacct", [f], timezone="Mars/Olympus")
        with pytest.raises(IngestError, match="delimiter"):
            ingest_files(con, cfg, "sacct", [f], delimiter="")
        res = ingest_files(con, cfg, "sacct", [f])
        assert (res[0].rows, res[0].quarantined) == (1, 0)
    finally:
        con.close()
