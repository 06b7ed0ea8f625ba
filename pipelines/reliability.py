"""Failure and requeue rates, node MTBF/MTTR, fault → lost GPU-hours, and the training-goodput view.

The join no tool does today: a node fault (a DOWN/DRAIN event from `sacctmgr show event`, or an NVML/kernel
XID, GPU-lost or ECC event) is linked to the job attempts that were running on that node and ended failed
shortly after, their GPU-hours counted as lost, and whether the job came back. Node failure rates then give
the expected time between interruptions for an N-node job and the Young–Daly checkpoint interval.
docs/pipelines.md#reliability has the formulas.
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
from slurmscope.slurm_states import JOB_NODE_FAULT_STATES, JOB_NOT_ENDED_STATES, NODE_EVENT_FAULT_STATES

NAME = "reliability"

SLICEABLE = True  # a full rebuild may run as consecutive windows (pipelines.full_slice_days)

MART_TABLES: dict[str, str | None] = {
    "mart_job_outcomes_daily": "day",
    "mart_job_outcomes_node_daily": "day",
    "mart_requeues_daily": "day",
    "mart_fault_impact": "fault_time",
    "mart_node_reliability": None,
    "mart_goodput": None,
}

_JOB_COLS = """job_id_raw, submit_time, attempt, account, "partition", state, start_time, end_time,
               elapsed_seconds, gpus, nodes, node_list"""

FAULT_LEAD_SECONDS = 60
"""An attempt linked to a fault may have ended this long before it (the node's DOWN or the XID is recorded
after the job already died). A window starting at `start` deletes the fault rows from `start` on, so it reads
the attempts ending from `start` minus this lead, or a fault just after `start` loses its attempt."""

# `retries`: an attempt ending in the window is requeued, and a fault's killed attempt came back, when the job
# has a later-submitted attempt, whenever that one ran. `jobs` leaves out the attempts that started after the
# window's end (a slice of a full rebuild ends before now) and those that ended before its start (a job's
# attempts can overlap), so a run to now over everything reads them and a window would not: `retries` reads
# those of the window's jobs. A window from 1970 to now reads everything already.
#
# mart_node_reliability and mart_goodput are whole-table marts: every slice of a full rebuild rewrites them and
# only the last slice's (the one ending at now) survive. The inputs only they need (nodes, job_sizes,
# lost_before: whole-history scans) are therefore read empty by the earlier slices (`$end >= $now`). Any other
# run ends at now and reads them in full.
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
        SELECT node, time_start, time_end, state, reason FROM node_events
        WHERE cluster = $cluster AND node <> ''""",
    "gpu_events": """
        SELECT node, event_time, event_type, xid FROM gpu_events
        WHERE cluster = $cluster AND event_time >= $start""",
    "nodes": """
        SELECT node, min(snapshot_time) AS first_seen,
               string_agg(DISTINCT "partition", ',' ORDER BY "partition") AS "partition"
        FROM node_states WHERE cluster = $cluster AND $end >= $now GROUP BY node""",
    "job_sizes": """
        SELECT coalesce("partition", '') AS "partition", coalesce(nodes, 1) AS nodes, count(*) AS jobs,
               sum(coalesce(elapsed_seconds, 0) * coalesce(gpus, 0)) / 3600.0 AS gpu_hours
        FROM jobs WHERE cluster = $cluster AND start_time IS NOT NULL AND $end >= $now GROUP BY ALL""",
    "lost_before": """
        SELECT f."partition", coalesce(j.nodes, 1) AS nodes, sum(f.gpu_hours_lost) AS gpu_hours_lost
        FROM mart_fault_impact f LEFT JOIN jobs j
          ON j.cluster = f.cluster AND j.job_id_raw = f.job_id_raw AND j.submit_time = f.submit_time
        WHERE f.cluster = $cluster AND f.fault_time < $start AND $end >= $now GROUP BY ALL""",
}

FAULT_GPU_EVENTS = ("xid", "gpu_lost", "ecc")


def not_fault_xids(params: Params) -> list[int]:
    """XIDs that are no node fault, from NVIDIA's catalogue (slurmscope/xid.py) and health.xid_actions: those
    NVIDIA attributes to the application (13, 31, 43, 45, ...: the job broke the GPU's work, not the other
    way round) and those whose action is `ignore` (informational, e.g. 63 and 92). A contained ECC error (94,
    restart_app) is the GPU's fault and counts."""
    overrides = {int(k): v for k, v in params.health.xid_actions.items()}
    ignored = xids.codes_of(xids.Action.IGNORE, overrides)
    return sorted(set(xids.application_codes()) | set(ignored))


