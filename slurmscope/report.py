"""Monthly cost and usage report: one self-contained HTML file and CSVs for finance.

Every number is read from the marts (the report computes no accounting of its own, so it cannot disagree
with the exporter or the dashboards); the only arithmetic here is presentation: shares of a total,
month-over-month change, and sums for the total rows. Charts are inline SVG so the file opens with no
network and no JavaScript.
"""

from __future__ import annotations

import csv
import hashlib
import html
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path

import duckdb

from slurmscope.config import Config

PALETTE = [
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
]


def parse_month(month: str) -> date:
    try:
        year, mon = month.split("-")
        first = date(int(year), int(mon), 1)
    except ValueError:
        raise ValueError(f"--month expects YYYY-MM, got {month!r}") from None
    return first


def next_month(first: date) -> date:
    return date(first.year + (first.month == 12), first.month % 12 + 1, 1)


def prev_month(first: date) -> date:
    return date(first.year - (first.month == 1), (first.month - 2) % 12 + 1, 1)


def pseudonym(user: str, cluster: str) -> str:
    """Stable per cluster, so a user is the same pseudonym every month, and not reversible by reading."""
    if not user:
        return user
    return "user-" + hashlib.sha256(f"{cluster}\0{user}".encode()).hexdigest()[:8]


@dataclass
class ReportData:
    cluster: str
    month: date
    accounts: list[dict] = field(default_factory=list)
    users: list[dict] = field(default_factory=list)
    capacity: list[dict] = field(default_factory=list)
    daily: list[dict] = field(default_factory=list)
    waste: list[dict] = field(default_factory=list)
    outcomes: list[dict] = field(default_factory=list)
    requeues: dict = field(default_factory=dict)
    faults: list[dict] = field(default_factory=list)
    top_nodes: list[dict] = field(default_factory=list)
    waits: list[dict] = field(default_factory=list)
    wait_trend: list[dict] = field(default_factory=list)
    backfill: list[dict] = field(default_factory=list)
    fairshare: list[dict] = field(default_factory=list)
    used_gpu_hours: float | None = None  # useful (utilisation-weighted) GPU-hours the NVML agents sampled
    sampled_allocated_gpu_hours: float | None = None
    version: int | None = None
    spread_cost_usd: Decimal = Decimal(0)  # unallocated capacity in the charges (billing.idle_cost = spread)
    unallocated_cost_usd: Decimal | None = None  # capacity dollars charged to nobody (the unallocated line)
    powered_down_gpu_hours: float | None = None  # powered-off GPUs, outside capacity
    mig_gpu_hours: float | None = None  # MIG slices' part of capacity, by fraction of a GPU
    frozen: bool | None = None

    @property
    def totals(self) -> dict:
        cap = {
            k: sum((r[k] for r in self.capacity), Decimal(0) if k.endswith("usd") else 0.0)
            for k in (
                "capacity_gpu_hours",
                "allocated_gpu_hours",
                "idle_gpu_hours",
                "down_gpu_hours",
                "reserved_gpu_hours",
                "capacity_cost_usd",
                "allocated_cost_usd",
                "idle_cost_usd",
                "down_cost_usd",
                "reserved_cost_usd",
            )
        }
        charged_hours = sum(r["gpu_hours"] for r in self.accounts)
        charged_cost = sum((r["cost_usd"] for r in self.accounts), Decimal(0))
        cap["charged_gpu_hours"] = charged_hours
        cap["charged_cost_usd"] = charged_cost
        cap["used_gpu_hours"] = self.used_gpu_hours
        cap["sampled_allocated_gpu_hours"] = self.sampled_allocated_gpu_hours
        cap["cost_per_gpu_hour"] = (charged_cost / Decimal(str(charged_hours))) if charged_hours else None
        # Telemetry may cover only some nodes or days: the useful share is measured where GPUs were sampled
        # and applied to the whole charge, rather than dividing all cost by a sample's busy hours.
        useful = (
            self.used_gpu_hours / self.sampled_allocated_gpu_hours
            if self.used_gpu_hours and self.sampled_allocated_gpu_hours
            else None
        )
        cap["useful_share"] = useful
        cap["cost_per_useful_gpu_hour"] = (
            cap["cost_per_gpu_hour"] / Decimal(str(useful)) if useful and cap["cost_per_gpu_hour"] else None
        )
        return cap


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> list[dict]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(
        con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()[
            0
        ]
    )


