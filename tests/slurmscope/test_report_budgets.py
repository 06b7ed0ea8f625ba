"""The report's budget section: config budgets used through the month's end from the invoices (stable after
later runs), and Slurm's GrpTRESMins allocations as the month's last sshare snapshot counted them (the test
bed's real capture). Expected values by hand in the comments."""

from __future__ import annotations

import csv
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from slurmscope.collectors.ingest import ingest_files
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.report import build_report
from tests.paths import FIXTURES

CONFIG = """
[billing.rates]
h100 = 2.0
[budgets]
q = { period = "quarter", usd = 100.0 }
"""


def job(con, job_id, account, start, hours, cluster="default"):
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", qos, state,'
        " start_time, end_time, gpus, gpu_type) VALUES (?, ?, ?, ?, ?, 'u', 'gpu', 'normal', 'COMPLETED',"
        " ?, ?, 1, 'h100')",
        [cluster, str(job_id), job_id, start, account, start, start + timedelta(hours=hours)],
    )


def budgets_csv(con, cfg, month: str, out: Path) -> list[dict]:
    build_report(con, cfg, month=month, out_dir=out, formats=["csv", "html"])
    with (out / "budgets.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_a_quarterly_budget_month_by_month_and_unchanged_by_later_runs(con, tmp_path):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "s.toml").write_text(CONFIG)
        cfg = load_config(Path(d) / "s.toml", env={})
    # $2/GPU-h: January 10 GPU-h ($20), February 20 ($40), April 5 ($10)
    for i, (m, hours) in enumerate([(1, 10), (2, 20), (4, 5)]):
        job(con, i + 1, "q", datetime(2026, m, 10, tzinfo=UTC), hours)
    run_pipelines(con, cfg, now=datetime(2026, 4, 16, tzinfo=UTC), only=["cost"], full=True)
    feb = budgets_csv(con, cfg, "2026-02", tmp_path / "feb")
    # Q1 at February's end: $40 this month, $60 since 1 January; 59 of the quarter's 90 days passed, so the
    # quarter ends at 60 x 90 / 59 = $91.53 at this pace
    assert [(r["budget"], r["period_start"], r["period_end"], r["amount"]) for r in feb] == [
        ("usd", "2026-01-01", "2026-04-01", "100.000000")
    ]
    assert float(feb[0]["this_month"]) == 40.0 and float(feb[0]["used_to_month_end"]) == 60.0
    assert float(feb[0]["elapsed_at_month_end"]) == pytest.approx(59 / 90)
    assert float(feb[0]["forecast"]) == pytest.approx(60 * 90 / 59)
    html = (tmp_path / "feb" / "report.html").read_text()
    assert "Budgets and allocations" in html and "2026-01 to 2026-03" in html and "91.5%" in html
    apr = budgets_csv(con, cfg, "2026-04", tmp_path / "apr")
    # Q2 at April's end: $10 of $100 after 30 of 91 days: forecast 10 x 91 / 30 = $30.33
    assert (apr[0]["period_start"], float(apr[0]["used_to_month_end"])) == ("2026-04-01", 10.0)
    assert float(apr[0]["forecast"]) == pytest.approx(10 * 91 / 30)
    # A run six weeks later (more April and May usage) leaves February's section as it was.
    job(con, 4, "q", datetime(2026, 5, 2, tzinfo=UTC), 8)
    run_pipelines(con, cfg, now=datetime(2026, 5, 30, tzinfo=UTC), only=["cost"])
    assert budgets_csv(con, cfg, "2026-02", tmp_path / "feb2") == feb


def test_slurm_allocations_as_the_month_s_last_sshare_counted_them(con, tmp_path):
    b = FIXTURES / "slurm-22.05-budgets"
    cfg = load_config(env={}).with_overrides(cluster={"name": "slurmbed"})
    ingest_files(con, cfg, "sacct", [b / "sacct_budgets.txt"])
    ingest_files(con, cfg, "sshare", [b / "sshare_budgets.txt"], at="2026-12-04T15:55:32Z")
    run_pipelines(con, cfg, now=datetime(2026, 12, 4, 16, 0, tzinfo=UTC), only=["cost"], full=True)
    rows = budgets_csv(con, cfg, "2026-12", tmp_path / "dec")
    # research: GrpTRESMins billing=6000 (100 h), GrpTRESRaw billing=56 (0.9333 h); gres/gpu=3000 (50 h), 24
    # (0.4 h). pretraining gres/gpu 600 -> 10 h, 21 -> 0.35 h; vision billing 1200 -> 20 h, 7 -> 0.1167 h.
    got = {(r["account"], r["budget"]): (float(r["amount"]), float(r["used_to_month_end"])) for r in rows}
    assert got == {
        ("pretraining", "GrpTRESMins:gres/gpu"): (10.0, pytest.approx(21 / 60, abs=1e-6)),
        ("research", "GrpTRESMins:billing"): (100.0, pytest.approx(56 / 60, abs=1e-6)),
        ("research", "GrpTRESMins:gres/gpu"): (50.0, pytest.approx(24 / 60, abs=1e-6)),
        ("vision", "GrpTRESMins:billing"): (20.0, pytest.approx(7 / 60, abs=1e-6)),
    }
    assert {r["source"] for r in rows} == {"slurm"} and {r["usage_as_of"] for r in rows} == {
        "2026-12-04T15:55:32+00:00"
    }
    html = (tmp_path / "dec" / "report.html").read_text()
    assert (
        "2026-12-04 15:55 UTC" in html
        and "<td>research</td><td>gres/gpu</td><td>50.00 GPU-hours</td>" in html
    )
    # November has no sshare snapshot: no allocation shown for it (nor any budget)
    empty = tmp_path / "nov"
    job(con, 99, "x", datetime(2026, 11, 5, tzinfo=UTC), 1, "slurmbed")
    run_pipelines(con, cfg, now=datetime(2026, 12, 4, 16, 0, tzinfo=UTC), only=["cost"], full=True)
    assert budgets_csv(con, cfg, "2026-11", empty) == []
    assert "No budget (config budgets) and no GrpTRESMins" in (empty / "report.html").read_text()
