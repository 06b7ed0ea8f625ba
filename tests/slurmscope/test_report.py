"""The monthly report: numbers equal the marts, totals reconcile, and the HTML renders in a real browser."""

from __future__ import annotations

import csv
import shutil
import subprocess
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.report import build_report, pseudonym
from tests.pngcheck import distinct_colours

MONTHLY = [
    # month, account, user, gpu_hours, cost, share, version, frozen
    (date(2026, 10, 1), "pretraining", "alice", 100.0, "200.00", 0.5, 1, True),
    (date(2026, 10, 1), "vision", "bob", 100.0, "200.00", 0.5, 1, True),
    (date(2026, 11, 1), "pretraining", "alice", 300.0, "600.01", 0.6, 1, True),
    (date(2026, 11, 1), "pretraining", "carol", 50.0, "99.99", 0.1, 1, True),
    (date(2026, 11, 1), "vision", "bob", 150.0, "300.00", 0.3, 1, True),
    # a re-issue of November: the report must use version 2 only
    (date(2026, 11, 1), "pretraining", "alice", 310.0, "620.00", 0.62, 2, True),
    (date(2026, 11, 1), "pretraining", "carol", 40.0, "80.00", 0.08, 2, True),
    (date(2026, 11, 1), "vision", "bob", 150.0, "300.00", 0.30, 2, True),
]


def _seed(db: Path) -> None:
    con = connect(db)
    issued = datetime(2026, 12, 1, tzinfo=timezone.utc)
    for m, acct, user, hours, cost, share, version, frozen in MONTHLY:
        con.execute(
            'INSERT INTO mart_cost_monthly (cluster, month, account, "user", gpu_hours, cost_usd, share,'
            " version, frozen, issued_at) VALUES ('c1', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [m, acct, user, hours, Decimal(cost), share, version, frozen, issued],
        )
    for day in (date(2026, 11, 1), date(2026, 11, 2)):
        con.execute(
            'INSERT INTO mart_capacity_daily (cluster, day, "partition", gpu_model, capacity_gpu_seconds,'
            " allocated_gpu_seconds, idle_gpu_seconds, down_gpu_seconds, reserved_gpu_seconds, capacity_cost_usd,"
            " allocated_cost_usd, idle_cost_usd, down_cost_usd, reserved_cost_usd, powered_down_gpu_seconds)"
            " VALUES ('c1', ?, 'gpu', 'h100', 691200, 400000, 200000, 51200, 40000, 1536.00, 888.89, 444.44,"
            " 113.78, 88.89, 0)",
            [day],
        )
        for acct, secs in (("pretraining", 300000.0), ("vision", 100000.0)):
            con.execute(
                'INSERT INTO mart_cost_daily (cluster, day, account, "user", "partition", qos,'
                " gpu_model, gpu_seconds, cost_usd, failed_gpu_seconds, failed_cost_usd,"
                " requeued_gpu_seconds, requeued_cost_usd, running_gpu_seconds)"
                " VALUES ('c1', ?, ?, 'u', 'gpu', 'normal', 'h100', ?, ?, ?, ?, 0, 0, 0)",
                [day, acct, secs, secs / 3600 * 2, secs / 10, secs / 36000 * 2],
            )
        con.execute(
            "INSERT INTO mart_job_outcomes_daily VALUES ('c1', ?, 'gpu', 'vision', 'COMPLETED', 10, 20.0)",
            [day],
        )
        con.execute(
            "INSERT INTO mart_job_outcomes_daily VALUES ('c1', ?, 'gpu', 'vision', 'NODE_FAIL', 2, 5.0)",
            [day],
        )
        con.execute(
            "INSERT INTO mart_wait_times VALUES ('c1', ?, 'gpu', 'vision', '5-8', 'h100', 12, 60, 600, 900, 200, 1000)",
            [day],
        )
    con.close()


