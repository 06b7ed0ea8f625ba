"""Reliability: failing jobs, requeues, node faults and the GPU-hours they cost."""

from __future__ import annotations

from slurmscope.dashboards.common import CP, CPA, C, Q, new_dashboard, single, tbl, ts

from slurmscope.slurm_states import JOB_FAILURE_STATES

SLUG = "reliability"
TITLE = "Slurm reliability"

FAILED = f'state=~"{"|".join(JOB_FAILURE_STATES)}"'


def build():
    return (
        new_dashboard(
            SLUG, TITLE, "Job failures, requeues, node faults and lost GPU-hours.", time_from="now-7d"
        )
        .with_panel(
            single(
                "Jobs killed by faults (24h)",
                Q(f"sum(increase(slurmscope_fault_killed_jobs_total{{{CP}}}[1d]))"),
                w=8,
            )
        )
        .with_panel(
            single(
                "GPU-hours lost to faults (24h)",
                Q(f"sum(partition_fault_kind:slurmscope_fault_lost_gpu_seconds:increase1d{{{CP}}}) / 3600"),
                w=8,
            )
        )
        .with_panel(
            single("Requeues (1h)", Q(f"sum(partition:slurmscope_job_requeues:increase1h{{{CP}}})"), w=8)
        )
        .with_panel(
            ts(
                "Failed jobs per hour by state",
                [
                    Q(
                        f"sum by (state) (increase(slurmscope_jobs_ended_total{{{CPA}, {FAILED}}}[1h]))",
                        "{{state}}",
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "Failed share by partition, user and system failures",
                [
                    Q(
                        f"partition_failure:slurmscope_jobs_failed:ratio_rate1h{{{CP}}}",
                        "{{partition}} {{failure}}",
                    )
                ],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "Node DOWN/DRAIN events (6h)",
                [Q(f"sum by (node) (increase(slurmscope_node_events_total{{{C}}}[6h]))", "{{node}}")],
            )
        )
        .with_panel(
            ts(
                "GPU-hours lost to faults per day",
                [
                    Q(
                        f"partition_fault_kind:slurmscope_fault_lost_gpu_seconds:increase1d{{{CP}}} / 3600",
                        "{{partition}} {{fault_kind}}",
                    )
                ],
            )
        )
        .with_panel(
            tbl(
                "Node failure incidents, MTBF and MTTR",
                [
                    Q(f"slurmscope_node_failures{{{C}}}", "failures"),
                    Q(f"slurmscope_node_mtbf_seconds{{{C}}}", "MTBF"),
                    Q(f"slurmscope_node_mttr_seconds{{{C}}}", "MTTR"),
                ],
                w=12,
            )
        )
        .with_panel(
            tbl(
                "Goodput (effective training time) by job size, expected and measured",
                [Q(f"slurmscope_goodput_ratio{{{CP}}}")],
                w=12,
            )
        )
        .with_panel(
            tbl("Node incidents by cause", [Q(f"sum by (cause) (slurmscope_node_incidents{{{C}}})")], w=12)
        )
    )
