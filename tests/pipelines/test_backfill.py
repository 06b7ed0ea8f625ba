"""Backfill efficiency formulas on tiny literal frames; expected values worked out by hand."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import polars as pl
from polars.testing import assert_frame_equal
from slurmscope.pipelines import backfill as bf
from slurmscope.pipelines.common import UTC_DT
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config

JOB_SCHEMA = {
    "job_id_raw": pl.Int64,
    "submit_time": UTC_DT,
    "eligible_time": UTC_DT,
    "start_time": UTC_DT,
    "end_time": UTC_DT,
    "account": pl.String,
    "partition": pl.String,
    "state": pl.String,
    "gpus": pl.Int32,
    "gpu_type": pl.String,
    "sched_by": pl.String,
}
NODE_SCHEMA = {
    "snapshot_time": UTC_DT,
    "node": pl.String,
    "partition": pl.String,
    "state": pl.String,
    "state_flags": pl.String,
    "gpus_total": pl.Int32,
    "gpus_used": pl.Int32,
    "gpu_type": pl.String,
}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def params(now: str, *, start: datetime = EPOCH, bucket: int = 900) -> dict:
    cfg = load_config(env={}).with_overrides(pipelines={"occupancy_bucket_seconds": bucket})
    return pipeline_params(cfg, Window(start, ts(now), start == EPOCH))


def jobs(rows) -> pl.LazyFrame:
    return pl.LazyFrame(rows, schema=JOB_SCHEMA, orient="row")


D = "2026-02-01"


def test_backfill_daily_shares():
    j = jobs(
        [
            *[
                (
                    i,
                    ts(f"{D} 00:00"),
                    None,
                    ts(f"{D} 0{i}:00"),
                    ts(f"{D} 0{i + 1}:00"),
                    "a",
                    "gpu",
                    "COMPLETED",
                    1,
                    "h100",
                    "main",
                )
                for i in range(1, 4)
            ],  # 3 x 1 GPU-h by main
            (
                4,
                ts(f"{D} 00:00"),
                None,
                ts(f"{D} 05:00"),
                ts(f"{D} 07:00"),
                "a",
                "gpu",
                "COMPLETED",
                4,
                "h100",
                "backfill",
            ),  # 8 GPU-h by backfill
            (
                5,
                ts(f"{D} 00:00"),
                None,
                ts(f"{D} 05:00"),
                ts(f"{D} 07:00"),
                "a",
                "gpu",
                "COMPLETED",
                0,
                None,
                None,
            ),
            (6, ts(f"{D} 00:00"), None, None, None, "a", "gpu", "PENDING", 2, None, None),  # not started
        ]
    )
    got = bf.backfill_daily(j, params("2026-02-02 00:00")).collect().sort("sched_by")
    want = pl.DataFrame(
        [
            (date(2026, 2, 1), "gpu", "backfill", 1, 8.0, 0.2, 8 / 11),
            (date(2026, 2, 1), "gpu", "main", 3, 3.0, 0.6, 3 / 11),
            (date(2026, 2, 1), "gpu", "unknown", 1, 0.0, 0.2, 0.0),
        ],
        schema=bf.DAILY_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want)


def test_backfill_daily_counts_gpu_hours_on_the_days_they_were_held():
    """A month's "started by" GPU-hours are those held inside the month: an attempt running across the month
    end gives each day its overlap, so the month's rows stay the same when later runs see it run on or end."""
    j = jobs(
        [
            # backfill, 2 GPUs from 30 Jan 22:00, still running: 2 h x 2 on 30 Jan, 24 h x 2 on 31 Jan, ...
            (
                1,
                ts("2026-01-30 21:00"),
                None,
                ts("2026-01-30 22:00"),
                None,
                "a",
                "gpu",
                "RUNNING",
                2,
                "h100",
                "backfill",
            ),
            # main, 1 GPU on 31 Jan 10:00-12:00: 2 GPU-h
            (
                2,
                ts("2026-01-31 09:00"),
                None,
                ts("2026-01-31 10:00"),
                ts("2026-01-31 12:00"),
                "a",
                "gpu",
                "COMPLETED",
                1,
                "h100",
                "main",
            ),
        ]
    )
    january = pl.col("day") < date(2026, 2, 1)
    cols = ["day", "sched_by", "jobs", "gpu_hours"]
    at_month_end = bf.backfill_daily(j, params("2026-02-01 00:00")).filter(january).sort(cols).collect()
    assert at_month_end.select(cols).rows() == [
        (date(2026, 1, 30), "backfill", 1, 4.0),
        (date(2026, 1, 31), "backfill", 0, 48.0),
        (date(2026, 1, 31), "main", 1, 2.0),
    ]
    # 31 Jan: shares among the day's started attempts (only main started) and GPU-hours (48 : 2).
    day31 = at_month_end.filter(pl.col("day") == date(2026, 1, 31)).sort("sched_by")
    assert day31["share"].to_list() == [0.0, 1.0]
    assert day31["gpu_hours_share"].to_list() == [48 / 50, 2 / 50]
    # Three days later the attempt has run 3 more days (it would have added 144 GPU-h to 30 Jan before).
    later = bf.backfill_daily(j, params("2026-02-04 00:00")).collect()
    assert_frame_equal(later.filter(january).sort(cols), at_month_end)
    assert later.filter(~january)["gpu_hours"].sum() == 3 * 48.0


