"""Cost per GPU-hour: allocation by day and month in the billing zone, capacity, invoices, counters.

Billing rules first, because finance checks them: an attempt is charged for the overlap of [start, end or
now) with each billing-zone day, at the $/GPU-hour of its partition or GPU model; months are sums of days;
invoice cents are rounded by largest remainder so rows add up to the rounded month total; a closed month is
frozen and only a listed re-issue adds a new version. An attempt pays its GPUs or, with billing.charge_by =
"billing_tres", the GPU-equivalents of its billing TRES. Unallocated capacity is the unallocated line or,
with billing.idle_cost = "spread", charged within its partition and GPU model by cost (down only with
billing.bill_down, a reservation's reserved GPUs to its accounts); powered-off nodes are not capacity. NVML
samples give the usage-weighted view (allocated-but-idle dollars, cost per useful GPU-hour, energy). For a
report finance can audit, the rates applied, sinfo's allocation reconciled with sacct's charges (the difference
in named causes) and waste by the day attempts ended are marts too. docs/pipelines.md#cost has the formulas
and worked examples.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

import polars as pl
from slurmscope.pipelines.budgets import config_budgets, slurm_allocations, slurm_settings
from slurmscope.pipelines.calendar import (
    UTC_DT,
    DayLookup,
    day_start,
    day_starts,
    epoch_us,
    local_date,
    lookup,
)
from slurmscope.pipelines.common import (
    MIG_INVENTORY_COLUMNS,
    MIG_INVENTORY_SQL,
    MIG_NODE_SEP,
    MIG_UNITS,
    NODE_STATES_SQL,
    activity,
    activity_sources,
    attribute_intervals,
    clip_interval,
    ensure_columns,
    exploded_mig,
    largest_remainder_cents,
    mapped_job_id_raw,
    mig_node_states,
    multi_attempt,
    node_intervals,
    price_book,
    split_buckets,
    split_calendar,
    usage_interval,
    with_columns_of,
    with_rate,
    with_requeued,
    with_samples,
    with_slice_fractions,
)
from slurmscope.pipelines.params import Billing, Params

from slurmscope import mig
from slurmscope.config import RATE_FIELDS, parse_billing_weights
from slurmscope.hostlist import expand_hostlist_lenient
from slurmscope.slurm_states import JOB_FAILURE_STATES

NAME = "cost"

SLICEABLE = True  # a full rebuild may run as consecutive windows (pipelines.full_slice_days)

MART_TABLES: dict[str, str | None] = {
    "mart_cost_daily": "day",
    "mart_capacity_daily": "day",
    "mart_cost_monthly": "month",
    "mart_usage_counters": None,
    "mart_cost_efficiency_daily": "day",
    "mart_cost_unallocated_monthly": "month",
    "mart_cost_reservation_daily": "day",
    "mart_budget_monthly": "month",
    "mart_cost_rates_daily": "day",
    "mart_cost_reconciliation_daily": "day",
    "mart_cost_reconciliation_monthly": "month",
    "mart_cost_waste_daily": "day",
    "mart_budget_period": None,  # every period of every budget, rewritten by each run (a few rows per account)
}

WIDEN_SQL = """
    SELECT min(month) FROM mart_cost_monthly WHERE cluster = $cluster AND NOT frozen AND month < $start_month"""
"""An open month before the window is rebuilt with it, so it is frozen by the first run after it closes."""

INPUTS: dict[str, str] = {
    # Attempts that may overlap the window, plus pending later attempts (to tell which were requeued).
    "jobs": """
        SELECT job_id_raw, submit_time, account, "user", "partition", qos, state, start_time, end_time,
               gpus, gpu_type, billing, node_list, CASE WHEN mig_slices > 0 THEN alloc_tres END AS mig_tres
        FROM jobs
        WHERE cluster = $cluster AND (end_time IS NULL OR end_time >= $start)
          AND (start_time IS NULL OR start_time < $end)""",
    "node_states": NODE_STATES_SQL,
    "prev_monthly": """
        SELECT month, account, "user", gpu_hours, cost_usd::DOUBLE AS cost_usd, share, version, frozen, issued_at,
               coalesce(spread_cost_usd, 0)::DOUBLE AS spread_cost_usd
        FROM mart_cost_monthly WHERE cluster = $cluster AND month >= $start_month""",
    # Days of the window's first month before the window: the month total needs them.
    "month_before": """
        SELECT day, account, "user", "partition", gpu_model, gpu_seconds, cost_usd,
               gpu_seconds * coalesce(cost_usd / nullif(coalesce(billed_gpu_seconds, gpu_seconds), 0), 0)
                   AS gpu_cost_usd
        FROM mart_cost_daily
        WHERE cluster = $cluster AND day >= $start_month AND day < $start_date""",
    # Unallocated capacity cost of those days: a day without usage has nobody to spread it over that day.
    "capacity_month_before": """
        SELECT day, "partition", gpu_model, idle_cost_usd::DOUBLE AS idle_usd, down_cost_usd::DOUBLE AS down_usd,
               reserved_cost_usd::DOUBLE AS reserved_usd, capacity_cost_usd::DOUBLE AS capacity_cost_usd,
               allocated_cost_usd::DOUBLE AS allocated_cost_usd
        FROM mart_capacity_daily WHERE cluster = $cluster AND day >= $start_month AND day < $start_date""",
    # The reconciliation of those days (the month's row sums every day of the month).
    "reconciliation_month_before": """
        SELECT * EXCLUDE (cluster) FROM mart_cost_reconciliation_daily
        WHERE cluster = $cluster AND day >= $start_month AND day < $start_date""",
    # Reservations that may overlap the window (their nodes' reserved GPUs go to their accounts).
    "reservations": """
        SELECT name, start_time, end_time, node_list, accounts FROM reservations
        WHERE cluster = $cluster AND start_time < $end
          AND (end_time IS NULL OR end_time > $start - INTERVAL 1 DAY)""",
    "reservation_month_before": """
        SELECT day, "partition", gpu_model, reservation, account, cost_usd::DOUBLE AS cost_usd
        FROM mart_cost_reservation_daily
        WHERE cluster = $cluster AND day >= $start_month AND day < $start_date""",
    "prev_unallocated": """
        SELECT month, "partition", gpu_model, idle_cost_usd::DOUBLE AS idle_cost_usd,
               down_cost_usd::DOUBLE AS down_cost_usd, reserved_cost_usd::DOUBLE AS reserved_cost_usd,
               blocked_cost_usd::DOUBLE AS blocked_cost_usd
        FROM mart_cost_unallocated_monthly WHERE cluster = $cluster AND month >= $start_month""",
    "daily_before": """
        SELECT account, "partition", gpu_model, sum(gpu_seconds) AS gpu_seconds, sum(cost_usd) AS cost_usd
        FROM mart_cost_daily WHERE cluster = $cluster AND day < $start_date GROUP BY ALL""",
    "prev_counters": """
        SELECT account, "partition", gpu_model, gpu_seconds_total, cost_usd_total
        FROM mart_usage_counters WHERE cluster = $cluster""",
    # Mapping intervals (whole GPUs and MIG slices) and NVML samples inside the window (usage-weighted cost
    # and energy), and the MIG devices' NVML names (their profile gives their share of a GPU); minutes older
    # than retention's boundary are read back from their hourly rollups (slurmscope/rollup.py).
    "gpu_jobs": """
        SELECT node, gpu_uuid, job_id, interval_start, interval_end, coalesce(mig_instance, '') AS mig_instance
        FROM gpu_jobs
        WHERE cluster = $cluster AND interval_start < $end
          AND (interval_end IS NULL OR interval_end > $start)""",
    "mig_inventory": MIG_INVENTORY_SQL,
    "gpu_samples": """
        SELECT node, gpu_uuid, minute, util_gpu_mean, energy_joules, power_mean_watts, sm_active_mean,
               activity_source
        FROM gpu_minutes($cluster, $start, $end)""",
    # Partitions' TRESBillingWeights in the last `scontrol show partition` at or before now (charge_by =
    # "billing_tres" without billing.tres_billing_weights).
    "partition_weights": """
        SELECT "partition", value AS weights FROM slurm_partitions
        WHERE cluster = $cluster AND key = 'TRESBillingWeights' AND value IS NOT NULL
          AND snapshot_time = (SELECT max(snapshot_time) FROM slurm_partitions
                               WHERE cluster = $cluster AND snapshot_time <= $now)""",
    # Budgets by period: each earlier month's latest invoice version per account (the window's come from
    # monthly()), the last sshare snapshot (GrpTRESMins), Slurm's decay settings and a year of GPU-seconds
    # per day (the longest PriorityUsageResetPeriod) for the GPU-hours an allocation's subtree spent, read
    # only when the last snapshot has a GPU allocation at all.
    "budget_months_before": """
        SELECT m.month, m.account, sum(m.cost_usd)::DOUBLE AS spent_usd, sum(m.gpu_hours) AS spent_gpu_hours
        FROM mart_cost_monthly m
        JOIN (SELECT month, max(version) AS version FROM mart_cost_monthly
              WHERE cluster = $cluster AND month < $start_month GROUP BY month) l USING (month, version)
        WHERE m.cluster = $cluster GROUP BY m.month, m.account""",
    "shares_last": """
        SELECT snapshot_time, account, "user", parent, grp_tres_mins, grp_tres_raw, raw_usage FROM shares
        WHERE cluster = $cluster
          AND snapshot_time = (SELECT max(snapshot_time) FROM shares WHERE cluster = $cluster AND snapshot_time <= $now)""",
    "slurm_priority": """
        SELECT key, value FROM slurm_config
        WHERE cluster = $cluster AND key IN ('PriorityDecayHalfLife', 'PriorityUsageResetPeriod')
          AND snapshot_time = (SELECT max(snapshot_time) FROM slurm_config
                               WHERE cluster = $cluster AND snapshot_time <= $now)""",
    "gpu_days_before": """
        SELECT day, account, gpu_model, sum(gpu_seconds) AS gpu_seconds FROM mart_cost_daily
        WHERE cluster = $cluster AND day < $start_date AND day >= $start_date - INTERVAL 367 DAY
          AND EXISTS (SELECT 1 FROM shares WHERE cluster = $cluster AND grp_tres_mins LIKE '%gres/gpu%'
                        AND snapshot_time = (SELECT max(snapshot_time) FROM shares
                                             WHERE cluster = $cluster AND snapshot_time <= $now))
        GROUP BY ALL""",
}

DAILY_SCHEMA = {
    "day": pl.Date,
    "account": pl.String,
    "user": pl.String,
    "partition": pl.String,
    "qos": pl.String,
    "gpu_model": pl.String,
    "gpu_seconds": pl.Float64,
    "cost_usd": pl.Float64,
    "failed_gpu_seconds": pl.Float64,
    "failed_cost_usd": pl.Float64,
    "requeued_gpu_seconds": pl.Float64,
    "requeued_cost_usd": pl.Float64,
    "running_gpu_seconds": pl.Float64,
    "spread_cost_usd": pl.Float64,
    "billed_gpu_seconds": pl.Float64,
    "mig_gpu_seconds": pl.Float64,
}
MONTHLY_SCHEMA = {
    "month": pl.Date,
    "account": pl.String,
    "user": pl.String,
    "gpu_hours": pl.Float64,
    "cost_usd": pl.Float64,
    "share": pl.Float64,
    "version": pl.Int32,
    "frozen": pl.Boolean,
    "issued_at": UTC_DT,
    "spread_cost_usd": pl.Float64,
}
CAPACITY_PARTS = ("allocated", "idle", "down", "reserved")
CAPACITY_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "gpu_model": pl.String,
    "capacity_gpu_seconds": pl.Float64,
    **{f"{p}_gpu_seconds": pl.Float64 for p in CAPACITY_PARTS},
    "capacity_cost_usd": pl.Float64,
    **{f"{p}_cost_usd": pl.Float64 for p in CAPACITY_PARTS},
    "powered_down_gpu_seconds": pl.Float64,
    "mig_gpu_seconds": pl.Float64,
}
EFFICIENCY_SCHEMA = {
    "day": pl.Date,
    "account": pl.String,
    "gpu_seconds": pl.Float64,
    "cost_usd": pl.Float64,
    "sampled_gpu_seconds": pl.Float64,
    "sampled_cost_usd": pl.Float64,
    "idle_gpu_seconds": pl.Float64,
    "idle_cost_usd": pl.Float64,
    "useful_gpu_seconds": pl.Float64,
    "useful_share": pl.Float64,
    "cost_per_useful_gpu_hour": pl.Float64,
    "energy_joules": pl.Float64,
    "energy_kwh": pl.Float64,
    "energy_cost_usd": pl.Float64,
    "gpm_gpu_seconds": pl.Float64,
    "activity_source": pl.String,
    "mig_gpu_seconds": pl.Float64,
}
UNALLOCATED_PARTS = ("idle", "down", "reserved")
"""Capacity minus allocation: what billing.idle_cost = "spread" may charge to the accounts (down only with
billing.bill_down); what it does not charge stays in mart_cost_unallocated_monthly."""
UNALLOCATED_SCHEMA = {
    "month": pl.Date,
    "partition": pl.String,
    "gpu_model": pl.String,
    "idle_cost_usd": pl.Float64,
    "down_cost_usd": pl.Float64,
    "reserved_cost_usd": pl.Float64,
    "blocked_cost_usd": pl.Float64,
}
JOULES_PER_KWH = 3.6e6
COUNTER_SCHEMA = {
    "account": pl.String,
    "partition": pl.String,
    "gpu_model": pl.String,
    "gpu_seconds_total": pl.Float64,
    "cost_usd_total": pl.Float64,
    "gpu_seconds_correction": pl.Float64,
    "cost_usd_correction": pl.Float64,
    "updated_at": UTC_DT,
}


def month_closed_at(month: pl.Expr, tz: str, close_after_days: int) -> pl.Expr:
    """UTC instant from which a billing month counts as closed."""
    return day_start(month.dt.offset_by("1mo"), tz) + pl.duration(days=close_after_days)


def attempts(jobs: pl.LazyFrame, now: datetime) -> pl.LazyFrame:
    """Started GPU attempts with their usage interval, failure and requeue flags and normalised keys."""
    return usage(with_requeued(jobs), now)


def usage(jobs: pl.LazyFrame, now: datetime) -> pl.LazyFrame:
    """attempts() without the requeue flag, which needs every attempt's job id hashed."""
    return (
        jobs.filter(pl.col("start_time").is_not_null() & (pl.col("gpus").fill_null(0) > 0))
        .with_columns(usage_interval(now))
        .with_columns(
            (pl.col("state").is_in(JOB_FAILURE_STATES) & ~pl.col("running")).alias("failed"),
            *[pl.col(c).fill_null("").alias(c) for c in ("account", "user", "partition", "qos")],
            pl.col("gpu_type").fill_null("").alias("gpu_model"),
        )
    )


