"""Cost and chargeback: spend per account from monotone counters (cost per GPU-hour is a rule)."""

from __future__ import annotations

from slurmscope.dashboards.common import CA, CP, CPA, Q, new_dashboard, single, tbl, ts

SLUG = "cost"
TITLE = "Slurm cost and chargeback"


def build():
    return (
        new_dashboard(
            SLUG,
            TITLE,
            "Spend and GPU-hours per account from counters that grow with running jobs;"
            " invoices come from the monthly report.",
            time_from="now-7d",
        )
        .with_panel(
            single(
                "Spend per hour",
                Q(f"sum(account:slurmscope_cost_usd:rate1h{{{CA}}}) * 3600"),
                "currencyUSD",
                w=8,
            )
        )
        .with_panel(
            single("GPUs in use (1h mean)", Q(f"sum(account:slurmscope_gpu_seconds:rate1h{{{CA}}})"), w=8)
        )
        .with_panel(
            single(
                "Pending corrections", Q(f"sum(slurmscope_cost_correction_usd{{{CPA}}})"), "currencyUSD", w=8
            )
        )
        .with_panel(
            ts(
                "Spend per hour by account",
                [Q(f"account:slurmscope_cost_usd:rate1h{{{CA}}} * 3600", "{{account}}")],
                "currencyUSD",
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "GPUs in use by account",
                [Q(f"account:slurmscope_gpu_seconds:rate1h{{{CA}}}", "{{account}}")],
                stacked=True,
            )
        )
        .with_panel(
            ts(
                "Cost per GPU-hour by account",
                [Q(f"account:slurmscope_cost_usd_per_gpu_hour:ratio_rate1h{{{CA}}}", "{{account}}")],
                "currencyUSD",
            )
        )
        .with_panel(
            ts(
                "Capacity by state (GPUs, daily mean)",
                [Q(f"sum by (state) (rate(slurmscope_capacity_gpu_seconds_total{{{CP}}}[1d]))", "{{state}}")],
                stacked=True,
            )
        )
        .with_panel(
            tbl(
                "Spend so far by account", [Q(f"sum by (account) (slurmscope_cost_usd_total{{{CPA}}})")], w=12
            )
        )
        .with_panel(
            tbl(
                "GPU-hours so far by account, partition and model",
                [Q(f"sum by (account, partition, gpu_model) (slurmscope_gpu_seconds_total{{{CPA}}}) / 3600")],
                w=12,
            )
        )
        .with_panel(
            tbl(
                "Cost per useful GPU-hour, month to date",
                [Q(f"sum by (account) (slurmscope_cost_per_useful_gpu_hour_usd{{{CA}}})")],
                w=8,
                description="Cost of the NVML-sampled allocations / their utilisation-weighted GPU-hours: what a "
                "GPU-hour of real work costs each account (docs/pipelines.md, cost).",
            )
        )
        .with_panel(
            tbl(
                "Spend on allocated but idle GPUs by account",
                [Q(f"sum by (account) (slurmscope_allocated_idle_cost_usd_total{{{CA}}})")],
                w=8,
            )
        )
        .with_panel(
            tbl(
                "GPU energy by account (kWh)",
                [Q(f"sum by (account) (slurmscope_account_gpu_energy_joules_total{{{CA}}}) / 3.6e6")],
                w=8,
                description="From NVML energy counters (else mean power); priced by billing.energy_usd_per_kwh x "
                "billing.pue in slurmscope_account_energy_cost_usd_total.",
            )
        )
    )
