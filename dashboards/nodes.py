"""Nodes and GPU health: which nodes are out, why, and which GPUs are sick."""

from __future__ import annotations

from slurmscope.dashboards.common import CG, CGA, CP, LIVE, C, Q, new_dashboard, tbl, ts

SLUG = "nodes"
TITLE = "Slurm nodes and GPU health"


def _worst_first(kind: str, matcher: str) -> str:
    """The `_info` series (status, reason) valued 2 failing / 1 degraded / 0 ok, sorted worst first.

    Every node (GPU) is listed, so a healthy cluster shows its verdicts too, not an empty table.
    """
    key = "cluster, node" if kind == "node" else "cluster, node, gpu"
    status = f"slurmscope_{kind}_health_status"
    return (
        f"sort_desc(slurmscope_{kind}_health_info{{{matcher}}} * on ({key}) group_left ()"
        f' (2 * max by ({key}) ({status}{{{matcher}, status="failing"}})'
        f' + max by ({key}) ({status}{{{matcher}, status="degraded"}})))'
    )


def build():
    return (
        new_dashboard(SLUG, TITLE, "Node states with reasons, GPU availability by model, and NVML health.")
        .with_panel(
            ts(
                "Nodes by health verdict",
                [Q(f"sum by (status) (slurmscope_node_health_status{{{C}}})", "{{status}}")],
                stacked=True,
                description="ok / degraded / failing per node, combining Slurm state, NVML GPU health and GRES vs NVML"
                " GPU counts (rules: docs/pipelines.md#health).",
            )
        )
        .with_panel(
            tbl(
                "Node health verdicts and why (failing first)",
                [Q(_worst_first("node", C), "node")],
                w=12,
                description="Each node's verdict and the first rule that holds (docs/pipelines.md#health);"
                " value 2 = failing, 1 = degraded, 0 = ok. Slurm's own reason text is in"
                " 'Node states and reasons'.",
            )
        )
        .with_panel(
            tbl(
                "GPU health verdicts and why (failing first)",
                [Q(_worst_first("gpu", CG), "gpu")],
                w=12,
                description="Each GPU's verdict (central NVML data) and the first rule that holds;"
                " value 2 = failing, 1 = degraded, 0 = ok.",
            )
        )
        .with_panel(
            ts("Nodes by state", [Q(f"sum by (state) (slurmscope_nodes{{{CP}}})", "{{state}}")], stacked=True)
        )
        .with_panel(
            ts(
                "GPUs by model and state",
                [
                    Q(
                        f"sum by (gpu_model, state) (partition_gpu_model_state:slurmscope_gpus:sum{{{CP}}})",
                        "{{gpu_model}} {{state}}",
                    )
                ],
            )
        )
        .with_panel(tbl("Node states and reasons", [Q(f"slurmscope_node_state_info{{{CP}}}")]))
        .with_panel(
            ts(
                f"Hottest GPU per node {LIVE}",
                [Q(f"max by (node) (slurmscope_gpu_temperature_celsius{{{CGA}}})", "{{node}}")],
                "celsius",
                description="The node agents' own readings, scraped every 15 s.",
            )
        )
        .with_panel(
            ts(
                "Throttled time per node (worst GPU)",
                [Q(f"max by (node) (slurmscope_gpu_throttle_ratio{{{CG}}})", "{{node}}")],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "XID errors per hour",
                [
                    Q(
                        f"sum by (node, xid) (increase(slurmscope_gpu_xid_events_total{{{CG}}}[1h]))",
                        "{{node}} XID {{xid}}",
                    )
                ],
            )
        )
        .with_panel(
            ts(
                f"GPU power {LIVE}",
                [Q(f"sum by (node) (slurmscope_gpu_power_watts{{{CGA}}})", "{{node}}")],
                "watt",
                description="The node agents' own readings, scraped every 15 s.",
            )
        )
        .with_panel(
            tbl(
                "Uncorrectable ECC errors per node",
                [Q(f'sum by (node) (slurmscope_gpu_ecc_errors_total{{{CG}, type="uncorrected"}})')],
                w=8,
            )
        )
        .with_panel(
            tbl(
                "Failed row remaps per node",
                [Q(f"sum by (node) (slurmscope_gpu_row_remap_failed{{{CG}}})")],
                w=8,
            )
        )
        .with_panel(
            tbl(
                "GPUs missing (GRES minus NVML)",
                [
                    Q(
                        f"max by (node) (slurmscope_node_gpus_configured{{{C}}})"
                        f" - max by (node) (slurmscope_node_gpus_visible{{{C}}})"
                    )
                ],
                w=8,
            )
        )
        .with_panel(
            tbl(
                "Drift scores (breached = 1)",
                [
                    Q(f"slurmscope_drift_score{{{C}}}", "score"),
                    Q(f"slurmscope_drift_breached{{{C}}}", "breached"),
                ],
            )
        )
    )