KEYS = ["account", "user", "partition", "qos", "gpu_model"]
"""Key of a mart_cost_daily row besides its day (the rate depends only on partition and GPU model)."""
FLAGS = ["failed", "requeued", "running"]


def day_bounds(first: date, last: date, tz: str) -> pl.DataFrame:
    """Each billing day from `first` to `last` with its [_ps, _pe) in UTC microseconds, as split_calendar
    bounds it, and `_odd`: how many days up to this one lack proper bounds (a day the zone skipped)."""
    starts = day_starts(first, last + timedelta(days=1), tz)
    us = starts["start"].dt.epoch("us")
    b = pl.DataFrame({"day": starts["day"][:-1], "_ps": us[:-1], "_pe": us[1:]})
    odd = pl.col("_ps").is_null() | pl.col("_pe").is_null() | (pl.col("_pe") <= pl.col("_ps"))
    return b.with_columns(odd.cast(pl.Int32).cum_sum().alias("_odd"))


def billing_days(frame: pl.LazyFrame, column: str, params: Params) -> DayLookup:
    """The billing days of instants from the first `column` of `frame` (or the window's start, if later)
    to now: the span of every instant cost cuts into days, since they are clipped to the window."""
    first = frame.select(pl.col(column).min()).collect().item()
    lo = None if first is None else epoch_us(max(first, params.start))
    return lookup(params.tz, lo, epoch_us(params.now))


