"""Monthly cost and usage report: one self-contained HTML file and CSVs that finance can audit from the page.

Every number is read from the marts (the report computes no accounting of its own, so it cannot disagree
with the exporter or the dashboards); the only arithmetic here is presentation: sums for the total rows,
shares of a total (month-over-month change, NVML coverage), unit conversion (seconds to hours or minutes),
a budget's invoices summed to the month's end.
The reconciliation's causes, the rates applied and the "started by" GPU-hours come from the pipelines that
own their data (docs/pipelines.md#cost, #backfill-efficiency). Charts are inline SVG so the file opens with
no network and no JavaScript. Each section has its own loader and renderer (`_load_*`, `_*_section`), so a
new section is one function of each.
"""

from __future__ import annotations

import csv
import hashlib
import html
import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb

from slurmscope.config import Config
from slurmscope.slurm_states import JOB_FAILURE_STATES

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
NO_DATA = "no data"
NOT_CONFIGURED = "not configured"
NO_SAMPLE = "no sample"
PLACEHOLDERS = ("", "–", NO_DATA, NOT_CONFIGURED, NO_SAMPLE)
RECONCILIATION_ID = "reconciliation"
"""Element id of the reconciliation block (the browser test finds it by this id)."""
FAIR_TREE_URL = "https://slurm.schedmd.com/fair_tree.html"
SSHARE_URL = "https://slurm.schedmd.com/sshare.html"


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


CAPACITY_PARTS = ("allocated", "idle", "down", "reserved")


@dataclass
class ReportData:
    cluster: str
    month: date
    tz: str = "UTC"
    accounts: list[dict] = field(default_factory=list)
    users: list[dict] = field(default_factory=list)
    prev_month_invoiced: bool = False  # the previous month has invoice rows: a missing account there is $0
    capacity: list[dict] = field(default_factory=list)
    rates: list[dict] = field(default_factory=list)
    reconciliation: dict | None = None
    daily: list[dict] = field(default_factory=list)
    waste: list[dict] = field(default_factory=list)
    outcomes: list[dict] = field(default_factory=list)
    requeues: dict = field(default_factory=dict)
    faults: list[dict] = field(default_factory=list)
    top_nodes: list[dict] = field(default_factory=list)
    waits: list[dict] = field(default_factory=list)
    wait_trend: list[dict] = field(default_factory=list)
    backfill: list[dict] = field(default_factory=list)
    fairshare: list[dict] = field(default_factory=list)  # account rows of the association tree, depth-first
    fairshare_source: str | None = None  # 'sshare' (Slurm's own figures) or 'computed'
    fairshare_as_of: datetime | None = None
    used_gpu_hours: float | None = None  # useful (activity-weighted) GPU-hours the NVML agents sampled
    gpm_gpu_hours: float | None = None  # of the sampled ones, those whose activity is GPM SM activity
    sampled_allocated_gpu_hours: float | None = None
    efficiency_charged_gpu_hours: float | None = None  # charged GPU-hours beside the NVML sample
    version: int | None = None
    spread_cost_usd: Decimal = Decimal(0)  # unallocated capacity in the charges (billing.idle_cost = spread)
    unallocated_cost_usd: Decimal | None = None  # capacity dollars charged to nobody (the unallocated line)
    powered_down_gpu_hours: float | None = None  # powered-off GPUs, outside capacity
    mig_gpu_hours: float | None = None  # MIG slices' part of capacity, by fraction of a GPU
    frozen: bool | None = None
    budgets: list[dict] = field(default_factory=list)  # _load_budgets

    @property
    def totals(self) -> dict:
        cap = {
            k: sum((r[k] for r in self.capacity), Decimal(0) if k.endswith("usd") else 0.0)
            for k in (
                "capacity_gpu_hours",
                *[f"{p}_gpu_hours" for p in CAPACITY_PARTS],
                "powered_down_gpu_hours",
                "capacity_cost_usd",
                *[f"{p}_cost_usd" for p in CAPACITY_PARTS],
            )
        }
        charged_hours = sum(r["gpu_hours"] for r in self.accounts)
        charged_cost = sum((r["cost_usd"] for r in self.accounts), Decimal(0))
        cap["charged_gpu_hours"] = charged_hours
        cap["charged_cost_usd"] = charged_cost
        cap["used_gpu_hours"] = self.used_gpu_hours
        cap["sampled_allocated_gpu_hours"] = self.sampled_allocated_gpu_hours
        cap["cost_per_gpu_hour"] = (charged_cost / Decimal(str(charged_hours))) if charged_hours else None
        cap["nvml_coverage"] = (
            self.sampled_allocated_gpu_hours / self.efficiency_charged_gpu_hours
            if self.sampled_allocated_gpu_hours and self.efficiency_charged_gpu_hours
            else None
        )
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


# ---- loaders (one per section; each reads its marts for the month) ----


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


