"""GPU efficiency: utilisation of allocated GPUs and idle capacity."""

from __future__ import annotations

from slurmscope.dashboards.common import CA, CGA, CP, LIVE, C, Q, new_dashboard, single, tbl, ts

SLUG = "efficiency"
TITLE = "GPU efficiency"


def build():
    return (
        new_dashboard(SLUG, TITLE, "GPU utilisation, power and idle capacity.")
        .with_panel(
            single(
                "Mean GPU utilisation",
                Q(f"cluster:slurmscope_gpu_utilization_ratio:avg{{{C}}}"),
                "percentunit",
                w=8,
            )
        )
        .with_panel(
            single(f"GPU power {LIVE}", Q(f"sum(cluster:slurmscope_gpu_power_watts:sum{{{C}}})"), "watt", w=8)
        )
        .with_panel(
            single(
                "Idle GPUs (1h mean)",
                Q(f'sum(partition_kind:slurmscope_occupancy_gpu_seconds:rate1h{{{CP}, kind="idle"}})'),
                w=8,
            )
        )
        .with_panel(
            ts(
                "Mean GPU utilisation",
                [Q(f"cluster:slurmscope_gpu_utilization_ratio:avg{{{C}}}", "{{cluster}}")],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                f"GPU utilisation by node {LIVE}",
                [Q(f"avg by (node) (slurmscope_gpu_utilization_ratio{{{CGA}}})", "{{node}}")],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "Allocated but idle GPUs by account (daily mean)",
                [
                    Q(
                        f'sum by (account) (rate(slurmscope_allocated_gpu_seconds_total{{{CA}, kind="idle"}}[1d]))',
                        "{{account}}",
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "Idle share of allocated GPU time",
                [
                    Q(
                        f'sum by (account) (rate(slurmscope_allocated_gpu_seconds_total{{{CA}, kind="idle"}}[1d]))'
                        f' / sum by (account) (rate(slurmscope_allocated_gpu_seconds_total{{{CA}, kind="sampled"}}[1d]))',
                        "{{account}}",
                    )
                ],
                "percentunit",
            )
        )
        .with_panel(
            tbl(
                "Jobs that never used their GPUs",
                [Q(f"sum by (account) (slurmscope_zero_util_jobs_total{{{CA}}})")],
                w=12,
            )
        )
        .with_panel(
            ts(
                "Idle GPUs by partition",
                [
                    Q(
                        f'partition_kind:slurmscope_occupancy_gpu_seconds:rate1h{{{CP}, kind="idle"}}',
                        "{{partition}}",
                    )
                ],
            )
        )
    )
