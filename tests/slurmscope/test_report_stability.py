"""A month's report does not change when the pipelines run again after the month has ended.

A simulated cluster runs from 27 November to 3 December. The database is first put back to what the
collectors had stored at midnight on 1 December (sacct as it showed each attempt then: pending, running or
ended; no snapshot, sample or event after that instant), the pipelines run at that instant and the November
report is written. Then, as on a real cluster, sacct's later records arrive (the attempts running at midnight
end, December's attempts are submitted, start and end, each row stored when it changed) with the later
snapshots, and the pipelines run again incrementally two days later (the month still open) and six days later
(the month closed and frozen). Every CSV and every HTML table of the November report must be identical.
"""

from __future__ import annotations

import io
import shutil
from datetime import UTC, datetime, timedelta

import pytest
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.report import build_report
from tests.htmltables import tables

START = datetime(2026, 11, 27, tzinfo=UTC)
MONTH_END = datetime(2026, 12, 1, tzinfo=UTC)

# sacct as it showed each attempt at $t, stored when it last changed before $t (as in
# tests/pipelines/test_runner_incremental.py).
AS_SEEN_AT = """
INSERT INTO jobs SELECT * REPLACE (
    CASE WHEN end_time <= $t THEN state WHEN start_time <= $t THEN 'RUNNING' ELSE 'PENDING' END AS state,
    CASE WHEN start_time <= $t THEN start_time END AS start_time,
    CASE WHEN end_time <= $t THEN end_time END AS end_time,
    CASE WHEN end_time <= $t THEN elapsed_seconds WHEN start_time <= $t THEN epoch($t) - epoch(start_time)
         ELSE 0 END AS elapsed_seconds,
    CASE WHEN end_time <= $t THEN end_time WHEN start_time <= $t THEN start_time ELSE submit_time END
        AS ingested_at)
FROM jobs_final WHERE submit_time <= $t"""

# Raw tables at the month's end: what a collector could not have stored yet is removed; an interval still
# open then is open.
AT_MONTH_END = [
    "DELETE FROM node_states WHERE snapshot_time > $t",
    "DELETE FROM pending_jobs WHERE snapshot_time > $t",
    "DELETE FROM shares WHERE snapshot_time > $t",
    "DELETE FROM sched_stats WHERE snapshot_time > $t",
    "DELETE FROM gpu_samples WHERE minute >= $t",
    "DELETE FROM gpu_events WHERE event_time > $t",
    "DELETE FROM gpu_jobs WHERE interval_start >= $t",
    "UPDATE gpu_jobs SET interval_end = NULL WHERE interval_end > $t",
    "DELETE FROM node_events WHERE time_start > $t",
    "UPDATE node_events SET time_end = NULL WHERE time_end > $t",
]
RAW = ["node_states", "pending_jobs", "shares", "sched_stats", "gpu_samples", "gpu_events", "gpu_jobs"]
RAW += ["node_events"]
MARTS_AND_RUNS = """
SELECT table_name FROM information_schema.tables
WHERE table_name LIKE 'mart\\_%' ESCAPE '\\' AND table_type = 'BASE TABLE' OR table_name = 'pipeline_runs'"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    from slurmscope.demo import Progress, run_demo

    base = tmp_path_factory.mktemp("stability")
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "simcluster"})
    run_demo(
        cfg,
        str(base / "sim.duckdb"),
        gpus=32,
        days=6,
        seed=9,
        port=0,
        out_dir=base / "demo",
        serve=False,
        progress=Progress(stream=io.StringIO()),
        sim_options={"start": int(START.timestamp()), "telemetry_days": 4.0},
    )
    return base, cfg


def _report(con, cfg, out) -> dict[str, object]:
    build_report(con, cfg, month="2026-11", out_dir=out, formats=["html", "csv"])
    got: dict[str, object] = {p.name: p.read_text() for p in sorted(out.glob("*.csv"))}
    for i, t in enumerate(tables((out / "report.html").read_text())):
        got[f"table {i} in {t.section}"] = t.rows
    return got


@pytest.mark.slow
def test_the_month_is_the_same_when_the_pipelines_run_again_after_it_ended(simulated, tmp_path):
    base, cfg = simulated
    db = tmp_path / "replay.duckdb"
    shutil.copy(base / "sim.duckdb", db)
    con = connect(db)
    for table in ["jobs", *RAW]:
        con.execute(f"CREATE TABLE {table}_final AS SELECT * FROM {table}")
    for (table,) in con.execute(MARTS_AND_RUNS).fetchall():
        con.execute(f"DELETE FROM {table}")

    def jobs_as_seen_at(t: datetime) -> None:
        con.execute("DELETE FROM jobs")
        con.execute(AS_SEEN_AT, {"t": t})

    jobs_as_seen_at(MONTH_END)
    for sql in AT_MONTH_END:
        con.execute(sql, {"t": MONTH_END})
    running = con.execute("SELECT count(*) FROM jobs WHERE state = 'RUNNING' AND gpus > 0").fetchone()[0]
    assert running > 0  # attempts hold GPUs across the month's end: the case that must not move November
    failing_later = con.execute(
        "SELECT count(*) FROM jobs_final WHERE gpus > 0 AND start_time < $t AND end_time > $t"
        " AND state IN ('FAILED', 'NODE_FAIL', 'TIMEOUT', 'OUT_OF_MEMORY')",
        {"t": MONTH_END},
    ).fetchone()[0]
    assert failing_later > 0  # and one of them fails in December: November's waste must not grow
    results = run_pipelines(con, cfg, full=True, now=MONTH_END)
    assert all(v >= 0 for v in results.values()), results
    at_month_end = _report(con, cfg, tmp_path / "at-month-end")
    assert at_month_end["reconciliation.csv"].count("\n") > 20  # the block is there to compare

    for table in RAW:
        con.execute(f"DELETE FROM {table}")
        con.execute(f"INSERT INTO {table} SELECT * FROM {table}_final")
    later_records = 0
    for days, name in ((2, "open"), (6, "frozen")):
        now = MONTH_END + timedelta(days=days)
        jobs_as_seen_at(now)
        later_records = con.execute(
            "SELECT count(*) FROM jobs WHERE ingested_at > ?", [MONTH_END]
        ).fetchone()[0]
        results = run_pipelines(con, cfg, now=now)  # incremental, from the last run
        assert all(v >= 0 for v in results.values()), results
        again = _report(con, cfg, tmp_path / name)
        assert set(again) == set(at_month_end)
        for key, value in at_month_end.items():
            assert again[key] == value, f"{key} changed when the pipelines ran {days} days after the month"
    assert later_records > 0
    frozen = con.execute(
        "SELECT bool_and(frozen) FROM mart_cost_monthly WHERE month = '2026-11-01'"
    ).fetchone()
    assert frozen[0] is True  # the last run saw the month closed (billing.close_after_days = 5)
    # December has usage of its own, from the late records and the attempts that ran across midnight.
    assert (
        con.execute("SELECT sum(gpu_seconds) FROM mart_cost_daily WHERE day >= '2026-12-01'").fetchone()[0]
        > 0
    )
    con.close()