def _load_chargeback(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    """Invoice rows of the month and the month before; the latest version of a re-issued month wins."""
    month, prv = d.month, prev_month(d.month)
    latest = """
        WITH v AS (SELECT month, max(version) AS version FROM mart_cost_monthly
                   WHERE cluster = ? AND month IN (?, ?) GROUP BY month)
        SELECT m.* FROM mart_cost_monthly m JOIN v USING (month, version) WHERE m.cluster = ?
    """
    monthly = _rows(con, latest, [d.cluster, month, prv, d.cluster])
    cur = [r for r in monthly if r["month"] == month]
    prev = [r for r in monthly if r["month"] == prv]
    d.prev_month_invoiced = bool(prev)
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

    def blank(account: str) -> dict:
        return {
            "account": account,
            "gpu_hours": 0.0,
            "cost_usd": Decimal(0),
            "share": 0.0,
            "prev_cost_usd": Decimal(0) if prev else None,
        }

    by_acct: dict[str, dict] = {}
    for r in cur:
        a = by_acct.setdefault(r["account"], blank(r["account"]))
        a["gpu_hours"] += r["gpu_hours"]
        a["cost_usd"] += Decimal(r["cost_usd"])
        a["share"] += r["share"]
    for r in prev:
        a = by_acct.setdefault(r["account"], blank(r["account"]))
        a["prev_cost_usd"] += Decimal(r["cost_usd"])
    for a in by_acct.values():
        a["mom_change"] = (
            float((a["cost_usd"] - a["prev_cost_usd"]) / a["prev_cost_usd"]) if a["prev_cost_usd"] else None
        )
    d.accounts = sorted(
        (a for a in by_acct.values() if a["gpu_hours"] or a["cost_usd"]),
        key=lambda a: (-a["cost_usd"], a["account"]),
    )


def _load_capacity(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    nxt = next_month(d.month)
    d.capacity = _rows(
        con,
        """
        SELECT "partition", gpu_model,
               sum(capacity_gpu_seconds) / 3600 AS capacity_gpu_hours,
               sum(allocated_gpu_seconds) / 3600 AS allocated_gpu_hours,
               sum(idle_gpu_seconds) / 3600 AS idle_gpu_hours,
               sum(down_gpu_seconds) / 3600 AS down_gpu_hours,
               sum(reserved_gpu_seconds) / 3600 AS reserved_gpu_hours,
               coalesce(sum(powered_down_gpu_seconds), 0) / 3600 AS powered_down_gpu_hours,
               coalesce(sum(mig_gpu_seconds), 0) / 3600 AS mig_gpu_hours,
               sum(capacity_cost_usd) AS capacity_cost_usd, sum(allocated_cost_usd) AS allocated_cost_usd,
               sum(idle_cost_usd) AS idle_cost_usd, sum(down_cost_usd) AS down_cost_usd,
               sum(reserved_cost_usd) AS reserved_cost_usd
        FROM mart_capacity_daily WHERE cluster = ? AND day >= ? AND day < ?
        GROUP BY ALL ORDER BY 1, 2""",
        [d.cluster, d.month, nxt],
    )
    off = sum(r["powered_down_gpu_hours"] for r in d.capacity)
    d.powered_down_gpu_hours = float(off) if off else None
    mig = sum(r["mig_gpu_hours"] for r in d.capacity)
    d.mig_gpu_hours = float(mig) if mig else None
    if _has_table(con, "mart_cost_unallocated_monthly"):
        line = con.execute(
            "SELECT sum(idle_cost_usd + down_cost_usd + reserved_cost_usd), count(*)"
            " FROM mart_cost_unallocated_monthly WHERE cluster = ? AND month = ?",
            [d.cluster, d.month],
        ).fetchone()
        d.unallocated_cost_usd = Decimal(line[0]) if line[1] else None


def _load_rates(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    """The rates the cost pipeline applied, one row per scope and price-book entry, with the days it held."""
    if not _has_table(con, "mart_cost_rates_daily"):
        return
    d.rates = _rows(
        con,
        """
        SELECT "partition", gpu_model, rate_per_gpu_hour, price_key, kind, purchase_usd, lifetime_years,
               power_kw, usd_per_kwh, pue, overhead_usd_per_year, gpus_per_unit,
               min(day) AS first_day, max(day) AS last_day, count(*) AS days
        FROM mart_cost_rates_daily WHERE cluster = ? AND day >= ? AND day < ?
        GROUP BY ALL ORDER BY "partition", gpu_model, first_day""",
        [d.cluster, d.month, next_month(d.month)],
    )


def _load_reconciliation(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    if not _has_table(con, "mart_cost_reconciliation_monthly"):
        return
    rows = _rows(
        con,
        "SELECT * EXCLUDE (cluster, month) FROM mart_cost_reconciliation_monthly WHERE cluster = ? AND month = ?",
        [d.cluster, d.month],
    )
    d.reconciliation = rows[0] if rows else None


def _load_daily(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    d.daily = _rows(
        con,
        """
        SELECT day, account, sum(gpu_seconds) / 3600 AS gpu_hours, sum(cost_usd) AS cost_usd
        FROM mart_cost_daily WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 1, 2""",
        [d.cluster, d.month, next_month(d.month)],
    )


def _load_waste(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    """Failed and requeued attempts that ended in the month (sacct, whole attempts: final once the month has
    ended), beside what the NVML sample measured of the month's allocations."""
    nxt = next_month(d.month)
    if _has_table(con, "mart_cost_waste_daily"):
        d.waste = _rows(
            con,
            """
            SELECT account, sum(attempts) AS attempts, sum(failed_attempts) AS failed_attempts,
                   sum(failed_gpu_seconds) / 3600 AS failed_gpu_hours, sum(failed_cost_usd) AS failed_cost_usd,
                   sum(requeued_attempts) AS requeued_attempts,
                   sum(requeued_gpu_seconds) / 3600 AS requeued_gpu_hours,
                   sum(requeued_cost_usd) AS requeued_cost_usd
            FROM mart_cost_waste_daily WHERE cluster = ? AND day >= ? AND day < ?
            GROUP BY ALL ORDER BY failed_gpu_hours DESC, 1""",
            [d.cluster, d.month, nxt],
        )
    if not _has_table(con, "mart_cost_efficiency_daily"):
        return
    # The cost pipeline's usage-weighted view: useful = held seconds x activity, where sampled (SM activity
    # where the agents read GPM, GPU_UTIL elsewhere).
    eff = {
        r["account"]: r
        for r in _rows(
            con,
            """
        SELECT account, sum(gpu_seconds) / 3600 AS charged_gpu_hours,
               sum(sampled_gpu_seconds) / 3600 AS sampled_gpu_hours,
               sum(useful_gpu_seconds) / 3600 AS useful_gpu_hours,
               sum(gpm_gpu_seconds) / 3600 AS gpm_gpu_hours,
               sum(idle_gpu_seconds) / 3600 AS idle_gpu_hours, sum(idle_cost_usd) AS idle_cost_usd,
               sum(energy_kwh) AS energy_kwh, sum(energy_cost_usd) AS energy_cost_usd
        FROM mart_cost_efficiency_daily WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL""",
            [d.cluster, d.month, nxt],
        )
    }
    charged = {a["account"] for a in d.waste}
    d.waste += [{"account": a} for a in sorted(eff) if a not in charged]
    for w in d.waste:
        e = eff.get(w["account"], {})
        sampled = e.get("sampled_gpu_hours") or 0.0
        w["sampled_gpu_hours"] = sampled
        w["nvml_coverage"] = sampled / e["charged_gpu_hours"] if e.get("charged_gpu_hours") else None
        w["alloc_idle_gpu_hours"] = e.get("idle_gpu_hours") if sampled else None
        w["alloc_idle_cost_usd"] = e.get("idle_cost_usd") if sampled else None
        w["energy_kwh"] = e.get("energy_kwh") if sampled else None
        w["energy_cost_usd"] = e.get("energy_cost_usd") if sampled else None
    sampled = sum(r["sampled_gpu_hours"] or 0 for r in eff.values())
    if sampled > 0:
        d.sampled_allocated_gpu_hours = sampled
        d.used_gpu_hours = sum(r["useful_gpu_hours"] or 0 for r in eff.values())
        d.gpm_gpu_hours = sum(r["gpm_gpu_hours"] or 0 for r in eff.values())
        d.efficiency_charged_gpu_hours = sum(r["charged_gpu_hours"] or 0 for r in eff.values())


def _load_reliability(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    month, nxt = d.month, next_month(d.month)
    d.outcomes = _rows(
        con,
        """
        SELECT state, failure, sum(jobs) AS jobs, sum(gpu_hours) AS gpu_hours FROM mart_job_outcomes_daily
        WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 3 DESC, 1, 2""",
        [d.cluster, month, nxt],
    )
    rq = _rows(
        con,
        """
        SELECT sum(attempts_ended) AS attempts_ended, sum(requeues) AS requeues,
               sum(requeued_gpu_hours) AS requeued_gpu_hours
        FROM mart_requeues_daily WHERE cluster = ? AND day >= ? AND day < ?""",
        [d.cluster, month, nxt],
    )
    d.requeues = rq[0] if rq else {}
    d.faults = _rows(
        con,
        """
        SELECT fault_kind, count(DISTINCT (node, fault_time)) AS faults, count(*) AS jobs_killed,
               sum(gpu_hours_lost) AS gpu_hours_lost, sum(CASE WHEN came_back THEN 1 ELSE 0 END) AS came_back
        FROM mart_fault_impact WHERE cluster = ? AND fault_time >= ? AND fault_time < ?
        GROUP BY ALL ORDER BY 4 DESC""",
        [d.cluster, month, nxt],
    )
    d.top_nodes = _rows(
        con,
        """
        SELECT node, count(DISTINCT fault_time) AS faults, sum(gpu_hours_lost) AS gpu_hours_lost
        FROM mart_fault_impact WHERE cluster = ? AND fault_time >= ? AND fault_time < ?
        GROUP BY ALL ORDER BY 2 DESC, 3 DESC, 1 LIMIT 10""",
        [d.cluster, month, nxt],
    )


def _load_scheduling(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    month, nxt = d.month, next_month(d.month)
    d.waits = _rows(
        con,
        """
        SELECT "partition", sum(jobs) AS jobs, sum(mean_seconds * jobs) / nullif(sum(jobs), 0) AS mean_seconds,
               sum(p50_seconds * jobs) / nullif(sum(jobs), 0) AS p50_seconds,
               sum(p90_seconds * jobs) / nullif(sum(jobs), 0) AS p90_seconds,
               sum(p99_seconds * jobs) / nullif(sum(jobs), 0) AS p99_seconds,
               max(max_seconds) AS max_seconds
        FROM mart_wait_times WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 1""",
        [d.cluster, month, nxt],
    )
    d.wait_trend = _rows(
        con,
        """
        SELECT day, "partition", sum(mean_seconds * jobs) / nullif(sum(jobs), 0) AS mean_seconds
        FROM mart_wait_times WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 1, 2""",
        [d.cluster, month, nxt],
    )
    d.backfill = _rows(
        con,
        """
        SELECT sched_by, sum(jobs) AS jobs, sum(gpu_hours) AS gpu_hours FROM mart_backfill_daily
        WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL ORDER BY 3 DESC, 1""",
        [d.cluster, month, nxt],
    )


def month_end(month: date, tz: str) -> datetime:
    """The instant the billing month ends (local midnight of the next month's first day)."""
    nxt = next_month(month)
    return datetime(nxt.year, nxt.month, nxt.day, tzinfo=ZoneInfo(tz))


def _load_fairshare(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    """The account tree at the month's end: Slurm's own figures (the last sshare snapshot the fair-share
    pipeline kept for a day of the month: they never change afterwards), else the pipeline's recomputation as
    of the month's end; target and usage shares from mart_fairshare_drift's last day of the month."""
    if not _has_table(con, "mart_fairshare"):
        return
    end = month_end(d.month, d.tz)
    first = datetime(d.month.year, d.month.month, 1, tzinfo=ZoneInfo(d.tz))
    last = """SELECT max(as_of) FROM mart_fairshare
              WHERE cluster = ? AND "user" = '' AND source = ? AND as_of >= ? AND as_of < ?"""
    for source, until in (("sshare", end), ("computed", end + timedelta(microseconds=1))):
        picked = con.execute(last, [d.cluster, source, first, until]).fetchone()[0]
        if picked is not None:
            d.fairshare_as_of, d.fairshare_source = picked, source
            break
    else:
        return
    rows = _rows(
        con,
        """
        SELECT account, parent, raw_shares, norm_shares, effectv_usage, level_fs FROM mart_fairshare
        WHERE cluster = ? AND "user" = '' AND as_of = ? AND source = ? ORDER BY account""",
        [d.cluster, d.fairshare_as_of, d.fairshare_source],
    )
    drift = {}
    if _has_table(con, "mart_fairshare_drift"):
        drift = {
            r["account"]: r
            for r in _rows(
                con,
                """
                SELECT account, arg_max(usage_share_30d, day) AS usage_share_30d,
                       arg_max(target_share, day) AS target_share
                FROM mart_fairshare_drift WHERE cluster = ? AND day >= ? AND day < ? GROUP BY ALL""",
                [d.cluster, d.month, next_month(d.month)],
            )
        }
    d.fairshare = account_tree(rows, drift)


def account_tree(rows: list[dict], drift: dict[str, dict]) -> list[dict]:
    """Account rows depth-first from the root (children by name), each with its `depth`; accounts whose
    parent is missing hang under the root. Pure layout: the shares are the mart's."""
    names = {r["account"] for r in rows}
    children: dict[str | None, list[dict]] = {}
    for r in rows:
        parent = r["parent"] if r["parent"] in names else None
        if r["account"] == "root" or r["account"] == r["parent"]:
            parent = None
        children.setdefault(parent, []).append(r)
    out: list[dict] = []

    def visit(r: dict, depth: int) -> None:
        out.append({**r, **drift.get(r["account"], {}), "depth": depth})
        for c in sorted(children.get(r["account"], []), key=lambda x: x["account"]):
            visit(c, depth + 1)

    for top in sorted(children.get(None, []), key=lambda x: (x["account"] != "root", x["account"])):
        visit(top, 0)
    return out


# ---- budgets and allocations: _load_budgets, _budgets_section, _csv_budgets ----


def _load_budgets(con: duckdb.DuckDBPyConnection, d: ReportData) -> None:
    """d.budgets: every config budget whose period overlaps the month (mart_budget_period), used through the
    month's end = its invoice rows (latest version) of the period's months up to this one, so a closed month
    reads the same after later runs; and every GrpTRESMins allocation of the month's last sshare snapshot
    with what Slurm had counted against it then (GrpTRESRaw, decayed: pipelines/budgets.py)."""
    from slurmscope.pipelines.budgets import allocations

    nxt = next_month(d.month)
    rows: list[dict] = []
    if _has_table(con, "mart_budget_period"):
        rows = _rows(
            con,
            """
            WITH b AS (SELECT DISTINCT account, budget, unit, period_start, period_end, amount FROM mart_budget_period
                       WHERE cluster = ? AND source = 'config' AND period_start < ? AND period_end > ?),
                 v AS (SELECT month, max(version) AS version FROM mart_cost_monthly WHERE cluster = ? GROUP BY month),
                 inv AS (SELECT m.month, m.account, sum(m.cost_usd)::DOUBLE AS usd, sum(m.gpu_hours) AS gpu_hours
                         FROM mart_cost_monthly m JOIN v USING (month, version) WHERE m.cluster = ? GROUP BY ALL)
            SELECT b.*, 'config' AS source,
                   coalesce(sum(CASE WHEN b.unit = 'usd' THEN inv.usd ELSE inv.gpu_hours END)
                            FILTER (WHERE inv.month >= b.period_start AND inv.month < least(b.period_end, ?)), 0) AS used,
                   coalesce(sum(CASE WHEN b.unit = 'usd' THEN inv.usd ELSE inv.gpu_hours END)
                            FILTER (WHERE inv.month = ?), 0) AS this_month,
                   (least(b.period_end, ?) - b.period_start) / (b.period_end - b.period_start) AS elapsed,
                   NULL::TIMESTAMPTZ AS usage_as_of
            FROM b LEFT JOIN inv ON inv.account = b.account GROUP BY ALL ORDER BY b.account, b.budget""",
            [d.cluster, nxt, d.month, d.cluster, d.cluster, nxt, d.month, nxt],
        )
    for r in rows:
        r["forecast"] = r["used"] / r["elapsed"] if r["elapsed"] < 1 else r["used"]
    if _has_table(con, "shares"):
        snap = _rows(
            con,
            """
            SELECT snapshot_time, account, "user", grp_tres_mins, grp_tres_raw, raw_usage FROM shares
            WHERE cluster = ? AND snapshot_time = (SELECT max(snapshot_time) FROM shares WHERE cluster = ?
                                                   AND snapshot_time >= ? AND snapshot_time < ?)""",
            [d.cluster, d.cluster, d.month, nxt],
        )
        for a in sorted(allocations(snap), key=lambda a: (a["account"], a["budget"])):
            rows.append(
                {
                    **{k: a[k] for k in ("account", "budget", "unit", "amount", "used", "usage_as_of")},
                    "source": "slurm",
                    "period_start": None,
                    "period_end": None,
                    "this_month": None,
                    "elapsed": None,
                    "forecast": None,
                }
            )
    d.budgets = rows


BUDGET_UNITS = {"usd": "USD", "gpu_hours": "GPU-hours", "tres_hours": "TRES-hours"}


def _budget_status(r: dict) -> str:
    if r["used"] is None:
        return "not collected"
    if r["used"] > r["amount"]:
        return "over"
    if r["forecast"] is not None and r["forecast"] > r["amount"]:
        return "forecast over"
    return "within"


def _budgets_section(d: ReportData) -> str:
    """Budgets and allocations: config budgets through the month's end, Slurm's GrpTRESMins as counted."""
    if not d.budgets:
        return (
            "<h2>Budgets and allocations</h2><p class=note>No budget (config budgets) and no GrpTRESMins "
            "allocation in this month's sshare snapshots.</p>"
        )
    config = [r for r in d.budgets if r["source"] == "config"]
    slurm = [r for r in d.budgets if r["source"] == "slurm"]
    parts = ["<h2>Budgets and allocations</h2>"]
    if config:
        parts.append(
            _table(
                [
                    "account",
                    "budget",
                    "period",
                    "amount",
                    "this month",
                    "used to month end",
                    "used",
                    "forecast",
                    "status",
                ],
                [
                    [
                        r["account"],
                        BUDGET_UNITS[r["unit"]],
                        f"{r['period_start']:%Y-%m} to {r['period_end'] - timedelta(days=1):%Y-%m}",
                        _fmt(r["amount"], 2),
                        _fmt(r["this_month"], 2),
                        _fmt(r["used"], 2),
                        f"{r['used'] / r['amount']:.1%}",
                        f"{r['forecast'] / r['amount']:.1%}",
                        _budget_status(r),
                    ]
                    for r in config
                ],
            )
        )
        parts.append(
            "<p class=note>Config budgets (docs/pipelines.md#budgets): used = the account's invoice rows (latest "
            "version) of the period's months up to this one; forecast = used / elapsed share of the period's "
            "days at this month's end (= used once the period ended).</p>"
        )
    if slurm:
        as_of = max(r["usage_as_of"] for r in slurm)
        parts.append(
            _table(
                ["account", "GrpTRESMins", "limit", "used by Slurm's count", "used", "status"],
                [
                    [
                        r["account"],
                        r["budget"].removeprefix("GrpTRESMins:"),
                        f"{_fmt(r['amount'], 2)} {BUDGET_UNITS[r['unit']]}",
                        _fmt(r["used"], 2),
                        "–" if r["used"] is None else f"{r['used'] / r['amount']:.1%}",
                        _budget_status(r),
                    ]
                    for r in slurm
                ],
            )
        )
        parts.append(
            f"<p class=note>Slurm's allocations (sacctmgr GrpTRESMins of account associations) as the month's "
            f"last sshare snapshot ({_esc(f'{as_of:%Y-%m-%d %H:%M %Z}')}) showed them: used = GrpTRESRaw, the "
            "decayed TRES-minutes of the association and its children that Slurm compares with the limit "
            "(docs/pipelines.md#budgets).</p>"
        )
    return "".join(parts)


def _csv_budgets(d: ReportData, out: Path) -> Path:
    p = out / "budgets.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(
            [
                "month",
                "account",
                "budget",
                "source",
                "unit",
                "period_start",
                "period_end",
                "amount",
                "this_month",
                "used_to_month_end",
                "elapsed_at_month_end",
                "forecast",
                "usage_as_of",
            ]
        )
        for r in d.budgets:
            w.writerow(
                [
                    f"{d.month:%Y-%m}",
                    r["account"],
                    r["budget"],
                    r["source"],
                    r["unit"],
                    "" if r["period_start"] is None else r["period_start"].isoformat(),
                    "" if r["period_end"] is None else r["period_end"].isoformat(),
                    f"{r['amount']:.6f}",
                    "" if r["this_month"] is None else f"{r['this_month']:.6f}",
                    "" if r["used"] is None else f"{r['used']:.6f}",
                    "" if r["elapsed"] is None else f"{r['elapsed']:.6f}",
                    "" if r["forecast"] is None else f"{r['forecast']:.6f}",
                    "" if r["usage_as_of"] is None else r["usage_as_of"].isoformat(),
                ]
            )
    return p


LOADERS = (
    _load_chargeback,
    _load_capacity,
    _load_rates,
    _load_reconciliation,
    _load_daily,
    _load_waste,
    _load_reliability,
    _load_scheduling,
    _load_fairshare,
    _load_budgets,
)


def collect_data(con: duckdb.DuckDBPyConnection, cluster: str, month: date, tz: str = "UTC") -> ReportData:
    """Read the month's rows from the marts; `tz` is the billing zone (the month's end for the fair-share
    tree)."""
    d = ReportData(cluster=cluster, month=month, tz=tz)
    for load in LOADERS:
        load(con, d)
    return d


# ---- charts (inline SVG) ----


def _esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def nice_ticks(peak: float, target: int = 5) -> list[float]:
    """Axis ticks from 0 at a round step (1, 2, 2.5 or 5 × 10^k) whose last tick is at or above `peak`: the
    "nice numbers" of P. Heckbert, Nice Numbers for Graph Labels, Graphics Gems (1990), with 2.5 added."""
    if not peak or peak <= 0 or not math.isfinite(peak):
        return [0.0, 1.0]
    raw = peak / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-12))
    n = math.ceil(peak / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _tick_label(v: float, step: float) -> str:
    """As many decimals as the step needs (2.5 → one, 0.25 → two, 100 → none)."""
    decimals = next(d for d in range(7) if abs(step * 10**d - round(step * 10**d)) < 1e-9 or d == 6)
    return f"{v:,.{decimals}f}"


def _y_axis(ticks: list[float], left: int, top: int, plot_w: float, plot_h: float, unit: str) -> list[str]:
    step = ticks[1] - ticks[0]
    parts = []
    for t in ticks:
        y = top + plot_h - t / ticks[-1] * plot_h
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<text x="{left - 6}" y="{y + 3:.1f}" font-size="10" text-anchor="end">{_tick_label(t, step)}</text>'
        )
    parts.append(
        f'<text x="12" y="{top + plot_h / 2}" font-size="10" text-anchor="middle" '
        f'transform="rotate(-90 12 {top + plot_h / 2})">{_esc(unit)}</text>'
    )
    return parts


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
    ticks = nice_ticks(max(totals, default=0))
    peak = ticks[-1]
    n = max(len(categories), 1)
    bar_w = plot_w / n
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{_esc(title)}</text>',
        *_y_axis(ticks, left, top, plot_w, plot_h, unit),
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>',
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
    ticks = nice_ticks(max(vals, default=0))
    peak = ticks[-1]
    n = max(len(categories) - 1, 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{_esc(title)}</text>',
        *_y_axis(ticks, left, top, plot_w, plot_h, unit),
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#333"/>',
    ]
    every = max((n + 1) // 10, 1)
    for i, cat in enumerate(categories):
        if i % every == 0:
            parts.append(
                f'<text x="{left + i / n * plot_w:.1f}" y="{top + plot_h + 14}" font-size="9" '
                f'text-anchor="middle">{_esc(cat[-5:])}</text>'
            )
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


# ---- CSV ----


def _money(v) -> str:
    return "" if v is None else f"{Decimal(v):.2f}"


def _hours(v, digits: int = 3) -> str:
    return "" if v is None else f"{round(v, digits) + 0.0:.{digits}f}"  # + 0.0: no "-0.000"


def _writer(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return path


def _csv_accounts(d: ReportData, out: Path) -> Path:
    m = d.month.strftime("%Y-%m")
    rows = [
        [
            m,
            a["account"],
            _hours(a["gpu_hours"]),
            _money(a["cost_usd"]),
            f"{a['share']:.6f}",
            _money(a["prev_cost_usd"]),
            "" if a["mom_change"] is None else f"{a['mom_change']:.4f}",
        ]
        for a in d.accounts
    ]
    prev_total = sum((a["prev_cost_usd"] for a in d.accounts), Decimal(0)) if d.prev_month_invoiced else None
    rows.append(
        [
            m,
            "TOTAL",
            _hours(sum(a["gpu_hours"] for a in d.accounts)),
            _money(sum((a["cost_usd"] for a in d.accounts), Decimal(0))),
            f"{sum(a['share'] for a in d.accounts):.6f}",
            _money(prev_total),
            "",
        ]
    )
    header = ["month", "account", "gpu_hours", "cost_usd", "share", "prev_month_cost_usd", "mom_change"]
    return _writer(out / "chargeback_accounts.csv", header, rows)


def _csv_users(d: ReportData, out: Path, users_out: list[dict]) -> Path:
    m = d.month.strftime("%Y-%m")
    rows = [
        [m, u["account"], u["user"], _hours(u["gpu_hours"]), _money(u["cost_usd"]), f"{u['share']:.6f}"]
        for u in users_out
    ]
    rows.append(
        [
            m,
            "TOTAL",
            "",
            _hours(sum(u["gpu_hours"] for u in users_out)),
            _money(sum((u["cost_usd"] for u in users_out), Decimal(0))),
            f"{sum(u['share'] for u in users_out):.6f}",
        ]
    )
    return _writer(
        out / "chargeback_users.csv", ["month", "account", "user", "gpu_hours", "cost_usd", "share"], rows
    )


def _csv_capacity(d: ReportData, out: Path) -> Path:
    m, keys = d.month.strftime("%Y-%m"), ["capacity", *CAPACITY_PARTS]
    rows = [
        [m, r["partition"], r["gpu_model"]]
        + [_hours(r[f"{k}_gpu_hours"]) for k in keys]
        + [_money(r[f"{k}_cost_usd"]) for k in keys]
        + [_hours(r["powered_down_gpu_hours"])]
        for r in d.capacity
    ]
    t = d.totals
    rows.append(
        [m, "TOTAL", ""]
        + [_hours(t[f"{k}_gpu_hours"]) for k in keys]
        + [_money(t[f"{k}_cost_usd"]) for k in keys]
        + [_hours(t["powered_down_gpu_hours"])]
    )
    header = ["month", "partition", "gpu_model"] + [f"{k}_gpu_hours" for k in keys]
    header += [f"{k}_cost_usd" for k in keys] + ["powered_down_gpu_hours"]
    return _writer(out / "capacity.csv", header, rows)


def _csv_daily(d: ReportData, out: Path) -> Path:
    rows = [
        [r["day"].isoformat(), r["account"], _hours(r["gpu_hours"]), f"{r['cost_usd']:.6f}"] for r in d.daily
    ]
    return _writer(out / "daily_usage.csv", ["day", "account", "gpu_hours", "cost_usd_unrounded"], rows)


RATE_INPUTS = (
    "purchase_usd",
    "lifetime_years",
    "power_kw",
    "usd_per_kwh",
    "pue",
    "overhead_usd_per_year",
    "gpus_per_unit",
)


def _csv_rates(d: ReportData, out: Path) -> Path:
    header = ["month", "partition", "gpu_model", "rate_per_gpu_hour", "price_key", "kind", *RATE_INPUTS]
    header += ["first_day", "last_day"]
    rows = [
        [d.month.strftime("%Y-%m"), r["partition"], r["gpu_model"], f"{r['rate_per_gpu_hour']:.6f}"]
        + [r["price_key"], r["kind"]]
        + ["" if r[k] is None else f"{r[k]:g}" for k in RATE_INPUTS]
        + [r["first_day"].isoformat(), r["last_day"].isoformat()]
        for r in d.rates
    ]
    return _writer(out / "rates.csv", header, rows)


def reconciliation_lines(d: ReportData) -> list[tuple[str, str, str, object]]:
    """(group, measure, unit, value) of the reconciliation block, in page order; values as the marts hold
    them (GPU-hours from GPU-seconds / 3600; dollars in cents). Empty when the month has no reconciliation."""
    r, t = d.reconciliation, d.totals
    if r is None:
        return []
    h = 3600.0
    cap = [
        ("capacity", "capacity", "gpu_hours", t["capacity_gpu_hours"]),
        *[("capacity", p, "gpu_hours", t[f"{p}_gpu_hours"]) for p in CAPACITY_PARTS],
        ("capacity", "powered_down", "gpu_hours", t["powered_down_gpu_hours"]),
    ]
    gpu = [
        ("allocated_vs_charged", k, "gpu_hours", r[f"{k}_gpu_seconds"] / h)
        for k in (
            "allocated",
            "charged",
            "difference",
            "unrecorded",
            "unseen",
            "sampling",
            "gap",
            "invoiced",
            "after_invoice",
        )
    ]
    usd = [
        ("usd", k, "usd", Decimal(r[f"{k}_cost_usd"]))
        for k in ("capacity", "invoiced", "unallocated", "difference", "allocated", "usage", "blocked")
    ]
    usd[1:1] = [("usd", f"capacity_{p}", "usd", t[f"{p}_cost_usd"]) for p in CAPACITY_PARTS]
    return cap + gpu + usd


def _csv_reconciliation(d: ReportData, out: Path) -> Path:
    m = d.month.strftime("%Y-%m")
    rows = [
        [m, group, measure, unit, _money(v) if unit == "usd" else _hours(v, 6)]
        for group, measure, unit, v in reconciliation_lines(d)
    ]
    return _writer(out / "reconciliation.csv", ["month", "group", "measure", "unit", "value"], rows)


def write_csvs(d: ReportData, out: Path, users_out: list[dict]) -> list[Path]:
    """Finance CSVs: chargeback per account and user (with a TOTAL row equal to the sum of the rows),
    capacity, daily usage, the rates applied and the reconciliation."""
    return [
        _csv_accounts(d, out),
        _csv_users(d, out, users_out),
        _csv_capacity(d, out),
        _csv_daily(d, out),
        _csv_rates(d, out),
        _csv_reconciliation(d, out),
        _csv_budgets(d, out),
    ]


# ---- HTML ----


NUMERIC = re.compile(r"^[-+−]?[\d,]*\.?\d+%?$")


def _numeric(cell: object) -> bool:
    return isinstance(cell, (int, float, Decimal)) or bool(NUMERIC.match(str(cell)))


def _activity_split(d: ReportData) -> str:
    if d.sampled_allocated_gpu_hours is None:
        return NO_DATA
    gpm = d.gpm_gpu_hours or 0.0
    return f"{_fmt(gpm)} / {_fmt(d.sampled_allocated_gpu_hours - gpm)}"


def _table(
    headers: list[str],
    rows: list[list[object]],
    *,
    groups: list[tuple[str, int]] | None = None,
    classes: list[str] | None = None,
    table_id: str | None = None,
) -> str:
    """A table; `groups` is a header row above the column names ((label, columns spanned)), `classes` a
    CSS class per row (e.g. 'total'). Columns whose cells are all numbers (or empty) are right-aligned."""
    width = len(headers)
    numeric = [
        i > 0
        and any(str(r[i]) for r in rows)
        and all(_numeric(r[i]) for r in rows if str(r[i]) not in PLACEHOLDERS)
        for i in range(width)
    ]

    def cls(i: int) -> str:
        return ' class="n"' if numeric[i] else ""

    head = ""
    if groups:
        head += "<tr>" + "".join(f'<th colspan="{n}">{_esc(g)}</th>' for g, n in groups) + "</tr>"
    head += "<tr>" + "".join(f"<th{cls(i)}>{_esc(h)}</th>" for i, h in enumerate(headers)) + "</tr>"
    body = "".join(
        (f'<tr class="{classes[k]}">' if classes and classes[k] else "<tr>")
        + "".join(f"<td{cls(i)}>{_esc(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for k, r in enumerate(rows)
    )
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead>{head}</thead><tbody>{body}</tbody></table>"


def _fmt(v, digits: int = 1, missing: str = "–") -> str:
    if v is None:
        return missing
    if isinstance(v, Decimal):
        return f"{v:,.2f}"
    return f"{round(v, digits) + 0.0:,.{digits}f}"  # + 0.0: no "-0.0"


def _pct(v: float | None, missing: str = "–") -> str:
    return missing if v is None else f"{v:.1%}"


def _note(text: str) -> str:
    return f"<p class=note>{_esc(text)}</p>"


def _section(ident: str, title: str, *parts: str) -> str:
    return f'<section id="{ident}"><h2>{_esc(title)}</h2>{"".join(parts)}</section>'


def _header(d: ReportData) -> str:
    status = (
        "no invoice rows for this month"
        if d.version is None
        else f"invoice version {d.version}, {'frozen (closed month)' if d.frozen else 'open month, provisional'}"
    )
    return (
        f"<h1>slurmscope — {_esc(d.cluster)} — {d.month:%Y-%m}</h1><p class=meta>{_esc(status)}; "
        f"billing days in {_esc(d.tz)}. Every figure below names its source: <b>sinfo</b> (node snapshots, "
        "whole month), <b>sacct</b> (job accounting, whole month), <b>invoice</b> (mart_cost_monthly), or "
        "<b>NVML sample</b> (the GPUs the node agents sampled, with its coverage).</p>"
    )


def _totals_section(d: ReportData) -> str:
    t = d.totals
    invoice = "invoice" if d.version is None else f"invoice v{d.version}"
    coverage = t["nvml_coverage"]
    sample = NO_DATA if coverage is None else f"NVML sample, {coverage:.1%} of charged GPU-hours"
    if coverage is not None and d.mig_gpu_hours:
        sample += " (whole GPUs: NVML samples no MIG slice, GPM included)"
    rows = [
        ["GPU-hours available (capacity)", _fmt(t["capacity_gpu_hours"]), "sinfo"],
        ["GPU-hours allocated (sinfo)", _fmt(t["allocated_gpu_hours"]), "sinfo"],
        ["GPU-hours charged (sacct)", _fmt(t["charged_gpu_hours"]), f"sacct, {invoice}"],
        ["GPU-hours idle (capacity not allocated)", _fmt(t["idle_gpu_hours"]), "sinfo"],
        ["GPU-hours down or drained", _fmt(t["down_gpu_hours"]), "sinfo"],
        ["GPU-hours reserved", _fmt(t["reserved_gpu_hours"]), "sinfo"],
        *(
            [["GPU-hours powered off (not capacity)", _fmt(d.powered_down_gpu_hours), "sinfo"]]
            if d.powered_down_gpu_hours
            else []
        ),
        *(
            [["of capacity, MIG slices (each its fraction of a GPU)", _fmt(d.mig_gpu_hours), "sinfo"]]
            if d.mig_gpu_hours
            else []
        ),
        [
            "Useful GPU-hours (held x activity) / allocated GPU-hours sampled by NVML",
            NO_DATA
            if t["used_gpu_hours"] is None
            else f"{_fmt(t['used_gpu_hours'])} / {_fmt(t['sampled_allocated_gpu_hours'])}",
            sample,
        ],
        [
            "Activity measured by: GPM SM activity / GPU_UTIL (no GPM), sampled GPU-hours",
            _activity_split(d),
            sample,
        ],
        ["Useful share of allocated GPU time", _pct(t["useful_share"], NO_DATA), sample],
        ["Capacity cost (USD)", _fmt(t["capacity_cost_usd"]), "sinfo x rates applied"],
        ["Charged to accounts (USD)", _fmt(t["charged_cost_usd"]), invoice],
        *(
            [["Unallocated, charged to nobody (USD)", _fmt(d.unallocated_cost_usd), "unallocated line"]]
            if d.unallocated_cost_usd is not None
            else []
        ),
        *(
            [
                [
                    "of which unallocated capacity spread over accounts (USD)",
                    _fmt(d.spread_cost_usd),
                    f"{invoice} (billing.idle_cost = spread)",
                ]
            ]
            if d.spread_cost_usd
            else []
        ),
        ["Cost per charged GPU-hour (USD)", _fmt(t["cost_per_gpu_hour"], 3, NO_DATA), invoice],
        [
            "Cost per useful GPU-hour (USD)",
            _fmt(t["cost_per_useful_gpu_hour"], 3, NO_DATA),
            f"{invoice} / useful share ({sample})",
        ],
    ]
    return _section("totals", "Totals", _table(["measure", "value", "source"], rows))


def _rate_formula(r: dict) -> str:
    if r["kind"] != "amortised":
        return "fixed rate"
    return (
        f"(${r['purchase_usd']:,.0f} / ({r['lifetime_years']:g} y x 8766 h) + {r['power_kw']:g} kW x "
        f"${r['usd_per_kwh']:g}/kWh x PUE {r['pue']:g} + ${r['overhead_usd_per_year']:,.0f}/y / 8766 h) "
        f"/ {r['gpus_per_unit']:g} GPU per unit"
    )


def _rates_section(d: ReportData) -> str:
    if not d.rates:
        return _section("rates", "Rates applied", _note(f"{NO_DATA}: no rates recorded for this month."))
    rows = [
        [
            r["partition"] or "(none)",
            r["gpu_model"] or "(untyped)",
            f"{r['rate_per_gpu_hour']:.4f}",
            f"billing.rates.{r['price_key']}" if r["price_key"] != "default" else "billing.rates.default",
            r["kind"],
            _rate_formula(r),
            f"{r['first_day']:%m-%d} to {r['last_day']:%m-%d}",
        ]
        for r in d.rates
    ]
    return _section(
        "rates",
        "Rates applied",
        _table(
            ["partition", "GPU model", "USD per GPU-hour", "price-book entry", "kind", "inputs", "days"], rows
        ),
        _note(
            "The $/GPU-hour the cost pipeline priced each partition (capacity rows: the node's partitions) and "
            "GPU model with, per day (mart_cost_rates_daily): a partition entry wins over a GPU model entry, "
            "then billing.rates.default. Amortised = (purchase / lifetime + power x electricity x PUE + "
            "overhead) / GPUs per unit."
        ),
    )


def _capacity_section(d: ReportData) -> str:
    gpus = [r for r in d.capacity if r["capacity_gpu_hours"] or r["powered_down_gpu_hours"]]
    if not gpus:
        return _section(
            "capacity", "Capacity by partition and GPU model", _note(f"{NO_DATA}: no GPU nodes in sinfo.")
        )
    t = d.totals
    keys = ["capacity", *CAPACITY_PARTS]
    label = [[r["partition"] or "(none)", r["gpu_model"] or "(untyped)"] for r in gpus] + [["TOTAL", ""]]
    classes = [""] * len(gpus) + ["total"]
    hours = _table(
        [
            "partition(s)",
            "GPU model",
            "capacity",
            "allocated",
            "idle",
            "down or drained",
            "reserved",
            "powered off",
        ],
        [
            lab + [_fmt(r[f"{k}_gpu_hours"]) for k in keys] + [_fmt(r["powered_down_gpu_hours"])]
            for lab, r in zip(label, [*gpus, t], strict=True)
        ],
        groups=[("", 2), ("GPU-hours (sinfo, whole month)", 6)],
        classes=classes,
    )
    usd = _table(
        ["partition(s)", "GPU model", "capacity", "allocated", "idle", "down or drained", "reserved"],
        [lab + [_fmt(r[f"{k}_cost_usd"]) for k in keys] for lab, r in zip(label, [*gpus, t], strict=True)],
        groups=[("", 2), ("USD (GPU-hours x rate applied)", 5)],
        classes=classes,
    )
    hidden = len(d.capacity) - len(gpus)
    return _section(
        "capacity",
        "Capacity by partition and GPU model",
        hours,
        usd,
        _note(
            "A node in several partitions is counted once, under its partitions joined by ','. Powered-off GPUs "
            "are not capacity. Cents are rounded within each day and row so that allocated + idle + down + "
            "reserved = capacity to the cent (mart_capacity_daily)."
            + (
                f" {hidden} partition(s) without GPUs are left out (capacity.csv lists them)."
                if hidden
                else ""
            )
        ),
    )


def _reconciliation_section(d: ReportData) -> str:
    """The identities, each figure from the marts: capacity = allocated + idle + down + reserved (sinfo);
    allocated (sinfo) − charged (sacct) = the named causes; capacity cost = invoiced + unallocated line +
    difference."""
    r, t = d.reconciliation, d.totals
    if r is None:
        return (
            f'<section id="{RECONCILIATION_ID}" class="reconcile"><h2>Reconciliation</h2>'
            + _note(f"{NO_DATA}: run `slurmscope pipelines run` to build mart_cost_reconciliation_monthly.")
            + "</section>"
        )
    h = 3600.0

    def gh(v: float | None) -> str:
        return _fmt(v, 2)

    version = "" if d.version is None else f" version {d.version}"
    capacity = _table(
        ["", "GPU-hours", "USD"],
        [
            ["capacity (sinfo)", gh(t["capacity_gpu_hours"]), _fmt(t["capacity_cost_usd"])],
            ["= allocated (sinfo)", gh(t["allocated_gpu_hours"]), _fmt(t["allocated_cost_usd"])],
            ["+ idle", gh(t["idle_gpu_hours"]), _fmt(t["idle_cost_usd"])],
            ["+ down or drained", gh(t["down_gpu_hours"]), _fmt(t["down_cost_usd"])],
            ["+ reserved", gh(t["reserved_gpu_hours"]), _fmt(t["reserved_cost_usd"])],
            ["powered off (outside capacity, charged to nobody)", gh(t["powered_down_gpu_hours"]), ""],
            *(
                [["of capacity, MIG slices (each its fraction of a GPU)", gh(d.mig_gpu_hours), ""]]
                if d.mig_gpu_hours
                else []
            ),
        ],
        classes=["total", "", "", "", "", "aside", *(["aside"] if d.mig_gpu_hours else [])],
    )
    gpu = _table(
        ["", "GPU-hours"],
        [
            ["allocated in sinfo snapshots", gh(r["allocated_gpu_seconds"] / h)],
            ["− charged from sacct", gh(r["charged_gpu_seconds"] / h)],
            ["= difference", gh(r["difference_gpu_seconds"] / h)],
            [
                "  + unrecorded: allocated in a snapshot, no sacct attempt on the node then",
                gh(r["unrecorded_gpu_seconds"] / h),
            ],
            [
                "  − unseen: sacct attempts on the node beyond what the snapshot showed allocated",
                gh(r["unseen_gpu_seconds"] / h),
            ],
            [
                "  + sampling: a snapshot stands until the next; attempts started or ended in between",
                gh(r["sampling_gpu_seconds"] / h),
            ],
            [
                "  − gap: charged while no snapshot covered the node (snapshot gaps, no NodeList)",
                gh(r["gap_gpu_seconds"] / h),
            ],
            [f"charged on the invoice{version}", gh(r["invoiced_gpu_seconds"] / h)],
            [
                "sacct changes after the invoice was issued (charged − invoiced)",
                gh(r["after_invoice_gpu_seconds"] / h),
            ],
        ],
        classes=["", "", "total", "cause", "cause", "cause", "cause", "", ""],
    )
    money = _table(
        ["", "USD"],
        [
            ["capacity cost", _fmt(Decimal(r["capacity_cost_usd"]))],
            [f"= charged to accounts (invoice{version})", _fmt(Decimal(r["invoiced_cost_usd"]))],
            ["+ unallocated line (charged to nobody)", _fmt(Decimal(r["unallocated_cost_usd"]))],
            ["+ difference", _fmt(Decimal(r["difference_cost_usd"]))],
            ["  = allocated in sinfo snapshots, priced", _fmt(Decimal(r["allocated_cost_usd"]))],
            ["  − usage charged (invoice less spread capacity)", _fmt(Decimal(r["usage_cost_usd"]))],
            ["  + idle already paid through billing TRES", _fmt(Decimal(r["blocked_cost_usd"]))],
        ],
        classes=["total", "", "", "", "cause", "cause", "cause"],
    )
    return (
        f'<section id="{RECONCILIATION_ID}" class="reconcile"><h2>Reconciliation</h2>'
        + "<h3>Capacity (sinfo, whole month)</h3>"
        + capacity
        + "<h3>Allocated from snapshots vs charged from sacct</h3>"
        + gpu
        + _note(
            "The causes are computed per node and snapshot by the cost pipeline "
            "(mart_cost_reconciliation_monthly, docs/pipelines.md#cost): they add up to the difference exactly; "
            "figures here are rounded to 0.01 GPU-hour (reconciliation.csv has them to the microsecond)."
            + (
                " MIG slices count on both sides as their fraction of a GPU (docs/pipelines.md#mig)."
                if d.mig_gpu_hours
                else ""
            )
        )
        + "<h3>Dollars</h3>"
        + money
        + "</section>"
    )


def _charts_section(d: ReportData) -> str:
    days = sorted({r["day"] for r in d.daily})
    accounts = sorted(
        {r["account"] for r in d.daily},
        key=lambda a: (-sum(r["gpu_hours"] for r in d.daily if r["account"] == a), a),
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
    wmap = {(r["day"], r["partition"]): r["mean_seconds"] for r in d.wait_trend}
    charts = [
        stacked_bars_svg("Daily GPU-hours by account (sacct)", cats, series("gpu_hours"), "GPU-hours"),
        stacked_bars_svg("Daily cost by account (sacct x rates)", cats, series("cost_usd"), "USD"),
        lines_svg(
            "Mean wait time by partition (sacct)",
            [x.isoformat() for x in wdays],
            {p: [None if wmap.get((x, p)) is None else wmap[(x, p)] / 60 for x in wdays] for p in parts_},
            "minutes",
        ),
        hbars_svg(
            "Job attempts by terminal state (sacct)",
            sorted(
                {
                    st: sum(float(r["jobs"]) for r in d.outcomes if r["state"] == st)
                    for st in {r["state"] for r in d.outcomes}
                }.items(),
                key=lambda kv: (-kv[1], kv[0]),
            ),
            "jobs",
        ),
    ]
    return _section("charts", "Charts", "".join(f"<figure>{c}</figure>" for c in charts))


def _chargeback_section(d: ReportData, users_out: list[dict]) -> str:
    t = d.totals

    def prev(v: Decimal | None) -> str:
        return NO_DATA if v is None else _fmt(v)

    accounts = _table(
        ["account", "GPU-hours", "cost (USD)", "share", "previous month (USD)", "change"],
        [
            [
                a["account"],
                _fmt(a["gpu_hours"]),
                _fmt(a["cost_usd"]),
                f"{a['share']:.1%}",
                prev(a["prev_cost_usd"]),
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
                prev(
                    sum((a["prev_cost_usd"] for a in d.accounts), Decimal(0))
                    if d.prev_month_invoiced
                    else None
                ),
                "",
            ]
        ],
        classes=[""] * len(d.accounts) + ["total"],
    )
    users = _table(
        ["account", "user", "GPU-hours", "cost (USD)", "share"],
        [
            [u["account"], u["user"], _fmt(u["gpu_hours"]), _fmt(u["cost_usd"]), f"{u['share']:.1%}"]
            for u in users_out
        ],
    )
    return _section(
        "chargeback",
        "Chargeback",
        "<h3>By account (invoice)</h3>",
        accounts,
        _note(
            "Previous month: 'no data' when that month has no invoice rows; an account absent from an invoiced "
            "month paid 0.00."
        ),
        "<h3>By user (invoice)</h3>",
        users,
    )


def _waste_section(d: ReportData) -> str:
    t = d.totals

    def energy_cost(w: dict) -> str:
        if not w.get("sampled_gpu_hours"):
            return NO_SAMPLE
        if w.get("energy_cost_usd") is None:
            return NOT_CONFIGURED if w.get("energy_kwh") else NO_DATA
        return _fmt(w["energy_cost_usd"], 2)

    def sampled(w: dict, key: str, digits: int = 1) -> str:
        return NO_SAMPLE if not w.get("sampled_gpu_hours") else _fmt(w.get(key), digits)

    capacity = _table(
        ["capacity not used", "USD", "source"],
        [
            ["idle (not allocated)", _fmt(t["idle_cost_usd"]), "sinfo x rates, whole month"],
            ["down or drained", _fmt(t["down_cost_usd"]), "sinfo x rates, whole month"],
        ],
    )
    accounts = _table(
        [
            "account",
            "failed attempts",
            "failed GPU-h",
            "failed cost (USD)",
            "requeued attempts",
            "requeued GPU-h",
            "requeued cost (USD)",
            "coverage",
            "allocated-but-idle GPU-h",
            "allocated-but-idle cost (USD)",
            "energy (kWh)",
            "energy cost (USD)",
        ],
        [
            [
                w["account"],
                _fmt(w.get("failed_attempts"), 0),
                _fmt(w.get("failed_gpu_hours")),
                _fmt(w.get("failed_cost_usd"), 2),
                _fmt(w.get("requeued_attempts"), 0),
                _fmt(w.get("requeued_gpu_hours")),
                _fmt(w.get("requeued_cost_usd"), 2),
                _pct(w.get("nvml_coverage"), "0.0%"),
                sampled(w, "alloc_idle_gpu_hours"),
                sampled(w, "alloc_idle_cost_usd", 2),
                sampled(w, "energy_kwh"),
                energy_cost(w),
            ]
            for w in d.waste
        ],
        groups=[
            ("", 1),
            ("sacct: attempts that ended in the month, whole (mart_cost_waste_daily)", 6),
            (
                "NVML sample of the month's allocations: "
                + (
                    NO_SAMPLE
                    if t["nvml_coverage"] is None
                    else f"{t['nvml_coverage']:.1%} of charged GPU-hours"
                )
                + " (mart_cost_efficiency_daily)",
                5,
            ),
        ],
    )
    return _section(
        "waste",
        "Waste",
        capacity,
        accounts,
        _note(
            "Failed and requeued: every GPU attempt that ended in the month in a failed state "
            f"({', '.join(JOB_FAILURE_STATES)}: a user or system failure, docs/pipelines.md#job-failures) or was followed by another attempt of its job, with all its GPU-hours at its rate, including hours charged in an earlier month: an "
            "attempt's outcome is known when it ends, so these figures do not change after the month ends. "
            "Coverage is the share of the account's charged GPU-hours the NVML agents sampled; allocated-but-idle "
            "(minutes under drift.idle_util_percent) and energy are measured on that sample only and are not "
            "scaled up. Energy cost is 'not configured' while billing.energy_usd_per_kwh is 0."
        ),
    )


def _reliability_section(d: ReportData) -> str:
    """Ended attempts split into user and system failures by the one taxonomy the marts and the
    SlurmJobFailureRateHigh alert use (slurm_states.job_failure_class, docs/pipelines.md#job-failures),
    requeues, and the faults that killed attempts."""
    rq = d.requeues or {}
    attempts = sum(r["jobs"] for r in d.outcomes)

    def share(n: int) -> str:
        return f"{n / attempts:.1%}" if attempts else "–"

    by_class = {
        c: sum(r["jobs"] for r in d.outcomes if r["failure"] == c) for c in ("none", "user", "system")
    }
    return _section(
        "reliability",
        "Reliability",
        _table(
            [
                "attempts ended",
                "user failures",
                "user failure rate",
                "system failures",
                "system failure rate",
                "requeues",
                "requeue rate",
                "requeued GPU-hours",
            ],
            [
                [
                    attempts,
                    by_class["user"],
                    share(by_class["user"]),
                    by_class["system"],
                    share(by_class["system"]),
                    rq.get("requeues") or 0,
                    f"{(rq.get('requeues') or 0) / rq['attempts_ended']:.1%}"
                    if rq.get("attempts_ended")
                    else "–",
                    _fmt(rq.get("requeued_gpu_hours")),
                ]
            ],
        ),
        _table(
            ["failure", "state", "attempts", "GPU-hours"],
            [
                [r["failure"], r["state"], r["jobs"], _fmt(r["gpu_hours"])]
                for r in sorted(d.outcomes, key=lambda r: (r["failure"], -r["jobs"], r["state"]))
                if r["failure"] != "none"
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
        _note(
            "sacct: attempts that ended in the month (mart_job_outcomes_daily, mart_requeues_daily). User "
            "failures: non-zero exit (FAILED), OUT_OF_MEMORY, TIMEOUT, DEADLINE, cancelled by its owner. System "
            "failures: NODE_FAIL, BOOT_FAIL, PREEMPTED, REQUEUED, cancelled by root, and a FAILED attempt linked "
            "to a node incident on its nodes at its end; the SlurmJobFailureRateHigh alert uses the same split "
            "(docs/pipelines.md#job-failures). Faults from node incidents and the attempts they ended "
            "(mart_fault_impact)."
        ),
    )


def _scheduling_section(d: ReportData) -> str:
    def minutes(v: float | None) -> str:
        return _fmt(None if v is None else v / 60, 1)

    waits = _table(
        ["partition", "jobs started", "mean wait (min)", "p50 (min)", "p90 (min)", "p99 (min)", "max (min)"],
        [
            [
                w["partition"],
                w["jobs"],
                minutes(w["mean_seconds"]),
                minutes(w["p50_seconds"]),
                minutes(w["p90_seconds"]),
                minutes(w["p99_seconds"]),
                minutes(w["max_seconds"]),
            ]
            for w in d.waits
        ],
    )
    held = sum(b["gpu_hours"] for b in d.backfill)
    started = _table(
        ["started by", "attempts started in the month", "GPU-hours held in the month", "share of GPU-hours"],
        [
            [b["sched_by"], b["jobs"], _fmt(b["gpu_hours"]), _pct(b["gpu_hours"] / held if held else None)]
            for b in d.backfill
        ]
        + [["TOTAL", sum(b["jobs"] for b in d.backfill), _fmt(held), _pct(1.0 if held else None)]],
        classes=[""] * len(d.backfill) + ["total"],
    )
    return _section(
        "scheduling",
        "Scheduling",
        "<h3>Wait time by partition (sacct, attempts started in the month)</h3>",
        waits,
        _note(
            "Wait = start − eligible. p50/p90/p99 are the daily percentiles of mart_wait_times, averaged over "
            "the month weighted by jobs; the chart shows the daily mean in the same unit (minutes)."
        ),
        "<h3>Started by (sacct Flags)</h3>",
        started,
        _note(
            "GPU-hours held inside the month by attempts, by the scheduler that started them "
            "(mart_backfill_daily): an attempt running across the month's end counts only its hours inside "
            "the month, so the total equals the GPU-hours charged and does not change after the month ends."
        ),
    )


def _fairshare_section(d: ReportData) -> str:
    if not d.fairshare:
        return _section("fairshare", "Fair-share", _note(f"{NO_DATA}: no fair-share rows for this month."))
    by_parent: dict[str | None, float] = {}
    for r in d.fairshare:
        if r["depth"] > 0 and r["norm_shares"] is not None:
            by_parent[r["parent"]] = by_parent.get(r["parent"], 0.0) + r["norm_shares"]
    siblings = all(abs(v - 1) < 1e-6 for v in by_parent.values())
    share_head = "share among siblings (NormShares)" if siblings else "NormShares (classic: of the cluster)"

    def name(r: dict) -> str:
        return ("\u2003" * r["depth"]) + ("└ " if r["depth"] else "") + r["account"]

    rows = [
        [
            name(r),
            "" if r["raw_shares"] is None else r["raw_shares"],
            "" if r["depth"] == 0 else _fmt(r["norm_shares"], 3),
            _fmt(r.get("target_share"), 3, ""),
            _fmt(r.get("usage_share_30d"), 3, ""),
            "" if r["depth"] == 0 else _fmt(r["effectv_usage"], 3),
            "" if r["depth"] == 0 or r["level_fs"] is None else _fmt(r["level_fs"], 3),
        ]
        for r in d.fairshare
    ]
    source = "sshare (Slurm's own figures)" if d.fairshare_source == "sshare" else "the fair-share pipeline"
    as_of = (
        ""
        if d.fairshare_as_of is None
        else f" as of {d.fairshare_as_of.astimezone(ZoneInfo(d.tz)):%Y-%m-%d %H:%M %Z}"
    )
    return _section(
        "fairshare",
        "Fair-share (account tree)",
        _table(
            [
                "account",
                "RawShares",
                share_head,
                "target share of the cluster",
                "usage share, 30 d",
                "EffectvUsage (of parent)",
                "LevelFS",
            ],
            rows,
            table_id="fairshare-tree",
        ),
        f"<p class=note>From {_esc(source)}{_esc(as_of)}. Under Fair Tree each account's RawShares are "
        f'normalised among its siblings (<a href="{FAIR_TREE_URL}">Fair Tree</a>, '
        f'<a href="{SSHARE_URL}">sshare</a> NormShares), so the shares under each parent add up to 1; the target '
        "share of the cluster is the product of the shares from the root down (mart_fairshare_drift), so "
        "siblings' targets add up to their parent's. Usage share: the account's fair-share charge (fairshare."
        "charge) over the trailing 30 days over the cluster's, undecayed.</p>",
    )


SECTIONS = (
    _totals_section,
    _rates_section,
    _capacity_section,
    _reconciliation_section,
    _charts_section,
)
"""Sections that take only the data; chargeback (which takes the pseudonymised users) follows them."""
AFTER_CHARGEBACK = (
    _budgets_section,
    _waste_section,
    _reliability_section,
    _scheduling_section,
    _fairshare_section,
)

STYLE = (
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}"
    "table{border-collapse:collapse;margin:8px 0 16px}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}.n{text-align:right}"
    "td:first-child{white-space:pre-wrap}th{background:#f0f0f0}tr.total td{font-weight:bold;background:#fafafa}"
    "tr.cause td{color:#444}tr.aside td{color:#777;font-style:italic}.meta,.note{color:#666;max-width:900px}"
    "figure{margin:8px 0}h3{margin:14px 0 4px;font-size:1.05em}"
    "section.reconcile{border:3px solid #2f6f4f;background:#eef7f1;padding:4px 16px 8px;margin:16px 0}"
    "section.reconcile table{background:#fff}#fairshare-tree td:first-child{white-space:pre}"
)


def render_html(d: ReportData, users_out: list[dict]) -> str:
    body = [_header(d)]
    body += [section(d) for section in SECTIONS]
    body.append(_chargeback_section(d, users_out))
    body += [section(d) for section in AFTER_CHARGEBACK]
    month = d.month.strftime("%Y-%m")
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>slurmscope report {month} "
        f"{_esc(d.cluster)}</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )


def build_report(
    con: duckdb.DuckDBPyConnection, cfg: Config, *, month: str, out_dir: Path, formats: list[str]
) -> list[Path]:
    """Write report.html and the finance CSVs for one billing month into out_dir."""
    first = parse_month(month)
    unknown = set(formats) - {"html", "csv"}
    if unknown:
        raise ValueError(f"--format expects html and/or csv, got {sorted(unknown)}")
    data = collect_data(con, cfg.cluster, first, cfg.get("billing", "timezone"))
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