def _mig_gpu_hours(con: duckdb.DuckDBPyConnection, cluster: str, month: date, nxt: date) -> float | None:
    """GPU-hours of MIG slices within the month's capacity (docs/pipelines.md#mig), None when there are none."""
    hours = con.execute(
        "SELECT sum(mig_gpu_seconds) / 3600 FROM mart_capacity_daily WHERE cluster = ? AND day >= ? AND day < ?",
        [cluster, month, nxt],
    ).fetchone()[0]
    return float(hours) if hours else None


def collect_data(con: duckdb.DuckDBPyConnection, cluster: str, month: date) -> ReportData:
    """Read the month's rows from the marts; the latest version of a re-issued month wins."""
    nxt, prv = next_month(month), prev_month(month)
    d = ReportData(cluster=cluster, month=month)
    latest = """
        WITH v AS (SELECT month, max(version) AS version FROM mart_cost_monthly
                   WHERE cluster = ? AND month IN (?, ?) GROUP BY month)
        SELECT m.* FROM mart_cost_monthly m JOIN v USING (month, version) WHERE m.cluster = ?
    """
    monthly = _rows(con, latest, [cluster, month, prv, cluster])
    cur = [r for r in monthly if r["month"] == month]
    prev = [r for r in monthly if r["month"] == prv]
    if cur:
        d.version = max(r["version"] for r in cur)
        d.frozen = all(r["frozen"] for r in cur)
        d.spread_cost_usd = sum((Decimal(r.get("spread_cost_usd") or 0) for r in cur), Decimal(0))
    d.users = sorted(
        (
            {
                "account": r["account"],
                "user": r["user"],
                "gpu_hours": r["gpu_hours"],
                "cost_usd": Decimal(r["cost_usd"]),
                "share": r["share"],
            }
            for r in cur
        ),
        key=lambda r: (-r["cost_usd"], r["account"], r["user"]),
    )
    by_acct: dict[str, dict] = {}
    for r in cur:
        a = by_acct.setdefault(
            r["account"],
            {
                "account": r["account"],
                "gpu_hours": 0.0,
                "cost_usd": Decimal(0),
                "share": 0.0,
                "prev_cost_usd": Decimal(0),
            },
        )
        a["gpu_hours"] += r["gpu_hours"]
        a["cost_usd"] += Decimal(r["cost_usd"])
        a["share"] += r["share"]
    for r in prev:
        a = by_acct.setdefault(
            r["account"],
            {
                "account": r["account"],
                "gpu_hours": 0.0,
                "cost_usd": Decimal(0),
                "share": 0.0,
                "prev_cost_usd": Decimal(0),
            },
        )
        a["prev_cost_usd"] += Decimal(r["cost_usd"])
    for a in by_acct.values():
        a["mom_change"] = (
            float((a["cost_usd"] - a["prev_cost_usd"]) / a["prev_cost_usd"]) if a["prev_cost_usd"] else None
        )
    d.accounts = sorted(
        (a for a in by_acct.values() if a["gpu_hours"] or a["cost_usd"]),
        key=lambda a: (-a["cost_usd"], a["account"]),
    )
    if _has_table(con, "mart_cost_unallocated_monthly"):
        line = con.execute(
            "SELECT sum(idle_cost_usd + down_cost_usd + reserved_cost_usd), count(*)"
            " FROM mart_cost_unallocated_monthly WHERE cluster = ? AND month = ?",
            [cluster, month],
        ).fetchone()
        d.unallocated_cost_usd = Decimal(line[0]) if line[1] else None
        off = con.execute(
            "SELECT sum(powered_down_gpu_seconds) / 3600 FROM mart_capacity_daily"
            " WHERE cluster = ? AND day >= ? AND day < ?",
            [cluster, month, nxt],
        ).fetchone()[0]
        d.powered_down_gpu_hours = float(off) if off else None
        d.mig_gpu_hours = _mig_gpu_hours(con, cluster, month, nxt)
    d.capacity = _rows(
        con,
        """
        SELECT "partition", gpu_model,
               sum(capacity_gpu_seconds) / 3600 AS capacity_gpu_hours,
               sum(allocated_gpu_seconds) / 3600 AS allocated_gpu_hours,
               sum(idle_gpu_seconds) / 3600 AS idle_gpu_hours,
               sum(down_gpu_seconds) / 3600 AS down_gpu_hours,
               sum(reserved_gpu_seconds) / 3600 AS reserved_gpu_hours,
               sum(capacity_cost_usd) AS capacity_cost_usd, sum(allocated_cost_usd) AS allocated_cost_usd,
               sum(idle_cost_usd) AS idle_cost_usd, sum(down_cost_usd) AS down_cost_usd,
               sum(reserved_cost_usd) AS reserved_cost_usd
        FROM mart_capacity_daily WHERE cluster = ? AND day >= ? AND day < ?
        GROUP BY ALL ORDER BY 1, 2""",
        [cluster, month, nxt],
    )
    d.daily = _rows(
        con,
        """
        SELECT day, account, sum(gpu_seconds) / 3600 AS gpu_hours, sum(cost_usd) AS cost_usd
        FROM mart_cost_daily WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 1, 2""",
        [cluster, month, nxt],
    )
    d.waste = _rows(
        con,
        """
        SELECT account, sum(failed_gpu_seconds) / 3600 AS failed_gpu_hours, sum(failed_cost_usd) AS failed_cost_usd,
               sum(requeued_gpu_seconds) / 3600 AS requeued_gpu_hours, sum(requeued_cost_usd) AS requeued_cost_usd
        FROM mart_cost_daily WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 3 DESC, 1""",
        [cluster, month, nxt],
    )
    if _has_table(con, "mart_cost_efficiency_daily"):
        # The cost pipeline's usage-weighted view: useful = held seconds x NVML utilisation, where sampled.
        eff = {
            r["account"]: r
            for r in _rows(
                con,
                """
            SELECT account, sum(sampled_gpu_seconds) / 3600 AS sampled_gpu_hours,
                   sum(useful_gpu_seconds) / 3600 AS useful_gpu_hours,
                   sum(idle_gpu_seconds) / 3600 AS idle_gpu_hours, sum(idle_cost_usd) AS idle_cost_usd,
                   sum(energy_kwh) AS energy_kwh, sum(energy_cost_usd) AS energy_cost_usd
            FROM mart_cost_efficiency_daily WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL""",
                [cluster, month, nxt],
            )
        }
        for w in d.waste:
            e = eff.get(w["account"], {})
            w["alloc_idle_gpu_hours"] = e.get("idle_gpu_hours")
            w["alloc_idle_cost_usd"] = e.get("idle_cost_usd")
            w["energy_kwh"] = e.get("energy_kwh")
            w["energy_cost_usd"] = e.get("energy_cost_usd")
        sampled = sum(r["sampled_gpu_hours"] or 0 for r in eff.values())
        if sampled > 0:
            d.sampled_allocated_gpu_hours = sampled
            d.used_gpu_hours = sum(r["useful_gpu_hours"] or 0 for r in eff.values())
    d.outcomes = _rows(
        con,
        """
        SELECT state, sum(jobs) AS jobs, sum(gpu_hours) AS gpu_hours FROM mart_job_outcomes_daily
        WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 2 DESC, 1""",
        [cluster, month, nxt],
    )
    rq = _rows(
        con,
        """
        SELECT sum(attempts_ended) AS attempts_ended, sum(requeues) AS requeues,
               sum(requeued_gpu_hours) AS requeued_gpu_hours
        FROM mart_requeues_daily WHERE cluster = ? AND day >= ? AND day < ?""",
        [cluster, month, nxt],
    )
    d.requeues = rq[0] if rq else {}
    d.faults = _rows(
        con,
        """
        SELECT fault_kind, count(DISTINCT (node, fault_time)) AS faults, count(*) AS jobs_killed,
               sum(gpu_hours_lost) AS gpu_hours_lost, sum(CASE WHEN came_back THEN 1 ELSE 0 END) AS came_back
        FROM mart_fault_impact WHERE cluster = ? AND fault_time >= ? AND fault_time < ?
        GROUP BY ALL ORDER BY 4 DESC""",
        [cluster, month, nxt],
    )
    d.top_nodes = _rows(
        con,
        """
        SELECT node, count(DISTINCT fault_time) AS faults, sum(gpu_hours_lost) AS gpu_hours_lost
        FROM mart_fault_impact WHERE cluster = ? AND fault_time >= ? AND fault_time < ?
        GROUP BY ALL ORDER BY 2 DESC, 3 DESC, 1 LIMIT 10""",
        [cluster, month, nxt],
    )
    d.waits = _rows(
        con,
        """
        SELECT "partition", sum(jobs) AS jobs, sum(mean_seconds * jobs) / nullif(sum(jobs), 0) AS mean_seconds,
               sum(p50_seconds * jobs) / nullif(sum(jobs), 0) AS p50_seconds,
               sum(p90_seconds * jobs) / nullif(sum(jobs), 0) AS p90_seconds,
               sum(p99_seconds * jobs) / nullif(sum(jobs), 0) AS p99_seconds,
               max(max_seconds) AS max_seconds
        FROM mart_wait_times WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 1""",
        [cluster, month, nxt],
    )
    d.wait_trend = _rows(
        con,
        """
        SELECT day, "partition", sum(mean_seconds * jobs) / nullif(sum(jobs), 0) / 60 AS mean_minutes
        FROM mart_wait_times WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 1, 2""",
        [cluster, month, nxt],
    )
    d.backfill = _rows(
        con,
        """
        SELECT sched_by, sum(jobs) AS jobs, sum(gpu_hours) AS gpu_hours FROM mart_backfill_daily
        WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 2 DESC""",
        [cluster, month, nxt],
    )
    if _has_table(con, "mart_fairshare_drift"):
        d.fairshare = _rows(
            con,
            """
            SELECT account, arg_max(usage_share_30d, day) AS usage_share_30d,
                   arg_max(target_share, day) AS target_share
            FROM mart_fairshare_drift WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 1""",
            [cluster, month, nxt],
        )
    return d


