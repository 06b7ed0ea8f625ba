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

MetricType = Literal["gauge", "counter", "info"]

# Node states Slurm reports for nodes that cannot run work (sinfo base states and flags).
UNAVAILABLE_STATES = "('DOWN','DRAINED','DRAINING','DRAIN','FAIL','FAILING','MAINT','UNKNOWN','FUTURE','INVAL')"
UNAVAILABLE_FLAG_SQL = (
    "(coalesce(state_flags, '') SIMILAR TO '.*(DRAIN|NOT_RESPONDING|FAIL|MAINT).*'"
    f" OR upper(coalesce(state, '')) IN {UNAVAILABLE_STATES})"
)
# The display state used as the `state` label of node metrics: what an operator calls the node.
NODE_STATE_SQL = (
    "CASE WHEN upper(coalesce(state, '')) IN ('DOWN','FAIL','FAILING')"
    " OR coalesce(state_flags, '') LIKE '%NOT_RESPONDING%' THEN 'down'"
    " WHEN coalesce(state_flags, '') LIKE '%DRAIN%' OR upper(coalesce(state, '')) LIKE 'DRAIN%' THEN 'drain'"
    " WHEN upper(coalesce(state, '')) IN ('MAINT','UNKNOWN','FUTURE','INVAL') THEN 'other'"
    " ELSE lower(coalesce(state, 'unknown')) END"
)
TERMINAL_STATES = (
    "('COMPLETED','FAILED','CANCELLED','TIMEOUT','NODE_FAIL','OUT_OF_MEMORY','PREEMPTED','BOOT_FAIL','DEADLINE')"
)


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


def _sdiag(name: str, column: str, unit: str, help_: str, scale: str = "") -> Metric:
    return Metric(
        name=name, type="gauge", unit=unit, help=help_, labels=("cluster",), source="sched_stats (latest sdiag)",
        query=f"SELECT cluster, {column}{scale} AS value FROM sched_stats WHERE {_SDIAG_LATEST} AND {column} IS NOT NULL",
        requires=("sched_stats",),
    )


def _gpu(name: str, expr: str, unit: str, help_: str) -> Metric:
    return Metric(
        name=name, type="gauge", unit=unit, help=help_, labels=("cluster", "node", "gpu", "gpu_model"),
        source="gpu_samples (latest minute per GPU, at most 15 min old)",
        query=f"SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,"
              f" {expr} AS value FROM gpu_samples WHERE {_GPU_LATEST}",
        requires=("gpu_samples",),
    )


def _fairshare(name: str, column: str, help_: str, unit: str = "ratio") -> Metric:
    return Metric(
        name=name, type="gauge", unit=unit, help=help_, labels=("cluster", "account"),
        source="shares (latest sshare, account rows)",
        query=f"SELECT cluster, account, {column} AS value FROM shares WHERE {_SHARES_LATEST}"
              f" AND \"user\" = '' AND {column} IS NOT NULL",
        requires=("shares",),
    )


