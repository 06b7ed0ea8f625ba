"""Incremental fair-share (stored day table + the window's attempts) against a full recomputation.

A full run reads every attempt of the history; an incremental run reads only the attempts that overlap its
window and the day table (mart_fairshare_daily) stored by earlier runs. Both must write the same rows. The
reference is the full run over the same database at the same `now`, so the expected values are computed
independently of the incremental path (every attempt re-read and re-cut into days).
"""

from __future__ import annotations

import math
import shutil
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.db import connect

MARTS = {  # mart -> its unique key
    "mart_fairshare": ["cluster", "as_of", "account", "user", "source"],
    "mart_fairshare_drift": ["cluster", "day", "account"],
    "mart_fairshare_daily": ["cluster", "day", "account", "user"],
    "mart_fairshare_submits": ["cluster", "day", "submit_day", "account", "user"],
}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def frame(con, sql: str, params: list | None = None) -> pl.DataFrame:
    con.complete()  # an earlier execute()'s result would block the relation API
    return pl.from_arrow(con.sql(sql, params=params).to_arrow_table())


def marts(con) -> dict[str, pl.DataFrame]:
    return {m: frame(con, f"SELECT * FROM {m}").sort(key) for m, key in MARTS.items()}


def assert_same_marts(got: dict[str, pl.DataFrame], want: dict[str, pl.DataFrame]) -> None:
    for m in MARTS:
        assert got[m].height == want[m].height, (m, got[m].height, want[m].height)
        assert_frame_equal(got[m], want[m], check_exact=False, rel_tol=1e-9, abs_tol=1e-6)


def add_job(
    con,
    job_id: int,
    account: str,
    user: str,
    submit: datetime,
    start: datetime | None,
    end: datetime | None,
    *,
    billing: float = 2.0,
    state: str = "COMPLETED",
    ingested: datetime | None = None,
) -> None:
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, start_time, end_time, account, "user",'
        " state, billing, cpus, gpus, ingested_at) VALUES ('default', ?, ?, ?, ?, ?, ?, ?, ?, ?, 4, 1, ?)",
        [str(job_id), job_id, submit, start, end, account, user, state, billing, ingested or submit],
    )


def add_shares(con, at: datetime) -> None:
    """One sshare snapshot of a fixed tree (the tree must not change: drift rows of earlier days keep the
    tree of the run that wrote them, a full run would use the latest for every day)."""
    rows = [
        ("root", "", None, None),
        ("a", "", "root", 3),
        ("b", "", "root", 1),
        ("a", "u1", "a", 1),
        ("a", "u2", "a", 2),
        ("b", "u3", "b", 1),
        ("b", "u4", "b", 1),
    ]
    for account, user, parent, shares in rows:
        con.execute(
            'INSERT INTO shares (cluster, snapshot_time, account, "user", parent, raw_shares, raw_usage,'
            " effectv_usage, fairshare) VALUES ('default', ?, ?, ?, ?, ?, 100, 0.5, 0.5)",
            [at, account, user, parent, shares],
        )


def seed(con, t0: datetime, days: int, *, shares: bool) -> None:
    """Attempts of 4 users over `days` days: short and multi-day ones crossing local midnights, one still
    running at the end, one in a final state without End (never charged), billing 1 to 8."""
    users = [("a", "u1"), ("a", "u2"), ("b", "u3"), ("b", "u4")]
    k = 0
    for d in range(days):
        for h in range(0, 24, 5):
            account, user = users[(d * 7 + h) % 4]
            submit = t0 + timedelta(days=d, hours=h, minutes=13 * (k % 5))
            start = submit + timedelta(minutes=7 * (k % 3))
            run = timedelta(hours=1 + (k * 37) % 50, minutes=k % 60)
            add_job(con, 1000 + k, account, user, submit, start, start + run, billing=float(1 + k % 8))
            k += 1
    add_job(
        con,
        9001,
        "a",
        "u2",
        t0 + timedelta(days=2),
        t0 + timedelta(days=2, hours=1),
        None,
        billing=3.0,
        state="RUNNING",
    )
    add_job(
        con,
        9002,
        "b",
        "u4",
        t0 + timedelta(days=3),
        t0 + timedelta(days=3, hours=2),
        None,
        billing=5.0,
        state="COMPLETED",
    )
    # pending from day 2 until test_..._late_job starts it (the collector's upsert keeps its ingested_at)
    add_job(con, 9003, "b", "u3", t0 + timedelta(days=2), None, None, billing=4.0, state="PENDING")
    if shares:
        for d in (1, 4, 8, 9):
            add_shares(con, t0 + timedelta(days=d, hours=11, minutes=30))


def cfg(tz: str):
    return load_config(None, env={}).with_overrides(
        billing={"timezone": tz}, fairshare={"decay_half_life_seconds": 2 * 86400}
    )


