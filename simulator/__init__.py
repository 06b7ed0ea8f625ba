"""A simulated AI training cluster that writes what Slurm would print, plus the truth behind it.

Why a simulator: a newcomer has no Slurm and no GPU, and every pipeline needs a bed where the right
answer is known. One event loop (engine) drives the workload (arrivals, shapes, outcomes), Slurm's
scheduling (multifactor priority with Fair Tree, a main pass that stops a partition at its first blocked
job, backfill that never delays the reservations it made) and fault injection (XID classes, NODE_FAIL
with requeue from the last checkpoint, drains, one degrading GPU). The writers print one file format
each: sacct.txt, the sinfo/squeue/sshare/sdiag/reservation snapshots, sacctmgr's events.txt, the NVML
spool, and events.jsonl, the ground truth tests reconcile against (docs/simulator.md lists them all).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from . import engine
from .model import SimConfig
from .slurmtext import ts


def simulate(gpus: int, days: float, seed: int, out_dir: Path, **options: object) -> dict:
    """Simulate, write every output file into `out_dir`, and return a summary (also in summary.json)."""
    if gpus < 1 or days <= 0:
        raise ValueError(f"simulate needs --gpus >= 1 and --days > 0, got gpus={gpus} days={days}")
    cfg = SimConfig(gpus=gpus, days=days, seed=seed, **options)
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    sim = engine.run(cfg, out_dir)
    t1 = time.perf_counter()
    files = engine.write(sim)
    t2 = time.perf_counter()
    states = sim.state_counts
    parts = sim.cluster.parts.values()
    summary = {
        "cluster": cfg.cluster,
        "start": ts(sim.t0),
        "end": ts(sim.t_end),
        "gpus": sim.cluster.gpu_total,
        "nodes": {p.name: len(p.nodes) for p in parts},
        "jobs_submitted": sim.counters["submitted"],
        "attempts_finished": sum(states.values()),
        "finished_by_state": dict(sorted(states.items())),
        "running_at_end": sum(len(p.running) for p in parts),
        "pending_at_end": sum(len(p.queue) for p in parts) + len(sim.waiting_resv) + len(sim.begin_wait),
        "backfilled": sim.counters["bf_total"],
        "snapshot_interval_s": cfg.snapshot_interval_s,
        "files": files,
        "config": asdict(cfg),
        "timing_s": {"simulate": round(t1 - t0, 3), "write": round(t2 - t1, 3)},
    }
    stable = {k: v for k, v in summary.items() if k != "timing_s"}
    (out_dir / "summary.json").write_text(
        json.dumps(stable, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return summary
