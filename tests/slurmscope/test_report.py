"""The monthly report: numbers equal the marts, totals reconcile, and the HTML renders in a real browser."""

from __future__ import annotations

import csv
import html
import re
import shutil
import subprocess
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.report import build_report, pseudonym
from tests.htmltables import row, tables
from tests.pngcheck import decode_png, distinct_colours, region_colours

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
            "INSERT INTO mart_job_outcomes_daily VALUES ('c1', ?, 'gpu', 'vision', 'COMPLETED', 10, 20.0, 'none')",
            [day],
        )
        con.execute(
            "INSERT INTO mart_job_outcomes_daily VALUES ('c1', ?, 'gpu', 'vision', 'NODE_FAIL', 2, 5.0, 'system')",
            [day],
        )
        con.execute(
            "INSERT INTO mart_wait_times VALUES ('c1', ?, 'gpu', 'vision', '5-8', 'h100', 12, 60, 600, 900, 200, 1000)",
            [day],
        )
        con.execute(
            "INSERT INTO mart_cost_rates_daily VALUES ('c1', ?, 'gpu', 'h100', 2.0, 'h100', 'rate',"
            " NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
            [day],
        )
        for acct, failed in (("pretraining", 3600.0), ("vision", 0.0)):
            con.execute(
                "INSERT INTO mart_cost_waste_daily VALUES ('c1', ?, ?, 5, ?, ?, ?, 0, 0, 0)",
                [day, acct, int(failed > 0), failed, failed / 3600 * 2],
            )
    # November's reconciliation, consistent with the rows above: sinfo allocated 2 x 400000 GPU-s, sacct
    # charged 2 x (300000 + 100000); causes 10000 - 4000 - 2000 - 4000 = 0 = the difference. Dollars: capacity
    # 3072.00 - invoiced 1000.00 - unallocated (idle + down + reserved) 1294.22 = 777.78
    # = allocated 1777.78 - usage 1000.00 + blocked 0.
    con.execute(
        "INSERT INTO mart_cost_reconciliation_monthly VALUES ('c1', '2026-11-01', 800000, 800000, 0, 10000, 4000,"
        " -2000, 4000, 1800000, -1000000, 3072.00, 1777.78, 1000.00, 1000.00, 1294.22, 0, 777.78)"
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
WINDOW = "--window-size=1000,3000"
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
            WINDOW,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert png.exists(), proc.stderr[-2000:]
    return proc.stderr


def element_box(page: Path, element_id: str, profile: Path) -> tuple[int, int, int, int]:
    """(x, y, width, height) in CSS pixels of an element as headless Chromium lays the page out in the
    screenshot's window: a copy of the page with a script that writes the box into the DOM, read back with
    --dump-dom (the report itself has no script)."""
    probe = page.with_name(f"probe-{page.name}")
    script = (
        f"<script>const r = document.getElementById({element_id!r}).getBoundingClientRect();"
        "document.body.setAttribute('data-box', [r.x, r.y, r.width, r.height].map(Math.round).join(','));"
        "</script>"
    )
    probe.write_text(page.read_text().replace("</body>", script + "</body>"))
    proc = subprocess.run(
        [
            CHROMIUM,
            *CHROME_FLAGS,
            f"--user-data-dir={profile}",
            "--dump-dom",
            WINDOW,
            probe.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found = re.search(r'data-box="(-?\d+),(-?\d+),(\d+),(\d+)"', proc.stdout)
    assert found, proc.stderr[-2000:]
    x, y, w, h = map(int, found.groups())
    return x, y, w, h


def _hex(colour: str) -> bytes:
    return bytes.fromhex(colour.lstrip("#"))


@pytest.mark.chromium
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
def test_report_renders_charts_and_the_reconciliation_block_in_headless_chromium(report_dir, tmp_path):
    from slurmscope.report import RECONCILIATION_ID, STYLE

    log = screenshot(report_dir / "report.html", tmp_path / "shot.png", tmp_path / "profile")
    assert "CONSOLE" not in log, log
    png = (tmp_path / "shot.png").read_bytes()
    # A page of text on white has a handful of colours; the charts' palette and anti-aliasing add many.
    assert distinct_colours(png) > 40
    # The reconciliation block: where the browser put it, and what the screenshot shows there.
    x, y, w, h = element_box(report_dir / "report.html", RECONCILIATION_ID, tmp_path / "profile2")
    width, height, _ = decode_png(png)
    assert h > 200 and w > 400 and x >= 0 and y >= 0 and x + w <= width and y + h <= height, (x, y, w, h)
    border, fill = re.search(
        r"section\.reconcile\{border:3px solid (#\w{6});background:(#\w{6})", STYLE
    ).groups()
    inside = region_colours(png, x + 3, y + 3, w - 6, h - 6)
    edge = region_colours(png, x, y, 3, h)
    assert edge[_hex(border)] > 0.9 * 3 * h  # its frame runs down the whole left edge
    assert inside[_hex(fill)] > 0.1 * (w - 6) * (h - 6)  # its own background, not white page
    dark = sum(n for c, n in inside.items() if sum(c) < 200)
    assert dark > 2000  # and text in it: the tables' figures and labels
    # The same measure outside the block (the page's margin beside it) finds neither.
    margin = region_colours(png, 0, y, max(x - 2, 1), h)
    assert margin[_hex(border)] == 0 and margin[_hex(fill)] == 0


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
    from slurmscope.report import collect_data, render_html

    db = tmp_path / "r.duckdb"
    _seed(db)
    con = connect(db)
    # day, account, charged s, $, sampled s, sampled $, idle s, idle $, useful s, share, $/useful h, J, kWh, $,
    # GPM-measured s, activity source
    for day, acct, sampled, useful, idle, kwh, gpm, source in (
        (date(2026, 11, 1), "pretraining", 7200.0, 5400.0, 360.0, 2.0, 7200.0, "gpm"),
        (date(2026, 11, 2), "vision", 3600.0, 1800.0, 1800.0, 0.5, 0.0, "gpu_util"),
    ):
        con.execute(
            "INSERT INTO mart_cost_efficiency_daily (cluster, day, account, gpu_seconds, cost_usd,"
            " sampled_gpu_seconds, sampled_cost_usd, idle_gpu_seconds, idle_cost_usd, useful_gpu_seconds,"
            " useful_share, cost_per_useful_gpu_hour, energy_joules, energy_kwh, energy_cost_usd,"
            " gpm_gpu_seconds, activity_source)"
            " VALUES ('c1', ?, ?, 0, 0, ?, 0, ?, ?, ?, NULL, NULL, ?, ?, ?, ?, ?)",
            [day, acct, sampled, idle, idle / 1800, useful, kwh * 3.6e6, kwh, kwh * 0.2, gpm, source],
        )
    d = collect_data(con, "c1", date(2026, 11, 1))
    con.close()
    # useful 5400 + 1800 s over 7200 + 3600 s sampled: 2 h / 3 h
    assert (d.used_gpu_hours, d.sampled_allocated_gpu_hours) == pytest.approx((2.0, 3.0))
    assert d.gpm_gpu_hours == pytest.approx(2.0)  # pretraining's 7200 s by GPM, vision's 3600 s by GPU_UTIL
    assert "GPM SM activity / GPU_UTIL (no GPM), sampled GPU-hours</td><td>2.0 / 1.0" in render_html(
        d, d.users
    )
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
    page = render_html(d, d.users)
    assert row(page, "of which unallocated capacity spread over accounts (USD)", "totals")[1] == "76.50"


# ---- the auditable page: rates, capacity, reconciliation, sources, units, tree ----


def test_reconciliation_block_shows_the_worked_example_of_docs_report(con, tmp_path):
    """docs/report.md#reconciliation, built by the pipelines from raw rows (the GPU-second causes are worked
    out in tests/pipelines/test_cost_reconciliation.py); the page shows them in GPU-hours and dollars."""
    from slurmscope.pipelines.runner import run_pipelines

    from tests.pipelines.test_cost_reconciliation import T0, H, cfg, worked_example

    worked_example(con)
    c = cfg()
    run_pipelines(con, c, now=T0 + 3 * H, only=["cost"], full=True)
    build_report(con, c, month="2026-02", out_dir=tmp_path / "r", formats=["html", "csv"])
    page = (tmp_path / "r" / "report.html").read_text()

    def cell(label: str, column: int = 1) -> str:
        return row(page, label, "reconciliation")[column]

    # n1 4 GPUs x 3 h + n2 2 GPUs x 1 h = 14 GPU-h at $2: allocated 8 GPU-h, idle 6.
    assert [cell("capacity (sinfo)", i) for i in (1, 2)] == ["14.00", "28.00"]
    assert [cell("= allocated (sinfo)", i) for i in (1, 2)] == ["8.00", "16.00"]
    assert [cell("+ idle", i) for i in (1, 2)] == ["6.00", "12.00"]
    # allocated 28800 GPU-s = 8.00 GPU-h; charged 37800 = 10.50; causes 3600, 3600, 1800, 10800 GPU-s.
    assert cell("allocated in sinfo snapshots") == "8.00"
    assert cell("− charged from sacct") == "10.50"
    assert cell("= difference") == "-2.50"
    causes = {r[0].split(":")[0].strip(): r[1] for r in _rows_of(page, "reconciliation") if ":" in r[0]}
    assert causes == {"+ unrecorded": "1.00", "− unseen": "1.00", "+ sampling": "0.50", "− gap": "3.00"}
    assert cell("sacct changes after the invoice was issued (charged − invoiced)") == "0.00"
    # $28 capacity = $21 charged + $12 unallocated line + (-$5) = $16 allocated - $21 usage + $0 blocked.
    assert cell("capacity cost") == "28.00"
    assert cell("= charged to accounts (invoice version 1)") == "21.00"
    assert cell("+ unallocated line (charged to nobody)") == "12.00"
    assert cell("+ difference") == "-5.00"
    assert cell("= allocated in sinfo snapshots, priced") == "16.00"
    assert cell("− usage charged (invoice less spread capacity)") == "21.00"
    assert row(page, "gpu", "rates")[1:5] == ["h100", "2.0000", "billing.rates.h100", "rate"]
    assert row(page, "TOTAL", "capacity")[2:4] == ["14.0", "8.0"]
    recon = _csv(tmp_path / "r" / "reconciliation.csv")
    values = {(r["group"], r["measure"]): r["value"] for r in recon}
    assert values[("allocated_vs_charged", "gap")] == "3.000000"
    assert values[("usd", "difference")] == "-5.00"
    rates = _csv(tmp_path / "r" / "rates.csv")
    assert [(r["partition"], r["gpu_model"], r["rate_per_gpu_hour"], r["price_key"]) for r in rates] == [
        ("gpu", "h100", "2.000000", "h100")
    ]


def _rows_of(page: str, section: str) -> list[list[str]]:
    return [r for t in tables(page) if t.section == section for r in t.rows]


def test_previous_month_is_no_data_when_it_has_no_invoice(tmp_path):
    db = tmp_path / "r.duckdb"
    _seed(db)
    con = connect(db, read_only=True)
    from slurmscope.report import collect_data, render_html

    october = collect_data(con, "c1", date(2026, 10, 1))  # September has no invoice rows
    november = collect_data(con, "c1", date(2026, 11, 1))
    con.close()
    assert [r[4] for r in _rows_of(render_html(october, october.users), "chargeback")[1:3]] == ["no data"] * 2
    assert row(render_html(november, november.users), "vision", "chargeback")[4] == "200.00"
    build_report(
        connect(db, read_only=True),
        load_config(env={"SLURMSCOPE_CLUSTER_NAME": "c1"}),
        month="2026-10",
        out_dir=tmp_path / "o",
        formats=["csv"],
    )
    assert {r["prev_month_cost_usd"] for r in _csv(tmp_path / "o" / "chargeback_accounts.csv")} == {""}


def test_energy_without_a_price_is_not_configured_and_the_sample_says_its_coverage(tmp_path):
    from slurmscope.report import collect_data, render_html

    db = tmp_path / "r.duckdb"
    _seed(db)
    con = connect(db)
    # pretraining: 600000 GPU-s charged over the two days (mart_cost_daily), 60000 of them sampled (10 %),
    # 2 kWh drawn, no electricity price (energy_cost_usd NULL). vision: nothing sampled.
    con.execute(
        "INSERT INTO mart_cost_efficiency_daily VALUES ('c1', '2026-11-01', 'pretraining', 600000, 0, 60000, 0,"
        " 0, 0, 30000, 0.5, NULL, 7.2e6, 2.0, NULL, 0, 'gpu_util', 0)"
    )
    d = collect_data(con, "c1", date(2026, 11, 1))
    con.close()
    page = render_html(d, d.users)
    pre, vis = row(page, "pretraining", "waste"), row(page, "vision", "waste")
    assert (pre[7], pre[10], pre[11]) == ("10.0%", "2.0", "not configured")
    assert (vis[7], vis[10], vis[11]) == ("0.0%", "no sample", "no sample")
    # The month's coverage: sampled over charged GPU-seconds of mart_cost_efficiency_daily, 60000 / 600000.
    header = [t for t in tables(page) if t.section == "waste"][1].rows[0][2]
    assert header.startswith("NVML sample of the month's allocations: 10.0% of charged GPU-hours")
    assert row(page, "Useful share of allocated GPU time", "totals")[1:] == [
        "50.0%",
        "NVML sample, 10.0% of charged GPU-hours",
    ]


def test_wait_times_are_minutes_in_the_table_and_the_chart_and_axes_tick_at_round_values(report_dir):
    from slurmscope.report import nice_ticks

    page = (report_dir / "report.html").read_text()
    # mart_wait_times: mean 200 s, p50 60 s, p90 600 s, p99 900 s, max 1000 s on both days, in minutes.
    assert row(page, "gpu", "scheduling")[1:] == ["24", "3.3", "1.0", "10.0", "15.0", "16.7"]
    assert 'aria-label="Mean wait time by partition (sacct)"' in page
    chart = page.split('aria-label="Mean wait time by partition (sacct)"')[1].split("</svg>")[0]
    assert ">minutes</text>" in chart
    labels = [t.split(">")[-1] for t in chart.split("</text>") if 'text-anchor="end"' in t]
    assert labels == ["0", "1", "2", "3", "4"]  # a mean of 3.3 minutes: ticks every minute
    assert nice_ticks(297.9) == [0, 100, 200, 300]
    assert nice_ticks(2718) == [0, 1000, 2000, 3000]  # a step of 500 would need 6 ticks for 5 wanted
    assert nice_ticks(0.37) == [0, 0.1, 0.2, 0.3, 0.4]
    assert nice_ticks(12.5) == [0, 2.5, 5, 7.5, 10, 12.5]


def test_started_by_counts_gpu_hours_inside_the_month_and_adds_up_to_the_charges(tmp_path):
    from slurmscope.report import collect_data, render_html

    db = tmp_path / "r.duckdb"
    _seed(db)
    con = connect(db)
    for day, sched_by, jobs, hours in (
        ("2026-11-01", "main", 3, 100.0),
        ("2026-11-01", "backfill", 1, 44.4),
        ("2026-11-02", "main", 0, 55.6),
    ):
        con.execute(
            "INSERT INTO mart_backfill_daily VALUES ('c1', ?, 'gpu', ?, ?, ?, NULL, NULL)",
            [day, sched_by, jobs, hours],
        )
    d = collect_data(con, "c1", date(2026, 11, 1))
    con.close()
    page = render_html(d, d.users)
    assert row(page, "main", "scheduling")[1:] == ["3", "155.6", "77.8%"]
    assert row(page, "backfill", "scheduling")[1:] == ["1", "44.4", "22.2%"]
    assert row(page, "TOTAL", "scheduling")[1:] == ["4", "200.0", "100.0%"]


def _fairshare(con, as_of, source, rows):
    for account, parent, raw, norm, eff in rows:
        con.execute(
            "INSERT INTO mart_fairshare VALUES ('c1', ?, ?, '', ?, ?, ?, 0, ?, ?, NULL, ?)",
            [as_of, account, parent, raw, norm, eff, None if not eff else norm / eff, source],
        )


def test_fairshare_is_a_tree_whose_sibling_shares_add_up_to_one(tmp_path):
    from slurmscope.report import collect_data, render_html

    db = tmp_path / "r.duckdb"
    _seed(db)
    con = connect(db)
    tree = [  # root -> a (60) -> a1 (1), a2 (3); root -> b (40): Fair Tree normalises among siblings
        ("root", None, None, 1.0, 1.0),
        ("a", "root", 60, 0.6, 0.5),
        ("b", "root", 40, 0.4, 0.5),
        ("a1", "a", 1, 0.25, 0.2),
        ("a2", "a", 3, 0.75, 0.8),
    ]
    end = datetime(2026, 12, 1, tzinfo=timezone.utc)
    # Slurm's sshare figures of 30 Nov win over the pipeline's own at the month's end (they never change).
    _fairshare(con, end - timedelta(hours=1), "sshare", tree)
    _fairshare(con, end, "computed", [(a, p, r, n, 0.1) for a, p, r, n, _ in tree])
    for account, target in (("a", 0.6), ("b", 0.4), ("a1", 0.15), ("a2", 0.45)):
        con.execute(
            "INSERT INTO mart_fairshare_drift (cluster, day, account, usage_share_30d, target_share, state,"
            " days_starved, days_over_served) VALUES ('c1', '2026-11-30', ?, 0.25, ?, 'ok', 0, 0)",
            [account, target],
        )
    d = collect_data(con, "c1", date(2026, 11, 1))
    con.close()
    page = render_html(d, d.users)
    t = next(t for t in tables(page) if t.table_id == "fairshare-tree")
    assert t.rows[0][2] == "share among siblings (NormShares)"
    em = "\u2003"
    assert [r[:4] for r in t.rows[1:]] == [
        ["root", "", "", ""],
        [f"{em}└ a", "60", "0.600", "0.600"],
        [f"{em}{em}└ a1", "1", "0.250", "0.150"],
        [f"{em}{em}└ a2", "3", "0.750", "0.450"],
        [f"{em}└ b", "40", "0.400", "0.400"],
    ]
    assert [r[5] for r in t.rows[2:]] == ["0.500", "0.200", "0.800", "0.500"]  # sshare's, not 0.1
    assert "From sshare (Slurm's own figures) as of 2026-11-30 23:00 UTC" in html.unescape(page)