def day_gpu_microseconds(
    a: pl.LazyFrame, params: Params, flags: list[str], days: DayLookup, gpus: pl.Expr | None = None
) -> pl.LazyFrame:
    """(day, KEYS, `flags`, `v`): GPU-microseconds of the attempts `a` (clipped `use_start`/`use_end`, `gpus`)
    in each billing day, the same overlap split_calendar gives them, without a row per (attempt, day).

    An attempt inside one day gives gpus × (end − start) to it. One that spans days L > F gives its first day
    gpus × (end of F − start), its last day gpus × (end − start of L) and each day between its whole length:
    when its bounds are proper, that is what split_calendar's min(end, day end) − max(start, day start) comes
    to, and it is linear, so attempts that share (KEYS, flags, F, L) are summed before the days are spread.
    An attempt near a day without proper bounds keeps its own interval and gets split_calendar's formula.
    Integer microseconds make the sums exact whatever their order (`gpus`, a float count such as billed
    GPU-equivalents, gives float sums instead). Day bounds are looked up by position in a
    table of the window's days (a join per attempt and bound cost more than the rest of the split).
    """
    tz, now = params.tz, params.now
    first = local_date(params.start, tz) - timedelta(days=1)
    table = day_bounds(first, local_date(now, tz) + timedelta(days=1), tz)
    s, e, f, last, g = pl.col("_s_us"), pl.col("_e_us"), pl.col("F"), pl.col("L"), pl.col("g")
    a = a.filter(pl.col("use_end") > pl.col("use_start")).select(
        *KEYS,
        *flags,
        pl.col("use_start").dt.epoch("us").alias("_s_us"),
        pl.col("use_end").dt.epoch("us").alias("_e_us"),
        (pl.col("gpus").cast(pl.Int64) if gpus is None else gpus).alias("g"),
    )
    a = a.with_columns(days.day(s).alias("F"), days.day(e - 1).alias("L"))
    origin = (first - date(1970, 1, 1)).days

    def at(day: pl.Expr, column: str) -> pl.Expr:
        return pl.lit(table[column]).gather(day.cast(pl.Int32) - origin)

    proper = (f == last) | (
        (last > f)
        & (at(f, "_odd") == at(last, "_odd"))
        & (at(f, "_ps") <= s)
        & (s < at(f, "_pe"))
        & (at(last, "_ps") < e)
        & (e <= at(last, "_pe"))
    ).fill_null(False)
    # (F, L, flags) as one integer: F × 2^40 + (L − F) × 2^len(flags) + flag bits; one key hashes faster.
    low = len(flags)
    packed = f.cast(pl.Int64) * 2**40 + (last.cast(pl.Int64) - f.cast(pl.Int64)) * 2**low
    for i, flag in enumerate(flags):
        packed = packed + pl.col(flag).cast(pl.Int64) * 2**i
    a = a.with_columns(proper.alias("_proper")).select(
        *KEYS,
        packed.alias("_k"),
        "g",
        pl.when(~pl.col("_proper"))
        .then(0)
        .when(f == last)
        .then(g * (e - s))
        .otherwise(g * (at(f, "_pe") - s))
        .alias("_first"),
        pl.when(pl.col("_proper") & (last > f)).then(g * (e - at(last, "_ps"))).otherwise(0).alias("_last"),
        pl.when(~pl.col("_proper")).then(s).alias("_s"),
        pl.when(~pl.col("_proper")).then(e).alias("_e"),
    )
    k = pl.col("_k")
    grouped = (
        a.group_by(*KEYS, "_k", "_s", "_e")
        .agg(pl.col("_first", "_last", "g").sum())
        .with_columns(
            (k // 2**40).cast(pl.Int32).cast(pl.Date).alias("F"),
            ((k // 2**40).cast(pl.Int32) + (k % 2**40) // 2**low).cast(pl.Date).alias("L"),
            *[((k // 2**i) % 2 == 1).alias(flag) for i, flag in enumerate(flags)],
        )
    )
    days = grouped.with_columns(pl.date_ranges(f, last, "1d").alias("day")).explode("day")
    day, ps, pe = pl.col("day"), at(pl.col("day"), "_ps"), at(pl.col("day"), "_pe")
    v = (
        pl.when(pl.col("_s").is_not_null())
        .then(g * (pl.min_horizontal(pl.col("_e"), pe) - pl.max_horizontal(pl.col("_s"), ps)))
        .when(day == f)
        .then(pl.col("_first"))
        .when(day == last)
        .then(pl.col("_last"))
        .otherwise(g * (pe - ps))
    )
    return days.filter(day.is_not_null()).select("day", *KEYS, *flags, v.alias("v")).filter(pl.col("v") > 0)


def billing_weights(billing: Billing, collected: pl.LazyFrame | None) -> dict[str, str]:
    """Partition -> TRESBillingWeights that charge_by = "billing_tres" divides by: billing.tres_billing_weights
    when the config sets it (exactly that table, like the price book), else Slurm's own, from the last
    `scontrol show partition` (slurm_partitions) at or before now."""
    if billing.tres_billing_weights or collected is None:
        return dict(billing.tres_billing_weights)
    return {p: w for p, w in collected.collect().select("partition", "weights").iter_rows() if w}


def _gpu_weights(
    billing: Billing, weights: dict[str, str] | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """(`<partition>\\x00<type>` -> GRES/gpu:<type> weight, partition -> GRES/gpu weight) of `weights`
    (billing_weights; billing.tres_billing_weights when None); types in lower case."""
    typed: dict[str, float] = {}
    plain: dict[str, float] = {}
    for partition, text in (billing.tres_billing_weights if weights is None else weights).items():
        for name, w in (parse_billing_weights(text) or {}).items():
            if name == "gres/gpu":
                plain[partition] = w
            elif name.startswith("gres/gpu:"):
                typed[f"{partition}\x00{name.removeprefix('gres/gpu:')}"] = w
    return typed, plain


def _weight(table: dict[str, float], column: str) -> pl.Expr:
    key = pl.col("partition").fill_null("") + "\x00" + pl.col(column).fill_null("").str.to_lowercase()
    return key.replace_strict(table, default=None, return_dtype=pl.Float64)


def gpu_equivalents(billing: Billing, weights: dict[str, str] | None = None) -> pl.Expr:
    """GPUs an attempt is charged for: its GPUs, or with billing.charge_by = "billing_tres" its billing TRES
    (sacct AllocTRES `billing=`, Slurm's TRESBillingWeights arithmetic) over its partition's GRES/gpu weight
    (`GRES/gpu:<model>` first), never fewer than its GPUs. An attempt without a billing TRES or whose
    partition's weights (billing_weights) give no GPU weight is charged its GPUs."""
    gpus = pl.col("gpus").cast(pl.Float64)
    if billing.charge_by != "billing_tres":
        return gpus
    typed, plain = _gpu_weights(billing, weights)
    weight = pl.coalesce(
        _weight(typed, "gpu_type"),
        pl.col("partition").replace_strict(plain, default=None, return_dtype=pl.Float64),
    )
    billed = pl.col("billing").cast(pl.Float64) / weight
    return pl.when(billed.is_not_null()).then(pl.max_horizontal(billed, gpus)).otherwise(gpus)


def mig_gpu_equivalents(billing: Billing, weights: dict[str, str] | None = None) -> pl.Expr:
    """Units (1/MIG_UNITS GPU) a row of MIG slices (mig_attempts) is charged for: its units, or with
    billing.charge_by = "billing_tres" its share of the attempt's billing TRES over the weight of a whole GPU
    of its model (`GRES/gpu:<model>`, else `GRES/gpu`), never fewer than its units.

    Slurm lists each slice as one `gres/gpu` besides its typed `gres/gpu:<profile>` and sums every weighted
    TRES (tres.html, "Billing Weights"). Where TRESBillingWeights weighs the MIG type (`GRES/gpu:1g.10gb`),
    its billing is taken as it stands; where it does not, the slices' `GRES/gpu` weight (a whole GPU's each)
    is taken out and the slices' fraction of a GPU put in, so an unweighted slice is not billed as a GPU."""
    units = pl.col("gpus").cast(pl.Float64)
    if billing.charge_by != "billing_tres":
        return units
    typed, plain = _gpu_weights(billing, weights)
    untyped = pl.col("partition").replace_strict(plain, default=None, return_dtype=pl.Float64)
    whole = pl.coalesce(_weight(typed, "gpu_type"), untyped)
    b = pl.col("billing").cast(pl.Float64)
    as_billed = b / whole * MIG_UNITS
    replaced = (b - untyped.fill_null(0.0) * pl.col("mig_count")).clip(
        lower_bound=0.0
    ) / whole * MIG_UNITS + units
    billed = pl.when(_weight(typed, "mig_type").is_not_null()).then(as_billed).otherwise(replaced)
    return pl.when(billed.is_not_null()).then(pl.max_horizontal(billed, units)).otherwise(units)


def mig_attempts(jobs: pl.LazyFrame, billing: Billing) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(the attempts' whole GPUs, their MIG slices): the second has a row per attempt and GPU model of its
    slices (`mig_tres`: AllocTRES of the attempts sacct counted slices for) with `gpus` in units of
    1/MIG_UNITS GPU and `gpu_type` the model (slurmscope.mig; billing.mig_models). An attempt holding both
    splits its billing TRES between them by GPU share, and its whole GPUs take the slices' model where sacct
    typed only the slices."""
    names = jobs.collect_schema().names()
    if "mig_tres" not in names:
        none = pl.lit(None, dtype=pl.String), pl.lit(None, dtype=pl.Int64)
        return jobs, jobs.filter(pl.lit(False)).with_columns(
            none[0].alias("mig_type"), none[1].alias("mig_count")
        )
    plain = jobs.filter(pl.col("mig_tres").is_null())
    keys = ["job_id_raw", "submit_time"]
    slices = exploded_mig(jobs.filter(pl.col("mig_tres").is_not_null()), "mig_tres", billing.mig_models)
    held = (pl.col("gpus").fill_null(0) * MIG_UNITS + pl.col("mig_units").sum().over(keys)).cast(pl.Float64)
    slices = slices.with_columns(
        (pl.col("billing") * pl.col("mig_units") / held).alias("billing"),
        pl.col("mig_units").alias("gpus"),
        pl.col("mig_model").alias("gpu_type"),
        (pl.col("gpus").fill_null(0) * MIG_UNITS).alias("_whole"),
        (pl.col("mig_units").sum().over(keys)).alias("_mig"),
        pl.col("mig_model").first().over(keys, order_by="mig_model").alias("_model"),
        pl.col("gpu_type").alias("_type"),
    )
    mixed = (
        slices.filter(pl.col("_whole") > 0)
        .unique(keys)
        .select(
            *[c for c in names if c not in ("billing", "gpus", "gpu_type")],
            (pl.col("billing") / pl.col("mig_units") * pl.col("_whole")).alias("billing"),
            (pl.col("_whole") // MIG_UNITS).alias("gpus"),
            pl.when(pl.col("_type").str.contains(mig.TYPE_REGEX).fill_null(True))
            .then(pl.col("_model"))
            .otherwise(pl.col("_type"))
            .alias("gpu_type"),
        )
    )
    return (
        pl.concat([plain, mixed.select(names)], how="vertical_relaxed"),
        slices.select(*names, "mig_type", "mig_count"),
    )


def daily(jobs: pl.LazyFrame, params: Params, weights: dict[str, str] | None = None) -> pl.LazyFrame:
    """mart_cost_daily rows for days from the window's start (billing zone) up to now.

    Requeued GPU-seconds come from the jobs with several attempts alone (a few per cent of the attempts):
    flagging every attempt took a group-by of all job ids and a join over all attempts. With
    billing.charge_by = "billing_tres" a second pass weighs each attempt by gpu_equivalents: the billed
    GPU-seconds the dollars are computed from. MIG slices (mig_attempts) go through the same passes counted
    in units of 1/MIG_UNITS GPU, and are summed into the rows of their GPU model (`mig_gpu_seconds` says how
    many of a row's GPU-seconds they are): a 3g slice of a 7-slice A100 is 3/7 of an A100 for its time."""
    if "billing" not in jobs.collect_schema().names():
        jobs = jobs.with_columns(pl.lit(None, dtype=pl.Float64).alias("billing"))
    whole, slices = mig_attempts(jobs, params.billing)
    billing = params.billing
    parts = [
        _daily(whole, params, 1, gpu_equivalents(billing, weights)).with_columns(
            pl.lit(0.0).alias("mig_gpu_seconds")
        ),
        _daily(slices, params, MIG_UNITS, mig_gpu_equivalents(billing, weights)).with_columns(
            pl.col("gpu_seconds").alias("mig_gpu_seconds")
        ),
    ]
    sums = [c for c in DAILY_SCHEMA if c not in ("day", *KEYS)]
    out = pl.concat(parts, how="vertical").group_by("day", *KEYS).agg(pl.col(sums).sum())
    return ensure_columns(out, DAILY_SCHEMA)


def _daily(jobs: pl.LazyFrame, params: Params, per_gpu: int, equivalents: pl.Expr) -> pl.LazyFrame:
    """daily() of attempts whose `gpus` count 1/`per_gpu` of a GPU, billed as `equivalents` of them."""
    billing, now = params.billing, params.now
    clip = clip_interval("use_start", "use_end", params.start, now)
    from_start = pl.col("day") >= pl.lit(params.start_date)
    v, zero = pl.col("v"), pl.lit(0, dtype=pl.Int64)
    days = billing_days(jobs, "start_time", params)
    by_tres = billing.charge_by == "billing_tres"
    used = usage(jobs, now).with_columns(clip)
    requeued = attempts(multi_attempt(jobs), now).filter(pl.col("requeued")).with_columns(clip)

    def passes(gpus: pl.Expr | None, prefix: str) -> pl.LazyFrame:
        z = zero if gpus is None else pl.lit(0.0)
        out = (
            day_gpu_microseconds(used, params, ["failed", "running"], days, gpus)
            .filter(from_start)
            .group_by("day", *KEYS)
            .agg(
                v.sum().alias(f"{prefix}gpu_seconds"),
                *[
                    pl.when(pl.col(flag)).then(v).otherwise(z).sum().alias(f"{flag}_{prefix}gpu_seconds")
                    for flag in ("failed", "running")
                ],
            )
        )
        rq = (
            day_gpu_microseconds(requeued, params, [], days, gpus)
            .filter(from_start)
            .group_by("day", *KEYS)
            .agg(v.sum().alias(f"requeued_{prefix}gpu_seconds"))
        )
        columns = [f"{prefix}gpu_seconds", *[f"{flag}_{prefix}gpu_seconds" for flag in FLAGS]]
        return (
            out.join(rq, on=["day", *KEYS], how="left")
            .with_columns(pl.col(f"requeued_{prefix}gpu_seconds").fill_null(0))
            .with_columns(pl.col(columns).cast(pl.Float64) / (1e6 * per_gpu))
        )

    out = passes(None, "")
    if by_tres:
        billed = passes(equivalents, "billed_")
        out = out.join(billed, on=["day", *KEYS], how="left").with_columns(
            pl.col("^.*billed_gpu_seconds$").fill_null(0.0)
        )
    else:
        out = out.with_columns(
            *[pl.col(f"{p}gpu_seconds").alias(f"{p}billed_gpu_seconds") for p in ("", "failed_", "requeued_")]
        )
    out = with_rate(out, billing).with_columns(
        *[
            (pl.col(f"{p}billed_gpu_seconds") / 3600.0 * pl.col("rate_per_gpu_hour")).alias(f"{p}cost_usd")
            for p in ("", "failed_", "requeued_")
        ],
        pl.lit(0.0).alias("spread_cost_usd"),  # set by spread_daily, which needs the day's capacity
    )
    return ensure_columns(out, {c: t for c, t in DAILY_SCHEMA.items() if c != "mig_gpu_seconds"})


def with_gpu_cost(rows: pl.LazyFrame) -> pl.LazyFrame:
    """`gpu_cost_usd`: the part of cost_usd the row's GPUs alone come to (all of it when charged by GPU)."""
    names = rows.collect_schema().names()
    if "gpu_cost_usd" in names:
        return rows
    if "billed_gpu_seconds" not in names:
        return rows.with_columns(pl.col("cost_usd").cast(pl.Float64).alias("gpu_cost_usd"))
    billed = pl.coalesce(pl.col("billed_gpu_seconds"), pl.col("gpu_seconds"))
    ratio = pl.when(billed > 0).then(pl.col("gpu_seconds") / billed).otherwise(1.0)
    return rows.with_columns((pl.col("cost_usd") * ratio).cast(pl.Float64).alias("gpu_cost_usd"))


def spreads(params: Params) -> bool:
    return params.billing.idle_cost == "spread"


RESERVATION_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "gpu_model": pl.String,
    "reservation": pl.String,
    "account": pl.String,
    "cost_usd": pl.Float64,
}


BUDGET_SCHEMA = {
    "month": pl.Date,
    "account": pl.String,
    "budget_usd": pl.Float64,
    "budget_gpu_hours": pl.Float64,
    "spent_usd": pl.Float64,
    "spent_gpu_hours": pl.Float64,
    "elapsed_ratio": pl.Float64,
    "forecast_usd": pl.Float64,
    "forecast_gpu_hours": pl.Float64,
    "as_of": UTC_DT,
}
FORECAST_MIN_DAYS = 1.0
"""No month-end forecast before this many days of the month have passed: an hour's burn times 720 is noise."""


def budgets(invoices: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """mart_budget_monthly: per month of the window (and the month of now) and account with a monthly budget
    (config `budgets`, period "month"), what its invoice rows (latest version) have spent and the month-end
    forecast; budgets of other periods are in mart_budget_period (pipelines/budgets.py).

    Forecast = spent / elapsed share of the billing month (a straight burn-down at the month's mean rate so
    far, running attempts included up to now), from FORECAST_MIN_DAYS into the month; = spent once the month
    has ended. Accounts without a monthly budget get no row."""
    monthly_budgets = {a: b for a, b in params.budgets.items() if b["period"] == "month"}
    if not monthly_budgets:
        return pl.LazyFrame(schema=BUDGET_SCHEMA)
    tz, now = params.tz, params.now
    acct = pl.LazyFrame(
        {
            "account": list(monthly_budgets),
            "budget_usd": [b.get("usd") for b in monthly_budgets.values()],
            "budget_gpu_hours": [b.get("gpu_hours") for b in monthly_budgets.values()],
        },
        schema={"account": pl.String, "budget_usd": pl.Float64, "budget_gpu_hours": pl.Float64},
    )
    latest = invoices.filter(pl.col("version") == pl.col("version").max().over("month"))
    spent = latest.group_by("month", "account").agg(
        pl.col("cost_usd").cast(pl.Float64).sum().alias("spent_usd"),
        pl.col("gpu_hours").sum().alias("spent_gpu_hours"),
    )
    months = pl.concat(
        [
            latest.select("month").unique(),
            pl.LazyFrame({"month": [local_date(now, tz).replace(day=1)]}, schema={"month": pl.Date}),
        ],
        how="vertical",
    ).unique()
    start = day_start(pl.col("month"), tz)
    end = day_start(pl.col("month").dt.offset_by("1mo"), tz)
    now_l = pl.lit(now, dtype=UTC_DT)
    length = (end - start).dt.total_seconds()
    elapsed = (pl.min_horizontal(now_l, end) - start).dt.total_seconds().clip(lower_bound=0)
    ratio = (elapsed / length).alias("elapsed_ratio")
    early = elapsed < FORECAST_MIN_DAYS * 86400

    def forecast(col: str) -> pl.Expr:
        return (
            pl.when(pl.col("elapsed_ratio") >= 1)
            .then(pl.col(col))
            .when(early)
            .then(None)
            .otherwise(pl.col(col) / pl.col("elapsed_ratio"))
        )

    out = (
        months.join(acct, how="cross")
        .join(spent, on=["month", "account"], how="left")
        .with_columns(pl.col("spent_usd", "spent_gpu_hours").fill_null(0.0), ratio)
        .with_columns(
            forecast("spent_usd").alias("forecast_usd"),
            forecast("spent_gpu_hours").alias("forecast_gpu_hours"),
            now_l.alias("as_of"),
        )
    )
    return ensure_columns(out, BUDGET_SCHEMA)


def budget_periods(
    frames: dict[str, pl.LazyFrame], invoices: pl.LazyFrame, d: pl.LazyFrame, params: Params
) -> pl.LazyFrame:
    """mart_budget_period: config budgets by period from every month's latest invoice version, and Slurm's
    GrpTRESMins allocations (pipelines/budgets.py)."""
    latest = invoices.filter(pl.col("version") == pl.col("version").max().over("month"))
    window = latest.group_by("month", "account").agg(
        pl.col("cost_usd").cast(pl.Float64).sum().alias("spent_usd"),
        pl.col("gpu_hours").sum().alias("spent_gpu_hours"),
    )
    month_cols = {
        "month": pl.Date,
        "account": pl.String,
        "spent_usd": pl.Float64,
        "spent_gpu_hours": pl.Float64,
    }
    before = ensure_columns(_frame(frames, "budget_months_before", month_cols), month_cols)
    months = pl.concat([before.select(list(month_cols)), window.select(list(month_cols))], how="vertical")
    share_cols = {
        "snapshot_time": UTC_DT,
        "account": pl.String,
        "user": pl.String,
        "parent": pl.String,
        "grp_tres_mins": pl.String,
        "grp_tres_raw": pl.String,
        "raw_usage": pl.Float64,
    }
    day_cols = {"day": pl.Date, "account": pl.String, "gpu_model": pl.String, "gpu_seconds": pl.Float64}
    gpu_days = pl.concat(
        [
            ensure_columns(_frame(frames, "gpu_days_before", day_cols), day_cols).select(list(day_cols)),
            d.select("day", "account", "gpu_model", "gpu_seconds").cast({"gpu_seconds": pl.Float64}),
        ],
        how="vertical",
    )
    settings = slurm_settings(
        _frame(frames, "slurm_priority", {"key": pl.String, "value": pl.String}), params
    )
    slurm = slurm_allocations(_frame(frames, "shares_last", share_cols), settings, gpu_days, params)
    return pl.concat([config_budgets(months, params), slurm], how="vertical")


def reservation_accounts(reservations: pl.LazyFrame) -> pl.LazyFrame:
    """(reservation, node, start, end, account): each node of a reservation that names accounts, once per
    account. `Accounts=-a,b` (everyone but) names nobody to charge, nor does a users-only reservation."""
    res = reservations.collect()
    rows = []
    for r in res.iter_rows(named=True):
        accounts = [a.strip() for a in (r["accounts"] or "").split(",") if a.strip()]
        if not accounts or any(a.startswith("-") for a in accounts):
            continue
        for node in expand_hostlist_lenient(r["node_list"]):
            rows.extend((r["name"], node, r["start_time"], r["end_time"], a, len(accounts)) for a in accounts)
    schema = {
        "reservation": pl.String,
        "node": pl.String,
        "r_start": UTC_DT,
        "r_end": UTC_DT,
        "account": pl.String,
        "n_accounts": pl.Int64,
    }
    return pl.LazyFrame(rows, schema=schema, orient="row")


def reservation_daily(
    node_states: pl.LazyFrame, reservations: pl.LazyFrame, cap: pl.LazyFrame, params: Params
) -> pl.LazyFrame:
    """mart_cost_reservation_daily: the reserved GPUs of a reservation's nodes, while it stands, charged to
    its accounts (equal parts) with billing.idle_cost = "spread"; empty otherwise.

    A node's reserved GPUs (node_intervals: RESERVED/MAINT, not down, not allocated) overlapping
    [StartTime, EndTime) of a reservation naming accounts are priced at the scope's rate and cut into billing
    days. Per day and scope the total is capped at the capacity row's reserved cents and rounded to cents by
    largest remainder, so it never exceeds what capacity holds; the rest of reserved stays in the pool."""
    if not spreads(params):
        return pl.LazyFrame(schema=RESERVATION_SCHEMA)
    now_l = pl.lit(params.now, dtype=UTC_DT)
    iv = (
        gpu_intervals(node_states, params)
        .filter(pl.col("reserved") > 0)
        .with_columns(clip_interval("snapshot_time", "until", params.start, params.now))
        .join(reservation_accounts(reservations), on="node")
        .with_columns(
            pl.max_horizontal("snapshot_time", "r_start").alias("_s"),
            pl.min_horizontal("until", pl.col("r_end").fill_null(now_l)).alias("_e"),
        )
        .filter(pl.col("_e") > pl.col("_s"))
    )
    parts = split_calendar(iv, "_s", "_e", params.tz, every="1d", out="day").filter(
        pl.col("day") >= pl.lit(params.start_date)
    )
    keys = ["day", "partition", "gpu_model"]
    raw = with_rate(
        parts.group_by(*keys, "reservation", "account").agg(
            (pl.col("reserved") * pl.col("overlap_seconds") / pl.col("n_accounts")).sum().alias("gs")
        ),
        params.billing,
    ).with_columns((pl.col("gs") / 3600.0 * pl.col("rate_per_gpu_hour")).alias("amount"))
    limit = cap.select(*keys, pl.col("reserved_cost_usd").cast(pl.Float64).alias("_cap"))
    total = pl.col("amount").sum().over(keys)
    # The cap is whole cents, so a total under it still rounds to at most the cap.
    capped = raw.join(limit, on=keys).with_columns(
        pl.when(total > pl.col("_cap"))
        .then(pl.col("amount") * pl.col("_cap") / total)
        .otherwise(pl.col("amount"))
        .alias("amount")
    )
    out = largest_remainder_cents(capped, "amount", keys, ["reservation", "account"]).with_columns(
        (pl.col("cents") / 100.0).alias("cost_usd")
    )
    return ensure_columns(out, RESERVATION_SCHEMA)


POOL_COLUMNS = (
    ("day", pl.Date),
    ("partition", pl.String),
    ("gpu_model", pl.String),
    ("idle_usd", pl.Float64),
    ("down_usd", pl.Float64),
    ("reserved_usd", pl.Float64),
)
"""unallocated_pools' columns (pairs, not a schema dict: no mart table has them)."""


def unallocated_pools(cap: pl.LazyFrame) -> pl.LazyFrame:
    """Per billing day, partition (set) and GPU model: the idle, down and reserved cents of mart_capacity_daily,
    the pools each scope's unallocated dollars come from."""
    return cap.select(
        "day",
        "partition",
        "gpu_model",
        *[pl.col(f"{p}_cost_usd").cast(pl.Float64).alias(f"{p}_usd") for p in UNALLOCATED_PARTS],
    )


def spread_rows(
    rows: pl.LazyFrame, pools: pl.LazyFrame, params: Params, reserved: pl.LazyFrame | None = None
) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(`rows` with `spread_day_usd` and `spread_month_usd`, the unallocated line per month and scope).

    A capacity row's scope is its partition set and GPU model: a usage row (day, account, user, partition,
    gpu_model, cost_usd, gpu_cost_usd) belongs to every scope whose set holds its partition and whose model
    is its own, so A100 users never carry idle H100s (OpenCost's shareIdle, by cost, within the scope).
    Dollars a usage row already paid beyond its GPUs (billing TRES: cost_usd − gpu_cost_usd) paid for GPUs
    sinfo calls idle, so they come off the scope's idle first (split over the row's scopes by their idle),
    rounded to cents. The pool, idle left + reserved (+ down with billing.bill_down), goes to the scope's rows
    of the same day by cost; a scope-day without usage goes to the scope's rows of the month by cost; a scope
    nobody used that month keeps it, as does down capacity without bill_down and everything when
    billing.idle_cost = "separate". Reserved dollars already charged to a reservation's accounts (`reserved`,
    mart_cost_reservation_daily) leave the pool. Pools are whole cents, so spread + kept = pools to the cent.
    """
    spread, bill_down = spreads(params), bool(params.billing.bill_down)
    month = pl.col("day").dt.month_start()
    r = rows.with_row_index("_r")
    if reserved is not None:
        by_res = reserved.group_by("day", "partition", "gpu_model").agg(
            pl.col("cost_usd").sum().alias("_res")
        )
        pools = (
            pools.join(by_res, on=["day", "partition", "gpu_model"], how="left")
            .with_columns(
                (pl.col("reserved_usd") - pl.col("_res").fill_null(0.0)).round(2).alias("reserved_usd")
            )
            .drop("_res")
        )
    scopes = pools.with_columns(pl.col("partition").alias("_scope")).with_columns(
        pl.col("partition").str.split(",").alias("_member")
    )
    members = scopes.explode("_member").select("day", "_scope", "_member", "gpu_model", "idle_usd")
    pairs = r.select(
        "_r",
        "day",
        "partition",
        "gpu_model",
        "cost_usd",
        (pl.col("cost_usd") - pl.col("gpu_cost_usd")).alias("_b"),
    ).join(members, left_on=["day", "partition", "gpu_model"], right_on=["day", "_member", "gpu_model"])
    idle_of_row = pl.col("idle_usd").sum().over("_r")
    share = (
        pl.when(idle_of_row > 0).then(pl.col("idle_usd") / idle_of_row).otherwise(1.0 / pl.len().over("_r"))
    )
    key = ["day", "_scope", "gpu_model"]
    per_scope = pairs.group_by(key).agg(
        (pl.col("_b").clip(lower_bound=0.0) * share).sum().alias("_blocked"),
        pl.col("cost_usd").sum().alias("_w"),
    )
    p = (
        scopes.join(per_scope, on=key, how="left")
        .with_columns(pl.col("_w").fill_null(0.0), pl.col("_blocked").fill_null(0.0))
        .with_columns(
            pl.min_horizontal((pl.col("_blocked") * 100).round() / 100, pl.col("idle_usd")).alias("_blocked")
        )
        .with_columns(
            (pl.col("idle_usd") - pl.col("_blocked")).alias("_idle"),
            month.alias("month"),
        )
    )
    if not spread:
        kept = p.with_columns(pl.lit(False).alias("_used_month"))
        out = r.with_columns(pl.lit(0.0).alias("spread_day_usd"), pl.lit(0.0).alias("spread_month_usd"))
        return out.drop("_r"), _kept(kept, bill_down=False, spread=False)
    pool = pl.col("_idle") + pl.col("reserved_usd") + (pl.col("down_usd") if bill_down else pl.lit(0.0))
    p = p.with_columns(pool.alias("_pool"))
    day_part = (
        pairs.join(p.select(*key, "_pool", "_w").filter(pl.col("_w") > 0), on=key)
        .group_by("_r")
        .agg((pl.col("_pool") * pl.col("cost_usd") / pl.col("_w")).sum().alias("spread_day_usd"))
    )
    mkey = ["month", "_scope", "gpu_model"]
    month_w = (
        pairs.with_columns(month.alias("month")).group_by(mkey).agg(pl.col("cost_usd").sum().alias("_wm"))
    )
    unspread = p.filter(pl.col("_w") <= 0).group_by(mkey).agg(pl.col("_pool").sum().alias("_um"))
    month_part = (
        pairs.with_columns(month.alias("month"))
        .join(month_w.filter(pl.col("_wm") > 0), on=mkey)
        .join(unspread, on=mkey)
        .group_by("_r")
        .agg((pl.col("_um") * pl.col("cost_usd") / pl.col("_wm")).sum().alias("spread_month_usd"))
    )
    out = (
        r.join(day_part, on="_r", how="left")
        .join(month_part, on="_r", how="left")
        .with_columns(pl.col("spread_day_usd", "spread_month_usd").fill_null(0.0))
        .drop("_r")
    )
    used = month_w.filter(pl.col("_wm") > 0).select(*mkey, pl.lit(True).alias("_used_month"))
    kept = p.join(used, on=mkey, how="left").with_columns(pl.col("_used_month").fill_null(False))
    return out, _kept(kept, bill_down=bill_down, spread=True)


def _kept(p: pl.LazyFrame, *, bill_down: bool, spread: bool) -> pl.LazyFrame:
    """The unallocated line: per month and scope, the pool dollars nobody was charged (spread_rows)."""
    charged = pl.col("_used_month") if spread else pl.lit(False)
    return (
        p.group_by("month", pl.col("_scope").alias("partition"), "gpu_model")
        .agg(
            pl.when(charged).then(0.0).otherwise(pl.col("_idle")).sum().alias("idle_cost_usd"),
            pl.when(charged & bill_down).then(0.0).otherwise(pl.col("down_usd")).sum().alias("down_cost_usd"),
            pl.when(charged).then(0.0).otherwise(pl.col("reserved_usd")).sum().alias("reserved_cost_usd"),
            pl.col("_blocked").sum().alias("blocked_cost_usd"),
        )
        .with_columns((pl.col("^.*_cost_usd$") * 100).round() / 100)
    )


def spread_daily(
    d: pl.LazyFrame, pools: pl.LazyFrame, params: Params, reserved: pl.LazyFrame | None = None
) -> pl.LazyFrame:
    """`spread_cost_usd` of each daily row: its share of its scopes' unallocated dollars of that day
    (spread_rows; billing.idle_cost = "spread"); 0 when idle cost is reported separately."""
    if not spreads(params):
        return d.with_columns(pl.lit(0.0).alias("spread_cost_usd"))
    out, _ = spread_rows(with_gpu_cost(d.drop("spread_cost_usd", strict=False)), pools, params, reserved)
    return out.rename({"spread_day_usd": "spread_cost_usd"}).drop("spread_month_usd", "gpu_cost_usd")


def monthly(
    daily_rows: pl.LazyFrame,
    prev: pl.LazyFrame,
    params: Params,
    pools: pl.LazyFrame | None = None,
    reserved: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """mart_cost_monthly: open months recomputed; closed months frozen; listed closed months re-issued.

    `daily_rows` (and `pools`, each day's unallocated capacity dollars per scope, unallocated_pools) must
    cover whole months from the window's first month (the days before the window come from the marts, see
    INPUTS["month_before"]). With billing.idle_cost = "spread" a row's cost is its usage plus its spread
    (spread_rows: by scope and cost, each day's pools, then the days nobody in the scope used by the month),
    recomputed here so that a re-issue after a change of mode is whole; a reservation's charges
    (`reserved`, mart_cost_reservation_daily) are rows of its accounts with user "". Usage and spread are each rounded by
    largest remainder, so the rows add up to the rounded usage total plus the spread pools (whole cents).
    """
    billing = params.billing
    tz, now = params.tz, params.now
    reissue = [datetime.strptime(m, "%Y-%m").date() for m in billing.reissue_months]
    now_l = pl.lit(now, dtype=UTC_DT)
    rows = _month_rows(daily_rows)
    if spreads(params) and pools is not None:
        rows, _ = spread_rows(rows, pools, params, reserved)
        rows = rows.with_columns(
            (pl.col("spread_day_usd") + pl.col("spread_month_usd")).alias("spread_cost_usd")
        )
        if reserved is not None:
            held = reserved.select(
                "day",
                "account",
                pl.lit("").alias("user"),
                pl.lit(0.0).alias("gpu_seconds"),
                pl.lit(0.0).alias("cost_usd"),
                pl.col("cost_usd").cast(pl.Float64).alias("spread_cost_usd"),
            )
            rows = pl.concat(
                [rows.select("day", "account", "user", "gpu_seconds", "cost_usd", "spread_cost_usd"), held],
                how="vertical",
            )
    else:
        rows = rows.with_columns(pl.lit(0.0).alias("spread_cost_usd"))
    new = (
        rows.with_columns(pl.col("day").dt.month_start().alias("month"))
        .group_by("month", "account", "user")
        .agg(
            (pl.col("gpu_seconds").sum() / 3600.0).alias("gpu_hours"),
            pl.col("cost_usd").sum().alias("amount"),
            pl.col("spread_cost_usd").sum().alias("spread_amount"),
        )
    )
    month_hours = pl.col("gpu_hours").sum().over("month")
    new = largest_remainder_cents(new, "amount", ["month"], ["account", "user"])
    new = largest_remainder_cents(new, "spread_amount", ["month"], ["account", "user"], out="spread_cents")
    new = new.with_columns(
        ((pl.col("cents") + pl.col("spread_cents")) / 100.0).alias("cost_usd"),
        (pl.col("spread_cents") / 100.0).alias("spread_cost_usd"),
        pl.when(month_hours > 0).then(pl.col("gpu_hours") / month_hours).otherwise(0.0).alias("share"),
        # Closed as of the window's end: a slice of a full rebuild must not freeze a month it saw only in part.
        (
            pl.lit(params.end, dtype=UTC_DT)
            >= month_closed_at(pl.col("month"), tz, int(billing.close_after_days))
        ).alias("closed"),
    ).drop("cents", "amount", "spread_cents", "spread_amount")
    prev = prev.with_columns(pl.col("version").cast(pl.Int32), pl.col("issued_at").cast(UTC_DT))
    if "spread_cost_usd" not in prev.collect_schema().names():
        prev = prev.with_columns(pl.lit(0.0).alias("spread_cost_usd"))
    state = prev.group_by("month").agg(
        pl.col("version").max().alias("max_version"), pl.col("frozen").any().alias("was_frozen")
    )
    latest = prev.join(state, on="month").filter(pl.col("version") == pl.col("max_version"))
    # A month differs when any (account, user) row is missing on one side or its cents or hours changed.
    cmp = new.join(latest, on=["month", "account", "user"], how="full", coalesce=True, suffix="_old")
    differs = cmp.group_by("month").agg(
        (
            pl.col("cost_usd").is_null()
            | pl.col("cost_usd_old").is_null()
            | ((pl.col("cost_usd") - pl.col("cost_usd_old")).abs() >= 0.005)
            | ((pl.col("gpu_hours") - pl.col("gpu_hours_old")).abs() > 1e-6)
        )
        .any()
        .alias("differs")
    )
    new = (
        new.join(state, on="month", how="left")
        .join(differs, on="month", how="left")
        .with_columns(pl.col("was_frozen").fill_null(False), pl.col("max_version").fill_null(0))
    )
    open_rows = new.filter(~pl.col("was_frozen")).with_columns(
        pl.lit(1, dtype=pl.Int32).alias("version"), pl.col("closed").alias("frozen"), now_l.alias("issued_at")
    )
    reissued = new.filter(
        pl.col("was_frozen") & pl.col("differs").fill_null(False) & pl.col("month").is_in(reissue)
    ).with_columns(
        (pl.col("max_version") + 1).cast(pl.Int32).alias("version"),
        pl.lit(True).alias("frozen"),
        now_l.alias("issued_at"),
    )
    kept = prev.join(state.filter(pl.col("was_frozen")), on="month", how="semi")
    return pl.concat([ensure_columns(f, MONTHLY_SCHEMA) for f in (kept, open_rows, reissued)], how="vertical")


def _month_rows(daily_rows: pl.LazyFrame) -> pl.LazyFrame:
    daily_rows = with_gpu_cost(daily_rows)
    names = daily_rows.collect_schema().names()
    return daily_rows.select(
        "day",
        "account",
        "user",
        *[pl.col(c).fill_null("") for c in ("partition", "gpu_model") if c in names],
        *[pl.lit("").alias(c) for c in ("partition", "gpu_model") if c not in names],
        *[pl.col(c).cast(pl.Float64) for c in ("gpu_seconds", "cost_usd", "gpu_cost_usd")],
    )


def unallocated_monthly(
    daily_rows: pl.LazyFrame,
    pools: pl.LazyFrame,
    prev: pl.LazyFrame,
    prev_monthly: pl.LazyFrame,
    params: Params,
    reserved: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """mart_cost_unallocated_monthly: per month and scope, the capacity dollars no invoice row carries
    (spread_rows), so that Σ invoices + Σ this = usage + unallocated capacity, to the cent. A frozen month
    keeps the line it was issued with unless it is listed for re-issue, like its invoice."""
    _, kept = spread_rows(_month_rows(daily_rows), pools, params, reserved)
    reissue = [datetime.strptime(m, "%Y-%m").date() for m in params.billing.reissue_months]
    frozen = prev_monthly.filter(pl.col("frozen")).select("month").unique()
    frozen = frozen.filter(~pl.col("month").is_in(reissue))
    new = kept.join(frozen, on="month", how="anti")
    old = prev.join(frozen, on="month", how="semi")
    return pl.concat([ensure_columns(f, UNALLOCATED_SCHEMA) for f in (old, new)], how="vertical")


def gpu_intervals(node_states: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """node_intervals of the nodes' whole GPUs and of their MIG slices (common.mig_node_states), counted in
    GPUs (Float64: a 1g slice of a 7-slice GPU is 1/7) under their GPU model, `slice` true for the slices.
    A node with only slices lists no whole GPUs; its zero-GPU rows (typed by a MIG profile) are left out."""
    counts = ["total", "used", *CAPACITY_PARTS, "powered_down"]
    whole = (
        node_intervals(node_states, params)
        .filter(~((pl.col("total") == 0) & pl.col("gpu_model").str.contains(mig.TYPE_REGEX)))
        .with_columns(pl.col(counts).cast(pl.Float64), pl.lit(False).alias("slice"))
    )
    slices = node_intervals(mig_node_states(node_states, params.billing.mig_models), params).with_columns(
        pl.col("node").str.split(MIG_NODE_SEP).list.first().alias("node"),
        (pl.col(counts).cast(pl.Float64) / MIG_UNITS),
        pl.lit(True).alias("slice"),
    )
    return pl.concat([whole, slices], how="vertical_relaxed")


def capacity(
    node_states: pl.LazyFrame, params: Params, intervals: pl.LazyFrame | None = None
) -> pl.LazyFrame:
    """mart_capacity_daily: GPU-seconds and cost of capacity and its four parts; cents by largest remainder
    within each row, so allocated + idle + down + reserved equals capacity to the cent. MIG slices count as
    their fraction of a GPU of their model (gpu_intervals); `mig_gpu_seconds` is their part of capacity.

    sinfo snapshots every node at once, so the nodes of a partition and model share their intervals: their
    GPUs are summed per interval before the day split (~1,000 intervals per snapshot time down to a few).
    `intervals`: node_intervals of `node_states`, when the caller has them (the reconciliation reads them too)."""
    billing = params.billing
    counts = ["total", *CAPACITY_PARTS, "powered_down", "mig"]
    iv = (
        (gpu_intervals(node_states, params) if intervals is None else intervals)
        .with_columns(
            *clip_interval("snapshot_time", "until", params.start, params.now),
            # Powered-off GPUs (slurm_states.NODE_GPUS_POWERED_DOWN_FLAGS) are neither idle nor capacity.
            (pl.col("total") - pl.col("powered_down")).alias("total"),
            (pl.col("idle") - pl.col("powered_down")).alias("idle"),
        )
        .with_columns(pl.when(pl.col("slice")).then(pl.col("total")).otherwise(0.0).alias("mig"))
        .group_by("snapshot_time", "until", "partition", "gpu_model")
        .agg(pl.col(counts).sum())
    )
    # Cached: split_calendar reads its input twice (one-day and longer rows), which computed the intervals twice.
    parts = split_calendar(iv.cache(), "snapshot_time", "until", params.tz, every="1d", out="day")
    sums = (
        parts.group_by("day", "partition", "gpu_model")
        .agg(
            (pl.col("total") * pl.col("overlap_seconds"))
            .sum()
            .cast(pl.Float64)
            .alias("capacity_gpu_seconds"),
            *[
                (pl.col(p) * pl.col("overlap_seconds")).sum().cast(pl.Float64).alias(f"{p}_gpu_seconds")
                for p in (*CAPACITY_PARTS, "powered_down", "mig")
            ],
        )
        .filter(pl.col("day") >= pl.lit(params.start_date))
    )
    sums = with_rate(sums, billing)
    keys = ["day", "partition", "gpu_model"]
    long = sums.unpivot(
        index=[
            *keys,
            "rate_per_gpu_hour",
            "capacity_gpu_seconds",
            "powered_down_gpu_seconds",
            "mig_gpu_seconds",
        ],
        on=[f"{p}_gpu_seconds" for p in CAPACITY_PARTS],
        variable_name="part",
        value_name="gs",
    ).with_columns((pl.col("gs") / 3600.0 * pl.col("rate_per_gpu_hour")).alias("amount"))
    long = largest_remainder_cents(long, "amount", keys, ["part"])
    # Back to one row per key from the long frame alone: joining it to `sums` would compute `sums` twice.
    out = (
        long.group_by(keys)
        .agg(
            pl.col("capacity_gpu_seconds").first(),
            pl.col("powered_down_gpu_seconds").first(),
            pl.col("mig_gpu_seconds").first(),
            *[
                pl.col("gs").filter(pl.col("part") == f"{p}_gpu_seconds").sum().alias(f"{p}_gpu_seconds")
                for p in CAPACITY_PARTS
            ],
            *[
                pl.col("cents").filter(pl.col("part") == f"{p}_gpu_seconds").sum().alias(f"{p}_cost_usd")
                for p in CAPACITY_PARTS
            ],
            pl.col("cents").sum().alias("capacity_cost_usd"),
        )
        .with_columns(pl.col("^.*_cost_usd$") / 100.0)
    )
    return ensure_columns(out, CAPACITY_SCHEMA)


def counters(
    window_daily: pl.LazyFrame, before: pl.LazyFrame, prev: pl.LazyFrame, params: Params
) -> pl.LazyFrame:
    """mart_usage_counters: all history up to now (days before the window from the mart, the window just
    computed), never lower than what was reported before; any shortfall goes to the *_correction columns."""
    keys = ["account", "partition", "gpu_model"]
    total = (
        pl.concat(
            [
                before.select(*keys, "gpu_seconds", "cost_usd").cast(
                    {"gpu_seconds": pl.Float64, "cost_usd": pl.Float64}
                ),
                window_daily.select(*keys, "gpu_seconds", "cost_usd"),
            ],
            how="vertical",
        )
        .group_by(keys)
        .agg(pl.col("gpu_seconds").sum(), pl.col("cost_usd").sum())
    )
    j = total.join(prev, on=keys, how="full", coalesce=True).with_columns(
        pl.col("gpu_seconds", "cost_usd", "gpu_seconds_total", "cost_usd_total").fill_null(0.0)
    )
    out = j.with_columns(
        pl.max_horizontal("gpu_seconds", "gpu_seconds_total").alias("gpu_seconds_total"),
        pl.max_horizontal("cost_usd", "cost_usd_total").alias("cost_usd_total"),
    ).with_columns(
        (pl.col("gpu_seconds") - pl.col("gpu_seconds_total")).alias("gpu_seconds_correction"),
        (pl.col("cost_usd") - pl.col("cost_usd_total")).alias("cost_usd_correction"),
        pl.lit(params.now, dtype=UTC_DT).alias("updated_at"),
    )
    return ensure_columns(out, COUNTER_SCHEMA)


def cost_efficiency(
    d: pl.LazyFrame,
    jobs: pl.LazyFrame,
    gpu_jobs: pl.LazyFrame,
    samples: pl.LazyFrame,
    params: Params,
    inventory: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """mart_cost_efficiency_daily: per billing day and account, the charged GPU-seconds and dollars (from the
    daily rows `d`) beside what NVML says the GPUs did while the account's attempts held them.

    Each mapping interval (gpu_jobs) goes to its attempt (common.attribute_intervals), is
    clipped to [window start, now), cut into UTC minutes and joined to that GPU's minute sample. A sampled
    held second costs the attempt's $/GPU-hour / 3600; it is idle when the minute's mean utilisation is under
    drift.idle_util_percent, and it counts activity / 100 of a useful second: SM activity where the agent read
    GPM, else GPU_UTIL (common.activity; `gpm_gpu_seconds` and `activity_source` say which). Energy is the
    minute's energy-counter delta (else its mean power × 60 s) × held / 60. A MIG slice's interval holds its
    share of a GPU (common.with_slice_fractions) at the rate of its GPU model and is joined to samples of the
    MIG device itself, which NVML does not give (GPM included: the agents read GPM per whole GPU): its
    GPU-seconds are in mig_gpu_seconds, unsampled, and neither GPM nor GPU_UTIL of its parent GPU is
    attributed to it.
    """
    billing = params.billing
    threshold = float(params.drift.idle_util_percent)
    price_kwh = float(billing.energy_usd_per_kwh) * float(billing.pue)
    # No electricity price (the default 0) is "not configured", not free energy.
    energy_cost = (
        pl.col("energy_joules") / JOULES_PER_KWH * price_kwh
        if price_kwh > 0
        else pl.lit(None, dtype=pl.Float64)
    )
    cluster = pl.lit(params.cluster)
    keys = ["job_id_raw", "submit_time"]
    if "mig_instance" not in gpu_jobs.collect_schema().names():
        gpu_jobs = gpu_jobs.with_columns(pl.lit("").alias("mig_instance"))
    # Only jobs with a mapping interval can match one (attribute_intervals joins by job id), and every attempt
    # of such a job stays, so the requeue flags are those of the whole frame.
    mapped = gpu_jobs.select(mapped_job_id_raw(pl.col("job_id")).alias("job_id_raw")).unique()
    whole, slices = mig_attempts(jobs.join(mapped, on="job_id_raw", how="semi"), billing)
    both = pl.concat(
        [whole.with_columns(pl.lit(False).alias("slice")), slices.with_columns(pl.lit(True).alias("slice"))],
        how="diagonal_relaxed",
    )
    att = attempts(both, params.now)
    j = att.unique(keys).select(
        cluster.alias("cluster"),
        "job_id_raw",
        pl.col("job_id_raw").cast(pl.String).alias("job_id"),
        pl.lit(None, dtype=pl.Int32).alias("attempt"),
        "submit_time",
        "start_time",
        "end_time",
        "account",
        "user",
        "gpus",
    )
    iv = attribute_intervals(gpu_jobs.with_columns(cluster.alias("cluster")), j, params.now)
    iv = (
        iv.filter(pl.col("submit_time").is_not_null())
        .with_columns(
            *clip_interval("interval_start", "interval_end", params.start, params.now),
            (pl.col("mig_instance") != "").alias("slice"),
        )
        .join(
            att.select(*keys, "slice", "partition", "gpu_model").unique([*keys, "slice"], keep="first"),
            on=[*keys, "slice"],
        )
    )
    held_units = slices.group_by(keys).agg(pl.col("gpus").sum().alias("mig_units"))
    inventory = ensure_columns(_optional(inventory, dict(MIG_INVENTORY_COLUMNS)), dict(MIG_INVENTORY_COLUMNS))
    iv = with_slice_fractions(iv, inventory, held_units).with_columns(
        pl.when(pl.col("slice")).then(pl.col("mig_instance")).otherwise(pl.col("gpu_uuid")).alias("gpu_uuid")
    )
    minutes = (
        split_buckets(iv, "interval_start", "interval_end", 60, out="minute")
        .rename({"overlap_seconds": "held"})
        .with_columns(pl.col("held") * pl.col("gpu_fraction"))
    )
    m = with_rate(with_samples(minutes, samples, ("node", "gpu_uuid")), billing)
    sampled = pl.col("util_gpu_mean").is_not_null()
    per_second = pl.col("rate_per_gpu_hour") / 3600.0
    energy = pl.coalesce(
        pl.col("energy_joules") * pl.col("held") / 60.0, pl.col("power_mean_watts") * pl.col("held")
    )
    zero = pl.lit(0.0)
    day = billing_days(gpu_jobs, "interval_start", params).day(pl.col("minute").dt.epoch("us"))
    used = (
        m.with_columns(day.alias("day"))
        .group_by("day", "account")
        .agg(
            pl.when(sampled).then(pl.col("held")).otherwise(zero).sum().alias("sampled_gpu_seconds"),
            pl.when(sampled)
            .then(pl.col("held") * per_second)
            .otherwise(zero)
            .sum()
            .alias("sampled_cost_usd"),
            pl.when(sampled & (pl.col("util_gpu_mean") < threshold))
            .then(pl.col("held"))
            .otherwise(zero)
            .sum()
            .alias("idle_gpu_seconds"),
            pl.when(sampled & (pl.col("util_gpu_mean") < threshold))
            .then(pl.col("held") * per_second)
            .otherwise(zero)
            .sum()
            .alias("idle_cost_usd"),
            pl.when(sampled)
            .then(pl.col("held") * activity() / 100.0)
            .otherwise(zero)
            .sum()
            .alias("useful_gpu_seconds"),
            pl.when(sampled & (pl.col("activity_source") == "gpm"))
            .then(pl.col("held"))
            .otherwise(zero)
            .sum()
            .alias("gpm_gpu_seconds"),
            energy.fill_null(0.0).sum().alias("energy_joules"),
            pl.when(pl.col("slice")).then(pl.col("held")).otherwise(zero).sum().alias("mig_gpu_seconds"),
        )
    )
    charged = d.group_by("day", "account").agg(pl.col("gpu_seconds").sum(), pl.col("cost_usd").sum())
    out = (
        charged.join(used, on=["day", "account"], how="full", coalesce=True)
        .with_columns(
            pl.col(
                "gpu_seconds",
                "cost_usd",
                "sampled_gpu_seconds",
                "sampled_cost_usd",
                "idle_gpu_seconds",
                "idle_cost_usd",
                "useful_gpu_seconds",
                "energy_joules",
                "mig_gpu_seconds",
                "gpm_gpu_seconds",
            ).fill_null(0.0)
        )
        .with_columns(
            pl.when(pl.col("sampled_gpu_seconds") > 0)
            .then(pl.col("useful_gpu_seconds") / pl.col("sampled_gpu_seconds"))
            .alias("useful_share"),
            pl.when(pl.col("useful_gpu_seconds") > 0)
            .then(pl.col("sampled_cost_usd") / (pl.col("useful_gpu_seconds") / 3600.0))
            .alias("cost_per_useful_gpu_hour"),
            (pl.col("energy_joules") / JOULES_PER_KWH).alias("energy_kwh"),
            energy_cost.alias("energy_cost_usd"),
            activity_sources(pl.col("gpm_gpu_seconds"), pl.col("sampled_gpu_seconds")).alias(
                "activity_source"
            ),
        )
    )
    return ensure_columns(out.filter(pl.col("day") >= pl.lit(params.start_date)), EFFICIENCY_SCHEMA)


RATE_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "gpu_model": pl.String,
    "rate_per_gpu_hour": pl.Float64,
    "price_key": pl.String,
    "kind": pl.String,
    **{f: pl.Float64 for f in RATE_FIELDS if f != "rate"},
}
RECONCILIATION_CAUSES = ("unrecorded", "unseen", "sampling", "gap")
"""allocated (sinfo snapshots) − charged (sacct) = unrecorded − unseen + sampling − gap, per day, exactly."""
RECONCILIATION_DAILY_SCHEMA = {
    "day": pl.Date,
    "allocated_gpu_seconds": pl.Float64,
    "charged_gpu_seconds": pl.Float64,
    **{f"{c}_gpu_seconds": pl.Float64 for c in RECONCILIATION_CAUSES},
}
RECONCILIATION_MONTHLY_SCHEMA = {
    "month": pl.Date,
    "allocated_gpu_seconds": pl.Float64,
    "charged_gpu_seconds": pl.Float64,
    "difference_gpu_seconds": pl.Float64,
    **{f"{c}_gpu_seconds": pl.Float64 for c in RECONCILIATION_CAUSES},
    "invoiced_gpu_seconds": pl.Float64,
    "after_invoice_gpu_seconds": pl.Float64,
    "capacity_cost_usd": pl.Float64,
    "allocated_cost_usd": pl.Float64,
    "invoiced_cost_usd": pl.Float64,
    "usage_cost_usd": pl.Float64,
    "unallocated_cost_usd": pl.Float64,
    "blocked_cost_usd": pl.Float64,
    "difference_cost_usd": pl.Float64,
}


def price_entries(billing: Billing) -> pl.LazyFrame:
    """One row per price-book key as price_book keys it (`partition:<name>`, a lower-case GPU model,
    `default`): `kind` 'rate' (a number or {rate = x}) or 'amortised' with every input of hourly_rate's
    formula, the defaults it used included; NULL inputs for a rate."""
    inputs = [f for f in RATE_FIELDS if f != "rate"]
    rows = []
    for key, entry in billing.rates.items():
        name = key if key.startswith("partition:") else key.lower()
        amortised = isinstance(entry, dict) and "rate" not in entry
        values = [float(entry.get(f, RATE_FIELDS[f].default)) if amortised else None for f in inputs]
        rows.append((name, "amortised" if amortised else "rate", *values))
    schema = {"price_key": pl.String, "kind": pl.String, **{f: pl.Float64 for f in inputs}}
    return pl.LazyFrame(rows, schema=schema, orient="row")


def rates_daily(cap: pl.LazyFrame, d: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """mart_cost_rates_daily: for each billing day, the $/GPU-hour applied to each (partition, GPU model) the
    capacity rows with GPUs (partition sets) and the usage rows priced, the price-book key it came from (with_rate's
    order: partition, else GPU model, else default) and, for an amortised entry, the inputs of its formula."""
    billing = params.billing
    models, parts, _ = price_book(billing)
    gpus = (pl.col("capacity_gpu_seconds") > 0) | (pl.col("powered_down_gpu_seconds") > 0)
    scopes = pl.concat(
        [cap.filter(gpus).select("day", "partition", "gpu_model"), d.select("day", "partition", "gpu_model")],
        how="vertical",
    ).unique()
    model = pl.col("gpu_model").str.to_lowercase()
    key = (
        pl.when(pl.col("partition").is_in(list(parts)))
        .then(pl.lit("partition:") + pl.col("partition"))
        .when(model.is_in(list(models)))
        .then(model)
        .otherwise(pl.lit("default"))
    )
    out = with_rate(scopes, billing).with_columns(key.alias("price_key"))
    return ensure_columns(out.join(price_entries(billing), on="price_key", how="left"), RATE_SCHEMA)


def node_pieces(
    node_states: pl.LazyFrame, params: Params, intervals: pl.LazyFrame | None = None
) -> pl.LazyFrame:
    """The capacity rows' node intervals (gpu_intervals, clipped to the window) cut at billing-day bounds:
    (day, node, allocated, ps, pe), the piece [ps, pe) in epoch microseconds and `allocated` in units of
    1/MIG_UNITS GPU, a node's whole GPUs and MIG slices together. Most intervals lie in one day and are not
    exploded; day bounds come from a table of the window's days, as in day_gpu_microseconds."""
    tz, now = params.tz, params.now
    first = local_date(params.start, tz) - timedelta(days=1)
    table = day_bounds(first, local_date(now, tz) + timedelta(days=1), tz)
    origin = (first - date(1970, 1, 1)).days
    days = billing_days(node_states, "snapshot_time", params)

    def at(day: pl.Expr, column: str) -> pl.Expr:
        return pl.lit(table[column]).gather(day.cast(pl.Int32) - origin)

    iv = (
        (gpu_intervals(node_states, params) if intervals is None else intervals)
        .with_columns(clip_interval("snapshot_time", "until", params.start, now))
        .filter(pl.col("until") > pl.col("snapshot_time"))
        .select(
            "node",
            "slice",
            (pl.col("allocated") * MIG_UNITS).round().cast(pl.Int64).alias("allocated"),
            pl.col("snapshot_time").dt.epoch("us").alias("s"),
            pl.col("until").dt.epoch("us").alias("e"),
        )
    )
    # A node's slices stand over the same snapshots as its whole GPUs: one piece each, so that J is set against
    # all the node's GPUs at once. Only the few nodes with slices are grouped.
    sliced = iv.filter(pl.col("slice")).select("node").unique()
    iv = (
        pl.concat(
            [
                iv.join(sliced, on="node", how="anti").drop("slice"),
                iv.join(sliced, on="node", how="semi")
                .group_by("node", "s", "e")
                .agg(pl.col("allocated").sum()),
            ],
            how="diagonal",
        )
        .select("node", "allocated", "s", "e")
        .with_columns(days.day(pl.col("s")).alias("day"), days.day(pl.col("e") - 1).alias("_last"))
    )
    single = iv.filter(pl.col("day") == pl.col("_last")).select(
        "day", "node", "allocated", pl.col("s").alias("ps"), pl.col("e").alias("pe")
    )
    multi = (
        iv.filter(pl.col("day") != pl.col("_last"))
        .with_columns(pl.date_ranges("day", "_last", "1d").alias("day"))
        .explode("day")
        .select(
            "day",
            "node",
            "allocated",
            pl.max_horizontal("s", at(pl.col("day"), "_ps")).alias("ps"),
            pl.min_horizontal("e", at(pl.col("day"), "_pe")).alias("pe"),
        )
        .filter(pl.col("pe") > pl.col("ps"))
    )
    return pl.concat([single, multi], how="vertical").filter(pl.col("day") >= pl.lit(params.start_date))


def node_gpu_levels(jobs: pl.LazyFrame, params: Params) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Per node, the step function of the GPUs sacct says attempts held there: (levels, names). `levels` has
    (nk, t, level, before) at each change, `nk` the node's number in `names` (node, nk), `t` epoch
    microseconds, `level` the GPUs held from t to the next change and `before` the GPU-microseconds held on
    the node before t, GPUs in units of 1/MIG_UNITS GPU (integers: a difference of two is exact whatever the
    window). A MIG slice counts as its fraction of a GPU (mig_attempts), as in mart_cost_daily.

    An attempt's GPUs are spread over the nodes of its NodeList as Slurm's --gpus-per-node jobs are, evenly,
    the first nodes taking one more when they do not divide (sacct records the job's total only); its MIG
    slices likewise, by units.
    Attempts without a NodeList are on no node. Hostlists are expanded once per distinct NodeList."""
    names = jobs.collect_schema().names()
    if "node_list" not in names:
        jobs = jobs.with_columns(pl.lit(None, dtype=pl.String).alias("node_list"))
    if "billing" not in names:
        jobs = jobs.with_columns(pl.lit(None, dtype=pl.Float64).alias("billing"))
    whole, slices = mig_attempts(jobs, params.billing)
    names = whole.collect_schema().names()
    # `_step`: units per count of `gpus` (whole GPUs are spread over the nodes as whole GPUs, slices as units)
    held = pl.concat(
        [
            whole.with_columns(pl.lit(MIG_UNITS, dtype=pl.Int64).alias("_step")),
            slices.select(names).with_columns(pl.lit(1, dtype=pl.Int64).alias("_step")),
        ],
        how="vertical_relaxed",
    )
    a = (
        usage(held, params.now)
        .filter(pl.col("node_list").is_not_null())
        .with_columns(clip_interval("use_start", "use_end", params.start, params.now))
        .filter(pl.col("use_end") > pl.col("use_start"))
        .select(
            "node_list",
            "_step",
            pl.col("gpus").cast(pl.Int64),
            pl.col("use_start").dt.epoch("us").alias("s"),
            pl.col("use_end").dt.epoch("us").alias("e"),
        )
    )
    lists = (
        a.select(pl.col("node_list").unique())
        .with_columns(
            pl.col("node_list")
            .map_elements(expand_hostlist_lenient, return_dtype=pl.List(pl.String))
            .alias("node")
        )
        .with_columns(pl.col("node").list.len().cast(pl.Int64).alias("_n"))
        .filter(pl.col("_n") > 0)
        .with_columns(pl.int_ranges(0, pl.col("_n")).alias("_k"))
        .explode("node", "_k")
        .cache()
    )
    names = lists.select(pl.col("node").unique().sort()).with_row_index("nk")
    per_node = a.join(lists.join(names, on="node"), on="node_list").with_columns(
        (
            (pl.col("gpus") // pl.col("_n") + (pl.col("_k") < pl.col("gpus") % pl.col("_n")).cast(pl.Int64))
            * pl.col("_step")
        ).alias("g")
    )
    # Sorted by time only (one key sorts far faster than node and time), each node's running sums are
    # windows over its rows in that order. Several changes at one instant need no merging: the as-of join
    # takes the last row at or before an instant, after all of them, and the rows between add no area.
    steps = (
        pl.concat(
            [
                per_node.select("nk", pl.col("s").alias("t"), "g"),
                per_node.select("nk", pl.col("e").alias("t"), -pl.col("g")),
            ],
            how="vertical",
        )
        .sort("t")
        .with_columns(pl.col("g").cum_sum().over("nk").alias("level"))
    )
    area = pl.col("level") * (pl.col("t").shift(-1).over("nk") - pl.col("t")).fill_null(0)
    levels = (
        steps.with_columns(area.alias("_area"))
        .with_columns((pl.col("_area").cum_sum().over("nk") - pl.col("_area")).alias("before"))
        .select("nk", "t", "level", "before")
    )
    return levels, names


def _unit_seconds(units_us: pl.Expr) -> pl.Expr:
    """GPU-seconds of integer microseconds of 1/MIG_UNITS GPU: whole GPU-microseconds / 1e6 plus the rest, so
    that a whole-GPU figure is the same float as GPU-microseconds / 1e6 (a plan may turn a division by a
    constant into a multiplication by its inverse, which 1/28e6 would not survive exactly)."""
    return (units_us // MIG_UNITS) / 1e6 + (units_us % MIG_UNITS) / (1e6 * MIG_UNITS)


def reconciliation_daily(
    node_states: pl.LazyFrame,
    jobs: pl.LazyFrame,
    d: pl.LazyFrame,
    params: Params,
    intervals: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """mart_cost_reconciliation_daily: per billing day, the GPU-seconds sinfo snapshots show allocated (as
    mart_capacity_daily counts them) against those sacct attempts are charged (mart_cost_daily), and the
    difference split into four causes that add up to it exactly:

    allocated − charged = unrecorded − unseen + sampling − gap.

    Each snapshot stands for its node over an interval, cut at billing-day bounds into pieces [ps, pe) with
    the snapshot's allocated GPUs A (node_pieces). J is the GPUs sacct attempts held on the node at ps (the
    snapshot's time, or midnight for the later pieces of an interval that crosses it, so a day never depends
    on the day before) and C the GPU-seconds they held in the piece (node_gpu_levels). Per piece:
    unrecorded = max(A − J, 0) × (pe − ps) (sinfo showed GPUs allocated that no sacct attempt held: an attempt
    not yet in accounting, GPUs outside accounting); unseen = max(J − A, 0) × (pe − ps) (attempts
    held GPUs sinfo did not show allocated); sampling = J × (pe − ps) − C (a snapshot stands until the next:
    attempts that started or ended in between). gap = charged − Σ C: GPU-seconds charged while no snapshot
    covered the node (snapshot gaps longer than pipelines.node_snapshot_max_gap_seconds, nodes sinfo never
    listed, attempts without a NodeList). MIG slices count on both sides as their fraction of a GPU (sinfo's
    and sacct's slices alike, docs/pipelines.md#mig). Sums are integer microseconds of 1/MIG_UNITS GPU."""
    levels, names = node_gpu_levels(jobs, params)
    levels = levels.rename({"t": "t0"})  # sorted by time

    def value_at(lf: pl.LazyFrame, column: str, level: str, integral: str) -> pl.LazyFrame:
        """The level and the integral of node_gpu_levels' step function at the instants `column`."""
        return (
            lf.sort(column)
            .join_asof(
                levels, left_on=column, right_on="t0", by="nk", strategy="backward", check_sortedness=False
            )
            .with_columns(
                pl.col("level").fill_null(0).alias(level),
                (pl.col("before") + pl.col("level") * (pl.col(column) - pl.col("t0")))
                .fill_null(0)
                .alias(integral),
            )
            .drop("level", "before", "t0")
        )

    # A node no attempt ran on has no number: no level, so J and C are 0.
    pieces = node_pieces(node_states, params, intervals).join(names, on="node", how="left")
    pieces = value_at(value_at(pieces, "ps", "j", "f_ps"), "pe", "_j_pe", "f_pe")
    span = pl.col("pe") - pl.col("ps")
    a, j = pl.col("allocated"), pl.col("j")
    covered = pl.col("f_pe") - pl.col("f_ps")
    per_day = pieces.group_by("day").agg(
        (a * span).sum().alias("allocated"),
        ((a - j).clip(lower_bound=0) * span).sum().alias("unrecorded"),
        ((j - a).clip(lower_bound=0) * span).sum().alias("unseen"),
        (j * span - covered).sum().alias("sampling"),
        covered.sum().alias("_covered"),
    )
    charged = d.group_by("day").agg(
        (pl.col("gpu_seconds") * (1e6 * MIG_UNITS)).round().cast(pl.Int64).sum().alias("charged")
    )
    parts = ["allocated", "unrecorded", "unseen", "sampling", "_covered", "charged"]
    out = (
        per_day.join(charged, on="day", how="full", coalesce=True)
        .with_columns(pl.col(parts).fill_null(0))
        .with_columns((pl.col("charged") - pl.col("_covered")).alias("gap"))
        .select(
            "day",
            *[
                _unit_seconds(pl.col(c)).alias(f"{c}_gpu_seconds")
                for c in ("allocated", "charged", *RECONCILIATION_CAUSES)
            ],
        )
    )
    return ensure_columns(out, RECONCILIATION_DAILY_SCHEMA)


def reconciliation_monthly(
    days: pl.LazyFrame,
    invoices: pl.LazyFrame,
    unallocated: pl.LazyFrame,
    capacity_days: pl.LazyFrame,
    params: Params,
) -> pl.LazyFrame:
    """mart_cost_reconciliation_monthly: per billing month from the window's, the month's reconciliation in
    GPU-seconds (the sums of `days`, mart_cost_reconciliation_daily, whole months) and in dollars.

    GPU-seconds: difference = allocated − charged (= unrecorded − unseen + sampling − gap);
    after_invoice = charged − invoiced, the sacct GPU-seconds that changed after the invoice's latest
    version was issued (late records of a frozen month; 0 for an open month).
    Dollars (cents): capacity − invoiced − unallocated = difference = allocated − usage + blocked, where
    invoiced is the latest invoice (usage = its cost less its spread), unallocated the unallocated line
    (idle + down + reserved) and blocked the idle dollars billing TRES already paid (both
    mart_cost_unallocated_monthly), capacity and allocated the month's mart_capacity_daily rows
    (`capacity_days`)."""
    month = pl.col("day").dt.month_start().alias("month")
    start = pl.lit(params.start_month)
    us = ["allocated", "charged", *RECONCILIATION_CAUSES]
    gpu = (
        days.with_columns(month)
        .group_by("month")
        .agg(*[(pl.col(f"{c}_gpu_seconds") * 1e6).round().cast(pl.Int64).sum().alias(c) for c in us])
        .with_columns((pl.col("allocated") - pl.col("charged")).alias("difference"))
        .select("month", *[(pl.col(c) / 1e6).alias(f"{c}_gpu_seconds") for c in (*us, "difference")])
    )
    latest = invoices.filter(pl.col("version") == pl.col("version").max().over("month"))
    billed = latest.group_by("month").agg(
        (pl.col("gpu_hours").sum() * 3.6e9).round().cast(pl.Int64).alias("_invoiced"),
        pl.col("cost_usd").cast(pl.Float64).sum().alias("invoiced_cost_usd"),
        (pl.col("cost_usd").cast(pl.Float64) - pl.col("spread_cost_usd").cast(pl.Float64))
        .sum()
        .alias("usage_cost_usd"),
    )
    line = unallocated.group_by("month").agg(
        (pl.col("idle_cost_usd") + pl.col("down_cost_usd") + pl.col("reserved_cost_usd"))
        .sum()
        .alias("unallocated_cost_usd"),
        pl.col("blocked_cost_usd").sum(),
    )
    cap = (
        capacity_days.with_columns(month)
        .group_by("month")
        .agg(pl.col("capacity_cost_usd").sum(), pl.col("allocated_cost_usd").sum())
    )
    money = ["capacity_cost_usd", "allocated_cost_usd", "invoiced_cost_usd", "usage_cost_usd"]
    money += ["unallocated_cost_usd", "blocked_cost_usd"]
    cents = [((pl.col(c) * 100).round() / 100).alias(c) for c in money]
    out = (
        gpu.join(billed, on="month", how="full", coalesce=True)
        .join(line, on="month", how="full", coalesce=True)
        .join(cap, on="month", how="full", coalesce=True)
        .filter(pl.col("month") >= start)
        .with_columns(pl.col(f"{c}_gpu_seconds" for c in (*us, "difference")).fill_null(0.0))
        .with_columns(pl.col("_invoiced").fill_null(0), *[c.fill_null(0.0) for c in cents])
        .with_columns(
            (pl.col("_invoiced") / 1e6).alias("invoiced_gpu_seconds"),
            (
                ((pl.col("charged_gpu_seconds") * 1e6).round().cast(pl.Int64) - pl.col("_invoiced")) / 1e6
            ).alias("after_invoice_gpu_seconds"),
            (pl.col("capacity_cost_usd") - pl.col("invoiced_cost_usd") - pl.col("unallocated_cost_usd"))
            .round(2)
            .alias("difference_cost_usd"),
        )
    )
    return ensure_columns(out, RECONCILIATION_MONTHLY_SCHEMA)


WASTE_SCHEMA = {
    "day": pl.Date,
    "account": pl.String,
    "attempts": pl.Int64,
    "failed_attempts": pl.Int64,
    "failed_gpu_seconds": pl.Float64,
    "failed_cost_usd": pl.Float64,
    "requeued_attempts": pl.Int64,
    "requeued_gpu_seconds": pl.Float64,
    "requeued_cost_usd": pl.Float64,
}


def waste_daily(jobs: pl.LazyFrame, params: Params, weights: dict[str, str] | None = None) -> pl.LazyFrame:
    """mart_cost_waste_daily: per billing day on which GPU attempts ended, and account, the attempts that ended
    and, of them, those that failed (the states of mart_cost_daily's failed_*) and those requeued (a later
    attempt of the same job exists), with their whole GPU-seconds and dollars at their rate (billed
    GPU-equivalents with billing.charge_by = "billing_tres", by `weights` as daily() bills them). MIG slices
    count as their fraction of a GPU at their model's rate (mig_attempts, as in mart_cost_daily); an attempt
    is counted once however many GPU models its slices and GPUs span.

    By the day an attempt ended, not the days it ran: whether an attempt failed is known only when it ends,
    so a month's figures are final once the month has ended; an attempt running across the month's end
    counts, whole, in the month it ends in (mart_cost_daily's failed_* spread it over the days it ran, and
    change for a past month when it ends)."""
    now, billing = params.now, params.billing
    if "billing" not in jobs.collect_schema().names():
        jobs = jobs.with_columns(pl.lit(None, dtype=pl.Float64).alias("billing"))
    whole, slices = mig_attempts(jobs, billing)
    names, keys = whole.collect_schema().names(), ["job_id_raw", "submit_time"]
    if "mig_tres" in names:
        # An attempt with whole GPUs is counted by its whole row; one with slices only by its slice rows.
        mixed = whole.filter(pl.col("mig_tres").is_not_null()).select(*keys, pl.lit(True).alias("_mixed"))
        slices = slices.join(mixed, on=keys, how="left")
        share = pl.when(pl.col("_mixed").fill_null(False)).then(0.0).otherwise(1.0 / pl.len().over(keys))
    else:
        share = pl.lit(1.0)
    rows = pl.concat(
        [
            whole.with_columns(
                gpu_equivalents(billing, weights).alias("_eq"),
                pl.lit(1.0).alias("_per"),
                pl.lit(1.0).alias("_n"),
            ),
            slices.with_columns(
                mig_gpu_equivalents(billing, weights).alias("_eq"),
                pl.lit(float(MIG_UNITS)).alias("_per"),
                share.alias("_n"),
            ).select(*names, "_eq", "_per", "_n"),
        ],
        how="vertical_relaxed",
    )
    ended = attempts(rows, now).filter(~pl.col("running") & pl.col("end_time").is_not_null())
    days = billing_days(ended, "end_time", params)
    seconds = (pl.col("use_end") - pl.col("use_start")).dt.total_microseconds().clip(lower_bound=0) / 1e6
    a = with_rate(
        ended.with_columns(
            days.day(pl.col("use_end").dt.epoch("us") - 1).alias("day"),
            (seconds * pl.col("gpus").cast(pl.Float64) / pl.col("_per")).alias("gs"),
            (seconds * pl.col("_eq") / pl.col("_per")).alias("billed"),
        ).filter(pl.col("day") >= pl.lit(params.start_date)),
        billing,
    ).with_columns((pl.col("billed") / 3600.0 * pl.col("rate_per_gpu_hour")).alias("usd"))
    failed, requeued = pl.col("failed"), pl.col("requeued")
    # Summed as integers (microsecond GPU-seconds, nano-dollars): a group's rows arrive in an order that varies
    # between runs, and float sums in another order moved a report's cent between identical runs.
    a = a.with_columns(
        (pl.col("gs") * 1e6).round().cast(pl.Int64).alias("gs_us"),
        (pl.col("usd") * 1e9).round().cast(pl.Int64).alias("usd_n"),
    )
    zero = pl.lit(0.0)
    n = pl.col("_n")

    def count(rows: pl.Expr) -> pl.Expr:
        return rows.sum().round().cast(pl.Int64)

    def total(col: str, which: pl.Expr, scale: float) -> pl.Expr:
        return pl.col(col).filter(which).sum().cast(pl.Float64) / scale

    out = a.group_by("day", "account").agg(
        count(n).alias("attempts"),
        count(pl.when(failed).then(n).otherwise(zero)).alias("failed_attempts"),
        total("gs_us", failed, 1e6).alias("failed_gpu_seconds"),
        total("usd_n", failed, 1e9).alias("failed_cost_usd"),
        count(pl.when(requeued).then(n).otherwise(zero)).alias("requeued_attempts"),
        total("gs_us", requeued, 1e6).alias("requeued_gpu_seconds"),
        total("usd_n", requeued, 1e9).alias("requeued_cost_usd"),
    )
    return ensure_columns(out, WASTE_SCHEMA)


def _frame(frames: dict[str, pl.LazyFrame], name: str, schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    """An optional input (a caller that passes only the jobs and node states gets empty telemetry)."""
    return frames[name] if name in frames else pl.LazyFrame(schema=schema)


def _optional(frame: pl.LazyFrame | None, schema: dict[str, pl.DataType]) -> pl.LazyFrame:
    return pl.LazyFrame(schema=schema) if frame is None else frame


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    # Capacity feeds its mart and the spread of every daily row; the daily rows feed four marts: cached, so
    # the one collect computes each once (without, the spread made the cost pipeline ~10x slower).
    intervals = gpu_intervals(frames["node_states"], params).cache()
    cap = capacity(frames["node_states"], params, intervals).cache()
    pools = unallocated_pools(cap)
    res_schema = {"name": pl.String, "start_time": UTC_DT, "end_time": UTC_DT}
    res_schema |= {"node_list": pl.String, "accounts": pl.String}
    res = reservation_daily(
        frames["node_states"], _frame(frames, "reservations", res_schema), cap, params
    ).cache()
    weights = billing_weights(params.billing, frames.get("partition_weights"))
    d = spread_daily(daily(frames["jobs"], params, weights), pools, params, res).cache()
    cols = ("day", "account", "user", "partition", "gpu_model", "gpu_seconds", "cost_usd", "gpu_cost_usd")
    floats = {"gpu_seconds": pl.Float64, "cost_usd": pl.Float64, "gpu_cost_usd": pl.Float64}
    before = _frame(
        frames,
        "month_before",
        {
            "day": pl.Date,
            "account": pl.String,
            "user": pl.String,
            "gpu_seconds": pl.Float64,
            "cost_usd": pl.Float64,
        },
    )
    month_days = pl.concat(
        [_month_rows(before).select(*cols).cast(floats), _month_rows(d).select(*cols).cast(floats)],
        how="vertical",
    ).cache()
    cap_costs = {"capacity_cost_usd": pl.Float64, "allocated_cost_usd": pl.Float64}
    pools_before = _frame(frames, "capacity_month_before", {**dict(POOL_COLUMNS), **cap_costs})
    month_pools = pl.concat(
        [ensure_columns(pools_before, dict(POOL_COLUMNS)), ensure_columns(pools, dict(POOL_COLUMNS))],
        how="vertical",
    ).cache()
    prev_unallocated = _frame(frames, "prev_unallocated", UNALLOCATED_SCHEMA)
    res_before = ensure_columns(
        _frame(frames, "reservation_month_before", RESERVATION_SCHEMA), RESERVATION_SCHEMA
    )
    month_res = pl.concat([res_before, res], how="vertical").cache()
    invoices = monthly(month_days, frames["prev_monthly"], params, month_pools, month_res).cache()
    gpu_jobs = _frame(
        frames,
        "gpu_jobs",
        {
            "node": pl.String,
            "gpu_uuid": pl.String,
            "job_id": pl.String,
            "interval_start": UTC_DT,
            "interval_end": UTC_DT,
        },
    )
    samples = with_columns_of(  # an older caller's frame may lack the GPM columns: GPU_UTIL then
        frames.get("gpu_samples"),
        {
            "node": pl.String,
            "gpu_uuid": pl.String,
            "minute": UTC_DT,
            "util_gpu_mean": pl.Float64,
            "energy_joules": pl.Float64,
            "power_mean_watts": pl.Float64,
            "sm_active_mean": pl.Float64,
            "activity_source": pl.String,
        },
    )
    unallocated = unallocated_monthly(
        month_days, month_pools, prev_unallocated, frames["prev_monthly"], params, month_res
    ).cache()
    recon = reconciliation_daily(frames["node_states"], frames["jobs"], d, params, intervals).cache()
    recon_before = _frame(frames, "reconciliation_month_before", RECONCILIATION_DAILY_SCHEMA)
    month_recon = pl.concat(
        [ensure_columns(recon_before, RECONCILIATION_DAILY_SCHEMA), recon], how="vertical"
    )
    month_capacity = pl.concat(
        [
            ensure_columns(pools_before, {"day": pl.Date, **cap_costs}),
            ensure_columns(cap, {"day": pl.Date, **cap_costs}),
        ],
        how="vertical",
    )
    return {
        "mart_cost_daily": ensure_columns(d, DAILY_SCHEMA),
        "mart_capacity_daily": cap,
        "mart_cost_monthly": invoices,
        "mart_budget_monthly": budgets(invoices, params),
        "mart_budget_period": budget_periods(frames, invoices, d, params),
        "mart_cost_unallocated_monthly": unallocated,
        "mart_cost_reservation_daily": res,
        "mart_usage_counters": counters(d, frames["daily_before"], frames["prev_counters"], params),
        "mart_cost_efficiency_daily": cost_efficiency(
            d,
            frames["jobs"],
            gpu_jobs,
            samples,
            params,
            _frame(frames, "mig_inventory", dict(MIG_INVENTORY_COLUMNS)),
        ),
        "mart_cost_rates_daily": rates_daily(cap, d, params),
        "mart_cost_reconciliation_daily": recon,
        "mart_cost_reconciliation_monthly": reconciliation_monthly(
            month_recon, invoices, unallocated, month_capacity, params
        ),
        "mart_cost_waste_daily": waste_daily(frames["jobs"], params, weights),
    }
