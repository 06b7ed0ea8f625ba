"""Live collection against a fake `sacct` (tests/fakes/sacct) that prints a fixture, fails or hangs."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta

import pytest
from slurmscope.collectors import collect as collect_mod
from slurmscope.collectors.base import Outcome, get_watermark
from slurmscope.collectors.collect import collect, sacct_windows
from slurmscope.collectors.registry import COLLECTORS
from slurmscope.collectors.sacct import LIVE_FIELDS

from slurmscope.config import load_config
from tests.paths import FAKES, FIXTURES

FAKES = FAKES
US = "\x1f"
NOW = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)
SUB = "2024-05-10T09:00:00"


def output(*rows: list[str]) -> bytes:
    names = LIVE_FIELDS.split(",")
    lines = [US.join(names)] + [US.join(r) for r in rows]
    return ("\n".join(lines) + "\n").encode()


def job(
    job_id: str,
    state: str,
    start: str = "Unknown",
    end: str = "Unknown",
    submit: str = SUB,
    raw: str | None = None,
) -> list[str]:
    values = {
        "JobID": job_id,
        "JobIDRaw": raw or job_id,
        "Cluster": "",
        "Partition": "gpu",
        "QOS": "normal",
        "Account": "ml",
        "User": "u",
        "UID": "1",
        "Submit": submit,
        "Eligible": submit,
        "Start": start,
        "End": end,
        "Elapsed": "00:00:00",
        "Timelimit": "01:00:00",
        "State": state,
        "ExitCode": "0:0",
        "NNodes": "1",
        "NCPUS": "4",
        "ReqMem": "4G",
        "AllocTRES": "cpu=4,gres/gpu=1,node=1",
        "NodeList": "g1",
        "Flags": "SchedMain",
        "Priority": "1",
        "Reason": "None",
        "JobName": "n",
    }
    return [values.get(n, "") for n in LIVE_FIELDS.split(",")]


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Config pointing slurm.bin_dir at the fake; the fake's python is this interpreter."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    log = tmp_path / "sacct.log"
    monkeypatch.setenv("FAKE_SACCT_LOG", str(log))
    for var in ("FAKE_SACCT_MODE", "FAKE_SACCT_OUTPUT", "FAKE_SACCT_JOBS_OUTPUT", "FAKE_SACCT_FAIL_ON_CALL"):
        monkeypatch.delenv(var, raising=False)
    cfg = load_config(None, env={}).with_overrides(
        slurm={"bin_dir": str(FAKES), "timeout_seconds": 5.0},
        collect={
            "sacct_window_seconds": 86400,
            "sacct_overlap_seconds": 3600,
            "sacct_initial_lookback_seconds": 86400,
        },
    )

    def set_output(data: bytes, name: str = "out.txt", var: str = "FAKE_SACCT_OUTPUT") -> None:
        p = tmp_path / name
        p.write_bytes(data)
        monkeypatch.setenv(var, str(p))

    def calls() -> list[list[str]]:
        if not log.exists():
            return []
        return [json.loads(line)["argv"] for line in log.read_text().splitlines()]

    return cfg, set_output, calls, monkeypatch


def _arg(argv: list[str], name: str) -> str | None:
    for a in argv:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def test_first_run_uses_lookback_and_advances_watermark(con, env):
    cfg, set_output, calls, _ = env
    set_output(output(job("1", "RUNNING", start="2024-05-10T09:05:00")))
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert (out.collector, out.status, out.rows) == ("sacct", "ok", 1)
    [argv] = calls()
    assert (
        _arg(argv, "--starttime") == "2024-05-09T12:00:00"
        and _arg(argv, "--endtime") == "2024-05-10T12:00:00"
    )
    assert _arg(argv, "--delimiter") == US and "--duplicates" in argv
    assert get_watermark(con, cfg.cluster, "sacct") == NOW
    run = con.execute("SELECT status, rows, window_start, window_end, source FROM collector_runs").fetchall()
    assert run == [("ok", 1, NOW - timedelta(days=1), NOW, "live")]


def test_overlapping_window_updates_the_running_attempt_in_place(con, env):
    cfg, set_output, calls, _ = env
    set_output(output(job("1", "PENDING")))
    collect(con, cfg, "sacct", now=NOW)
    set_output(output(job("1", "RUNNING", start="2024-05-10T12:10:00")))
    collect(con, cfg, "sacct", now=NOW + timedelta(minutes=30))
    set_output(output(job("1", "COMPLETED", start="2024-05-10T12:10:00", end="2024-05-10T13:00:00")))
    collect(con, cfg, "sacct", now=NOW + timedelta(hours=1))
    # each later window starts at the previous watermark minus the overlap (1 h)
    starts = [_arg(a, "--starttime") for a in calls() if _arg(a, "--starttime")]
    assert starts == ["2024-05-09T12:00:00", "2024-05-10T11:00:00", "2024-05-10T11:30:00"]
    rows = con.execute("SELECT job_id, state, attempt, end_time FROM jobs").fetchall()
    assert rows == [("1", "COMPLETED", 1, datetime(2024, 5, 10, 13, tzinfo=UTC))]


def test_failed_sacct_leaves_the_watermark(con, env):
    cfg, set_output, calls, monkeypatch = env
    set_output(output(job("1", "RUNNING")))
    collect(con, cfg, "sacct", now=NOW)
    monkeypatch.setenv("FAKE_SACCT_MODE", "fail")
    [out] = collect(con, cfg, "sacct", now=NOW + timedelta(hours=2))
    assert out.status == "error" and "Connection refused" in out.error
    assert get_watermark(con, cfg.cluster, "sacct") == NOW
    last = con.execute("SELECT status, error FROM collector_runs ORDER BY run_id DESC LIMIT 1").fetchone()
    assert last[0] == "error" and "exit status 1" in last[1] and "Connection refused" in last[1]
    # the next good run resumes from the old watermark minus the overlap
    monkeypatch.delenv("FAKE_SACCT_MODE")
    collect(con, cfg, "sacct", now=NOW + timedelta(hours=3))
    assert _arg(calls()[-1], "--starttime") == "2024-05-10T11:00:00"


def test_hanging_sacct_times_out_and_leaves_the_watermark(con, env):
    cfg, _set_output, _calls, monkeypatch = env
    cfg = cfg.with_overrides(slurm={"timeout_seconds": 1.0})
    monkeypatch.setenv("FAKE_SACCT_MODE", "hang")
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert out.status == "timeout" and "timed out" in out.error
    assert get_watermark(con, cfg.cluster, "sacct") is None
    assert con.execute("SELECT status FROM collector_runs").fetchall() == [("timeout",)]
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_windows_are_chunked_and_a_failure_keeps_the_last_good_chunk(con, env):
    cfg, set_output, calls, monkeypatch = env
    cfg = cfg.with_overrides(collect={"sacct_initial_lookback_seconds": 3 * 86400})
    set_output(output(job("1", "COMPLETED", start=SUB, end=SUB)))
    monkeypatch.setenv("FAKE_SACCT_FAIL_ON_CALL", "2")
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert out.status == "error"
    assert len(calls()) == 2  # the third window waits for the next run
    assert get_watermark(con, cfg.cluster, "sacct") == NOW - timedelta(days=2)


def test_sacct_windows_helper():
    wins = sacct_windows(None, NOW, overlap=3600, window=86400, lookback=2.5 * 86400)
    assert wins == [
        (NOW - timedelta(days=2.5), NOW - timedelta(days=1.5)),
        (NOW - timedelta(days=1.5), NOW - timedelta(days=0.5)),
        (NOW - timedelta(days=0.5), NOW),
    ]
    assert sacct_windows(NOW - timedelta(hours=2), NOW, overlap=3600, window=86400, lookback=0) == [
        (NOW - timedelta(hours=3), NOW)
    ]


def test_jobs_hidden_by_the_window_are_fetched_by_id(con, env):
    cfg, set_output, calls, _ = env
    con.execute(
        "INSERT INTO pending_jobs (cluster, snapshot_time, job_id, job_id_raw, state, reason)"
        " VALUES (?, ?, '77', 77, 'PENDING', 'Dependency'), (?, ?, '78_[1-3]', NULL, 'PENDING', 'JobHeldUser')",
        [cfg.cluster, NOW, cfg.cluster, NOW],
    )
    set_output(output())
    set_output(
        output(job("77", "PENDING"), job("78_[1-3]", "PENDING", raw="78")),
        name="jobs.txt",
        var="FAKE_SACCT_JOBS_OUTPUT",
    )
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert out.status == "ok" and out.rows == 2
    by_id = [a for a in calls() if _arg(a, "--jobs")]
    assert len(by_id) == 1 and sorted(_arg(by_id[0], "--jobs").split(",")) == ["77", "78"]
    assert sorted(r[0] for r in con.execute("SELECT job_id FROM jobs").fetchall()) == ["77", "78_[1-3]"]
    # jobs still stored as PENDING are asked for again on the next run
    collect(con, cfg, "sacct", now=NOW + timedelta(minutes=5))
    assert sorted(_arg([a for a in calls() if _arg(a, "--jobs")][-1], "--jobs").split(",")) == ["77", "78"]


def test_all_runs_every_kind_in_order_and_sacct_after_squeue(con, env, monkeypatch):
    cfg, set_output, calls, _ = env
    set_output(output(job("1", "RUNNING")))
    ran = []
    monkeypatch.setattr(
        collect_mod,
        "_collect_snapshot",
        lambda db, cfg, c, at: ran.append(c.kind) or Outcome(c.kind, "ok"),
    )
    monkeypatch.setattr(
        collect_mod, "_collect_spool", lambda db, cfg, c: ran.append(c.kind) or Outcome(c.kind, "ok")
    )
    outs = collect(con, cfg, "all", now=NOW)
    order = [c.kind for c in COLLECTORS if c.kind != "sacct_rest"]  # slurm.source = "cli": sacct reads jobs
    assert [o.collector for o in outs] == order
    assert ran == [k for k in order if k != "sacct"]
    assert order.index("squeue") < order.index("sacct")
    assert outs[order.index("sacct")].status == "ok"


REAL = FIXTURES / "slurm-22.05"


def test_real_slurm_22_05_windows_match_what_the_driver_did(con, env):
    """Two live runs replaying real sacct output (mid-workload, then final) plus the by-id query.

    Expected states, attempts, GPUs and exit codes come from workload_record.json, which the test-bed
    driver wrote from what it did and saw in squeue, never from sacct.
    """
    cfg, set_output, calls, _ = env
    record = json.loads((REAL / "workload_record.json").read_text())
    submits = {
        f: (REAL / f).read_bytes().split(b"\n")[1].split(US.encode())[8]
        for f in ("sacct_mid.txt", "sacct_final.txt")
    }
    assert len(set(submits.values())) == 1, (
        f"fixtures come from different test-bed runs: job 1 submitted {submits}"
    )
    cfg = cfg.with_overrides(cluster={"name": "slurmbed"})
    ids = sorted({j["job_id_raw"] for j in record["jobs"]}, key=int)
    con.execute(
        "INSERT INTO pending_jobs (cluster, snapshot_time, job_id, job_id_raw, state)"
        " SELECT 'slurmbed', ?, id, CAST(id AS BIGINT), 'PENDING' FROM unnest(?) t(id)",
        [NOW, ids],
    )
    set_output((REAL / "sacct_mid.txt").read_bytes())
    set_output((REAL / "sacct_jobs_mid.txt").read_bytes(), name="jobs_mid.txt", var="FAKE_SACCT_JOBS_OUTPUT")
    [o1] = collect(con, cfg, "sacct", now=NOW)
    mid_13 = con.execute("SELECT state, gpus FROM jobs WHERE job_id_raw = 13 ORDER BY submit_time").fetchall()
    assert mid_13 == [("NODE_FAIL", 8), ("PENDING", 0)]
    set_output((REAL / "sacct_final.txt").read_bytes())
    set_output(
        (REAL / "sacct_jobs_final.txt").read_bytes(), name="jobs_final.txt", var="FAKE_SACCT_JOBS_OUTPUT"
    )
    [o2] = collect(con, cfg, "sacct", now=NOW + timedelta(minutes=5))
    assert o1.status == o2.status == "ok"
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0
    for rec in record["jobs"]:
        rows = con.execute(
            'SELECT job_id, state, attempt, gpus, exit_code, sched_by, account, "user", qos, "partition"'
            " FROM jobs WHERE cluster = 'slurmbed' AND job_id_raw = ? ORDER BY submit_time",
            [int(rec["job_id_raw"])],
        ).fetchall()
        assert len(rows) == rec["attempts"], rec["job_id"]
        job_id, state, attempt, gpus, exit_code, sched_by, account, user, qos, part = rows[-1]
        assert (job_id, state, attempt) == (rec["job_id"], rec["final_state"], rec["attempts"]), rec["job_id"]
        assert (account, user, qos, part) == (rec["account"], rec["user"], rec["qos"], rec["partition"])
        if rec["final_state"] not in ("PENDING",) and rec["job_id"] != "16":  # 16 was cancelled while pending
            assert gpus == rec["gpus"], rec["job_id"]
        if "exit_code" in rec:
            assert exit_code == rec["exit_code"], rec["job_id"]
        if rec.get("sched_by"):
            assert sched_by == rec["sched_by"], rec["job_id"]
    steps = con.execute("SELECT count(*) FROM job_steps WHERE step_id = 'batch'").fetchone()[0]
    ran = sum(j["attempts"] for j in record["jobs"] if j["final_state"] != "PENDING" and j["job_id"] != "16")
    assert steps == ran  # one batch step per attempt that ran


def test_a_collector_with_its_own_fetch_runs_no_command(con, env, monkeypatch):
    """The contract's optional fetch (an HTTP source) replaces the command; a failed fetch is recorded
    like a failed command. tests/fakes has no sdiag, so running the command would fail."""
    from slurmscope.collectors import sdiag

    cfg = env[0]
    windows = []

    def fetch(cfg, window):
        windows.append(window)
        return (REAL / "sdiag_final.txt").read_bytes()

    monkeypatch.setattr(sdiag, "fetch", fetch, raising=False)
    [out] = collect(con, cfg, "sdiag", now=NOW)
    assert (out.status, out.error) == ("ok", None) and out.rows > 0 and windows == [(None, None)]

    def hang(cfg, window):
        raise TimeoutError("timed out")

    monkeypatch.setattr(sdiag, "fetch", hang)
    [out] = collect(con, cfg, "sdiag", now=NOW)
    assert (out.status, out.error) == ("timeout", "timed out")
    runs = con.execute(
        "SELECT status FROM collector_runs WHERE collector = 'sdiag' ORDER BY run_id"
    ).fetchall()
    assert runs == [("ok",), ("timeout",)]