@pytest.fixture
def report_dir(tmp_path):
    db = tmp_path / "r.duckdb"
    _seed(db)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["--db", str(db), "--cluster", "c1", "report", "--month", "2026-11", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    return out


def _csv(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_chargeback_uses_latest_version_and_total_row_is_the_sum(report_dir):
    rows = _csv(report_dir / "chargeback_accounts.csv")
    body, total = rows[:-1], rows[-1]
    assert {r["account"]: r["cost_usd"] for r in body} == {"pretraining": "700.00", "vision": "300.00"}
    assert total["account"] == "TOTAL"
    assert Decimal(total["cost_usd"]) == sum(Decimal(r["cost_usd"]) for r in body) == Decimal("1000.00")
    # month over month against October's 200.00 each
    mom = {r["account"]: float(r["mom_change"]) for r in body}
    assert mom == pytest.approx({"pretraining": 2.5, "vision": 0.5})
    users = _csv(report_dir / "chargeback_users.csv")
    assert [(u["user"], u["cost_usd"]) for u in users[:-1]] == [
        ("alice", "620.00"),
        ("bob", "300.00"),
        ("carol", "80.00"),
    ]
    assert users[-1]["cost_usd"] == "1000.00"


def test_capacity_csv_equals_the_mart_and_reconciles(report_dir):
    rows = _csv(report_dir / "capacity.csv")
    gpu = rows[0]
    assert float(gpu["capacity_gpu_hours"]) == pytest.approx(2 * 691200 / 3600)
    assert Decimal(gpu["capacity_cost_usd"]) == Decimal("3072.00")
    parts = sum(Decimal(gpu[f"{k}_cost_usd"]) for k in ("allocated", "idle", "down", "reserved"))
    assert parts == Decimal(gpu["capacity_cost_usd"])
    assert rows[-1]["partition"] == "TOTAL" and rows[-1]["capacity_cost_usd"] == "3072.00"


def test_pseudonymised_users_are_stable_and_hide_names(tmp_path):
    db = tmp_path / "r.duckdb"
    _seed(db)
    cfg = load_config(env={"SLURMSCOPE_REPORT_PSEUDONYMISE_USERS": "true", "SLURMSCOPE_CLUSTER_NAME": "c1"})
    con = connect(db, read_only=True)
    build_report(con, cfg, month="2026-11", out_dir=tmp_path / "p", formats=["csv", "html"])
    con.close()
    text = (tmp_path / "p" / "chargeback_users.csv").read_text() + (
        tmp_path / "p" / "report.html"
    ).read_text()
    assert "alice" not in text and pseudonym("alice", "c1") in text
    assert pseudonym("alice", "c1") == pseudonym("alice", "c1") != pseudonym("alice", "c2")


def test_bad_month_is_a_clear_error(tmp_path):
    db = tmp_path / "r.duckdb"
    _seed(db)
    res = CliRunner().invoke(
        main, ["--db", str(db), "report", "--month", "Nov", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code != 0 and "YYYY-MM" in res.output


CHROMIUM = shutil.which("chromium")
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--log-level=0",
]


def screenshot(page: Path, png: Path, profile: Path) -> str:
    """Render page in headless Chromium; return its log, where console messages appear as INFO:CONSOLE."""
    proc = subprocess.run(
        [
            CHROMIUM,
            *CHROME_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            "--window-size=1000,2400",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert png.exists(), proc.stderr[-2000:]
    return proc.stderr


@pytest.mark.chromium
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
def test_report_renders_charts_in_headless_chromium(report_dir, tmp_path):
    log = screenshot(report_dir / "report.html", tmp_path / "shot.png", tmp_path / "profile")
    assert "CONSOLE" not in log, log
    # A page of text on white has a handful of colours; the charts' palette and anti-aliasing add many.
    assert distinct_colours((tmp_path / "shot.png").read_bytes()) > 40


@pytest.mark.chromium
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
def test_the_browser_check_catches_errors_and_blank_pages(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>notDefined()</script></body></html>")
    log = screenshot(bad, tmp_path / "bad.png", tmp_path / "profile")
    assert "CONSOLE" in log
    assert distinct_colours((tmp_path / "bad.png").read_bytes()) < 5


def test_cost_per_useful_gpu_hour_scales_by_the_sampled_useful_share():
    """Telemetry from a few nodes must not be divided into the whole month's cost."""
    from slurmscope.report import ReportData

    d = ReportData(cluster="c", month=date(2026, 11, 1))
    d.accounts = [
        {
            "account": "a",
            "gpu_hours": 1000.0,
            "cost_usd": Decimal("2000.00"),
            "share": 1.0,
            "prev_cost_usd": Decimal(0),
            "mom_change": None,
        }
    ]
    d.used_gpu_hours, d.sampled_allocated_gpu_hours = 30.0, 40.0  # 75 % busy where sampled
    t = d.totals
    assert t["cost_per_gpu_hour"] == Decimal("2")
    assert t["useful_share"] == pytest.approx(0.75)
    assert float(t["cost_per_useful_gpu_hour"]) == pytest.approx(2 / 0.75)


def test_useful_share_idle_dollars_and_energy_come_from_the_cost_efficiency_mart(tmp_path):
    from slurmscope.report import collect_data

    db = tmp_path / "r.duckdb"
    _seed(db)
    con = connect(db)
    # day, account, charged s, $, sampled s, sampled $, idle s, idle $, useful s, share, $/useful h, J, kWh, $
    for day, acct, sampled, useful, idle, kwh in (
        (date(2026, 11, 1), "pretraining", 7200.0, 5400.0, 360.0, 2.0),
        (date(2026, 11, 2), "vision", 3600.0, 1800.0, 1800.0, 0.5),
    ):
        con.execute(
            "INSERT INTO mart_cost_efficiency_daily (cluster, day, account, gpu_seconds, cost_usd,"
            " sampled_gpu_seconds, sampled_cost_usd, idle_gpu_seconds, idle_cost_usd, useful_gpu_seconds,"
            " useful_share, cost_per_useful_gpu_hour, energy_joules, energy_kwh, energy_cost_usd)"
            " VALUES ('c1', ?, ?, 0, 0, ?, 0, ?, ?, ?, NULL, NULL, ?, ?, ?)",
            [day, acct, sampled, idle, idle / 1800, useful, kwh * 3.6e6, kwh, kwh * 0.2],
        )
    d = collect_data(con, "c1", date(2026, 11, 1))
    con.close()
    # useful 5400 + 1800 s over 7200 + 3600 s sampled: 2 h / 3 h
    assert (d.used_gpu_hours, d.sampled_allocated_gpu_hours) == pytest.approx((2.0, 3.0))
    assert d.totals["useful_share"] == pytest.approx(2 / 3)
    waste = {w["account"]: w for w in d.waste}
    assert waste["vision"]["alloc_idle_gpu_hours"] == pytest.approx(0.5)
    assert waste["vision"]["alloc_idle_cost_usd"] == pytest.approx(1.0)
    assert waste["pretraining"]["energy_kwh"] == pytest.approx(2.0)
    assert waste["pretraining"]["energy_cost_usd"] == pytest.approx(0.4)


def test_spread_idle_capacity_in_the_charges_is_shown(tmp_path):
    from slurmscope.report import collect_data, render_html

    db = tmp_path / "r.duckdb"
    _seed(db)
    con = connect(db)
    d0 = collect_data(con, "c1", date(2026, 11, 1))
    assert "spread over accounts" not in render_html(d0, d0.users)  # billing.idle_cost = separate: no line
    con.execute("UPDATE mart_cost_monthly SET spread_cost_usd = 25.5 WHERE version = 2")  # 3 rows of November
    con.execute("UPDATE mart_cost_monthly SET spread_cost_usd = 99 WHERE version = 1")  # superseded: ignored
    d = collect_data(con, "c1", date(2026, 11, 1))
    con.close()
    assert d.spread_cost_usd == Decimal("76.50")
    assert "of which unallocated capacity spread over accounts (USD)</td><td>76.50" in render_html(d, d.users)
