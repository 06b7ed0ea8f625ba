"""spool/<node>/<node>_<opened>Z.jsonl: per-GPU per-minute NVML aggregates in the node agent's spool format.

Written with the agent's own spool writer, so the central collector reads simulated and real spool files
through one path.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from slurmscope.spool import CLOCK_EVENT_CAUSES, HW_THROTTLE_MASK, write_spool_file

from ..faults import DEG_CLOCK_PER_DAY, DEG_TEMP_PER_DAY
from ..model import BIG, Job
from ..slurmtext import ts

if TYPE_CHECKING:
    from ..engine import Sim

GPU_SPECS = {
    "h100": {
        "model": "NVIDIA H100 80GB HBM3",
        "mem": 85899345920,
        "p_idle": 70.0,
        "p_max": 700.0,
        "t_idle": 31.0,
        "t_load": 66.0,
        "sm_idle": 345.0,
        "sm_max": 1980.0,
        "mem_clock": 2619,
    },
    "a100": {
        "model": "NVIDIA A100-SXM4-80GB",
        "mem": 85899345920,
        "p_idle": 60.0,
        "p_max": 400.0,
        "t_idle": 30.0,
        "t_load": 62.0,
        "sm_idle": 210.0,
        "sm_max": 1410.0,
        "mem_clock": 1593,
    },
}


def write_telemetry(sim: Sim) -> list[str]:
    """Per-GPU per-minute NVML aggregates for the telemetry nodes over the last `telemetry_days`, in the
    agent's spool format v1 (docs/nvml.md), one file per node per day, plus GPU-to-job intervals,
    inventory and the XID events those nodes saw. Utilisation follows the jobs on each GPU (a job is
    busy at 85-100% or, like ~30% of jobs in the Seren trace, nearly idle); the degrading GPU runs hotter
    and slower every day."""
    cfg = sim.cfg
    t1 = sim.t_end
    t0 = max(sim.t0, t1 - int(cfg.telemetry_days * 86400))
    t0 -= t0 % 60
    if not sim.cluster.tele or t1 <= t0:
        return []
    deg_node, deg_gpu, _uuid, deg_start = sim.degrading
    spool = sim.out_dir / "spool"
    written = []
    ivs: dict[tuple[int, int], list[list]] = {}
    for iv in sim.gpu_iv:
        ivs.setdefault((iv[0], iv[1]), []).append(iv)
    busy: dict[tuple[int, int], float] = {}

    def level(job: Job, attempt: int) -> float:
        key = (job.raw, attempt)
        if key not in busy:
            r = random.Random(f"{cfg.seed}:{job.raw}:{attempt}").random()
            busy[key] = r * 2.0 if r < 0.3 else 85.0 + 15.0 * (r - 0.3) / 0.7
        return busy[key]

    for idx in sorted(sim.cluster.tele):
        n = sim.cluster.nodes[idx]
        spec = GPU_SPECS[n.gpu_type]
        rng = random.Random(f"{cfg.seed}:{n.name}:telemetry")
        day = t0
        while day < t1:
            day_end = min(t1, day - day % 86400 + 86400)
            records: list[dict] = []
            for g in range(n.cap):
                uuid = n.gpu_uuids[g]
                bus = f"00000000:{0x18 + 0x10 * g:02X}:00.0"
                records.append(
                    {
                        "type": "inventory",
                        "gpu_uuid": uuid,
                        "seen_at": _iso(day),
                        "gpu_index": g,
                        "gpu_minor": g,
                        "pci_bus_id": bus,
                        "model": spec["model"],
                        "serial": f"{1650000000000 + idx * 8 + g}",
                        "driver_version": "535.183.01",
                        "cuda_version": "12.2",
                        "mig_mode": False,
                    }
                )
                mine = sorted(
                    (
                        iv
                        for iv in ivs.get((idx, g), [])
                        if iv[3] < day_end and (iv[4] is None or iv[4] > day)
                    ),
                    key=lambda iv: iv[3],
                )
                for iv in mine:
                    records.append(
                        {
                            "type": "job",
                            "gpu_uuid": uuid,
                            "job_id": iv[2].jid,
                            "interval_start": _iso(iv[3]),
                            "interval_end": _iso(iv[4]) if iv[4] is not None else None,
                            "gpu_index": g,
                            "mig_instance": "",
                            "source": "prolog",
                        }
                    )
                k = 0
                degrading = n.name == deg_node and g == deg_gpu
                for m in range(day, day_end, 60):
                    while k < len(mine) and (mine[k][4] or BIG) <= m:
                        k += 1
                    util = 0.0
                    if k < len(mine) and mine[k][3] < m + 60:
                        iv = mine[k]
                        lo, hi = max(m, iv[3]), min(m + 60, iv[4] or BIG)
                        util = level(iv[2], 1) * max(0, hi - lo) / 60.0
                    util = min(100.0, max(0.0, util + (rng.gauss(0, 1.5) if util > 5 else 0.0)))
                    frac = util / 100.0
                    temp = spec["t_idle"] + (spec["t_load"] - spec["t_idle"]) * frac + rng.gauss(0, 0.4)
                    clock = spec["sm_idle"] + (spec["sm_max"] - spec["sm_idle"]) * min(1.0, frac * 4)
                    reasons = 0 if util > 5 else 1  # GpuIdle
                    if degrading and m >= deg_start:
                        days_in = (m - deg_start) / 86400.0
                        temp += DEG_TEMP_PER_DAY * days_in
                        clock -= DEG_CLOCK_PER_DAY * days_in * min(1.0, frac * 4)
                        if temp > 83:
                            reasons |= 0x40  # HwThermalSlowdown
                    power = spec["p_idle"] + (spec["p_max"] - spec["p_idle"]) * frac * 0.9
                    records.append(
                        {
                            "type": "sample",
                            "gpu_uuid": uuid,
                            "minute": _iso(m),
                            "gpu_index": g,
                            "gpu_minor": g,
                            "pci_bus_id": bus,
                            "model": spec["model"],
                            "samples": 6,
                            "util_gpu_mean": round(util, 2),
                            "util_gpu_max": round(min(100.0, util * 1.05), 2),
                            "util_mem_mean": round(util * 0.45, 2),
                            "mem_used_max_bytes": int(spec["mem"] * (0.05 + 0.8 * frac)),
                            "mem_total_bytes": spec["mem"],
                            "power_mean_watts": round(power, 1),
                            "power_max_watts": round(power * 1.08, 1),
                            "energy_joules": round(power * 60, 1),
                            "temp_gpu_max_celsius": round(temp, 1),
                            "temp_mem_max_celsius": round(temp + 6, 1),
                            "sm_clock_mean_mhz": round(clock),
                            "mem_clock_mean_mhz": spec["mem_clock"],
                            "throttle_seconds": 60.0 if reasons & HW_THROTTLE_MASK else 0.0,
                            "throttle_reasons": reasons,
                            **{
                                f"{c}_seconds": 60.0 if reasons & b else 0.0
                                for c, b in CLOCK_EVENT_CAUSES.items()
                            },
                            "pcie_replay_delta": 0,
                            "ecc_corrected_delta": 0,
                            "ecc_uncorrected_delta": 0,
                            "ecc_corrected_total": 0,
                            "ecc_uncorrected_total": 0,
                            "remapped_pending": False,
                            "remapped_failed": False,
                            "retired_pages": 0,
                            "nvlink_errors_delta": 0,
                            "null_fields": 0,
                        }
                    )
            for nidx, t, xid, g in sim.tele_events:
                if nidx == idx and day <= t < day_end:
                    records.append(
                        {
                            "type": "event",
                            "event_time": _iso(t),
                            "event_type": "xid",
                            "gpu_uuid": n.gpu_uuids[g],
                            "xid": xid,
                            "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0",
                            "source": "kmsg",
                            "detail": f"NVRM: Xid (PCI:0000:{0x18 + 0x10 * g:02X}:00): {xid}",
                        }
                    )
            path = write_spool_file(
                spool / n.name, n.name, records, opened_at=float(day), cluster=cfg.cluster
            )
            written.append(str(path.relative_to(sim.out_dir)))
            day = day_end
    return written


def _iso(t: int) -> str:
    return ts(int(t)) + "Z"
