"""Drift signals on tiny literal frames: robust z-scores worked out by hand, and a degrading GPU."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from slurmscope.pipelines import drift, runner
from slurmscope.pipelines.calendar import local_day
from slurmscope.pipelines.common import split_calendar
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config
from slurmscope.slurm_states import job_failure_class

UTC_DT = pl.Datetime("us", "UTC")
DAY = datetime(2026, 11, 30, tzinfo=UTC)
NOW = DAY + timedelta(hours=12)


def samples(rows: list[tuple]) -> pl.LazyFrame:
    """rows: (node, gpu, minute offset, util, temp, power, sm clock)."""
    return pl.LazyFrame(
        {
            "cluster": ["c"] * len(rows),
            "node": [r[0] for r in rows],
            "gpu_uuid": [r[1] for r in rows],
            "minute": [DAY + timedelta(hours=1, minutes=r[2]) for r in rows],
            "model": ["H100"] * len(rows),
            "util_gpu_mean": [float(r[3]) for r in rows],
            "temp_gpu_max_celsius": [float(r[4]) for r in rows],
            "power_mean_watts": [float(r[5]) for r in rows],
            "sm_clock_mean_mhz": [float(r[6]) for r in rows],
        },
        schema_overrides={"minute": UTC_DT},
    )


def params(now: datetime = NOW, start: datetime | None = DAY, tz: str = "UTC", **cfg):
    """A window from `start` (None: a full run) to `now` on cluster "c" with the drift section `cfg`."""
    conf = load_config(env={}).with_overrides(cluster={"name": "c"}, billing={"timezone": tz}, drift=cfg)
    return pipeline_params(conf, Window(start or EPOCH, now, start is None))


def binned(samples: pl.LazyFrame, tz: str, width: float) -> pl.LazyFrame:
    """The minutes with a utilisation, with their billing day and utilisation bin, as drift's SQL reads them."""
    return samples.filter(pl.col("util_gpu_mean").is_not_null()).with_columns(
        day=local_day(pl.col("minute"), tz),
        util_bin=(pl.col("util_gpu_mean") / width).floor().clip(0, 100.0 / width),
        model=pl.col("model").fill_null(""),
    )


def fleet_medians(samples: pl.LazyFrame, tz: str, width: float) -> pl.LazyFrame:
    """The reference for the `gpu_fleet` input: per metric, the Polars median of the minutes with a value in
    each (cluster, billing day, model, utilisation bin)."""
    keys = ["cluster", "day", "model", "util_bin"]
    base = binned(samples, tz, width)
    out = base.select(keys).unique()
    for _, col, *_ in drift.GPU_METRICS:
        med = base.filter(pl.col(col).is_not_null()).group_by(keys).agg(pl.col(col).cast(pl.Float64).median())
        out = out.join(med, on=keys, how="left")
    return out


def deviation_rows(samples: pl.LazyFrame, tz: str, width: float) -> pl.LazyFrame:
    """The reference for the `gpu_deviations` input, a row per GPU and billing day: per signal, the Polars
    medians of its minutes' values, of their fleet medians (`fleet_medians`) and of the differences, and the
    minutes with a value."""
    keys = ["cluster", "day", "model", "util_bin"]
    gpu = ["cluster", "day", "node", "gpu_uuid", "model"]
    fleet = fleet_medians(samples, tz, width)
    base = binned(samples, tz, width)
    out = base.select(gpu).unique()
    for _, col, *_ in drift.GPU_METRICS:
        x = base.filter(pl.col(col).is_not_null()).select(
            *gpu, "util_bin", pl.col(col).cast(pl.Float64).alias("x")
        )
        agg = (
            x.join(fleet.select(*keys, pl.col(col).alias("fleet")), on=keys, how="left")
            .group_by(gpu)
            .agg(
                pl.col("x").median().alias(f"value_{col}"),
                pl.col("fleet").median().alias(f"fleet_{col}"),
                (pl.col("x") - pl.col("fleet")).median().alias(f"dev_{col}"),
                pl.len().cast(pl.Int64).alias(f"n_{col}"),
            )
        )
        out = out.join(agg, on=gpu, how="left").with_columns(pl.col(f"n_{col}").fill_null(0))
    return out


def run(frames: dict, **cfg) -> pl.DataFrame:
    p = params(**cfg)
    if "gpu_samples" in frames:
        deviations = deviation_rows(frames.pop("gpu_samples"), p.tz, p.drift.util_bin_percent)
        frames = {**frames, "gpu_deviations": deviations}
    return drift.combine(drift.compute(frames, p), p)["mart_drift"].collect()


