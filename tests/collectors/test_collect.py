"""Live collection against a fake `sacct` (tests/fakes/sacct) that prints a fixture, fails or hangs."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta

import pytest
from slurmscope.collectors import collect as collect_mod
from slurmscope.collectors.base import Outcome, get_watermark
from slurmscope.collectors.collect import backfill_key, backfill_with, collect, next_window_seconds
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
    for var in (
        "FAKE_SACCT_MODE",
        "FAKE_SACCT_OUTPUT",
        "FAKE_SACCT_JOBS_OUTPUT",
        "FAKE_SACCT_FAIL_ON_CALL",
        "FAKE_SACCT_HISTORY",
        "FAKE_SQUEUE_OUTPUT",
        "FAKE_SQUEUE_MODE",
    ):
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


def test_next_window_aims_at_the_target_rows_and_grows_at_most_4x():
    day = 86400.0
    # 20,000 rows in a day with a 50,000 target: 2.5 days next (50,000 / 20,000 x 1 day)
    assert next_window_seconds(day, 20_000, target_rows=50_000, low=60, high=31 * day) == 2.5 * day
    # 500 rows: 100 days would be the target, 4 days is the cap on growth per call
    assert next_window_seconds(day, 500, target_rows=50_000, low=60, high=31 * day) == 4 * day
    assert next_window_seconds(day, 0, target_rows=50_000, low=60, high=31 * day) == 4 * day
    # a busy day (1M rows): 1/20 of a day next, never below the floor
    assert next_window_seconds(day, 1_000_000, target_rows=50_000, low=60, high=31 * day) == day / 20
    assert next_window_seconds(600, 10**9, target_rows=50_000, low=60, high=31 * day) == 60
    assert next_window_seconds(20 * day, 0, target_rows=50_000, low=60, high=31 * day) == 31 * day


def history(tmp_path, monkeypatch, days: int, per_day: int, start: datetime) -> int:
    """`days` days of finished jobs, `per_day` a day, each submitted, run an hour, done; returns how many."""
    rows, n = [], 0
    for d in range(days):
        for k in range(per_day):
            n += 1
            sub = start + timedelta(days=d, minutes=10 * k)
            fmt = "%Y-%m-%dT%H:%M:%S"
            r = job(str(n), "COMPLETED", submit=sub.strftime(fmt), start=sub.strftime(fmt))
            r[LIVE_FIELDS.split(",").index("End")] = (sub + timedelta(hours=1)).strftime(fmt)
            rows.append(r)
    p = tmp_path / "history.txt"
    p.write_bytes(output(*rows))
    monkeypatch.setenv("FAKE_SACCT_HISTORY", str(p))
    return n


def test_history_import_walks_years_in_windows_sized_by_what_sacct_returns(con, env, tmp_path):
    cfg, _, calls, monkeypatch = env
    cfg = cfg.with_overrides(collect={"sacct_target_rows": 200, "sacct_max_window_seconds": 90 * 86400})
    since = NOW - timedelta(days=400)
    n = history(tmp_path, monkeypatch, 400, 3, since)
    seen = []
    out = backfill_with(lambda fn: fn(con), cfg, since, now=NOW, progress=lambda d, t, r: seen.append((d, t)))
    assert out.status == "ok"
    assert con.execute("SELECT count(*), count(DISTINCT job_id_raw) FROM jobs").fetchone() == (n, n)
    windows = [a for a in calls() if _arg(a, "--starttime")]
    # 3 jobs a day and a target of 200 a call: about 67 days a call once grown, not one call per day
    assert len(windows) < 20, len(windows)
    starts = [_arg(a, "--starttime") for a in windows]
    ends = [_arg(a, "--endtime") for a in windows]
    assert starts[0] == since.strftime("%Y-%m-%dT%H:%M:%S") and ends[-1] == NOW.strftime("%Y-%m-%dT%H:%M:%S")
    assert starts[1:] == ends[:-1]  # contiguous, no gap and no overlap
    assert seen[-1] == (400 * 86400.0, 400 * 86400.0)
    # a database that never collected continues live collection from where the import ended
    assert get_watermark(con, cfg.cluster, "sacct") == NOW
    assert get_watermark(con, cfg.cluster, backfill_key("sacct", since)) == NOW


def test_a_job_cancelled_before_it_was_eligible_is_found_by_its_id(con, env, tmp_path):
    """No window prints a job that never became eligible; its id is a hole between stored ids."""
    cfg, _, calls, monkeypatch = env
    since = NOW - timedelta(days=3)
    history(tmp_path, monkeypatch, 3, 4, since)
    p = tmp_path / "history.txt"
    lines = p.read_bytes().decode().splitlines()
    names = LIVE_FIELDS.split(",")
    rec = lines[6].split(US)  # job 6
    rec[names.index("Eligible")] = "Unknown"
    rec[names.index("Start")] = "Unknown"
    rec[names.index("State")] = "CANCELLED by 1000"
    lines[6] = US.join(rec)
    p.write_text("\n".join(lines) + "\n")
    assert backfill_with(lambda fn: fn(con), cfg, since, now=NOW).status == "ok"
    assert con.execute("SELECT state FROM jobs WHERE job_id_raw = 6").fetchall() == [("CANCELLED",)]
    (by_id,) = [a for a in calls() if _arg(a, "--jobs")]
    assert _arg(by_id, "--jobs") == "6"


def test_a_killed_history_import_resumes_from_its_last_window(con, env, tmp_path):
    cfg, _, calls, monkeypatch = env
    cfg = cfg.with_overrides(collect={"sacct_target_rows": 200})
    since = NOW - timedelta(days=120)
    n = history(tmp_path, monkeypatch, 120, 4, since)
    monkeypatch.setenv("FAKE_SACCT_FAIL_ON_CALL", "3")
    first = backfill_with(lambda fn: fn(con), cfg, since, now=NOW)
    assert first.status == "error"
    reached = get_watermark(con, cfg.cluster, backfill_key("sacct", since))
    assert since < reached < NOW
    assert get_watermark(con, cfg.cluster, "sacct") is None  # live collection has not started
    monkeypatch.delenv("FAKE_SACCT_FAIL_ON_CALL")
    done = len(calls())
    again = backfill_with(lambda fn: fn(con), cfg, since, now=NOW)
    assert again.status == "ok"
    assert _arg(calls()[done], "--starttime") == reached.strftime("%Y-%m-%dT%H:%M:%S")
    assert con.execute("SELECT count(*), count(DISTINCT job_id_raw) FROM jobs").fetchone() == (n, n)


def test_importing_older_history_leaves_live_collection_where_it_is(con, env, tmp_path):
    cfg, _, calls, monkeypatch = env
    since = NOW - timedelta(days=30)
    history(tmp_path, monkeypatch, 30, 2, since)
    live = NOW - timedelta(days=10)
    con.execute(
        "INSERT INTO watermarks (cluster, collector, position) VALUES (?, 'sacct', ?)", [cfg.cluster, live]
    )
    assert backfill_with(lambda fn: fn(con), cfg, since, now=NOW).status == "ok"
    assert _arg(calls()[-1], "--endtime") == live.strftime("%Y-%m-%dT%H:%M:%S")
    assert get_watermark(con, cfg.cluster, "sacct") == live
    # days 0-19: day 20's first job is submitted at the live watermark itself, live collection's to read
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2 * 20


def test_collect_sacct_alone_asks_squeue_for_pending_jobs(con, env, tmp_path):
    """No squeue snapshot stored: held, dependent and --begin jobs are found through slurmctld's own list."""
    cfg, set_output, calls, monkeypatch = env
    set_output(output())
    set_output(
        output(job("91", "PENDING"), job("92", "PENDING")), name="jobs.txt", var="FAKE_SACCT_JOBS_OUTPUT"
    )
    (tmp_path / "squeue.txt").write_text("91\n92\n")
    monkeypatch.setenv("FAKE_SQUEUE_OUTPUT", str(tmp_path / "squeue.txt"))
    monkeypatch.setenv("FAKE_SQUEUE_LOG", str(tmp_path / "squeue.log"))
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert out.status == "ok" and out.rows == 2
    (sq,) = [json.loads(line)["argv"] for line in (tmp_path / "squeue.log").read_text().splitlines()]
    assert "--states=PENDING" in sq and "--format=%A" in sq
    by_id = [a for a in calls() if _arg(a, "--jobs")]
    assert sorted(_arg(by_id[0], "--jobs").split(",")) == ["91", "92"]


