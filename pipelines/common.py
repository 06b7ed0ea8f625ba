"""Pure building blocks the pipelines share: calendar splitting, GPU-seconds, percentiles, rounding.

Billing and reporting cut time into days and months of one configured zone; a job is charged by the overlap
of [start, end or now) with each of them. Doing that once here keeps every mart's days identical, so daily,
monthly and capacity rows reconcile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, day_start, local_day
from slurmscope.pipelines.params import Billing, Params

from slurmscope import mig
from slurmscope.config import RATE_FIELDS, ConfigError
from slurmscope.slurm_states import (
    NODE_GPUS_DOWN_FLAGS,
    NODE_GPUS_DOWN_STATES,
    NODE_GPUS_POWERED_DOWN_FLAGS,
    NODE_GPUS_RESERVED_FLAGS,
    NODE_GPUS_RESERVED_STATES,
)

HOURS_PER_YEAR = 8766.0  # 365.25 days


def split_calendar(
    lf: pl.LazyFrame, start: str, end: str, tz: str, *, every: str = "1d", out: str = "day"
) -> pl.LazyFrame:
    """One row per (input row, calendar period of `tz` it overlaps), with `out` (the period's first Date)
    and `overlap_seconds` (Float64).

    Intervals are half-open [start, end); rows with end <= start or a null bound give no rows.
    `every` is '1d' (days) or '1mo' (months). Most jobs fit in one period: those skip the explode and the
    period-bound join, which is where the time goes on millions of rows.
    """
    s, e = pl.col(start), pl.col(end)
    lf = lf.filter(s.is_not_null() & e.is_not_null() & (e > s))
    first = local_day(s, tz)
    last = local_day(e - pl.duration(microseconds=1), tz)
    if every == "1mo":
        first, last = first.dt.month_start(), last.dt.month_start()
    elif every != "1d":
        raise ValueError(f"every must be '1d' or '1mo', got {every!r}")
    lf = lf.with_columns(first.alias(out), last.alias("_last"))
    secs = (e - s).dt.total_microseconds() / 1e6
    single = lf.filter(pl.col(out) == pl.col("_last")).with_columns(secs.alias("overlap_seconds"))
    multi = (
        lf.filter(pl.col(out) != pl.col("_last"))
        .with_columns(pl.date_ranges(pl.col(out), pl.col("_last"), every).alias(out))
        .explode(out)
    )
    # Period bounds once per distinct period, then joined: time-zone arithmetic per row is slow.
    bounds = multi.select(pl.col(out).unique()).with_columns(
        day_start(pl.col(out), tz).alias("_period_start"),
        day_start(pl.col(out).dt.offset_by(every), tz).alias("_period_end"),
    )
    multi = multi.join(bounds, on=out, how="left")
    overlap = pl.min_horizontal(e, pl.col("_period_end")) - pl.max_horizontal(s, pl.col("_period_start"))
    multi = (
        multi.with_columns((overlap.dt.total_microseconds() / 1e6).alias("overlap_seconds"))
        .filter(pl.col("overlap_seconds") > 0)
        .drop("_period_start", "_period_end")
    )
    return pl.concat([single, multi], how="vertical").drop("_last")


def split_buckets(
    lf: pl.LazyFrame, start: str, end: str, every_seconds: int, *, out: str = "bucket_start"
) -> pl.LazyFrame:
    """One row per (row, fixed UTC bucket it overlaps) with `out` and `overlap_seconds` (half-open)."""
    s, e = pl.col(start), pl.col(end)
    lf = lf.filter(s.is_not_null() & e.is_not_null() & (e > s))
    every = f"{int(every_seconds)}s"
    lf = lf.with_columns(
        pl.datetime_ranges(
            s.dt.truncate(every), (e - pl.duration(microseconds=1)).dt.truncate(every), every
        ).alias(out)
    ).explode(out)
    bucket_end = pl.col(out) + pl.duration(seconds=int(every_seconds))
    overlap = pl.min_horizontal(e, bucket_end) - pl.max_horizontal(s, pl.col(out))
    return lf.with_columns((overlap.dt.total_microseconds() / 1e6).alias("overlap_seconds"))


def gpu_key(*columns: str) -> pl.Expr:
    """The GPU named by `columns` (node and UUID, with the cluster where frames mix them) as one categorical:
    joins and sorts of a fleet's minutes on it cost a third less than on the strings (docs/benchmarks.md,
    fleet). Categories are global, so the keys of two frames match."""
    return pl.concat_str(list(columns), separator="\x1f").cast(pl.Categorical)


def with_samples(minutes: pl.LazyFrame, samples: pl.LazyFrame, gpu: tuple[str, ...]) -> pl.LazyFrame:
    """`minutes` left-joined to the NVML `samples` of the same GPU (the `gpu` columns) and `minute`, on one
    `gpu_key`: the held minutes of a fleet's window are millions of rows on either side."""
    key = gpu_key(*gpu).alias("_gpu")
    return (
        minutes.with_columns(key)
        .join(samples.with_columns(key).drop(*gpu), on=["_gpu", "minute"], how="left")
        .drop("_gpu")
    )


