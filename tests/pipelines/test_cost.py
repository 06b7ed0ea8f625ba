"""Billing rules of the cost pipeline, with expected values computed by hand in the comments."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from slurmscope.pipelines import cost
from slurmscope.pipelines.common import (
    UTC_DT,
    clip_interval,
    hourly_rate,
    largest_remainder,
    largest_remainder_cents,
    split_calendar,
)
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params, run_pipelines

from slurmscope.config import load_config

JOB_SCHEMA = {
    "job_id_raw": pl.Int64,
    "submit_time": UTC_DT,
    "account": pl.String,
    "user": pl.String,
    "partition": pl.String,
    "qos": pl.String,
    "state": pl.String,
    "start_time": UTC_DT,
    "end_time": UTC_DT,
    "gpus": pl.Int32,
    "gpu_type": pl.String,
}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def jobs_frame(rows: list[tuple]) -> pl.LazyFrame:
    return pl.LazyFrame(rows, schema=JOB_SCHEMA, orient="row")


def params(now: datetime, **billing) -> dict:
    cfg = load_config(env={}).with_overrides(billing=billing)
    return pipeline_params(cfg, Window(EPOCH, now, True))


def test_split_calendar_month_boundary_in_new_york():
    # 22:00 EST on 31 Jan to 02:00 EST on 1 Feb = 03:00-07:00 UTC on 1 Feb: two hours in each month.
    lf = pl.LazyFrame(
        {"s": [ts("2026-02-01 03:00")], "e": [ts("2026-02-01 07:00")]}, schema={"s": UTC_DT, "e": UTC_DT}
    )
    got = (
        split_calendar(lf, "s", "e", "America/New_York", every="1mo", out="month")
        .select("month", "overlap_seconds")
        .sort("month")
    )
    want = pl.DataFrame({"month": [date(2026, 1, 1), date(2026, 2, 1)], "overlap_seconds": [7200.0, 7200.0]})
    assert_frame_equal(got.collect(), want)


def test_split_calendar_dst_day_has_23_hours():
    # 8 March 2026: New York springs forward; 00:00 EST (05:00 UTC) to 00:00 EDT next day (04:00 UTC) = 23 h.
    lf = pl.LazyFrame(
        {"s": [ts("2026-03-08 05:00")], "e": [ts("2026-03-09 04:00")]}, schema={"s": UTC_DT, "e": UTC_DT}
    )
    got = split_calendar(lf, "s", "e", "America/New_York").select("day", "overlap_seconds").collect()
    assert_frame_equal(got, pl.DataFrame({"day": [date(2026, 3, 8)], "overlap_seconds": [23 * 3600.0]}))


def test_daily_month_boundary_non_utc_zone():
    # 4 GPUs, 2 h on 31 Jan and 2 h on 1 Feb in New York; 2.5 $/GPU-h -> 8 GPU-h = $20 each day.
    jobs = jobs_frame(
        [
            (
                1,
                ts("2026-02-01 00:00"),
                "a",
                "u",
                "gpu",
                "normal",
                "COMPLETED",
                ts("2026-02-01 03:00"),
                ts("2026-02-01 07:00"),
                4,
                "H100",
            )
        ]
    )
    p = params(ts("2026-03-01 00:00"), timezone="America/New_York", rates={"h100": 2.5})
    d = cost.daily(jobs, p).collect().sort("day")
    assert d.select("day", "gpu_seconds", "cost_usd").rows() == [
        (date(2026, 1, 31), 28800.0, 20.0),
        (date(2026, 2, 1), 28800.0, 20.0),
    ]
    m = cost.monthly(d.lazy(), pl.LazyFrame(schema=cost.MONTHLY_SCHEMA), p).collect().sort("month")
    assert m.select("month", "gpu_hours", "cost_usd", "version", "frozen").rows() == [
        (date(2026, 1, 1), 8.0, 20.0, 1, True),  # closed: 1 Mar is past 1 Feb + 5 days
        (date(2026, 2, 1), 8.0, 20.0, 1, False),  # closes on 6 Mar
    ]


def test_daily_failed_requeued_running_and_partition_rate():
    d0 = "2026-02-01"
    jobs = jobs_frame(
        [
            # job 10 attempt 1: NODE_FAIL, 1 GPU 10:00-12:00 = 7200 GPU-s, failed and requeued
            (
                10,
                ts(f"{d0} 09:00"),
                "a",
                "u",
                "gpu",
                "normal",
                "NODE_FAIL",
                ts(f"{d0} 10:00"),
                ts(f"{d0} 12:00"),
                1,
                "h100",
            ),
            # job 10 attempt 2: 12:30-13:30 = 3600 GPU-s
            (
                10,
                ts(f"{d0} 12:01"),
                "a",
                "u",
                "gpu",
                "normal",
                "COMPLETED",
                ts(f"{d0} 12:30"),
                ts(f"{d0} 13:30"),
                1,
                "h100",
            ),
            # job 11: running from 22:00 with 2 GPUs, now = 02:00 next day: 2 h x 2 on each day
            (11, ts(f"{d0} 21:00"), "b", "v", "cheap", "normal", "RUNNING", ts(f"{d0} 22:00"), None, 2, None),
            # pending and CPU-only jobs cost nothing
            (12, ts(f"{d0} 21:00"), "b", "v", "cheap", "normal", "PENDING", None, None, 4, None),
            (
                13,
                ts(f"{d0} 01:00"),
                "b",
                "v",
                "cheap",
                "normal",
                "COMPLETED",
                ts(f"{d0} 02:00"),
                ts(f"{d0} 03:00"),
                0,
                None,
            ),
        ]
    )
    p = params(ts("2026-02-02 02:00"), rates={"partition:cheap": 1.0, "default": 2.0})
    got = cost.daily(jobs, p).collect().sort("day", "account")
    want = pl.DataFrame(
        [
            # 3 GPU-h x $2 = 6; failed 2 GPU-h = $4; requeued the same attempt
            (
                date(2026, 2, 1),
                "a",
                "u",
                "gpu",
                "normal",
                "h100",
                10800.0,
                6.0,
                7200.0,
                4.0,
                7200.0,
                4.0,
                0.0,
                0.0,
                10800.0,
                0.0,
            ),
            # 4 GPU-h x $1 per day, all accrued by a running attempt (then spread, 0 when "separate"; billed
            # GPU-seconds; MIG slices' GPU-seconds, none)
            (
                date(2026, 2, 1),
                "b",
                "v",
                "cheap",
                "normal",
                "",
                14400.0,
                4.0,
                0.0,
                0.0,
                0.0,
                0.0,
                14400.0,
                0.0,
                14400.0,
                0.0,
            ),
            (
                date(2026, 2, 2),
                "b",
                "v",
                "cheap",
                "normal",
                "",
                14400.0,
                4.0,
                0.0,
                0.0,
                0.0,
                0.0,
                14400.0,
                0.0,
                14400.0,
                0.0,
            ),
        ],
        schema=cost.DAILY_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want)


def daily_by_split_calendar(jobs: pl.LazyFrame, p: dict) -> pl.DataFrame:
    """The billing rule itself: every attempt through split_calendar, then summed per day and key."""
    a = cost.attempts(jobs, p.now).with_columns(clip_interval("use_start", "use_end", p.start, p.now))
    parts = split_calendar(a, "use_start", "use_end", p.tz).with_columns(
        (pl.col("overlap_seconds") * pl.col("gpus")).alias("gs")
    )
    gs = pl.col("gs")
    return (
        parts.group_by("day", *cost.KEYS)
        .agg(
            gs.sum().alias("gpu_seconds"),
            *[gs.filter(pl.col(f)).sum().alias(f"{f}_gpu_seconds") for f in cost.FLAGS],
        )
        .filter(pl.col("day") >= p.start_date)
        .sort("day", *cost.KEYS)
        .collect()
    )


# Days a zone skips or starts an hour late (DST at midnight), half-hour, 45-minute and odd-second offsets.
ODD_DAYS = [
    ("Pacific/Apia", "2011-12-29 10:00"),  # 30 Dec 2011 does not exist there
    ("America/Santiago", "2022-09-11 04:00"),
    ("America/Santiago", "2023-04-02 03:00"),
    ("America/Havana", "2023-03-12 05:00"),
    ("Asia/Beirut", "2023-03-25 22:00"),
    ("Australia/Lord_Howe", "2023-09-30 15:30"),
    ("Asia/Kathmandu", "2024-01-01 00:00"),
    ("Europe/Berlin", "2025-03-30 01:00"),
    ("Europe/Berlin", "2025-10-26 01:00"),
    ("Africa/Monrovia", "1972-01-06 12:00"),  # -0:44:30 until 7 Jan 1972: midnight off the quarter hour
    ("America/Havana", "1970-01-01 03:00"),  # billing days before 1970 (negative day numbers)
]


@settings(max_examples=150, deadline=None)
@given(
    odd=st.sampled_from(ODD_DAYS),
    clip=st.booleans(),
    attempts=st.lists(
        st.tuples(
            st.integers(-3 * 86400 * 10**6, 3 * 86400 * 10**6),
            st.integers(1, 5 * 86400 * 10**6),
            st.integers(1, 4),
            st.sampled_from(["a", "b"]),
            st.sampled_from(["COMPLETED", "FAILED", "RUNNING"]),
            st.integers(1, 3),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_daily_splits_days_as_split_calendar_does(odd, clip, attempts):
    """daily() sums attempts before spreading them over days; the result must be split_calendar's to the
    last microsecond, in zones whose days are skipped, start an hour late or are offset by 30 or 45 min."""
    zone, at = odd
    t0 = ts(at)
    rows = []
    for i, (offset, length, gpus, account, state, job) in enumerate(attempts):
        start = t0 + timedelta(microseconds=offset)
        end = None if state == "RUNNING" else start + timedelta(microseconds=length)
        rows.append(
            (job, start - timedelta(hours=i), account, "u", "gpu", "normal", state, start, end, gpus, "h100")
        )
    now = t0 + timedelta(days=6)
    cfg = load_config(env={}).with_overrides(billing={"timezone": zone, "rates": {"h100": 1.0}})
    p = pipeline_params(cfg, Window(t0 - timedelta(days=1) if clip else EPOCH, now, not clip))
    got = cost.daily(jobs_frame(rows), p).collect().sort("day", *cost.KEYS)
    want = daily_by_split_calendar(jobs_frame(rows), p)
    cols = ["gpu_seconds", *[f"{f}_gpu_seconds" for f in cost.FLAGS]]
    assert_frame_equal(
        got.select("day", *cost.KEYS, *cols),
        want.select("day", *cost.KEYS, *cols),
        check_exact=False,
        rel_tol=1e-12,
        abs_tol=1e-9,
    )


def test_daily_days_of_short_attempts_around_a_midnight_off_the_quarter_hour():
    # Monrovia was at -0:44:30 until 7 Jan 1972: each day began at 00:44:30 UTC. 1 GPU from 00:44:35 to
    # 00:44:55 UTC on 5 Jan is 20 GPU-s on 5 Jan; from 00:44:20 to 00:44:40 on 6 Jan, 10 s on each side.
    jobs = jobs_frame(
        [
            (
                1,
                ts("1972-01-05 00:00"),
                "a",
                "u",
                "gpu",
                "normal",
                "COMPLETED",
                ts("1972-01-05 00:44:35"),
                ts("1972-01-05 00:44:55"),
                1,
                "h100",
            ),
            (
                2,
                ts("1972-01-06 00:00"),
                "a",
                "u",
                "gpu",
                "normal",
                "COMPLETED",
                ts("1972-01-06 00:44:20"),
                ts("1972-01-06 00:44:40"),
                1,
                "h100",
            ),
        ]
    )
    cfg = load_config(env={}).with_overrides(billing={"timezone": "Africa/Monrovia", "rates": {"h100": 3.6}})
    p = pipeline_params(cfg, Window(ts("1972-01-01 00:44:30"), ts("1972-01-10 00:00"), False))
    got = cost.daily(jobs, p).collect().sort("day").select("day", "gpu_seconds").rows()
    assert got == [(date(1972, 1, 5), 30.0), (date(1972, 1, 6), 10.0)]


def test_daily_dst_at_midnight_and_a_skipped_day_follow_the_billing_day_of_each_instant():
    """Havana skips 00:00-01:00 on 12 March 2023 (its day starts at 05:00 UTC): 04:00-05:00 UTC is 11 March,
    23:00 CST. Apia skipped 30 December 2011: an attempt across it is charged once, to the days it ran in."""

    def one(zone: str, start: str, end: str) -> list[tuple]:
        row = (1, ts(start), "a", "u", "gpu", "normal", "COMPLETED", ts(start), ts(end), 1, "h100")
        p = params(ts(end) + timedelta(days=2), timezone=zone)
        got = cost.daily(jobs_frame([row]), p).collect().sort("day")
        return got.select("day", "gpu_seconds").rows()

    assert one("America/Havana", "2023-03-12 04:00", "2023-03-12 06:00") == [
        (date(2023, 3, 11), 3600.0),
        (date(2023, 3, 12), 3600.0),
    ]
    # Apia: 29 Dec ended at 10:00 UTC (-10:00), 31 Dec began there (+14:00)
    assert one("Pacific/Apia", "2011-12-30 09:00", "2011-12-30 11:00") == [
        (date(2011, 12, 29), 3600.0),
        (date(2011, 12, 31), 3600.0),
    ]


def test_largest_remainder_thirds_sum_to_total():
    lf = pl.LazyFrame({"m": [1, 1, 1], "acct": ["a", "b", "c"], "amt": [10 / 3] * 3})
    got = largest_remainder_cents(lf, "amt", ["m"], ["acct"]).collect().sort("acct")
    assert got["cents"].to_list() == [334, 333, 333]  # ties: the first in `order` gets the spare cent
    assert largest_remainder([1.005, 2.005, 3.005]) == [101, 201, 300]  # total 6.015 -> 602 cents


@settings(max_examples=200)
@given(st.lists(st.floats(min_value=0, max_value=1e5, allow_nan=False), min_size=1, max_size=30))
def test_largest_remainder_property(amounts):
    lf = pl.LazyFrame({"g": [0] * len(amounts), "k": list(range(len(amounts))), "amt": amounts})
    cents = largest_remainder_cents(lf, "amt", ["g"], ["k"]).collect().sort("k")["cents"].to_list()
    total = round(sum(amounts) * 100, 6)
    assert sum(cents) == int(total + 0.5)
    assert all(abs(c - a * 100) < 1 + 1e-6 for c, a in zip(cents, amounts, strict=True))


def test_amortised_rate():
    # 30000 / (3 y x 8766 h) = 1.1407711; 0.7 kW x 0.10 $/kWh x 1.5 PUE = 0.105; 876.6 $/y / 8766 = 0.1
    entry = {
        "purchase_usd": 30000,
        "lifetime_years": 3,
        "power_kw": 0.7,
        "usd_per_kwh": 0.1,
        "pue": 1.5,
        "overhead_usd_per_year": 876.6,
    }
    assert hourly_rate(entry) == pytest.approx(30000 / (3 * 8766) + 0.105 + 0.1)
    assert hourly_rate({"rate": 3}) == 3.0
    assert hourly_rate({**entry, "gpus_per_unit": 2}) == pytest.approx((30000 / (3 * 8766) + 0.105 + 0.1) / 2)


# --- through the runner and DuckDB -------------------------------------------------------------------------


def insert_job(
    con,
    job_id,
    submit,
    start,
    end,
    gpus=1,
    account="a",
    user="u",
    partition="gpu",
    state="COMPLETED",
    gpu_type="h100",
):
    con.execute(
        'INSERT OR REPLACE INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", qos,'
        " state, start_time, end_time, gpus, gpu_type) VALUES ('default', ?, ?, ?, ?, ?, ?, 'normal', ?, ?, ?, ?, ?)",
        [str(job_id), job_id, submit, account, user, partition, state, start, end, gpus, gpu_type],
    )


def monthly_rows(con):
    return con.execute(
        'SELECT month, account, "user", gpu_hours, cost_usd, version, frozen FROM mart_cost_monthly ORDER BY ALL'
    ).fetchall()


def test_frozen_month_unchanged_by_late_data_and_reissue_is_versioned(con):
    cfg = load_config(env={}).with_overrides(billing={"close_after_days": 0, "rates": {"default": 2.0}})
    insert_job(con, 1, ts("2026-01-10 00:00"), ts("2026-01-10 00:00"), ts("2026-01-10 10:00"), gpus=1)
    run_pipelines(con, cfg, now=ts("2026-02-10 00:00"), only=["cost"])
    first = monthly_rows(con)
    assert first == [(date(2026, 1, 1), "a", "u", 10.0, Decimal("20.00"), 1, True)]

    # A late sacct record for January arrives after the month closed.
    insert_job(
        con, 2, ts("2026-01-20 00:00"), ts("2026-01-20 00:00"), ts("2026-01-20 05:00"), gpus=2, user="w"
    )
    run_pipelines(con, cfg, now=ts("2026-02-11 00:00"), only=["cost"])
    assert monthly_rows(con) == first  # frozen: nothing new for January, no February usage
    # ... while the daily mart, which is not an invoice, shows the late job.
    assert con.execute("SELECT sum(gpu_seconds) FROM mart_cost_daily").fetchone()[0] == 10 * 3600 + 10 * 3600

    reissue = cfg.with_overrides(billing={"reissue_months": ["2026-01"]})
    run_pipelines(con, reissue, now=ts("2026-02-12 00:00"), only=["cost"])
    rows = monthly_rows(con)
    assert rows == [
        (date(2026, 1, 1), "a", "u", 10.0, Decimal("20.00"), 1, True),
        (date(2026, 1, 1), "a", "u", 10.0, Decimal("20.00"), 2, True),
        (date(2026, 1, 1), "a", "w", 10.0, Decimal("20.00"), 2, True),
    ]
    run_pipelines(con, reissue, now=ts("2026-02-13 00:00"), only=["cost"])
    assert monthly_rows(con) == rows  # same values: no version 3


def test_capacity_reconciles_to_the_cent(con):
    cfg = load_config(env={}).with_overrides(billing={"rates": {"h100": 1.2345}})
    t0 = ts("2026-02-01 00:00")
    snaps = [  # 8 GPUs: MIXED 3 used for 1000 s, DRAIN with 1 used for 777 s, RESERVED for 500 s
        (t0, "MIXED", "", 3),
        (t0 + timedelta(seconds=1000), "MIXED", "DRAIN", 1),
        (t0 + timedelta(seconds=1777), "RESERVED", "", 0),
    ]
    for t, state, flags, used in snaps:
        con.execute(
            'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags,'
            " gpus_total, gpus_used, gpu_type) VALUES ('default', ?, 'n1', 'gpu', ?, ?, 8, ?, 'h100')",
            [t, state, flags, used],
        )
    run_pipelines(con, cfg, now=t0 + timedelta(seconds=2277), only=["cost"])
    row = con.execute(
        "SELECT capacity_gpu_seconds, allocated_gpu_seconds, idle_gpu_seconds, down_gpu_seconds,"
        " reserved_gpu_seconds, capacity_cost_usd, allocated_cost_usd, idle_cost_usd, down_cost_usd,"
        " reserved_cost_usd FROM mart_capacity_daily"
    ).fetchall()
    # allocated 3x1000 + 1x777 = 3777; idle 5x1000; down 7x777 = 5439; reserved 8x500; capacity 8x2277 = 18216
    # $: 18216/3600 x 1.2345 = 6.2466 -> 6.25; parts 1.2952, 1.7146, 1.8651, 1.3717 -> floors 623 cents,
    # the 2 spare cents to the largest remainders (allocated .52, down .51).
    assert row == [
        (
            18216.0,
            3777.0,
            5000.0,
            5439.0,
            4000.0,
            Decimal("6.25"),
            Decimal("1.30"),
            Decimal("1.71"),
            Decimal("1.87"),
            Decimal("1.37"),
        )
    ]


def test_capacity_reconciles_for_many_days(con):
    cfg = load_config(env={}).with_overrides(billing={"timezone": "Europe/Berlin", "rates": {"a100": 0.977}})
    t0 = ts("2026-02-01 00:00")
    for i in range(0, 3 * 24 * 4):
        t = t0 + timedelta(minutes=15 * i + (i % 7))
        con.execute(
            'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags,'
            " gpus_total, gpus_used, gpu_type) VALUES ('default', ?, ?, 'gpu', ?, '', 4, ?, 'a100')",
            [t, f"n{i % 3}", ["MIXED", "DOWN", "IDLE", "RESERVED"][i % 4], i % 5],
        )
    run_pipelines(con, cfg, now=t0 + timedelta(days=3), only=["cost"])
    bad = con.execute(
        "SELECT count(*) FROM mart_capacity_daily WHERE allocated_cost_usd + idle_cost_usd + down_cost_usd"
        " + reserved_cost_usd <> capacity_cost_usd OR abs(allocated_gpu_seconds + idle_gpu_seconds"
        " + down_gpu_seconds + reserved_gpu_seconds - capacity_gpu_seconds) > 1e-6"
        " OR capacity_cost_usd <> round(capacity_gpu_seconds / 3600 * 0.977 + 1e-9, 2)"
    ).fetchone()[0]
    assert bad == 0
    assert con.execute("SELECT count(*) FROM mart_capacity_daily").fetchone()[0] == 4  # Berlin days 1-4 Feb


def test_running_job_accrues_and_counters_never_decrease(con):
    cfg = load_config(env={}).with_overrides(billing={"rates": {"default": 1.0}})
    insert_job(con, 5, ts("2026-02-01 00:00"), ts("2026-02-01 00:00"), None, gpus=2, state="RUNNING")
    counters = "SELECT gpu_seconds_total, cost_usd_total, gpu_seconds_correction FROM mart_usage_counters"
    run_pipelines(con, cfg, now=ts("2026-02-01 01:00"), only=["cost"])
    assert con.execute(counters).fetchall() == [(7200.0, 2.0, 0.0)]
    run_pipelines(con, cfg, now=ts("2026-02-01 03:00"), only=["cost"])
    assert con.execute(counters).fetchall() == [(21600.0, 6.0, 0.0)]  # accrued: 3 h x 2 GPUs
    # sacct later says the job had ended at 02:00: recomputed 14400 < 21600 already reported.
    insert_job(con, 5, ts("2026-02-01 00:00"), ts("2026-02-01 00:00"), ts("2026-02-01 02:00"), gpus=2)
    run_pipelines(con, cfg, now=ts("2026-02-01 04:00"), only=["cost"])
    assert con.execute(counters).fetchall() == [(21600.0, 6.0, -7200.0)]
    # New usage brings the recomputed total above the counter again: it grows, the correction clears.
    insert_job(con, 6, ts("2026-02-01 04:00"), ts("2026-02-01 04:00"), ts("2026-02-01 08:00"), gpus=1)
    run_pipelines(con, cfg, now=ts("2026-02-01 09:00"), only=["cost"])
    assert con.execute(counters).fetchall() == [(14400.0 + 14400.0, 8.0, 0.0)]


def test_monthly_invoice_rows_sum_to_the_rounded_total():
    # Three users each use 10/3 GPU-hours at $1: $3.333... each; the month is $10.00 and the rows must say
    # 3.34 + 3.33 + 3.33 (the spare cent to the first by account, user), not 3.33 x 3 = 9.99.
    day = date(2026, 2, 3)
    d = pl.LazyFrame(
        [(day, "a", u, 12000.0, 10 / 3) for u in ("u1", "u2", "u3")],
        schema={
            "day": pl.Date,
            "account": pl.String,
            "user": pl.String,
            "gpu_seconds": pl.Float64,
            "cost_usd": pl.Float64,
        },
        orient="row",
    )
    m = cost.monthly(d, pl.LazyFrame(schema=cost.MONTHLY_SCHEMA), params(ts("2026-02-10 00:00"))).collect()
    m = m.sort("user")
    assert m["cost_usd"].to_list() == [3.34, 3.33, 3.33]
    assert m["share"].to_list() == pytest.approx([1 / 3] * 3)
    assert m["frozen"].to_list() == [False] * 3 and m["version"].to_list() == [1] * 3


def test_incremental_run_freezes_a_month_that_closed_outside_its_window(con):
    cfg = load_config(env={}).with_overrides(billing={"close_after_days": 5, "rates": {"default": 1.0}})
    insert_job(con, 1, ts("2026-01-30 00:00"), ts("2026-01-30 00:00"), ts("2026-01-30 02:00"), gpus=1)
    insert_job(con, 2, ts("2026-02-02 00:00"), ts("2026-02-02 00:00"), ts("2026-02-02 03:00"), gpus=1)
    run_pipelines(con, cfg, now=ts("2026-02-01 00:00"), only=["cost"])
    run_pipelines(con, cfg, now=ts("2026-02-04 00:00"), only=["cost"])  # January still open (closes 6 Feb)
    assert [r[-1] for r in monthly_rows(con)] == [False, False]
    run_pipelines(con, cfg, now=ts("2026-02-09 00:00"), only=["cost"])  # window from 2 Feb, January closed
    assert monthly_rows(con) == [
        (date(2026, 1, 1), "a", "u", 2.0, Decimal("2.00"), 1, True),
        (date(2026, 2, 1), "a", "u", 3.0, Decimal("3.00"), 1, False),
    ]
    assert con.execute("SELECT count(*) FROM mart_cost_daily").fetchone()[0] == 2


# --- idle cost spread over the accounts (billing.idle_cost = "spread") ----------------------------------------


def insert_node(con, t, state, used, total=2, flags=""):
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags,'
        " gpus_total, gpus_used, gpu_type) VALUES ('default', ?, 'n1', 'gpu', ?, ?, ?, ?, 'h100')",
        [t, state, flags, total, used],
    )


def three_users_one_hour(con):
    """Node n1 (2 H100 at $1/GPU-h) from 3 Feb 00:00 UTC for one hour, 1 GPU allocated, 1 idle: capacity $2,
    allocated $1, unallocated $1. Users x, y, z of accounts a, a, b each hold 1 GPU for 20 minutes."""
    t0 = ts("2026-02-03 00:00")
    insert_node(con, t0, "MIXED", 1)
    for i, (acct, user) in enumerate((("a", "x"), ("a", "y"), ("b", "z"))):
        s = t0 + timedelta(minutes=20 * i)
        insert_job(con, 100 + i, s, s, s + timedelta(minutes=20), account=acct, user=user)
    return t0


def invoice(con):
    return con.execute(
        'SELECT account, "user", cost_usd, spread_cost_usd, version FROM mart_cost_monthly'
        ' ORDER BY version, account, "user"'
    ).fetchall()


def test_spread_charges_unallocated_capacity_by_usage_and_rows_sum_to_capacity(con):
    t0 = three_users_one_hour(con)
    cfg = load_config(env={}).with_overrides(billing={"rates": {"h100": 1.0}, "idle_cost": "spread"})
    run_pipelines(con, cfg, now=t0 + timedelta(hours=1), only=["cost"])
    # Each user: 1200 GPU-s = $0.3333 of usage and 1/3 of the $1 idle. Usage cents 33.33 x 3 -> 34, 33, 33
    # (the spare cent to the first by account, user); the same for the spread: rows 0.68, 0.66, 0.66 = $2.00,
    # the day's capacity cost.
    assert invoice(con) == [
        ("a", "x", Decimal("0.68"), Decimal("0.34"), 1),
        ("a", "y", Decimal("0.66"), Decimal("0.33"), 1),
        ("b", "z", Decimal("0.66"), Decimal("0.33"), 1),
    ]
    cap = con.execute("SELECT capacity_cost_usd, idle_cost_usd FROM mart_capacity_daily").fetchall()
    assert cap == [(Decimal("2.00"), Decimal("1.00"))]
    daily = con.execute('SELECT "user", spread_cost_usd FROM mart_cost_daily ORDER BY "user"').fetchall()
    assert [u for u, _ in daily] == ["x", "y", "z"]
    assert [v for _, v in daily] == pytest.approx([1 / 3] * 3)

    separate = cfg.with_overrides(billing={"idle_cost": "separate"})
    run_pipelines(con, separate, now=t0 + timedelta(hours=1), only=["cost"], full=True)
    assert invoice(con) == [
        ("a", "x", Decimal("0.34"), Decimal("0.00"), 1),
        ("a", "y", Decimal("0.33"), Decimal("0.00"), 1),
        ("b", "z", Decimal("0.33"), Decimal("0.00"), 1),
    ]
    assert con.execute("SELECT sum(spread_cost_usd) FROM mart_cost_daily").fetchone()[0] == 0


def test_spread_of_a_day_nobody_used_goes_by_the_months_usage(con):
    t0 = three_users_one_hour(con)
    # 4 Feb: n1 DOWN for an hour, no job: $2 of down capacity with nobody to charge that day.
    insert_node(con, t0 + timedelta(days=1), "DOWN", 0)
    cfg = load_config(env={}).with_overrides(
        billing={"rates": {"h100": 1.0}, "idle_cost": "spread", "bill_down": True}
    )
    run_pipelines(con, cfg, now=t0 + timedelta(days=1, hours=1), only=["cost"])
    # Unallocated $1 (3 Feb, by that day's usage) + $2 (4 Feb, by the month's: thirds) = $1 each; usage as above.
    assert invoice(con) == [
        ("a", "x", Decimal("1.34"), Decimal("1.00"), 1),
        ("a", "y", Decimal("1.33"), Decimal("1.00"), 1),
        ("b", "z", Decimal("1.33"), Decimal("1.00"), 1),
    ]
    total = con.execute("SELECT sum(cost_usd) FROM mart_cost_monthly").fetchone()[0]
    capacity = con.execute("SELECT sum(capacity_cost_usd) FROM mart_capacity_daily").fetchone()[0]
    assert total == capacity == Decimal("4.00")


def test_spread_leaves_a_frozen_month_alone_unless_reissued(con):
    three_users_one_hour(con)
    cfg = load_config(env={}).with_overrides(billing={"rates": {"h100": 1.0}, "close_after_days": 0})
    run_pipelines(con, cfg, now=ts("2026-03-01 00:00"), only=["cost"])
    first = invoice(con)
    assert [r[2] for r in first] == [Decimal("0.34"), Decimal("0.33"), Decimal("0.33")]
    spread = cfg.with_overrides(billing={"idle_cost": "spread"})
    run_pipelines(con, spread, now=ts("2026-03-02 00:00"), only=["cost"], full=True)
    assert invoice(con) == first  # February closed: a change of policy does not rewrite it
    reissue = spread.with_overrides(billing={"reissue_months": ["2026-02"]})
    run_pipelines(con, reissue, now=ts("2026-03-03 00:00"), only=["cost"], full=True)
    assert invoice(con) == first + [
        ("a", "x", Decimal("0.68"), Decimal("0.34"), 2),
        ("a", "y", Decimal("0.66"), Decimal("0.33"), 2),
        ("b", "z", Decimal("0.66"), Decimal("0.33"), 2),
    ]


def test_idle_cost_setting_is_validated(tmp_path):
    from slurmscope.config import ConfigError

    path = tmp_path / "s.toml"
    path.write_text('[billing]\nidle_cost = "smear"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(path) in str(err.value) and "billing.idle_cost" in str(err.value)
    assert "'separate' or 'spread'" in str(err.value) and "smear" in str(err.value)
    path.write_text("[billing]\npue = 0.5\n")
    with pytest.raises(ConfigError, match="billing.pue"):
        load_config(path, env={})


# --- usage-weighted cost and energy (mart_cost_efficiency_daily) -----------------------------------------------


@pytest.mark.parametrize("since", [None, "2026-02-02 00:00"])  # days converted one by one / from the table
def test_cost_per_useful_gpu_hour_idle_dollars_and_energy_per_account(since):
    t = ts("2026-02-03 00:00")
    m = [t + timedelta(minutes=i) for i in range(3)]
    # Job 1 (account a): 2 H100 for 3 minutes at $3.6/GPU-h ($0.001 per GPU-second): 360 GPU-s, $0.36.
    # Job 2 (account b): 1 GPU for 10 minutes on a node without telemetry: 600 GPU-s, $0.60.
    jobs = jobs_frame(
        [
            (1, t, "a", "u", "gpu", "normal", "COMPLETED", t, t + timedelta(minutes=3), 2, "h100"),
            (
                2,
                t,
                "b",
                "v",
                "gpu",
                "normal",
                "COMPLETED",
                t + timedelta(minutes=10),
                t + timedelta(minutes=20),
                1,
                "h100",
            ),
        ]
    )
    # The prolog mapped g0 for the whole run and g1 until 00:02:30 (30 s of the third minute).
    gpu_jobs = pl.LazyFrame(
        [
            ("n1", "g0", "1", t, t + timedelta(minutes=3)),
            ("n1", "g1", "1", t, t + timedelta(minutes=2, seconds=30)),
        ],
        schema={
            "node": pl.String,
            "gpu_uuid": pl.String,
            "job_id": pl.String,
            "interval_start": UTC_DT,
            "interval_end": UTC_DT,
        },
        orient="row",
    )
    samples = pl.LazyFrame(
        [  # node, gpu, minute, util %, energy J (counter delta), mean power W, GPM SM activity %, source
            ("n1", "g0", m[0], 100.0, 6000.0, 100.0, 70.0, "gpm"),
            ("n1", "g0", m[1], 50.0, 3000.0, 50.0, 30.0, "gpm"),
            ("n1", "g0", m[2], 2.0, None, 100.0, 1.0, "gpm"),  # no energy counter: 100 W x 60 s = 6000 J
            ("n1", "g1", m[0], 80.0, 1200.0, 20.0, None, "gpu_util"),  # g1 has no GPM
            # g1 has no sample for the second minute
            ("n1", "g1", m[2], 0.0, 600.0, 10.0, None, "gpu_util"),  # held 30 s: 300 J
        ],
        schema={
            "node": pl.String,
            "gpu_uuid": pl.String,
            "minute": UTC_DT,
            "util_gpu_mean": pl.Float64,
            "energy_joules": pl.Float64,
            "power_mean_watts": pl.Float64,
            "sm_active_mean": pl.Float64,
            "activity_source": pl.String,
        },
        orient="row",
    )
    p = params(ts("2026-02-03 01:00"), rates={"h100": 3.6}, energy_usd_per_kwh=0.15, pue=1.5)
    if since:
        p = replace(p, start=ts(since), start_date=date(2026, 2, 2))
    d = cost.daily(jobs, p)
    got = cost.cost_efficiency(d, jobs, gpu_jobs, samples, p).collect().sort("account")
    # a: sampled 180 (g0) + 60 + 30 (g1) = 270 GPU-s = $0.27; idle (< 5 % GPU_UTIL) 60 + 30 = 90 s = $0.09;
    # useful by SM activity on g0 (GPM) and GPU_UTIL on g1: 60x0.7 + 60x0.3 + 60x0.01 + 60x0.8 + 30x0 = 108.6 s
    # (139.2 s by GPU_UTIL alone); share 108.6 / 270; $/useful GPU-h 0.27 / (108.6 / 3600) = 8.95028; energy
    # 6000 + 3000 + 6000 + 1200 + 300 = 16500 J = 0.0045833 kWh, x 1.5 PUE x $0.15 = $0.00103125; 180 of the
    # 270 sampled GPU-s measured by GPM: 'mixed'.
    want = pl.DataFrame(
        [
            (
                date(2026, 2, 3),
                "a",
                360.0,
                0.36,
                270.0,
                0.27,
                90.0,
                0.09,
                108.6,
                108.6 / 270,
                0.27 * 3600 / 108.6,
                16500.0,
                16500 / 3.6e6,
                0.00103125,
                180.0,
                "mixed",
                0.0,  # no MIG slices
            ),
            (
                date(2026, 2, 3),
                "b",
                600.0,
                0.60,
                0.0,
                0.0,
                0.0,
                0.0,
                0.0,
                None,
                None,
                0.0,
                0.0,
                0.0,
                0.0,
                None,
                0.0,
            ),
        ],
        schema=cost.EFFICIENCY_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)


def test_energy_cost_without_an_electricity_price_is_not_configured_rather_than_free():
    t = ts("2026-02-03 00:00")
    jobs = jobs_frame(
        [(1, t, "a", "u", "gpu", "normal", "COMPLETED", t, t + timedelta(minutes=1), 1, "h100")]
    )
    gpu_jobs = pl.LazyFrame(
        [("n1", "g0", "1", t, t + timedelta(minutes=1))],
        schema={
            "node": pl.String,
            "gpu_uuid": pl.String,
            "job_id": pl.String,
            "interval_start": UTC_DT,
            "interval_end": UTC_DT,
        },
        orient="row",
    )
    samples = pl.LazyFrame(
        [("n1", "g0", t, 90.0, 3.6e6, None, None, "gpu_util")],  # a 3.6 MJ counter delta in the minute: 1 kWh
        schema={
            "node": pl.String,
            "gpu_uuid": pl.String,
            "minute": UTC_DT,
            "util_gpu_mean": pl.Float64,
            "energy_joules": pl.Float64,
            "power_mean_watts": pl.Float64,
            "sm_active_mean": pl.Float64,
            "activity_source": pl.String,
        },
        orient="row",
    )

    def energy(**billing):
        p = params(ts("2026-02-03 01:00"), rates={"h100": 1.0}, **billing)
        got = cost.cost_efficiency(cost.daily(jobs, p), jobs, gpu_jobs, samples, p).collect()
        return got.select("energy_kwh", "energy_cost_usd").row(0)

    assert energy() == (1.0, None)  # billing.energy_usd_per_kwh defaults to 0: no price, not $0
    assert energy(energy_usd_per_kwh=0.2, pue=1.5) == (1.0, pytest.approx(0.3))


def test_spread_of_an_incremental_run_takes_earlier_days_of_the_month_from_the_marts(con):
    t0 = three_users_one_hour(con)
    # 4 Feb: 1 of 2 GPUs allocated for an hour, to x alone: usage $1 and unallocated $1, both x's.
    insert_node(con, t0 + timedelta(days=1), "MIXED", 1)
    insert_job(
        con, 200, t0 + timedelta(days=1), t0 + timedelta(days=1), t0 + timedelta(days=1, hours=1), user="x"
    )
    cfg = load_config(env={}).with_overrides(billing={"rates": {"h100": 1.0}, "idle_cost": "spread"})
    now = t0 + timedelta(days=1, hours=2)
    run_pipelines(con, cfg, now=now, only=["cost"], full=True)
    full = invoice(con)
    # x: usage 1/3 + 1 and spread 1/3 + 1; y, z: 1/3 each -> 133.33, 33.33, 33.33 cents: the spare cent of each
    # to x (equal fractions, first by account, user). Rows: 2.68 + 0.66 + 0.66 = $4.00 = two days of capacity.
    assert full == [
        ("a", "x", Decimal("2.68"), Decimal("1.34"), 1),
        ("a", "y", Decimal("0.66"), Decimal("0.33"), 1),
        ("b", "z", Decimal("0.66"), Decimal("0.33"), 1),
    ]
    # Rebuilding only from 4 Feb: 3 Feb's usage and unallocated dollars come from mart_cost_daily and
    # mart_capacity_daily; the invoice must not change.
    run_pipelines(con, cfg, now=now, only=["cost"], since="2026-02-04")
    assert invoice(con) == full


def test_exporter_serves_energy_idle_dollars_and_cost_per_useful_gpu_hour_from_the_mart(con):
    from slurmscope.exporter import snapshot

    run = (
        "INSERT INTO mart_cost_efficiency_daily (cluster, day, account, gpu_seconds, cost_usd, sampled_gpu_seconds,"
        " sampled_cost_usd, idle_gpu_seconds, idle_cost_usd, useful_gpu_seconds, useful_share,"
        " cost_per_useful_gpu_hour, energy_joules, energy_kwh, energy_cost_usd, gpm_gpu_seconds, activity_source)"
        " VALUES ('default', ?, 'a', 0, 0, ?, ?, 0, ?, ?, NULL, NULL, ?, 0, ?, 0, 'gpu_util')"
    )
    # day, sampled s, sampled $, idle $, useful s, J, energy $: October is before this month, 3 Nov is "today",
    # 4 Nov is after now (a replayed history): only the month to date counts for $/useful GPU-hour.
    for day, sampled, cost_usd, idle, useful, joules, energy in (
        (date(2026, 10, 31), 3600.0, 100.0, 1.0, 3600.0, 10.0, 0.1),
        (date(2026, 11, 2), 7200.0, 4.0, 2.0, 1800.0, 20.0, 0.2),
        (date(2026, 11, 3), 3600.0, 2.0, 0.5, 1800.0, 30.0, 0.3),
        (date(2026, 11, 4), 3600.0, 50.0, 9.0, 60.0, 40.0, 0.4),
    ):
        con.execute(run, [day, sampled, cost_usd, idle, useful, joules, energy])
    snap = snapshot(con, load_config(env={}), ts("2026-11-03 12:00"))
    values = {
        name: snap.samples[name]
        for name in (
            "slurmscope_cost_per_useful_gpu_hour_usd",
            "slurmscope_account_gpu_energy_joules_total",
            "slurmscope_account_energy_cost_usd_total",
            "slurmscope_allocated_idle_cost_usd_total",
        )
    }
    assert values["slurmscope_cost_per_useful_gpu_hour_usd"] == [
        (("default", "a"), 6.0)
    ]  # $6 / (3600 s / 3600)
    assert values["slurmscope_account_gpu_energy_joules_total"] == [(("default", "a"), 60.0)]
    assert values["slurmscope_account_energy_cost_usd_total"][0][1] == pytest.approx(0.6)
    assert values["slurmscope_allocated_idle_cost_usd_total"] == [(("default", "a"), 3.5)]
