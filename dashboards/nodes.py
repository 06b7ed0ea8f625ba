"""Nodes and GPU health: which nodes are out, why, and which GPUs are sick."""

from __future__ import annotations

from slurmscope.dashboards.common import CP, C, Q, new_dashboard, tbl, ts

SLUG = "nodes"
TITLE = "Slurm nodes and GPU health"


def build():
    return (
        new_dashboard(SLUG, TITLE, "Node states with reasons, GPU availability by model, and NVML health.")
        .with_panel(ts("Nodes by state", [Q(f"sum by (state) (slurmscope_nodes{{{CP}}})", "{{state}}")], stacked=True))
        .with_panel(ts("GPUs by model and state", [
            Q(f"sum by (gpu_model, state) (partition_gpu_model_state:slurmscope_gpus:sum{{{CP}}})",
              "{{gpu_model}} {{state}}")]))
        .with_panel(tbl("Node states and reasons", [Q(f"slurmscope_node_state_info{{{CP}}}")]))
        .with_panel(ts("Hottest GPU per node", [Q(f"max by (node) (slurmscope_gpu_temperature_celsius{{{C}}})",
                                                 "{{node}}")], "celsius"))
        .with_panel(ts("Throttled time per node (worst GPU)",
                       [Q(f"max by (node) (slurmscope_gpu_throttle_ratio{{{C}}})", "{{node}}")], "percentunit"))
        .with_panel(ts("XID errors per hour", [
            Q(f"sum by (node, xid) (increase(slurmscope_gpu_xid_events_total{{{C}}}[1h]))", "{{node}} XID {{xid}}")]))
        .with_panel(ts("GPU power", [Q(f"sum by (node) (slurmscope_gpu_power_watts{{{C}}})", "{{node}}")], "watt"))
        .with_panel(tbl("Uncorrectable ECC errors per node",
                        [Q(f'sum by (node) (slurmscope_gpu_ecc_errors_total{{{C}, type="uncorrected"}})')], w=8))
        .with_panel(tbl("Failed row remaps per node",
                        [Q(f"sum by (node) (slurmscope_gpu_row_remap_failed{{{C}}})")], w=8))
        .with_panel(tbl("GPUs missing (GRES minus NVML)", [
            Q(f"max by (node) (slurmscope_node_gpus_configured{{{C}}})"
              f" - max by (node) (slurmscope_node_gpus_visible{{{C}}})")], w=8))
        .with_panel(tbl("Drift scores (breached = 1)", [
            Q(f"slurmscope_drift_score{{{C}}}", "score"),
            Q(f"slurmscope_drift_breached{{{C}}}", "breached")]))
    )