def clip_interval(start: str, end: str, lo: datetime, hi: datetime) -> list[pl.Expr]:
    """[start, end) clipped to [lo, hi); a null end means still running, i.e. up to `hi` (= now)."""
    lo_l, hi_l = pl.lit(lo, dtype=UTC_DT), pl.lit(hi, dtype=UTC_DT)
    return [
        pl.max_horizontal(pl.col(start), lo_l).alias(start),
        pl.min_horizontal(pl.col(end).fill_null(hi_l), hi_l).alias(end),
    ]


def usage_interval(now: datetime) -> list[pl.Expr]:
    """`use_start`/`use_end`/`running` of a job attempt: [start, end) or [start, now) while it runs.

    An attempt whose end is after `now` (a record from the future relative to a replayed `now`) is cut at now.
    """
    now_l = pl.lit(now, dtype=UTC_DT)
    return [
        pl.col("start_time").alias("use_start"),
        pl.min_horizontal(pl.col("end_time").fill_null(now_l), now_l).alias("use_end"),
        (pl.col("end_time").is_null() | (pl.col("end_time") > now_l)).alias("running"),
    ]


def with_requeued(jobs: pl.LazyFrame) -> pl.LazyFrame:
    """Add `requeued`: another attempt of the same job_id_raw was submitted after this one.

    Only a few per cent of jobs have several attempts, so they are found with a group-by and joined back
    (a window over every job is several times slower on millions of rows).
    """
    last = (
        jobs.group_by("job_id_raw")
        .agg(pl.len().alias("_n"), pl.col("submit_time").max().alias("_last"))
        .filter(pl.col("_n") > 1)
        .drop("_n")
    )
    return (
        jobs.join(last, on="job_id_raw", how="left")
        .with_columns((pl.col("submit_time") < pl.col("_last")).fill_null(False).alias("requeued"))
        .drop("_last")
    )


def multi_attempt(jobs: pl.LazyFrame) -> pl.LazyFrame:
    """The attempts of the jobs with several, the only ones with_requeued can flag (a few per cent of them).

    Repeated ids are found on the sorted id column: attempts are read in the table's id order, which makes
    that sort nearly free (any order gives the same result); it costs half a hash-based is_duplicated.
    """
    ids = jobs.select(pl.col("job_id_raw").sort())
    repeated = ids.filter(pl.col("job_id_raw") == pl.col("job_id_raw").shift(1)).unique()
    return jobs.join(repeated, on="job_id_raw", how="semi")


MATCH_TOLERANCE = "1h"
"""A mapping interval belongs to the attempt of its job whose Start is nearest, within this tolerance."""


