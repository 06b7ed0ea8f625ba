"""Budgets: burn-down and month-end forecast per account (config `budgets`, mart_budget_monthly), with the
expected values worked out by hand in the comments."""

from __future__ import annotations

import tempfile
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import ConfigError, load_config

FEB = datetime(2026, 2, 1, tzinfo=UTC)


def job(con, job_id, account, gpus, start, hours):
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", qos, state,'
        " start_time, end_time, gpus, gpu_type) VALUES ('default', ?, ?, ?, ?, 'u', 'gpu', 'normal', 'COMPLETED',"
        " ?, ?, ?, 'h100')",
        [str(job_id), job_id, start, account, start, start + timedelta(hours=hours), gpus],
    )


BUDGETS = """
[billing.rates]
h100 = 2.0
[budgets]
a = { usd_per_month = 1000.0 }
b = { gpu_hours_per_month = 10.0 }
d = { usd_per_month = 50.0, gpu_hours_per_month = 5.0 }
"""


def cfg():
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "slurmscope.toml"
        path.write_text(BUDGETS)
        return load_config(path, env={})


def rows(con):
    return con.execute(
        "SELECT month, account, budget_usd, budget_gpu_hours, spent_usd, spent_gpu_hours, elapsed_ratio,"
        " forecast_usd, forecast_gpu_hours FROM mart_budget_monthly ORDER BY month, account"
    ).fetchall()


def seed(con):
    job(con, 1, "a", 1, FEB + timedelta(days=1), 100)  # 100 GPU-h x $2 = $200
    job(con, 2, "b", 2, FEB + timedelta(days=2), 1.5)  # 3 GPU-h = $6
    job(con, 3, "c", 1, FEB + timedelta(days=3), 1)  # no budget: no row


def test_burn_down_and_forecast_a_week_into_the_month(con):
    seed(con)
    run_pipelines(con, cfg(), now=FEB + timedelta(days=7), only=["cost"], full=True)
    # 7 of February's 28 days: elapsed 0.25. a: $200 spent, forecast 200 / 0.25 = $800 of $1000 (under).
    # b: 3 GPU-h, forecast 12 of 10 (over). d: budgeted, nothing spent: forecast 0.
    m = date(2026, 2, 1)
    assert rows(con) == [
        (m, "a", 1000.0, None, 200.0, 100.0, 0.25, 800.0, 400.0),
        (m, "b", None, 10.0, 6.0, 3.0, 0.25, 24.0, 12.0),
        (m, "d", 50.0, 5.0, 0.0, 0.0, 0.25, 0.0, 0.0),
    ]


def test_no_forecast_in_the_first_day_and_spent_is_the_forecast_once_the_month_ended(con):
    job(con, 1, "a", 1, FEB, 6)  # $12 in the first 12 hours
    run_pipelines(con, cfg(), now=FEB + timedelta(hours=12), only=["cost"], full=True)
    first = {r[1]: r for r in rows(con)}
    assert first["a"][4] == 12.0 and first["a"][6] == pytest.approx(0.5 / 28)
    assert first["a"][7] is None  # 12 h x 56 would forecast $672 from one job

    run_pipelines(con, cfg(), now=datetime(2026, 3, 2, tzinfo=UTC), only=["cost"], full=True)
    feb = {r[1]: r for r in rows(con) if r[0] == date(2026, 2, 1)}
    mar = {r[1]: r for r in rows(con) if r[0] == date(2026, 3, 1)}
    assert feb["a"][4:] == (12.0, 6.0, 1.0, 12.0, 6.0)
    assert mar["a"][4:] == (0.0, 0.0, pytest.approx(1 / 31), 0.0, 0.0)  # one day of March, nothing spent


def test_budget_keys_are_validated(tmp_path):
    path = tmp_path / "s.toml"
    for text, key in [
        ("[budgets.a]\nusd_per_mont = 5\n", "budgets.a"),  # unknown key: did you mean usd_per_month?
        ('[budgets.a]\nusd_per_month = "lots"\n', "budgets.a.usd_per_month"),
        ("[budgets.a]\nusd_per_month = 0\n", "budgets.a.usd_per_month"),
        ("[budgets]\na = 5\n", "budgets.a"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(path, env={})


def test_exporter_serves_budget_spent_and_forecast_ratios_for_the_month_of_now(con):
    from slurmscope.exporter import snapshot

    seed(con)
    now = FEB + timedelta(days=7)
    run_pipelines(con, cfg(), now=now, only=["cost"], full=True)
    snap = snapshot(con, cfg(), now)
    budget = sorted(snap.samples["slurmscope_account_budget_usd"])
    spent = sorted(snap.samples["slurmscope_account_budget_spent_ratio"])
    forecast = sorted(snap.samples["slurmscope_account_budget_forecast_ratio"])
    assert budget == [(("default", "a"), 1000.0), (("default", "d"), 50.0)]
    # a: $200 of $1000 = 0.2, forecast $800 = 0.8; b: 3 of 10 GPU-h = 0.3, forecast 12 = 1.2; d: 0 of both.
    assert spent == [
        (("default", "a", "usd"), 0.2),
        (("default", "b", "gpu_hours"), pytest.approx(0.3)),
        (("default", "d", "gpu_hours"), 0.0),
        (("default", "d", "usd"), 0.0),
    ]
    assert forecast == [
        (("default", "a", "usd"), 0.8),
        (("default", "b", "gpu_hours"), pytest.approx(1.2)),
        (("default", "d", "gpu_hours"), 0.0),
        (("default", "d", "usd"), 0.0),
    ]
