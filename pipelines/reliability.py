"""Failure and requeue rates, node incidents and MTBF/MTTR, fault → lost GPU-hours, and training goodput.

A node's unavailability arrives as many records: DOWN/DRAIN/FAIL events from `sacctmgr show event`, sinfo
snapshots of the node DOWN or DRAINED, and GPU faults from NVML or the kernel log that Slurm never sees. They
are merged per node into incidents (overlapping or nearly touching records are one incident: a DOWN followed
by the DRAIN under which it is repaired is one failure, not two), each classified by cause (hardware, node
failure, maintenance, other) from its records; MTBF and MTTR count the hardware and node-failure incidents
only. A fault is linked to the job attempts that were running on its node and ended failed shortly after,
their GPU-hours counted as lost, and whether the job came back; the same link decides whether a FAILED
attempt was the user's failure or the system's (slurm_states.job_failure_class). Node failure rates then give
the expected time between interruptions for an N-node job, the Young–Daly checkpoint interval and the
expected goodput, against which the measured goodput is set. docs/pipelines.md#reliability has the rules.
"""

from __future__ import annotations

import math
from datetime import timedelta

import polars as pl
from slurmscope.pipelines.calendar import local_day
from slurmscope.pipelines.common import (
    UTC_DT,
    ensure_columns,
    multi_attempt,
    with_requeued,
)
from slurmscope.pipelines.params import Params

from slurmscope import xid as xids
from slurmscope.hostlist import expand_hostlist_lenient
from slurmscope.slurm_states import (
    JOB_CANCELLED_BY_ROOT,
    JOB_INCIDENT_LINKED_STATES,
    JOB_NODE_FAULT_STATES,
    JOB_NOT_ENDED_STATES,
    JOB_SYSTEM_FAILURE_STATES,
    JOB_USER_FAILURE_STATES,
    NODE_HEALTH_DOWN_FLAGS,
    NODE_HEALTH_DOWN_STATES,
    NODE_HEALTH_DRAIN_FLAGS,
    NODE_HEALTH_DRAIN_STATES,
    parse_node_state,
    sql_list,
)

NAME = "reliability"

SLICEABLE = True  # a full rebuild may run as consecutive windows (pipelines.full_slice_days)

MART_TABLES: dict[str, str | None] = {
    "mart_job_outcomes_daily": "day",
    "mart_job_outcomes_node_daily": "day",
    "mart_requeues_daily": "day",
    "mart_fault_impact": "fault_time",
    "mart_node_incidents": None,
    "mart_node_reliability": None,
    "mart_goodput": None,
}

_JOB_COLS = """job_id_raw, submit_time, attempt, account, "partition", state, state_raw, start_time, end_time,
               elapsed_seconds, gpus, nodes, node_list"""

FAULT_LEAD_SECONDS = 60
"""An attempt linked to a fault may have ended this long before it (the node's DOWN or the XID is recorded
after the job already died). A window starting at `start` deletes the fault rows from `start` on, so it reads
the attempts ending from `start` minus this lead, or a fault just after `start` loses its attempt."""

FAILURE_CAUSES = ("hardware", "node_failure")
"""The causes that are failures: MTBF, MTTR and the goodput model count these incidents only."""

NODE_UNAVAILABLE_STATES = (*NODE_HEALTH_DOWN_STATES, *NODE_HEALTH_DRAIN_STATES)
NODE_UNAVAILABLE_FLAGS = (*NODE_HEALTH_DOWN_FLAGS, *NODE_HEALTH_DRAIN_FLAGS)
"""A node event or sinfo snapshot whose base state or a flag is one of these makes the node unavailable (the
health verdict's failing and drained sets: DOWN, FAIL, FAILING, NOT_RESPONDING, INVAL, DRAIN...); flags are
whole words, so POWERED_DOWN is not DOWN."""

_DOWN_LIKE_STATES = NODE_HEALTH_DOWN_STATES
_DOWN_LIKE_FLAGS = NODE_HEALTH_DOWN_FLAGS

_SNAPSHOT_FILTER = (
    f"(upper(state) IN {sql_list(NODE_UNAVAILABLE_STATES)} OR "
    + " OR ".join(f"coalesce(state_flags, '') LIKE '%{f}%'" for f in NODE_UNAVAILABLE_FLAGS)
    + ")"
)

FAULT_GPU_EVENTS = ("xid", "gpu_lost", "ecc")
"""GPU event types that are faults of the GPU: an XID (when the catalogue's hardware flag says so), the GPU
fallen off the bus, an uncorrectable ECC error."""


