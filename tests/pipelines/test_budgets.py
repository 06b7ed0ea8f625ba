"""Budgets by period and Slurm's GrpTRESMins allocations (mart_budget_period), expected values by hand: config
budgets over quarters, years and spans of months from the invoices; allocations from the test bed's real
capture (sshare GrpTRESMins and GrpTRESRaw, with the sacct of the same run)."""

from __future__ import annotations

import tempfile
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from slurmscope.collectors.ingest import ingest_files
from slurmscope.pipelines.budgets import config_periods, slurm_reset_period, slurm_seconds, tres_pairs
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from tests.paths import FIXTURES

B = FIXTURES / "slurm-22.05-budgets"
CAPTURED = datetime(2026, 12, 4, 15, 55, 32, tzinfo=UTC)
NOW = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)


def test_periods_of_config_budgets_and_of_slurm_resets():
    assert config_periods("quarter", date(2026, 1, 20), date(2026, 5, 3)) == [
        (date(2026, 1, 1), date(2026, 4, 1)),
        (date(2026, 4, 1), date(2026, 7, 1)),
    ]
    assert config_periods("year", date(2026, 3, 1), date(2026, 3, 1)) == [
        (date(2026, 1, 1), date(2027, 1, 1))
    ]
    span = {"start": "2025-09", "end": "2026-08"}
    assert config_periods(span, date(2026, 1, 1), date(2026, 1, 1)) == [(date(2025, 9, 1), date(2026, 9, 1))]
    assert config_periods({"start": "2026-09", "end": "2026-12"}, date(2026, 1, 1), date(2026, 8, 31)) == []
    # 2026-12-04 is a Friday; Slurm's weekly reset is on Sunday (priority_multifactor.c _next_reset)
    assert slurm_reset_period("WEEKLY", date(2026, 12, 4)) == (date(2026, 11, 29), date(2026, 12, 6))
    assert slurm_reset_period("weekly", date(2026, 11, 29)) == (date(2026, 11, 29), date(2026, 12, 6))
    assert slurm_reset_period("QUARTERLY", date(2026, 12, 4)) == (date(2026, 10, 1), date(2027, 1, 1))
    assert slurm_reset_period("DAILY", date(2026, 12, 4)) == (date(2026, 12, 4), date(2026, 12, 5))
    assert slurm_reset_period("NONE", date(2026, 12, 4)) is None
    assert slurm_reset_period("NOW", date(2026, 12, 4)) is None
    assert slurm_seconds("7-00:00:00") == 604800 and slurm_seconds("00:00:00") == 0
    assert slurm_seconds("90") == 5400 and slurm_seconds("(null)") is None
    assert tres_pairs("billing=6000,gres/gpu=3000") == {"billing": 6000.0, "gres/gpu": 3000.0}
    assert tres_pairs(None) == {} and tres_pairs("cpu=x,gres/gpu:h100=5") == {"gres/gpu:h100": 5.0}


def bed(con, cfg, *, reset: str | None = None, half_life: str | None = None) -> None:
    """The capture's sacct, sshare and scontrol show config; `reset`/`half_life`: a later config snapshot
    as a site running GrpTRESMins as allocations would set it (slurm.conf PriorityUsageResetPeriod,
    PriorityDecayHalfLife)."""
    ingest_files(con, cfg, "sacct", [B / "sacct_budgets.txt"])
    ingest_files(con, cfg, "sshare", [B / "sshare_budgets.txt"], at=CAPTURED)
    ingest_files(con, cfg, "config", [B / "config_budgets.txt"])
    if reset is not None:
        later = CAPTURED + timedelta(minutes=1)
        for key, value in (("PriorityUsageResetPeriod", reset), ("PriorityDecayHalfLife", half_life)):
            con.execute("INSERT INTO slurm_config VALUES ('slurmbed', ?, ?, ?)", [later, key, value])


def rows(con, source: str) -> dict[tuple[str, str], tuple]:
    out = con.execute(
        "SELECT account, budget, unit, period_start, period_end, amount, used, spent, forecast, elapsed_ratio"
        " FROM mart_budget_period WHERE source = ? ORDER BY account, budget",
        [source],
    ).fetchall()
    return {(r[0], r[1]): r[2:] for r in out}


def bed_config():
    return load_config(env={}).with_overrides(cluster={"name": "slurmbed"})