def test_gpu_temperature_robust_z_by_hand():
    # One minute each, same utilisation bin: temps 60, 61, 62, 70. Fleet median 61.5; deviations
    # -1.5, -0.5, 0.5, 8.5; their median 0, MAD median(1.5, .5, .5, 8.5) = 1.0; scale 1.4826.
    # z = dev / 1.4826: g4 = 5.733 > 4 (breached), g1 = -1.012.
    rows = [
        ("n1", "g1", 0, 50, 60, 300, 1500),
        ("n1", "g2", 0, 52, 61, 300, 1500),
        ("n2", "g3", 0, 55, 62, 300, 1500),
        ("n2", "g4", 0, 58, 70, 300, 1500),
    ]
    out = run({"gpu_samples": samples(rows)}, min_gpu_minutes=1)
    got = (
        out.filter(pl.col("signal") == "gpu_temperature_vs_fleet")
        .sort("entity")
        .select("as_of", "entity", "node", "value", "baseline", "score", "threshold", "breached")
    )
    z = [d / 1.4826 for d in (-1.5, -0.5, 0.5, 8.5)]
    want = pl.DataFrame(
        {
            "as_of": [NOW] * 4,  # today's rows are as of now
            "entity": ["g1", "g2", "g3", "g4"],
            "node": ["n1", "n1", "n2", "n2"],
            "value": [60.0, 61.0, 62.0, 70.0],
            "baseline": [61.5] * 4,
            "score": z,
            "threshold": [4.0] * 4,
            "breached": [False, False, False, True],
        },
        schema_overrides={"as_of": UTC_DT},
    )
    assert_frame_equal(got, want)


def test_degrading_gpu_is_flagged_and_its_peers_are_not():
    # Six H100s doing the same mix of work (utilisation 10..95 %) for two hours. Healthy ones follow
    # temp = 40 + 0.3 util, clock 1980 MHz, power 100 + 5 util, with small per-GPU offsets.
    # g5 runs 9 C hotter and 240 MHz slower at the same utilisation.
    rows = []
    for i in range(6):
        gpu = f"g{i}"
        for minute in range(120):
            util = 10 + (minute * 7 + i) % 86
            temp = 40 + 0.3 * util + (i - 2.5) * 0.3
            clock = 1980 - (i % 3) * 5
            if gpu == "g5":
                temp += 9 + minute / 60  # and still rising
                clock -= 240
            rows.append((f"n{i // 2}", gpu, minute, util, temp, 100 + 5 * util, clock))
    out = run({"gpu_samples": samples(rows)})
    breached = out.filter(pl.col("breached")).select("signal", "entity").sort("signal")
    assert breached.rows() == [("gpu_sm_clock_vs_fleet", "g5"), ("gpu_temperature_vs_fleet", "g5")]
    g5 = out.filter((pl.col("entity") == "g5") & (pl.col("signal") == "gpu_sm_clock_vs_fleet"))
    assert g5["value"].item() < g5["baseline"].item() - 200
    healthy = out.filter(pl.col("entity") != "g5")
    assert healthy.height == 5 * 3 and not healthy["breached"].any()


def test_node_xid_rate_against_its_own_history():
    # Seven days of history 1,0,0,0,1,0,0 then 5 today: median 0, MAD 0 -> floor max(sqrt 0, .5) = .5,
    # score (5 - 0) / .5 = 10 > 4. Earlier days have fewer than 7 days of history before them (the first
    # event starts the history) or no events, so they give no row.
    counts = [1, 0, 0, 0, 1, 0, 0, 5]
    times = []
    for i, n in enumerate(counts):
        day = DAY - timedelta(days=len(counts) - 1 - i)
        times += [day + timedelta(hours=1, minutes=k) for k in range(n)]
    events = pl.LazyFrame(
        {
            "cluster": ["c"] * len(times),
            "node": ["n1"] * len(times),
            "event_time": times,
            "event_type": ["xid"] * len(times),
            "xid": [79] * len(times),
        },
        schema_overrides={"event_time": UTC_DT},
    )
    out = run({"gpu_events": events}, baseline_days=7, min_baseline_days=7)
    got = out.filter(pl.col("signal") == "node_xid_events").select(
        "as_of", "value", "baseline", "score", "breached"
    )
    want = pl.DataFrame(
        {"as_of": [NOW], "value": [5.0], "baseline": [0.0], "score": [10.0], "breached": [True]},
        schema_overrides={"as_of": UTC_DT},
    )
    assert_frame_equal(got, want)


