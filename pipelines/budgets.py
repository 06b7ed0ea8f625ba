"""Budgets by period and Slurm's allocations (GrpTRESMins): mart_budget_period, computed by the cost pipeline.

Two kinds of row, one per account, budget and period:

- **config** (`budgets.<account>`, period a month, quarter, year or one span of months in the billing zone):
  `used` = `spent` = the account's invoice rows (latest version, running attempts up to now) of the
  period's months, in dollars or GPU-hours, so a budget reconciles with the invoices to the cent.
- **slurm** (GrpTRESMins of an account association in the last sshare snapshot): `amount` = the limit in
  TRES-hours; `used` = what Slurm holds against it, sshare's GrpTRESRaw (the association's and its
  children's TRES-minutes, decayed at PriorityDecayHalfLife, times the QOS UsageFactor, reset at
  PriorityUsageResetPeriod: https://slurm.schedmd.com/resource_limits.html#assoc_grptresmins, Slurm 22.05,
  page of 05 January 2023; in the 22.05.8 sources acct_policy.c compares `usage_tres_raw / 60` with the
  limit and priority_multifactor.c accrues it, times the UsageFactor, only with
  AccountingStorageEnforce=limits). For `billing`, before GrpTRESRaw was collected, RawUsage / 60
  (RawUsage is the same decayed billing-seconds). `spent` = slurmscope's own count of the subtree's GPU-hours
  since the last reset (mart_cost_daily; undecayed, no UsageFactor); NULL for other TRES or when Slurm's
  usage never resets. The period is the reset period containing now (none for NONE/NOW).

Forecast at the period's end = used / elapsed share of the period (a straight burn at the period's mean
rate), from the period's first day (or its first 28th, if shorter); = used once the period ended. A Slurm
allocation whose usage decays has no forecast: decayed usage tends to rate x half-life / ln 2 whatever the
period, so a straight line would overstate it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date, timedelta
from typing import Any

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, day_start, local_date
from slurmscope.pipelines.common import ensure_columns
from slurmscope.pipelines.params import Params

PERIOD_SCHEMA = {
    "account": pl.String,
    "budget": pl.String,
    "source": pl.String,
    "unit": pl.String,
    "period_start": pl.Date,
    "period_end": pl.Date,
    "amount": pl.Float64,
    "used": pl.Float64,
    "spent": pl.Float64,
    "forecast": pl.Float64,
    "elapsed_ratio": pl.Float64,
    "usage_as_of": UTC_DT,
    "as_of": UTC_DT,
}
FORECAST_MIN_DAYS = 1.0
"""No forecast before this much of a period has passed (or its first 28th when shorter): an hour's burn
times 720 is noise."""
SLURM_PERIODS = ("DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY")


def month_add(month: date, n: int) -> date:
    k = month.year * 12 + month.month - 1 + n
    return date(k // 12, k % 12 + 1, 1)


def period_of(kind: str, day: date) -> tuple[date, date]:
    """[first day, first day after) of the calendar month, quarter or year holding `day`."""
    if kind == "month":
        start = day.replace(day=1)
        return start, month_add(start, 1)
    if kind == "quarter":
        start = date(day.year, (day.month - 1) // 3 * 3 + 1, 1)
        return start, month_add(start, 3)
    start = date(day.year, 1, 1)
    return start, date(day.year + 1, 1, 1)


def config_periods(period: str | dict[str, str], first: date, today: date) -> list[tuple[date, date]]:
    """Every period of a config budget from the one holding `first` to the one holding `today`; a span
    {start, end} (months, inclusive) once it has begun."""
    if isinstance(period, dict):
        start = date.fromisoformat(period["start"] + "-01")
        end = month_add(date.fromisoformat(period["end"] + "-01"), 1)
        return [(start, end)] if start <= today else []
    out = []
    start, end = period_of(period, min(first, today))
    while start <= today:
        out.append((start, end))
        start, end = period_of(period, end)
    return out


def slurm_reset_period(reset: str, today: date) -> tuple[date, date] | None:
    """The PriorityUsageResetPeriod holding `today` (slurm.conf(5); priority_multifactor.c _next_reset,
    Slurm 22.05: weeks start on Sunday, resets at local midnight); None for NONE and NOW, which never reset
    on a date."""
    reset = reset.strip().upper()
    if reset == "DAILY":
        return today, today + timedelta(days=1)
    if reset == "WEEKLY":
        start = today - timedelta(days=(today.weekday() + 1) % 7)
        return start, start + timedelta(days=7)
    if reset in ("MONTHLY", "QUARTERLY", "YEARLY"):
        return period_of({"MONTHLY": "month", "QUARTERLY": "quarter", "YEARLY": "year"}[reset], today)
    return None


def slurm_seconds(text: str | None) -> float | None:
    """A duration as `scontrol show config` prints it ('7-00:00:00', '00:30:00', minutes); None if not one."""
    if text is None:
        return None
    t = text.strip()
    days, _, rest = t.rpartition("-")
    parts = rest.split(":")
    try:
        if len(parts) == 1 and not days:
            return float(int(parts[0]) * 60)
        if len(parts) != 3:
            return None
        h, m, s = (int(p) for p in parts)
        return (int(days) if days else 0) * 86400.0 + h * 3600 + m * 60 + s
    except ValueError:
        return None


def tres_pairs(text: str | None) -> dict[str, float]:
    """`billing=6000,gres/gpu=3000` as TRES -> number; entries that are not `name=number` are left out."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        name, sep, value = item.strip().partition("=")
        try:
            if sep and name:
                out[name.lower()] = float(value)
        except ValueError:
            continue
    return out