def test_grp_tres_mins_of_the_real_capture_are_allocations_used_as_slurm_counts_them(con):
    """The bed runs PriorityUsageResetPeriod=NONE, PriorityDecayHalfLife=7-0 (config_budgets.txt): Slurm's
    usage never resets, so an allocation has no period, no spent and no forecast; `used` is GrpTRESRaw."""
    cfg = bed_config()
    bed(con, cfg)
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    # limits / 60 -> hours; GrpTRESRaw (minutes) / 60. sbbob's own limit in vision (gres/gpu=60) is a user's
    # limit, not an account's allocation: no row.
    assert rows(con, "slurm") == {
        ("pretraining", "GrpTRESMins:gres/gpu"): ("gpu_hours", None, None, 10.0, 21 / 60, None, None, None),
        ("research", "GrpTRESMins:billing"): ("tres_hours", None, None, 100.0, 56 / 60, None, None, None),
        ("research", "GrpTRESMins:gres/gpu"): ("gpu_hours", None, None, 50.0, 24 / 60, None, None, None),
        ("vision", "GrpTRESMins:billing"): ("tres_hours", None, None, 20.0, 7 / 60, None, None, None),
    }


def test_a_monthly_reset_without_decay_gives_the_period_what_slurmscope_counted_and_a_forecast(con):
    cfg = bed_config()
    bed(con, cfg, reset="MONTHLY", half_life="00:00:00")
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    got = rows(con, "slurm")
    dec, jan = date(2026, 12, 1), date(2027, 1, 1)
    # 3 days 16 hours of December's 31: 316800 / 2678400 s
    elapsed = 316800 / 2678400
    research = got[("research", "GrpTRESMins:gres/gpu")]
    # research's subtree: pretraining (8 + 4 + 2 GPUs) and vision (2 GPUs), 91 s each: 1456 GPU-s
    assert research[:4] == ("gpu_hours", dec, jan, 50.0)
    assert research[5] == pytest.approx(1456 / 3600)
    assert research[7] == pytest.approx(elapsed)
    assert research[6] == pytest.approx((24 / 60) / elapsed)  # Slurm's used at December's mean rate
    assert got[("pretraining", "GrpTRESMins:gres/gpu")][5] == pytest.approx(1274 / 3600)
    assert got[("research", "GrpTRESMins:billing")][5] is None  # billing-hours: Slurm's own count only
    # Ground truth: Slurm's GrpTRESRaw is our GPU-seconds in whole minutes (truncated; 2 minutes of a 7-day
    # half-life decay is 0.01 %): used <= spent < used + 1 minute, for each GPU allocation.
    for key in (("research", "GrpTRESMins:gres/gpu"), ("pretraining", "GrpTRESMins:gres/gpu")):
        used, spent = got[key][4], got[key][5]
        assert used <= spent < used + 1 / 60, key
    # Two incremental runs later the window starts on 9 December (the previous run, 9 December 16:00, minus
    # the 10-minute margin, from midnight): the 4th's GPU-seconds come from mart_cost_daily, the days before the
    # window, and the subtree's spent is unchanged.
    run_pipelines(con, cfg, now=NOW + timedelta(days=5), only=["cost"])
    run_pipelines(con, cfg, now=NOW + timedelta(days=5, hours=1), only=["cost"])
    start = con.execute("SELECT max(window_start) FROM pipeline_runs WHERE pipeline = 'cost'").fetchone()[0]
    assert start.date() == date(2026, 12, 9)
    later = rows(con, "slurm")[("research", "GrpTRESMins:gres/gpu")]
    assert later[5] == pytest.approx(1456 / 3600) and later[7] == pytest.approx(
        (316800 + 5 * 86400 + 3600) / 2678400
    )


def test_decaying_usage_has_no_forecast(con):
    cfg = bed_config()
    bed(con, cfg, reset="MONTHLY", half_life="7-00:00:00")
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    research = rows(con, "slurm")[("research", "GrpTRESMins:gres/gpu")]
    assert research[1] == date(2026, 12, 1) and research[6] is None


def test_exporter_serves_allocations_beside_config_budgets(con):
    from slurmscope.exporter import snapshot

    cfg = bed_config()
    bed(con, cfg)
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    snap = snapshot(con, cfg, NOW)
    assert sorted(snap.samples["slurmscope_account_budget_spent_ratio"]) == [
        (("slurmbed", "pretraining", "GrpTRESMins:gres/gpu"), pytest.approx(21 / 600)),
        (("slurmbed", "research", "GrpTRESMins:billing"), pytest.approx(56 / 6000)),
        (("slurmbed", "research", "GrpTRESMins:gres/gpu"), pytest.approx(24 / 3000)),
        (("slurmbed", "vision", "GrpTRESMins:billing"), pytest.approx(7 / 1200)),
    ]
    assert snap.samples["slurmscope_account_budget_forecast_ratio"] == []  # usage never resets on the bed


PERIODS = """
[billing.rates]
h100 = 2.0
[budgets]
q = { period = "quarter", usd = 100.0 }
y = { period = "year", gpu_hours = 50.0 }
s = { period = { start = "2026-02", end = "2026-03" }, usd = 30.0, gpu_hours = 10.0 }
m = { usd_per_month = 25.0 }
"""


