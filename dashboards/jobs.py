"""Jobs and queue: what is pending, why, and how long jobs wait to start."""

from __future__ import annotations

from slurmscope.dashboards.common import CP, CPA, Q, new_dashboard, single, tbl, ts

SLUG = "jobs"
TITLE = "Slurm jobs and queue"


def build():
    return (
        new_dashboard(SLUG, TITLE, "Pending jobs and reasons, GPU demand, wait-time quantiles, outcomes.")
        .with_panel(
            single(
                "Oldest pending job",
                Q(f"time() - min(slurmscope_pending_oldest_submit_timestamp_seconds{{{CPA}}})"),
                "s",
                w=6,
            )
        )
        .with_panel(single("Pending GPUs", Q(f"sum(slurmscope_gpus_pending{{{CPA}}})"), w=6))
        .with_panel(single("Running jobs", Q(f"sum(slurmscope_jobs_running{{{CPA}}})"), w=6))
        .with_panel(
            single(
                "System failure share (1h)",
                Q(f'max(partition_failure:slurmscope_jobs_failed:ratio_rate1h{{{CP}, failure="system"}})'),
                "percentunit",
                w=6,
            )
        )
        .with_panel(
            ts(
                "Pending jobs by reason",
                [Q(f"sum by (reason) (slurmscope_jobs_pending{{{CPA}}})", "{{reason}}")],
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "Pending GPUs by partition and QOS",
                [Q(f"sum by (partition, qos) (slurmscope_gpus_pending{{{CPA}}})", "{{partition}} {{qos}}")],
            )
        )
        .with_panel(
            ts(
                "Wait p90 by partition",
                [Q(f"partition:slurmscope_job_wait_seconds_p90:max{{{CP}}}", "{{partition}}")],
                "s",
            )
        )
        .with_panel(
            ts(
                "Jobs ended per hour by state",
                [Q(f"sum by (state) (increase(slurmscope_jobs_ended_total{{{CPA}}}[1h]))", "{{state}}")],
            )
        )
        .with_panel(
            tbl("Wait-time quantiles of the latest day", [Q(f"slurmscope_job_wait_seconds{{{CPA}}}")])
        )
    )
