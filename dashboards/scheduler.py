"""Scheduler and backfill: is slurmctld keeping up, and does backfill fill the holes."""

from __future__ import annotations

from slurmscope.dashboards.common import CP, C, Q, new_dashboard, single, ts

SLUG = "scheduler"
TITLE = "Slurm scheduler and backfill"


def build():
    return (
        new_dashboard(SLUG, TITLE, "sdiag cycle times and counters, backfill share, schedule holes.")
        .with_panel(
            single(
                "Since last backfill cycle",
                Q(f"time() - max(slurmscope_sdiag_backfill_last_cycle_timestamp_seconds{{{C}}})"),
                "s",
                w=6,
            )
        )
        .with_panel(single("Server threads", Q(f"max(slurmscope_sdiag_server_threads{{{C}}})"), w=6))
        .with_panel(single("Agent queue", Q(f"max(slurmscope_sdiag_agent_queue_size{{{C}}})"), w=6))
        .with_panel(single("Backfill depth", Q(f"max(slurmscope_sdiag_backfill_last_depth{{{C}}})"), w=6))
        .with_panel(
            ts(
                "Cycle times",
                [
                    Q(f"slurmscope_sdiag_main_last_cycle_seconds{{{C}}}", "main last"),
                    Q(f"slurmscope_sdiag_main_mean_cycle_seconds{{{C}}}", "main mean"),
                    Q(f"slurmscope_sdiag_backfill_last_cycle_seconds{{{C}}}", "backfill last"),
                    Q(f"slurmscope_sdiag_backfill_mean_cycle_seconds{{{C}}}", "backfill mean"),
                ],
                "s",
            )
        )
        .with_panel(
            ts(
                "Scheduler events per hour",
                [Q(f"sum by (event) (increase(slurmscope_scheduler_jobs_total{{{C}}}[1h]))", "{{event}}")],
            )
        )
        .with_panel(
            ts(
                "Cycles per hour",
                [
                    Q(
                        f"sum by (scheduler) (increase(slurmscope_scheduler_cycles_total{{{C}}}[1h]))",
                        "{{scheduler}}",
                    )
                ],
            )
        )
        .with_panel(
            ts(
                "Share of started jobs by backfill",
                [Q(f"slurmscope_backfill_started_jobs_ratio{{{CP}}}", "{{partition}}")],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "Holes filled by backfill",
                [Q(f"slurmscope_backfill_hole_filled_ratio{{{CP}}}", "{{partition}} {{gpu_model}}")],
                "percentunit",
            )
        )
        .with_panel(
            ts(
                "Idle, hole and backfill GPUs",
                [
                    Q(
                        f"partition_kind:slurmscope_occupancy_gpu_seconds:rate1h{{{CP}}}",
                        "{{partition}} {{kind}}",
                    )
                ],
            )
        )
    )