def mapped_job_id_raw(job_id: pl.Expr) -> pl.Expr:
    """The sacct JobIDRaw a gpu_jobs.job_id (SLURM_JOB_ID) belongs to: its leading digits (the jobs INPUT's
    semi-join extracts the same)."""
    return job_id.str.extract(r"^(\d+)").cast(pl.Int64)


def attribute_intervals(gpu_jobs: pl.LazyFrame, jobs: pl.LazyFrame, now: datetime) -> pl.LazyFrame:
    """Each whole-GPU mapping interval with the job attempt it belongs to.

    gpu_jobs.job_id is SLURM_JOB_ID (= sacct JobIDRaw); a requeued job has one attempt per Start, so the
    interval goes to the attempt whose Start is nearest its own start. An open interval ends at the
    attempt's End, else at `now`.
    """
    now_lit = pl.lit(now, dtype=UTC_DT)
    g = gpu_jobs.with_columns(job_id_raw=mapped_job_id_raw(pl.col("job_id"))).drop("job_id")
    j = jobs.select(
        "cluster",
        "job_id_raw",
        "job_id",
        "attempt",
        "submit_time",
        "start_time",
        "end_time",
        "account",
        "user",
        pl.col("gpus").alias("alloc_gpus"),
    )
    out = g.sort("interval_start").join_asof(
        j.sort("start_time"),
        left_on="interval_start",
        right_on="start_time",
        by=["cluster", "job_id_raw"],
        strategy="nearest",
        tolerance=MATCH_TOLERANCE,
        check_sortedness=False,
    )
    end = pl.coalesce("interval_end", "end_time", now_lit)
    return out.with_columns(interval_end=pl.min_horizontal(end, now_lit)).filter(
        pl.col("interval_end") > pl.col("interval_start")
    )


def activity() -> pl.Expr:
    """A GPU minute's activity in percent: its GPM SM activity where the agent read GPM (activity_source 'gpm':
    the share of SMs busy, dcgm-exporter's SM-active field), else its GPU_UTIL (NVML utilisation.gpu, which says
    only that some kernel ran: a memory-bound or NCCL-waiting job reads near 100 %). Null when neither was read."""
    return (
        pl.when(pl.col("activity_source") == "gpm")
        .then(pl.col("sm_active_mean"))
        .otherwise(pl.col("util_gpu_mean"))
    )


def activity_sources(gpm_seconds: pl.Expr, sampled_seconds: pl.Expr) -> pl.Expr:
    """Where a row's activity came from: 'gpm', 'gpu_util' or 'mixed' (some of each), null when unsampled."""
    return (
        pl.when(sampled_seconds <= 0)
        .then(pl.lit(None, dtype=pl.String))
        .when(gpm_seconds >= sampled_seconds)
        .then(pl.lit("gpm"))
        .when(gpm_seconds <= 0)
        .then(pl.lit("gpu_util"))
        .otherwise(pl.lit("mixed"))
    )


def gpu_seconds(overlap: str = "overlap_seconds", gpus: str = "gpus") -> pl.Expr:
    """GPU-seconds: overlap × whole GPUs (MIG slices are not whole GPUs; a null count is 0)."""
    return pl.col(overlap) * pl.col(gpus).fill_null(0).cast(pl.Float64)


def percentile(col: str, q: float) -> pl.Expr:
    """Linear-interpolation percentile (numpy's default, 'type 7'): p50 of [1, 2, 3, 10] is 2.5."""
    return pl.col(col).quantile(q, interpolation="linear")


def gpu_class(gpus: pl.Expr) -> pl.Expr:
    """GPU-count class used by wait-time marts: '0', '1', '2-4', '5-8', '9-16', '17+'."""
    g = gpus.fill_null(0)
    return (
        pl.when(g <= 0)
        .then(pl.lit("0"))
        .when(g == 1)
        .then(pl.lit("1"))
        .when(g <= 4)
        .then(pl.lit("2-4"))
        .when(g <= 8)
        .then(pl.lit("5-8"))
        .when(g <= 16)
        .then(pl.lit("9-16"))
        .otherwise(pl.lit("17+"))
    )


