"""The runner: idempotent windows, incremental = full, late records, failures isolated."""

from __future__ import annotations

import types
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from slurmscope.pipelines import runner
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config

MARTS = [
    "mart_cost_daily",
    "mart_capacity_daily",
    "mart_cost_monthly",
    "mart_usage_counters",
    "mart_job_outcomes_daily",
    "mart_requeues_daily",
    "mart_node_reliability",
    "mart_fault_impact",
    "mart_goodput",
    "mart_backfill_daily",
    "mart_sched_deltas",
    "mart_occupancy",
    "mart_wait_times",
    "mart_job_outcomes_node_daily",
    "mart_cost_efficiency_daily",
    "mart_cost_rates_daily",
    "mart_cost_reconciliation_daily",
    "mart_cost_reconciliation_monthly",
    "mart_cost_waste_daily",
]
SOURCES = ["cost", "reliability", "backfill"]


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def cfg(**billing):
    return load_config(env={}).with_overrides(billing={"timezone": "Europe/Berlin", **billing})


def add_job(
    con,
    job_id,
    submit,
    start,
    end,
    *,
    gpus=1,
    state="COMPLETED",
    account="a",
    partition="gpu",
    sched_by="main",
    node_list="n1",
):
    con.execute(
        'INSERT OR REPLACE INTO jobs (cluster, job_id, job_id_raw, submit_time, eligible_time, account, "user",'
        ' "partition", qos, state, start_time, end_time, elapsed_seconds, gpus, gpu_type, sched_by, nodes, node_list)'
        " VALUES ('default', ?, ?, ?, ?, ?, 'u', ?, 'normal', ?, ?, ?, ?, ?, 'h100', ?, 1, ?)",
        [
            str(job_id),
            job_id,
            submit,
            submit,
            account,
            partition,
            state,
            start,
            end,
            None if end is None or start is None else int((end - start).total_seconds()),
            gpus,
            sched_by,
            node_list,
        ],
    )