# ---- charts (inline SVG) ----


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def stacked_bars_svg(
    title: str,
    categories: list[str],
    series: dict[str, list[float]],
    unit: str,
    width: int = 860,
    height: int = 280,
) -> str:
    """Stacked columns, one per category; series keep their order so colours match the legend."""
    left, bottom, top = 60, 40, 30
    plot_w, plot_h = width - left - 160, height - bottom - top
    totals = [sum(vals[i] for vals in series.values()) for i in range(len(categories))]
    peak = max(totals, default=0) or 1.0
    n = max(len(categories), 1)
    bar_w = plot_w / n
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{_esc(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>',
        f'<text x="{left - 6}" y="{top + 4}" font-size="10" text-anchor="end">{peak:,.0f}</text>',
        f'<text x="{left - 6}" y="{top + plot_h}" font-size="10" text-anchor="end">0</text>',
        f'<text x="12" y="{top + plot_h / 2}" font-size="10" transform="rotate(-90 12 {top + plot_h / 2})">'
        f"{_esc(unit)}</text>",
    ]
    for i, cat in enumerate(categories):
        y = top + plot_h
        for j, (name, vals) in enumerate(series.items()):
            h = vals[i] / peak * plot_h
            if h <= 0:
                continue
            y -= h
            parts.append(
                f'<rect x="{left + i * bar_w + 1:.1f}" y="{y:.1f}" width="{max(bar_w - 2, 1):.1f}" '
                f'height="{h:.1f}" fill="{PALETTE[j % len(PALETTE)]}"><title>{_esc(cat)} {_esc(name)}: '
                f"{vals[i]:,.1f}</title></rect>"
            )
        if n <= 31 and (i % max(n // 10, 1) == 0):
            parts.append(
                f'<text x="{left + (i + 0.5) * bar_w:.1f}" y="{top + plot_h + 14}" font-size="9" '
                f'text-anchor="middle">{_esc(cat[-5:])}</text>'
            )
    for j, name in enumerate(series):
        y = top + 12 + j * 16
        parts.append(
            f'<rect x="{left + plot_w + 14}" y="{y - 9}" width="10" height="10" '
            f'fill="{PALETTE[j % len(PALETTE)]}"/><text x="{left + plot_w + 28}" y="{y}" '
            f'font-size="11">{_esc(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def lines_svg(
    title: str,
    categories: list[str],
    series: dict[str, list[float | None]],
    unit: str,
    width: int = 860,
    height: int = 260,
) -> str:
    left, bottom, top = 60, 40, 30
    plot_w, plot_h = width - left - 160, height - bottom - top
    vals = [v for s in series.values() for v in s if v is not None]
    peak = max(vals, default=0) or 1.0
    n = max(len(categories) - 1, 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{_esc(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>',
        f'<text x="{left - 6}" y="{top + 4}" font-size="10" text-anchor="end">{peak:,.1f}</text>',
        f'<text x="{left - 6}" y="{top + plot_h}" font-size="10" text-anchor="end">0</text>',
        f'<text x="12" y="{top + plot_h / 2}" font-size="10" transform="rotate(-90 12 {top + plot_h / 2})">'
        f"{_esc(unit)}</text>",
    ]
    for j, (name, s) in enumerate(series.items()):
        pts = [
            f"{left + i / n * plot_w:.1f},{top + plot_h - v / peak * plot_h:.1f}"
            for i, v in enumerate(s)
            if v is not None
        ]
        if pts:
            parts.append(
                f'<polyline fill="none" stroke-width="2" stroke="{PALETTE[j % len(PALETTE)]}" '
                f'points="{" ".join(pts)}"/>'
            )
        parts.append(
            f'<rect x="{left + plot_w + 14}" y="{top + 3 + j * 16}" width="10" height="10" '
            f'fill="{PALETTE[j % len(PALETTE)]}"/><text x="{left + plot_w + 28}" y="{top + 12 + j * 16}" '
            f'font-size="11">{_esc(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def hbars_svg(title: str, items: list[tuple[str, float]], unit: str, width: int = 860) -> str:
    row, left, top = 22, 160, 30
    height = top + row * max(len(items), 1) + 10
    peak = max((v for _, v in items), default=0) or 1.0
    plot_w = width - left - 120
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text x="10" y="18" font-size="14" font-weight="bold">{_esc(title)}</text>',
    ]
    for i, (name, v) in enumerate(items):
        y = top + i * row
        parts.append(
            f'<text x="{left - 6}" y="{y + 14}" font-size="11" text-anchor="end">{_esc(name)}</text>'
            f'<rect x="{left}" y="{y + 3}" width="{max(v / peak * plot_w, 1):.1f}" height="{row - 6}" '
            f'fill="{PALETTE[i % len(PALETTE)]}"/><text x="{left + v / peak * plot_w + 6:.1f}" '
            f'y="{y + 14}" font-size="11">{v:,.{0 if float(v).is_integer() else 1}f} {_esc(unit)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


# ---- CSV and HTML ----


def _money(v) -> str:
    return "" if v is None else f"{Decimal(v):.2f}"


def _hours(v) -> str:
    return "" if v is None else f"{v:.3f}"


def write_csvs(d: ReportData, out: Path, users_out: list[dict]) -> list[Path]:
    """Finance CSVs: one row per account (or user) plus a TOTAL row equal to the sum of the rows."""
    written = []
    p = out / "chargeback_accounts.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(
            ["month", "account", "gpu_hours", "cost_usd", "share", "prev_month_cost_usd", "mom_change"]
        )
        for a in d.accounts:
            w.writerow(
                [
                    d.month.strftime("%Y-%m"),
                    a["account"],
                    _hours(a["gpu_hours"]),
                    _money(a["cost_usd"]),
                    f"{a['share']:.6f}",
                    _money(a["prev_cost_usd"]),
                    "" if a["mom_change"] is None else f"{a['mom_change']:.4f}",
                ]
            )
        w.writerow(
            [
                d.month.strftime("%Y-%m"),
                "TOTAL",
                _hours(sum(a["gpu_hours"] for a in d.accounts)),
                _money(sum((a["cost_usd"] for a in d.accounts), Decimal(0))),
                f"{sum(a['share'] for a in d.accounts):.6f}",
                _money(sum((a["prev_cost_usd"] for a in d.accounts), Decimal(0))),
                "",
            ]
        )
    written.append(p)
    p = out / "chargeback_users.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["month", "account", "user", "gpu_hours", "cost_usd", "share"])
        for u in users_out:
            w.writerow(
                [
                    d.month.strftime("%Y-%m"),
                    u["account"],
                    u["user"],
                    _hours(u["gpu_hours"]),
                    _money(u["cost_usd"]),
                    f"{u['share']:.6f}",
                ]
            )
        w.writerow(
            [
                d.month.strftime("%Y-%m"),
                "TOTAL",
                "",
                _hours(sum(u["gpu_hours"] for u in users_out)),
                _money(sum((u["cost_usd"] for u in users_out), Decimal(0))),
                f"{sum(u['share'] for u in users_out):.6f}",
            ]
        )
    written.append(p)
    p = out / "capacity.csv"
    keys = ["capacity", "allocated", "idle", "down", "reserved"]
    with p.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(
            ["month", "partition", "gpu_model"]
            + [f"{k}_gpu_hours" for k in keys]
            + [f"{k}_cost_usd" for k in keys]
        )
        for r in d.capacity:
            w.writerow(
                [d.month.strftime("%Y-%m"), r["partition"], r["gpu_model"]]
                + [_hours(r[f"{k}_gpu_hours"]) for k in keys]
                + [_money(r[f"{k}_cost_usd"]) for k in keys]
            )
        t = d.totals
        w.writerow(
            [d.month.strftime("%Y-%m"), "TOTAL", ""]
            + [_hours(t[f"{k}_gpu_hours"]) for k in keys]
            + [_money(t[f"{k}_cost_usd"]) for k in keys]
        )
    written.append(p)
    p = out / "daily_usage.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["day", "account", "gpu_hours", "cost_usd_unrounded"])
        for r in d.daily:
            w.writerow([r["day"].isoformat(), r["account"], _hours(r["gpu_hours"]), f"{r['cost_usd']:.6f}"])
    written.append(p)
    return written


def _table(headers: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v, digits: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, Decimal):
        return f"{v:,.2f}"
    return f"{v:,.{digits}f}"


def render_html(d: ReportData, users_out: list[dict]) -> str:
    t = d.totals
    month = d.month.strftime("%Y-%m")
    days = sorted({r["day"] for r in d.daily})
    accounts = sorted(
        {r["account"] for r in d.daily},
        key=lambda a: -sum(r["gpu_hours"] for r in d.daily if r["account"] == a),
    )
    top = accounts[:8]

    def series(metric: str) -> dict[str, list[float]]:
        out = {a: [0.0] * len(days) for a in top}
        if len(accounts) > len(top):
            out["other"] = [0.0] * len(days)
        idx = {day: i for i, day in enumerate(days)}
        for r in d.daily:
            key = r["account"] if r["account"] in top else "other"
            out[key][idx[r["day"]]] += float(r[metric])
        return out

    cats = [x.isoformat() for x in days]
    parts_ = sorted({r["partition"] for r in d.wait_trend})
    wdays = sorted({r["day"] for r in d.wait_trend})
    wmap = {(r["day"], r["partition"]): r["mean_minutes"] for r in d.wait_trend}
    charts = [
        stacked_bars_svg("Daily GPU-hours by account", cats, series("gpu_hours"), "GPU-hours"),
        stacked_bars_svg("Daily cost by account", cats, series("cost_usd"), "USD"),
        lines_svg(
            "Mean wait time by partition",
            [x.isoformat() for x in wdays],
            {p: [wmap.get((x, p)) for x in wdays] for p in parts_},
            "minutes",
        ),
        hbars_svg(
            "Job attempts by terminal state", [(r["state"], float(r["jobs"])) for r in d.outcomes], "jobs"
        ),
    ]
    status = (
        "no invoice rows for this month"
        if d.version is None
        else f"invoice version {d.version}, {'frozen (closed month)' if d.frozen else 'open month, provisional'}"
    )
    rq = d.requeues or {}
    attempts = sum(r["jobs"] for r in d.outcomes)
    failed = sum(r["jobs"] for r in d.outcomes if r["state"] not in ("COMPLETED", "RUNNING", "PENDING"))
    body = [
        f"<h1>slurmscope — {_esc(d.cluster)} — {month}</h1><p class=meta>{_esc(status)}</p>",
        "<h2>Totals</h2>",
        _table(
            ["measure", "value"],
            [
                ["GPU-hours available (capacity)", _fmt(t["capacity_gpu_hours"])],
                ["GPU-hours allocated", _fmt(t["allocated_gpu_hours"])],
                [
                    "Useful GPU-hours (held x NVML utilisation) / allocated GPU-hours sampled by NVML",
                    "–"
                    if t["used_gpu_hours"] is None
                    else f"{_fmt(t['used_gpu_hours'])} / {_fmt(t['sampled_allocated_gpu_hours'])}",
                ],
                [
                    "Useful share of allocated GPU time (NVML sample)",
                    "–" if t["useful_share"] is None else f"{t['useful_share']:.1%}",
                ],
                ["GPU-hours idle (capacity not allocated)", _fmt(t["idle_gpu_hours"])],
                ["GPU-hours down or drained", _fmt(t["down_gpu_hours"])],
                ["GPU-hours reserved", _fmt(t["reserved_gpu_hours"])],
                ["Capacity cost (USD)", _fmt(t["capacity_cost_usd"])],
                ["Charged to accounts (USD)", _fmt(t["charged_cost_usd"])],
                *(
                    [["Unallocated, charged to nobody (USD)", _fmt(d.unallocated_cost_usd)]]
                    if d.unallocated_cost_usd is not None
                    else []
                ),
                *(
                    [["GPU-hours powered off (not capacity)", _fmt(d.powered_down_gpu_hours)]]
                    if d.powered_down_gpu_hours
                    else []
                ),
                *(
                    [["of capacity, MIG slices (each its fraction of a GPU)", _fmt(d.mig_gpu_hours)]]
                    if d.mig_gpu_hours
                    else []
                ),
                *(
                    [["of which unallocated capacity spread over accounts (USD)", _fmt(d.spread_cost_usd)]]
                    if d.spread_cost_usd
                    else []
                ),
                ["Cost per charged GPU-hour (USD)", _fmt(t["cost_per_gpu_hour"], 3)],
                ["Cost per useful GPU-hour (USD)", _fmt(t["cost_per_useful_gpu_hour"], 3)],
            ],
        ),
        "<h2>Charts</h2>",
        "".join(f"<figure>{c}</figure>" for c in charts),
        "<h2>Chargeback by account</h2>",
        _table(
            ["account", "GPU-hours", "cost (USD)", "share", "previous month (USD)", "change"],
            [
                [
                    a["account"],
                    _fmt(a["gpu_hours"]),
                    _fmt(a["cost_usd"]),
                    f"{a['share']:.1%}",
                    _fmt(a["prev_cost_usd"]),
                    "–" if a["mom_change"] is None else f"{a['mom_change']:+.1%}",
                ]
                for a in d.accounts
            ]
            + [
                [
                    "TOTAL",
                    _fmt(t["charged_gpu_hours"]),
                    _fmt(t["charged_cost_usd"]),
                    f"{sum(a['share'] for a in d.accounts):.1%}",
                    "",
                    "",
                ]
            ],
        ),
        "<h2>Chargeback by user</h2>",
        _table(
            ["account", "user", "GPU-hours", "cost (USD)", "share"],
            [
                [u["account"], u["user"], _fmt(u["gpu_hours"]), _fmt(u["cost_usd"]), f"{u['share']:.1%}"]
                for u in users_out
            ],
        ),
        "<h2>Waste</h2>",
        _table(
            ["capacity idle cost (USD)", "down/drained cost (USD)"],
            [[_fmt(t["idle_cost_usd"]), _fmt(t["down_cost_usd"])]],
        ),
        _table(
            [
                "account",
                "failed attempts GPU-h",
                "failed cost (USD)",
                "requeued attempts GPU-h",
                "requeued cost (USD)",
                "allocated-but-idle GPU-h",
                "allocated-but-idle cost (USD)",
                "energy (kWh)",
                "energy cost (USD)",
            ],
            [
                [
                    w["account"],
                    _fmt(w["failed_gpu_hours"]),
                    _fmt(w["failed_cost_usd"], 2),
                    _fmt(w["requeued_gpu_hours"]),
                    _fmt(w["requeued_cost_usd"], 2),
                    _fmt(w.get("alloc_idle_gpu_hours")),
                    _fmt(w.get("alloc_idle_cost_usd"), 2),
                    _fmt(w.get("energy_kwh")),
                    _fmt(w.get("energy_cost_usd"), 2),
                ]
                for w in d.waste
            ],
        ),
        "<h2>Reliability</h2>",
        _table(
            [
                "attempts ended",
                "not completed",
                "failure rate",
                "requeues",
                "requeue rate",
                "requeued GPU-hours",
            ],
            [
                [
                    attempts,
                    failed,
                    f"{failed / attempts:.1%}" if attempts else "–",
                    rq.get("requeues") or 0,
                    f"{(rq.get('requeues') or 0) / rq['attempts_ended']:.1%}"
                    if rq.get("attempts_ended")
                    else "–",
                    _fmt(rq.get("requeued_gpu_hours")),
                ]
            ],
        ),
        _table(
            ["fault", "faults", "jobs killed", "GPU-hours lost", "jobs that came back"],
            [
                [f["fault_kind"], f["faults"], f["jobs_killed"], _fmt(f["gpu_hours_lost"]), f["came_back"]]
                for f in d.faults
            ],
        ),
        _table(
            ["top failing node", "faults", "GPU-hours lost"],
            [[n["node"], n["faults"], _fmt(n["gpu_hours_lost"])] for n in d.top_nodes],
        ),
        "<h2>Scheduling</h2>",
        _table(
            ["partition", "jobs", "mean wait (s)", "p50 (s)", "p90 (s)", "p99 (s)", "max (s)"],
            [
                [
                    w["partition"],
                    w["jobs"],
                    _fmt(w["mean_seconds"], 0),
                    _fmt(w["p50_seconds"], 0),
                    _fmt(w["p90_seconds"], 0),
                    _fmt(w["p99_seconds"], 0),
                    _fmt(w["max_seconds"], 0),
                ]
                for w in d.waits
            ],
        ),
        "<p class=note>p50/p90/p99 are the daily percentiles of mart_wait_times, averaged over the month "
        "weighted by jobs.</p>",
        _table(
            ["started by", "jobs", "GPU-hours"],
            [[b["sched_by"], b["jobs"], _fmt(b["gpu_hours"])] for b in d.backfill],
        ),
        _table(
            ["account", "usage share (30 d)", "target share"],
            [[f["account"], _fmt(f["usage_share_30d"], 3), _fmt(f["target_share"], 3)] for f in d.fairshare],
        ),
    ]
    style = (
        "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 16px}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child"
        "{text-align:left}th{background:#f0f0f0}.meta,.note{color:#666}figure{margin:8px 0}"
    )
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>slurmscope report {month} "
        f"{_esc(d.cluster)}</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )


def build_report(
    con: duckdb.DuckDBPyConnection, cfg: Config, *, month: str, out_dir: Path, formats: list[str]
) -> list[Path]:
    """Write report.html and the finance CSVs for one billing month into out_dir."""
    first = parse_month(month)
    unknown = set(formats) - {"html", "csv"}
    if unknown:
        raise ValueError(f"--format expects html and/or csv, got {sorted(unknown)}")
    data = collect_data(con, cfg.cluster, first)
    if not (data.users or data.capacity or data.daily):
        raise ValueError(
            f"no data for {first:%Y-%m} in cluster {cfg.cluster!r}: nothing charged and no capacity in the marts "
            "(run `slurmscope pipelines run`, or choose another --month)"
        )
    users_out = data.users
    if cfg.get("report", "pseudonymise_users"):
        users_out = [{**u, "user": pseudonym(u["user"], cfg.cluster)} for u in data.users]
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if "csv" in formats:
        written += write_csvs(data, out_dir, users_out)
    if "html" in formats:
        p = out_dir / "report.html"
        p.write_text(render_html(data, users_out), encoding="utf-8")
        written.append(p)
    return written