# `retries`: an attempt ending in the window is requeued, and a fault's killed attempt came back, when the job
# has a later-submitted attempt, whenever that one ran. `jobs` leaves out the attempts that started after the
# window's end (a slice of a full rebuild ends before now) and those that ended before its start (a job's
# attempts can overlap), so a run to now over everything reads them and a window would not: `retries` reads
# those of the window's jobs. A window from 1970 to now reads everything already.
#
# The whole-table marts (incidents, node reliability, goodput) are rewritten by every slice of
# a full rebuild and only the last slice's (the one ending at now) survive. The inputs only they need (nodes,
# job_sizes, killed_before: whole-history scans) are therefore read empty by the earlier
# slices (`$end >= $now`). Any other run ends at now and reads them in full. Incidents are built from every
# node event, GPU fault and unavailable sinfo snapshot in each slice: the fault links depend on them.
INPUTS: dict[str, str] = {
    "jobs": f"""
        SELECT {_JOB_COLS} FROM jobs
        WHERE cluster = $cluster AND (end_time IS NULL OR end_time >= $start - INTERVAL {FAULT_LEAD_SECONDS} SECOND)
          AND (start_time IS NULL OR start_time < $end)""",  # noqa: S608 - _JOB_COLS is a module constant; values are $parameters
    "retries": f"""
        SELECT {_JOB_COLS} FROM jobs
        WHERE cluster = $cluster
          AND (($end < $now AND start_time >= $end AND start_time < $now)
               OR ($start > TIMESTAMPTZ '1970-01-01 00:00:00+00'
                   AND end_time < $start - INTERVAL {FAULT_LEAD_SECONDS} SECOND))
          AND job_id_raw IN (
            SELECT job_id_raw FROM jobs
            WHERE cluster = $cluster AND end_time >= $start - INTERVAL {FAULT_LEAD_SECONDS} SECOND
              AND (start_time IS NULL OR start_time < $end))""",  # noqa: S608 - _JOB_COLS is a module constant; values are $parameters
    "node_events": """
        SELECT node, time_start, time_end, state, reason, reason_user FROM node_events
        WHERE cluster = $cluster AND node <> ''""",
    "gpu_events": f"""
        SELECT node, event_time, event_type, xid FROM gpu_events
        WHERE cluster = $cluster AND event_type IN {tuple(FAULT_GPU_EVENTS)}""",  # noqa: S608 - constant event types
    "node_down_snapshots": f"""
        SELECT DISTINCT node, snapshot_time, state, state_flags, reason, reason_user FROM node_states
        WHERE cluster = $cluster AND {_SNAPSHOT_FILTER}""",  # noqa: S608 - the filter is built from constant state sets
    "snapshot_times": """
        SELECT DISTINCT snapshot_time FROM node_states WHERE cluster = $cluster""",
    "nodes": """
        SELECT node, min(snapshot_time) AS first_seen,
               string_agg(DISTINCT "partition", ',' ORDER BY "partition") AS "partition"
        FROM node_states WHERE cluster = $cluster AND $end >= $now GROUP BY node""",
    "job_sizes": """
        SELECT coalesce("partition", '') AS "partition", coalesce(nodes, 1) AS nodes, count(*) AS jobs,
               sum(coalesce(elapsed_seconds, 0) * coalesce(gpus, 0)) / 3600.0 AS gpu_hours
        FROM jobs WHERE cluster = $cluster AND start_time IS NOT NULL AND $end >= $now GROUP BY ALL""",
    "killed_before": """
        SELECT f.job_id_raw, f.submit_time, f."partition", coalesce(j.nodes, 1) AS nodes, f.cause,
               coalesce(j.elapsed_seconds, 0) AS elapsed_seconds, coalesce(j.gpus, 0) AS gpus
        FROM mart_fault_impact f LEFT JOIN jobs j
          ON j.cluster = f.cluster AND j.job_id_raw = f.job_id_raw AND j.submit_time = f.submit_time
        WHERE f.cluster = $cluster AND f.fault_time < $start AND $end >= $now""",
}


def hardware_xids(params: Params) -> list[int]:
    """XIDs that are GPU hardware faults, by NVIDIA's catalogue (slurmscope/xid.py, `Xid.implicates_hardware`)
    with the operator's health.xid_actions: those whose action takes the GPU out of service (reset_gpu,
    reboot_node, contact_support) and that NVIDIA does not attribute to the application. An `investigate`
    XID (unknown, or one NVIDIA leaves undecided) and a `restart_app` one are not hardware failures."""
    overrides = {int(k): v for k, v in params.health.xid_actions.items()}
    codes: set[int] = set()
    for action in xids.FAILING_ACTIONS:
        codes |= set(xids.codes_of(action, overrides))
    return sorted(codes - set(xids.application_codes()))


OUTCOMES_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "account": pl.String,
    "state": pl.String,
    "jobs": pl.Int64,
    "gpu_hours": pl.Float64,
    "failure": pl.String,
}
NODE_OUTCOMES_SCHEMA = {
    "day": pl.Date,
    "node": pl.String,
    "state": pl.String,
    "jobs": pl.Int64,
    "gpu_hours": pl.Float64,
}
REQUEUE_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "account": pl.String,
    "attempts_ended": pl.Int64,
    "requeues": pl.Int64,
    "requeued_jobs": pl.Int64,
    "requeue_rate": pl.Float64,
    "requeued_gpu_hours": pl.Float64,
}
INCIDENT_SCHEMA = {
    "node": pl.String,
    "incident_start": UTC_DT,
    "incident_end": UTC_DT,
    "unavailable_seconds": pl.Float64,
    "cause": pl.String,
    "failure": pl.Boolean,
    "node_events": pl.Int64,
    "snapshots": pl.Int64,
    "gpu_faults": pl.Int64,
    "states": pl.String,
    "reason": pl.String,
    "reason_user": pl.String,
    "xids": pl.String,
}
NODE_SCHEMA = {
    "node": pl.String,
    "partition": pl.String,
    "observed_seconds": pl.Float64,
    "failures": pl.Int64,
    "down_seconds": pl.Float64,
    "mtbf_seconds": pl.Float64,
    "mttr_seconds": pl.Float64,
    "incidents": pl.Int64,
    "hardware_failures": pl.Int64,
}
FAULT_SCHEMA = {
    "fault_time": UTC_DT,
    "node": pl.String,
    "fault_source": pl.String,
    "fault_kind": pl.String,
    "job_id_raw": pl.Int64,
    "submit_time": UTC_DT,
    "attempt": pl.Int32,
    "job_state": pl.String,
    "account": pl.String,
    "partition": pl.String,
    "gpu_hours_lost": pl.Float64,
    "came_back": pl.Boolean,
    "completed_later": pl.Boolean,
    "resumed_from_checkpoint": pl.Boolean,
    "incident_start": UTC_DT,
    "cause": pl.String,
}
GOODPUT_SCHEMA = {
    "partition": pl.String,
    "nodes": pl.Int32,
    "node_mtbf_seconds": pl.Float64,
    "mtbi_seconds": pl.Float64,
    "checkpoint_cost_seconds": pl.Float64,
    "young_daly_interval_seconds": pl.Float64,
    "expected_lost_share": pl.Float64,
    "measured_lost_share": pl.Float64,
    "jobs": pl.Int64,
    "restart_cost_seconds": pl.Float64,
    "interruptions": pl.Int64,
    "expected_goodput": pl.Float64,
    "measured_goodput": pl.Float64,
}


