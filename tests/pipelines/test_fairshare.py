"""Fair-share formulas on hand-made association trees; expected values worked out by hand in comments."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from slurmscope.pipelines import fairshare as fs
from slurmscope.pipelines.calendar import UTC_DT
from slurmscope.pipelines.fairshare.decay import decay_rate, parse_slurm_duration
from slurmscope.pipelines.fairshare.rows import sshare_agreement
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config
from tests.paths import FIXTURES

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
SNAP = T0 + timedelta(hours=2)
NOW = T0 + timedelta(hours=3)
INF = float("inf")


def jobs(rows: list[tuple]) -> pl.LazyFrame:
    """rows: (account, user, start, seconds, billing)."""
    return pl.LazyFrame(
        {
            "cluster": ["c"] * len(rows),
            "account": [r[0] for r in rows],
            "user": [r[1] for r in rows],
            "submit_time": [r[2] for r in rows],
            "start_time": [r[2] for r in rows],
            "end_time": [r[2] + timedelta(seconds=r[3]) if r[3] is not None else None for r in rows],
            "billing": [float(r[4]) for r in rows],
            "cpus": [1] * len(rows),
            "gpus": [0] * len(rows),
        },
        schema_overrides={"submit_time": UTC_DT, "start_time": UTC_DT, "end_time": UTC_DT},
    )


def tree(rows: list[tuple], at: datetime = SNAP) -> pl.LazyFrame:
    """rows: (account, user, parent, raw_shares); a root row is added."""
    rows = [("root", "", None, None), *rows]
    return pl.LazyFrame(
        {
            "cluster": ["c"] * len(rows),
            "snapshot_time": [at] * len(rows),
            "account": [r[0] for r in rows],
            "user": [r[1] for r in rows],
            "parent": [r[2] for r in rows],
            "raw_shares": [r[3] for r in rows],
        },
        schema_overrides={"snapshot_time": UTC_DT, "raw_shares": pl.Int64},
    )


def params(now: datetime, tz: str = "UTC", **fairshare):
    cfg = load_config(env={}).with_overrides(billing={"timezone": tz}, fairshare=fairshare)
    return pipeline_params(cfg, Window(EPOCH, now, True))


def run(
    frames: dict, now: datetime = NOW, half_life_seconds: float = 0.0, reset_period: str = "NONE"
) -> dict[str, pl.DataFrame]:
    p = params(now, decay_half_life_seconds=half_life_seconds, usage_reset_period=reset_period)
    out = fs.compute(frames, p)
    return {k: v.collect() for k, v in out.items()}


def computed_at(df: pl.DataFrame, at: datetime, cols: list[str]) -> pl.DataFrame:
    return (
        df.filter((pl.col("source") == "computed") & (pl.col("as_of") == at))
        .select("account", "user", *cols)
        .sort("account", "user")
    )


def expected(rows: list[tuple], cols: list[str]) -> pl.DataFrame:
    return (
        pl.DataFrame(rows, schema=["account", "user", *cols], orient="row")
        .cast({c: pl.Float64 for c in cols})
        .sort("account", "user")
    )


def test_fair_tree_two_accounts_no_decay():
    # root -> a (3 shares: u1 1, u2 1), b (1 share: u3 1); usage u1 100, u2 300, u3 2*100 = 200.
    # a: raw 400, S 3/4, U 400/600 -> LevelFS 1.125; b: raw 200, S 1/4, U 1/3 -> 0.75 (a first).
    # u1: S .5, U .25 -> 2; u2: S .5, U .75 -> 2/3; u3: S 1, U 1 -> 1.
    # Pre-order: u1 (rank 3 -> 1.0), u2 (2 -> 2/3), u3 (1 -> 1/3).
    frames = {
        "jobs": jobs([("a", "u1", T0, 100, 1), ("a", "u2", T0, 300, 1), ("b", "u3", T0, 100, 2)]),
        "shares": tree(
            [
                ("a", "", "root", 3),
                ("a", "u1", "a", 1),
                ("a", "u2", "a", 1),
                ("b", "", "root", 1),
                ("b", "u3", "b", 1),
            ]
        ),
    }
    out = run(frames)["mart_fairshare"]
    cols = ["norm_shares", "raw_usage", "effectv_usage", "level_fs", "fairshare"]
    want = expected(
        [
            ("a", "", 0.75, 400, 400 / 600, 0.75 / (400 / 600), None),
            ("a", "u1", 0.5, 100, 0.25, 2.0, 1.0),
            ("a", "u2", 0.5, 300, 0.75, 0.5 / 0.75, 2 / 3),
            ("b", "", 0.25, 200, 200 / 600, 0.25 / (200 / 600), None),
            ("b", "u3", 1.0, 200, 1.0, 1.0, 1 / 3),
            ("root", "", 1.0, 600, 1.0, None, None),
        ],
        cols,
    )
    for at in (SNAP, NOW):  # the compared sshare instant and the run's now
        assert_frame_equal(computed_at(out, at, cols), want)
    assert out.filter(pl.col("source") == "sshare").height == 6


def test_fair_tree_ties_zero_usage_and_user_tied_with_account():
    # Tied zero-usage siblings: root -> a (1: u1, u2), b (1: u3); only u3 ran (100).
    # a: U 0 -> inf; b: U 1, S .5 -> .5. u1, u2 both inf: same rank 3 -> 1.0; u3 rank 1 -> 1/3.
    frames = {
        "jobs": jobs([("b", "u3", T0, 100, 1)]),
        "shares": tree(
            [
                ("a", "", "root", 1),
                ("a", "u1", "a", 1),
                ("a", "u2", "a", 1),
                ("b", "", "root", 1),
                ("b", "u3", "b", 1),
            ]
        ),
    }
    got = computed_at(run(frames)["mart_fairshare"], SNAP, ["fairshare"]).filter(pl.col("user") != "")
    assert_frame_equal(got, expected([("a", "u1", 1.0), ("a", "u2", 1.0), ("b", "u3", 1 / 3)], ["fairshare"]))

    # A user tied with a sibling account gets that account's top user's rank:
    # root -> a (1: user x 1, sub-account s 1 with user y 1), b (1: z 1); x 100, y 100, z 600.
    # a: U 200/800, S .5 -> 2; b: U .75 -> 2/3. Under a: x and s both U .5, S .5 -> LevelFS 1, tie:
    # x first (users before accounts), rank 3; s tied, so y keeps rank 3; z gets rank 1.
    frames = {
        "jobs": jobs([("a", "x", T0, 100, 1), ("s", "y", T0, 100, 1), ("b", "z", T0, 600, 1)]),
        "shares": tree(
            [
                ("a", "", "root", 1),
                ("a", "x", "a", 1),
                ("s", "", "a", 1),
                ("s", "y", "s", 1),
                ("b", "", "root", 1),
                ("b", "z", "b", 1),
            ]
        ),
    }
    got = computed_at(run(frames)["mart_fairshare"], SNAP, ["level_fs", "fairshare"])
    got = got.filter(pl.col("account") != "root")
    want = expected(
        [
            ("a", "", 2.0, None),
            ("a", "x", 1.0, 1.0),
            ("b", "", 2 / 3, None),
            ("b", "z", 1.0, 1 / 3),
            ("s", "", 1.0, None),
            ("s", "y", 1.0, 1.0),
        ],
        ["level_fs", "fairshare"],
    )
    assert_frame_equal(got, want)


def test_classic_algorithm_selected_by_priority_flags():
    # PriorityFlags=NO_FAIR_TREE from scontrol show config wins over the config default (fair_tree).
    # root -> a (1: u1 1), b (1: u2 1); u1 300, u2 100; UA = raw/root.
    # a: S .5, UE = .75 + (1 - .75)*.5 = .875; u1: S .5*1, UE = .75 + (.875 - .75)*1 = .875
    # b: UE = .25 + (1 - .25)*.5 = .625; u2: .625.  FairShare = 2^(-UE/S).
    cfg = pl.LazyFrame(
        {"cluster": ["c"], "snapshot_time": [T0], "key": ["PriorityFlags"], "value": ["NO_FAIR_TREE"]},
        schema_overrides={"snapshot_time": UTC_DT},
    )
    frames = {
        "jobs": jobs([("a", "u1", T0, 300, 1), ("b", "u2", T0, 100, 1)]),
        "shares": tree(
            [("a", "", "root", 1), ("a", "u1", "a", 1), ("b", "", "root", 1), ("b", "u2", "b", 1)]
        ),
        "slurm_config": cfg,
    }
    got = computed_at(
        run(frames)["mart_fairshare"], SNAP, ["norm_shares", "effectv_usage", "level_fs", "fairshare"]
    )
    want = expected(
        [
            ("a", "", 0.5, 0.875, None, 2 ** (-1.75)),
            ("a", "u1", 0.5, 0.875, None, 2 ** (-1.75)),
            ("b", "", 0.5, 0.625, None, 2 ** (-1.25)),
            ("b", "u2", 0.5, 0.625, None, 2 ** (-1.25)),
            ("root", "", 1.0, 1.0, None, 0.5),  # UE 1, S 1 -> 2^-1
        ],
        ["norm_shares", "effectv_usage", "level_fs", "fairshare"],
    )
    assert_frame_equal(got, want)


def slurm_decay_loop(
    start: datetime, end: datetime, at: datetime, billing: float, hl: float, period: int = 60
) -> float:
    """Slurm's own bookkeeping (priority_multifactor.c): every PriorityCalcPeriod, all usage is multiplied
    by d^dt with d = 1 - 0.693/hl, then a running job adds run_delta * d^run_delta * billing."""
    d = 1 - 0.693 / hl
    usage = 0.0
    t = start - timedelta(seconds=(start - datetime(2026, 1, 1, tzinfo=UTC)).total_seconds() % period)
    while t < at:
        nxt = min(t + timedelta(seconds=period), at)
        usage *= d ** (nxt - t).total_seconds()
        a, b = max(t, start), min(nxt, end)
        if b > a:
            run_delta = (b - a).total_seconds()
            usage += run_delta * d**run_delta * billing
        t = nxt
    return usage


def test_decay_matches_slurms_calc_period_loop_across_days():
    # One 30-hour job (two local days), billing 4, half-life 1 day, read 2 days after it started.
    hl = 86400.0
    start = datetime(2026, 11, 27, 18, 0, tzinfo=UTC)
    end = start + timedelta(hours=30)
    now = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)
    frames = {"jobs": jobs([("a", "u", start, 30 * 3600, 4)])}
    out = run(frames, now=now, half_life_seconds=hl)["mart_fairshare"]
    got = out.filter((pl.col("as_of") == now) & (pl.col("user") == "u"))["raw_usage"].item()
    want = slurm_decay_loop(start, end, now, 4.0, hl)
    assert got == pytest.approx(want, rel=1e-3)
    # and at a day end (midnight after the job ended), carried from the day-level values
    mid = datetime(2026, 11, 29, 0, 0, tzinfo=UTC)
    got_mid = out.filter((pl.col("as_of") == mid) & (pl.col("user") == "u"))["raw_usage"].item()
    assert got_mid == pytest.approx(slurm_decay_loop(start, end, mid, 4.0, hl), rel=1e-3)
    # without shares collected: Slurm's defaults (Fairshare=1, accounts under root), so the lone user is 1.0
    assert out.filter((pl.col("as_of") == now) & (pl.col("user") == "u"))["fairshare"].item() == 1.0


def test_running_job_accrues_until_now_and_daily_reset():
    # Reset DAILY: yesterday's 1000 s do not count today; today's job is still running (no End) at now.
    yesterday = T0 - timedelta(days=1)
    frames = {"jobs": jobs([("a", "u", yesterday, 1000, 1), ("a", "u", T0, None, 2)])}
    out = run(frames, reset_period="DAILY")["mart_fairshare"]
    at_now = out.filter((pl.col("as_of") == NOW) & (pl.col("user") == "u"))["raw_usage"].item()
    assert at_now == 2 * 3 * 3600  # 3 h at billing 2 since T0
    end_of_yesterday = datetime(2026, 11, 30, tzinfo=UTC)
    prev = out.filter((pl.col("as_of") == end_of_yesterday) & (pl.col("user") == "u"))["raw_usage"].item()
    assert prev == 1000


def test_finished_attempt_without_end_is_not_charged_until_now():
    # slurmctld charges a job while it runs and once at its end (priority_p_job_end, up to end_time), so
    # only a running attempt accrues up to now. No decay; now = T0 + 3 h.
    # u1: COMPLETED but accounting has no End yet (ran while slurmdbd was down) -> 0, not 5 * 3 h.
    # u2: RUNNING since T0 + 2 h at billing 2 -> 2 * 3600 = 7200.
    # u3: PREEMPTED (PreemptMode=CANCEL) after 3 s at billing 20 -> 20 * 3 = 60, the whole attempt.
    # u4: no state recorded, no End, since T0 + 2.5 h at billing 1 -> 1800 (treated as running).
    # u5: 'CANCELLED by 1004' as sacct prints it, no End -> 0.
    rows = [
        ("a", "u1", T0, None, 5),
        ("a", "u2", T0 + timedelta(hours=2), None, 2),
        ("a", "u3", T0, 3, 20),
        ("a", "u4", T0 + timedelta(hours=2, minutes=30), None, 1),
        ("a", "u5", T0, None, 7),
    ]
    states = ["COMPLETED", "RUNNING", "PREEMPTED", None, "CANCELLED by 1004"]
    frames = {"jobs": jobs(rows).with_columns(state=pl.Series(states, dtype=pl.String))}
    out = run(frames)["mart_fairshare"]
    got = out.filter((pl.col("as_of") == NOW) & (pl.col("source") == "computed")).select("user", "raw_usage")
    got = dict(got.iter_rows())
    assert got.get("u1", 0.0) == 0.0
    assert got["u2"] == 7200
    assert got["u3"] == 60
    assert got["u4"] == 1800
    assert got.get("u5", 0.0) == 0.0
    assert (
        out.filter((pl.col("as_of") == NOW) & (pl.col("account") == "root") & (pl.col("user") == ""))[
            "raw_usage"
        ].item()
        == 7200 + 60 + 1800
    )


def test_slurm_duration_parsing():
    df = pl.DataFrame({"v": ["7-00:00:00", "00:05:00", "1-02:03:04", "30", None]})
    got = df.select(parse_slurm_duration(pl.col("v")).alias("s"))["s"].to_list()
    assert got == [7 * 86400.0, 300.0, 86400 + 7200 + 180 + 4.0, 1800.0, None]


def test_decay_factor_is_slurms_approximation():
    lam = pl.select(decay_rate(pl.lit(100.0))).item()
    assert math.exp(-lam) == pytest.approx(1 - 0.693 / 100, rel=1e-12)


def test_drift_starved_account_and_since():
    # a and b each target .5. Every day a runs 900 s, b 100 s and b submits a job: b's 7-day share .1,
    # ratio .2 < .5 -> starved from the first day; a's share .9 -> ratio 1.8 (not above 2.0) -> ok.
    days = [datetime(2026, 11, 27, 1, tzinfo=UTC) + timedelta(days=i) for i in range(4)]
    rows = [("a", "ua", d, 900, 1) for d in days] + [("b", "ub", d, 100, 1) for d in days]
    frames = {
        "jobs": jobs(rows),
        "shares": tree(
            [("a", "", "root", 1), ("a", "ua", "a", 1), ("b", "", "root", 1), ("b", "ub", "b", 1)]
        ),
    }
    drift = run(frames)["mart_fairshare_drift"].filter(pl.col("account") == "b").sort("day")
    assert drift["state"].to_list() == ["starved"] * 4
    assert drift["starved_since"].to_list() == [days[0].date()] * 4
    assert drift["days_starved"].to_list() == [1, 2, 3, 4]
    assert drift["ratio"].to_list() == pytest.approx([0.2] * 4)
    a = run(frames)["mart_fairshare_drift"].filter(pl.col("account") == "a")
    assert set(a["state"]) == {"ok"} and a["usage_share_30d"].to_list() == pytest.approx([0.9] * 4)


# ---------------------------------------------------------------------------------------------------------
# Real Slurm 22.05.8 (tests/fixtures/slurm-22.05-fairshare/, see tests/fixtures/PROVENANCE.md): the test bed's
# `sacct` (live collector command line) and `sshare -a -l -P` of the same capture, taken 6 s after the last
# job ended, and `scontrol show config` (PriorityDecayHalfLife 7 days, PriorityCalcPeriod 1 min).

REAL = FIXTURES / "slurm-22.05-fairshare"
CAPTURED = datetime(2026, 12, 2, 13, 50, 16, tzinfo=UTC)  # mtime of the capture (capture.py, 'final')


def real_frames(at: datetime) -> dict[str, pl.LazyFrame]:
    from zoneinfo import ZoneInfo

    from slurmscope.collectors import sacct as sacct_collector
    from slurmscope.collectors import slurm_config as config_collector
    from slurmscope.collectors import sshare as sshare_collector

    utc = ZoneInfo("UTC")
    jobs = sacct_collector.parse(
        (REAL / "sacct.txt").read_bytes(),
        cluster="slurmbed",
        snapshot_time=CAPTURED,
        tz=utc,
        delimiter="\x1f",
    )
    shares = sshare_collector.parse(
        (REAL / "sshare.txt").read_bytes(), cluster="slurmbed", snapshot_time=at, tz=utc
    )
    cfg = config_collector.parse(
        (REAL / "config.txt").read_bytes(), cluster="slurmbed", snapshot_time=at, tz=utc
    )
    assert shares.quarantine.height == 0 and cfg.quarantine.height == 0
    return {
        "jobs": jobs.tables["jobs"].lazy(),
        "shares": shares.tables["shares"].lazy(),
        "slurm_config": cfg.tables["slurm_config"].lazy(),
    }


def agreement(at: datetime) -> pl.DataFrame:
    # config says 60 s and classic: scontrol show config (7 days, Fair Tree) must win
    p = params(at, decay_half_life_seconds=60, algorithm="classic")
    mart = fs.compute(real_frames(at), p)["mart_fairshare"]
    agree = sshare_agreement(mart).collect()
    assert agree.height == 12, "every association sshare printed has a computed row at the same instant"
    return agree


def test_real_slurm_22_05_raw_usage_and_fair_tree_factor_agree_with_sshare():
    # RawUsage within 1 % or 2 units (sshare truncates) for all 12 associations; FairShare equal.
    agree = agreement(CAPTURED)
    bad = agree.filter(~(pl.col("raw_ok") & pl.col("fairshare_ok")))
    assert bad.height == 0, bad
    by = {(r["account"], r["user"]): r for r in agree.iter_rows(named=True)}
    # read off sshare.txt and sacct.txt: sbdave's five attempts (billing x seconds: 12x40, 16x5, 4x20, 1x2,
    # 20x2 = 682) decayed by Slurm's own calc-period loop to the capture: 681.9; sshare prints 681.
    assert by[("students", "sbdave")]["sshare_raw_usage"] == 681
    t = datetime.fromisoformat
    sbdave = [
        ("13:47:34", "13:48:14", 12),
        ("13:48:14", "13:48:19", 16),
        ("13:47:42", "13:48:02", 4),
        ("13:47:38", "13:47:40", 1),
        ("13:47:38", "13:47:40", 20),
    ]
    want = sum(
        slurm_decay_loop(t(f"2026-12-02T{a}+00:00"), t(f"2026-12-02T{b}+00:00"), CAPTURED, r, 7 * 86400.0)
        for a, b, r in sbdave
    )
    assert want == pytest.approx(681.9, abs=0.05)
    assert by[("students", "sbdave")]["raw_usage"] == pytest.approx(want, rel=1e-4)
    assert by[("pretraining", "sbalice")]["fairshare"] == pytest.approx(2 / 6)
    assert by[("root", "root")]["fairshare"] == 1.0
    assert by[("vision", "sbbob")]["fairshare"] == pytest.approx(4 / 6)


def test_real_slurm_22_05_effective_usage_is_that_of_the_last_calc_period():
    # sshare adds a job's usage when it ends but recomputes EffectvUsage only every PriorityCalcPeriod
    # (60 s). This capture came 6 s after the last job ended (13:50:10) and before the next period, so the
    # account rows still show the ratios of the previous period, which fell in (13:49:16, 13:50:10].
    # No job ended in that span, so our values anywhere in it (here 13:49:16) must match; at the capture
    # instant they must not (the last job moved them), which shows the comparison can fail.
    stale = agreement(CAPTURED - timedelta(seconds=60))
    assert stale.filter(~pl.col("effectv_ok")).height == 0, stale
    fresh = agreement(CAPTURED)
    moved = fresh.filter(~pl.col("effectv_ok"))["account"].to_list()
    assert sorted(moved) == ["infra", "pretraining", "research", "students", "vision"]


# ---------------------------------------------------------------------------------------------------------
# Written marts: idempotent, incremental = full, a late record is picked up (through the runner)


def _seed_db(con, rows: list[tuple]) -> None:
    for i, (account, user, start, seconds) in enumerate(rows):
        con.execute(
            'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, start_time, end_time, account, "user",'
            " billing, cpus, gpus) VALUES ('default', ?, ?, ?, ?, ?, ?, ?, 2, 2, 1)",
            [str(100 + i), 100 + i, start, start, start + timedelta(seconds=seconds), account, user],
        )


def _mart(con) -> list[tuple]:
    return (
        con.execute("SELECT * FROM mart_fairshare ORDER BY ALL").fetchall()
        + con.execute("SELECT * FROM mart_fairshare_drift ORDER BY ALL").fetchall()
    )


def test_runner_writes_are_idempotent_incremental_and_pick_up_late_jobs(con):
    from slurmscope.pipelines.runner import run_pipelines

    from slurmscope.config import load_config

    cfg = load_config(None, env={})
    base = datetime(2026, 3, 1, 10, tzinfo=UTC)
    _seed_db(
        con,
        [("a", "u1", base + timedelta(days=d), 3600) for d in range(9)]
        + [("b", "u2", base + timedelta(days=d, hours=5), 600) for d in range(0, 9, 2)],
    )
    now = datetime(2026, 3, 10, tzinfo=UTC)
    for day in (3, 6, 8, 10):
        run_pipelines(con, cfg, now=datetime(2026, 3, day, tzinfo=UTC), only=["fairshare"])
    incremental = _mart(con)
    run_pipelines(con, cfg, full=True, now=now, only=["fairshare"])
    assert _mart(con) == incremental
    run_pipelines(con, cfg, full=True, now=now, only=["fairshare"])
    assert _mart(con) == incremental
    # A job of 3 March reaches the database after the run of 10 March: the next run sees it.
    q = (
        "SELECT raw_usage FROM mart_fairshare WHERE account = 'b' AND \"user\" = 'u2' "
        "AND as_of = TIMESTAMPTZ '2026-03-10 00:00:00+00' AND source = 'computed'"
    )
    before = con.execute(q).fetchone()[0]
    _seed_db(con, [("b", "u2", datetime(2026, 3, 3, 12, tzinfo=UTC), 1000)])
    run_pipelines(con, cfg, now=now + timedelta(hours=1), only=["fairshare"])
    after = con.execute(q).fetchone()[0]
    # 2 billing x 1000 s, decayed over 6.5 days of a 7-day half-life (Slurm's factor 1 - 0.693/hl)
    lam = -math.log(1 - 0.693 / (7 * 86400))
    added = 2 * (1 - math.exp(-lam * 1000)) / lam * math.exp(-lam * (6.5 * 86400 - 1000))
    assert after - before == pytest.approx(added, rel=1e-6)


def test_day_table_in_a_zone_that_skips_midnight():
    """Havana skips 00:00-01:00 on 12 March 2023, so that day starts at 05:00 UTC: an attempt from 04:00 to
    06:00 UTC is charged an hour on 11 March (23:00 CST) and an hour on 12 March, each decayed to its day's
    end (no decay here: the charge is the raw usage)."""
    start = datetime(2023, 3, 12, 4, tzinfo=UTC)
    frames = {"jobs": jobs([("a", "u", start, 2 * 3600, 1.0)])}
    p = params(start + timedelta(days=2), tz="America/Havana", decay_half_life_seconds=0.0)
    daily = fs.compute(frames, p)["mart_fairshare_daily"].collect().sort("day")
    assert daily.select("day", "charge", "raw").rows() == [
        (datetime(2023, 3, 11).date(), 3600.0, 3600.0),
        (datetime(2023, 3, 12).date(), 3600.0, 3600.0),
    ]