def _elapsed(start: pl.Expr, end: pl.Expr, params: Params) -> pl.Expr:
    s, e = day_start(start, params.tz), day_start(end, params.tz)
    now = pl.lit(params.now, dtype=UTC_DT)
    length = (e - s).dt.total_seconds()
    return ((pl.min_horizontal(now, e) - s).dt.total_seconds().clip(lower_bound=0) / length).alias(
        "elapsed_ratio"
    )


def _forecast(used: pl.Expr, start: pl.Expr, end: pl.Expr, params: Params) -> pl.Expr:
    length_days = (end - start).dt.total_days().cast(pl.Float64)
    least = pl.min_horizontal(pl.lit(FORECAST_MIN_DAYS), length_days / 28.0) / length_days
    ratio = pl.col("elapsed_ratio")
    return pl.when(ratio >= 1).then(used).when(ratio < least).then(None).otherwise(used / ratio)


def config_budgets(months: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Config rows of mart_budget_period from `months` (month, account, spent_usd, spent_gpu_hours: the latest
    invoice version of every billed month, summed per account)."""
    if not params.budgets:
        return pl.LazyFrame(schema=PERIOD_SCHEMA)
    today = local_date(params.now, params.tz)
    firsts = dict(months.group_by("account").agg(pl.col("month").min()).collect().iter_rows())
    rows = []
    for account, b in params.budgets.items():
        first = firsts.get(account) or today
        for start, end in config_periods(b["period"], first, today):
            for unit in ("usd", "gpu_hours"):
                if unit in b:
                    rows.append((account, unit, start, end, b[unit]))
    if not rows:
        return pl.LazyFrame(schema=PERIOD_SCHEMA)
    periods = pl.LazyFrame(
        rows,
        schema={
            "account": pl.String,
            "unit": pl.String,
            "period_start": pl.Date,
            "period_end": pl.Date,
            "amount": pl.Float64,
        },
        orient="row",
    )
    long = months.unpivot(
        index=["month", "account"], on=["spent_usd", "spent_gpu_hours"], variable_name="unit", value_name="v"
    ).with_columns(pl.col("unit").str.strip_prefix("spent_"))
    spent = (
        periods.join(long, on=["account", "unit"], how="left")
        .filter(
            pl.col("month").is_null()
            | ((pl.col("month") >= pl.col("period_start")) & (pl.col("month") < pl.col("period_end")))
        )
        .group_by("account", "unit", "period_start", "period_end", "amount")
        .agg(pl.col("v").sum().alias("spent"))
    )
    out = (
        periods.join(spent, on=["account", "unit", "period_start", "period_end", "amount"], how="left")
        .with_columns(
            pl.col("spent").fill_null(0.0),
            pl.col("unit").alias("budget"),
            pl.lit("config").alias("source"),
            _elapsed(pl.col("period_start"), pl.col("period_end"), params),
            pl.lit(params.now, dtype=UTC_DT).alias("usage_as_of"),
            pl.lit(params.now, dtype=UTC_DT).alias("as_of"),
        )
        .with_columns(pl.col("spent").alias("used"))
        .with_columns(
            _forecast(pl.col("used"), pl.col("period_start"), pl.col("period_end"), params).alias("forecast")
        )
    )
    return ensure_columns(out, PERIOD_SCHEMA)


def allocations(associations: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One allocation per GrpTRESMins entry of each account association (user '') of an sshare snapshot
    (account, user, grp_tres_mins, grp_tres_raw, raw_usage, snapshot_time): budget GrpTRESMins:<tres>,
    unit, amount (the limit in TRES-hours), used (GrpTRESRaw in hours; for billing without it, RawUsage,
    the same decayed billing-seconds), usage_as_of, and the GPU model of a gres/gpu entry ('' untyped)."""
    out = []
    for r in associations:
        if r.get("user"):
            continue
        raw = tres_pairs(r["grp_tres_raw"])
        for tres, minutes in tres_pairs(r["grp_tres_mins"]).items():
            used_min = raw.get(tres)
            if used_min is None and tres == "billing" and r["raw_usage"] is not None:
                used_min = r["raw_usage"] / 60.0
            gpu = tres == "gres/gpu" or tres.startswith("gres/gpu:")
            out.append(
                {
                    "account": r["account"],
                    "budget": f"GrpTRESMins:{tres}",
                    "unit": "gpu_hours" if gpu else "tres_hours",
                    "amount": minutes / 60.0,
                    "used": None if used_min is None else used_min / 60.0,
                    "usage_as_of": r["snapshot_time"],
                    "model": tres.removeprefix("gres/gpu").removeprefix(":") if gpu else None,
                }
            )
    return out


def _descendants(tree: dict[str, str | None]) -> dict[str, set[str]]:
    """account -> itself and every account below it (the associations a Grp limit covers)."""
    out: dict[str, set[str]] = {a: {a} for a in tree}
    for account in tree:
        parent, seen = tree[account], {account}
        while parent is not None and parent in out and parent not in seen:
            out[parent].add(account)
            seen.add(parent)
            parent = tree[parent]
    return out


def slurm_allocations(
    shares: pl.LazyFrame, settings: dict[str, Any], gpu_days: pl.LazyFrame, params: Params
) -> pl.LazyFrame:
    """Slurm rows of mart_budget_period: each GrpTRESMins entry of an account association (user '') in the
    last sshare snapshot (`shares`: snapshot_time, account, user, parent, grp_tres_mins, grp_tres_raw,
    raw_usage). `settings`: reset (PriorityUsageResetPeriod) and half_life_seconds, Slurm's own where
    collected. `gpu_days`: day, account, gpu_model, gpu_seconds (mart_cost_daily) for the GPU-hours spent.
    A user association's GrpTRESMins is the user's limit, not the account's allocation: left out."""
    snap = shares.collect()
    accounts = snap.filter(pl.col("user").fill_null("") == "")
    if accounts.is_empty():
        return pl.LazyFrame(schema=PERIOD_SCHEMA)
    today = local_date(params.now, params.tz)
    period = slurm_reset_period(settings["reset"], today)
    decays = bool(settings["half_life_seconds"])
    tree = dict(zip(accounts["account"], accounts["parent"], strict=True))
    below = _descendants(tree)
    rows = [
        {**a, "_model": a.pop("model"), "_members": sorted(below[a["account"]])}
        for a in allocations(accounts.iter_rows(named=True))
    ]
    if not rows:
        return pl.LazyFrame(schema=PERIOD_SCHEMA)
    alloc = pl.LazyFrame(
        rows,
        schema={
            "account": pl.String,
            "budget": pl.String,
            "unit": pl.String,
            "amount": pl.Float64,
            "used": pl.Float64,
            "usage_as_of": UTC_DT,
            "_model": pl.String,
            "_members": pl.List(pl.String),
        },
    ).with_columns(
        pl.lit(period[0] if period else None, dtype=pl.Date).alias("period_start"),
        pl.lit(period[1] if period else None, dtype=pl.Date).alias("period_end"),
        pl.lit("slurm").alias("source"),
        pl.lit(params.now, dtype=UTC_DT).alias("as_of"),
    )
    if period is None:
        out = alloc.with_columns(
            pl.lit(None, dtype=pl.Float64).alias("spent"),
            pl.lit(None, dtype=pl.Float64).alias("elapsed_ratio"),
            pl.lit(None, dtype=pl.Float64).alias("forecast"),
        )
        return ensure_columns(out, PERIOD_SCHEMA)
    days = gpu_days.filter((pl.col("day") >= period[0]) & (pl.col("day") < period[1]))
    members = alloc.select("account", "budget", "_model", pl.col("_members").alias("member")).explode(
        "member"
    )
    spent = (
        members.filter(pl.col("_model").is_not_null())
        .join(days, left_on="member", right_on="account")
        .filter((pl.col("_model") == "") | (pl.col("gpu_model").str.to_lowercase() == pl.col("_model")))
        .group_by("account", "budget")
        .agg((pl.col("gpu_seconds").sum() / 3600.0).alias("spent"))
    )
    out = (
        alloc.join(spent, on=["account", "budget"], how="left")
        .with_columns(
            pl.when(pl.col("_model").is_not_null()).then(pl.col("spent").fill_null(0.0)).alias("spent"),
            _elapsed(pl.col("period_start"), pl.col("period_end"), params),
        )
        .with_columns(
            (
                pl.lit(None, dtype=pl.Float64)
                if decays
                else _forecast(pl.col("used"), pl.col("period_start"), pl.col("period_end"), params)
            ).alias("forecast")
        )
    )
    return ensure_columns(out, PERIOD_SCHEMA)


def slurm_settings(config_rows: pl.LazyFrame, params: Params) -> dict[str, Any]:
    """reset and half_life_seconds from the last `scontrol show config` rows (key, value) at or before now,
    else the config's fairshare.* (the same rule as the fair-share pipeline)."""
    kv = dict(config_rows.collect().select("key", "value").iter_rows())
    half = slurm_seconds(kv.get("PriorityDecayHalfLife"))
    reset = kv.get("PriorityUsageResetPeriod")
    return {
        "reset": (reset or params.fairshare.usage_reset_period).strip().upper(),
        "half_life_seconds": float(params.fairshare.decay_half_life_seconds) if half is None else half,
    }