def job(con, job_id, account, start, hours, gpus=1):
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", qos, state,'
        " start_time, end_time, gpus, gpu_type) VALUES ('default', ?, ?, ?, ?, 'u', 'gpu', 'normal', 'COMPLETED',"
        " ?, ?, ?, 'h100')",
        [str(job_id), job_id, start, account, start, start + timedelta(hours=hours), gpus],
    )


def periods_config():
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "slurmscope.toml"
        path.write_text(PERIODS)
        return load_config(path, env={})


def test_config_budgets_by_quarter_year_span_and_month(con):
    """$2/GPU-h. q: 10 GPU-h in January ($20), 20 in February ($40), 5 in April ($10); y, s and m likewise
    per their jobs. now = 16 April, 15 of the second quarter's 91 days."""
    jan, feb, mar, apr = (datetime(2026, m, 10, tzinfo=UTC) for m in (1, 2, 3, 4))
    for i, (acct, start, hours) in enumerate(
        [("q", jan, 10), ("q", feb, 20), ("q", apr, 5), ("y", jan, 4), ("y", apr, 6), ("s", jan, 1)]
        + [("s", feb, 3), ("s", mar, 2), ("s", apr, 7), ("m", mar, 5), ("m", apr, 2)]
    ):
        job(con, i + 1, acct, start, hours)
    now = datetime(2026, 4, 16, tzinfo=UTC)
    cfg = periods_config()
    run_pipelines(con, cfg, now=now, only=["cost"], full=True)
    got = rows(con, "config")
    q1, q2 = (date(2026, 1, 1), date(2026, 4, 1)), (date(2026, 4, 1), date(2026, 7, 1))
    # q: Q1 = January + February = $60 of $100, ended: forecast = spent; Q2 = $10 after 15/91 of it,
    # forecast 10 x 91 / 15 = $60.67
    q = con.execute(
        "SELECT period_start, period_end, amount, used, spent, forecast, elapsed_ratio FROM mart_budget_period"
        " WHERE account = 'q' ORDER BY period_start"
    ).fetchall()
    assert q == [
        (*q1, 100.0, 60.0, 60.0, 60.0, 1.0),
        (*q2, 100.0, 10.0, 10.0, pytest.approx(10 * 91 / 15), pytest.approx(15 / 91)),
    ]
    # y: 4 + 6 = 10 GPU-h of 50 in 2026, 105 of 365 days passed: forecast 10 x 365 / 105
    assert got[("y", "gpu_hours")] == (
        "gpu_hours",
        date(2026, 1, 1),
        date(2027, 1, 1),
        50.0,
        10.0,
        10.0,
        pytest.approx(10 * 365 / 105),
        pytest.approx(105 / 365),
    )
    # s: February and March only (January and April are outside the span): 5 GPU-h, $10; ended.
    assert got[("s", "usd")][1:] == (date(2026, 2, 1), date(2026, 4, 1), 30.0, 10.0, 10.0, 10.0, 1.0)
    assert got[("s", "gpu_hours")][3:6] == (10.0, 5.0, 5.0)
    # m: one row per month from its first invoiced month (March) to April: $10, then $4 after 15 of 30 days
    m = con.execute(
        "SELECT period_start, used, forecast FROM mart_budget_period WHERE account = 'm' ORDER BY period_start"
    ).fetchall()
    assert m == [(date(2026, 3, 1), 10.0, 10.0), (date(2026, 4, 1), 4.0, pytest.approx(8.0))]
    # only the monthly budget has rows in mart_budget_monthly
    assert {r[0] for r in con.execute("SELECT DISTINCT account FROM mart_budget_monthly").fetchall()} == {"m"}


def test_an_incremental_run_rewrites_the_same_periods(con):
    jan, apr = datetime(2026, 1, 10, tzinfo=UTC), datetime(2026, 4, 10, tzinfo=UTC)
    job(con, 1, "q", jan, 10)
    job(con, 2, "q", apr, 5)
    cfg = periods_config()
    now = datetime(2026, 4, 16, tzinfo=UTC)
    run_pipelines(con, cfg, now=now, only=["cost"], full=True)
    query = "SELECT * EXCLUDE (as_of, usage_as_of) FROM mart_budget_period ORDER BY ALL"
    full = con.execute(query).fetchall()
    run_pipelines(con, cfg, now=now, only=["cost"])
    assert con.execute(query).fetchall() == full
    assert {(r[1], r[5]) for r in full if r[1] == "q"} == {("q", date(2026, 1, 1)), ("q", date(2026, 4, 1))}