def young_daly(
    checkpoint_cost: float, mtbi: float | None, restart_cost: float = 0.0
) -> tuple[float | None, float | None]:
    """(interval, expected share of time lost) for checkpoint cost C, mean time between interruptions M and
    restart cost R.

    Young (1974) / Daly (2006) first order: tau = sqrt(2 C M); per unit of time the job loses C/tau writing
    checkpoints and, per interruption (1/M of them), half an interval of recomputation and the restart:
    C/tau + (tau/2 + R)/M = sqrt(2C/M) + R/M, capped at 1. M null or 0 → (None, None).
    """
    if mtbi is None or mtbi <= 0 or math.isnan(mtbi):
        return None, None
    tau = math.sqrt(2.0 * checkpoint_cost * mtbi)
    lost = (checkpoint_cost / tau if tau > 0 else 0.0) + (tau / 2.0 + restart_cost) / mtbi
    return tau, min(lost, 1.0)


def _ended(jobs: pl.LazyFrame) -> pl.LazyFrame:
    elapsed = pl.coalesce(
        pl.col("elapsed_seconds").cast(pl.Float64),
        (pl.col("end_time") - pl.col("start_time")).dt.total_microseconds() / 1e6,
        pl.lit(0.0),
    )
    return jobs.with_columns(
        (elapsed * pl.col("gpus").fill_null(0) / 3600.0).alias("gpu_hours"),
        elapsed.alias("elapsed"),
        pl.col("account").fill_null(""),
        pl.col("partition").fill_null(""),
        pl.col("state").fill_null("UNKNOWN"),
    ).filter(pl.col("end_time").is_not_null() & ~pl.col("state").is_in(JOB_NOT_ENDED_STATES))


def ended_attempts(jobs: pl.LazyFrame) -> pl.LazyFrame:
    """Attempts that ended, with their GPU-hours and a `requeued` flag (another attempt of the job was
    submitted after it; decided over every attempt read, ended or not)."""
    return _ended(with_requeued(jobs))


def by_end_day(ended: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Billing-zone day of each attempt's end (an end at midnight belongs to the day before: [start, end))."""
    day = local_day(pl.col("end_time") - pl.duration(microseconds=1), params.tz)
    return ended.with_columns(day.alias("day")).filter(pl.col("day") >= pl.lit(params.start_date))


def outcomes(ended_days: pl.LazyFrame) -> pl.LazyFrame:
    """Per day, partition, account, state and failure class (`failure`, from failure_class; `none` when the
    frame has no such column)."""
    if "failure" not in ended_days.collect_schema():
        ended_days = ended_days.with_columns(failure=failure_class(pl.lit(False)))
    out = ended_days.group_by("day", "partition", "account", "state", "failure").agg(
        pl.len().cast(pl.Int64).alias("jobs"), pl.col("gpu_hours").sum()
    )
    return ensure_columns(out, OUTCOMES_SCHEMA)


def outcomes_by_node(ended_days: pl.LazyFrame) -> pl.LazyFrame:
    """Outcomes per node: an attempt counts once on each node of its NodeList and gives each an equal share
    of its GPU-hours (sacct records the job's GPUs, not how they were spread over its nodes; Slurm's
    --gpus-per-node jobs, the usual multi-node case, are spread evenly). Attempts that never got a node
    (cancelled while pending) have no node and are left out. Hostlists are expanded once per distinct
    NodeList, not once per attempt, and the attempts are first summed per (day, NodeList, state), so only
    those sums are spread over the nodes."""
    per_list = (
        ended_days.filter(pl.col("node_list").is_not_null())
        .group_by("day", "node_list", "state")
        .agg(pl.len().cast(pl.Int64).alias("jobs"), pl.col("gpu_hours").sum())
    )
    lists = (
        per_list.select(pl.col("node_list").unique())
        .with_columns(
            pl.col("node_list")
            .map_elements(expand_hostlist_lenient, return_dtype=pl.List(pl.String))
            .alias("node")
        )
        .with_columns(pl.col("node").list.len().alias("_nodes"))
        .filter(pl.col("_nodes") > 0)
    )
    out = (
        per_list.join(lists, on="node_list", how="inner")
        .with_columns((pl.col("gpu_hours") / pl.col("_nodes")).alias("gpu_hours"))
        .explode("node")
        .group_by("day", "node", "state")
        .agg(pl.col("jobs").sum(), pl.col("gpu_hours").sum())
    )
    return ensure_columns(out, NODE_OUTCOMES_SCHEMA)


def requeue_candidates(jobs: pl.LazyFrame) -> pl.LazyFrame:
    """ended_attempts of the jobs with several attempts, the only ones that can be requeued: `requeued` is not
    worked out (a group-by and join) over every attempt."""
    return ended_attempts(multi_attempt(jobs))


def requeues(ended_days: pl.LazyFrame, candidate_days: pl.LazyFrame) -> pl.LazyFrame:
    """Per day, partition and account: the attempts that ended (`ended_days`) and those of them requeued,
    found among `candidate_days` (the same attempts' days, or only requeue_candidates'; with `requeued`)."""
    keys = ["day", "partition", "account"]
    req = (
        candidate_days.filter(pl.col("requeued"))
        .group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("requeues"),
            pl.col("job_id_raw").n_unique().cast(pl.Int64).alias("requeued_jobs"),
            pl.col("gpu_hours").sum().alias("requeued_gpu_hours"),
        )
    )
    out = (
        ended_days.group_by(keys)
        .agg(pl.len().cast(pl.Int64).alias("attempts_ended"))
        .join(req, on=keys, how="left")
        .with_columns(
            pl.col("requeues").fill_null(0),
            pl.col("requeued_jobs").fill_null(0),
            pl.col("requeued_gpu_hours").fill_null(0.0),
        )
        .with_columns((pl.col("requeues") / pl.col("attempts_ended")).alias("requeue_rate"))
    )
    return ensure_columns(out, REQUEUE_SCHEMA)


