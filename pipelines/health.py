"""One health verdict per node and per GPU: ok, degraded or failing, with the reason.

Operators have the pieces on separate panels (Slurm state and reason, XIDs, ECC, row remaps, throttling,
GRES vs NVML GPU counts) and want one answer per node: can it run work, and if not, why. The verdict is
evaluated at every sinfo snapshot and at every NVML event, new-ECC minute and inventory in between, from the
sinfo snapshot in force, the latest NVML minute of each GPU at or before the instant, the NVML/kernel events
of the preceding window and the latest NVML inventory. The marts keep one row per unbroken run of an unchanged verdict (since, last_seen,
valid_until), so a year of minute-by-minute sinfo snapshots of a large cluster stays small. A run can last
months, longer than any incremental window: the marts are windowed on `valid_until`, and a window's runs
continue the stored runs they extend (`stitch`), so an incremental run writes what a full rebuild would. The
rules, their order and their thresholds (config section `health`) are in docs/pipelines.md#health.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

import polars as pl
from slurmscope.pipelines.common import UTC_DT, ensure_columns, gpu_key, with_columns_of
from slurmscope.pipelines.params import HEALTH_LOOKBACK_SECONDS, Health, Params

from slurmscope import xid as xids
from slurmscope.slurm_states import (
    NODE_HEALTH_DOWN_FLAGS,
    NODE_HEALTH_DOWN_STATES,
    NODE_HEALTH_DRAIN_FLAGS,
    NODE_HEALTH_DRAIN_STATES,
    NODE_HEALTH_UNAVAILABLE_FLAGS,
    NODE_HEALTH_UNAVAILABLE_STATES,
)

NAME = "health"

# A stored run with valid_until < start ended more than a gap before the window, so nothing the window sees
# can extend it: it is kept. The runs the runner deletes (valid_until >= start) are rebuilt, those that
# began before the window from their stored row (the *_seeds inputs).
MART_TABLES: dict[str, str | None] = {
    "mart_node_health": "valid_until",
    "mart_gpu_health": "valid_until",
}

# The marts are runs of instants windowed on valid_until, and any instant is judged alike (the runs that began
# before the window continue from their stored rows): an incremental run judges from where the last one left
# off, not from its billing day's midnight, which would judge most of a day twice.
WHOLE_DAYS = False

LOOKBACK = "INTERVAL 1 DAY"
MAX_LOOKBACK_SECONDS = HEALTH_LOOKBACK_SECONDS
"""Events and samples are read this far before the window: every time window of the rules is capped to it."""
WHOLE = "to_microseconds(CAST($health_whole_us AS BIGINT))"
SAMPLE_COLUMNS = """node, gpu_uuid, minute, gpu_index, model, temp_gpu_max_celsius, throttle_seconds,
               ecc_uncorrected_delta, ecc_uncorrected_total, remapped_pending, remapped_failed,
               remapped_uncorrectable, retired_pages_sbe, retired_pages_dbe, retired_pages_pending,
               nvlink_crc_flit_delta, nvlink_crc_data_delta, nvlink_replay_delta, nvlink_recovery_delta,
               pcie_replay_delta, pcie_link_gen, pcie_link_width, violation_board_limit_seconds,
               violation_reliability_seconds"""

# Unlike the window's half-open [start, end), the instant `end` itself (the run's `now`) is judged too: a sinfo
# snapshot taken at the very instant of the run is the newest state there is.
INPUTS: dict[str, str] = {
    # One row per node and snapshot (sinfo -N repeats a node per partition; the state is the node's). A node
    # listed in one partition only has one row per snapshot already (primary key): only the others are
    # aggregated, which on a year of snapshots costs a fraction of grouping them all. Each node's latest
    # snapshot before the window comes too: it is in force at the window's first instants (not judged itself).
    "nodes": """
        WITH s AS (
            SELECT snapshot_time, node, "partition", state, state_flags, reason, gpus_total FROM node_states
            WHERE cluster = $cluster AND snapshot_time >= $start AND snapshot_time <= $end
            UNION ALL
            SELECT n.snapshot_time, n.node, n."partition", n.state, n.state_flags, n.reason, n.gpus_total
            FROM node_states n JOIN (
                SELECT node, max(snapshot_time) AS snapshot_time FROM node_states
                WHERE cluster = $cluster AND snapshot_time < $start GROUP BY node) p USING (node, snapshot_time)
            WHERE n.cluster = $cluster),
        multi AS (SELECT node FROM s GROUP BY node HAVING min("partition") <> max("partition"))
        SELECT snapshot_time, node, state, state_flags, reason, gpus_total FROM s
        WHERE node NOT IN (SELECT node FROM multi)
        UNION ALL
        SELECT snapshot_time, node, max(state) AS state, max(state_flags) AS state_flags, max(reason) AS reason,
               max(gpus_total) AS gpus_total
        FROM s WHERE node IN (SELECT node FROM multi) GROUP BY snapshot_time, node""",
    # Every minute from shortly before the window (Health.whole_minutes_seconds: what events, throttling and
    # the latest sample read); from the rest of the look-back only the first and last minute of each unchanged
    # run of a GPU's uncorrectable remap count, and its last minute there. That keeps the remap window's
    # minimum and each GPU's last sample as they are, at a fraction of the minutes.
    "samples": f"""
        SELECT {SAMPLE_COLUMNS}
        FROM gpu_minutes($cluster, $start - {WHOLE}, $end + INTERVAL 1 MICROSECOND)
        WHERE $node_group
        UNION ALL
        SELECT {SAMPLE_COLUMNS} FROM (
            SELECT *, lag(remapped_uncorrectable) OVER w AS _before,
                   lead(remapped_uncorrectable) OVER w AS _after, lead(minute) OVER w AS _next
            FROM gpu_minutes($cluster, $start - {LOOKBACK}, $start - {WHOLE})
            WHERE $node_group
            WINDOW w AS (PARTITION BY node, gpu_uuid ORDER BY minute))
        WHERE _next IS NULL OR _before IS DISTINCT FROM remapped_uncorrectable
           OR _after IS DISTINCT FROM remapped_uncorrectable""",  # noqa: S608 - module constants; values are $parameters
    "events": f"""
        SELECT node, gpu_uuid, event_time, event_type, xid FROM gpu_events
        WHERE cluster = $cluster AND event_time >= $start - {LOOKBACK} AND event_time <= $end
          AND event_type IN ('xid', 'gpu_lost')""",  # noqa: S608 - LOOKBACK is a module constant; values are $parameters
    "inventory": """
        SELECT node, seen_at, count(DISTINCT gpu_uuid) AS gpus_visible FROM gpu_inventory
        WHERE cluster = $cluster AND seen_at <= $end GROUP BY node, seen_at""",
    # The stored runs the runner deletes that began before the window (empty on a full rebuild).
    "node_seeds": """
        SELECT since, last_seen, valid_until, node, status, reason, reasons, slurm_state, slurm_reason,
               gpus_configured, gpus_visible, gpus_failing, gpus_degraded
        FROM mart_node_health WHERE cluster = $cluster AND since < $start AND valid_until >= $start""",
    "gpu_seeds": """
        SELECT since, last_seen, valid_until, node, gpu_uuid, gpu_index, gpu_model, status, reason, reasons, detail
        FROM mart_gpu_health WHERE cluster = $cluster AND since < $start AND valid_until >= $start""",
}

ENGINE = "in-memory"
"""Polars' in-memory engine: on a day of 1,000 GPUs' minutes the streaming engine took 2.4x the CPU and 1.5x the
peak memory (its as-of joins and rolling windows fall back to it piecewise; docs/benchmarks.md#fleet)."""

BATCH_ROWS_SQL = f"""
    SELECT count(*) FROM gpu_minutes($cluster, $start - {WHOLE}, $end + INTERVAL 1 MICROSECOND)"""  # noqa: S608 - WHOLE is a module constant; values are $parameters
BATCH_ROWS = 1_000_000
"""NVML minutes judged at once: every rule is per node, so a fleet's window runs per group of nodes (about 1 GiB
of verdict grid per million minutes), which bounds memory by this rather than by the fleet's size."""

STATUSES = ("ok", "degraded", "failing")

# Reasons in the order they are reported: the first that holds is `reason`; all that hold are `reasons`.
# Failing reasons come first, so `reason` always explains `status`.
# An XID's reason names the action NVIDIA's catalogue (slurmscope/xid.py) gives it, most drastic first.
XID_FAILING = tuple(f"xid_{a}" for a in xids.FAILING_ACTIONS)
XID_DEGRADED = (f"xid_{xids.Action.INVESTIGATE}",)
GPU_FAILING = (
    "fallen_off_bus",
    "row_remap_failed",
    "uncorrectable_ecc",
    *XID_FAILING,
    "nvlink_errors",
    "retired_pages_limit",
    "overheating",
)
GPU_DEGRADED = (
    "row_remap_pending",
    "retired_pages_pending",
    "row_remap_growing",
    *XID_DEGRADED,
    "nvlink_crc_errors",
    "pcie_replay_rate",
    "throttling",
    "hot",
    "telemetry_stale",
)
NODE_FAILING = ("gpu_failing", "gpu_missing", "xid_critical", "slurm_down")
NODE_DEGRADED = ("gpu_degraded", "slurm_drain", "slurm_unavailable")
GPU_REASONS = GPU_FAILING + GPU_DEGRADED
NODE_REASONS = NODE_FAILING + NODE_DEGRADED

NODE_SCHEMA = {
    "since": UTC_DT,
    "last_seen": UTC_DT,
    "valid_until": UTC_DT,
    "node": pl.String,
    "status": pl.String,
    "reason": pl.String,
    "reasons": pl.String,
    "slurm_state": pl.String,
    "slurm_reason": pl.String,
    "gpus_configured": pl.Int32,
    "gpus_visible": pl.Int32,
    "gpus_failing": pl.Int32,
    "gpus_degraded": pl.Int32,
}
GPU_SCHEMA = {
    "since": UTC_DT,
    "last_seen": UTC_DT,
    "valid_until": UTC_DT,
    "node": pl.String,
    "gpu_uuid": pl.String,
    "gpu_index": pl.Int32,
    "gpu_model": pl.String,
    "status": pl.String,
    "reason": pl.String,
    "reasons": pl.String,
    "detail": pl.String,
}


# DCGM's health watches (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp, DcgmGpuHardwareLimits.h, DCGM 4.x):
# the limits the new rules take where config has no key of its own.
RETIRED_PAGES_LIMIT = 63
"""DCGM_LIMIT_MAX_RETIRED_PAGES: single- plus double-bit retired pages at which DCGM fails the GPU's memory."""
PCIE_REPLAY_RATE_FALLBACK = 8
"""DCGM_LIMIT_MAX_PCIREPLAY_RATE, "8 replays per minute is the maximum recommended by RM": the limit where the
link's generation or width is unknown."""
PCIE_REPLAYS_PER_LANE_MINUTE = {1: 0.15, 2: 0.3, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}
"""DCGM's expected replay rate per lane and minute by PCIe generation (a bit error rate of 1e-12 at 2.5, 5, 8,
16, 32, 64 Gb/s: 2.5e9 x 1e-12 x 60 = 0.15); a link of `w` lanes may replay ceil(rate x w) times a minute."""


def settings(health: Health) -> dict[str, Any]:
    """The `health` config section with every time window capped to what the inputs read."""
    h = asdict(health)
    for key in (
        "event_window_seconds",
        "throttle_window_seconds",
        "sample_max_age_seconds",
        "gpu_forget_seconds",
        "remap_window_seconds",
    ):
        h[key] = min(float(h[key]), MAX_LOOKBACK_SECONDS)
    overrides = {int(k): v for k, v in h.pop("xid_actions").items()}
    h["xid_actions"] = {code: str(a) for code, a in xids.actions(overrides).items()}
    return h


def _secs(value: float) -> pl.Expr:
    return pl.duration(microseconds=int(round(value * 1e6)))


def _flag(flags: pl.Expr, names: tuple[str, ...]) -> pl.Expr:
    """True when any of `names` is one of the '+'-joined flags (whole words: POWERED_DOWN is not DOWN)."""
    return (
        flags.fill_null("")
        .str.to_uppercase()
        .str.split("+")
        .list.eval(pl.element().is_in(list(names)))
        .list.any()
    )


def slurm_class(state: pl.Expr, flags: pl.Expr) -> pl.Expr:
    """'down', 'drain', 'unavailable' or 'up' for a sinfo base state and its flags (down beats drain)."""
    st = state.fill_null("").str.to_uppercase()
    return (
        pl.when(st.is_in(list(NODE_HEALTH_DOWN_STATES)) | _flag(flags, NODE_HEALTH_DOWN_FLAGS))
        .then(pl.lit("down"))
        .when(st.is_in(list(NODE_HEALTH_DRAIN_STATES)) | _flag(flags, NODE_HEALTH_DRAIN_FLAGS))
        .then(pl.lit("drain"))
        .when(st.is_in(list(NODE_HEALTH_UNAVAILABLE_STATES)) | _flag(flags, NODE_HEALTH_UNAVAILABLE_FLAGS))
        .then(pl.lit("unavailable"))
        .otherwise(pl.lit("up"))
    )


def _slurm_state(state: pl.Expr, flags: pl.Expr) -> pl.Expr:
    """sinfo's state as shown: 'IDLE', or 'IDLE+DRAIN' with its flags."""
    state, flags = state.fill_null("").str.to_uppercase(), flags.fill_null("")
    return pl.when(flags != "").then(state + "+" + flags).otherwise(state)


def _verdict(conds: dict[str, pl.Expr], failing: tuple[str, ...], degraded: tuple[str, ...]) -> list[pl.Expr]:
    """status, reason (first that holds, failing ones first) and reasons (all, ',' joined, in that order).

    Plain when/then chains and one concat_str: building a list per evaluation and reading it back cost more
    than every rule together (4.5 of 9 CPU-s on a year of a thousand nodes' snapshots)."""
    names = [*failing, *degraded]
    held = {n: conds[n].fill_null(False) for n in names}
    reason = pl.when(held[names[0]]).then(pl.lit(names[0]))
    for n in names[1:]:
        reason = reason.when(held[n]).then(pl.lit(n))
    any_failing = pl.any_horizontal([held[n] for n in failing])
    any_degraded = pl.any_horizontal([held[n] for n in degraded])
    return [
        pl.when(any_failing)
        .then(pl.lit("failing"))
        .when(any_degraded)
        .then(pl.lit("degraded"))
        .otherwise(pl.lit("ok"))
        .alias("status"),
        reason.otherwise(pl.lit("")).alias("reason"),
        pl.concat_str(
            [pl.when(held[n]).then(pl.lit(n)) for n in names], separator=",", ignore_nulls=True
        ).alias("reasons"),
    ]


def _last_event(
    left: pl.LazyFrame, events: pl.LazyFrame, by: list[str], out: str, extra: tuple[str, ...] = ()
) -> pl.LazyFrame:
    """Attach `out` = time of the latest event at or before `t` per `by` (and the `extra` columns of it)."""
    right = events.select(*by, pl.col("event_time").alias(out), *extra).sort(out)
    return _asof(left, right, out, by)


def _asof(left: pl.LazyFrame, right: pl.LazyFrame, right_on: str, by: list[str] | str) -> pl.LazyFrame:
    """Backward as-of join on t (both sides sorted here; polars cannot verify it with `by` groups)."""
    return left.sort("t").join_asof(
        right.sort(right_on),
        left_on="t",
        right_on=right_on,
        by=by,
        strategy="backward",
        check_sortedness=False,
    )


def _asof_few(left: pl.LazyFrame, right: pl.LazyFrame, right_on: str, by: str) -> pl.LazyFrame:
    """_asof for a large `left` whose `by` keys are mostly absent from a small `right`: only the rows whose key
    `right` has are sorted and searched; the others get nulls, as the as-of join would give them."""
    keys = right.select(by).unique()
    hit = _asof(left.join(keys, on=by, how="semi"), right, right_on, by)
    names = hit.collect_schema()
    miss = left.join(keys, on=by, how="anti").with_columns(
        pl.lit(None, dtype=names[c]).alias(c) for c in names if c not in left.collect_schema()
    )
    return pl.concat([hit, miss.select(names.names())], how="vertical")


def _recent(col: str, window: float) -> pl.Expr:
    """The event in `col` happened within (t - window, t]."""
    return pl.col(col).is_not_null() & ((pl.col("t") - pl.col(col)) < _secs(window))


XID_CLASSES = (*xids.FAILING_ACTIONS, xids.Action.INVESTIGATE)
"""The actions with an effect on the verdict; ignore and restart_app (the application restarts, the GPU stays
usable) have none."""


def _classify_events(events: pl.LazyFrame, h: dict[str, Any]) -> dict[str, pl.LazyFrame]:
    """`lost` (GPU lost, XID 79) and one frame per XID action of XID_CLASSES (a code the catalogue does not
    list is `investigate`); XID 79 is only `lost`: fallen off the bus is its reason."""
    is_xid = (pl.col("event_type") == "xid") & pl.col("xid").is_not_null()
    lost = (pl.col("event_type") == "gpu_lost") | (is_xid & (pl.col("xid") == 79))
    events = events.with_columns(
        pl.col("gpu_uuid").fill_null(""),
        pl.col("xid")
        .replace_strict(h["xid_actions"], default=str(xids.Action.INVESTIGATE), return_dtype=pl.String)
        .alias("_action"),
    )
    out = {"lost": events.filter(lost)}
    for action in XID_CLASSES:
        out[str(action)] = events.filter(is_xid & (pl.col("xid") != 79) & (pl.col("_action") == str(action)))
    return out


COUNTER_COLUMNS = (
    ("remapped_uncorrectable", pl.Int64),
    ("retired_pages_sbe", pl.Int64),
    ("retired_pages_dbe", pl.Int64),
    ("retired_pages_pending", pl.Boolean),
    ("nvlink_crc_flit_delta", pl.Int64),
    ("nvlink_crc_data_delta", pl.Int64),
    ("nvlink_replay_delta", pl.Int64),
    ("nvlink_recovery_delta", pl.Int64),
    ("pcie_replay_delta", pl.Int64),
    ("pcie_link_gen", pl.Int32),
    ("pcie_link_width", pl.Int32),
    ("violation_board_limit_seconds", pl.Float64),
    ("violation_reliability_seconds", pl.Float64),
)
"""The per-counter sample columns (migration 0019): a frame without them (a benchmark's, an older test's) is
judged as minutes without them are: not read."""


def pcie_replays_allowed(gen: pl.Expr, width: pl.Expr) -> pl.Expr:
    """Replays a minute may count before the link is suspect: DCGM's rule, ceil(rate per lane of the current
    generation x current width), above the highest generation it knows its rate; 8 where either is unknown."""
    rate = gen.clip(upper_bound=max(PCIE_REPLAYS_PER_LANE_MINUTE)).replace_strict(
        PCIE_REPLAYS_PER_LANE_MINUTE, default=None, return_dtype=pl.Float64
    )
    return (rate * width).ceil().fill_null(float(PCIE_REPLAY_RATE_FALLBACK))


def prepare_samples(samples: pl.LazyFrame, h: dict[str, Any]) -> pl.LazyFrame:
    """The NVML minutes with an integer GPU key `_gid`, sorted by GPU and minute, plus what the rules derive:

    - `ecc_n`: uncorrectable ECC errors counted in that minute: the minute's own delta, or the rise of the
      aggregate counter since the GPU's previous sample when that is larger (a minute the agent missed, or a
      source that only reports the total);
    - `throttle_ratio`: mean throttled share of the GPU's samples in the throttle window ending at the minute,
      a minute's throttled time being its hardware clock-event seconds or its hardware violation time (board
      limit, reliability), whichever is longer;
    - `nvlink_n` (replay + recovery errors) and `nvlink_crc` (the larger of the CRC flit and CRC data errors),
      summed over links; `nvlink_bad`: the minute breaks DCGM's NVLink limits (health.nvlink_replay_recovery
      replay or recovery errors, or health.nvlink_crc_per_second CRC errors a second); `nvlink_crc_seen`: CRC
      errors below that rate; `pcie_over`: more PCIe replays than the link's allowance (pcie_replays_allowed);
    - `remap_growth`: rows remapped for uncorrectable errors since the lowest count in the remap window.

    Sorting and windowing on an integer key rather than (node, uuid) strings is what keeps a day of a
    thousand GPUs' minutes fast (docs/benchmarks.md).
    """
    gid = gpu_key("node", "gpu_uuid").to_physical()
    hw_violation = pl.col("violation_board_limit_seconds").fill_null(0.0) + pl.col(
        "violation_reliability_seconds"
    ).fill_null(0.0)
    thr = (pl.max_horizontal(pl.col("throttle_seconds").fill_null(0.0), hw_violation) / 60.0).clip(0.0, 1.0)
    nvlink_n = pl.col("nvlink_replay_delta").fill_null(0) + pl.col("nvlink_recovery_delta").fill_null(0)
    nvlink_crc = pl.max_horizontal(
        pl.col("nvlink_crc_flit_delta").fill_null(0), pl.col("nvlink_crc_data_delta").fill_null(0)
    )
    nvlink_bad = (nvlink_n >= int(h["nvlink_replay_recovery"])) | (
        nvlink_crc / 60.0 >= float(h["nvlink_crc_per_second"])
    )
    # What each minute says on its own is worked out before the sort, so the sort moves 5 columns, not 13.
    lf = (
        with_columns_of(samples, dict(COUNTER_COLUMNS))
        .with_columns(
            gid.alias("_gid"),
            thr.alias("_thr"),
            nvlink_n.alias("nvlink_n"),
            nvlink_crc.alias("nvlink_crc"),
            nvlink_bad.alias("nvlink_bad"),
            (~nvlink_bad & (nvlink_crc > 0)).alias("nvlink_crc_seen"),
            (
                pl.col("pcie_replay_delta").fill_null(0)
                > pcie_replays_allowed(pl.col("pcie_link_gen"), pl.col("pcie_link_width"))
            ).alias("pcie_over"),
        )
        .drop(
            "throttle_seconds",
            "nvlink_crc_flit_delta",
            "nvlink_crc_data_delta",
            "nvlink_replay_delta",
            "nvlink_recovery_delta",
            "pcie_link_gen",
            "pcie_link_width",
            "violation_board_limit_seconds",
            "violation_reliability_seconds",
        )
        .sort("_gid", "minute")
    )
    same = pl.col("_gid") == pl.col("_gid").shift(1)
    total = pl.col("ecc_uncorrected_total")
    rise = pl.when(same).then(total - total.shift(1)).clip(lower_bound=0).fill_null(0)
    unc = pl.col("remapped_uncorrectable")
    window = f"{int(h['remap_window_seconds'])}s"
    return lf.with_columns(
        pl.max_horizontal(pl.col("ecc_uncorrected_delta").fill_null(0), rise).alias("ecc_n"),
        pl.col("_thr")
        .rolling_mean_by("minute", window_size=f"{int(h['throttle_window_seconds'])}s")
        .over("_gid")
        .alias("throttle_ratio"),
        (unc - unc.rolling_min_by("minute", window_size=window).over("_gid")).alias("remap_growth"),
    ).drop("_thr", "remapped_uncorrectable")


def event_minutes(samples: pl.LazyFrame) -> pl.LazyFrame:
    """(node, minute) of the minutes that turn a verdict like an event does: uncorrectable ECC errors, NVLink
    errors, PCIe replays over the link's allowance (`samples` from prepare_samples)."""
    hit = (pl.col("ecc_n") > 0) | pl.col("nvlink_bad") | pl.col("nvlink_crc_seen") | pl.col("pcie_over")
    return samples.filter(hit).select("node", pl.col("minute").alias("t"))


def gpu_verdicts(
    instants: pl.LazyFrame, samples: pl.LazyFrame, events: pl.LazyFrame, h: dict[str, Any]
) -> pl.LazyFrame:
    """One row per (t, node, GPU sampled on that node within gpu_forget_seconds before t) with the verdict.

    `samples` come from prepare_samples."""
    gpus = samples.select("node", "gpu_uuid", "_gid").unique()
    grid = instants.join(gpus, on="node", how="inner")
    latest = samples.select(
        "_gid",
        pl.col("minute").alias("last_minute"),
        "gpu_index",
        pl.col("model").alias("gpu_model"),
        "temp_gpu_max_celsius",
        "throttle_ratio",
        "remapped_pending",
        "remapped_failed",
        "retired_pages_pending",
        (pl.col("retired_pages_sbe").fill_null(0) + pl.col("retired_pages_dbe").fill_null(0)).alias(
            "retired_pages"
        ),
        "remap_growth",
    )
    lf = _asof(grid, latest, "last_minute", "_gid")
    lf = lf.filter(
        pl.col("last_minute").is_not_null()
        & ((pl.col("t") - pl.col("last_minute")) < _secs(h["gpu_forget_seconds"]))
    )
    ecc = samples.filter(pl.col("ecc_n") > 0).select("_gid", pl.col("minute").alias("event_time"), "ecc_n")
    cls = {
        k: v.join(gpus, on=["node", "gpu_uuid"], how="inner") for k, v in _classify_events(events, h).items()
    }
    by = ["_gid"]
    lf = _last_event(lf, cls["lost"], by, "lost_at")
    for action in XID_CLASSES:
        lf = _last_event(lf, cls[str(action)], by, f"{action}_at", ("xid",)).rename({"xid": f"{action}_xid"})
    lf = _last_event(lf, ecc, by, "ecc_at", ("ecc_n",))
    minute = pl.col("minute").alias("event_time")
    nvlink = samples.filter("nvlink_bad").select("_gid", minute, "nvlink_n", "nvlink_crc")
    lf = _last_event(lf, nvlink, by, "nvlink_at", ("nvlink_n", "nvlink_crc"))
    crc = samples.filter("nvlink_crc_seen").select("_gid", minute, pl.col("nvlink_crc").alias("crc_n"))
    lf = _last_event(lf, crc, by, "crc_at", ("crc_n",))
    pcie = samples.filter("pcie_over").select("_gid", minute, "pcie_replay_delta")
    lf = _last_event(lf, pcie, by, "pcie_at", ("pcie_replay_delta",))
    win = h["event_window_seconds"]
    temp = pl.col("temp_gpu_max_celsius")
    stale = (pl.col("t") - pl.col("last_minute")) >= _secs(h["sample_max_age_seconds"])
    fresh = (
        ~stale
    )  # a state read from the last sample (remap, temperature, throttling) only while it is recent
    conds = {
        "fallen_off_bus": _recent("lost_at", win),
        "row_remap_failed": fresh & pl.col("remapped_failed").fill_null(False),
        "uncorrectable_ecc": _recent("ecc_at", win),
        **{f"xid_{a}": _recent(f"{a}_at", win) for a in XID_CLASSES},
        "nvlink_errors": _recent("nvlink_at", win),
        "retired_pages_limit": fresh & (pl.col("retired_pages") >= RETIRED_PAGES_LIMIT),
        "overheating": fresh & (temp >= float(h["temp_failing_celsius"])),
        "row_remap_pending": fresh & pl.col("remapped_pending").fill_null(False),
        "retired_pages_pending": fresh & pl.col("retired_pages_pending").fill_null(False),
        "row_remap_growing": fresh & (pl.col("remap_growth") >= int(h["remap_growth_rows"])),
        "nvlink_crc_errors": _recent("crc_at", win),
        "pcie_replay_rate": _recent("pcie_at", win),
        "throttling": fresh & (pl.col("throttle_ratio") > float(h["throttle_ratio"])),
        "hot": fresh & (temp >= float(h["temp_degraded_celsius"])),
        "telemetry_stale": stale,
    }
    return lf.with_columns(*_verdict(conds, GPU_FAILING, GPU_DEGRADED))


EVIDENCE = (
    "lost_at",
    *[f"{a}_{c}" for a in XID_CLASSES for c in ("xid", "at")],
    "ecc_n",
    "ecc_at",
    "nvlink_at",
    "nvlink_n",
    "nvlink_crc",
    "crc_at",
    "crc_n",
    "pcie_at",
    "pcie_replay_delta",
    "retired_pages",
    "remap_growth",
    "temp_gpu_max_celsius",
    "throttle_ratio",
    "last_minute",
)
"""Columns gpu_verdicts keeps for `detail`, which is built once per run row (strftime on every evaluation of
a day of a large cluster costs more than all the rules together)."""


def gpu_detail() -> pl.Expr:
    """The evidence behind the reasons that hold, e.g. 'XID 48 at 2026-03-02T11:20:00Z; 91.5 C'."""
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    held = pl.col("reasons").str.split(",")

    def has(*names: str) -> pl.Expr:
        return pl.any_horizontal([held.list.contains(n) for n in names])

    return (
        pl.concat_list(
            [
                pl.when(has("fallen_off_bus")).then(pl.lit("lost at ") + pl.col("lost_at").dt.strftime(fmt)),
                *[
                    pl.when(has(f"xid_{a}")).then(
                        pl.format(
                            f"XID {{}} ({a}) at {{}}", pl.col(f"{a}_xid"), pl.col(f"{a}_at").dt.strftime(fmt)
                        )
                    )
                    for a in xids.FAILING_ACTIONS
                ],
                pl.when(has("uncorrectable_ecc")).then(
                    pl.format(
                        "{} uncorrectable ECC at {}", pl.col("ecc_n"), pl.col("ecc_at").dt.strftime(fmt)
                    )
                ),
                pl.when(has("nvlink_errors")).then(
                    pl.format(
                        "NVLink {} replay/recovery, {} CRC errors at {}",
                        pl.col("nvlink_n"),
                        pl.col("nvlink_crc"),
                        pl.col("nvlink_at").dt.strftime(fmt),
                    )
                ),
                pl.when(has("retired_pages_limit", "retired_pages_pending")).then(
                    pl.format("{} retired pages", pl.col("retired_pages"))
                ),
                pl.when(has("row_remap_growing")).then(
                    pl.format("{} rows remapped (uncorrectable) in the window", pl.col("remap_growth"))
                ),
                pl.when(has("nvlink_crc_errors")).then(
                    pl.format(
                        "{} NVLink CRC errors at {}", pl.col("crc_n"), pl.col("crc_at").dt.strftime(fmt)
                    )
                ),
                pl.when(has("pcie_replay_rate")).then(
                    pl.format(
                        "{} PCIe replays at {}",
                        pl.col("pcie_replay_delta"),
                        pl.col("pcie_at").dt.strftime(fmt),
                    )
                ),
                pl.when(has(f"xid_{xids.Action.INVESTIGATE}")).then(
                    pl.format(
                        "XID {} (investigate) at {}",
                        pl.col(f"{xids.Action.INVESTIGATE}_xid"),
                        pl.col(f"{xids.Action.INVESTIGATE}_at").dt.strftime(fmt),
                    )
                ),
                pl.when(has("overheating", "hot")).then(
                    pl.format("{} C", pl.col("temp_gpu_max_celsius").round(1))
                ),
                pl.when(has("throttling")).then(
                    pl.format("HW throttled {}%", (pl.col("throttle_ratio") * 100).round(0))
                ),
                pl.when(has("telemetry_stale")).then(
                    pl.lit("last sample ") + pl.col("last_minute").dt.strftime(fmt)
                ),
            ]
        )
        .list.drop_nulls()
        .list.join("; ")
    )


def node_verdicts(
    nodes: pl.LazyFrame, gpu: pl.LazyFrame, events: pl.LazyFrame, inventory: pl.LazyFrame, h: dict[str, Any]
) -> pl.LazyFrame:
    """One row per evaluation (t, node; `nodes` carries the sinfo snapshot in force at t) with the verdict."""
    counts = gpu.group_by("t", "node").agg(
        (pl.col("status") == "failing").sum().cast(pl.Int32).alias("gpus_failing"),
        (pl.col("status") == "degraded").sum().cast(pl.Int32).alias("gpus_degraded"),
    )
    # Slurm's class and state text per distinct (state, flags) pair, joined: a handful of pairs over a year of
    # snapshots, and the flag rules split strings.
    pairs = (
        nodes.select("state", "state_flags")
        .unique()
        .with_columns(
            slurm_class(pl.col("state"), pl.col("state_flags")).alias("_slurm"),
            _slurm_state(pl.col("state"), pl.col("state_flags")).alias("slurm_state"),
        )
    )
    lf = (
        nodes.join(pairs, on=["state", "state_flags"], how="left", nulls_equal=True)
        .join(counts, on=["t", "node"], how="left")
        .with_columns(
            pl.col("gpus_failing").fill_null(0),
            pl.col("gpus_degraded").fill_null(0),
        )
    )
    inv = inventory.select("node", "seen_at", pl.col("gpus_visible").cast(pl.Int32))
    lf = _asof_few(lf, inv, "seen_at", "node")
    # Events no GPU could be named for (a kernel XID whose PCI address matched no GPU) count for the node.
    cls = _classify_events(events, h)
    unnamed = pl.concat([cls["lost"], *(cls[str(a)] for a in xids.FAILING_ACTIONS)]).filter(
        pl.col("gpu_uuid") == ""
    )
    lf = _asof_few(
        lf, unnamed.select("node", pl.col("event_time").alias("node_event_at")), "node_event_at", "node"
    )
    configured = pl.col("gpus_total")
    conds = {
        "gpu_failing": pl.col("gpus_failing") > 0,
        "gpu_missing": pl.col("gpus_visible").is_not_null()
        & configured.is_not_null()
        & (pl.col("gpus_visible") < configured),
        "xid_critical": _recent("node_event_at", h["event_window_seconds"]),
        "slurm_down": pl.col("_slurm") == "down",
        "gpu_degraded": pl.col("gpus_degraded") > 0,
        "slurm_drain": pl.col("_slurm") == "drain",
        "slurm_unavailable": pl.col("_slurm") == "unavailable",
    }
    return lf.with_columns(
        *_verdict(conds, NODE_FAILING, NODE_DEGRADED),
        pl.col("reason").fill_null("").alias("slurm_reason"),
        configured.cast(pl.Int32).alias("gpus_configured"),
    )


def runs(lf: pl.LazyFrame, keys: list[str], change: list[str], gap_seconds: float) -> pl.LazyFrame:
    """Collapse consecutive evaluations of one entity with the same `change` columns into one row.

    A run breaks where the verdict changes or where two evaluations are more than `gap_seconds` apart (the
    entity was not seen in between). Every other column is taken from the run's first evaluation.
    """
    gap = _secs(gap_seconds)
    # The text columns travel through the sort as categoricals and entities are ordered by their codes: runs
    # only need each entity's evaluations together and in time order, and sorting a year of evaluations by
    # name and moving their strings cost most of this step.
    text = [c for c, dtype in lf.collect_schema().items() if dtype == pl.String]
    lf = lf.with_columns(pl.col(c).cast(pl.Categorical) for c in text)
    lf = lf.sort(*[pl.col(k).to_physical() for k in keys], "t")
    # Sorted by entity then time, the previous row is the entity's previous evaluation unless the entity
    # changes there; run numbers are then global, which a window per entity would only renumber.
    prev_t = pl.col("t").shift(1)
    changed = prev_t.is_null() | ((pl.col("t") - prev_t) > gap)
    for c in [*keys, *change]:
        changed = changed | pl.col(c).ne_missing(pl.col(c).shift(1))
    lf = lf.with_columns(changed.cast(pl.Int64).cum_sum().alias("_run"))
    others = [c for c in lf.collect_schema().names() if c not in (*keys, "_run", "t")]
    return (
        lf.group_by("_run")
        .agg(
            *[pl.col(k).first() for k in keys],
            pl.col("t").min().alias("since"),
            pl.col("t").max().alias("last_seen"),
            *[pl.col(c).first() for c in others],
        )
        .with_columns((pl.col("last_seen") + gap).alias("valid_until"))
        .drop("_run")
        .with_columns(pl.col(c).cast(pl.String) for c in text)
    )


def stitch(
    computed: pl.LazyFrame,
    seeds: pl.LazyFrame,
    keys: list[str],
    change: list[str],
    start: datetime,
    gap_seconds: float,
) -> pl.LazyFrame:
    """The window's runs, each continuing the stored run it extends, as one pass over all evaluations gives.

    `computed` are the runs of the evaluations from `start` on (runs' columns); `seeds` the stored runs the
    runner deletes that began before `start` (since < start <= valid_until). The entity's latest seed holds
    its last evaluation before `start`, so the first computed run continues it exactly when runs would not
    have broken there: the same `change` columns, and the seed's last_seen at most the gap before (a seed
    last seen at or after `start` already contains that first evaluation). The continued run keeps the
    seed's `since` and first-evaluation columns (slurm_state, detail, ... are "at since"); the other seeds
    ended before `start` and are written back unchanged (a latest seed last seen after `start` that is not
    continued can only come from inputs that changed after it was stored).

    Seeds and runs are sorted together and each run compared with the row before it, so `computed` is read
    once: a join would put it in the plan twice, and a full rebuild would compute every verdict twice.
    """
    names = computed.collect_schema()
    seeds = seeds.select(pl.col(c).cast(t) for c, t in names.items())
    lf = pl.concat(
        [
            computed.with_columns(pl.lit(False).alias("_seed")),
            seeds.with_columns(pl.lit(True).alias("_seed")),
        ],
        how="vertical",
    ).sort(*keys, "since")

    def prev(c: str) -> pl.Expr:
        return pl.col(c).shift(1)

    # Seeds all began before `start` and runs at or after it: a run whose previous row is a seed of its
    # entity is the entity's first run, and that seed its latest.
    cont = (
        prev("_seed")
        & ~pl.col("_seed")
        & pl.all_horizontal([pl.col(k) == prev(k) for k in keys])
        & pl.all_horizontal([pl.col(c).eq_missing(prev(c)) for c in change])
        & (
            (prev("last_seen") >= pl.lit(start, dtype=names["last_seen"]))
            | ((pl.col("since") - prev("last_seen")) <= _secs(gap_seconds))
        )
    )
    lf = lf.with_columns(cont.fill_null(False).alias("_cont"))
    lf = lf.with_columns(
        *[
            pl.when(pl.col("_cont")).then(prev(c)).otherwise(pl.col(c)).alias(c)
            for c in names
            if c not in ("last_seen", "valid_until")
        ],
        pl.col("_cont").shift(-1).fill_null(False).alias("_continued"),
    )
    return lf.filter(~pl.col("_continued")).select(names.names())


def evaluations(
    nodes: pl.LazyFrame,
    samples: pl.LazyFrame,
    events: pl.LazyFrame,
    inventory: pl.LazyFrame,
    params: Params,
    gap_seconds: float,
) -> pl.LazyFrame:
    """The instants a node is judged at, each with the sinfo snapshot in force then (`samples` prepared).

    Every sinfo snapshot, and every NVML event, event minute (event_minutes) and inventory of the window: a
    GPU that falls off the bus between two hourly snapshots turns the node failing at that minute, not at
    the next snapshot. A node is judged only while its latest snapshot is at most `gap_seconds` old; a
    snapshot before the window (`nodes` has each node's latest) only stands for the node at the window's
    first instants.
    """
    start, end = pl.lit(params.start, dtype=UTC_DT), pl.lit(params.end, dtype=UTC_DT)
    cols = ("state", "state_flags", "reason", "gpus_total")
    snaps = nodes.select("node", "snapshot_time", *cols)
    # A snapshot's own instant is judged on that snapshot (`nodes` has one row per node and snapshot), so only
    # the few other instants need the as-of search, over the snapshots of their nodes only; an instant that
    # is also a snapshot's finds that snapshot at its own time and is dropped as a duplicate.
    extra = (
        pl.concat(
            [
                events.select("node", pl.col("event_time").alias("t")),
                event_minutes(samples),
                inventory.select("node", pl.col("seen_at").alias("t")),
            ]
        )
        .filter((pl.col("t") >= start) & (pl.col("t") <= end))
        .unique()
    )
    near = snaps.join(extra.select("node").unique(), on="node", how="semi")
    extra = _asof(extra, near, "snapshot_time", "node").filter(
        pl.col("snapshot_time").is_not_null()
        & (pl.col("snapshot_time") != pl.col("t"))
        & ((pl.col("t") - pl.col("snapshot_time")) <= _secs(gap_seconds))
    )
    own = snaps.select("node", pl.col("snapshot_time").alias("t"), *cols).filter(pl.col("t") >= start)
    return pl.concat([own, extra.select("node", "t", *cols)], how="vertical")


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    h = settings(params.health)
    gap = float(params.pipelines.node_snapshot_max_gap_seconds)
    samples = prepare_samples(frames["samples"], h).cache()  # read by the instants and by the GPU rules
    # Each is read twice (the GPU grid and the node rules; the node rules and the GPU runs): uncached, Polars
    # built the GPU grid twice, a third of health's CPU (docs/benchmarks.md#fleet-10000-gpus-30-days).
    nodes = evaluations(frames["nodes"], samples, frames["events"], frames["inventory"], params, gap).cache()
    instants = nodes.select("t", "node")
    gpu = gpu_verdicts(instants, samples, frames["events"], h).cache()
    node = node_verdicts(nodes, gpu, frames["events"], frames["inventory"], h)
    gpu_cols = [c for c in GPU_SCHEMA if c not in ("since", "last_seen", "valid_until", "detail")]
    gpu_runs = runs(gpu.select("t", *gpu_cols, *EVIDENCE), ["node", "gpu_uuid"], ["status", "reasons"], gap)
    gpu_runs = ensure_columns(gpu_runs.with_columns(gpu_detail().alias("detail")), GPU_SCHEMA)
    node_cols = [c for c in NODE_SCHEMA if c not in ("since", "last_seen", "valid_until")]
    # Slurm's allocation state (IDLE, MIXED, ALLOCATED) changes all the time and is not a verdict: a run breaks
    # on the verdict and on Slurm's reason text only; slurm_state is the state at the run's start.
    node_change = ["status", "reasons", "slurm_reason"]
    node_runs = ensure_columns(runs(node.select("t", *node_cols), ["node"], node_change, gap), NODE_SCHEMA)
    if "node_seeds" in frames:  # absent when a caller computes one window alone (benchmarks/bench_health.py)
        node_runs = stitch(node_runs, frames["node_seeds"], ["node"], node_change, params.start, gap)
    if "gpu_seeds" in frames:
        gpu_runs = stitch(
            gpu_runs, frames["gpu_seeds"], ["node", "gpu_uuid"], ["status", "reasons"], params.start, gap
        )
    return {
        "mart_node_health": node_runs.sort("node", "since"),
        "mart_gpu_health": gpu_runs.sort("node", "gpu_uuid", "since"),
    }
