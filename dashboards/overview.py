"""Cluster overview: the first screen of the on-call engineer (capacity, queue, health, spend)."""

from __future__ import annotations

from slurmscope.dashboards.common import CA, CP, CPA, C, Q, new_dashboard, single, ts

SLUG = "overview"
TITLE = "Slurm cluster overview"


def build():
    return (
        new_dashboard(SLUG, TITLE, "GPU capacity, queue, node health and spend at a glance.")
        .with_panel(
            single("GPUs allocated", Q(f"cluster:slurmscope_gpus_allocated:ratio{{{C}}}"), "percentunit")
        )
        .with_panel(single("GPUs down", Q(f'sum(slurmscope_gpus{{{CP}, state="down"}})')))
        .with_panel(single("Nodes down", Q(f"sum(slurmscope_node_down{{{C}}})")))
        .with_panel(single("Pending jobs", Q(f"sum(slurmscope_jobs_pending{{{CPA}}})")))
        .with_panel(single("Firing alerts", Q(f'count(ALERTS{{alertstate="firing", {C}}}) or vector(0)')))
        .with_panel(
            single(
                "Spend per hour", Q(f"sum(account:slurmscope_cost_usd:rate1h{{{CA}}}) * 3600"), "currencyUSD"
            )
        )
        .with_panel(
            ts(
                "GPUs by state",
                [Q(f"sum by (state) (partition_gpu_model_state:slurmscope_gpus:sum{{{CP}}})", "{{state}}")],
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "Jobs pending and running",
                [
                    Q(f"sum(slurmscope_jobs_pending{{{CPA}}})", "pending"),
                    Q(f"sum(slurmscope_jobs_running{{{CPA}}})", "running"),
                ],
            )
        )
        .with_panel(
            ts(
                "Jobs ended per hour by state",
                [Q(f"sum by (state) (increase(slurmscope_jobs_ended_total{{{CPA}}}[1h]))", "{{state}}")],
            )
        )
        .with_panel(
            ts(
                "Mean GPU utilisation",
                [Q(f"cluster:slurmscope_gpu_utilization_ratio:avg{{{C}}}", "{{cluster}}")],
                "percentunit",
            )
        )
    )
