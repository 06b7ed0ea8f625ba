"""The metric catalog: every family the exporter serves, with its type, unit, help, labels and source.

One list drives three things that must never disagree: the exporter (which runs each family's query and maps
its rows to samples), docs/metrics.md (generated from this list and checked by a test), and the dashboards and
alerts (which the tests check only name families listed here). The exporter computes nothing: each family's
query is the table macro `metric_<name>(cluster_name, now)` in sql/metrics/<name>.sql (the name without the
`slurmscope_` prefix), created by the migration runner; it reads a mart or the latest raw snapshot at or
before `now` and returns one row per sample, with one column per label and a `value` column. Being a pure
function of the cluster and the instant, rendering the catalog at any past instant gives what a scrape at that
instant would have shown (the history export relies on that), and `slurmscope query "SELECT * FROM
metric_node_down('c', now())"` shows what a family would serve.

Conventions (ARCHITECTURE.md section 6): prefix `slurmscope_`, base units in names, `_total` for counters,
`_info` for metadata, bounded labels (no job id), `user` labels only when `exporter.user_labels` is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "info"]


@dataclass(frozen=True)
class Metric:
    """One metric family. `name` is the exposed name (with `_total` / `_info`)."""

    name: str
    type: MetricType
    unit: str
    help: str
    labels: tuple[str, ...]
    source: str
    requires: tuple[str, ...]
    user_labels: bool = False  # served only when config exporter.user_labels is true
    shared_query: str = ""  # a sql/metrics macro serving several families, told apart by its `family` column

    @property
    def family(self) -> str:
        """The family name prometheus_client wants (without the `_total` / `_info` suffix)."""
        if self.type == "counter" and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        if self.type == "info" and self.name.endswith("_info"):
            return self.name[: -len("_info")]
        return self.name

    @property
    def macro(self) -> str:
        """The table macro (sql/metrics) that returns this family's samples.

        Families that read the same rows share one macro, so a render scans those rows once: the seven
        per-GPU families read the latest minute of every GPU (`metric_gpu_latest`), which one scan serves in
        about 0.08 CPU-s at 10,000 GPUs against 0.10 s for seven (docs/architecture.md).
        """
        return self.shared_query or "metric_" + self.name.removeprefix("slurmscope_")

    @property
    def is_timestamp(self) -> bool:
        return self.name.endswith("_timestamp_seconds")


def _sdiag(name: str, unit: str, help_: str) -> Metric:
    return Metric(
        name=name,
        type="gauge",
        unit=unit,
        help=help_,
        labels=("cluster",),
        source="sched_stats (latest sdiag)",
        requires=("sched_stats",),
    )


# The node agents serve some of the same slurmscope_gpu_* names live; every slurmscope_gpu_* telemetry or health
# family of either carries a `source` label ("central" here, "agent" there) so that dashboards and rules select
# one source and never add the two (docs/dashboards.md). The accounting slurmscope_gpu_seconds_* have none.
def _gpu(name: str, unit: str, help_: str) -> Metric:
    return Metric(
        name=name,
        type="gauge",
        unit=unit,
        help=help_,
        labels=("cluster", "node", "gpu", "gpu_model", "source"),
        source="gpu_samples (latest minute per GPU, at most 15 min old)",
        requires=("gpu_samples",),
        shared_query="metric_gpu_latest",
    )


def _fairshare(name: str, help_: str, unit: str = "ratio") -> Metric:
    return Metric(
        name=name,
        type="gauge",
        unit=unit,
        help=help_,
        labels=("cluster", "account"),
        source="shares (latest sshare, account rows)",
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
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_nodes",
        type="gauge",
        unit="",
        help="Nodes per partition and state (idle, mixed, allocated, drain, down, other).",
        labels=("cluster", "partition", "state"),
        source="node_states (latest sinfo)",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_down",
        type="gauge",
        unit="",
        help="1 when the node is DOWN or not responding, else 0 (one series per node).",
        labels=("cluster", "node"),
        source="node_states (latest sinfo)",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_unavailable_since_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="When the reason of a drained or down node was set (sinfo reason time), for nodes that are unavailable.",
        labels=("cluster", "node", "state"),
        source="node_states (latest sinfo)",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_gpus_configured",
        type="gauge",
        unit="",
        help="GPUs Slurm has configured on the node (GRES), from the latest sinfo snapshot.",
        labels=("cluster", "node", "gpu_model"),
        source="node_states (latest sinfo)",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_gpus",
        type="gauge",
        unit="",
        help="GPUs per partition, model and state: allocated, idle (usable and free) or down (on an unavailable node).",
        labels=("cluster", "partition", "gpu_model", "state"),
        source="node_states (latest sinfo)",
        requires=("node_states",),
    ),
    Metric(
        name="slurmscope_node_events_total",
        type="counter",
        unit="",
        help="Node DOWN/DRAIN events started so far (sacctmgr show event), per node and state.",
        labels=("cluster", "node", "state"),
        source="node_events",
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
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_gpus_pending",
        type="gauge",
        unit="",
        help="GPUs requested by pending jobs per partition, account and QOS, from the latest squeue snapshot"
        " (every request form: --gpus, --gpus-per-node, --gpus-per-task, --gpus-per-socket, --gres).",
        labels=("cluster", "partition", "account", "qos"),
        source="pending_jobs (latest squeue)",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_jobs_running",
        type="gauge",
        unit="",
        help="Running jobs per partition and account, from the latest squeue snapshot.",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_pending_oldest_submit_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="Submit time of the oldest pending job per partition and account (age = time() - value).",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
        requires=("pending_jobs",),
    ),
    Metric(
        name="slurmscope_pending_schedulable_oldest_submit_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="Submit time of the oldest job pending only on the scheduler (reason Priority or Resources; not"
        " held, dependency, begin time or limits) per partition and account (age = time() - value).",
        labels=("cluster", "partition", "account"),
        source="pending_jobs (latest squeue)",
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
        requires=("jobs",),
    ),
    Metric(
        name="slurmscope_job_outcomes_total",
        type="counter",
        unit="",
        help="Ended job attempts so far by failure class from their record (none, user, system;"
        " docs/pipelines.md#job-failures); a FAILED attempt a node incident caused is counted as user here and"
        " in slurmscope_job_outcomes_node_incident_total, which moves it to system.",
        labels=("cluster", "partition", "account", "failure"),
        source="jobs (sacct, end_time <= now)",
        requires=("jobs",),
    ),
    Metric(
        name="slurmscope_job_outcomes_node_incident_total",
        type="counter",
        unit="",
        help="Attempts that ended FAILED (a user failure by their record) and were linked to a node incident on"
        " their nodes: system failures (user = user class - these; system = system class + these).",
        labels=("cluster", "partition", "account"),
        source="jobs and mart_fault_impact (end_time, fault_time <= now)",
        requires=("jobs", "mart_fault_impact"),
    ),
    Metric(
        name="slurmscope_job_requeues_total",
        type="counter",
        unit="",
        help="Requeues so far: allocation attempts after the first (sacct --duplicates), per partition and account.",
        labels=("cluster", "partition", "account"),
        source="jobs (sacct, attempt > 1, submit_time <= now)",
        requires=("jobs",),
    ),
    Metric(
        name="slurmscope_jobs_ended_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds (elapsed x GPUs) of attempts that reached a terminal state so far, per state.",
        labels=("cluster", "partition", "account", "state"),
        source="jobs (sacct, end_time <= now)",
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
        requires=("mart_wait_times",),
    ),
    Metric(
        name="slurmscope_job_wait_started_jobs",
        type="gauge",
        unit="",
        help="Jobs the wait-time quantiles of the latest day are computed from (small counts make noisy quantiles).",
        labels=("cluster", "partition", "account", "gpu_class", "gpu_model"),
        source="mart_wait_times (latest day <= now)",
        requires=("mart_wait_times",),
    ),
    # ---- usage and cost counters ----------------------------------------------------------------------
    Metric(
        name="slurmscope_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds allocated so far, running allocations included (a MIG slice counts its fraction of a GPU);"
        " grows at every pipeline run, never decreases.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_cost_usd_total",
        type="counter",
        unit="usd",
        help="Cost of the allocated GPU-seconds so far at the configured rates; never decreases.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_gpu_seconds_correction_seconds",
        type="gauge",
        unit="seconds",
        help="Recomputed minus reported GPU-seconds (<= 0): a correction the monotone counter could not apply.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_cost_correction_usd",
        type="gauge",
        unit="usd",
        help="Recomputed minus reported cost (<= 0): a correction the monotone cost counter could not apply.",
        labels=("cluster", "account", "partition", "gpu_model"),
        source="mart_usage_counters",
        requires=("mart_usage_counters",),
    ),
    Metric(
        name="slurmscope_capacity_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU capacity integrated over time per partition, model and state (allocated, idle, down, reserved),"
        " from the daily capacity mart, MIG slices by their fraction of a GPU; the current day counts what the"
        " last pipeline run saw.",
        labels=("cluster", "partition", "gpu_model", "state"),
        source="mart_capacity_daily (days <= today)",
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
        requires=("mart_cost_efficiency_daily",),
    ),
    Metric(
        name="slurmscope_account_energy_cost_usd_total",
        type="counter",
        unit="usd",
        help="That energy priced at billing.energy_usd_per_kwh x billing.pue (informational, not invoiced); "
        "absent while no electricity price is configured.",
        labels=("cluster", "account"),
        source="mart_cost_efficiency_daily (days <= today)",
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
        requires=("mart_cost_efficiency_daily",),
    ),
    Metric(
        name="slurmscope_cost_per_useful_gpu_hour_usd",
        type="gauge",
        unit="usd",
        help="Effective cost per useful GPU-hour this month so far: cost of the NVML-sampled allocations /"
        " (held GPU-hours x activity: GPM SM activity where the GPU has GPM, GPU_UTIL elsewhere;"
        " mart_cost_efficiency_daily.activity_source says which); absent for accounts with no sampled use.",
        labels=("cluster", "account"),
        source="mart_cost_efficiency_daily (month of now, days <= today)",
        requires=("mart_cost_efficiency_daily",),
    ),
    # ---- budgets and allocations (mart_budget_period: config `budgets`, Slurm's GrpTRESMins) -----------
    Metric(
        name="slurmscope_account_budget_usd",
        type="gauge",
        unit="usd",
        help="Money budget of the account for the current period (config budgets.<account>.usd or"
        " usd_per_month); absent without one.",
        labels=("cluster", "account"),
        source="mart_budget_period (the period holding now)",
        requires=("mart_budget_period",),
    ),
    Metric(
        name="slurmscope_account_budget_spent_ratio",
        type="gauge",
        unit="ratio",
        help="Share of the account's budget used so far this period, per budget: usd or gpu_hours (config"
        " budgets: its invoices), GrpTRESMins:<tres> (Slurm's allocation: sshare GrpTRESRaw / GrpTRESMins,"
        " the decayed usage Slurm enforces); 1 = all of it.",
        labels=("cluster", "account", "budget"),
        source="mart_budget_period (the period holding now)",
        requires=("mart_budget_period",),
    ),
    Metric(
        name="slurmscope_account_budget_forecast_ratio",
        type="gauge",
        unit="ratio",
        help="Period-end forecast (used / elapsed share of the period) over the account's budget, per budget;"
        " absent in the period's first day and for Slurm allocations whose usage decays or never resets.",
        labels=("cluster", "account", "budget"),
        source="mart_budget_period (the period holding now)",
        requires=("mart_budget_period",),
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
        requires=("mart_occupancy",),
    ),
    Metric(
        name="slurmscope_backfill_hole_filled_ratio",
        type="gauge",
        unit="ratio",
        help="Share of schedule holes backfill filled in the latest occupancy bucket: backfill / (backfill + hole).",
        labels=("cluster", "partition", "gpu_model"),
        source="mart_occupancy (latest bucket before now)",
        requires=("mart_occupancy",),
    ),
    Metric(
        name="slurmscope_backfill_started_jobs_ratio",
        type="gauge",
        unit="ratio",
        help="Share of the latest day's started attempts that backfill started, per partition.",
        labels=("cluster", "partition"),
        source="mart_backfill_daily (latest day <= now)",
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
        requires=("mart_sched_deltas",),
    ),
    Metric(
        name="slurmscope_scheduler_cycles_total",
        type="counter",
        unit="",
        help="Scheduling cycles so far per scheduler (main, backfill), summed from sdiag deltas.",
        labels=("cluster", "scheduler"),
        source="mart_sched_deltas (snapshots <= now)",
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
        requires=("mart_fault_impact",),
    ),
    Metric(
        name="slurmscope_fault_lost_gpu_seconds_total",
        type="counter",
        unit="seconds",
        help="GPU-seconds of attempts killed by node or GPU faults so far, per partition and fault kind.",
        labels=("cluster", "partition", "fault_kind"),
        source="mart_fault_impact (fault_time <= now)",
        requires=("mart_fault_impact",),
    ),
    Metric(
        name="slurmscope_node_failures",
        type="gauge",
        unit="",
        help="Failures of the node over the observed history: its hardware and node-failure incidents, GPU-only"
        " faults included, maintenance not (as of the last pipeline run).",
        labels=("cluster", "node"),
        source="mart_node_reliability",
        requires=("mart_node_reliability",),
    ),
    Metric(
        name="slurmscope_node_mtbf_seconds",
        type="gauge",
        unit="seconds",
        help="Mean time between failures of the node: (observed - unavailable seconds) / failure incidents, for"
        " nodes that failed.",
        labels=("cluster", "node"),
        source="mart_node_reliability",
        requires=("mart_node_reliability",),
    ),
    Metric(
        name="slurmscope_node_mttr_seconds",
        type="gauge",
        unit="seconds",
        help="Mean time to repair of the node: the mean span of its failure incidents that ended (GPU-only faults,"
        " which Slurm never saw, have none).",
        labels=("cluster", "node"),
        source="mart_node_reliability",
        requires=("mart_node_reliability",),
    ),
    Metric(
        name="slurmscope_node_incidents",
        type="gauge",
        unit="",
        help="Incidents of the node over its history by cause (hardware, node_failure, maintenance, other): its"
        " overlapping DOWN/DRAIN events, sinfo snapshots and GPU faults merged (as of the last pipeline run).",
        labels=("cluster", "node", "cause"),
        source="mart_node_incidents",
        requires=("mart_node_incidents",),
    ),
    Metric(
        name="slurmscope_goodput_ratio",
        type="gauge",
        unit="ratio",
        help="Goodput of jobs of N nodes: the share of their GPU time that is effective training, after checkpoint"
        " writes, work redone since the last checkpoint and restarts; expected (Young-Daly checkpointing at the"
        " measured MTBF) and measured (the attempts failure incidents killed), docs/pipelines.md#reliability.",
        labels=("cluster", "partition", "nodes", "kind"),
        source="mart_goodput",
        requires=("mart_goodput",),
    ),
    # ---- scheduler (sdiag) ----------------------------------------------------------------------------
    _sdiag("slurmscope_sdiag_server_threads", "", "slurmctld server threads (sdiag)."),
    _sdiag("slurmscope_sdiag_agent_queue_size", "", "slurmctld agent queue size (sdiag)."),
    _sdiag("slurmscope_sdiag_jobs_pending", "", "Pending jobs as slurmctld counts them (sdiag)."),
    _sdiag("slurmscope_sdiag_jobs_running", "", "Running jobs as slurmctld counts them (sdiag)."),
    _sdiag(
        "slurmscope_sdiag_main_last_cycle_seconds",
        "seconds",
        "Duration of the last main scheduling cycle (sdiag).",
    ),
    _sdiag(
        "slurmscope_sdiag_main_mean_cycle_seconds",
        "seconds",
        "Mean main scheduling cycle since the last sdiag reset.",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_last_cycle_seconds",
        "seconds",
        "Duration of the last backfill cycle (sdiag).",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_mean_cycle_seconds",
        "seconds",
        "Mean backfill cycle since the last sdiag reset.",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_last_depth",
        "",
        "Jobs the last backfill cycle looked at (sdiag 'Last depth cycle').",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_queue_length",
        "",
        "Queue length of the last backfill cycle (sdiag).",
    ),
    _sdiag(
        "slurmscope_sdiag_backfilled_jobs",
        "",
        "Jobs started by backfill since slurmctld started (sdiag; resets on restart, hence a gauge).",
    ),
    _sdiag(
        "slurmscope_sdiag_backfill_last_cycle_timestamp_seconds",
        "seconds",
        "When the last backfill cycle ran (sdiag); a stalled backfill scheduler stops moving it.",
    ),
    # ---- fair-share (sshare) --------------------------------------------------------------------------
    _fairshare(
        "slurmscope_fairshare_shares_ratio",
        "Normalised shares of the account (sshare NormShares).",
    ),
    _fairshare(
        "slurmscope_fairshare_usage_ratio",
        "Normalised usage of the account (sshare NormUsage).",
    ),
    _fairshare(
        "slurmscope_fairshare_effective_usage_ratio",
        "Effective usage of the account (sshare EffectvUsage).",
    ),
    _fairshare(
        "slurmscope_fairshare_level_fs",
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
        requires=("mart_fairshare",),
    ),
    Metric(
        name="slurmscope_fairshare_user_factor_ratio",
        type="gauge",
        unit="ratio",
        help="Fair-share factor of each user in each account (sshare FairShare); served only with exporter.user_labels.",
        labels=("cluster", "account", "user"),
        source="shares (latest sshare, user rows)",
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
        requires=("mart_fairshare_drift",),
    ),
    Metric(
        name="slurmscope_fairshare_target_share_ratio",
        type="gauge",
        unit="ratio",
        help="The account's target share of the cluster (product of normalised shares from the root).",
        labels=("cluster", "account"),
        source="mart_fairshare_drift (latest day <= now)",
        requires=("mart_fairshare_drift",),
    ),
    Metric(
        name="slurmscope_fairshare_starved_seconds",
        type="gauge",
        unit="seconds",
        help="How long the account has been starved (7-day usage share far below target), in whole days, latest day.",
        labels=("cluster", "account"),
        source="mart_fairshare_drift (latest day <= now)",
        requires=("mart_fairshare_drift",),
    ),
    # ---- controller, collectors and pipelines ---------------------------------------------------------
    Metric(
        name="slurmscope_controller_up",
        type="gauge",
        unit="",
        help="1 when scontrol ping reports the controller up, per controller host and role.",
        labels=("cluster", "host", "role"),
        source="controller_pings (latest scontrol ping)",
        requires=("controller_pings",),
    ),
    Metric(
        name="slurmscope_collector_success",
        type="gauge",
        unit="",
        help="1 when the collector's last run succeeded, 0 when it failed or timed out.",
        labels=("cluster", "collector"),
        source="collector_runs (last run per collector)",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_collector_duration_seconds",
        type="gauge",
        unit="seconds",
        help="How long the collector's last run took.",
        labels=("cluster", "collector"),
        source="collector_runs (last run per collector)",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_collector_last_success_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="When the collector last finished a successful run.",
        labels=("cluster", "collector"),
        source="collector_runs",
        requires=("collector_runs",),
    ),
    Metric(
        name="slurmscope_pipeline_last_success_timestamp_seconds",
        type="gauge",
        unit="seconds",
        help="The `now` of the pipeline's last successful run (incremental or full).",
        labels=("cluster", "pipeline"),
        source="pipeline_runs",
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
        requires=("mart_idle_gpus_daily",),
    ),
    Metric(
        name="slurmscope_zero_util_jobs_total",
        type="counter",
        unit="",
        help="Job attempts that held GPUs without ever using them (no minute reached the idle threshold).",
        labels=("cluster", "account"),
        source="mart_job_efficiency (alloc_end <= now)",
        requires=("mart_job_efficiency",),
    ),
    Metric(
        name="slurmscope_account_cpu_efficiency_ratio",
        type="gauge",
        unit="ratio",
        help="CPU efficiency of the account's jobs that ended this billing month, as Slurm's seff computes it per"
        " job (CPU time of all steps / (elapsed x allocated CPUs)): their CPU-seconds used / core-seconds allocated.",
        labels=("cluster", "account"),
        source="mart_job_cpu_mem_efficiency (end_day in the month of now, <= today)",
        requires=("mart_job_cpu_mem_efficiency",),
    ),
    Metric(
        name="slurmscope_account_memory_efficiency_ratio",
        type="gauge",
        unit="ratio",
        help="Memory efficiency of the account's jobs that ended this billing month, as Slurm's seff computes it per"
        " job (largest step peak x its tasks / requested memory): their memory used / memory requested; jobs"
        " without a recorded peak are left out.",
        labels=("cluster", "account"),
        source="mart_job_cpu_mem_efficiency (end_day in the month of now, <= today)",
        requires=("mart_job_cpu_mem_efficiency",),
    ),
    Metric(
        name="slurmscope_drift_score",
        type="gauge",
        unit="",
        help="Drift score of a signal for an entity (larger is worse; robust z for z-score methods), latest as_of.",
        labels=("cluster", "signal", "entity_type", "entity", "node"),
        source="mart_drift (latest as_of <= now per signal and entity)",
        requires=("mart_drift",),
    ),
    Metric(
        name="slurmscope_drift_breached",
        type="gauge",
        unit="",
        help="1 when the signal's score is above its configured threshold (config drift.*), latest as_of.",
        labels=("cluster", "signal", "entity_type", "entity", "node"),
        source="mart_drift (latest as_of <= now per signal and entity)",
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
        requires=("mart_gpu_health",),
    ),
    Metric(
        name="slurmscope_gpu_health_info",
        type="info",
        unit="",
        help="Why the GPU has its verdict: `reason` is the first rule that holds ('' when ok), from a fixed"
        " list (fallen_off_bus, row_remap_failed, uncorrectable_ecc, xid_contact_support, xid_reboot_node,"
        " xid_reset_gpu, nvlink_errors, retired_pages_limit, overheating, row_remap_pending,"
        " retired_pages_pending, row_remap_growing, xid_investigate, nvlink_crc_errors, pcie_replay_rate,"
        " throttling, hot, telemetry_stale; xid_* name the action of NVIDIA's XID catalogue).",
        labels=("cluster", "node", "gpu", "gpu_model", "status", "reason", "source"),
        source="mart_gpu_health (run in force at now)",
        requires=("mart_gpu_health",),
    ),
    # ---- GPU health (NVML) ----------------------------------------------------------------------------
    _gpu(
        "slurmscope_gpu_utilization_ratio",
        "ratio",
        "Mean GPU utilisation over the GPU's latest sampled minute (NVML).",
    ),
    _gpu(
        "slurmscope_gpu_temperature_celsius",
        "celsius",
        "Highest GPU temperature in the latest sampled minute (NVML).",
    ),
    _gpu(
        "slurmscope_gpu_power_watts",
        "watts",
        "Mean GPU power in the latest sampled minute.",
    ),
    _gpu(
        "slurmscope_gpu_throttle_ratio",
        "ratio",
        "Share of the latest sampled minute the GPU spent throttled by hardware (NVML clock-event reasons HW"
        " slowdown, HW thermal slowdown, HW power brake); a GPU at its power cap is not throttled.",
    ),
    Metric(
        name="slurmscope_gpu_clock_event_ratio",
        type="gauge",
        unit="ratio",
        help="Share of the latest sampled minute each NVML clock-event reason was active, by `reason`"
        " (sw_power_cap: at power limit; sw_thermal; hw_slowdown, hw_thermal, hw_power_brake: the hardware"
        " causes slurmscope_gpu_throttle_ratio counts). Absent for a minute whose cause split is unknown.",
        labels=("cluster", "node", "gpu", "gpu_model", "reason", "source"),
        source="gpu_samples (latest minute per GPU, at most 15 min old)",
        requires=("gpu_samples",),
    ),
    _gpu(
        "slurmscope_gpu_row_remap_failed",
        "",
        "1 when the GPU reports a failed row remapping (it needs replacing).",
    ),
    _gpu(
        "slurmscope_gpu_row_remap_pending",
        "",
        "1 when the GPU has a row remapping pending (needs a GPU reset).",
    ),
    _gpu(
        "slurmscope_gpu_retired_pages_pending",
        "",
        "1 when a page retirement awaits a GPU reset or reboot (GPUs before Ampere); absent where NVML has no"
        " retired pages.",
    ),
    Metric(
        name="slurmscope_gpu_nvlink_errors_total",
        type="counter",
        unit="",
        help="NVLink data-link errors NVML has counted on the GPU, summed over its links, by `counter` (crc_flit,"
        " crc_data, replay, recovery); absent without NVLink. Per link: the agent's"
        " slurmscope_gpu_nvlink_link_errors_total and the gpu_nvlink_errors table.",
        labels=("cluster", "node", "gpu", "gpu_model", "counter", "source"),
        source="gpu_samples (latest minute per GPU)",
        requires=("gpu_samples",),
        shared_query="metric_gpu_latest",
    ),
    Metric(
        name="slurmscope_gpu_ecc_errors_total",
        type="counter",
        unit="",
        help="ECC errors the GPU has counted (NVML aggregate counter), by type corrected or uncorrected.",
        labels=("cluster", "node", "gpu", "gpu_model", "type", "source"),
        source="gpu_samples (latest minute per GPU)",
        requires=("gpu_samples",),
        shared_query="metric_gpu_latest",
    ),
    Metric(
        name="slurmscope_node_gpus_visible",
        type="gauge",
        unit="",
        help="GPUs NVML sees on the node (latest inventory of the node agent); compare with the GRES count.",
        labels=("cluster", "node"),
        source="gpu_inventory (latest per node)",
        requires=("gpu_inventory",),
    ),
    Metric(
        name="slurmscope_gpu_xid_events_total",
        type="counter",
        unit="",
        help="GPU XID errors seen so far per node and XID code (NVML events and kernel log).",
        labels=("cluster", "node", "xid", "source"),
        source="gpu_events (event_type = 'xid')",
        requires=("gpu_events",),
    ),
    Metric(
        name="slurmscope_gpu_lost_events_total",
        type="counter",
        unit="",
        help="Times a GPU fell off the bus (NVML GPU lost, XID 79) so far, per node.",
        labels=("cluster", "node", "source"),
        source="gpu_events (event_type = 'gpu_lost' or XID 79)",
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
        "Each family's samples come from one query: the table macro `metric_<name>(cluster_name, now)` in",
        "`sql/metrics/<name>.sql`, `<name>` being the family name without `slurmscope_` (the migration runner",
        "creates the macros in the database). One row per sample, a column per label and `value`; a family is",
        "what it returns for the cluster at that instant, so `slurmscope query` shows it, e.g.",
        "`slurmscope query \"SELECT * FROM metric_node_down('mycluster', now())\"` (docs/cli.md).",
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


# The exporter's own families, rendered with every scrape (not from a query).
FAMILY_UP = Metric(
    name="slurmscope_exporter_family_up",
    type="gauge",
    unit="",
    help="1 when the family's source query ran at the last render; 0 when its table is missing or the query failed.",
    labels=("family",),
    source="the exporter itself",
    requires=(),
)
RENDER_TIME = Metric(
    name="slurmscope_exporter_render_timestamp_seconds",
    type="gauge",
    unit="seconds",
    help="The instant the served metrics describe (the last render).",
    labels=(),
    source="the exporter itself",
    requires=(),
)
INTERNAL = (FAMILY_UP, RENDER_TIME)


if __name__ == "__main__":
    print(render_markdown(INTERNAL), end="")