def largest_remainder_cents(
    lf: pl.LazyFrame, amount: str, by: Sequence[str], order: Sequence[str], *, out: str = "cents"
) -> pl.LazyFrame:
    """Round `amount` (dollars) to integer cents so that, within each `by` group, the rows sum to the
    group total rounded half-up to cents (Hamilton / largest-remainder method).

    Each row gets floor(cents); the cents left over go one each to the rows with the largest fractional
    parts, ties broken by `order` (ascending) so the result is deterministic.
    """
    raw = (pl.col(amount) * 100).round(6)
    by = list(by)
    lf = lf.with_columns(raw.floor().cast(pl.Int64).alias("_floor"), (raw - raw.floor()).alias("_frac"))
    grp = by if by else None
    total = (pl.col(amount).sum() * 100).round(6)
    total_cents = (total + 0.5).floor().cast(pl.Int64)
    leftover = total_cents - pl.col("_floor").sum()
    if grp:
        leftover = leftover.over(grp)
    lf = lf.with_columns(leftover.alias("_left"))
    lf = lf.sort([*by, "_frac", *order], descending=[False] * len(by) + [True] + [False] * len(order))
    rank = pl.int_range(pl.len()) if not grp else pl.int_range(pl.len()).over(grp)
    lf = lf.with_columns(rank.alias("_rank"))
    return lf.with_columns(
        (pl.col("_floor") + (pl.col("_rank") < pl.col("_left")).cast(pl.Int64)).alias(out)
    ).drop("_floor", "_frac", "_left", "_rank")


