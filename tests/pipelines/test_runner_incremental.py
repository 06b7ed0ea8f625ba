"""Narrow incremental runs of every pipeline against a full rebuild, on the demo's simulated history.

The runner deletes a mart's rows from the window's first day (or instant) on and inserts what the pipeline
computed; an incremental run is only right if every pipeline recomputes exactly the rows the runner deletes.
Tests elsewhere mostly insert jobs with `ingested_at` = the wall clock, after any replayed `now`, so every job
looks late and the window falls back to the whole history. Here the `jobs` table is replayed as sacct showed
it at each run (pending, running, ended; `ingested_at` = the last change the collector saw), so the runs every
six hours cover only the lookback and the start of the attempts that ended since the run before.
"""

from __future__ import annotations

import math
import shutil
from datetime import UTC, datetime, timedelta

import pytest
from slurmscope.pipelines import runner

from slurmscope.config import load_config
from slurmscope.db import connect
from tests.demo_fixture import DEMO_DAYS

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


def _marts(con) -> dict[str, list[tuple]]:
    out = {}
    for module in runner.PIPELINES:
        for table in module.MART_TABLES:
            out[table] = con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()  # noqa: S608 - mart names from the pipeline registry
    return out


def _same(a: tuple, b: tuple) -> bool:
    """Equal, floats to 1e-9 relative: a sum over another window adds in another order."""
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
        if isinstance(x, float) and isinstance(y, float)
        else x == y
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.slow
def test_narrow_incremental_runs_equal_a_full_rebuild(demo_run, tmp_path):  # noqa: F811
    db = tmp_path / "demo.duckdb"
    shutil.copy(demo_run.db_path, db)
    con = connect(db)
    now = con.execute("SELECT max(run_at) FROM pipeline_runs").fetchone()[0].astimezone(UTC)
    con.execute("CREATE TABLE jobs_final AS SELECT * FROM jobs")
    con.execute("DELETE FROM pipeline_runs")
    # a one-hour look-back and margin: on a three-day history the default two days would cover nearly
    # everything for reliability; the demo's recorded files (spool, events) were there before the first run:
    # only jobs are replayed
    cfg = load_config(None, env={}).with_overrides(
        cluster={"name": "simcluster"},
        pipelines={"incremental_lookback_seconds": 3600, "incremental_margin_seconds": 3600},
    )
    con.execute("UPDATE collector_runs SET finished_at = TIMESTAMPTZ '1970-01-01 00:00:00+00'")

    def run(t: datetime, full: bool = False) -> None:
        con.execute("DELETE FROM jobs")
        con.execute(AS_SEEN_AT, {"t": t})
        results = runner.run_pipelines(con, cfg, full=full, now=t)
        assert all(v >= 0 for v in results.values()), results

    first = now - timedelta(days=DEMO_DAYS - 1)
    run(first, full=True)
    t = first
    while t < now:
        t = min(t + timedelta(hours=6), now)
        run(t)
    narrow = con.execute(
        "SELECT DISTINCT pipeline FROM pipeline_runs WHERE run_at > ? AND window_start > ?", [first, first]
    ).fetchall()
    incremental = _marts(con)
    run(now, full=True)
    full = _marts(con)
    assert sum(map(len, full.values())) > 1000
    for table, rows in full.items():
        assert len(incremental[table]) == len(rows), table
        bad = [(a, b) for a, b in zip(incremental[table], rows, strict=True) if not _same(a, b)]
        assert not bad, (table, bad[:3])
    # not vacuous: every pipeline ran on a part of the history (backfill too, now that an attempt's GPU-hours
    # go to the days it ran: it no longer rebuilds from the start day of the oldest running attempt)
    assert sorted(p for (p,) in narrow) == sorted(runner.pipeline_names())