def incremental_then_full(
    con, c, full_at: datetime, steps: list[datetime], late, started=None
) -> tuple[dict, dict, list]:
    """Full run at `full_at`, incremental runs at each of `steps` (`late(con)` after the second one,
    `started(con)` after the third), then the marts; then a full run at the last step over the same
    database, and its marts. Also returns the window start of each incremental run."""
    run_pipelines(con, c, full=True, now=full_at, only=["fairshare"])
    windows = []
    for i, now in enumerate(steps):
        got = run_pipelines(con, c, now=now, only=["fairshare"])
        assert all(v >= 0 for v in got.values()), got
        windows.append(
            con.execute(
                "SELECT window_start FROM pipeline_runs WHERE pipeline = 'fairshare' AND run_at = ?", [now]
            ).fetchone()[0]
        )
        if i == 1:
            late(con)
        if i == 2 and started is not None:
            started(con)
    incremental = marts(con)
    run_pipelines(con, c, full=True, now=steps[-1], only=["fairshare"])
    return incremental, marts(con), windows


@pytest.mark.parametrize(("tz", "shares"), [("Europe/Berlin", True), ("UTC", False)])
def test_incremental_days_equal_a_full_run_with_a_late_job(con, tz, shares):
    # 20 March .. 1 April 2026: Berlin switches to summer time on 29 March (a 23-hour local day).
    t0 = ts("2026-03-20 03:00")
    seed(con, t0, days=12, shares=shares)
    runs = [
        ts("2026-03-27 09:00"),
        ts("2026-03-28 00:00"),
        ts("2026-03-29 17:45"),
        ts("2026-03-30 06:00"),
        ts("2026-03-31 23:00"),
    ]

    def late(c):
        # Started on 21 March, six days before the full run, reaches the database after the second run.
        add_job(
            c,
            7777,
            "b",
            "u3",
            ts("2026-03-21 08:00"),
            ts("2026-03-21 09:00"),
            ts("2026-03-22 04:00"),
            billing=6.0,
            ingested=runs[1] + timedelta(minutes=5),
        )

    def started(c):
        # The attempt submitted on 22 March and pending since starts after the third run: drift's demand
        # counts it on its submit day, a week before the window.
        c.execute(
            "UPDATE jobs SET start_time = ?, end_time = ?, state = 'COMPLETED' WHERE job_id_raw = 9003",
            [ts("2026-03-29 20:00"), ts("2026-03-30 02:00")],
        )

    incremental, full, windows = incremental_then_full(
        con, cfg(tz), ts("2026-03-26 14:00"), runs, late, started
    )
    assert_same_marts(incremental, full)
    # the runs were incremental: each rewrote the days from its window on (the previous run minus the
    # 2-day lookback, at local midnight) and the stored days carried the rest ...
    assert windows[-1] > ts("2026-03-27 12:00") and windows[0] > ts("2026-03-23 12:00")
    # ... and the run after the late record went back to its day (21 March, local midnight)
    assert ts("2026-03-20 12:00") < windows[2] <= ts("2026-03-21 00:00")
    # the late job is in the marts: u3's undecayed charge on 21 March includes billing 6 from 09:00 UTC to
    # the local midnight (14 h in Berlin, 15 h in UTC)
    day21 = (pl.col("user") == "u3") & (pl.col("day") == datetime(2026, 3, 21).date())
    assert incremental["mart_fairshare_daily"].filter(day21)["raw"].item() >= 6.0 * 14 * 3600


def test_incremental_window_reads_only_recent_attempts(con, monkeypatch):
    """The point of the day table: an incremental run's jobs frame holds the window's attempts, not the
    history (checked on the frames the pipeline receives)."""
    from slurmscope.pipelines import fairshare

    t0 = ts("2026-03-01 03:00")
    seed(con, t0, days=20, shares=False)
    c = cfg("UTC")
    run_pipelines(con, c, full=True, now=ts("2026-03-20 00:00"), only=["fairshare"])
    seen: dict[str, int] = {}
    real = fairshare.compute

    def spy(frames, params):
        seen["jobs"] = frames["jobs"].collect().height
        seen["stored"] = frames["fairshare_daily"].collect().height
        return real(frames, params)

    monkeypatch.setattr(fairshare, "compute", spy)
    run_pipelines(con, c, now=ts("2026-03-21 00:00"), only=["fairshare"])
    total = con.execute("SELECT count(*) FROM jobs WHERE start_time IS NOT NULL").fetchone()[0]
    # window: 19 March 00:00 (last run minus the 10-minute margin, from midnight) on; attempts run at most
    # ~2 days
    in_window = con.execute(
        "SELECT count(*) FROM jobs WHERE start_time IS NOT NULL AND (end_time IS NULL"
        " OR end_time > TIMESTAMPTZ '2026-03-19 00:00:00+00' OR start_time >= TIMESTAMPTZ '2026-03-19 00:00:00+00')"
    ).fetchone()[0]
    assert seen["jobs"] == in_window < total / 2
    assert seen["stored"] > 0