def insert_jobs(con, rows: list[dict]) -> None:
    """Attempts into the jobs table (a row's missing columns are NULL; job ids are the row numbers)."""
    cols = ["account", "partition", "state", "submit_time", "eligible_time", "start_time", "end_time", "gpus"]
    frame = pl.DataFrame(
        {
            "cluster": ["c"] * len(rows),
            "job_id": [str(i) for i in range(len(rows))],
            "job_id_raw": list(range(len(rows))),
            **{c: [r.get(c) for r in rows] for c in cols},
        },
        schema_overrides={
            "submit_time": UTC_DT,
            "eligible_time": UTC_DT,
            "start_time": UTC_DT,
            "end_time": UTC_DT,
            "gpus": pl.Int32,
            "account": pl.String,
            "partition": pl.String,
            "state": pl.String,
        },
    )
    con.register("_jobs", frame.to_arrow())
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, account, "partition", state, submit_time,'
        " eligible_time, start_time, end_time, gpus) SELECT cluster, job_id, job_id_raw, account,"
        ' "partition", state, submit_time, eligible_time, start_time, end_time, gpus FROM _jobs'
    )
    con.unregister("_jobs")


def read_inputs(con, p) -> dict[str, pl.LazyFrame]:
    return runner.read_inputs(con, drift, p)


def test_failure_rate_trend_against_trailing_baseline(con):
    # Partition gpu: 10 attempts end each day; 1 failed on each of 7 previous days (rate .1, MAD 0 ->
    # floor .02), 5 failed today (rate .5): score (.5 - .1) / .02 = 20.
    rows = []
    for back in range(8):
        day = DAY - timedelta(days=back)
        failed = 5 if back == 0 else 1
        for k in range(10):
            end = day + timedelta(hours=2, minutes=k)
            start = end - timedelta(hours=1)
            rows.append(
                {
                    "account": "a",
                    "partition": "gpu",
                    "state": "FAILED" if k < failed else "COMPLETED",
                    "submit_time": start,
                    "eligible_time": start,
                    "start_time": start,
                    "end_time": end,
                    "gpus": 0,
                }
            )
    insert_jobs(con, rows)
    p = params(baseline_days=7)
    out = drift.combine(drift.compute(read_inputs(con, p), p), p)["mart_drift"].collect()
    fr = out.filter(pl.col("signal") == "partition_failure_rate")
    assert fr.select("value", "baseline", "breached").rows() == [(0.5, 0.1, True)]
    assert fr["score"].item() == pytest.approx(20.0)
    # all attempts waited 0 s: no wait drift
    assert not out.filter(pl.col("signal") == "partition_wait_p50_seconds")["breached"].any()


ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/Santiago",
    "Asia/Beirut",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/St_Johns",
]


def transitions(tz: str, year: int) -> list[datetime]:
    """The instants (to the minute) at which `tz` changes its UTC offset in `year`."""
    zone, out = ZoneInfo(tz), []
    t = datetime(year, 1, 1, tzinfo=UTC)
    while t.year == year:
        step = t + timedelta(hours=1)
        if t.astimezone(zone).utcoffset() != step.astimezone(zone).utcoffset():
            while step - t > timedelta(minutes=1):
                mid = t + (step - t) / 2
                changed = t.astimezone(zone).utcoffset() != mid.astimezone(zone).utcoffset()
                t, step = (t, mid) if changed else (mid, step)
            out.append(step)
        t = step
    return out