def test_an_unreachable_squeue_only_narrows_the_by_id_lookup(con, env, tmp_path):
    cfg, set_output, calls, monkeypatch = env
    set_output(output(job("1", "COMPLETED", start=SUB, end=SUB)))
    monkeypatch.setenv("FAKE_SQUEUE_MODE", "fail")
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert out.status == "ok" and out.rows == 1


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
    order = [c.kind for c in COLLECTORS if not c.replaces]  # slurm.source = "cli": no slurmrestd source
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


def test_live_rows_of_another_cluster_warn_naming_both(con, env, tmp_path):
    """A real 22.05 sacct (ClusterName=slurmbed) collected with the configured cluster left at `default`:
    the rows keep Slurm's Cluster column, and the run says so, in the outcome, collector_runs and stderr."""
    cfg, set_output, _calls, _ = env
    set_output((REAL / "sacct_final.txt").read_bytes())
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert out.status == "ok" and out.rows > 0
    assert out.warning == (
        "rows name cluster 'slurmbed' (the input's own Cluster column), not the configured cluster 'default'"
        " (--cluster or cluster.name): they are stored under 'slurmbed'"
    )
    assert con.execute("SELECT DISTINCT cluster FROM jobs").fetchall() == [("slurmbed",)]
    assert con.execute("SELECT cluster, status, warning FROM collector_runs").fetchall() == [
        ("default", "ok", out.warning)
    ]
    # the same through the command line: one warning line on stderr, exit 0
    from click.testing import CliRunner

    from slurmscope.cli import main

    conf = tmp_path / "c.toml"
    conf.write_text(f'[slurm]\nbin_dir = "{FAKES}"\n')
    result = CliRunner().invoke(
        main, ["--config", str(conf), "--db", str(tmp_path / "cli.duckdb"), "collect", "sacct", "--once"]
    )
    assert result.exit_code == 0, result.output
    assert f"sacct: warning: {out.warning}" in result.stderr.splitlines()
    [quiet] = collect(con, cfg.with_overrides(cluster={"name": "slurmbed"}), "sacct", now=NOW)
    assert (quiet.status, quiet.rows, quiet.warning) == ("ok", out.rows, None)