# --- the failure split ------------------------------------------------------------------------------------


def failure_class(incident: pl.Expr) -> pl.Expr:
    """slurm_states.job_failure_class over `state`, `state_raw` and `start_time`, as an expression; `incident`
    says whether a node incident was linked to the attempt (links below)."""
    state = pl.col("state")
    by_root = pl.col("state_raw").fill_null("").str.strip_chars(" ") == JOB_CANCELLED_BY_ROOT
    started = pl.col("start_time").is_not_null()
    return (
        pl.when(state.is_in(JOB_SYSTEM_FAILURE_STATES))
        .then(pl.lit("system"))
        .when(~started)
        .then(pl.lit("none"))
        .when((state == "CANCELLED") & by_root)
        .then(pl.lit("system"))
        .when(state.is_in(JOB_INCIDENT_LINKED_STATES) & incident)
        .then(pl.lit("system"))
        .when(state.is_in(JOB_USER_FAILURE_STATES))
        .then(pl.lit("user"))
        .otherwise(pl.lit("none"))
    )


def with_failure(ended: pl.LazyFrame, linked: pl.LazyFrame) -> pl.LazyFrame:
    """Ended attempts with their `failure` class; `linked` holds the (job_id_raw, submit_time) of attempts a
    node incident was linked to."""
    keys = ["job_id_raw", "submit_time"]
    flag = linked.select(keys).unique().with_columns(pl.lit(True).alias("_linked"))
    return (
        ended.join(flag, on=keys, how="left")
        .with_columns(failure_class(pl.col("_linked").fill_null(False)).alias("failure"))
        .drop("_linked")
    )


# --- incidents ---------------------------------------------------------------------------------------------


def _state_words(state: str | None) -> list[str]:
    base, flags = parse_node_state(state)
    return [w for w in [base, *(flags.split("+") if flags else [])] if w]


def _any_word(words: pl.Expr, vocabulary: tuple[str, ...]) -> pl.Expr:
    return words.list.eval(pl.element().is_in(vocabulary)).list.any().fill_null(False)


def _reason_matches(pattern: str) -> pl.Expr:
    if not pattern:
        return pl.lit(False)
    return pl.col("reason").fill_null("").str.contains(f"(?i){pattern}")


_RANK_CAUSE = {
    0: "hardware",
    1: "hardware",
    2: "node_failure",
    3: "maintenance",
    4: "node_failure",
    5: "other",
}


def _rank(params: Params) -> pl.Expr:
    """How specific a record's evidence is (lower wins in its incident): a GPU fault, a hardware reason, a
    failure reason, a maintenance reason, a DOWN/FAIL/NOT_RESPONDING state with no reason recognised, else
    nothing (a DRAIN with an unrecognised or no reason)."""
    rel = params.reliability
    return (
        pl.when(pl.col("source") == "gpu_event")
        .then(0)
        .when(_reason_matches(rel.hardware_reasons))
        .then(1)
        .when(_reason_matches(rel.failure_reasons))
        .then(2)
        .when(_reason_matches(rel.maintenance_reasons))
        .then(3)
        .when(pl.col("down_like"))
        .then(4)
        .otherwise(5)
        .cast(pl.Int32)
    )


_MEMBER = [
    "node",
    "start",
    "end",
    "ongoing",
    "source",
    "state_text",
    "down_like",
    "reason",
    "reason_user",
    "xid",
]