def random_attempts(n: int, seed: int, tz: str) -> list[dict]:
    """Attempts over a year: some over several days, running, ending after now, odd times to the microsecond,
    waits either way, without GPUs, account or partition; a fifth start or end next to the zone's changes of
    offset (where a day may have no midnight)."""
    rng = random.Random(seed)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    near = [
        t + timedelta(minutes=m, microseconds=u)
        for t in transitions(tz, 2025)
        for m in (-61, -60, -59, -30, 0, 30, 59, 60)
        for u in (-1, 0, 1)
    ]
    rows = []
    for _ in range(n):
        submit = t0 + timedelta(seconds=rng.randrange(0, 365 * 86400), microseconds=rng.randrange(10**6))
        if near and rng.random() < 0.2:
            submit = rng.choice(near) - timedelta(seconds=rng.choice([0, 0, 3600, 86400, 2 * 86400]))
        start = submit + timedelta(seconds=rng.choice([0, 1, 59, 3599, 7200, 86400]) * rng.random())
        length = timedelta(
            seconds=rng.choice([1, 600, 3 * 3600, 20 * 3600, 2 * 86400, 5 * 86400]) * rng.random()
        )
        rows.append(
            {
                "account": rng.choice(["a", "b", None]),
                "partition": rng.choice(["p", "q", None]),
                "state": rng.choice(["COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", None]),
                "submit_time": submit,
                "eligible_time": rng.choice(
                    [None, submit, submit + timedelta(seconds=rng.randrange(-90, 90))]
                ),
                "start_time": rng.choice([start, start, start, None]),
                "end_time": rng.choice([start + length, start + length, None]),
                "gpus": rng.choice([0, 1, 2, 8, None]),
            }
        )
    return rows


@pytest.mark.parametrize("tz", ZONES)
def test_daily_values_from_sql_are_those_of_the_polars_reference(con, tz):
    """DuckDB reduces attempts to daily values; Polars' common.split_calendar and local_day are the reference
    (a billing day as the other marts cut it, DST days and zones with a midnight gap included)."""
    now = datetime(2025, 12, 20, 7, 30, tzinfo=UTC)
    rows = random_attempts(3000, seed=len(tz), tz=tz)
    insert_jobs(con, rows)
    frames = read_inputs(con, params(now=now, start=None, tz=tz))
    jobs = (
        pl.DataFrame(
            rows,
            schema_overrides={c: UTC_DT for c in ("submit_time", "eligible_time", "start_time", "end_time")},
        )
        .with_columns(
            account=pl.col("account").fill_null(""),
            partition=pl.col("partition").fill_null(""),
            use_end=pl.min_horizontal(pl.col("end_time").fill_null(now), pl.lit(now, dtype=UTC_DT)),
        )
        .filter(pl.coalesce("start_time", "submit_time") < now)
    )
    keys = {"gpu_hours": ["account", "day"], "failures": ["partition", "day"], "waits": ["partition", "day"]}
    want = {
        "gpu_hours": split_calendar(jobs.lazy().filter(pl.col("gpus") > 0), "start_time", "use_end", tz)
        .group_by("account", "day")
        .agg((pl.col("overlap_seconds") * pl.col("gpus")).sum().truediv(3600).alias("x")),
        "failures": jobs.lazy()
        .filter(pl.col("end_time") <= now)
        .with_columns(
            pl.struct("state", "start_time")
            .map_elements(
                lambda r: job_failure_class(r["state"], None, started=r["start_time"] is not None),
                return_dtype=pl.String,
            )
            .alias("failure")
        )
        .group_by("partition", local_day(pl.col("end_time"), tz).alias("day"))
        .agg((pl.col("failure") != "none").sum().truediv(pl.len()).alias("x")),
        "waits": jobs.lazy()
        .filter(pl.col("start_time") <= now)
        .group_by("partition", local_day(pl.col("start_time"), tz).alias("day"))
        .agg(
            (pl.col("start_time") - pl.coalesce("eligible_time", "submit_time"))
            .dt.total_seconds()
            .median()
            .cast(pl.Float64)
            .alias("x")
        ),
    }
    for alias, by in keys.items():
        got = frames[alias].collect()
        assert got["cluster"].unique().to_list() == ["c"]
        assert_frame_equal(
            got.drop("cluster").sort(by),
            want[alias].collect().sort(by),
            check_exact=False,
            rel_tol=1e-12,
            abs_tol=1e-9,
        )