def test_wait_time_percentiles():
    start = ts(f"{D} 10:00")
    waits = [1, 2, 3, 10]
    j = jobs(
        [
            (
                i,
                start - timedelta(seconds=w + 100),
                start - timedelta(seconds=w),
                start,
                start + timedelta(hours=1),
                "a",
                "gpu",
                "COMPLETED",
                2,
                "h100",
                "main",
            )
            for i, w in enumerate(waits)
        ]
        + [
            # no eligible time: the wait is counted from submit (60 s); another GPU class
            (9, start - timedelta(seconds=60), None, start, None, "a", "gpu", "RUNNING", 8, "h100", "main"),
        ]
    )
    got = bf.wait_times(j, params("2026-02-02 00:00")).collect().sort("gpu_class")
    # linear percentiles of [1, 2, 3, 10]: p50 = 2.5; p90 at rank 2.7 = 3 + 0.7 x 7 = 7.9; p99 = 3 + 0.97 x 7
    want = pl.DataFrame(
        [
            (date(2026, 2, 1), "gpu", "a", "2-4", "h100", 4, 2.5, 7.9, 9.79, 4.0, 10.0),
            (date(2026, 2, 1), "gpu", "a", "5-8", "h100", 1, 60.0, 60.0, 60.0, 60.0, 60.0),
        ],
        schema=bf.WAIT_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want)


def test_sched_deltas_are_reset_aware():
    stats = pl.LazyFrame(
        {
            "snapshot_time": [
                ts(f"{D} 23:00"),
                ts(f"{D} 23:30"),
                ts("2026-02-02 00:30"),
                ts("2026-02-02 01:00"),
            ],
            "data_since": [
                ts(f"{D} 00:00"),
                ts(f"{D} 00:00"),
                ts("2026-02-02 00:00"),
                ts("2026-02-02 00:00"),
            ],
            "jobs_submitted": [100, 110, 7, 2],  # midnight reset, then a slurmctld restart (7 -> 2)
            "bf_total_cycles": [10, 12, 3, 1],
            "bf_backfilled_jobs": [50, 55, 58, 1],  # survives midnight, not the restart
        },
        schema_overrides={"snapshot_time": UTC_DT, "data_since": UTC_DT},
    )
    stats = stats.with_columns(
        *[
            pl.lit(None, dtype=pl.Int64).alias(c)
            for c in bf.DELTA_COUNTERS.values()
            if c not in ("jobs_submitted", "bf_total_cycles", "bf_backfilled_jobs")
        ],
        *[pl.lit(None, dtype=pl.Int64).alias(g) for g in bf.GAUGES],
    )
    got = bf.sched_deltas(stats, params("2026-02-03 00:00")).collect()
    assert got.select(
        "reset", "interval_seconds", "jobs_submitted", "bf_cycles", "bf_backfilled_jobs"
    ).rows() == [
        (False, None, None, None, None),  # first snapshot: nothing to subtract
        (False, 1800.0, 10, 2, 5),
        (True, 3600.0, 7, 3, 3),  # counters restarted at midnight: count since the reset
        (True, 1800.0, 2, 1, 1),  # restart: every counter from zero
    ]


