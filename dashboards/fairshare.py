"""Fair-share: who holds shares, who uses them, and who is starved."""

from __future__ import annotations

from slurmscope.dashboards.common import CA, CPA, Q, new_dashboard, tbl, ts

SLUG = "fairshare"
TITLE = "Slurm fair-share"


def build():
    return (
        new_dashboard(
            SLUG,
            TITLE,
            "Shares, usage and effective usage per account as Slurm computes them.",
            time_from="now-7d",
        )
        .with_panel(
            ts(
                "Effective usage by account",
                [Q(f"slurmscope_fairshare_effective_usage_ratio{{{CA}}}", "{{account}}")],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "Shares by account",
                [Q(f"slurmscope_fairshare_shares_ratio{{{CA}}}", "{{account}}")],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "Usage over shares by account",
                [
                    Q(
                        f"slurmscope_fairshare_effective_usage_ratio{{{CA}}} / slurmscope_fairshare_shares_ratio{{{CA}}}",
                        "{{account}}",
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "Pending GPUs by account",
                [Q(f"sum by (account) (slurmscope_gpus_pending{{{CPA}}})", "{{account}}")],
            )
        )
        .with_panel(
            ts(
                "Usage share (7 days) against target share",
                [
                    Q(f'slurmscope_fairshare_usage_share_ratio{{{CA}, window="7d"}}', "{{account}} usage"),
                    Q(f"slurmscope_fairshare_target_share_ratio{{{CA}}}", "{{account}} target"),
                ],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "Starved for, by account",
                [Q(f"slurmscope_fairshare_starved_seconds{{{CA}}}", "{{account}}")],
                "s",
            )
        )
        .with_panel(
            tbl(
                "Fair-share now",
                [
                    Q(f"slurmscope_fairshare_shares_ratio{{{CA}}}", "shares"),
                    Q(f"slurmscope_fairshare_usage_ratio{{{CA}}}", "usage"),
                    Q(f"slurmscope_fairshare_effective_usage_ratio{{{CA}}}", "effective usage"),
                    Q(f"slurmscope_fairshare_level_fs{{{CA}}}", "LevelFS"),
                ],
            )
        )
    )