@pytest.mark.parametrize("tz", ZONES)
def test_fleet_medians_and_deviations_from_sql_are_those_of_polars(con, tz):
    """The `gpu_fleet` input (DuckDB, over every node, so that groups of nodes need only their own minutes) is
    the median Polars takes over the same minutes, and `gpu_deviations` (each GPU's medians against it) what
    Polars computes from them: billing day, bin edges, no model, nulls and even counts."""
    now = datetime(2025, 12, 20, 7, 30, tzinfo=UTC)
    rng = random.Random(len(tz))
    minutes = [t + timedelta(minutes=m) for t in transitions(tz, 2025) for m in range(-180, 180, 7)]
    minutes += [now - timedelta(minutes=rng.randrange(4 * 1440)) for _ in range(1500)]
    rows = [
        {
            "cluster": "c",
            "node": f"n{g // 4}",
            "gpu_uuid": f"g{g}",
            "minute": t,
            "model": ["H100", "H100", None][g % 3],
            "util_gpu_mean": rng.choice([None, 0.0, 9.999, 10.0, 100.0, 104.0, -1.0, rng.uniform(0, 100)]),
            "temp_gpu_max_celsius": rng.choice([None, 60.0, 61.0, rng.uniform(40, 90)]),
            "power_mean_watts": rng.choice([300.0, 301.5, rng.uniform(100, 700)]),
            "sm_clock_mean_mhz": rng.choice([None, 1980.0, float(rng.randrange(1000, 2000))]),
        }
        for t in minutes
        for g in rng.sample(range(12), 3)
    ]
    frame = pl.DataFrame(rows, schema_overrides={"minute": UTC_DT})
    con.register("new_samples", frame.to_arrow())
    con.execute(f"INSERT INTO gpu_samples ({', '.join(rows[0])}) SELECT * FROM new_samples")
    frames = read_inputs(con, params(now=now, start=None, tz=tz))
    samples = frame.lazy().filter(pl.col("minute") < now)
    keys = ["cluster", "day", "model", "util_bin"]
    got = frames["gpu_fleet"].collect().sort(keys)
    want = fleet_medians(samples, tz, 10.0).collect().sort(keys)
    assert got.height > 100
    assert_frame_equal(got, want.select(got.columns), check_exact=True)
    keys = ["cluster", "day", "gpu_uuid"]
    got = frames["gpu_deviations"].collect().sort(keys)
    want = deviation_rows(samples, tz, 10.0).collect().sort(keys)
    assert got.height > 30 and got["n_temp_gpu_max_celsius"].max() > 1
    assert_frame_equal(got, want.select(got.columns), check_exact=True)


def test_fleet_skew_driver_and_gpu_count():
    # Drivers: n1 and n2 on 550.54 (2 GPUs each), n3 on 535.104 -> n3 breached (value 1.0).
    # n3's NVML sees 1 GPU where GRES configures 2 -> gpu_count breached.
    inv = pl.LazyFrame(
        {
            "cluster": ["c"] * 5,
            "node": ["n1", "n1", "n2", "n2", "n3"],
            "gpu_uuid": ["a", "b", "c", "d", "e"],
            "seen_at": [DAY] * 5,
            "model": ["H100"] * 5,
            "driver_version": ["550.54", "550.54", "550.54", "550.54", "535.104"],
            "cuda_version": ["12.4"] * 5,
        },
        schema_overrides={"seen_at": UTC_DT},
    )
    states = pl.LazyFrame(
        {
            "cluster": ["c"] * 3,
            "node": ["n1", "n2", "n3"],
            "snapshot_time": [DAY] * 3,
            "gpus_total": [2, 2, 2],
        },
        schema_overrides={"snapshot_time": UTC_DT},
    )
    out = run({"gpu_inventory": inv, "node_states": states})
    drv = out.filter(pl.col("signal") == "driver_version_skew").sort("entity")
    assert drv.select("entity", "value", "breached").rows() == [
        ("n1", 0.0, False),
        ("n2", 0.0, False),
        ("n3", 1.0, True),
    ]
    assert drv.filter(pl.col("entity") == "n3")["detail"].item() == "535.104 vs fleet 550.54"
    assert not out.filter(pl.col("signal") == "cuda_version_skew")["breached"].any()
    cnt = out.filter(pl.col("signal") == "gpu_count_nvml_vs_gres").sort("entity")
    assert cnt.select("entity", "value", "baseline", "breached").rows() == [
        ("n1", 2.0, 2.0, False),
        ("n2", 2.0, 2.0, False),
        ("n3", 1.0, 2.0, True),
    ]