def test_occupancy_holes_and_backfill_share():
    # One 8-GPU node snapshotted every 59 min (so each snapshot is followed by the next);
    # job 1: 2 GPUs, pending 00:00-01:00, runs 01:00-03:00, started by backfill;
    # job 2: 4 GPUs, pending 00:30-02:30 (no eligible time: from submit), runs 02:30-03:30.
    j = jobs(
        [
            (
                1,
                ts(f"{D} 00:00"),
                ts(f"{D} 00:00"),
                ts(f"{D} 01:00"),
                ts(f"{D} 03:00"),
                "a",
                "gpu",
                "COMPLETED",
                2,
                "h100",
                "backfill",
            ),
            (
                2,
                ts(f"{D} 00:30"),
                None,
                ts(f"{D} 02:30"),
                ts(f"{D} 03:30"),
                "b",
                "gpu",
                "COMPLETED",
                4,
                "h100",
                "main",
            ),
        ]
    )
    nodes = pl.LazyFrame(
        [
            (ts(f"{D} 00:00") + timedelta(minutes=59 * k), "n1", "gpu", "MIXED", "", 8, 2, "h100")
            for k in range(4)
        ],
        schema=NODE_SCHEMA,
        orient="row",
    )
    got = bf.occupancy(j, nodes, params("2026-02-02 01:00", bucket=3600)).collect().sort("bucket_start")
    want = pl.DataFrame(
        [
            # 00h: 8 free; both jobs pending, smallest asks 2 <= 8 idle: the whole idle hour is a hole
            (ts(f"{D} 00:00"), "gpu", "h100", 8.0, 0.0, 28800.0, 2, 2, 28800.0, 0.0, 0.0),
            # 01h: job 1 holds 2 (backfill, 7200 GPU-s); job 2 (4 GPUs) waits while 6 are idle
            (ts(f"{D} 01:00"), "gpu", "h100", 8.0, 2.0, 21600.0, 1, 4, 21600.0, 7200.0, 0.25),
            # 02h: job 2 starts at 02:30: 2 + 4 x 0.5 = 4 GPUs held on average; still pending in this bucket
            (ts(f"{D} 02:00"), "gpu", "h100", 8.0, 4.0, 14400.0, 1, 4, 14400.0, 7200.0, 1 / 3),
            # 03h: the last snapshot (02:57) stands for at most an hour: 8 GPUs x 57 min; job 2 until 03:30
            (ts(f"{D} 03:00"), "gpu", "h100", 7.6, 2.0, 20160.0, 0, None, 0.0, 0.0, None),
        ],
        schema=bf.OCC_SCHEMA,
        orient="row",
    )
    assert_frame_equal(got, want)


def test_sweep_matches_per_bucket_overlaps():
    # The sweep's difference arrays against the definition: each interval cut into its buckets, weight x
    # overlap summed. Millisecond ends, ends on bucket edges, gaps between intervals, two keys, a zero weight.
    import random

    rng = random.Random(7)
    t0 = ts(f"{D} 00:00")
    rows = [
        ("a", t0, t0 + timedelta(hours=2), 3),
        ("a", t0 + timedelta(hours=5), t0 + timedelta(hours=5, minutes=1), 0),
    ]
    for _ in range(300):
        s = t0 + timedelta(milliseconds=rng.randrange(0, 86_400_000))
        rows.append(
            (
                rng.choice("ab"),
                s,
                s + timedelta(milliseconds=rng.choice([1, 900_000, rng.randrange(1, 20_000_000)])),
                rng.choice([0, 1, 2, 8]),
            )
        )
    iv = pl.LazyFrame(rows, schema={"k": pl.String, "s": UTC_DT, "e": UTC_DT, "w": pl.Int32}, orient="row")
    got = bf._sweep(iv, {"v": pl.col("w"), "n": pl.lit(1)}, ["k"], 900, present="n").collect()
    bucket = timedelta(seconds=900)
    want: dict[tuple[str, datetime], list[float]] = {}
    for k, s, e, w in rows:
        b = t0 + bucket * ((s - t0) // bucket)
        while b < e:
            overlap = (min(e, b + bucket) - max(s, b)).total_seconds()
            acc = want.setdefault((k, b), [0.0, 0.0])
            acc[0] += w * overlap
            acc[1] += overlap
            b += bucket
    want_df = pl.DataFrame(
        [(k, b, v, n) for (k, b), (v, n) in want.items()],
        schema={"k": pl.String, "bucket_start": UTC_DT, "v": pl.Float64, "n": pl.Float64},
        orient="row",
    )
    assert_frame_equal(got.sort("k", "bucket_start"), want_df.sort("k", "bucket_start"), rel_tol=1e-12)
    present_only = bf._sweep(iv, {"v": pl.col("w")}, ["k"], 900, present="v").collect()
    assert present_only.height == want_df.filter(pl.col("v") > 0).height and present_only["v"].min() > 0


def test_sorted_percentile_is_polars_linear_quantile():
    # One sort per group stands in for three quantile() calls: it must give Polars' own values, bit for bit,
    # for groups of 1, 2 and many values, ties, and nulls (ignored, as quantile ignores them).
    import random

    from slurmscope.pipelines.common import percentile

    rng = random.Random(3)
    rows = [
        (g, rng.choice([None, rng.randrange(0, 10**6) / 1000, 5.0]))
        for g in range(40)
        for _ in range(g % 7 + 1)
    ]
    rows += [(99, None), (98, 1.5), (98, None)]
    df = pl.LazyFrame(rows, schema={"g": pl.Int64, "wait": pl.Float64}, orient="row")
    qs = (0.5, 0.9, 0.99)
    want = df.group_by("g").agg(*[percentile("wait", q).alias(str(q)) for q in qs]).sort("g").collect()
    got = (
        df.group_by("g")
        .agg(pl.col("wait").sort().alias("s"), pl.col("wait").null_count().alias("n"))
        .select("g", *[bf._sorted_percentile(pl.col("s"), pl.col("n"), q).alias(str(q)) for q in qs])
        .sort("g")
        .collect()
    )
    assert_frame_equal(got, want, check_exact=True)
