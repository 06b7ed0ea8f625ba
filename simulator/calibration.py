"""The workload mix tuned to the published GPU-cluster traces, and the figures that compare a run with them.

The traces (Helios, Seren and Kalos of AcmeTrace, Philly) are public as per-cluster summaries (shares of
job outcomes, run and queue times, GPUs per job), not as job logs, so the simulator is tuned to land near
those summaries, and `calibration` computes the same figures from a simulated sacct.txt for the
comparison table in docs/simulator.md.
"""

from __future__ import annotations

from datetime import datetime

# Arrival rates per 1000 GPUs per day (pretraining: per day for the whole cluster, its size scales with
# the partition instead), tuned so that 10,000 GPUs x 30 days is about a million jobs (array tasks
# counted) and the GPU job mix lands near the published traces (docs/simulator.md).
CLASSES = {
    #            rate   partition mix          qos
    "pretrain": (3.0, {"h100": 0.8, "a100": 0.2}, "high"),
    "finetune": (200.0, {"h100": 0.5, "a100": 0.5}, "normal"),
    "eval": (8.0, {"h100": 0.3, "a100": 0.7}, "low"),  # arrays, ~100 tasks on average
    "interactive": (50.0, {"h100": 0.5, "a100": 0.5}, "debug"),
    "dev": (1000.0, {"h100": 0.5, "a100": 0.5}, "normal"),
    "cpu": (1250.0, {"cpu": 1.0}, "normal"),
}
OUTCOMES = {
    #              COMPLETED FAILED CANCELLED OUT_OF_MEMORY
    "pretrain": (0.30, 0.15, 0.55, 0.0),
    "finetune": (0.62, 0.18, 0.15, 0.05),
    "eval": (0.80, 0.15, 0.02, 0.03),
    "interactive": (0.45, 0.05, 0.50, 0.0),
    "dev": (0.42, 0.46, 0.09, 0.03),
    "cpu": (0.85, 0.10, 0.04, 0.01),
}


def calibration(sacct: str, gpus: int, seconds: float) -> dict:
    """The trace-summary figures (docs/simulator.md) computed from a sacct.txt: final attempts only."""
    rows = [ln.split("|") for ln in sacct.splitlines()[1:] if ln and "." not in ln.split("|", 1)[0]]
    gpu_jobs = []
    for r in rows:
        if r[14] in ("PENDING", "RUNNING") or r[10] == "Unknown":
            continue
        g = 0
        for kv in r[19].split(","):
            if kv.startswith("gres/gpu="):
                g = int(kv.split("=")[1])
        el = _secs(r[12])
        q = int(datetime.fromisoformat(r[10]).timestamp() - datetime.fromisoformat(r[8]).timestamp())
        st = "CANCELLED" if r[14].startswith("CANCELLED") else r[14]
        gpu_jobs.append((g, el, q, st))
    gj = [x for x in gpu_jobs if x[0] > 0]
    bucket = {"COMPLETED": "completed", "CANCELLED": "cancelled"}
    count = {"completed": 0, "cancelled": 0, "failed": 0}
    gtime = {"completed": 0, "cancelled": 0, "failed": 0}
    for g, el, _q, st in gj:
        b = bucket.get(st, "failed")
        count[b] += 1
        gtime[b] += g * el
    n = len(gj) or 1
    tot = sum(gtime.values()) or 1
    runs = sorted(x[1] for x in gj)
    queues = sorted(x[2] for x in gj)
    return {
        "gpu_jobs": len(gj),
        "cpu_jobs": len(gpu_jobs) - len(gj),
        "count_share": {k: round(v / n, 3) for k, v in count.items()},
        "gpu_time_share": {k: round(v / tot, 3) for k, v in gtime.items()},
        "avg_run_s": round(sum(runs) / n, 1),
        "median_run_s": runs[len(runs) // 2] if runs else 0,
        "avg_queue_s": round(sum(queues) / n, 1),
        "median_queue_s": queues[len(queues) // 2] if queues else 0,
        "avg_gpus": round(sum(x[0] for x in gj) / n, 2),
        "gpu_allocation_ratio": round(sum(x[0] * x[1] for x in gj) / (gpus * seconds), 3),
    }


def _secs(text: str) -> int:
    d, _, rest = text.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(d) if d else 0) * 86400 + h * 3600 + m * 60 + s
