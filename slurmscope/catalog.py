"""The metric catalog: every family the exporter serves, with its type, unit, help, labels and source query.

One list drives three things that must never disagree: the exporter (which runs each `query` and maps its
rows to samples), docs/metrics.md (generated from this list and checked by a test), and the dashboards and
alerts (which the tests check only name families listed here). The exporter computes nothing: each query
reads a mart or the latest raw snapshot at or before `$now` and returns one row per sample, with one column
per label and a `value` column. Queries take the named parameters `$cluster` and `$now` only, so rendering
the catalog at any past instant gives what a scrape at that instant would have shown (the history export
relies on that).

Conventions (ARCHITECTURE.md section 6): prefix `slurmscope_`, base units in names, `_total` for counters,
`_info` for metadata, bounded labels (no job id), `user` labels only when `exporter.user_labels` is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from slurmscope.slurm_states import (
    JOB_FINISHED_STATES,
    NODE_METRIC_DOWN_FLAGS,
    NODE_METRIC_DOWN_STATES,
    NODE_METRIC_OTHER_STATES,
    NODE_METRIC_UNAVAILABLE_FLAGS,
    NODE_METRIC_UNAVAILABLE_STATES,
    sql_list,
)

# ruff: noqa: S608 - every query here is composed at import from this module's own constants (table, column
# and expression literals); values enter only as the $cluster/$now parameters. tests/test_security.py pins
# the names that may be interpolated into SQL here.

MetricType = Literal["gauge", "counter", "info"]

# Node states Slurm reports for nodes that cannot run work (sinfo base states and flags).
UNAVAILABLE_FLAG_SQL = (
    f"(coalesce(state_flags, '') SIMILAR TO '.*({'|'.join(NODE_METRIC_UNAVAILABLE_FLAGS)}).*'"
    f" OR upper(coalesce(state, '')) IN {sql_list(NODE_METRIC_UNAVAILABLE_STATES)})"
)
# The display state used as the `state` label of node metrics: what an operator calls the node.
NODE_STATE_SQL = (
    f"CASE WHEN upper(coalesce(state, '')) IN {sql_list(NODE_METRIC_DOWN_STATES)}"
    + "".join(f" OR coalesce(state_flags, '') LIKE '%{flag}%'" for flag in NODE_METRIC_DOWN_FLAGS)
    + " THEN 'down'"
    " WHEN coalesce(state_flags, '') LIKE '%DRAIN%' OR upper(coalesce(state, '')) LIKE 'DRAIN%' THEN 'drain'"
    f" WHEN upper(coalesce(state, '')) IN {sql_list(NODE_METRIC_OTHER_STATES)} THEN 'other'"
    " ELSE lower(coalesce(state, 'unknown')) END"
)
TERMINAL_STATES = sql_list(JOB_FINISHED_STATES)


@dataclass(frozen=True)
class Metric:
    """One metric family. `name` is the exposed name (with `_total` / `_info`)."""

    name: str
    type: MetricType
    unit: str
    help: str
    labels: tuple[str, ...]
    source: str
    query: str
    requires: tuple[str, ...]
    user_labels: bool = False  # served only when config exporter.user_labels is true

    @property
    def family(self) -> str:
        """The family name prometheus_client wants (without the `_total` / `_info` suffix)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.type == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name

    @property
    def is_timestamp(self) -> bool:
        return self.name.endswith("_timestamp_seconds")


def _latest(table: str, time_col: str = "snapshot_time", max_age: str | None = None) -> str:
    """WHERE clause for the latest snapshot of `table` at or before $now (optionally not older than max_age)."""
    age = f" AND {time_col} > $now - INTERVAL '{max_age}'" if max_age else ""
    return (
        f"cluster = $cluster AND {time_col} = (SELECT max({time_col}) FROM {table}"
        f" WHERE cluster = $cluster AND {time_col} <= $now{age})"
    )


_NODE_LATEST = _latest("node_states")
_SQUEUE_LATEST = _latest("pending_jobs")
_SDIAG_LATEST = _latest("sched_stats")
_SHARES_LATEST = _latest("shares")
_GPU_LATEST = (
    "cluster = $cluster AND minute <= $now AND minute > $now - INTERVAL '15 minutes'"
    " QUALIFY row_number() OVER (PARTITION BY node, gpu_uuid ORDER BY minute DESC) = 1"
)
# The per-GPU families all read the latest minute of each GPU: the exporter runs this once per render and
# registers the result as `gpu_latest`, so N families cost one window query over gpu_samples, not N.
GPU_LATEST_VIEW = "gpu_latest"
GPU_LATEST_QUERY = f"SELECT * FROM gpu_samples WHERE {_GPU_LATEST}"


# The health verdict in force at $now: the run with the latest `since` <= $now per entity, if still valid.
_HEALTH_NOW = (
    "SELECT * FROM (SELECT * FROM {table} WHERE cluster = $cluster AND since <= $now"
    " QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY since DESC) = 1) WHERE valid_until > $now"
)
# Per GPU index (a GPU swapped for a new one keeps its index: the newer UUID wins).
_GPU_HEALTH_NOW = (
    "SELECT node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(gpu_model, '') AS gpu_model, status, reason FROM ("
    + _HEALTH_NOW.format(table="mart_gpu_health", key="node, gpu_uuid")
    + ") WHERE gpu_index IS NOT NULL QUALIFY row_number() OVER (PARTITION BY node, gpu_index ORDER BY since DESC) = 1"
)


def _sdiag(name: str, column: str, unit: str, help_: str, scale: str = "") -> Metric:
    return Metric(
        name=name,
        type="gauge",
        unit=unit,
        help=help_,
        labels=("cluster",),
        source="sched_stats (latest sdiag)",
        query=f"SELECT cluster, {column}{scale} AS value FROM sched_stats WHERE {_SDIAG_LATEST} AND {column} IS NOT NULL",
        requires=("sched_stats",),
    )


# The node agents serve some of the same slurmscope_gpu_* names live; every slurmscope_gpu_* telemetry or health
# family of either carries a `source` label ("central" here, "agent" there) so that dashboards and rules select
# one source and never add the two (docs/dashboards.md). The accounting slurmscope_gpu_seconds_* have none.
CENTRAL = "'central' AS source"


