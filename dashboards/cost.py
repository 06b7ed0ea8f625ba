"""Cost and chargeback: spend per account from monotone counters (cost per GPU-hour is a rule), and each
account's budgets and Slurm allocations: burn-down and period-end forecast."""

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
            ts(
                "Budget used this period (burn-down)",
                [
                    Q(
                        f"max by (account, budget) (slurmscope_account_budget_spent_ratio{{{CA}}})",
                        "{{account}} {{budget}}",
                    )
                ],
                "percentunit",
                description="Share of each budget used so far in its period: config budgets (usd, gpu_hours) from "
                "the invoices, Slurm's allocations (GrpTRESMins:<tres>) as Slurm counts them, sshare GrpTRESRaw "
                "(decayed). SlurmAccountBudgetSpent fires at alerts.thresholds.budget_spent_ratio "
                "(docs/pipelines.md#budgets).",
            )
        )
        .with_panel(
            ts(
                "Budget forecast at period end",
                [
                    Q(
                        f"max by (account, budget) (slurmscope_account_budget_forecast_ratio{{{CA}}})",
                        "{{account}} {{budget}}",
                    )
                ],
                "percentunit",
                description="Used / elapsed share of the period: where each budget ends at this period's mean rate; "
                "above 100% SlurmAccountBudgetForecastOver fires. None in a period's first day, nor for Slurm "
                "allocations whose usage decays or never resets.",
            )
        )
        .with_panel(
            tbl(
                "Budgets: used and forecast now",
                [
                    Q(f"max by (account, budget) (slurmscope_account_budget_spent_ratio{{{CA}}})", "used"),
                    Q(
                        f"max by (account, budget) (slurmscope_account_budget_forecast_ratio{{{CA}}})",
                        "forecast",
                    ),
                ],
                w=12,
                description="Per account and budget, the share used and the period-end forecast (1 = the whole "
                "budget); the periods and amounts are in the monthly report and mart_budget_period.",
            )
        )
        .with_panel(
            tbl(
                "Money budgets this period",
                [Q(f"max by (account) (slurmscope_account_budget_usd{{{CA}}})")],
                w=12,
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