def largest_remainder(values: Sequence[float], total_cents: int | None = None) -> list[int]:
    """Scalar largest remainder for a handful of values (capacity components); ties go to the earlier one."""
    raws = [round(v * 100, 6) for v in values]
    floors = [int(r // 1) for r in raws]
    if total_cents is None:
        total_cents = int((round(sum(raws), 6) + 0.5) // 1)
    left = total_cents - sum(floors)
    order = sorted(range(len(values)), key=lambda i: (-(raws[i] - floors[i]), i))
    out = list(floors)
    for i in order[: max(left, 0)]:
        out[i] += 1
    return out


# --- price book ---------------------------------------------------------------------------------------


def hourly_rate(entry: Any, *, where: str = "billing.rates") -> float:
    """$/GPU-hour of a price-book entry: a number, {rate = x}, or an amortised cost.

    Amortised: purchase_usd / (lifetime_years × 8766 h) / gpus_per_unit + power_kw × usd_per_kwh × pue
    / gpus_per_unit + overhead_usd_per_year / 8766 / gpus_per_unit; power is the unit's draw.
    """
    if isinstance(entry, (int, float)) and not isinstance(entry, bool):
        return float(entry)
    if isinstance(entry, Mapping):
        if "rate" in entry:
            return float(entry["rate"])

        def field(key: str) -> float:
            return float(entry.get(key, RATE_FIELDS[key].default))

        unit = field("gpus_per_unit") or 1.0
        lifetime = field("lifetime_years")
        capex = field("purchase_usd") / (lifetime * HOURS_PER_YEAR) if lifetime > 0 else 0.0
        power = field("power_kw") * field("usd_per_kwh") * field("pue")
        overhead = field("overhead_usd_per_year") / HOURS_PER_YEAR
        return (capex + power + overhead) / unit
    raise ValueError(f"{where}: expected a number or a table, got {entry!r}")


def price_book(billing: Billing) -> tuple[dict[str, float], dict[str, float], float | None]:
    """(rate by lower-case GPU model, rate by partition, default rate or None) from the billing section.

    Keys of `billing.rates` are GPU models, `partition:<name>` for a partition rate (which wins), or
    `default` for every model without an entry of its own.
    """
    models: dict[str, float] = {}
    parts: dict[str, float] = {}
    for key, entry in billing.rates.items():
        rate = hourly_rate(entry, where=f"billing.rates.{key}")
        if key.startswith("partition:"):
            parts[key.split(":", 1)[1]] = rate
        else:
            models[key.lower()] = rate
    return models, parts, models.pop("default", None)


def with_rate(
    lf: pl.LazyFrame,
    billing: Billing,
    *,
    model: str = "gpu_model",
    partition: str = "partition",
    out: str = "rate_per_gpu_hour",
) -> pl.LazyFrame:
    """Attach the $/GPU-hour: partition rate, else GPU model rate, else the default.

    Without `billing.rates.default`, a row none of them prices fails the collect with a ConfigError naming
    the models: a GPU model missing from the price book must not be charged nothing.
    """
    models, parts, default = price_book(billing)
    model_rate = (
        pl.col(model).str.to_lowercase().replace_strict(models, default=None, return_dtype=pl.Float64)
    )
    part_rate = pl.col(partition).replace_strict(parts, default=None, return_dtype=pl.Float64)
    rate = pl.coalesce(part_rate, model_rate, pl.lit(default, dtype=pl.Float64))
    if default is None:
        rate = pl.struct(pl.col(model).alias("model"), rate.alias("rate")).map_batches(
            _priced, return_dtype=pl.Float64
        )
    return lf.with_columns(rate.alias(out))


def _priced(rows: pl.Series) -> pl.Series:
    frame = rows.struct.unnest()
    missing = frame.filter(pl.col("rate").is_null())["model"].unique().to_list()
    if missing:
        names = ", ".join(sorted(m or "(untyped gres/gpu)" for m in missing))
        keys = ", ".join(sorted(f"billing.rates.{m.lower()}" for m in missing if m))
        add = f"{keys} (or billing.rates.default)" if keys else "billing.rates.default"
        raise ConfigError(f"no rate for GPU model(s) {names} seen in the data: add {add} to the config file")
    return frame["rate"]


# --- node states ---------------------------------------------------------------------------------------


NODE_STATES_SQL = """
    SELECT s.snapshot_time, s.node, p."partition", s.state, s.state_flags, s.gpus_total, s.gpus_used, s.gpu_type,
           CASE WHEN regexp_matches(s.gres, '{MIG}', 'i') THEN s.gres END AS mig_gres,
           CASE WHEN regexp_matches(s.gres, '{MIG}', 'i') THEN s.gres_used END AS mig_gres_used
    FROM node_states s JOIN (
        SELECT node, string_agg("partition", ',' ORDER BY "partition") AS "partition",
               min("partition") AS first_partition
        FROM (SELECT DISTINCT node, "partition" FROM node_states WHERE cluster = $cluster) GROUP BY node
    ) p ON s.node = p.node AND s."partition" = p.first_partition
    WHERE s.cluster = $cluster AND s.snapshot_time >= $start - INTERVAL 1 DAY AND s.snapshot_time < $end""".replace(
    "{MIG}", mig.SQL_PREFILTER
)
"""sinfo snapshots one row per node (DuckDB does the de-duplication of multi-partition nodes much faster), with
the GRES strings of the nodes that have MIG slices (mig_node_states reads them)."""


def node_intervals(node_states: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """One row per node per sinfo snapshot, standing until the next snapshot (at most the max gap, or now),
    with GPUs split into allocated / down / reserved / idle.

    Rows may repeat a node per partition (sinfo -N) or come one per node with the partitions already
    joined (NODE_STATES_SQL); both give the same intervals."""
    gap = int(params.pipelines.node_snapshot_max_gap_seconds)
    now_l = pl.lit(params.now, dtype=UTC_DT)
    # A node listed in several partitions (sinfo -N repeats it) is one node: its partitions are joined
    # by ',' (membership taken over the frame, since it changes rarely), its GPUs counted once.
    parts = node_states.group_by("node").agg(
        pl.col("partition")
        .str.split(",")
        .list.explode(keep_nulls=False, empty_as_null=False)
        .unique()
        .sort()
        .str.join(",")
        .alias("partition")
    )
    snaps = (
        node_states.sort("snapshot_time", "node")
        .filter(
            (pl.col("node") != pl.col("node").shift(1))
            | (pl.col("snapshot_time") != pl.col("snapshot_time").shift(1))
            | pl.col("node").shift(1).is_null()
        )
        .select(
            "snapshot_time",
            "node",
            pl.col("state").fill_null("").str.to_uppercase().alias("state"),
            pl.col("state_flags").fill_null("").str.to_uppercase().alias("flags"),
            pl.col("gpus_total").fill_null(0).alias("total"),
            pl.col("gpus_used").fill_null(0).alias("used"),
            pl.col("gpu_type").fill_null("").alias("gpu_model"),
        )
        .join(parts, on="node", how="left")
    )
    nxt = pl.col("snapshot_time").shift(-1).over("node", order_by="snapshot_time")
    end = pl.min_horizontal(nxt.fill_null(now_l), pl.col("snapshot_time") + pl.duration(seconds=gap), now_l)
    flags = pl.col("flags")
    down = pl.col("state").is_in(NODE_GPUS_DOWN_STATES) | flags.str.contains("|".join(NODE_GPUS_DOWN_FLAGS))
    reserved = pl.col("state").is_in(NODE_GPUS_RESERVED_STATES) | flags.str.contains(
        "|".join(NODE_GPUS_RESERVED_FLAGS)
    )
    off = flags.str.contains("|".join(NODE_GPUS_POWERED_DOWN_FLAGS))
    alloc = pl.min_horizontal(pl.col("used"), pl.col("total"))
    rest = pl.col("total") - alloc
    return snaps.with_columns(end.alias("until")).with_columns(
        alloc.alias("allocated"),
        pl.when(down).then(rest).otherwise(0).alias("down"),
        pl.when(~down & reserved).then(rest).otherwise(0).alias("reserved"),
        pl.when(down | reserved).then(0).otherwise(rest).alias("idle"),
        # The part of `idle` on a powered-off node (NODE_GPUS_POWERED_DOWN_FLAGS): not capacity to cost.
        pl.when(down | reserved | ~off).then(0).otherwise(rest).alias("powered_down"),
    )


# --- MIG slices ---------------------------------------------------------------------------------------

MIG_DTYPE = pl.List(
    pl.Struct({"mig_model": pl.String, "mig_type": pl.String, "mig_units": pl.Int64, "mig_count": pl.Int64})
)
MIG_UNITS = mig.units_per_gpu()
"""A MIG slice counts as a fraction of a GPU (slurmscope.mig); counts of slices are kept in 1/MIG_UNITS of a GPU
(units), so that they sum exactly, as whole-GPU counts do."""


def mig_holdings(column: str, models: Mapping[str, str]) -> pl.Expr:
    """Per row, the MIG slices the TRES or GRES string in `column` lists, as [{mig_model, mig_type, mig_units,
    mig_count}] per MIG type (slurmscope.mig.holdings; billing.mig_models names the model of a type that
    names none; units of 1/MIG_UNITS GPU; devices); null
    where it lists none. A type whose GPU's slice count cannot be told fails the collect with a ConfigError
    that names the billing.mig_models key to add: a slice must not be counted as nothing."""

    def parse(texts: pl.Series) -> pl.Series:
        seen: dict[str, list[dict[str, Any]] | None] = {}
        unresolved: set[str] = set()
        out = []
        for text in texts.to_list():
            if text is None:
                out.append(None)
                continue
            if text not in seen:
                found = mig.holdings(text, models, unresolved)
                seen[text] = [
                    {"mig_model": m, "mig_type": t, "mig_units": u, "mig_count": n} for m, t, u, n in found
                ] or None
            out.append(seen[text])
        if unresolved:
            raise ConfigError(mig.unresolved_message(unresolved))
        return pl.Series(texts.name, out, dtype=MIG_DTYPE)

    return pl.col(column).map_batches(parse, return_dtype=MIG_DTYPE, is_elementwise=True)


def exploded_mig(frame: pl.LazyFrame, column: str, models: Mapping[str, str]) -> pl.LazyFrame:
    """`frame`'s rows whose `column` lists MIG slices, one per (row, MIG type), with mig_model, mig_type,
    mig_units and mig_count."""
    return (
        frame.filter(pl.col(column).is_not_null())
        .with_columns(mig_holdings(column, models).alias("_mig"))
        .filter(pl.col("_mig").is_not_null())
        .explode("_mig")
        .unnest("_mig")
    )


MIG_NODE_SEP = "\x00"


def mig_node_states(node_states: pl.LazyFrame, models: Mapping[str, str]) -> pl.LazyFrame:
    """The MIG slices of NODE_STATES_SQL rows as node states node_intervals reads: one pseudo-node
    (the node's name, MIG_NODE_SEP, the GPU model) per node and model of its slices, gpus_total and gpus_used in units (Gres and
    GresUsed of sinfo), gpu_type the model. Every snapshot of such a node gets a row (0 when the node had no
    slices of that model then), so that an interval ends when the node's slices go, not at the next gap."""
    names = node_states.collect_schema().names()
    if "mig_gres" not in names:
        return node_states.filter(pl.lit(False))
    key = ["snapshot_time", "node", "mig_model"]
    node_states = node_states.join(
        node_states.filter(pl.col("mig_gres").is_not_null()).select("node").unique(), on="node", how="semi"
    )
    total = (
        exploded_mig(node_states.select("snapshot_time", "node", "mig_gres"), "mig_gres", models)
        .group_by(key)
        .agg(pl.col("mig_units").sum())
    )
    used = (
        exploded_mig(node_states.select("snapshot_time", "node", "mig_gres_used"), "mig_gres_used", models)
        .group_by(key)
        .agg(pl.col("mig_units").sum().alias("_used"))
    )
    seen = total.select("node", "mig_model").unique()
    rows = (
        node_states.drop("gpus_total", "gpus_used", "gpu_type", "mig_gres", "mig_gres_used")
        .join(seen, on="node")
        .join(total.select(*key, "mig_units"), on=key, how="left")
        .join(used, on=key, how="left")
    )
    return rows.select(
        (pl.col("node") + MIG_NODE_SEP + pl.col("mig_model")).alias("node"),
        *[
            c
            for c in names
            if c not in ("node", "gpus_total", "gpus_used", "gpu_type", "mig_gres", "mig_gres_used")
        ],
        pl.col("mig_units").fill_null(0).alias("gpus_total"),
        pl.col("_used").fill_null(0).alias("gpus_used"),
        pl.col("mig_model").alias("gpu_type"),
    )


MIG_INVENTORY_SQL = """
    SELECT node, gpu_uuid AS mig_instance, arg_max(model, seen_at) AS device_name FROM gpu_inventory
    WHERE cluster = $cluster AND model LIKE '% MIG%' GROUP BY node, gpu_uuid"""
"""The MIG devices the agents reported (their own inventory rows) with their latest NVML name."""

MIG_INVENTORY_COLUMNS = (("node", pl.String), ("mig_instance", pl.String), ("device_name", pl.String))
"""MIG_INVENTORY_SQL's columns (pairs, not a schema dict: no table has them)."""
_NVML_SLICE = pl.Struct({"gpu_model": pl.String, "mig_profile": pl.String, "nvml_fraction": pl.Float64})


def _nvml_slices(names: pl.Series) -> pl.Series:
    out = []
    for name in names.to_list():
        found = mig.nvml_slice(name)
        profile = mig.parse_type(name.rpartition(" MIG")[2].strip()) if name else None
        out.append(
            {
                "gpu_model": found[0] if found else (name.partition(" MIG")[0] if name else None),
                "mig_profile": profile.profile if profile else None,
                "nvml_fraction": float(found[1]) if found else None,
            }
        )
    return pl.Series(names.name, out, dtype=_NVML_SLICE)


def with_slice_fractions(
    iv: pl.LazyFrame,
    inventory: pl.LazyFrame,
    sacct_units: pl.LazyFrame,
    instances: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """Attributed mapping intervals (attribute_intervals; `mig_instance` '' for a whole GPU) with the share
    of a GPU each holds: `gpu_fraction` 1 for a whole GPU; for a MIG instance, the compute slices of its
    profile over its GPU's (slurmscope.mig.nvml_slice of the instance's NVML name in gpu_inventory,
    `fraction_source` 'nvml'), else the attempt's MIG GPUs from sacct (`sacct_units`: job_id_raw, submit_time,
    mig_units) over the instances it held ('sacct'), else NULL ('unknown': no share is made up);
    `gpu_model` and `mig_profile` from the NVML name. The instances held are counted in `instances` (the
    attributed intervals of every node) where `iv` holds only some nodes', else in `iv`."""
    keys = ["job_id_raw", "submit_time"]
    slice_ = pl.col("mig_instance") != ""
    inv = inventory.select(
        "node",
        "mig_instance",
        pl.col("device_name").map_batches(_nvml_slices, return_dtype=_NVML_SLICE).alias("_n"),
    ).unnest("_n")
    held = (
        (iv if instances is None else instances)
        .filter(slice_)
        .group_by(keys)
        .agg(pl.col("mig_instance").n_unique().alias("_n"))
        .join(sacct_units, on=keys)
        .select(*keys, (pl.col("mig_units") / MIG_UNITS / pl.col("_n")).alias("_sacct"))
    )
    out = iv.join(inv, on=["node", "mig_instance"], how="left").join(held, on=keys, how="left")
    return out.with_columns(
        pl.when(~slice_).then(1.0).otherwise(pl.coalesce("nvml_fraction", "_sacct")).alias("gpu_fraction"),
        pl.when(~slice_)
        .then(None)
        .when(pl.col("nvml_fraction").is_not_null())
        .then(pl.lit("nvml"))
        .when(pl.col("_sacct").is_not_null())
        .then(pl.lit("sacct"))
        .otherwise(pl.lit("unknown"))
        .alias("fraction_source"),
    ).drop("nvml_fraction", "_sacct")


# --- small helpers ------------------------------------------------------------------------------------


def empty(schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    return pl.LazyFrame(schema=dict(schema))


def ensure_columns(lf: pl.LazyFrame, schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """Select exactly `schema`'s columns in order, cast, so outputs match the mart tables."""
    return lf.select([pl.col(c).cast(t) for c, t in schema.items()])


def names(items: Iterable[str]) -> list[str]:
    return sorted(set(items))


def with_columns_of(frame: pl.LazyFrame | None, schema: Mapping[str, pl.DataType]) -> pl.LazyFrame:
    """`frame` with any column of `schema` it lacks added as nulls and its timestamps in UTC (an empty frame
    when it is None), so that a database without some source still computes."""
    if frame is None:
        return empty(schema)
    have = frame.collect_schema()
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in schema.items() if name not in have]
    return frame.with_columns(*missing, *to_utc(have)) if missing or to_utc(have) else frame


def to_utc(schema: Mapping[str, pl.DataType]) -> list[pl.Expr]:
    """Timestamps in the one zone the pipelines compare them in (a DuckDB session in another zone, or
    'Etc/UTC', would otherwise fail every comparison with a UTC literal)."""
    out = []
    for name, dtype in schema.items():
        if isinstance(dtype, pl.Datetime) and dtype.time_zone != "UTC":
            col = pl.col(name).cast(pl.Datetime("us", dtype.time_zone))
            col = (
                col.dt.replace_time_zone("UTC")
                if dtype.time_zone is None
                else col.dt.convert_time_zone("UTC")
            )
            out.append(col.alias(name))
    return out
