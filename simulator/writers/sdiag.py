"""snapshots/sdiag/<epoch>.txt: `sdiag`, with the day's job counters (reset at midnight UTC) and the main
and backfill scheduler statistics; the snapshot time is printed inside too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..slurmtext import ctime

if TYPE_CHECKING:
    from ..engine import Sim


def sdiag(sim: Sim, t: int) -> str:
    c = sim.counters
    d = sim.day_counters
    pending = sum(len(p.queue) for p in sim.cluster.parts.values())
    running = sum(len(p.running) for p in sim.cluster.parts.values())
    mc = max(1, c["main_cycles"])
    bc = c["bf_cycles"]
    mins = max(1, (t - sim.t0) // 60)
    lines = [
        "*******************************************************",
        f"sdiag output at {ctime(t)} ({t})",
        f"Data since      {ctime(sim.stats_since)} ({sim.stats_since})",
        "*******************************************************",
        "Server thread count:  3",
        "Agent queue size:     0",
        "Agent count:          0",
        "Agent thread count:   0",
        "DBD Agent queue size: 0",
        "",
        f"Jobs submitted: {d['submitted']}",
        f"Jobs started:   {d['started']}",
        f"Jobs completed: {d['completed']}",
        f"Jobs canceled:  {d['canceled']}",
        f"Jobs failed:    {d['failed']}",
        "",
        f"Job states ts:  {ctime(t)} ({t})",
        f"Jobs pending:   {pending}",
        f"Jobs running:   {running}",
        "",
        "Main schedule statistics (microseconds):",
        f"\tLast cycle:   {c['main_last_us']}",
        f"\tMax cycle:    {c['main_max_us']}",
        f"\tTotal cycles: {c['main_cycles']}",
        f"\tMean cycle:   {c['main_us_sum'] // mc}",
        f"\tMean depth cycle:  {c['main_depth_sum'] // mc}",
        f"\tCycles per minute: {c['main_cycles'] // mins}",
        f"\tLast queue length: {pending}",
        "",
        "Main scheduler exit:",
        f"\tEnd of job queue: {c['main_cycles']}",
        "\tHit default_queue_depth: 0",
        "\tHit sched_max_job_start: 0",
        "\tBlocked on licenses: 0",
        "\tHit max_rpc_cnt: 0",
        "\tTimeout (max_sched_time): 0",
        "",
        "Backfilling stats",
        f"\tTotal backfilled jobs (since last slurm start): {c['bf_total']}",
        f"\tTotal backfilled jobs (since last stats cycle start): {c['bf_since']}",
        "\tTotal backfilled heterogeneous job components: 0",
        f"\tTotal cycles: {bc}",
        f"\tLast cycle when: {ctime(c['bf_last'])} ({c['bf_last']})" if bc else "\tLast cycle when: N/A",
        f"\tLast cycle: {c['bf_last_us'] if bc else 0}",
        f"\tMax cycle:  {c['bf_max_us']}",
    ]
    if bc:
        lines += [
            f"\tMean cycle: {c['bf_us_sum'] // bc}",
            f"\tLast depth cycle: {c['bf_last_depth']}",
            f"\tLast depth cycle (try sched): {c['bf_last_depth']}",
            f"\tDepth Mean: {c['bf_depth_sum'] // bc}",
            f"\tDepth Mean (try depth): {c['bf_depth_sum'] // bc}",
            f"\tLast queue length: {pending}",
            f"\tQueue length mean: {c['bf_qlen_sum'] // bc}",
            f"\tLast table size: {min(pending, sim.cfg.bf_max_reservations)}",
            f"\tMean table size: {min(pending, sim.cfg.bf_max_reservations)}",
        ]
    else:
        lines += [
            "\tLast depth cycle: 0",
            "\tLast depth cycle (try sched): 0",
            "\tLast queue length: 0",
            "\tLast table size: 0",
        ]
    lines += [
        "",
        "Backfill exit",
        f"\tEnd of job queue: {bc}",
        "\tHit bf_max_job_start: 0",
        "\tHit bf_max_job_test: 0",
        "\tSystem state changed: 0",
        "\tHit table size limit (bf_node_space_size): 0",
        "\tTimeout (bf_max_time): 0",
        "",
        "Latency for 1000 calls to gettimeofday(): 14 microseconds",
        "",
    ]
    return "\n".join(lines)
