"""Recording and alerting rules, built from the thresholds in alerts/thresholds.py (defaults) with the
site's config alerts.thresholds applied (thresholds.resolve).

Recording rules are named level:metric:operations (the level is the labels kept besides `cluster`, which is
always kept so that one Prometheus can watch several clusters). The node agents serve some slurmscope_gpu_*
names live (`source="agent"`) that the central exporter also serves from the ingested spool
(`source="central"`), both with `cluster`. The one rule (docs/architecture.md, "Agent and central GPU
series"): every selector of a slurmscope_gpu_* family names exactly one source, so the two are never added.
The real-time GPU alerts (group slurmscope.gpu-realtime, evaluated every 15 s like the agents' scrape) read
`source="agent"`; the central GPU alerts read `source="central"` and, where a real-time alert covers the same
fault, stay quiet for nodes whose agent Prometheus scrapes (`unless on (cluster, node) agent_nvml_up == 1`),
so one fault pages once: live when the agent is scraped, from the spool when it is not.
Alerts carry a severity label, a static summary, a description templated with the labels and value, and a
runbook_url: docs/runbooks/<runbook>.md (the alert's name unless a live copy shares its class's runbook) under
an absolute base (config alerts.runbook_base_url), because
Alertmanager and chat tools show the link out of context. Dashboards read the recording rules where one exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace

from slurmscope.alerts import thresholds as t
from slurmscope.collectors.registry import COLLECTORS

from slurmscope import xid as xids
from slurmscope.slurm_states import JOB_FAILED_STATES

DEFAULTS = t.resolve()
"""The thresholds of alerts/thresholds.py, no config applied: those of the committed rule file."""


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    group: str
    labels: dict[str, str] = field(default_factory=dict)
    runbook: str | None = None
    """The runbook's name when it is not the alert's: a live copy and its central alert are one fault with
    one procedure, so they share one page."""

    @property
    def runbook_name(self) -> str:
        return self.runbook or self.name


def _new_or_increased(metric: str, window: str, by: str) -> str:
    """Events in the last window, counting a counter series that first appeared within it.

    increase() ignores the first sample of a new series, and the exporter's event counters appear with the
    first event (a node's first XID is a new series with value 1), so the new series are added explicitly.
    """
    return (
        f"(sum by ({by}) (increase({metric}[{window}])) > 0)"
        f" or (sum by ({by}) ({metric} unless {metric} offset {window}) > 0)"
    )


def _unless_agent_scraped(expr: str) -> str:
    """A central alert that a real-time alert duplicates: quiet on nodes whose agent Prometheus scrapes now.

    The agent's copy of a fault reaches Prometheus minutes before the spool's; a node whose agent is not
    scraped (no Prometheus access to the nodes, or the agent down for longer than the 5-min staleness) is
    covered by the central alert alone.
    """
    return f"({expr}) unless on (cluster, node) (slurmscope_agent_nvml_up == 1)"


XID_ALERTS = {
    xids.Action.RESET_GPU: ("GpuXidResetGpu", "critical", "drain the node and reset the GPU"),
    xids.Action.REBOOT_NODE: ("GpuXidRebootNode", "critical", "drain and reboot the node"),
    xids.Action.CONTACT_SUPPORT: (
        "GpuXidContactSupport",
        "critical",
        "drain the node and contact NVIDIA support",
    ),
    xids.Action.INVESTIGATE: ("GpuXidInvestigate", "warning", "investigate before deciding"),
}
"""One alert per resolution class of NVIDIA's XID catalogue (slurmscope/xid.py) that takes the GPU out of
service or needs a look; `ignore` and `restart_app` page no one (the GPU stays usable; a job that dies of it
is the job's or reliability's business)."""


def _codes_re(codes: tuple[int, ...]) -> str:
    return "|".join(str(c) for c in codes)


def xid_alerts(
    overrides: Mapping[int, str] | None = None, *, live: bool = False, t: SimpleNamespace = DEFAULTS
) -> tuple[Alert, ...]:
    """The XID alerts, their code lists read from the catalogue with health.xid_actions applied.

    The `xid` label already is the code (at most a few hundred values), so a class is a regex over it; a code
    the catalogue does not list is `investigate`, matched as "none of the other classes' codes".
    `live`: the real-time copies (<Class>Live, group gpu-realtime), read from the agents' own counter with
    the same code lists; the central ones stay quiet where the agent is scraped, so an XID pages once."""
    out = []
    for action, (name, severity, todo) in XID_ALERTS.items():
        if action == xids.Action.INVESTIGATE:
            others = sorted(c for c, a in xids.actions(overrides).items() if a != action)
            codes = f'xid!~"{_codes_re(tuple(others))}"'
        else:
            codes = f'xid=~"{_codes_re(xids.codes_of(action, overrides))}"'
        if live:
            metric = f'slurmscope_gpu_xid_errors_total{{source="agent", {codes}}}'
        else:
            metric = f'slurmscope_gpu_xid_events_total{{source="central", {codes}}}'
        expr = _new_or_increased(metric, t.EVENT_WINDOW, "cluster, node, xid")
        out.append(
            Alert(
                f"{name}Live" if live else name,
                expr if live else _unless_agent_scraped(expr),
                t.EVENT_FOR,
                severity,
                f"A GPU reported an XID whose NVIDIA resolution is {action}"
                + (" (live, from the node agent)." if live else "."),
                "Node {{ $labels.node }} of cluster {{ $labels.cluster }} reported XID {{ $labels.xid }} "
                f"{{{{ $value }}}} time(s) in the last {t.EVENT_WINDOW}; NVIDIA's XID catalogue says: {todo}.",
                REALTIME_GROUP if live else "gpu",
                runbook=name,
            )
        )
    return tuple(out)


FAILED_STATES_RE = "|".join(JOB_FAILED_STATES)


# The GPU groups are evaluated as often as Prometheus scrapes the agents (docs/deployment.md): a 1-minute
# group would add up to a minute to the budgets from XID to firing, 60 s live and 3 min through the
# central store (docs/nvml.md). The other groups read series that change once a minute or slower.
REALTIME_GROUP = "gpu-realtime"
REALTIME_INTERVAL = "15s"
GROUP_INTERVALS = {REALTIME_GROUP: REALTIME_INTERVAL, "gpu": REALTIME_INTERVAL}

# Where the generated XID alerts go in _ALERTS: the central ones with the GPU health alerts, the live ones
# with the real-time alerts.
_XID_CENTRAL = "xid"
_XID_LIVE = "xid-live"

RECORDING: tuple[Recording, ...] = (
    Recording(
        "partition:slurmscope_jobs_ended:rate1h",
        "sum by (cluster, partition) (rate(slurmscope_jobs_ended_total[1h]))",
    ),
    Recording(
        "partition:slurmscope_jobs_failed:ratio_rate1h",
        f'sum by (cluster, partition) (rate(slurmscope_jobs_ended_total{{state=~"{FAILED_STATES_RE}"}}[1h]))'
        " / sum by (cluster, partition) (rate(slurmscope_jobs_ended_total[1h]))",
    ),
    Recording(
        "partition:slurmscope_job_requeues:increase1h",
        "sum by (cluster, partition) (increase(slurmscope_job_requeues_total[1h]))",
    ),
    Recording(
        "partition_gpu_model_state:slurmscope_gpus:sum",
        "sum by (cluster, partition, gpu_model, state) (slurmscope_gpus)",
    ),
    Recording(
        "cluster:slurmscope_gpus_allocated:ratio",
        'sum by (cluster) (slurmscope_gpus{state="allocated"}) / sum by (cluster) (slurmscope_gpus)',
    ),
    Recording(
        "account:slurmscope_gpu_seconds:rate1h",
        "sum by (cluster, account) (rate(slurmscope_gpu_seconds_total[1h]))",
    ),
    Recording(
        "account:slurmscope_cost_usd:rate1h",
        "sum by (cluster, account) (rate(slurmscope_cost_usd_total[1h]))",
    ),
    Recording(
        "account:slurmscope_cost_usd_per_gpu_hour:ratio_rate1h",
        "account:slurmscope_cost_usd:rate1h / account:slurmscope_gpu_seconds:rate1h * 3600",
    ),
    Recording(
        "cluster:slurmscope_gpu_utilization_ratio:avg",
        'avg by (cluster) (slurmscope_gpu_utilization_ratio{source="central"})',
    ),
    Recording(
        "cluster:slurmscope_gpu_power_watts:sum",
        'sum by (cluster) (slurmscope_gpu_power_watts{source="agent"})',
    ),
    Recording(
        "partition:slurmscope_job_wait_seconds_p90:max",
        'max by (cluster, partition) (slurmscope_job_wait_seconds{percentile="90"})',
    ),
    Recording(
        "partition_fault_kind:slurmscope_fault_lost_gpu_seconds:increase1d",
        "sum by (cluster, partition, fault_kind) (increase(slurmscope_fault_lost_gpu_seconds_total[1d]))",
    ),
    Recording(
        "partition_kind:slurmscope_occupancy_gpu_seconds:rate1h",
        "sum by (cluster, partition, kind) (rate(slurmscope_occupancy_gpu_seconds_total[1h]))",
    ),
)


def collector_intervals() -> dict[int, tuple[str, ...]]:
    """The live collectors by interval, as the registry gives them to `serve` (every source, rest included)."""
    by: dict[int, list[str]] = {}
    for c in COLLECTORS:
        if c.live:
            by.setdefault(c.interval_seconds, []).append(c.kind)
    return {i: tuple(kinds) for i, kinds in sorted(by.items())}


def _collector_stale(t: SimpleNamespace) -> str:
    """Seconds since each collector's last success, beyond the limit of its own interval; a collector of no
    registered interval (an older release's) is judged by the longest."""
    age = "time() - slurmscope_collector_last_success_timestamp_seconds"
    by = collector_intervals()
    intervals = sorted(by)
    listed = "|".join(k for i in intervals[:-1] for k in by[i])
    selectors = [f'collector=~"{"|".join(by[i])}"' for i in intervals[:-1]]
    selectors.append(f'collector!~"{listed}"')
    return " or ".join(
        f"({age}{{{sel}}} > {_stale_seconds(i, t)})" for sel, i in zip(selectors, intervals, strict=True)
    )


def _stale_seconds(interval: int, t: SimpleNamespace) -> int:
    """How long a collector run every `interval` seconds may go without a success."""
    return max(t.COLLECTOR_STALE_RUNS * interval, t.COLLECTOR_STALE_MIN_SECONDS)


def _wait_p90(t: SimpleNamespace) -> str:
    return (
        f'max by (cluster, partition) (slurmscope_job_wait_seconds{{percentile="90"}}'
        f" and on (cluster, partition, account, gpu_class, gpu_model)"
        f" slurmscope_job_wait_started_jobs >= {t.WAIT_P90_MIN_JOBS})"
    )


def _alert_table(t: SimpleNamespace) -> tuple[Alert | str, ...]:
    """Every alert in one table, its thresholds read from `t` (alerts/thresholds.py with the config's)."""
    return (
        # ---- nodes ----
        Alert(
            "SlurmNodeDown",
            "max by (cluster, node) (slurmscope_node_down) == 1",
            t.NODE_DOWN_FOR,
            "warning",
            "A Slurm node is DOWN.",
            "Node {{ $labels.node }} of cluster {{ $labels.cluster }} has been DOWN or not responding for more than "
            f"{t.NODE_DOWN_FOR}.",
            "nodes",
        ),
        Alert(
            "SlurmNodeDrainedTooLong",
            'time() - max by (cluster, node) (slurmscope_node_unavailable_since_timestamp_seconds{state="drain"})'
            f" > {t.NODE_DRAINED_MAX_SECONDS}",
            t.NODE_DRAINED_FOR,
            "warning",
            "A Slurm node has been drained for too long.",
            "Node {{ $labels.node }} of cluster {{ $labels.cluster }} has been drained for "
            "{{ $value | humanizeDuration }}.",
            "nodes",
        ),
        Alert(
            "SlurmNodeFlapping",
            f"sum by (cluster, node) (increase(slurmscope_node_events_total[{t.NODE_FLAP_WINDOW}])) >= {t.NODE_FLAP_EVENTS}",
            t.NODE_FLAP_FOR,
            "warning",
            "A Slurm node keeps going DOWN or DRAIN.",
            "Node {{ $labels.node }} of cluster {{ $labels.cluster }} had {{ $value }} DOWN/DRAIN events in the last "
            f"{t.NODE_FLAP_WINDOW}.",
            "nodes",
        ),
        # ---- GPU health ----
        _XID_CENTRAL,  # the XID alerts, generated from the catalogue (xid_alerts)
        Alert(
            "GpuEccUncorrectable",
            _new_or_increased(
                'slurmscope_gpu_ecc_errors_total{source="central", type="uncorrected"}',
                t.EVENT_WINDOW,
                "cluster, node, gpu",
            ),
            t.EVENT_FOR,
            "critical",
            "A GPU had uncorrectable ECC errors.",
            "GPU {{ $labels.gpu }} on node {{ $labels.node }} of cluster {{ $labels.cluster }} counted {{ $value }} "
            f"uncorrectable ECC error(s) in the last {t.EVENT_WINDOW}.",
            "gpu",
        ),
        Alert(
            "GpuRowRemapFailed",
            'max by (cluster, node, gpu) (slurmscope_gpu_row_remap_failed{source="central"}) == 1',
            t.ROW_REMAP_FOR,
            "critical",
            "A GPU failed to remap a memory row.",
            "GPU {{ $labels.gpu }} on node {{ $labels.node }} of cluster {{ $labels.cluster }} reports a failed row "
            "remapping; it needs to be replaced.",
            "gpu",
        ),
        Alert(
            "GpuNvlinkErrors",
            _new_or_increased(
                'slurmscope_gpu_nvlink_errors_total{source="central", counter=~"replay|recovery"}',
                t.EVENT_WINDOW,
                "cluster, node, gpu",
            )
            + ' or (max by (cluster, node, gpu) (rate(slurmscope_gpu_nvlink_errors_total{source="central",'
            f' counter=~"crc_flit|crc_data"}}[{t.NVLINK_CRC_WINDOW}])) >= {t.NVLINK_CRC_PER_SECOND})',
            t.EVENT_FOR,
            "critical",
            "A GPU's NVLink errors break DCGM's limits.",
            "GPU {{ $labels.gpu }} on node {{ $labels.node }} of cluster {{ $labels.cluster }}: NVLink replay or "
            f"recovery errors in the last {t.EVENT_WINDOW}, or CRC errors at {t.NVLINK_CRC_PER_SECOND}/s or more "
            "(value {{ $value }}); drain the node and reset the GPU.",
            "gpu",
        ),
        Alert(
            "GpuResetPending",
            'max by (cluster, node, gpu) ((slurmscope_gpu_row_remap_pending{source="central"} == 1)'
            ' or (slurmscope_gpu_retired_pages_pending{source="central"} == 1)) == 1',
            t.RESET_PENDING_FOR,
            "warning",
            "A GPU has a row remapping or page retirement waiting for a reset.",
            "GPU {{ $labels.gpu }} on node {{ $labels.node }} of cluster {{ $labels.cluster }} has a memory repair "
            "pending; drain the node and reset the GPU when its jobs end.",
            "gpu",
        ),
        Alert(
            "GpuFallenOffBus",
            _unless_agent_scraped(
                _new_or_increased(
                    'slurmscope_gpu_lost_events_total{source="central"}', t.EVENT_WINDOW, "cluster, node"
                )
            ),
            t.EVENT_FOR,
            "critical",
            "A GPU fell off the bus.",
            "Node {{ $labels.node }} of cluster {{ $labels.cluster }} lost {{ $value }} GPU(s) from the PCIe bus in "
            f"the last {t.EVENT_WINDOW}.",
            "gpu",
        ),
        Alert(
            "GpuThrottlingSustained",
            f'avg_over_time(slurmscope_gpu_throttle_ratio{{source="central"}}[{t.THROTTLE_WINDOW}]) > {t.THROTTLE_RATIO}',
            t.THROTTLE_FOR,
            "warning",
            "A GPU is throttled by hardware for a sustained period.",
            "GPU {{ $labels.gpu }} on node {{ $labels.node }} of cluster {{ $labels.cluster }} spent "
            f"{{{{ $value | humanizePercentage }}}} of the last {t.THROTTLE_WINDOW} in hardware slowdown (HW slowdown, thermal or power brake).",
            "gpu",
        ),
        Alert(
            "GpuCountMismatch",
            "max by (cluster, node) (slurmscope_node_gpus_visible) < max by (cluster, node) (slurmscope_node_gpus_configured)",
            t.GPU_MISMATCH_FOR,
            "warning",
            "NVML sees fewer GPUs than Slurm's GRES configures.",
            "Node {{ $labels.node }} of cluster {{ $labels.cluster }}: NVML sees {{ $value }} GPU(s), fewer than its "
            "GRES configuration.",
            "gpu",
        ),
        # ---- GPU health, real time: the node agents' own series (scraped every 15 s) ----
        _XID_LIVE,  # their live copies (xid_alerts(live=True))
        Alert(
            "GpuFallenOffBusLive",
            'max by (cluster, node, gpu) (slurmscope_gpu_lost{source="agent"}) == 1',
            t.EVENT_FOR,
            "critical",
            "A GPU fell off the bus (live, from the node agent).",
            "GPU {{ $labels.gpu }} on node {{ $labels.node }} of cluster {{ $labels.cluster }} no longer answers "
            "NVML (GPU is lost).",
            REALTIME_GROUP,
            runbook="GpuFallenOffBus",
        ),
        # ---- jobs ----
        Alert(
            "SlurmJobFailureRateHigh",
            # Inlined rather than read from the recording rule: rules in other groups may lag one evaluation.
            f'sum by (cluster, partition) (rate(slurmscope_jobs_ended_total{{state=~"{FAILED_STATES_RE}"}}[1h]))'
            " / sum by (cluster, partition) (rate(slurmscope_jobs_ended_total[1h]))"
            f" > {t.JOB_FAILURE_RATIO}"
            " and on (cluster, partition) sum by (cluster, partition) (increase(slurmscope_jobs_ended_total[1h]))"
            f" >= {t.JOB_FAILURE_MIN_JOBS}",
            t.JOB_FAILURE_FOR,
            "warning",
            "Many jobs are failing.",
            "{{ $value | humanizePercentage }} of the jobs that ended in partition {{ $labels.partition }} of cluster "
            "{{ $labels.cluster }} in the last hour failed.",
            "jobs",
        ),
        Alert(
            "SlurmRequeueSpike",
            f"sum by (cluster, partition) (increase(slurmscope_job_requeues_total[1h])) > {t.REQUEUES_PER_HOUR}",
            t.REQUEUE_FOR,
            "warning",
            "Jobs are being requeued at an unusual rate.",
            "{{ $value }} job attempts were requeued in partition {{ $labels.partition }} of cluster "
            "{{ $labels.cluster }} in the last hour.",
            "jobs",
        ),
        Alert(
            "SlurmNodeFaultJobKills",
            'sum by (cluster, partition) (increase(slurmscope_jobs_ended_total{state="NODE_FAIL"}[1h]))'
            f" >= {t.NODE_FAIL_KILLS_PER_HOUR}",
            t.NODE_FAIL_FOR,
            "warning",
            "Node faults are killing jobs.",
            "{{ $value }} job attempts in partition {{ $labels.partition }} of cluster {{ $labels.cluster }} ended "
            "NODE_FAIL in the last hour.",
            "jobs",
        ),
        Alert(
            "SlurmWaitTimeP90Drift",
            f"{_wait_p90(t)} > {t.WAIT_P90_DRIFT_FACTOR} * max by (cluster, partition)"
            ' (avg_over_time(slurmscope_job_wait_seconds{percentile="90"}[7d] offset 1d))'
            f" and {_wait_p90(t)} > {t.WAIT_P90_MIN_SECONDS}",
            t.WAIT_P90_DRIFT_FOR,
            "warning",
            "Queue wait times drifted far above last week's.",
            "The p90 wait in partition {{ $labels.partition }} of cluster {{ $labels.cluster }} is "
            f"{{{{ $value | humanizeDuration }}}}, more than {t.WAIT_P90_DRIFT_FACTOR}x its average of the previous week.",
            "jobs",
        ),
        Alert(
            "SlurmFairShareStarvation",
            "time() - min by (cluster, account) (slurmscope_pending_oldest_submit_timestamp_seconds)"
            f" > {t.STARVATION_PENDING_SECONDS} and on (cluster, account)"
            f" (slurmscope_fairshare_effective_usage_ratio < {t.STARVATION_USAGE_OVER_SHARES} * slurmscope_fairshare_shares_ratio)",
            t.STARVATION_FOR,
            "warning",
            "An under-served account has jobs pending for too long.",
            "Account {{ $labels.account }} of cluster {{ $labels.cluster }} uses less than half its share and its "
            "oldest pending job has waited {{ $value | humanizeDuration }}.",
            "jobs",
        ),
        # ---- scheduler ----
        Alert(
            "SlurmBackfillStalled",
            "time() - max by (cluster) (slurmscope_sdiag_backfill_last_cycle_timestamp_seconds)"
            f" > {t.BACKFILL_STALL_SECONDS} and on (cluster) sum by (cluster) (slurmscope_jobs_pending) > 0",
            t.BACKFILL_STALL_FOR,
            "warning",
            "The backfill scheduler has stopped cycling.",
            "The last backfill cycle of cluster {{ $labels.cluster }} ran {{ $value | humanizeDuration }} ago while "
            "jobs are pending.",
            "scheduler",
        ),
        Alert(
            "SlurmControllerUnreachable",
            "max by (cluster) (slurmscope_controller_up) == 0",
            t.CONTROLLER_DOWN_FOR,
            "critical",
            "No Slurm controller answers.",
            "scontrol ping reports no slurmctld of cluster {{ $labels.cluster }} up for more than "
            f"{t.CONTROLLER_DOWN_FOR}.",
            "scheduler",
        ),
        # ---- cost and efficiency ----
        Alert(
            "SlurmAccountBudgetSpent",
            "max by (cluster, account, budget) (slurmscope_account_budget_spent_ratio)"
            f" >= {t.BUDGET_SPENT_RATIO}",
            t.BUDGET_SPENT_FOR,
            "warning",
            "An account has spent most of a budget or allocation.",
            "Account {{ $labels.account }} of cluster {{ $labels.cluster }} has used "
            "{{ $value | humanizePercentage }} of its {{ $labels.budget }} budget for this period "
            f"(alert from {round(t.BUDGET_SPENT_RATIO * 100)}%).",
            "cost",
        ),
        Alert(
            "SlurmAccountBudgetForecastOver",
            "max by (cluster, account, budget) (slurmscope_account_budget_forecast_ratio)"
            f" > {t.BUDGET_FORECAST_RATIO}",
            t.BUDGET_FORECAST_FOR,
            "warning",
            "An account is on course to exceed a budget or allocation.",
            "At this period's rate so far, account {{ $labels.account }} of cluster {{ $labels.cluster }} will "
            "use {{ $value | humanizePercentage }} of its {{ $labels.budget }} budget by the period's end.",
            "cost",
        ),
        Alert(
            "GpuUtilizationDrift",
            'avg by (cluster) (avg_over_time(slurmscope_gpu_utilization_ratio{source="central"}[1h]))'
            f" < {t.UTIL_DRIFT_FACTOR} * avg by (cluster)"
            ' (avg_over_time(slurmscope_gpu_utilization_ratio{source="central"}[1d] offset 1h))',
            t.UTIL_DRIFT_FOR,
            "warning",
            "Cluster GPU utilisation dropped well below yesterday's.",
            "Mean GPU utilisation of cluster {{ $labels.cluster }} in the last hour is "
            "{{ $value | humanizePercentage }}, below "
            f"{round(t.UTIL_DRIFT_FACTOR * 100)}% of its mean over the day before.",
            "cost",
        ),
        Alert(
            "GpuFleetDrift",
            'max by (cluster, node, entity, signal) (slurmscope_drift_breached{entity_type="gpu"}) == 1',
            t.DRIFT_FOR,
            "warning",
            "A GPU drifted away from the fleet.",
            "GPU {{ $labels.entity }} on node {{ $labels.node }} of cluster {{ $labels.cluster }} is an outlier on "
            "{{ $labels.signal }} compared with GPUs at the same utilisation.",
            "drift",
        ),
        Alert(
            "NodeErrorRateDrift",
            'max by (cluster, node, signal) (slurmscope_drift_breached{entity_type="node", signal=~"node_.*"}) == 1',
            t.DRIFT_FOR,
            "warning",
            "A node's error rate drifted above its own history.",
            "Node {{ $labels.node }} of cluster {{ $labels.cluster }}: {{ $labels.signal }} is far above its own "
            "history.",
            "drift",
        ),
        Alert(
            "SlurmTrendDrift",
            'max by (cluster, entity_type, entity, signal) (slurmscope_drift_breached{entity_type=~"account|partition"}) == 1',
            t.TREND_DRIFT_FOR,
            "info",
            "An account or partition trend drifted.",
            "{{ $labels.signal }} of {{ $labels.entity_type }} {{ $labels.entity }} in cluster {{ $labels.cluster }} "
            "drifted from its trailing history.",
            "drift",
        ),
        # ---- the pipeline itself ----
        Alert(
            "SlurmscopeCollectorStale",
            _collector_stale(t),
            t.COLLECTOR_STALE_FOR,
            "warning",
            "A slurmscope collector has not succeeded recently.",
            "Collector {{ $labels.collector }} of cluster {{ $labels.cluster }} last succeeded "
            "{{ $value | humanizeDuration }} ago.",
            "slurmscope",
        ),
        Alert(
            "SlurmscopeCollectorFailing",
            "slurmscope_collector_success == 0",
            t.COLLECTOR_FAILING_FOR,
            "warning",
            "A slurmscope collector keeps failing.",
            "The last run of collector {{ $labels.collector }} of cluster {{ $labels.cluster }} failed, and it has "
            f"not succeeded for {t.COLLECTOR_FAILING_FOR}.",
            "slurmscope",
        ),
        Alert(
            "SlurmscopeMetricsStale",
            f"time() - slurmscope_exporter_render_timestamp_seconds > {t.METRICS_STALE_SECONDS}",
            t.METRICS_STALE_FOR,
            "warning",
            "slurmscope is serving old metrics.",
            "The metrics of {{ $labels.instance }} were rendered {{ $value | humanizeDuration }} ago.",
            "slurmscope",
        ),
        Alert(
            "SlurmscopePipelineStale",
            f"time() - slurmscope_pipeline_last_success_timestamp_seconds > {t.PIPELINE_STALE_SECONDS}",
            t.PIPELINE_STALE_FOR,
            "warning",
            "A slurmscope pipeline has not succeeded recently.",
            "Pipeline {{ $labels.pipeline }} of cluster {{ $labels.cluster }} last succeeded "
            "{{ $value | humanizeDuration }} ago.",
            "slurmscope",
        ),
        Alert(
            "SlurmscopeExporterDown",
            # up == 0 names the target; absent() also fires when service discovery lost every target. The
            # exporter's own series is matched without `job`, which sites may relabel away.
            f'up{{job="{t.EXPORTER_JOB}"}} == 0'
            f' or (absent(slurmscope_exporter_render_timestamp_seconds) unless on () up{{job="{t.EXPORTER_JOB}"}} == 0)',
            t.EXPORTER_DOWN_FOR,
            "critical",
            "Prometheus gets no metrics from the slurmscope exporter.",
            f"Job {t.EXPORTER_JOB}: "
            "{{ with $labels.instance }}target {{ . }} is down{{ else }}no target serves slurmscope metrics{{ end }}"
            "; every slurmscope dashboard and alert is blind.",
            "slurmscope",
        ),
        Alert(
            "SlurmscopeAgentDown",
            f'up{{job="{t.AGENT_JOB}"}} == 0',
            t.AGENT_DOWN_FOR,
            "warning",
            "A slurmscope node agent cannot be scraped.",
            "Prometheus has not scraped the node agent {{ $labels.instance }} for "
            f"{t.AGENT_DOWN_FOR}: that node's real-time GPU metrics and alerts are missing.",
            "slurmscope",
        ),
        Alert(
            "SlurmscopeAgentsDown",
            f'count by (job) (up{{job="{t.AGENT_JOB}"}} == 0) / count by (job) (up{{job="{t.AGENT_JOB}"}})'
            f" > {t.AGENTS_DOWN_RATIO}"
            f' and count by (job) (up{{job="{t.AGENT_JOB}"}} == 0) >= {t.AGENTS_DOWN_MIN}',
            t.AGENTS_DOWN_FOR,
            "critical",
            "Many slurmscope node agents cannot be scraped.",
            "{{ $value | humanizePercentage }} of the node agents of job {{ $labels.job }} are down "
            f"(more than {round(t.AGENTS_DOWN_RATIO * 100)}%).",
            "slurmscope",
        ),
        Alert(
            "SlurmscopeRuleEvaluationFailing",
            "sum by (job, instance, rule_group)"
            f' (increase(prometheus_rule_evaluation_failures_total{{rule_group=~".*;slurmscope[.].*"}}[{t.RULE_FAILURES_WINDOW}]))'
            " > 0",
            t.RULE_FAILURES_FOR,
            "critical",
            "Prometheus fails to evaluate slurmscope rules.",
            "Prometheus {{ $labels.instance }} failed {{ $value }} evaluation(s) of rule group "
            f"{{{{ $labels.rule_group }}}} in the last {t.RULE_FAILURES_WINDOW}.",
            "slurmscope",
        ),
    )


def alerts(
    xid_actions: Mapping[int, str] | None = None, thresholds: Mapping[str, object] | None = None
) -> tuple[Alert, ...]:
    """Every alert, the XID ones with the operator's health.xid_actions applied, at the thresholds of
    alerts/thresholds.py with `thresholds` (config alerts.thresholds) applied."""
    th = t.resolve(thresholds)
    out: list[Alert] = []
    for a in _alert_table(th):
        out.extend(xid_alerts(xid_actions, live=a == _XID_LIVE, t=th) if isinstance(a, str) else (a,))
    return tuple(out)


ALERTS: tuple[Alert, ...] = alerts()


def rule_groups(
    runbook_base: str,
    xid_actions: Mapping[int, str] | None = None,
    thresholds: Mapping[str, object] | None = None,
) -> dict:
    """The rule file as a mapping (Prometheus rule-file format); runbook URLs are runbook_base + <runbook>.md."""
    every = alerts(xid_actions, thresholds)
    groups = [
        {
            "name": "slurmscope.recording",
            "interval": "1m",
            "rules": [{"record": r.record, "expr": r.expr} for r in RECORDING],
        }
    ]
    order: list[str] = []
    for a in every:
        if a.group not in order:
            order.append(a.group)
    for g in order:
        groups.append(
            {
                "name": f"slurmscope.{g}",
                "interval": GROUP_INTERVALS.get(g, "1m"),
                "rules": [
                    {
                        "alert": a.name,
                        "expr": a.expr,
                        "for": a.for_,
                        "labels": {"severity": a.severity, **a.labels},
                        "annotations": {
                            "summary": a.summary,
                            "description": a.description,
                            "runbook_url": f"{runbook_base}{a.runbook_name}.md",
                        },
                    }
                    for a in every
                    if a.group == g
                ],
            }
        )
    return {"groups": groups}