CATALOG: tuple[Metric, ...] = (
    # ---- nodes (sinfo) ----------------------------------------------------------------------------------
    Metric(
        name="slurmscope_node_state_info", type="info", unit="",
        help="Each node's state in each partition with its flags and reason, from the latest sinfo snapshot.",
        labels=("cluster", "node", "partition", "state", "state_raw", "reason"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, \"partition\", {NODE_STATE_SQL} AS state, coalesce(state_raw, '') AS state_raw,"
              f" coalesce(reason, '') AS reason, 1 AS value FROM node_states WHERE {_NODE_LATEST}",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_nodes", type="gauge", unit="",
        help="Nodes per partition and state (idle, mixed, allocated, drain, down, other).",
        labels=("cluster", "partition", "state"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, \"partition\", {NODE_STATE_SQL} AS state, count(*) AS value FROM node_states"
              f" WHERE {_NODE_LATEST} GROUP BY ALL",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_down", type="gauge", unit="",
        help="1 when the node is DOWN or not responding, else 0 (one series per node).",
        labels=("cluster", "node"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, max(CASE WHEN {NODE_STATE_SQL} = 'down' THEN 1 ELSE 0 END) AS value"
              f" FROM node_states WHERE {_NODE_LATEST} GROUP BY ALL",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_unavailable_since_timestamp_seconds", type="gauge", unit="seconds",
        help="When the reason of a drained or down node was set (sinfo reason time), for nodes that are unavailable.",
        labels=("cluster", "node", "state"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, {NODE_STATE_SQL} AS state, max(epoch(reason_time)) AS value FROM node_states"
              f" WHERE {_NODE_LATEST} AND reason_time IS NOT NULL AND {NODE_STATE_SQL} IN ('drain', 'down') GROUP BY ALL",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_gpus_configured", type="gauge", unit="",
        help="GPUs Slurm has configured on the node (GRES), from the latest sinfo snapshot.",
        labels=("cluster", "node", "gpu_model"),
        source="node_states (latest sinfo)",
        query=f"SELECT cluster, node, coalesce(max(gpu_type), '') AS gpu_model, max(gpus_total) AS value FROM node_states"
              f" WHERE {_NODE_LATEST} AND gpus_total IS NOT NULL GROUP BY cluster, node",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_gpus", type="gauge", unit="",
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
        name="slurmscope_node_events_total", type="counter", unit="",
        help="Node DOWN/DRAIN events started so far (sacctmgr show event), per node and state.",
        labels=("cluster", "node", "state"),
        source="node_events",
        query="SELECT cluster, node, CASE WHEN upper(coalesce(state, '')) LIKE '%DOWN%' THEN 'down' ELSE 'drain' END"
              " AS state, count(*) AS value FROM node_events WHERE cluster = $cluster AND node <> ''"
              " AND time_start <= $now GROUP BY ALL",
        requires=("node_events",),
    ),
    # ---- queue (squeue) -------------------------------------------------------------------------------
    Metric(
        name="slurmscope_jobs_pending", type="gauge", unit="",
        help="Pending jobs per partition, account and Slurm reason, from the latest squeue snapshot.",
        labels=("cluster", "partition", "account", "reason"),
        source="pending_jobs (latest squeue)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
              f" coalesce(reason, '') AS reason, count(*) AS value FROM pending_jobs WHERE {_SQUEUE_LATEST}"
              f" AND state = 'PENDING' GROUP BY ALL",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_gpus_pending", type="gauge", unit="",
        help="GPUs requested by pending jobs per partition and account, from the latest squeue snapshot.",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
              f" sum(coalesce(gpus, 0)) AS value FROM pending_jobs WHERE {_SQUEUE_LATEST}"
              f" AND state = 'PENDING' GROUP BY ALL",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_jobs_running", type="gauge", unit="",
        help="Running jobs per partition and account, from the latest squeue snapshot.",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
              f" count(*) AS value FROM pending_jobs WHERE {_SQUEUE_LATEST} AND state = 'RUNNING' GROUP BY ALL",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_pending_oldest_submit_timestamp_seconds", type="gauge", unit="seconds",
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
        name="slurmscope_jobs_ended_total", type="counter", unit="",
        help="Job allocation attempts that reached a terminal state so far, per partition, account and state.",
        labels=("cluster", "partition", "account", "state"),
        source="jobs (sacct, end_time <= now)",
        query=f"SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
              f" state, count(*) AS value FROM jobs WHERE cluster = $cluster AND end_time <= $now"
              f" AND state IN {TERMINAL_STATES} GROUP BY ALL",
        requires=("jobs",),
    ),
    Metric(
        name="slurmscope_job_requeues_total", type="counter", unit="",
        help="Requeues so far: allocation attempts after the first (sacct --duplicates), per partition and account.",
        labels=("cluster", "partition", "account"),
        source="jobs (sacct, attempt > 1, submit_time <= now)",
        query="SELECT cluster, coalesce(\"partition\", '') AS \"partition\", coalesce(account, '') AS account,"
              " count(*) AS value FROM jobs WHERE cluster = $cluster AND attempt > 1 AND submit_time <= $now"
              " GROUP BY ALL",
        requires=("jobs",),
    ),
    # ---- scheduler (sdiag) ----------------------------------------------------------------------------
    _sdiag("slurmscope_sdiag_server_threads", "server_thread_count", "", "slurmctld server threads (sdiag)."),
    _sdiag("slurmscope_sdiag_agent_queue_size", "agent_queue_size", "", "slurmctld agent queue size (sdiag)."),
    _sdiag("slurmscope_sdiag_jobs_pending", "jobs_pending", "", "Pending jobs as slurmctld counts them (sdiag)."),
    _sdiag("slurmscope_sdiag_jobs_running", "jobs_running", "", "Running jobs as slurmctld counts them (sdiag)."),
    _sdiag("slurmscope_sdiag_main_last_cycle_seconds", "main_last_cycle_us", "seconds",
           "Duration of the last main scheduling cycle (sdiag).", " / 1e6"),
    _sdiag("slurmscope_sdiag_main_mean_cycle_seconds", "main_mean_cycle_us", "seconds",
           "Mean main scheduling cycle since the last sdiag reset.", " / 1e6"),
    _sdiag("slurmscope_sdiag_backfill_last_cycle_seconds", "bf_last_cycle_us", "seconds",
           "Duration of the last backfill cycle (sdiag).", " / 1e6"),
    _sdiag("slurmscope_sdiag_backfill_mean_cycle_seconds", "bf_mean_cycle_us", "seconds",
           "Mean backfill cycle since the last sdiag reset.", " / 1e6"),
    _sdiag("slurmscope_sdiag_backfill_last_depth", "bf_last_depth", "",
           "Jobs the last backfill cycle looked at (sdiag 'Last depth cycle')."),
    _sdiag("slurmscope_sdiag_backfill_queue_length", "bf_last_queue_length", "",
           "Queue length of the last backfill cycle (sdiag)."),
    _sdiag("slurmscope_sdiag_backfilled_jobs", "bf_backfilled_jobs", "",
           "Jobs started by backfill since slurmctld started (sdiag; resets on restart, hence a gauge)."),
    _sdiag("slurmscope_sdiag_backfill_last_cycle_timestamp_seconds", "epoch(bf_last_cycle_when)", "seconds",
           "When the last backfill cycle ran (sdiag); a stalled backfill scheduler stops moving it."),
    # ---- fair-share (sshare) --------------------------------------------------------------------------
    _fairshare("slurmscope_fairshare_shares_ratio", "norm_shares", "Normalised shares of the account (sshare NormShares)."),
    _fairshare("slurmscope_fairshare_usage_ratio", "norm_usage", "Normalised usage of the account (sshare NormUsage)."),
    _fairshare("slurmscope_fairshare_effective_usage_ratio", "effectv_usage",
               "Effective usage of the account (sshare EffectvUsage)."),
    _fairshare("slurmscope_fairshare_level_fs", "level_fs",
               "Fair-tree LevelFS of the account: shares over usage among siblings; below 1 means over-served.", ""),
    Metric(
        name="slurmscope_fairshare_user_factor_ratio", type="gauge", unit="ratio",
        help="Fair-share factor of each user in each account (sshare FairShare); served only with exporter.user_labels.",
        labels=("cluster", "account", "user"),
        source="shares (latest sshare, user rows)",
        query=f"SELECT cluster, account, \"user\", fairshare AS value FROM shares WHERE {_SHARES_LATEST}"
              f" AND \"user\" <> '' AND fairshare IS NOT NULL",
        requires=("shares",),
        user_labels=True,
    ),
    # ---- controller and collectors --------------------------------------------------------------------
    Metric(
        name="slurmscope_controller_up", type="gauge", unit="",
        help="1 when scontrol ping reports the controller up, per controller host and role.",
        labels=("cluster", "host", "role"),
        source="controller_pings (latest scontrol ping)",
        query=f"SELECT cluster, host, coalesce(role, '') AS role, CASE WHEN up THEN 1 ELSE 0 END AS value"
              f" FROM controller_pings WHERE {_latest('controller_pings')}",
        requires=("controller_pings",),
    ),
    Metric(
        name="slurmscope_collector_success", type="gauge", unit="",
        help="1 when the collector's last run succeeded, 0 when it failed or timed out.",
        labels=("cluster", "collector"),
        source="collector_runs (last run per collector)",
        query="SELECT cluster, collector, CASE WHEN status = 'ok' THEN 1 ELSE 0 END AS value FROM collector_runs"
              " WHERE cluster = $cluster AND started_at <= $now"
              " QUALIFY row_number() OVER (PARTITION BY collector ORDER BY started_at DESC, run_id DESC) = 1",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_collector_duration_seconds", type="gauge", unit="seconds",
        help="How long the collector's last run took.",
        labels=("cluster", "collector"),
        source="collector_runs (last run per collector)",
        query="SELECT cluster, collector, duration_seconds AS value FROM collector_runs"
              " WHERE cluster = $cluster AND started_at <= $now AND duration_seconds IS NOT NULL"
              " QUALIFY row_number() OVER (PARTITION BY collector ORDER BY started_at DESC, run_id DESC) = 1",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_collector_last_success_timestamp_seconds", type="gauge", unit="seconds",
        help="When the collector last finished a successful run.",
        labels=("cluster", "collector"),
        source="collector_runs",
        query="SELECT cluster, collector, max(epoch(coalesce(finished_at, started_at))) AS value FROM collector_runs"
              " WHERE cluster = $cluster AND status = 'ok' AND coalesce(finished_at, started_at) <= $now GROUP BY ALL",
        requires=("collector_runs",),
    ),
    # ---- GPU health (NVML) ----------------------------------------------------------------------------
    _gpu("slurmscope_gpu_utilization_ratio", "util_gpu_mean / 100.0", "ratio",
         "Mean GPU utilisation over the GPU's latest sampled minute (NVML)."),
    _gpu("slurmscope_gpu_temperature_celsius", "temp_gpu_max_celsius", "celsius",
         "Highest GPU temperature in the latest sampled minute (NVML)."),
    _gpu("slurmscope_gpu_power_watts", "power_mean_watts", "watts", "Mean GPU power in the latest sampled minute."),
    _gpu("slurmscope_gpu_throttle_ratio", "least(coalesce(throttle_seconds, 0) / 60.0, 1.0)", "ratio",
         "Share of the latest sampled minute the GPU spent with clocks throttled (thermal or power)."),
    _gpu("slurmscope_gpu_row_remap_failed", "CASE WHEN remapped_failed THEN 1 ELSE 0 END", "",
         "1 when the GPU reports a failed row remapping (it needs replacing)."),
    _gpu("slurmscope_gpu_row_remap_pending", "CASE WHEN remapped_pending THEN 1 ELSE 0 END", "",
         "1 when the GPU has a row remapping pending (needs a GPU reset)."),
    Metric(
        name="slurmscope_gpu_ecc_errors_total", type="counter", unit="",
        help="ECC errors the GPU has counted (NVML aggregate counter), by type corrected or uncorrected.",
        labels=("cluster", "node", "gpu", "gpu_model", "type"),
        source="gpu_samples (latest minute per GPU)",
        query=f"""
            WITH g AS (SELECT * FROM gpu_samples WHERE {_GPU_LATEST})
            SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
                   'corrected' AS type, ecc_corrected_total AS value FROM g WHERE ecc_corrected_total IS NOT NULL
            UNION ALL
            SELECT cluster, node, CAST(gpu_index AS VARCHAR), coalesce(model, ''), 'uncorrected',
                   ecc_uncorrected_total FROM g WHERE ecc_uncorrected_total IS NOT NULL""",
        requires=("gpu_samples",),
    ),
    Metric(
        name="slurmscope_node_gpus_visible", type="gauge", unit="",
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
        name="slurmscope_gpu_xid_events_total", type="counter", unit="",
        help="GPU XID errors seen so far per node and XID code (NVML events and kernel log).",
        labels=("cluster", "node", "xid"),
        source="gpu_events (event_type = 'xid')",
        query="SELECT cluster, node, CAST(xid AS VARCHAR) AS xid, count(*) AS value FROM gpu_events"
              " WHERE cluster = $cluster AND event_type = 'xid' AND xid IS NOT NULL AND event_time <= $now GROUP BY ALL",
        requires=("gpu_events",),
    ),
    Metric(
        name="slurmscope_gpu_lost_events_total", type="counter", unit="",
        help="Times a GPU fell off the bus (NVML GPU lost, XID 79) so far, per node.",
        labels=("cluster", "node"),
        source="gpu_events (event_type = 'gpu_lost' or XID 79)",
        query="SELECT cluster, node, count(*) AS value FROM gpu_events WHERE cluster = $cluster"
              " AND (event_type = 'gpu_lost' OR (event_type = 'xid' AND xid = 79)) AND event_time <= $now GROUP BY ALL",
        requires=("gpu_events",),
    ),
)


def by_name() -> dict[str, Metric]:
    return {m.name: m for m in CATALOG}