def event_members(node_events: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Node events (`sacctmgr show event`) whose state makes the node unavailable, as [start, end) records; an
    event without an end (or ending after `now`) is ongoing and lasts until `now`."""
    now_l = pl.lit(params.now, dtype=UTC_DT)
    words = pl.col("state").map_elements(_state_words, return_dtype=pl.List(pl.String))
    return (
        node_events.filter(pl.col("time_start") < now_l)
        .with_columns(words.alias("_words"))
        .filter(_any_word(pl.col("_words"), NODE_UNAVAILABLE_STATES + NODE_UNAVAILABLE_FLAGS))
        .select(
            "node",
            pl.col("time_start").alias("start"),
            pl.max_horizontal(
                "time_start", pl.min_horizontal(pl.col("time_end").fill_null(now_l), now_l)
            ).alias("end"),
            (pl.col("time_end").is_null() | (pl.col("time_end") > now_l)).alias("ongoing"),
            pl.lit("node_event").alias("source"),
            pl.col("state").str.to_uppercase().alias("state_text"),
            _any_word(pl.col("_words"), _DOWN_LIKE_STATES + _DOWN_LIKE_FLAGS).alias("down_like"),
            "reason",
            "reason_user",
            pl.lit(None, dtype=pl.Int64).alias("xid"),
        )
    )


def snapshot_members(snapshots: pl.LazyFrame, times: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """sinfo snapshots of a node unavailable, each standing until the cluster's next snapshot (at most
    pipelines.node_snapshot_max_gap_seconds, and never past `now`): the latest one, if that recent, is
    ongoing."""
    gap = timedelta(seconds=int(params.pipelines.node_snapshot_max_gap_seconds))
    now_l = pl.lit(params.now, dtype=UTC_DT)
    nxt = (
        times.select("snapshot_time")
        .unique()
        .sort("snapshot_time")
        .with_columns(pl.col("snapshot_time").shift(-1).alias("_next"))
    )
    base = pl.col("state").fill_null("").str.to_uppercase()
    flags = pl.col("state_flags").fill_null("").str.to_uppercase()
    words = pl.concat_list(base, flags.str.split("+"))
    capped = pl.col("snapshot_time") + gap
    return (
        snapshots.filter(pl.col("snapshot_time") < now_l)
        .unique(["node", "snapshot_time"], keep="first")
        .join(nxt, on="snapshot_time", how="left")
        .with_columns(words.alias("_words"))
        .filter(_any_word(pl.col("_words"), NODE_UNAVAILABLE_STATES + NODE_UNAVAILABLE_FLAGS))
        .select(
            "node",
            pl.col("snapshot_time").alias("start"),
            pl.min_horizontal(pl.col("_next").fill_null(now_l), capped, now_l).alias("end"),
            (pl.col("_next").is_null() & (capped > now_l)).alias("ongoing"),
            pl.lit("sinfo").alias("source"),
            pl.when(flags != "").then(base + "+" + flags).otherwise(base).alias("state_text"),
            _any_word(pl.col("_words"), _DOWN_LIKE_STATES + _DOWN_LIKE_FLAGS).alias("down_like"),
            "reason",
            "reason_user",
            pl.lit(None, dtype=pl.Int64).alias("xid"),
        )
    )


def gpu_members(gpu_events: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """GPU faults Slurm may never see (hardware_xids, a GPU lost from the bus, an uncorrectable ECC error), as
    instants: they make an incident of their own, or join the node's unavailability around them."""
    now_l = pl.lit(params.now, dtype=UTC_DT)
    xid = pl.col("event_type") == "xid"
    fault = (~xid & pl.col("event_type").is_in(FAULT_GPU_EVENTS)) | (
        xid & pl.col("xid").is_in(hardware_xids(params)).fill_null(False)
    )
    kind = (
        pl.when(pl.col("xid").is_not_null())
        .then(pl.lit("xid:") + pl.col("xid").cast(pl.String))
        .otherwise(pl.col("event_type"))
    )
    return gpu_events.filter(fault & (pl.col("event_time") < now_l)).select(
        "node",
        pl.col("event_time").alias("start"),
        pl.col("event_time").alias("end"),
        pl.lit(False).alias("ongoing"),
        pl.lit("gpu_event").alias("source"),
        kind.alias("state_text"),
        pl.lit(False).alias("down_like"),
        pl.lit(None, dtype=pl.String).alias("reason"),
        pl.lit(None, dtype=pl.String).alias("reason_user"),
        pl.col("xid").cast(pl.Int64),
    )


