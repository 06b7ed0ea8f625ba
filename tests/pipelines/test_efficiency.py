"""GPU efficiency on tiny literal frames; every expected value is worked out in the comments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
from polars.testing import assert_frame_equal
from slurmscope.pipelines import efficiency as eff
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config

UTC_DT = pl.Datetime("us", "UTC")
T = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
NOW = T + timedelta(minutes=3)


def m(i: int, s: int = 0) -> datetime:
    return T + timedelta(minutes=i, seconds=s)


def frames() -> dict[str, pl.LazyFrame]:
    jobs = pl.LazyFrame(
        {
            "cluster": ["c", "c", "c"],
            "job_id": ["10", "11", "11"],
            "job_id_raw": [10, 11, 11],
            "attempt": [1, 1, 2],
            # job 11 was requeued: its first attempt ran a day earlier, the mapping belongs to attempt 2
            "submit_time": [T - timedelta(hours=1), T - timedelta(days=1, hours=1), T - timedelta(minutes=5)],
            "start_time": [T, T - timedelta(days=1), m(0, 30)],
            "end_time": [m(3), T - timedelta(days=1) + timedelta(minutes=1), None],
            "account": ["a", "b", "b"],
            "user": ["u", "v", "v"],
            "gpus": [2, 1, 1],
        },
        schema_overrides={"submit_time": UTC_DT, "start_time": UTC_DT, "end_time": UTC_DT},
    )
    gpu_jobs = pl.LazyFrame(
        {
            "cluster": ["c"] * 3,
            "node": ["n1", "n1", "n2"],
            "gpu_uuid": ["g1", "g2", "g3"],
            "job_id": ["10", "10", "11"],
            "interval_start": [T, T, m(0, 30)],
            "interval_end": [m(3), m(3), None],
        },
        schema_overrides={"interval_start": UTC_DT, "interval_end": UTC_DT},
    )
    rows = [
        # node, gpu, minute, util mean, util max, mem, energy, GPM SM activity (g1 is a Hopper with GPM)
        ("n1", "g1", 0, 50.0, 80.0, 1_000_000_000, 600.0, 40.0),
        ("n1", "g1", 1, 60.0, 90.0, 2_000_000_000, 600.0, 45.0),
        ("n1", "g1", 2, 70.0, 100.0, 3_000_000_000, 600.0, 50.0),
        ("n1", "g2", 0, 2.0, 3.0, 10, 60.0, None),
        ("n1", "g2", 1, 1.0, 4.0, 10, 60.0, None),  # g2 minute 2 was never sampled
        ("n2", "g3", 0, 0.0, 0.0, 5, 30.0, None),
        ("n2", "g3", 1, 0.0, 1.0, 5, 30.0, None),
        ("n2", "g3", 2, 0.0, 0.0, 5, 30.0, None),
    ]
    samples = pl.LazyFrame(
        {
            "cluster": ["c"] * len(rows),
            "node": [r[0] for r in rows],
            "gpu_uuid": [r[1] for r in rows],
            "minute": [m(r[2]) for r in rows],
            "util_gpu_mean": [r[3] for r in rows],
            "util_gpu_max": [r[4] for r in rows],
            "mem_used_max_bytes": [r[5] for r in rows],
            "energy_joules": [r[6] for r in rows],
            "sm_active_mean": [r[7] for r in rows],
            "activity_source": ["gpu_util" if r[7] is None else "gpm" for r in rows],
        },
        schema_overrides={"minute": UTC_DT},
    )
    return {"jobs": jobs, "gpu_jobs": gpu_jobs, "gpu_samples": samples}


def run() -> dict[str, pl.DataFrame]:
    p = params()
    out = eff.combine(eff.compute(frames(), p), p)
    return {k: v.collect() for k, v in out.items()}


def params(**drift):
    cfg = load_config(env={}).with_overrides(drift=drift)
    return pipeline_params(cfg, Window(EPOCH, NOW, True))


def test_job_efficiency_per_attempt():
    got = run()["mart_job_efficiency"].sort("job_id_raw").drop("alloc_start")
    # job 10: g1 held 180 s (3 sampled minutes), g2 held 180 s but sampled 120 s.
    #   util_mean = (50+60+70)*60 + (2+1)*60 over 300 sampled s = 10980/300 = 36.6
    #   idle = g2's two sampled minutes below 5 % = 120 s; energy = 3*600 + 2*60 = 1920 J
    #   activity: g1 by GPM SM activity, g2 by GPU_UTIL (no GPM): 'mixed'; sm_active_mean over g1's 180 s =
    #   (40+45+50)/3 = 45; useful = 60*(0.40+0.45+0.50) + 60*(0.02+0.01) = 81 + 1.8 = 82.8 s
    # job 11 attempt 2: g3 from 10:00:30 to now 10:03 = 30 + 60 + 60 = 150 s, all at 0 %, max 1 % < 5 %
    #   -> zero_util; energy 30*30/60 + 30 + 30 = 75 J; GPU_UTIL only, useful 0 s
    want = pl.DataFrame(
        {
            "cluster": ["c", "c"],
            "job_id": ["10", "11"],
            "job_id_raw": [10, 11],
            "attempt": [1, 2],
            "submit_time": [T - timedelta(hours=1), T - timedelta(minutes=5)],
            "account": ["a", "b"],
            "user": ["u", "v"],
            "gpus": [2, 1],
            "util_mean": [36.6, 0.0],
            "util_max": [100.0, 1.0],
            "mem_peak_bytes": [3_000_000_000, 5],
            "energy_joules": [1920.0, 75.0],
            "gpu_seconds": [360.0, 150.0],
            "sampled_gpu_seconds": [300.0, 150.0],
            "idle_gpu_seconds": [120.0, 150.0],
            "zero_util": [False, True],
            "alloc_end": [m(3), NOW],
            "sm_active_mean": [45.0, None],
            "useful_gpu_seconds": [82.8, 0.0],
            "gpm_gpu_seconds": [180.0, 0.0],
            "activity_source": ["mixed", "gpu_util"],
            "mig_gpus": [None, None],  # no MIG slices
            "mig_activity": [None, None],
        },
        schema={k: v for k, v in eff.JOB_SCHEMA.items() if k != "alloc_start"},
    ).select(got.columns)
    assert_frame_equal(got, want, check_exact=False, rel_tol=1e-12)


def test_idle_gpu_hours_daily_by_account_and_user():
    got = run()["mart_idle_gpus_daily"].sort("account")
    want = pl.DataFrame(
        {
            "cluster": ["c", "c"],
            "day": [T.date(), T.date()],
            "account": ["a", "b"],
            "user": ["u", "v"],
            "allocated_gpu_hours": [360 / 3600, 150 / 3600],
            "sampled_gpu_hours": [300 / 3600, 150 / 3600],
            "idle_gpu_hours": [120 / 3600, 150 / 3600],
            "idle_share": [0.4, 1.0],
            "zero_util_jobs": [0, 1],
        },
        schema=eff.IDLE_SCHEMA,
    )
    assert_frame_equal(got, want, check_exact=False, rel_tol=1e-12)


def test_threshold_from_config():
    # At 0.5 %: nothing of job 10 is idle (g2's means are 2 % and 1 %); g3's 0 % minutes still are
    # (mean 0 < 0.5), but its 1 % peak now reaches the threshold, so job 11 is no longer zero_util.
    p = params(idle_util_percent=0.5)
    out = eff.combine(eff.compute(frames(), p), p)
    got = out["mart_job_efficiency"].collect().sort("job_id_raw")
    assert got["idle_gpu_seconds"].to_list() == [0.0, 150.0]
    assert got["zero_util"].to_list() == [False, False]


def test_runner_writes_are_idempotent_and_incremental_equals_full(con):
    from slurmscope.pipelines.runner import run_pipelines

    from slurmscope.config import load_config

    cfg = load_config(None, env={})
    base = datetime(2026, 3, 1, 10, tzinfo=UTC)
    for d in range(8):
        start = base + timedelta(days=d)
        con.execute(
            'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, start_time, end_time, account, "user",'
            " gpus) VALUES ('default', ?, ?, ?, ?, ?, 'a', 'u', 1)",
            [str(d + 1), d + 1, start, start, start + timedelta(hours=1)],
        )
        con.execute(
            "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance)"
            " VALUES ('default', 'n1', 'g1', ?, ?, ?, '')",
            [str(d + 1), start, start + timedelta(hours=1)],
        )
        con.execute(
            "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, util_gpu_mean, util_gpu_max)"
            " SELECT 'default', 'n1', 'g1', ?::TIMESTAMPTZ + to_minutes(m), ?, ? FROM range(60) t(m)",
            [start, float(d % 3) * 20, float(d % 3) * 20],
        )

    def marts():
        return (
            con.execute("SELECT * FROM mart_job_efficiency ORDER BY ALL").fetchall(),
            con.execute("SELECT * FROM mart_idle_gpus_daily ORDER BY ALL").fetchall(),
        )

    for day in (3, 6, 9):
        run_pipelines(con, cfg, now=datetime(2026, 3, day, tzinfo=UTC), only=["efficiency"])
    incremental = marts()
    run_pipelines(con, cfg, full=True, now=datetime(2026, 3, 9, tzinfo=UTC), only=["efficiency"])
    assert marts() == incremental
    assert len(incremental[0]) == 8
    # days 0, 3, 6 ran at 0 %: three zero-util jobs, each 1 GPU-hour idle
    assert sum(r[-1] for r in incremental[1]) == 3


def test_jobs_input_reads_only_the_mapped_jobs_and_changes_no_row(con):
    """The jobs query keeps the attempts of mapped job ids only; computing from every attempt gives the
    same marts (an unmapped attempt can never be matched), including a requeued job's other attempt."""
    from slurmscope.pipelines.runner import Window, _read, pipeline_params

    from slurmscope.config import load_config

    cfg = load_config(None, env={})
    base = datetime(2026, 3, 1, 10, tzinfo=UTC)
    for i in range(1, 7):
        start = base + timedelta(hours=i)
        con.execute(
            "INSERT INTO jobs (cluster, job_id, job_id_raw, attempt, submit_time, start_time, end_time, account,"
            ' "user", gpus) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, 1)',
            ["default", str(i), i, start, start, start + timedelta(minutes=30), f"a{i}", f"u{i}"],
        )
    # job 2 requeued: a second attempt an hour after its first
    con.execute(
        "INSERT INTO jobs (cluster, job_id, job_id_raw, attempt, submit_time, start_time, end_time, account,"
        " \"user\", gpus) VALUES ('default', '2', 2, 2, ?, ?, ?, 'a2', 'u2', 1)",
        [base + timedelta(hours=3), base + timedelta(hours=3), base + timedelta(hours=3, minutes=20)],
    )
    con.execute(
        "INSERT INTO jobs (cluster, job_id, job_id_raw, attempt, submit_time, start_time, end_time,"
        " account, \"user\", gpus) VALUES ('other', '4', 4, 1, ?, ?, ?, 'x', 'y', 1)",
        [base, base + timedelta(hours=4), base + timedelta(hours=5)],
    )
    # mapped: 2 (both attempts), 4 as an array task id, and one id that is not a number
    for job_id, hours in (("2", 2), ("2", 3), ("4_7", 4), ("batch", 5)):
        start = base + timedelta(hours=hours)
        con.execute(
            "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance)"
            " VALUES ('default', 'n1', 'g1', ?, ?, ?, '')",
            [job_id, start, start + timedelta(minutes=20)],
        )
    con.execute(
        "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, util_gpu_mean, util_gpu_max)"
        " SELECT 'default', 'n1', 'g1', ?::TIMESTAMPTZ + to_minutes(m), m % 7, m % 9 FROM range(400) t(m)",
        [base],
    )
    now = base + timedelta(days=1)
    params = pipeline_params(cfg, Window(datetime(1970, 1, 1, tzinfo=UTC), now, True))
    frames = {alias: _read(con, sql, params.sql()) for alias, sql in eff.INPUTS.items()}
    read = frames["jobs"].collect()
    assert sorted(zip(read["job_id_raw"], read["attempt"], strict=True)) == [(2, 1), (2, 2), (4, 1)]
    every = {**frames, "jobs": _read(con, "SELECT * FROM jobs WHERE cluster = 'default'", params.sql())}
    narrow = {k: v.collect() for k, v in eff.combine(eff.compute(frames, params), params).items()}
    wide = {k: v.collect() for k, v in eff.combine(eff.compute(every, params), params).items()}
    assert narrow["mart_job_efficiency"].height == 3
    for name in eff.MART_TABLES:
        assert_frame_equal(narrow[name].sort(pl.all()), wide[name].sort(pl.all()))