OUTCOMES_SCHEMA = {
    "day": pl.Date,
    "partition": pl.String,
    "account": pl.String,
    "state": pl.String,
    "jobs": pl.Int64,
    "gpu_hours": pl.Float64,
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
NODE_SCHEMA = {
    "node": pl.String,
    "partition": pl.String,
    "observed_seconds": pl.Float64,
    "failures": pl.Int64,
    "down_seconds": pl.Float64,
    "mtbf_seconds": pl.Float64,
    "mttr_seconds": pl.Float64,
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
}


def young_daly(checkpoint_cost: float, mtbi: float | None) -> tuple[float | None, float | None]:
    """(interval, expected share of time lost) for checkpoint cost C and mean time between interruptions M.

    Young (1974) / Daly (2006) first order: tau = sqrt(2 C M); the time lost per unit of work is then
    C/tau (writing checkpoints) + tau/(2M) (recomputing half an interval per failure) = sqrt(2C/M), capped
    at 1. M null or 0 → (None, None).
    """
    if mtbi is None or mtbi <= 0 or math.isnan(mtbi):
        return None, None
    tau = math.sqrt(2.0 * checkpoint_cost * mtbi)
    lost = checkpoint_cost / tau + tau / (2.0 * mtbi) if tau > 0 else 0.0
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
    out = ended_days.group_by("day", "partition", "account", "state").agg(
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


def failure_events(node_events: pl.LazyFrame) -> pl.LazyFrame:
    pattern = "|".join(NODE_EVENT_FAULT_STATES)
    return node_events.filter(pl.col("state").fill_null("").str.to_uppercase().str.contains(pattern))


def node_reliability(node_events: pl.LazyFrame, nodes: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    """Per node over its observed life: failures, down time, MTBF = up time / failures, MTTR = mean length
    of the failures that ended."""
    now_l = pl.lit(params.now, dtype=UTC_DT)
    ev = failure_events(node_events).with_columns(
        (
            (
                pl.min_horizontal(pl.col("time_end").fill_null(now_l), now_l) - pl.col("time_start")
            ).dt.total_microseconds()
            / 1e6
        )
        .clip(lower_bound=0)
        .alias("dur"),
    )
    per = ev.group_by("node").agg(
        pl.len().cast(pl.Int64).alias("failures"),
        pl.col("dur").sum().alias("down_seconds"),
        pl.col("dur")
        .filter(pl.col("time_end").is_not_null() & (pl.col("time_end") <= now_l))
        .mean()
        .alias("mttr_seconds"),
        pl.col("time_start").min().alias("first_event"),
    )
    j = nodes.select("node", "first_seen", "partition").join(per, on="node", how="full", coalesce=True)
    first = pl.min_horizontal("first_seen", "first_event")
    j = j.with_columns(
        ((now_l - first).dt.total_microseconds() / 1e6).clip(lower_bound=0).alias("observed_seconds"),
        pl.col("failures").fill_null(0),
        pl.col("down_seconds").fill_null(0.0),
        pl.col("partition").fill_null(""),
    ).with_columns(
        pl.when(pl.col("failures") > 0)
        .then((pl.col("observed_seconds") - pl.col("down_seconds")).clip(lower_bound=0) / pl.col("failures"))
        .alias("mtbf_seconds")
    )
    return ensure_columns(j, NODE_SCHEMA)


def faults(node_events: pl.LazyFrame, gpu_events: pl.LazyFrame, params: Params) -> pl.LazyFrame:
    start_l = pl.lit(params.start, dtype=UTC_DT)
    now_l = pl.lit(params.now, dtype=UTC_DT)
    n = failure_events(node_events).select(
        "node",
        pl.col("time_start").alias("fault_time"),
        pl.lit("node_event").alias("fault_source"),
        pl.col("state").str.to_uppercase().alias("fault_kind"),
    )
    g = gpu_events.filter(
        pl.col("event_type").is_in(FAULT_GPU_EVENTS)
        & ~pl.col("xid").is_in(not_fault_xids(params)).fill_null(False)
    ).select(
        "node",
        pl.col("event_time").alias("fault_time"),
        pl.lit("gpu_event").alias("fault_source"),
        pl.when(pl.col("xid").is_not_null())
        .then(pl.lit("xid:") + pl.col("xid").cast(pl.String))
        .otherwise(pl.col("event_type"))
        .alias("fault_kind"),
    )
    return pl.concat([n, g], how="vertical").filter(
        (pl.col("fault_time") >= start_l) & (pl.col("fault_time") < now_l)
    )


def fault_impact(
    jobs: pl.LazyFrame, node_events: pl.LazyFrame, gpu_events: pl.LazyFrame, params: Params
) -> pl.LazyFrame:
    """Each killed attempt linked to the latest fault on one of its nodes at or before its end.

    Link rule: the attempt ran on the node (hostlist), started before the fault, ended within
    [fault − FAULT_LEAD_SECONDS (60 s), fault + reliability.fault_grace_seconds] in a state a fault causes
    (NODE_FAIL, FAILED, REQUEUED, BOOT_FAIL). One row per attempt, so summing gpu_hours_lost never counts an attempt twice.
    """
    grace = int(params.reliability.fault_grace_seconds)
    f = faults(node_events, gpu_events, params)
    # Cheap time prefilter before the hostlist expansion: keep attempts with some fault (any node)
    # in [end - grace, end + lead]; the node match below then decides.
    times = f.select(pl.col("fault_time").alias("_near")).unique().sort("_near")
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
    m = killed.join(f, on="node").filter(
        (pl.col("start_time") <= pl.col("fault_time"))
        & (pl.col("end_time") >= pl.col("fault_time") - pl.duration(seconds=FAULT_LEAD_SECONDS))
        & (pl.col("end_time") <= pl.col("fault_time") + pl.duration(seconds=grace))
    )
    m = (
        m.sort("fault_time", "fault_source", "node", "fault_kind")
        .unique(["job_id_raw", "submit_time"], keep="last", maintain_order=True)
        .cache()
    )  # read three times below
    # The fate of the linked jobs' other attempts: only those few jobs' attempts are read again.
    linked = jobs.join(m.select("job_id_raw").unique(), on="job_id_raw", how="semi")
    later = (
        _ended(linked)
        .select("job_id_raw", "submit_time", "state", "elapsed", "start_time")
        .rename(
            {"submit_time": "l_submit", "state": "l_state", "elapsed": "l_elapsed", "start_time": "l_start"}
        )
    )
    running_later = linked.filter(pl.col("end_time").is_null()).select(
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


def goodput(
    node_rel: pl.LazyFrame,
    job_sizes: pl.LazyFrame,
    lost_before: pl.LazyFrame,
    window_faults: pl.LazyFrame,
    jobs: pl.LazyFrame,
    params: Params,
) -> pl.LazyFrame:
    """Per partition and job size N: node MTBF = node up-seconds / failures in the partition; MTBI = MTBF / N
    (independent node failures); Young–Daly interval and expected loss; measured share of GPU-hours lost."""
    rel = params.reliability
    c = float(rel.checkpoint_cost_seconds)
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
    keys = ["job_id_raw", "submit_time"]
    # The window's few faulted attempts are looked up among all its attempts (a semi join probes them once
    # instead of hashing every attempt for the left join).
    win_nodes = jobs.join(window_faults.select(keys), on=keys, how="semi").select(
        *keys, pl.col("nodes").fill_null(1).cast(pl.Int64)
    )
    lost_now = window_faults.join(win_nodes, on=["job_id_raw", "submit_time"], how="left").select(
        pl.col("partition"), pl.col("nodes").fill_null(1), pl.col("gpu_hours_lost")
    )
    lost = (
        pl.concat(
            [
                lost_before.select(
                    pl.col("partition").fill_null(""),
                    pl.col("nodes").cast(pl.Int64),
                    pl.col("gpu_hours_lost").cast(pl.Float64),
                ),
                lost_now,
            ],
            how="vertical",
        )
        .group_by("partition", "nodes")
        .agg(pl.col("gpu_hours_lost").sum())
    )
    g = (
        grid.join(per_part.select("partition", "node_mtbf_seconds"), on="partition", how="left")
        .join(sizes_agg, on=["partition", "nodes"], how="left")
        .join(lost, on=["partition", "nodes"], how="left")
        .with_columns(
            (pl.col("node_mtbf_seconds") / pl.col("nodes")).alias("mtbi_seconds"),
            pl.lit(c).alias("checkpoint_cost_seconds"),
            pl.col("jobs").fill_null(0),
        )
    )
    tau = (2.0 * c * pl.col("mtbi_seconds")).sqrt()
    lost_share = pl.when(tau > 0).then(c / tau + tau / (2.0 * pl.col("mtbi_seconds"))).otherwise(0.0)
    g = g.with_columns(
        tau.alias("young_daly_interval_seconds"),
        pl.when(pl.col("mtbi_seconds").is_not_null())
        .then(pl.min_horizontal(lost_share, pl.lit(1.0)))
        .alias("expected_lost_share"),
        pl.when(pl.col("gpu_hours").fill_null(0) > 0)
        .then(pl.col("gpu_hours_lost").fill_null(0.0) / pl.col("gpu_hours"))
        .alias("measured_lost_share"),
    )
    return ensure_columns(g, GOODPUT_SCHEMA)


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    jobs = pl.concat([frames["jobs"], frames["retries"]], how="vertical")
    ended, candidates = _ended(jobs), requeue_candidates(jobs)
    if params.now > params.end:
        # A slice of a full rebuild that ends before now: the days after its end are deleted and rebuilt by the
        # next slices (which read every attempt ending in them), so attempts ending later are not summed here.
        in_slice = pl.col("end_time") <= pl.lit(params.end, dtype=UTC_DT)
        ended, candidates = ended.filter(in_slice), candidates.filter(in_slice)
    days = by_end_day(ended, params).cache()  # the three daily marts share it
    nrel = node_reliability(frames["node_events"], frames["nodes"], params)
    fi = fault_impact(jobs, frames["node_events"], frames["gpu_events"], params)
    return {
        "mart_job_outcomes_daily": outcomes(days),
        "mart_job_outcomes_node_daily": outcomes_by_node(days),
        "mart_requeues_daily": requeues(days, by_end_day(candidates, params)),
        "mart_fault_impact": fi,
        "mart_node_reliability": nrel,
        "mart_goodput": goodput(nrel, frames["job_sizes"], frames["lost_before"], fi, jobs, params),
    }