def incidents(members: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Merge each node's records into incidents and classify them.

    Records are sorted by start; one belongs to the incident before it when it starts no later than
    reliability.incident_merge_seconds after the latest end so far (so overlapping records, a DOWN and the
    DRAIN that follows it, and a repair that fails again within minutes are one incident). The incident
    spans its first start to its last end (NULL while a record is ongoing); `unavailable_seconds` is the
    length of the union of its records (overlaps counted once, the gaps bridged by the merge not counted;
    GPU faults are instants and add none). Its cause is that of its most specific record (_rank).
    """
    gap_us = int(params.reliability.incident_merge_seconds) * 1_000_000
    order = ["_s", "_e"]
    m = members.select(_MEMBER).with_columns(
        pl.col("start").dt.epoch("us").alias("_s"),
        pl.col("end").dt.epoch("us").alias("_e"),
        _rank(params).alias("_rank"),
    )
    m = m.with_columns(pl.col("_e").cum_max().shift(1).over("node", order_by=order).alias("_prev"))
    m = m.with_columns(
        (pl.col("_prev").is_null() | (pl.col("_s") > pl.col("_prev") + gap_us)).alias("_new"),
        (pl.col("_e") - pl.max_horizontal("_s", pl.col("_prev").fill_null(pl.col("_s"))))
        .clip(lower_bound=0)
        .alias("_own"),
    )
    m = m.with_columns(pl.col("_new").cast(pl.Int64).cum_sum().over("node", order_by=order).alias("_seq"))
    by_evidence = ["_rank", "_s"]
    agg = m.group_by("node", "_seq").agg(
        pl.col("start").min().alias("incident_start"),
        pl.col("end").max().alias("_end"),
        pl.col("ongoing").any().alias("_ongoing"),
        (pl.col("_own").sum() / 1e6).alias("unavailable_seconds"),
        pl.col("_rank").min().alias("_rank"),
        (pl.col("source") == "node_event").sum().cast(pl.Int64).alias("node_events"),
        (pl.col("source") == "sinfo").sum().cast(pl.Int64).alias("snapshots"),
        (pl.col("source") == "gpu_event").sum().cast(pl.Int64).alias("gpu_faults"),
        pl.col("state_text").drop_nulls().unique().sort().str.join(",").alias("states"),
        pl.col("reason").sort_by(by_evidence).drop_nulls().first().alias("reason"),
        pl.col("reason_user").sort_by(by_evidence).drop_nulls().first().alias("reason_user"),
        pl.col("xid").drop_nulls().unique().sort().cast(pl.String).str.join(",").alias("xids"),
    )
    cause = pl.col("_rank").replace_strict(_RANK_CAUSE, return_dtype=pl.String)
    out = agg.with_columns(
        pl.when(pl.col("_ongoing")).then(None).otherwise(pl.col("_end")).alias("incident_end"),
        cause.alias("cause"),
        pl.col("xids").replace("", None),
        pl.col("states").replace("", None),
    ).with_columns(pl.col("cause").is_in(FAILURE_CAUSES).alias("failure"))
    return ensure_columns(out, INCIDENT_SCHEMA)


def node_reliability(incidents_: pl.LazyFrame, nodes: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Per node over its observed life, from its incidents: failures = hardware and node-failure incidents
    (GPU-only faults included); down_seconds = time unavailable, every cause, overlaps counted once;
    MTBF = (observed − down) / failures; MTTR = mean span (start to end) of the failure incidents that ended
    and made the node unavailable (a GPU-only fault has no repair time Slurm saw)."""
    now_l = pl.lit(params.now, dtype=UTC_DT)
    span = (pl.col("incident_end") - pl.col("incident_start")).dt.total_microseconds() / 1e6
    repaired = pl.col("failure") & pl.col("incident_end").is_not_null() & (pl.col("unavailable_seconds") > 0)
    per = incidents_.group_by("node").agg(
        pl.col("failure").sum().cast(pl.Int64).alias("failures"),
        (pl.col("cause") == "hardware").sum().cast(pl.Int64).alias("hardware_failures"),
        pl.len().cast(pl.Int64).alias("incidents"),
        pl.col("unavailable_seconds").sum().alias("down_seconds"),
        span.filter(repaired).mean().alias("mttr_seconds"),
        pl.col("incident_start").min().alias("first_event"),
    )
    j = nodes.select("node", "first_seen", "partition").join(per, on="node", how="full", coalesce=True)
    first = pl.min_horizontal("first_seen", "first_event")
    j = j.with_columns(
        ((now_l - first).dt.total_microseconds() / 1e6).clip(lower_bound=0).alias("observed_seconds"),
        pl.col("failures").fill_null(0),
        pl.col("hardware_failures").fill_null(0),
        pl.col("incidents").fill_null(0),
        pl.col("down_seconds").fill_null(0.0),
        pl.col("partition").fill_null(""),
    ).with_columns(
        pl.when(pl.col("failures") > 0)
        .then((pl.col("observed_seconds") - pl.col("down_seconds")).clip(lower_bound=0) / pl.col("failures"))
        .alias("mtbf_seconds")
    )
    return ensure_columns(j, NODE_SCHEMA)


# --- faults and the attempts they killed -------------------------------------------------------------------

_POINT = ["node", "fault_time", "fault_source", "fault_kind"]


def fault_points(members: pl.LazyFrame, incidents_: pl.LazyFrame) -> pl.LazyFrame:
    """The instants a fault began, each with its incident (start and cause): the start of every unavailable
    node event, every GPU fault, and the start of an incident only sinfo saw."""
    pts = members.filter(pl.col("source").is_in(("node_event", "gpu_event"))).select(
        "node",
        pl.col("start").alias("fault_time"),
        pl.col("source").alias("fault_source"),
        pl.col("state_text").alias("fault_kind"),
    )
    sinfo_only = incidents_.filter((pl.col("node_events") == 0) & (pl.col("gpu_faults") == 0)).select(
        "node",
        pl.col("incident_start").alias("fault_time"),
        pl.lit("sinfo").alias("fault_source"),
        pl.col("states").str.split(",").list.first().alias("fault_kind"),
    )
    inc = incidents_.select("node", "incident_start", "cause").sort("incident_start")
    return (
        pl.concat([pts, sinfo_only.select(_POINT)], how="vertical")
        .sort("fault_time")
        .join_asof(
            inc,
            left_on="fault_time",
            right_on="incident_start",
            by="node",
            strategy="backward",
            check_sortedness=False,  # both sorted by time above, hence within each node
        )
    )


def links(jobs: pl.LazyFrame, points: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Each killed attempt linked to the latest fault on one of its nodes at or before its end.

    Link rule: the attempt ran on the node (hostlist), started before the fault, ended within
    [fault − FAULT_LEAD_SECONDS (60 s), fault + reliability.fault_grace_seconds] in a state a fault causes
    (NODE_FAIL, FAILED, REQUEUED, BOOT_FAIL). One row per attempt, so summing gpu_hours_lost never counts an
    attempt twice.
    """
    grace = int(params.reliability.fault_grace_seconds)
    # Cheap time prefilter before the hostlist expansion: keep attempts with some fault (any node)
    # in [end - grace, end + lead]; the node match below then decides.
    times = points.select(pl.col("fault_time").alias("_near")).unique().sort("_near")
    killed = (
        _ended(jobs.filter(pl.col("state").is_in(JOB_NODE_FAULT_STATES)))
        .with_columns((pl.col("end_time") + pl.duration(seconds=FAULT_LEAD_SECONDS)).alias("_probe"))
        .sort("_probe")
        .join_asof(
            times,
            left_on="_probe",
            right_on="_near",
            strategy="backward",
            tolerance=timedelta(seconds=grace + FAULT_LEAD_SECONDS),
        )
        .filter(pl.col("_near").is_not_null())
        .drop("_probe", "_near")
    )
    hosts = (
        killed.select(pl.col("node_list").drop_nulls().unique())
        .with_columns(
            pl.col("node_list")
            .map_elements(expand_hostlist_lenient, return_dtype=pl.List(pl.String))
            .alias("node")
        )
        .explode("node")
    )
    killed = killed.join(hosts, on="node_list", how="inner")
    m = killed.join(points, on="node").filter(
        (pl.col("start_time") <= pl.col("fault_time"))
        & (pl.col("end_time") >= pl.col("fault_time") - pl.duration(seconds=FAULT_LEAD_SECONDS))
        & (pl.col("end_time") <= pl.col("fault_time") + pl.duration(seconds=grace))
    )
    return m.sort("fault_time", "fault_source", "node", "fault_kind").unique(
        ["job_id_raw", "submit_time"], keep="last", maintain_order=True
    )


def fault_impact(jobs: pl.LazyFrame, linked: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """The links (above) of the faults in [start, now), with the GPU-hours each killed attempt lost and what
    became of its job: came back, completed later, resumed from a checkpoint (inferred)."""
    start_l = pl.lit(params.start, dtype=UTC_DT)
    now_l = pl.lit(params.now, dtype=UTC_DT)
    m = linked.filter((pl.col("fault_time") >= start_l) & (pl.col("fault_time") < now_l)).cache()
    # The fate of the linked jobs' other attempts: only those few jobs' attempts are read again.
    linked_jobs = jobs.join(m.select("job_id_raw").unique(), on="job_id_raw", how="semi")
    later = (
        _ended(linked_jobs)
        .select("job_id_raw", "submit_time", "state", "elapsed", "start_time")
        .rename(
            {"submit_time": "l_submit", "state": "l_state", "elapsed": "l_elapsed", "start_time": "l_start"}
        )
    )
    running_later = linked_jobs.filter(pl.col("end_time").is_null()).select(
        "job_id_raw",
        pl.col("submit_time").alias("l_submit"),
        pl.col("state").alias("l_state"),
        pl.lit(None, dtype=pl.Float64).alias("l_elapsed"),
        pl.col("start_time").alias("l_start"),
    )
    later = pl.concat([later, running_later.select(later.collect_schema().names())], how="vertical")
    nxt = (
        m.select("job_id_raw", "submit_time", "elapsed")
        .join(later, on="job_id_raw")
        .filter(pl.col("l_submit") > pl.col("submit_time"))
        .group_by("job_id_raw", "submit_time")
        .agg(
            pl.col("l_start").is_not_null().any().alias("came_back"),
            (pl.col("l_state") == "COMPLETED").any().alias("completed_later"),
            pl.col("l_elapsed").filter(pl.col("l_state") == "COMPLETED").min().alias("done_elapsed"),
        )
    )
    out = (
        m.join(nxt, on=["job_id_raw", "submit_time"], how="left")
        .with_columns(
            pl.col("came_back").fill_null(False),
            pl.col("completed_later").fill_null(False),
        )
        .with_columns(
            pl.when(~pl.col("completed_later"))
            .then(pl.lit(False))
            .when(pl.col("done_elapsed") < pl.col("elapsed"))
            .then(pl.lit(True))
            .otherwise(pl.lit(None, dtype=pl.Boolean))
            .alias("resumed_from_checkpoint"),
            pl.col("state").alias("job_state"),
            pl.col("gpu_hours").alias("gpu_hours_lost"),
        )
    )
    return ensure_columns(out, FAULT_SCHEMA)


# --- goodput -------------------------------------------------------------------------------------------------


def goodput(
    node_rel: pl.LazyFrame,
    job_sizes: pl.LazyFrame,
    killed: pl.LazyFrame,
    params: Params,
) -> pl.LazyFrame:
    """Per partition and job size N: expected and measured goodput, the share of GPU time that is effective
    training, under one checkpoint policy (docs/pipelines.md#reliability).

    Node MTBF = node up-seconds / failures in the partition; MTBI M = MTBF / N (independent node failures);
    Young–Daly interval tau = sqrt(2 C M). Expected lost share = C/tau + (tau/2 + R)/M (young_daly).
    Measured lost share, over the partition's N-node attempts (T GPU-seconds): the checkpoint writes C/tau x T,
    plus, for each attempt a hardware or node-failure incident killed (`killed`: elapsed e, GPUs g), the work
    since its last checkpoint (e mod tau, checkpoints every tau from its start; all of e without a tau) and
    the restart R, times g; over T, capped at 1. Goodput = 1 − lost share.
    """
    rel = params.reliability
    c = float(rel.checkpoint_cost_seconds)
    r = float(rel.restart_cost_seconds)
    per_part = (
        node_rel.with_columns(pl.col("partition").str.split(","))
        .explode("partition")
        .with_columns(pl.col("partition").fill_null(""))
        .group_by("partition")
        .agg(
            (pl.col("observed_seconds") - pl.col("down_seconds")).clip(lower_bound=0).sum().alias("up"),
            pl.col("failures").sum().alias("failures"),
        )
        .with_columns(
            pl.when(pl.col("failures") > 0).then(pl.col("up") / pl.col("failures")).alias("node_mtbf_seconds")
        )
    )
    sizes = pl.LazyFrame({"nodes": [int(n) for n in rel.job_sizes]}, schema={"nodes": pl.Int64})
    seen = job_sizes.select(pl.col("partition"), pl.col("nodes").cast(pl.Int64))
    grid = pl.concat([per_part.select("partition").join(sizes, how="cross"), seen], how="vertical").unique()
    sizes_agg = (
        job_sizes.with_columns(pl.col("nodes").cast(pl.Int64))
        .group_by("partition", "nodes")
        .agg(pl.col("jobs").sum().cast(pl.Int64), pl.col("gpu_hours").sum())
    )
    g = (
        grid.join(per_part.select("partition", "node_mtbf_seconds"), on="partition", how="left")
        .join(sizes_agg, on=["partition", "nodes"], how="left")
        .with_columns(
            (pl.col("node_mtbf_seconds") / pl.col("nodes")).alias("mtbi_seconds"),
            pl.lit(c).alias("checkpoint_cost_seconds"),
            pl.lit(r).alias("restart_cost_seconds"),
            pl.col("jobs").fill_null(0),
        )
        .with_columns((2.0 * c * pl.col("mtbi_seconds")).sqrt().alias("young_daly_interval_seconds"))
    )
    tau = pl.col("young_daly_interval_seconds")
    writes = pl.when(tau > 0).then(c / tau).otherwise(0.0)
    kills = (
        killed.filter(pl.col("cause").is_in(FAILURE_CAUSES))
        .select(
            pl.col("partition").fill_null(""),
            pl.col("nodes").fill_null(1).cast(pl.Int64),
            pl.col("elapsed_seconds").cast(pl.Float64),
            pl.col("gpus").cast(pl.Float64),
        )
        .join(g.select("partition", "nodes", "young_daly_interval_seconds"), on=["partition", "nodes"])
        .with_columns(
            pl.when(tau > 0)
            .then(pl.col("elapsed_seconds") % tau)
            .otherwise(pl.col("elapsed_seconds"))
            .alias("_redo")
        )
        .group_by("partition", "nodes")
        .agg(
            pl.len().cast(pl.Int64).alias("interruptions"),
            ((pl.col("_redo") + r) * pl.col("gpus")).sum().alias("_kill_lost"),
        )
    )
    total = pl.col("gpu_hours").fill_null(0) * 3600.0
    expected = writes + (tau / 2.0 + r) / pl.col("mtbi_seconds")
    measured = (writes * total + pl.col("_kill_lost").fill_null(0.0)) / total
    g = (
        g.join(kills, on=["partition", "nodes"], how="left")
        .with_columns(
            pl.col("interruptions").fill_null(0),
            pl.when(pl.col("mtbi_seconds").is_not_null())
            .then(pl.min_horizontal(expected, pl.lit(1.0)))
            .alias("expected_lost_share"),
            pl.when(total > 0).then(pl.min_horizontal(measured, pl.lit(1.0))).alias("measured_lost_share"),
        )
        .with_columns(
            (1.0 - pl.col("expected_lost_share")).alias("expected_goodput"),
            (1.0 - pl.col("measured_lost_share")).alias("measured_goodput"),
        )
    )
    return ensure_columns(g, GOODPUT_SCHEMA)


def _killed_now(fi: pl.LazyFrame, jobs: pl.LazyFrame) -> pl.LazyFrame:
    """The window's killed attempts with their size, elapsed time and GPUs (as `killed_before` reads the
    earlier ones from the stored rows)."""
    keys = ["job_id_raw", "submit_time"]
    # The window's few faulted attempts are looked up among all its attempts (a semi join probes them once
    # instead of hashing every attempt for the left join).
    attrs = jobs.join(fi.select(keys), on=keys, how="semi").select(
        *keys,
        pl.col("nodes").fill_null(1).cast(pl.Int64),
        pl.col("elapsed_seconds").fill_null(0).cast(pl.Int64),
        pl.col("gpus").fill_null(0).cast(pl.Int64),
    )
    return fi.select(*keys, "partition", "cause").join(attrs, on=keys, how="left")


_KILLED = (
    ("job_id_raw", pl.Int64),
    ("submit_time", UTC_DT),
    ("partition", pl.String),
    ("nodes", pl.Int64),
    ("cause", pl.String),
    ("elapsed_seconds", pl.Int64),
    ("gpus", pl.Int64),
)


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    jobs = pl.concat([frames["jobs"], frames["retries"]], how="vertical")
    ended, candidates = _ended(jobs), requeue_candidates(jobs)
    if params.now > params.end:
        # A slice of a full rebuild that ends before now: the days after its end are deleted and rebuilt by the
        # next slices (which read every attempt ending in them), so attempts ending later are not summed here.
        in_slice = pl.col("end_time") <= pl.lit(params.end, dtype=UTC_DT)
        ended, candidates = ended.filter(in_slice), candidates.filter(in_slice)
    gpu = gpu_members(frames["gpu_events"], params)
    members = pl.concat(
        [
            event_members(frames["node_events"], params),
            snapshot_members(frames["node_down_snapshots"], frames["snapshot_times"], params),
            gpu,
        ],
        how="vertical",
    ).cache()
    inc = incidents(members, params).cache()
    points = fault_points(members, inc).cache()
    linked = links(jobs, points, params).cache()
    ended = with_failure(ended, linked)
    days = by_end_day(ended, params).cache()  # the three daily marts share it
    nrel = node_reliability(inc, frames["nodes"], params)
    fi = fault_impact(jobs, linked, params).cache()
    killed = pl.concat(
        [
            k.select([pl.col(c).cast(t) for c, t in _KILLED])
            for k in (frames["killed_before"], _killed_now(fi, jobs))
        ],
        how="vertical",
    )
    return {
        "mart_job_outcomes_daily": outcomes(days),
        "mart_job_outcomes_node_daily": outcomes_by_node(days),
        "mart_requeues_daily": requeues(days, by_end_day(candidates, params)),
        "mart_fault_impact": fi,
        "mart_node_incidents": inc,
        "mart_node_reliability": nrel,
        "mart_goodput": goodput(nrel, frames["job_sizes"], killed, params),
    }