def test_migrated_database_without_stored_days_recomputes_everything(con):
    """A database whose last fair-share run predates mart_fairshare_daily has no stored days: the next
    incremental run must not treat the history as empty (it widens its window to 1970)."""
    t0 = ts("2026-03-01 03:00")
    seed(con, t0, days=10, shares=False)
    c = cfg("UTC")
    run_pipelines(con, c, full=True, now=ts("2026-03-09 00:00"), only=["fairshare"])
    con.execute("DELETE FROM mart_fairshare_daily")
    con.execute("DELETE FROM mart_fairshare_submits")
    run_pipelines(con, c, now=ts("2026-03-10 00:00"), only=["fairshare"])
    incremental = marts(con)
    run_pipelines(con, c, full=True, now=ts("2026-03-10 00:00"), only=["fairshare"])
    assert_same_marts(incremental, marts(con))


def test_since_after_the_last_run_still_sees_the_days_in_between(con):
    """`--since` later than the last run: the days between were never stored complete; the window starts at
    the last run's day instead, so the marts still equal a full run."""
    t0 = ts("2026-03-01 03:00")
    seed(con, t0, days=12, shares=False)
    c = cfg("UTC")
    run_pipelines(con, c, full=True, now=ts("2026-03-05 12:00"), only=["fairshare"])
    run_pipelines(con, c, since="2026-03-09", now=ts("2026-03-11 00:00"), only=["fairshare"])
    incremental = marts(con)
    run_pipelines(con, c, full=True, now=ts("2026-03-11 00:00"), only=["fairshare"])
    assert_same_marts(incremental, marts(con))


def test_demo_history_incremental_equals_full(demo_run, tmp_path):
    """The shared demo (simulated Slurm, sshare snapshots, requeues): full up to a day, then incremental days
    with one attempt withheld and delivered late, against a full run at the end."""
    db = tmp_path / "demo.duckdb"
    shutil.copy(demo_run.db_path, db)
    con = connect(db)
    try:
        c = load_config(None, env={}).with_overrides(
            cluster={"name": "simcluster"}, pipelines={"incremental_margin_seconds": 3600}
        )
        first, last = con.execute(
            "SELECT min(start_time), max(coalesce(end_time, start_time)) FROM jobs WHERE start_time IS NOT NULL"
        ).fetchone()
        first, last = first.astimezone(UTC), last.astimezone(UTC)
        # ingested when submitted (as a live collector would), so no run sees a record as late but ours; the
        # demo's recorded files (spool, events) were there before the first run: only jobs are replayed
        con.execute("UPDATE jobs SET ingested_at = submit_time")
        con.execute("UPDATE collector_runs SET finished_at = TIMESTAMPTZ '1970-01-01 00:00:00+00'")
        span = (last - first).total_seconds()
        full_at = first + timedelta(seconds=span * 0.4)
        steps = [first + timedelta(seconds=span * f) for f in (0.55, 0.7, 0.85)] + [last + timedelta(hours=1)]
        withheld = frame(
            con,
            "SELECT * FROM jobs WHERE start_time IS NOT NULL AND end_time IS NOT NULL AND end_time < ?"
            " ORDER BY (end_time - start_time) * coalesce(billing, cpus) DESC LIMIT 1",
            [full_at],
        )
        assert withheld.height == 1
        key = withheld.select("cluster", "job_id", "submit_time").row(0)
        con.execute("DELETE FROM jobs WHERE cluster = ? AND job_id = ? AND submit_time = ?", list(key))

        def late(c_):
            arrived = pl.lit(steps[1] + timedelta(minutes=5), dtype=pl.Datetime("us", "UTC"))
            c_.complete()
            c_.register("_late", withheld.with_columns(ingested_at=arrived).to_arrow())
            c_.execute("INSERT INTO jobs BY NAME SELECT * FROM _late")
            c_.unregister("_late")

        for m in MARTS:
            con.execute(f"DELETE FROM {m}")
        con.execute("DELETE FROM pipeline_runs WHERE pipeline = 'fairshare'")
        incremental, full, windows = incremental_then_full(con, c, full_at, steps, late)
        assert windows[1] > first and windows[3] > full_at  # incremental, not rebuilt from the first day
        assert windows[2] <= withheld["start_time"].item()  # the run after the late record went back to it
        assert full["mart_fairshare"].filter(pl.col("source") == "computed").height > 0
        assert full["mart_fairshare"].filter(pl.col("source") == "sshare").height > 0
        assert_same_marts(incremental, full)
        assert not math.isnan(full["mart_fairshare_daily"]["charge"].sum())
    finally:
        con.close()
