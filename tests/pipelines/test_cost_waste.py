"""Waste by the day attempts ended (mart_cost_waste_daily): a month's failed and requeued GPU-hours are final
once it has ended, whatever the attempts still running then turn out to do; values worked out by hand."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config

H = timedelta(hours=1)
MONTH_END = datetime(2026, 12, 1, tzinfo=UTC)


def job(con, job_id, submit, gpus, start, end, state, *, account="a", billing=None):
    con.execute(
        'INSERT OR REPLACE INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition",'
        " qos, state, start_time, end_time, gpus, gpu_type, billing)"
        " VALUES ('default', ?, ?, ?, ?, 'u', 'gpu', 'normal', ?, ?, ?, ?, 'h100', ?)",
        [str(job_id), job_id, submit, account, state, start, end, gpus, billing],
    )


WASTE = (
    "SELECT day, account, attempts, failed_attempts, failed_gpu_seconds, failed_cost_usd, requeued_attempts,"
    " requeued_gpu_seconds, requeued_cost_usd FROM mart_cost_waste_daily ORDER BY ALL"
)


def test_an_attempt_counts_whole_on_the_day_it_ended(con):
    cfg = load_config(env={}).with_overrides(billing={"rates": {"h100": 2.0}})
    t = MONTH_END - 10 * H
    # Job 1: 1 GPU, failed after 2 h on 30 Nov. Job 2: 2 GPUs from 30 Nov 20:00, running at the month's end.
    job(con, 1, t, 1, t, t + 2 * H, "FAILED")
    job(con, 2, t, 2, MONTH_END - 4 * H, None, "RUNNING", account="b")
    run_pipelines(con, cfg, now=MONTH_END, full=True)
    november = con.execute(WASTE).fetchall()
    # Job 1: 2 GPU-h = 7200 GPU-s, $4. Job 2 has not ended: not in any day yet.
    assert november == [(date(2026, 11, 30), "a", 1, 1, 7200.0, 4.0, 0, 0.0, 0.0)]
    # Job 2 ends NODE_FAIL at 02:00 on 1 Dec and is requeued (a second attempt, submitted then).
    job(con, 2, t, 2, MONTH_END - 4 * H, MONTH_END + 2 * H, "NODE_FAIL", account="b")
    job(con, 2, MONTH_END + 2 * H, 2, None, None, "PENDING", account="b")
    run_pipelines(con, cfg, now=MONTH_END + 48 * H)
    # November is unchanged; 1 Dec carries job 2 whole: 2 GPUs x 6 h = 43200 GPU-s = $24, failed and requeued.
    assert con.execute(WASTE).fetchall() == [
        *november,
        (date(2026, 12, 1), "b", 1, 1, 43200.0, 24.0, 1, 43200.0, 24.0),
    ]


def test_billing_tres_prices_the_waste_as_it_charged_it(con):
    # 1 GPU holding billing 8 with GRES/gpu=2: 4 GPU-equivalents; 1 h failed = 3600 GPU-s but $8 at $2/GPU-h.
    cfg = load_config(env={}).with_overrides(
        billing={
            "rates": {"h100": 2.0},
            "charge_by": "billing_tres",
            "tres_billing_weights": {"gpu": "GRES/gpu=2.0"},
        }
    )
    t = datetime(2026, 11, 3, tzinfo=UTC)
    job(con, 1, t, 1, t, t + H, "TIMEOUT", billing=8)
    run_pipelines(con, cfg, now=t + 2 * H, full=True)
    assert con.execute(WASTE).fetchall() == [(date(2026, 11, 3), "a", 1, 1, 3600.0, 8.0, 0, 0.0, 0.0)]