def _gpu(name: str, expr: str, unit: str, help_: str) -> Metric:
    return Metric(
        name=name,
        type="gauge",
        unit=unit,
        help=help_,
        labels=("cluster", "node", "gpu", "gpu_model", "source"),
        source="gpu_samples (latest minute per GPU, at most 15 min old)",
        query=f"SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,"
        f" {CENTRAL}, {expr} AS value FROM {GPU_LATEST_VIEW}",
        requires=("gpu_samples",),
    )


def _fairshare(name: str, column: str, help_: str, unit: str = "ratio") -> Metric:
    return Metric(
        name=name,
        type="gauge",
        unit=unit,
        help=help_,
        labels=("cluster", "account"),
        source="shares (latest sshare, account rows)",
        query=f"SELECT cluster, account, {column} AS value FROM shares WHERE {_SHARES_LATEST}"
        f" AND \"user\" = '' AND {column} IS NOT NULL",
        requires=("shares",),
    )


CATALOG: tuple[Metric, ...] = (
    # ---- nodes (sinfo) ----------------------------------------------------------------------------------
    Metric(
        name="slurmscope_node_state_info",
        type="info",
        unit="",
        help="Each node's state in each partition with its flags and reason, from the latest sinfo snapshot.",
        labels=("cluster", "node", "partition", "state", "state_raw", "reason"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, \"partition\", {NODE_STATE_SQL} AS state, coalesce(state_raw, '') AS state_raw,"
        f" coalesce(reason, '') AS reason, 1 AS value FROM node_states WHERE {_NODE_LATEST}",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_nodes",
        type="gauge",
        unit="",
        help="Nodes per partition and state (idle, mixed, allocated, drain, down, other).",
        labels=("cluster", "partition", "state"),
        source="node_states (latest sinfo)",
        query=f'SELECT cluster, "partition", {NODE_STATE_SQL} AS state, count(*) AS value FROM node_states'
        f" WHERE {_NODE_LATEST} GROUP BY ALL",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_down",
        type="gauge",
        unit="",
        help="1 when the node is DOWN or not responding, else 0 (one series per node).",
        labels=("cluster", "node"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, max(CASE WHEN {NODE_STATE_SQL} = 'down' THEN 1 ELSE 0 END) AS value"
        f" FROM node_states WHERE {_NODE_LATEST} GROUP BY ALL",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_unavailable_since_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="When the reason of a drained or down node was set (sinfo reason time), for nodes that are unavailable.",
        labels=("cluster", "node", "state"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, {NODE_STATE_SQL} AS state, max(epoch(reason_time)) AS value FROM node_states"
        f" WHERE {_NODE_LATEST} AND reason_time IS NOT NULL AND {NODE_STATE_SQL} IN ('drain', 'down') GROUP BY ALL",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_gpus_configured",
        type="gauge",
        unit="",
        help="GPUs Slurm has configured on the node (GRES), from the latest sinfo snapshot.",
        labels=("cluster", "node", "gpu_model"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, coalesce(max(gpu_type), '') AS gpu_model, max(gpus_total) AS value FROM node_states"
        f" WHERE {_NODE_LATEST} AND gpus_total IS NOT NULL GROUP BY cluster, node",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_gpus",
        type="gauge",
        unit="",
        help="GPUs per partition, model and state: allocated, idle (usable and free) or down (on an unavailable node).",
        labels=("cluster", "partition", "gpu_model", "state"),
        source="node_states (latest sinfo)",
        query=f"""
            WITH n AS (
                SELECT cluster, "partition", coalesce(gpu_type, '') AS gpu_model, coalesce(gpus_total, 0) AS total,
                       least(coalesce(gpus_used, 0), coalesce(gpus_total, 0)) AS used,
                       {UNAVAILABLE_FLAG_SQL} AS unavailable
                FROM node_states WHERE {_NODE_LATEST} AND coalesce(gpus_total, 0) > 0
            )
            SELECT cluster, "partition", gpu_model, s.state,
                   sum(CASE s.state WHEN 'allocated' THEN used
                                    WHEN 'down' THEN CASE WHEN unavailable THEN total - used ELSE 0 END
                                    ELSE CASE WHEN unavailable THEN 0 ELSE total - used END END) AS value
            FROM n, (VALUES ('allocated'), ('idle'), ('down')) s(state) GROUP BY ALL""",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_events_total",
        type="counter",
        unit="",
        help="Node DOWN/DRAIN events started so far (sacctmgr show event), per node and state.",
        labels=("cluster", "node", "state"),
        source="node_events",
        # Every node sinfo has seen gets both series from 0, so that the first event is an increase too.
        query="""
            WITH nodes AS (SELECT DISTINCT node FROM node_states WHERE cluster = $cluster AND snapshot_time <= $now
                           UNION SELECT DISTINCT node FROM node_events WHERE cluster = $cluster AND node <> ''
                           AND time_start <= $now),
            ev AS (SELECT node, CASE WHEN upper(coalesce(state, '')) LIKE '%DOWN%' THEN 'down' ELSE 'drain' END
                          AS state, count(*) AS n
                   FROM node_events WHERE cluster = $cluster AND node <> '' AND time_start <= $now GROUP BY ALL)
            SELECT $cluster AS cluster, nodes.node, s.state, coalesce(ev.n, 0) AS value
            FROM nodes CROSS JOIN (VALUES ('down'), ('drain')) s(state)
            LEFT JOIN ev ON ev.node = nodes.node AND ev.state = s.state""",
        requires=("node_events", "node_states"),
    ),
    # ---- queue (squeue) -------------------------------------------------------------------------------
    Metric(
        name="slurmscope_jobs_pending",
        type="gauge",
        unit="",
        help="Pending jobs per partition, account and Slurm reason, from the latest squeue snapshot.",
        labels=("cluster", "partition", "account", "reason"),
        source="pending_jobs (latest squeue)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
        f" coalesce(reason, '') AS reason, count(*) AS value FROM pending_jobs WHERE {_SQUEUE_LATEST}"
        f" AND state = 'PENDING' GROUP BY ALL",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_gpus_pending",
        type="gauge",
        unit="",
        help="GPUs requested by pending jobs per partition and account, from the latest squeue snapshot.",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
        f" sum(coalesce(gpus, 0)) AS value FROM pending_jobs WHERE {_SQUEUE_LATEST}"
        f" AND state = 'PENDING' GROUP BY ALL",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_jobs_running",
        type="gauge",
        unit="",
        help="Running jobs per partition and account, from the latest squeue snapshot.",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
        f" count(*) AS value FROM pending_jobs WHERE {_SQUEUE_LATEST} AND state = 'RUNNING' GROUP BY ALL",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_pending_oldest_submit_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="Submit time of the oldest pending job per partition and account (age = time() - value).",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
        f" min(epoch(submit_time)) AS value FROM pending_jobs WHERE {_SQUEUE_LATEST}"
        f" AND state = 'PENDING' AND submit_time IS NOT NULL GROUP BY ALL",
        requires=("pending_jobs",),
    ),
    # ---- jobs (sacct) ---------------------------------------------------------------------------------
    Metric(
        name="slurmscope_jobs_ended_total",
        type="counter",
        unit="",
        help="Job allocation attempts that reached a terminal state so far, per partition, account and state"
        " (every terminal state starts at 0 for each partition and account seen, so the first failure counts).",
        labels=("cluster", "partition", "account", "state"),
        source="jobs (sacct, end_time <= now)",
        query=f"""
            WITH pa AS (SELECT DISTINCT coalesce("partition", '') AS p, coalesce(account, '') AS a FROM jobs
                        WHERE cluster = $cluster AND submit_time <= $now),
            ended AS (SELECT coalesce("partition", '') AS p, coalesce(account, '') AS a, state, count(*) AS n
                      FROM jobs WHERE cluster = $cluster AND end_time <= $now AND state IN {TERMINAL_STATES}
                      GROUP BY ALL),
            states AS (SELECT unnest([{TERMINAL_STATES[1:-1]}]) AS state)
            SELECT $cluster AS cluster, pa.p AS "partition", pa.a AS account, states.state,
                   coalesce(ended.n, 0) AS value
            FROM pa CROSS JOIN states LEFT JOIN ended ON ended.p = pa.p AND ended.a = pa.a AND ended.state = states.state""",
        requires=("jobs",),
    ),
    Metric(
        name="slurmscope_job_requeues_total",
        type="counter",
        unit="",
        help="Requeues so far: allocation attempts after the first (sacct --duplicates), per partition and account.",
        labels=("cluster", "partition", "account"),
        source="jobs (sacct, attempt > 1, submit_time <= now)",
        query="""SELECT $cluster AS cluster, coalesce("partition", '') AS "partition", coalesce(account, '') AS account,
                        count(*) FILTER (WHERE attempt > 1) AS value
                 FROM jobs WHERE cluster = $cluster AND submit_time <= $now GROUP BY ALL""",
        requires=("jobs",),
    ),
    Metric(
        name="slurmscope_jobs_ended_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds (elapsed x GPUs) of attempts that reached a terminal state so far, per state.",
        labels=("cluster", "partition", "account", "state"),
        source="jobs (sacct, end_time <= now)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
        f" state, sum(coalesce(elapsed_seconds, 0) * coalesce(gpus, 0)) AS value FROM jobs"
        f" WHERE cluster = $cluster AND end_time <= $now AND state IN {TERMINAL_STATES} GROUP BY ALL",
        requires=("jobs",),
    ),
    Metric(
        name="slurmscope_job_wait_seconds",
        type="gauge",
        unit="seconds",
        help="Wait (start - eligible) percentiles (50, 90, 99; a gauge, not a summary) of jobs that started on the latest day, per partition, account,"
        " GPU class (GPUs requested: 0, 1, 2-4, 5-8, 9-16, 17+) and model.",
        labels=("cluster", "partition", "account", "gpu_class", "gpu_model", "percentile"),
        source="mart_wait_times (latest day <= now)",
        query="""
            WITH w AS (SELECT * FROM mart_wait_times WHERE cluster = $cluster
                       AND day = (SELECT max(day) FROM mart_wait_times WHERE cluster = $cluster
                                  AND day <= CAST($now AS DATE)))
            SELECT cluster, "partition", account, gpu_class, gpu_model, q.percentile,
                   CASE q.percentile WHEN '50' THEN p50_seconds WHEN '90' THEN p90_seconds ELSE p99_seconds END AS value
            FROM w, (VALUES ('50'), ('90'), ('99')) q(percentile)""",
        requires=("mart_wait_times",),
    ),
    Metric(
        name="slurmscope_job_wait_started_jobs",
        type="gauge",
        unit="",
        help="Jobs the wait-time quantiles of the latest day are computed from (small counts make noisy quantiles).",
        labels=("cluster", "partition", "account", "gpu_class", "gpu_model"),
        source="mart_wait_times (latest day <= now)",
        query="""SELECT cluster, "partition", account, gpu_class, gpu_model, jobs AS value FROM mart_wait_times
                 WHERE cluster = $cluster AND day = (SELECT max(day) FROM mart_wait_times WHERE cluster = $cluster
                                                     AND day <= CAST($now AS DATE))""",
        requires=("mart_wait_times",),
    ),
    # ---- usage and cost counters ----------------------------------------------------------------------
    Metric(
        name="slurmscope_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds allocated so far, running allocations included; grows at every pipeline run, never decreases.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        query='SELECT cluster, account, "partition", gpu_model, gpu_seconds_total AS value FROM mart_usage_counters'
        " WHERE cluster = $cluster AND updated_at <= $now",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_cost_usd_total",
        type="counter",
        unit="usd",
        help="Cost of the allocated GPU-seconds so far at the configured rates; never decreases.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        query='SELECT cluster, account, "partition", gpu_model, cost_usd_total AS value FROM mart_usage_counters'
        " WHERE cluster = $cluster AND updated_at <= $now",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_gpu_seconds_correction_seconds",
        type="gauge",
        unit="seconds",
        help="Recomputed minus reported GPU-seconds (<= 0): a correction the monotone counter could not apply.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        query='SELECT cluster, account, "partition", gpu_model, gpu_seconds_correction AS value FROM mart_usage_counters'
        " WHERE cluster = $cluster AND updated_at <= $now",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_cost_correction_usd",
        type="gauge",
        unit="usd",
        help="Recomputed minus reported cost (<= 0): a correction the monotone cost counter could not apply.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        query='SELECT cluster, account, "partition", gpu_model, cost_usd_correction AS value FROM mart_usage_counters'
        " WHERE cluster = $cluster AND updated_at <= $now",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_capacity_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU capacity integrated over time per partition, model and state (allocated, idle, down, reserved),"
        " from the daily capacity mart; the current day counts what the last pipeline run saw.",
        labels=("cluster", "partition", "gpu_model", "state"),
        source="mart_capacity_daily (days <= today)",
        query="""
            SELECT cluster, "partition", gpu_model, s.state,
                   sum(CASE s.state WHEN 'allocated' THEN allocated_gpu_seconds WHEN 'idle' THEN idle_gpu_seconds
                                    WHEN 'down' THEN down_gpu_seconds ELSE reserved_gpu_seconds END) AS value
            FROM mart_capacity_daily, (VALUES ('allocated'), ('idle'), ('down'), ('reserved')) s(state)
            WHERE cluster = $cluster AND day <= CAST($now AS DATE) GROUP BY ALL""",
        requires=("mart_capacity_daily",),
    ),
    Metric(
        name="slurmscope_account_gpu_energy_joules_total",
        type="counter",
        unit="joules",
        help="Energy drawn by the GPUs an account's jobs held, from NVML energy counters (else mean power),"
        " where NVML agents sample; days up to today, today as of the last pipeline run.",
        labels=("cluster", "account"),
        source="mart_cost_efficiency_daily (days <= today)",
        query="SELECT cluster, account, sum(energy_joules) AS value FROM mart_cost_efficiency_daily"
        " WHERE cluster = $cluster AND day <= CAST($now AS DATE) GROUP BY ALL",
        requires=("mart_cost_efficiency_daily",),
    ),
    Metric(
        name="slurmscope_account_energy_cost_usd_total",
        type="counter",
        unit="usd",
        help="That energy priced at billing.energy_usd_per_kwh x billing.pue (informational, not invoiced).",
        labels=("cluster", "account"),
        source="mart_cost_efficiency_daily (days <= today)",
        query="SELECT cluster, account, sum(energy_cost_usd) AS value FROM mart_cost_efficiency_daily"
        " WHERE cluster = $cluster AND day <= CAST($now AS DATE) GROUP BY ALL",
        requires=("mart_cost_efficiency_daily",),
    ),
    Metric(
        name="slurmscope_allocated_idle_cost_usd_total",
        type="counter",
        unit="usd",
        help="Dollars of allocated-but-idle GPU time: sampled GPU-minutes under drift.idle_util_percent, at the"
        " job's rate.",
        labels=("cluster", "account"),
        source="mart_cost_efficiency_daily (days <= today)",
        query="SELECT cluster, account, sum(idle_cost_usd) AS value FROM mart_cost_efficiency_daily"
        " WHERE cluster = $cluster AND day <= CAST($now AS DATE) GROUP BY ALL",
        requires=("mart_cost_efficiency_daily",),
    ),
    Metric(
        name="slurmscope_cost_per_useful_gpu_hour_usd",
        type="gauge",
        unit="usd",
        help="Effective cost per useful GPU-hour this month so far: cost of the NVML-sampled allocations /"
        " (held GPU-hours x utilisation); absent for accounts with no sampled use.",
        labels=("cluster", "account"),
        source="mart_cost_efficiency_daily (month of now, days <= today)",
        query="""SELECT cluster, account, sum(sampled_cost_usd) / (sum(useful_gpu_seconds) / 3600) AS value
                 FROM mart_cost_efficiency_daily
                 WHERE cluster = $cluster AND day <= CAST($now AS DATE)
                   AND day >= date_trunc('month', CAST($now AS DATE)) GROUP BY ALL
                 HAVING sum(useful_gpu_seconds) > 0""",
        requires=("mart_cost_efficiency_daily",),
    ),
    # ---- occupancy and backfill (marts) ---------------------------------------------------------------
    Metric(
        name="slurmscope_occupancy_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds per occupancy kind so far: idle (available, unallocated), hole (idle while a pending"
        " GPU job would have fit), backfill (held by backfill-started attempts).",
        labels=("cluster", "partition", "gpu_model", "kind"),
        source="mart_occupancy (buckets started before now)",
        query="""
            SELECT cluster, "partition", gpu_model, k.kind,
                   sum(CASE k.kind WHEN 'idle' THEN coalesce(idle_gpu_seconds, 0)
                                   WHEN 'hole' THEN coalesce(hole_gpu_seconds, 0)
                                   ELSE backfill_gpu_seconds END) AS value
            FROM mart_occupancy, (VALUES ('idle'), ('hole'), ('backfill')) k(kind)
            WHERE cluster = $cluster AND bucket_start < $now GROUP BY ALL""",
        requires=("mart_occupancy",),
    ),
    Metric(
        name="slurmscope_backfill_hole_filled_ratio",
        type="gauge",
        unit="ratio",
        help="Share of schedule holes backfill filled in the latest occupancy bucket: backfill / (backfill + hole).",
        labels=("cluster", "partition", "gpu_model"),
        source="mart_occupancy (latest bucket before now)",
        query="""SELECT cluster, "partition", gpu_model, hole_filled_share AS value FROM mart_occupancy
                 WHERE cluster = $cluster AND hole_filled_share IS NOT NULL
                   AND bucket_start = (SELECT max(bucket_start) FROM mart_occupancy WHERE cluster = $cluster
                                       AND bucket_start < $now)""",
        requires=("mart_occupancy",),
    ),
    Metric(
        name="slurmscope_backfill_started_jobs_ratio",
        type="gauge",
        unit="ratio",
        help="Share of the latest day's started attempts that backfill started, per partition.",
        labels=("cluster", "partition"),
        source="mart_backfill_daily (latest day <= now)",
        query="""SELECT cluster, "partition", coalesce(share, 0) AS value FROM mart_backfill_daily
                 WHERE cluster = $cluster AND sched_by = 'backfill'
                   AND day = (SELECT max(day) FROM mart_backfill_daily WHERE cluster = $cluster
                              AND day <= CAST($now AS DATE))""",
        requires=("mart_backfill_daily",),
    ),
    Metric(
        name="slurmscope_scheduler_jobs_total",
        type="counter",
        unit="",
        help="Scheduler job events so far (sdiag deltas summed across daily resets and restarts): submitted,"
        " started, completed, canceled, failed, backfilled.",
        labels=("cluster", "event"),
        source="mart_sched_deltas (snapshots <= now)",
        query="""
            SELECT cluster, e.event,
                   sum(coalesce(CASE e.event WHEN 'submitted' THEN jobs_submitted WHEN 'started' THEN jobs_started
                                WHEN 'completed' THEN jobs_completed WHEN 'canceled' THEN jobs_canceled
                                WHEN 'failed' THEN jobs_failed ELSE bf_backfilled_jobs END, 0)) AS value
            FROM mart_sched_deltas,
                 (VALUES ('submitted'), ('started'), ('completed'), ('canceled'), ('failed'), ('backfilled')) e(event)
            WHERE cluster = $cluster AND snapshot_time <= $now GROUP BY ALL""",
        requires=("mart_sched_deltas",),
    ),
    Metric(
        name="slurmscope_scheduler_cycles_total",
        type="counter",
        unit="",
        help="Scheduling cycles so far per scheduler (main, backfill), summed from sdiag deltas.",
        labels=("cluster", "scheduler"),
        source="mart_sched_deltas (snapshots <= now)",
        query="""
            SELECT cluster, s.scheduler,
                   sum(coalesce(CASE s.scheduler WHEN 'main' THEN main_cycles ELSE bf_cycles END, 0)) AS value
            FROM mart_sched_deltas, (VALUES ('main'), ('backfill')) s(scheduler)
            WHERE cluster = $cluster AND snapshot_time <= $now GROUP BY ALL""",
        requires=("mart_sched_deltas",),
    ),
    # ---- reliability (marts) --------------------------------------------------------------------------
    Metric(
        name="slurmscope_fault_killed_jobs_total",
        type="counter",
        unit="",
        help="Job attempts killed by a node or GPU fault so far, per partition and fault kind.",
        labels=("cluster", "partition", "fault_kind"),
        source="mart_fault_impact (fault_time <= now)",
        query='SELECT cluster, coalesce("partition", \'\') AS "partition", fault_kind, count(*) AS value'
        " FROM mart_fault_impact WHERE cluster = $cluster AND fault_time <= $now GROUP BY ALL",
        requires=("mart_fault_impact",),
    ),
    Metric(
        name="slurmscope_fault_lost_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds of attempts killed by node or GPU faults so far, per partition and fault kind.",
        labels=("cluster", "partition", "fault_kind"),
        source="mart_fault_impact (fault_time <= now)",
        query='SELECT cluster, coalesce("partition", \'\') AS "partition", fault_kind,'
        " sum(gpu_hours_lost) * 3600 AS value FROM mart_fault_impact"
        " WHERE cluster = $cluster AND fault_time <= $now GROUP BY ALL",
        requires=("mart_fault_impact",),
    ),
    Metric(
        name="slurmscope_node_failures",
        type="gauge",
        unit="",
        help="DOWN/DRAIN/FAIL failures of the node over the observed history (as of the last pipeline run).",
        labels=("cluster", "node"),
        source="mart_node_reliability",
        query="SELECT cluster, node, failures AS value FROM mart_node_reliability WHERE cluster = $cluster",
        requires=("mart_node_reliability",),
    ),
    Metric(
        name="slurmscope_node_mtbf_seconds",
        type="gauge",
        unit="seconds",
        help="Mean time between failures of the node (up-seconds / failures), for nodes that failed.",
        labels=("cluster", "node"),
        source="mart_node_reliability",
        query="SELECT cluster, node, mtbf_seconds AS value FROM mart_node_reliability WHERE cluster = $cluster",
        requires=("mart_node_reliability",),
    ),
    Metric(
        name="slurmscope_node_mttr_seconds",
        type="gauge",
        unit="seconds",
        help="Mean time to repair of the node's ended failures.",
        labels=("cluster", "node"),
        source="mart_node_reliability",
        query="SELECT cluster, node, mttr_seconds AS value FROM mart_node_reliability WHERE cluster = $cluster",
        requires=("mart_node_reliability",),
    ),
    Metric(
        name="slurmscope_goodput_lost_ratio",
        type="gauge",
        unit="ratio",
        help="Share of GPU time lost to node failures for jobs of N nodes: expected (Young-Daly checkpointing at"
        " the measured MTBF) and measured (fault-killed GPU-hours / all GPU-hours).",
        labels=("cluster", "partition", "nodes", "kind"),
        source="mart_goodput",
        query="""
            SELECT cluster, "partition", CAST(nodes AS VARCHAR) AS nodes, k.kind,
                   CASE k.kind WHEN 'expected' THEN expected_lost_share ELSE measured_lost_share END AS value
            FROM mart_goodput, (VALUES ('expected'), ('measured')) k(kind) WHERE cluster = $cluster""",
        requires=("mart_goodput",),
    ),
    # ---- scheduler (sdiag) ----------------------------------------------------------------------------
    _sdiag("slurmscope_sdiag_server_threads", "server_thread_count", "", "slurmctld server threads (sdiag)."),
    _sdiag(
        "slurmscope_sdiag_agent_queue_size", "agent_queue_size", "", "slurmctld agent queue size (sdiag)."
    ),
    _sdiag(
        "slurmscope_sdiag_jobs_pending", "jobs_pending", "", "Pending jobs as slurmctld counts them (sdiag)."
    ),
    _sdiag(
        "slurmscope_sdiag_jobs_running", "jobs_running", "", "Running jobs as slurmctld counts them (sdiag)."
    ),
    _sdiag(
        "slurmscope_sdiag_main_last_cycle_seconds",
        "main_last_cycle_us",
        "seconds",
        "Duration of the last main scheduling cycle (sdiag).",
        " / 1e6",
    ),
    _sdiag(
        "slurmscope_sdiag_main_mean_cycle_seconds",
        "main_mean_cycle_us",
        "seconds",
        "Mean main scheduling cycle since the last sdiag reset.",
        " / 1e6",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_last_cycle_seconds",
        "bf_last_cycle_us",
        "seconds",
        "Duration of the last backfill cycle (sdiag).",
        " / 1e6",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_mean_cycle_seconds",
        "bf_mean_cycle_us",
        "seconds",
        "Mean backfill cycle since the last sdiag reset.",
        " / 1e6",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_last_depth",
        "bf_last_depth",
        "",
        "Jobs the last backfill cycle looked at (sdiag 'Last depth cycle').",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_queue_length",
        "bf_last_queue_length",
        "",
        "Queue length of the last backfill cycle (sdiag).",
    ),
    _sdiag(
        "slurmscope_sdiag_backfilled_jobs",
        "bf_backfilled_jobs",
        "",
        "Jobs started by backfill since slurmctld started (sdiag; resets on restart, hence a gauge).",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_last_cycle_timestamp_seconds",
        "epoch(bf_last_cycle_when)",
        "seconds",
        "When the last backfill cycle ran (sdiag); a stalled backfill scheduler stops moving it.",
    ),
    # ---- fair-share (sshare) --------------------------------------------------------------------------
    _fairshare(
        "slurmscope_fairshare_shares_ratio",
        "norm_shares",
        "Normalised shares of the account (sshare NormShares).",
    ),
    _fairshare(
        "slurmscope_fairshare_usage_ratio",
        "norm_usage",
        "Normalised usage of the account (sshare NormUsage).",
    ),
    _fairshare(
        "slurmscope_fairshare_effective_usage_ratio",
        "effectv_usage",
        "Effective usage of the account (sshare EffectvUsage).",
    ),
    _fairshare(
        "slurmscope_fairshare_level_fs",
        "level_fs",
        "Fair-tree LevelFS of the account: shares over usage among siblings; below 1 means over-served.",
        "",
    ),
    Metric(
        name="slurmscope_fairshare_factor_ratio",
        type="gauge",
        unit="ratio",
        help="Fair-share factor of the account as slurmscope recomputes it (mart_fairshare, source 'computed'):"
        " set under the classic algorithm; Fair Tree gives accounts LevelFS instead.",
        labels=("cluster", "account"),
        source="mart_fairshare (latest as_of <= now, account rows)",
        query="""SELECT cluster, account, fairshare AS value FROM mart_fairshare
                 WHERE cluster = $cluster AND source = 'computed' AND "user" = '' AND fairshare IS NOT NULL
                   AND as_of = (SELECT max(as_of) FROM mart_fairshare WHERE cluster = $cluster
                                AND source = 'computed' AND as_of <= $now)""",
        requires=("mart_fairshare",),
    ),
    Metric(
        name="slurmscope_fairshare_user_factor_ratio",
        type="gauge",
        unit="ratio",
        help="Fair-share factor of each user in each account (sshare FairShare); served only with exporter.user_labels.",
        labels=("cluster", "account", "user"),
        source="shares (latest sshare, user rows)",
        query=f'SELECT cluster, account, "user", fairshare AS value FROM shares WHERE {_SHARES_LATEST}'
        f" AND \"user\" <> '' AND fairshare IS NOT NULL",
        requires=("shares",),
        user_labels=True,
    ),
    Metric(
        name="slurmscope_fairshare_usage_share_ratio",
        type="gauge",
        unit="ratio",
        help="The account's share of cluster usage over trailing windows (7d, 30d; undecayed), latest day.",
        labels=("cluster", "account", "window"),
        source="mart_fairshare_drift (latest day <= now)",
        query="""
            WITH d AS (SELECT * FROM mart_fairshare_drift WHERE cluster = $cluster
                       AND day = (SELECT max(day) FROM mart_fairshare_drift WHERE cluster = $cluster
                                  AND day <= CAST($now AS DATE)))
            SELECT cluster, account, '7d' AS "window", usage_share_7d AS value FROM d
            UNION ALL SELECT cluster, account, '30d', usage_share_30d FROM d""",
        requires=("mart_fairshare_drift",),
    ),
    Metric(
        name="slurmscope_fairshare_target_share_ratio",
        type="gauge",
        unit="ratio",
        help="The account's target share of the cluster (product of normalised shares from the root).",
        labels=("cluster", "account"),
        source="mart_fairshare_drift (latest day <= now)",
        query="""SELECT cluster, account, target_share AS value FROM mart_fairshare_drift WHERE cluster = $cluster
                 AND day = (SELECT max(day) FROM mart_fairshare_drift WHERE cluster = $cluster
                            AND day <= CAST($now AS DATE))""",
        requires=("mart_fairshare_drift",),
    ),
    Metric(
        name="slurmscope_fairshare_starved_seconds",
        type="gauge",
        unit="seconds",
        help="How long the account has been starved (7-day usage share far below target), in whole days, latest day.",
        labels=("cluster", "account"),
        source="mart_fairshare_drift (latest day <= now)",
        query="""SELECT cluster, account, days_starved * 86400 AS value FROM mart_fairshare_drift WHERE cluster = $cluster
                 AND day = (SELECT max(day) FROM mart_fairshare_drift WHERE cluster = $cluster
                            AND day <= CAST($now AS DATE))""",
        requires=("mart_fairshare_drift",),
    ),
    # ---- controller, collectors and pipelines ------------------------------------------------------
    Metric(
        name="slurmscope_controller_up",
        type="gauge",
        unit="",
        help="1 when scontrol ping reports the controller up, per controller host and role.",
        labels=("cluster", "host", "role"),
        source="controller_pings (latest scontrol ping)",
        query=f"SELECT cluster, host, coalesce(role, '') AS role, CASE WHEN up THEN 1 ELSE 0 END AS value"
        f" FROM controller_pings WHERE {_latest('controller_pings')}",
        requires=("controller_pings",),
    ),
    Metric(
        name="slurmscope_collector_success",
        type="gauge",
        unit="",
        help="1 when the collector's last run succeeded, 0 when it failed or timed out.",
        labels=("cluster", "collector"),
        source="collector_runs (last run per collector)",
        query="SELECT cluster, collector, CASE WHEN status = 'ok' THEN 1 ELSE 0 END AS value FROM collector_runs"
        " WHERE cluster = $cluster AND started_at <= $now"
        " QUALIFY row_number() OVER (PARTITION BY collector ORDER BY started_at DESC, run_id DESC) = 1",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_collector_duration_seconds",
        type="gauge",
        unit="seconds",
        help="How long the collector's last run took.",
        labels=("cluster", "collector"),
        source="collector_runs (last run per collector)",
        query="SELECT cluster, collector, duration_seconds AS value FROM collector_runs"
        " WHERE cluster = $cluster AND started_at <= $now AND duration_seconds IS NOT NULL"
        " QUALIFY row_number() OVER (PARTITION BY collector ORDER BY started_at DESC, run_id DESC) = 1",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_collector_last_success_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="When the collector last finished a successful run.",
        labels=("cluster", "collector"),
        source="collector_runs",
        query="SELECT cluster, collector, max(epoch(coalesce(finished_at, started_at))) AS value FROM collector_runs"
        " WHERE cluster = $cluster AND status = 'ok' AND coalesce(finished_at, started_at) <= $now GROUP BY ALL",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_pipeline_last_success_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="The `now` of the pipeline's last successful run (incremental or full).",
        labels=("cluster", "pipeline"),
        source="pipeline_runs",
        query="SELECT cluster, pipeline, max(epoch(run_at)) AS value FROM pipeline_runs"
        " WHERE cluster = $cluster AND status = 'ok' AND run_at <= $now GROUP BY ALL",
        requires=("pipeline_runs",),
    ),
    # ---- efficiency and drift (marts) ------------------------------------------------------------------
    Metric(
        name="slurmscope_allocated_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds held by jobs, by kind: sampled (NVML saw the GPU) and idle (held with mean utilisation"
        " under drift.idle_util_percent); days up to today, today as of the last pipeline run.",
        labels=("cluster", "account", "kind"),
        source="mart_idle_gpus_daily (days <= today)",
        query="""
            SELECT cluster, coalesce(account, '') AS account, k.kind,
                   sum(CASE k.kind WHEN 'sampled' THEN sampled_gpu_hours ELSE idle_gpu_hours END) * 3600 AS value
            FROM mart_idle_gpus_daily, (VALUES ('sampled'), ('idle')) k(kind)
            WHERE cluster = $cluster AND day <= CAST($now AS DATE) GROUP BY ALL""",
        requires=("mart_idle_gpus_daily",),
    ),
    Metric(
        name="slurmscope_zero_util_jobs_total",
        type="counter",
        unit="",
        help="Job attempts that held GPUs without ever using them (no minute reached the idle threshold).",
        labels=("cluster", "account"),
        source="mart_job_efficiency (alloc_end <= now)",
        query="""SELECT cluster, coalesce(account, '') AS account, count(*) FILTER (WHERE zero_util) AS value
                 FROM mart_job_efficiency WHERE cluster = $cluster AND alloc_end <= $now GROUP BY ALL""",
        requires=("mart_job_efficiency",),
    ),
    Metric(
        name="slurmscope_drift_score",
        type="gauge",
        unit="",
        help="Drift score of a signal for an entity (larger is worse; robust z for z-score methods), latest as_of.",
        labels=("cluster", "signal", "entity_type", "entity", "node"),
        source="mart_drift (latest as_of <= now per signal and entity)",
        query="""SELECT cluster, signal, entity_type, entity, coalesce(node, '') AS node, score AS value
                 FROM mart_drift WHERE cluster = $cluster AND as_of <= $now
                 QUALIFY row_number() OVER (PARTITION BY signal, entity ORDER BY as_of DESC) = 1""",
        requires=("mart_drift",),
    ),
    Metric(
        name="slurmscope_drift_breached",
        type="gauge",
        unit="",
        help="1 when the signal's score is above its configured threshold (config drift.*), latest as_of.",
        labels=("cluster", "signal", "entity_type", "entity", "node"),
        source="mart_drift (latest as_of <= now per signal and entity)",
        query="""SELECT cluster, signal, entity_type, entity, coalesce(node, '') AS node,
                        CASE WHEN breached THEN 1 ELSE 0 END AS value
                 FROM mart_drift WHERE cluster = $cluster AND as_of <= $now
                 QUALIFY row_number() OVER (PARTITION BY signal, entity ORDER BY as_of DESC) = 1""",
        requires=("mart_drift",),
    ),
    # ---- health verdicts (mart_node_health, mart_gpu_health) -------------------------------------------
    Metric(
        name="slurmscope_node_health_status",
        type="gauge",
        unit="",
        help="The node's health verdict, one series per status (ok, degraded, failing): 1 for the verdict in"
        " force, 0 for the others (a StateSet). Rules: docs/pipelines.md#health.",
        labels=("cluster", "node", "status"),
        source="mart_node_health (run in force at now)",
        query=f"""
            WITH cur AS ({_HEALTH_NOW.format(table="mart_node_health", key="node")})
            SELECT $cluster AS cluster, node, s.status, CASE WHEN cur.status = s.status THEN 1 ELSE 0 END AS value
            FROM cur, (VALUES ('ok'), ('degraded'), ('failing')) s(status) ORDER BY node, s.status""",
        requires=("mart_node_health",),
    ),
    Metric(
        name="slurmscope_node_health_info",
        type="info",
        unit="",
        help="Why the node has its verdict: `reason` is the first rule that holds (failing rules first; '' when"
        " ok), from a fixed list (gpu_failing, gpu_missing, xid_critical, slurm_down, gpu_degraded,"
        " slurm_drain, slurm_unavailable).",
        labels=("cluster", "node", "status", "reason"),
        source="mart_node_health (run in force at now)",
        query=f"""
            WITH cur AS ({_HEALTH_NOW.format(table="mart_node_health", key="node")})
            SELECT $cluster AS cluster, node, status, reason, 1 AS value FROM cur ORDER BY node""",
        requires=("mart_node_health",),
    ),
    Metric(
        name="slurmscope_gpu_health_status",
        type="gauge",
        unit="",
        help="The GPU's health verdict, one series per status (ok, degraded, failing): 1 for the verdict in"
        " force, 0 for the others. Rules: docs/pipelines.md#health.",
        labels=("cluster", "node", "gpu", "gpu_model", "status", "source"),
        source="mart_gpu_health (run in force at now)",
        query=f"""
            WITH cur AS ({_GPU_HEALTH_NOW})
            SELECT $cluster AS cluster, node, gpu, gpu_model, s.status, 'central' AS source,
                   CASE WHEN cur.status = s.status THEN 1 ELSE 0 END AS value
            FROM cur, (VALUES ('ok'), ('degraded'), ('failing')) s(status) ORDER BY node, gpu, s.status""",
        requires=("mart_gpu_health",),
    ),
    Metric(
        name="slurmscope_gpu_health_info",
        type="info",
        unit="",
        help="Why the GPU has its verdict: `reason` is the first rule that holds ('' when ok), from a fixed"
        " list (fallen_off_bus, row_remap_failed, uncorrectable_ecc, xid_critical, overheating,"
        " row_remap_pending, xid_other, throttling, hot, telemetry_stale).",
        labels=("cluster", "node", "gpu", "gpu_model", "status", "reason", "source"),
        source="mart_gpu_health (run in force at now)",
        query=f"""
            WITH cur AS ({_GPU_HEALTH_NOW})
            SELECT $cluster AS cluster, node, gpu, gpu_model, status, reason, 'central' AS source, 1 AS value
            FROM cur ORDER BY node, gpu""",
        requires=("mart_gpu_health",),
    ),
    # ---- GPU health (NVML) ----------------------------------------------------------------------------
    _gpu(
        "slurmscope_gpu_utilization_ratio",
        "util_gpu_mean / 100.0",
        "ratio",
        "Mean GPU utilisation over the GPU's latest sampled minute (NVML).",
    ),
    _gpu(
        "slurmscope_gpu_temperature_celsius",
        "temp_gpu_max_celsius",
        "celsius",
        "Highest GPU temperature in the latest sampled minute (NVML).",
    ),
    _gpu(
        "slurmscope_gpu_power_watts",
        "power_mean_watts",
        "watts",
        "Mean GPU power in the latest sampled minute.",
    ),
    _gpu(
        "slurmscope_gpu_throttle_ratio",
        "least(coalesce(throttle_seconds, 0) / 60.0, 1.0)",
        "ratio",
        "Share of the latest sampled minute the GPU spent with clocks throttled (thermal or power).",
    ),
    _gpu(
        "slurmscope_gpu_row_remap_failed",
        "CASE WHEN remapped_failed THEN 1 ELSE 0 END",
        "",
        "1 when the GPU reports a failed row remapping (it needs replacing).",
    ),
    _gpu(
        "slurmscope_gpu_row_remap_pending",
        "CASE WHEN remapped_pending THEN 1 ELSE 0 END",
        "",
        "1 when the GPU has a row remapping pending (needs a GPU reset).",
    ),
    Metric(
        name="slurmscope_gpu_ecc_errors_total",
        type="counter",
        unit="",
        help="ECC errors the GPU has counted (NVML aggregate counter), by type corrected or uncorrected.",
        labels=("cluster", "node", "gpu", "gpu_model", "type", "source"),
        source="gpu_samples (latest minute per GPU)",
        query=f"""
            WITH g AS (SELECT * FROM {GPU_LATEST_VIEW})
            SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
                   'corrected' AS type, {CENTRAL}, ecc_corrected_total AS value FROM g
            WHERE ecc_corrected_total IS NOT NULL
            UNION ALL
            SELECT cluster, node, CAST(gpu_index AS VARCHAR), coalesce(model, ''), 'uncorrected', 'central',
                   ecc_uncorrected_total FROM g WHERE ecc_uncorrected_total IS NOT NULL""",
        requires=("gpu_samples",),
    ),
    Metric(
        name="slurmscope_node_gpus_visible",
        type="gauge",
        unit="",
        help="GPUs NVML sees on the node (latest inventory of the node agent); compare with the GRES count.",
        labels=("cluster", "node"),
        source="gpu_inventory (latest per node)",
        query="WITH l AS (SELECT node, max(seen_at) AS t FROM gpu_inventory WHERE cluster = $cluster"
        " AND seen_at <= $now GROUP BY node)"
        " SELECT i.cluster, i.node, count(DISTINCT i.gpu_uuid) AS value FROM gpu_inventory i"
        " JOIN l ON i.node = l.node AND i.seen_at = l.t WHERE i.cluster = $cluster GROUP BY ALL",
        requires=("gpu_inventory",),
    ),
    Metric(
        name="slurmscope_gpu_xid_events_total",
        type="counter",
        unit="",
        help="GPU XID errors seen so far per node and XID code (NVML events and kernel log).",
        labels=("cluster", "node", "xid", "source"),
        source="gpu_events (event_type = 'xid')",
        query=f"SELECT cluster, node, CAST(xid AS VARCHAR) AS xid, {CENTRAL}, count(*) AS value FROM gpu_events"
        " WHERE cluster = $cluster AND event_type = 'xid' AND xid IS NOT NULL AND event_time <= $now GROUP BY ALL",
        requires=("gpu_events",),
    ),
    Metric(
        name="slurmscope_gpu_lost_events_total",
        type="counter",
        unit="",
        help="Times a GPU fell off the bus (NVML GPU lost, XID 79) so far, per node.",
        labels=("cluster", "node", "source"),
        source="gpu_events (event_type = 'gpu_lost' or XID 79)",
        query=f"SELECT cluster, node, {CENTRAL}, count(*) AS value FROM gpu_events WHERE cluster = $cluster"
        " AND (event_type = 'gpu_lost' OR (event_type = 'xid' AND xid = 79)) AND event_time <= $now GROUP BY ALL",
        requires=("gpu_events",),
    ),
)


def by_name() -> dict[str, Metric]:
    return {m.name: m for m in CATALOG}


def render_markdown(extra: tuple[Metric, ...] = ()) -> str:
    """docs/metrics.md: the reference generated from this catalog (a test keeps the committed file current)."""
    lines = [
        "# Metrics reference",
        "",
        "Generated from `slurmscope/catalog.py` by `python -m slurmscope.catalog > docs/metrics.md`; do not edit.",
        "",
        "Every family carries `cluster`. Labels are bounded: no job id; `user` only on families marked",
        "*user labels*, which are served only when `exporter.user_labels = true`. Counters grow with running",
        "allocations at every pipeline run and never decrease; corrections are separate gauges. A family whose",
        "source table is missing has no samples and `slurmscope_exporter_family_up{family=...} 0`.",
        "",
        'Every `slurmscope_gpu_*` telemetry and health family carries `source="central"`: the node agents',
        '(`slurmscope agent`, docs/nvml.md) serve some of the same names live with `source="agent"` and the same',
        "`cluster`, so dashboards and rules select one source and never add the two (docs/dashboards.md). The",
        "allocation counters `slurmscope_gpu_seconds_*` come from Slurm, not NVML, and have no `source`.",
        "",
        "| Metric | Type | Unit | Labels | Source | Help |",
        "|---|---|---|---|---|---|",
    ]
    for m in (*CATALOG, *extra):
        labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
        if m.user_labels:
            labels += " (*user labels*)"
        help_ = m.help.replace("|", "\\|")
        lines.append(f"| `{m.name}` | {m.type} | {m.unit or '-'} | {labels} | {m.source} | {help_} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    from slurmscope.exporter import INTERNAL

    print(render_markdown(INTERNAL), end="")