def seed(con):
    t = ts("2026-03-01 00:00")
    for i in range(30):
        s = t + timedelta(hours=7 * i)
        add_job(
            con,
            100 + i,
            s - timedelta(minutes=20 * (i % 4)),
            s,
            s + timedelta(hours=3 + i % 5),
            gpus=1 + i % 4,
            state=["COMPLETED", "FAILED", "NODE_FAIL", "TIMEOUT"][i % 4],
            account=["a", "b", "c"][i % 3],
            sched_by=["main", "backfill"][i % 2],
            node_list=f"n[{i % 3}-3]",
        )
    add_job(con, 200, ts("2026-03-09 00:00"), ts("2026-03-09 01:00"), None, gpus=8, state="RUNNING")
    hours = range(0, 24 * 10, 2)
    states = pl.DataFrame(
        {
            "cluster": "default",
            "snapshot_time": [t + timedelta(hours=h) for h in hours],
            "node": "n1",
            "partition": "gpu",
            "state": ["DOWN" if h % 48 == 10 else "MIXED" for h in hours],
            "state_flags": "",
            "gpus_total": 8,
            "gpus_used": [h % 9 for h in hours],
            "gpu_type": "h100",
        }
    )
    con.register("_states", states.to_arrow())
    con.execute("INSERT INTO node_states BY NAME SELECT * FROM _states")
    con.unregister("_states")
    con.execute(
        "INSERT INTO node_events VALUES ('default', 'n2', ?, ?, 'DOWN', 'xid', NULL, 'node', NULL)",
        [t + timedelta(hours=7 * 2 + 4, minutes=59), t + timedelta(hours=30)],
    )
    for k in range(20):
        con.execute(
            "INSERT INTO sched_stats (cluster, snapshot_time, data_since, jobs_submitted, bf_total_cycles,"
            " bf_backfilled_jobs) VALUES ('default', ?, ?, ?, ?, ?)",
            [t + timedelta(hours=6 * k), t + timedelta(days=(6 * k) // 24), 10 * (k % 4), k % 4, k],
        )


def snapshot(con) -> dict[str, list]:
    return {m: con.execute(f"SELECT * FROM {m} ORDER BY ALL").fetchall() for m in MARTS}


KEYS = {  # the unique key of each mart (documented in the migrations; no index enforces it)
    "mart_cost_daily": 'day, account, "user", "partition", qos, gpu_model',
    "mart_capacity_daily": 'day, "partition", gpu_model',
    "mart_cost_monthly": 'month, account, "user", version',
    "mart_usage_counters": 'account, "partition", gpu_model',
    "mart_job_outcomes_daily": 'day, "partition", account, state',
    "mart_requeues_daily": 'day, "partition", account',
    "mart_node_reliability": "node",
    "mart_fault_impact": "fault_time, node, fault_source, fault_kind, job_id_raw, submit_time",
    "mart_goodput": '"partition", nodes',
    "mart_backfill_daily": 'day, "partition", sched_by',
    "mart_sched_deltas": "snapshot_time",
    "mart_occupancy": 'bucket_start, "partition", gpu_model',
    "mart_wait_times": 'day, "partition", account, gpu_class, gpu_model',
    "mart_job_outcomes_node_daily": "day, node, state",
    "mart_cost_efficiency_daily": "day, account",
    "mart_cost_rates_daily": 'day, "partition", gpu_model',
    "mart_cost_reconciliation_daily": "day",
    "mart_cost_reconciliation_monthly": "month",
    "mart_cost_waste_daily": "day, account",
}


def assert_unique_keys(con):
    for mart, key in KEYS.items():
        total, distinct = con.execute(
            f"SELECT count(*), count(DISTINCT (cluster, {key})) FROM {mart}"
        ).fetchone()
        assert total == distinct, mart


def test_pipelines_run_in_dependency_order():
    """drift reads mart_fairshare_daily, so fair-share runs first; every pipeline is listed once."""
    names = runner.pipeline_names()
    assert len(names) == len(set(names)) == 8
    assert names.index("fairshare") < names.index("drift")


def test_running_twice_changes_nothing(con):
    seed(con)
    now = ts("2026-03-10 00:00")
    first = run_pipelines(con, cfg(), full=True, now=now, only=SOURCES)
    assert all(v >= 0 for v in first.values()), first
    assert first["mart_cost_daily"] > 0 and first["mart_occupancy"] > 0 and first["mart_fault_impact"] == 1
    before = snapshot(con)
    run_pipelines(con, cfg(), full=True, now=now, only=SOURCES)
    assert snapshot(con) == before
    run_pipelines(con, cfg(), since="2026-03-05", now=now, only=SOURCES)
    assert snapshot(con) == before
    run_pipelines(con, cfg(), now=now, only=SOURCES)  # incremental from the last run
    assert snapshot(con) == before
    assert_unique_keys(con)


def test_incremental_runs_equal_a_full_rebuild(con):
    seed(con)
    strip = {"mart_usage_counters": "updated_at", "mart_cost_monthly": "issued_at"}  # record the run time

    def marts():
        return {
            m: con.execute(
                f"SELECT * EXCLUDE ({strip[m]}) FROM {m} ORDER BY ALL"
                if m in strip
                else f"SELECT * FROM {m} ORDER BY ALL"
            ).fetchall()
            for m in MARTS
        }

    for day in (3, 6, 8, 10):
        run_pipelines(con, cfg(), now=ts(f"2026-03-{day:02d} 00:00"), only=SOURCES)
    incremental = marts()
    run_pipelines(con, cfg(), full=True, now=ts("2026-03-10 00:00"), only=SOURCES)
    full = marts()
    for mart in MARTS:
        assert incremental[mart] == full[mart], mart
    assert_unique_keys(con)


def test_late_record_is_picked_up_by_next_incremental_run(con):
    seed(con)
    run_pipelines(con, cfg(), now=ts("2026-03-10 00:00"), only=SOURCES)
    # A job that ended on 3 March (before the last run) reaches the database only now.
    add_job(
        con,
        999,
        ts("2026-03-03 10:00"),
        ts("2026-03-03 11:00"),
        ts("2026-03-03 13:00"),
        gpus=4,
        account="late",
        state="FAILED",
    )
    run_pipelines(con, cfg(), now=ts("2026-03-10 01:00"), only=SOURCES)
    q = "SELECT sum(gpu_seconds) FROM mart_cost_daily WHERE account = 'late'"
    assert con.execute(q).fetchone()[0] == 4 * 2 * 3600
    assert con.execute(
        "SELECT jobs, gpu_hours FROM mart_job_outcomes_daily WHERE account = 'late'"
    ).fetchall() == [(1, 8.0)]
    assert (
        con.execute("SELECT sum(jobs) FROM mart_backfill_daily WHERE day = DATE '2026-03-03'").fetchone()[0]
        == 5
    )


def test_a_late_job_widens_only_the_pipelines_that_read_jobs(con):
    seed(con)
    con.execute("UPDATE jobs SET ingested_at = ?", [ts("2026-03-09 12:00")])  # all seen before the first run
    both = ["reliability", "health"]
    run_pipelines(con, cfg(), now=ts("2026-03-10 00:00"), only=both)
    add_job(con, 999, ts("2026-03-03 10:00"), ts("2026-03-03 11:00"), ts("2026-03-03 13:00"), account="late")
    run_pipelines(con, cfg(), now=ts("2026-03-10 01:00"), only=both)
    starts = dict(
        con.execute(
            "SELECT pipeline, window_start FROM pipeline_runs WHERE run_at = ?", [ts("2026-03-10 01:00")]
        ).fetchall()
    )
    # reliability goes back to the late attempt's billing day (Berlin midnight); health, which reads no jobs,
    # keeps its margin: 10 minutes before the last run (its marts are of instants, not of billing days)
    assert starts["reliability"].astimezone(UTC) == ts("2026-03-02 23:00")
    assert starts["health"].astimezone(UTC) == ts("2026-03-09 23:50")


def test_failing_pipeline_rolls_back_its_marts(con, monkeypatch):
    seed(con)
    run_pipelines(con, cfg(), full=True, now=ts("2026-03-10 00:00"), only=["cost"])
    before = con.execute("SELECT * FROM mart_cost_daily ORDER BY ALL").fetchall()
    broken = types.ModuleType("slurmscope.pipelines.broken")
    broken.NAME = "broken"
    broken.MART_TABLES = {"mart_cost_daily": "day", "no_such_mart": None}
    broken.INPUTS = {}

    def compute(frames, params):
        import polars as pl

        return {"mart_cost_daily": pl.LazyFrame(), "no_such_mart": pl.LazyFrame({"x": [1]})}

    broken.compute = compute
    monkeypatch.setattr(runner, "PIPELINES", (broken,))
    assert run_pipelines(con, cfg(), full=True, now=ts("2026-03-10 00:00")) == {"broken": -1}
    assert con.execute("SELECT * FROM mart_cost_daily ORDER BY ALL").fetchall() == before


def test_unknown_only_and_bad_since_raise(con):
    with pytest.raises(ValueError, match="unknown pipeline"):
        run_pipelines(con, cfg(), only=["nope"])
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        run_pipelines(con, cfg(), since="March", only=["cost"])


def test_cli_exits_non_zero_when_a_pipeline_fails(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from slurmscope.cli import main
    from slurmscope.db import connect

    db = str(tmp_path / "cli.duckdb")
    connect(db).close()  # pipelines run refuses a database that does not exist
    monkeypatch.setattr(runner, "PIPELINES", (runner.cost,))
    ok = CliRunner().invoke(main, ["--db", db, "pipelines", "run", "--full"], env={})
    assert ok.exit_code == 0, ok.output
    broken = types.ModuleType("broken")
    broken.NAME = "broken"
    broken.MART_TABLES = {"mart_cost_daily": "day"}
    broken.INPUTS = {}
    broken.compute = lambda frames, params: {}
    monkeypatch.setattr(runner, "PIPELINES", (runner.cost, broken))
    bad = CliRunner().invoke(main, ["--db", db, "pipelines", "run", "--full"], env={})
    assert bad.exit_code != 0 and "broken" in bad.output


def test_session_time_zone_does_not_change_the_marts(con):
    seed(con)
    now = ts("2026-03-10 00:00")
    run_pipelines(con, cfg(), full=True, now=now, only=SOURCES)
    before = snapshot(con)
    con.execute("SET TimeZone = 'America/Los_Angeles'")
    run_pipelines(con, cfg(), full=True, now=now, only=SOURCES)
    con.execute("SET TimeZone = 'UTC'")
    assert snapshot(con) == before


def test_full_rebuild_in_slices_equals_one_window(con):
    seed(con)
    now = ts("2026-03-10 00:00")
    strip = {"mart_usage_counters": "updated_at", "mart_cost_monthly": "issued_at"}

    def marts():
        return {
            m: con.execute(
                f"SELECT * EXCLUDE ({strip[m]}) FROM {m} ORDER BY ALL"
                if m in strip
                else f"SELECT * FROM {m} ORDER BY ALL"
            ).fetchall()
            for m in MARTS
        }

    run_pipelines(con, cfg(), full=True, now=now, only=SOURCES)
    whole = marts()
    sliced_cfg = cfg().with_overrides(pipelines={"full_slice_days": 2})
    res = run_pipelines(con, sliced_cfg, full=True, now=now, only=SOURCES)
    assert all(v >= 0 for v in res.values())
    runs = con.execute(
        "SELECT count(*) FROM pipeline_runs WHERE pipeline = 'cost' AND run_at < ?", [now]
    ).fetchone()
    assert runs[0] == 4  # slices ending 3, 5, 7, 9 March (Berlin midnights), then the last one at now
    assert marts() == whole


def test_late_end_of_a_stored_running_job_reaches_the_incremental_run(con):
    """A job stored as RUNNING whose End arrives days late (slurmdbd or the collector was away): the next
    incremental run must rewrite the days it was charged as running after it ended, though the window's
    lookback is shorter. Times are near the wall clock, because `ingested_at` is."""
    import time

    from slurmscope.collectors.base import upsert
    from slurmscope.collectors.sacct import TABLES

    from slurmscope.db import transaction

    t = datetime.now(UTC).replace(microsecond=0)
    add_job(
        con,
        1,
        t - timedelta(days=8, hours=1),
        t - timedelta(days=8),
        None,
        gpus=4,
        state="RUNNING",
        account="long",
    )
    add_job(con, 2, t - timedelta(days=6, hours=1), t - timedelta(days=6), t - timedelta(days=5), gpus=2)
    add_job(con, 3, t - timedelta(days=1, hours=1), t - timedelta(days=1), t - timedelta(hours=20), gpus=1)
    time.sleep(0.01)
    now0 = datetime.now(UTC)
    run_pipelines(con, cfg(), full=True, now=now0, only=["cost", "reliability"])
    stored = con.execute("SELECT submit_time FROM jobs WHERE job_id_raw = 1").fetchone()[0]
    late = pl.DataFrame(
        {
            "cluster": ["default"],
            "job_id": ["1"],
            "job_id_raw": [1],
            "submit_time": [stored],
            "state": ["COMPLETED"],
            "start_time": [t - timedelta(days=8)],
            "end_time": [t - timedelta(days=5)],
            "gpus": [4],
        },
        schema_overrides={
            "submit_time": pl.Datetime("us", "UTC"),
            "start_time": pl.Datetime("us", "UTC"),
            "end_time": pl.Datetime("us", "UTC"),
        },
    )
    with transaction(con):
        upsert(con, TABLES["jobs"], late)
    touched = con.execute("SELECT ingested_at FROM jobs WHERE job_id_raw = 1").fetchone()[0]
    assert touched > now0
    with transaction(con):  # the same record read again (the collection overlap) is no change
        upsert(con, TABLES["jobs"], late)
    assert con.execute("SELECT ingested_at FROM jobs WHERE job_id_raw = 1").fetchone()[0] == touched
    now1 = datetime.now(UTC)
    run_pipelines(con, cfg(), now=now1, only=["cost", "reliability"])  # incremental, 2-day lookback
    marts = ["mart_cost_daily", "mart_job_outcomes_daily"]
    incremental = {m: con.execute(f"SELECT * FROM {m} ORDER BY ALL").fetchall() for m in marts}
    run_pipelines(con, cfg(), full=True, now=now1, only=["cost", "reliability"])
    for m in marts:
        assert incremental[m] == con.execute(f"SELECT * FROM {m} ORDER BY ALL").fetchall(), m
    # 3 days x 4 GPUs from start to the late End, not 8 days as a job still running would have been charged
    charged = con.execute("SELECT sum(gpu_seconds) FROM mart_cost_daily WHERE account = 'long'").fetchone()[0]
    assert charged == 3 * 86400 * 4