def test_runner_writes_are_idempotent_and_incremental_equals_full(con):
    from slurmscope.pipelines.runner import run_pipelines

    from slurmscope.config import load_config

    cfg = load_config(None, env={})
    base = datetime(2026, 2, 1, 10, tzinfo=UTC)
    for d in range(36):
        for k in range(10):
            start = base + timedelta(days=d, minutes=k)
            state = "FAILED" if k < (6 if d == 35 else 1) else "COMPLETED"
            con.execute(
                "INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, start_time, end_time, account,"
                " \"user\", \"partition\", state, gpus) VALUES ('default', ?, ?, ?, ?, ?, 'a', 'u', 'gpu', ?, 1)",
                [str(d * 100 + k), d * 100 + k, start, start, start + timedelta(hours=1), state],
            )
    con.execute(
        "INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, driver_version, cuda_version)"
        " VALUES ('default', 'n1', 'g1', TIMESTAMPTZ '2026-03-01 00:00:00+00', '550', '12.4')"
    )

    def mart():
        return con.execute("SELECT * FROM mart_drift ORDER BY ALL").fetchall()

    for day in (20, 28, 38):
        run_pipelines(con, cfg, now=base + timedelta(days=day - 1, hours=14), only=["drift"])
    incremental = mart()
    run_pipelines(con, cfg, full=True, now=base + timedelta(days=37, hours=14), only=["drift"])
    assert mart() == incremental
    breached = con.execute(
        "SELECT signal, entity, as_of FROM mart_drift WHERE breached ORDER BY ALL"
    ).fetchall()
    # 8 March (as of its end, 9 March 00:00): 6 of 10 attempts failed against 1 of 10 every day before.
    # No jobs after 8 March: 0 GPU-hours on 9 and 10 March (the last as of now, 11 March 00:00) against a
    # median of 10 is a drop (usage is two-sided).
    assert [(s, e, a.astimezone(UTC)) for s, e, a in breached] == [
        ("account_gpu_hours", "a", datetime(2026, 3, 10, tzinfo=UTC)),
        ("account_gpu_hours", "a", datetime(2026, 3, 11, tzinfo=UTC)),
        ("partition_failure_rate", "gpu", datetime(2026, 3, 9, tzinfo=UTC)),
    ]


def test_narrow_incremental_runs_equal_a_full_rebuild(con):
    """Daily runs whose window is only the lookback (every attempt ingested when it ended, before the run):
    the runner deletes rows as of the window start, which is the end of the day before it, so that day must
    be recomputed too (GPU-vs-fleet, usage, failure and wait rows), or incremental runs lose it."""
    from slurmscope.pipelines.runner import run_pipelines

    from slurmscope.config import load_config

    cfg = load_config(None, env={}).with_overrides(billing={"timezone": "Europe/Berlin"})
    base = datetime(2026, 3, 1, 5, tzinfo=UTC)
    rng = random.Random(5)
    for d in range(40):
        for k in range(8):
            start = base + timedelta(days=d, hours=k * 2, minutes=rng.randrange(60))
            end = start + timedelta(minutes=rng.randrange(30, 600))
            state = rng.choice(["FAILED", "COMPLETED", "COMPLETED", "COMPLETED"])
            con.execute(
                "INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, start_time, end_time, account,"
                " \"user\", \"partition\", state, gpus, ingested_at) VALUES ('default', ?, ?, ?, ?, ?, ?, 'u',"
                " 'gpu', ?, ?, ?)",
                [
                    str(d * 100 + k),
                    d * 100 + k,
                    start - timedelta(minutes=rng.randrange(90)),
                    start,
                    end,
                    rng.choice(["a", "b"]),
                    state,
                    rng.choice([1, 2, 8]),
                    end,
                ],
            )
    samples = [
        (
            "default",
            "n1",
            f"g{g}",
            base + timedelta(days=d, minutes=36 * m),
            "H100",
            50.0 + m % 7,
            60.0 + g + rng.random() * 3 + (8 if g == 3 and d > 34 else 0),
            300.0,
            1700.0,
        )
        for d in range(30, 40)
        for g in range(4)
        for m in range(40)
    ]
    con.executemany(
        "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, model, util_gpu_mean,"
        " temp_gpu_max_celsius, power_mean_watts, sm_clock_mean_mhz) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        samples,
    )

    def mart():
        return con.execute(
            "SELECT as_of, signal, entity, value, baseline, score, breached FROM mart_drift ORDER BY ALL"
        ).fetchall()

    for day in range(20, 41):
        run_pipelines(con, cfg, now=base + timedelta(days=day, hours=9), only=["drift"])
    incremental = mart()
    run_pipelines(con, cfg, full=True, now=base + timedelta(days=40, hours=9), only=["drift"])
    full = mart()
    assert {r[1] for r in full} >= {"gpu_temperature_vs_fleet", "account_gpu_hours", "partition_failure_rate"}
    assert incremental == full
