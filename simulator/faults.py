"""Fault injection and repair: node faults by XID class, drains, application XIDs, one degrading GPU.

Node faults are a cluster-wide Poisson process over the GPU nodes; each picks a class (below) that
decides what happens to the node and its jobs and how long the repair takes. The repair clock of a
drain starts when the node is drained (its last job ended), as an admin would reset it then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import scheduler
from .model import K_FAULT, K_RESUME, USERS_SYS, Job, Node
from .workload import lognorm
from .writers import ground_truth

if TYPE_CHECKING:
    from .engine import Sim

DEG_TEMP_PER_DAY, DEG_CLOCK_PER_DAY = 0.6, 12.0  # the slowly degrading GPU
# Node faults by class: (weight, xid, effect, text). down = a health check marks the node DOWN, its jobs
# end NODE_FAIL and batch jobs are requeued; gpu_fail = the job on that GPU crashes (FAILED) and the node
# is drained for a GPU reset once idle; node_fail = every job on the node crashes (FAILED) and the node
# is drained; maint = an admin drains the node for maintenance.
FAULTS = (
    (0.25, 79, "down", "GPU fell off the bus"),
    (0.20, 0, "down", "Not responding"),
    (0.15, 48, "gpu_fail", "double-bit ECC error"),
    (0.20, 94, "gpu_fail", "contained ECC error, row remap pending"),
    (0.10, 95, "node_fail", "uncontained ECC error"),
    (0.10, -1, "maint", "kernel upgrade"),
)


def fault_rate(sim: Sim) -> float:
    """Faults per second: fault_rate per 1000 GPU-days, but at least one a day so that small demo
    clusters still show failures, requeues and drains."""
    if sim.cfg.fault_rate <= 0:
        return 0.0
    return max(sim.cfg.fault_rate * sim.cluster.gpu_total / 1000.0, 1.0) / 86400.0


def schedule_faults(sim: Sim) -> None:
    """The first node fault, and the GPU that degrades from day 1 (telemetry only: the scheduler never
    notices it)."""
    per_s = fault_rate(sim)
    if per_s > 0:
        sim.push(sim.t0 + int(sim.rng.expovariate(per_s)), K_FAULT, None)
    gn = sim.cluster.parts["h100"].nodes[-1]
    sim.degrading = (gn.name, 3, gn.gpu_uuids[3], sim.t0 + 86400)
    ground_truth.log(
        sim,
        sim.t0 + 86400,
        "degradation_start",
        node=gn.name,
        gpu_index=3,
        gpu_uuid=gn.gpu_uuids[3],
        temp_rise_c_per_day=DEG_TEMP_PER_DAY,
        sm_clock_drop_mhz_per_day=DEG_CLOCK_PER_DAY,
    )


def application_xid(sim: Sim, j: Job, cause: str) -> str:
    """A quarter of failed GPU jobs log an application XID (13 or 43) on one of their GPUs; the cause
    of the job's end, which names the XID if one was logged."""
    if not (j.part.is_gpu and sim.rng.random() < 0.25):
        return cause
    xid = 13 if sim.rng.random() < 0.6 else 43
    n = j.nodes[0]
    g = j.gpu_idx[0][0] if j.gpu_idx and j.gpu_idx[0] else 0
    ground_truth.log(
        sim,
        sim.now,
        "fault",
        xid=xid,
        node=n.name,
        gpu_index=g,
        gpu_uuid=n.gpu_uuids[g],
        effect="job_failed",
        job_id_raw=j.raw,
        cause="application",
    )
    if n.idx in sim.cluster.tele:
        sim.tele_events.append((n.idx, sim.now, xid, g))
    return f"xid{xid}"


def fault(sim: Sim) -> None:
    per_s = fault_rate(sim)
    sim.push(sim.now + 1 + int(sim.rng.expovariate(per_s)), K_FAULT, None)
    gpu_nodes = [n for p in sim.cluster.parts.values() if p.is_gpu for n in p.nodes]
    n = sim.rng.choice(gpu_nodes)
    r = sim.rng.random()
    acc = 0.0
    pick = FAULTS[-1]
    for f in FAULTS:
        acc += f[0]
        if r < acc:
            pick = f
            break
    _w, xid, effect, text = pick
    if n.down:
        return
    t = sim.now
    g = sim.rng.randrange(n.cap)
    if n.idx in sim.cluster.tele and xid > 0:
        sim.tele_events.append((n.idx, t, xid, g))
    if effect == "down":
        reason = f"XID {xid} {text} gpu={g}" if xid else text
        ground_truth.log(
            sim,
            t,
            "fault",
            xid=xid or None,
            node=n.name,
            gpu_index=g if xid else None,
            gpu_uuid=n.gpu_uuids[g] if xid else None,
            effect="node_down",
            cause="hardware",
            jobs=[j.raw for j in n.jobs],
        )
        n.down = True
        set_reason(n, reason, "slurm" if not xid else "root", t)
        sim.node_events.append([n.name, t, None, "DOWN", reason, USERS_SYS["slurm" if not xid else "root"]])
        ground_truth.log(sim, t, "node_down", node=n.name, reason=reason)
        for j in list(n.jobs):
            scheduler.finish(sim, j, "NODE_FAIL", "0:0", "node_fail" if not xid else f"xid{xid}")
            if j.requeue:
                scheduler.requeue(sim, j, "node_fail" if not xid else f"xid{xid}")
        sim.push(t + lognorm(sim.rng, 3 * 3600, 0.6, 1800, 24 * 3600), K_RESUME, n)
        n.part.touch()
        return
    if effect == "maint":
        reason = text
        drain(sim, n, reason, "admin", t, repair=3600)
        return
    reason = f"XID {xid} {text} gpu={g}"
    victims = [n.owners[g]] if effect == "gpu_fail" else list(n.jobs)
    victims = [j for j in victims if j is not None]
    ground_truth.log(
        sim,
        t,
        "fault",
        xid=xid,
        node=n.name,
        gpu_index=g,
        gpu_uuid=n.gpu_uuids[g],
        effect="jobs_failed_and_drain",
        cause="hardware",
        jobs=[j.raw for j in victims],
    )
    for j in victims:
        scheduler.finish(sim, j, "FAILED", "0:6" if effect == "node_fail" else "1:0", f"xid{xid}")
    drain(sim, n, reason, "root", t, repair=lognorm(sim.rng, 5400, 0.5, 900, 8 * 3600))


def set_reason(n: Node, reason: str, user: str, t: int) -> None:
    n.reason, n.reason_user, n.reason_time = reason, user, t


def drain(sim: Sim, n: Node, reason: str, user: str, t: int, repair: int) -> None:
    if n.drain:
        return
    n.drain = True
    set_reason(n, reason, user, t)
    ground_truth.log(
        sim, t, "drain", node=n.name, reason=reason, user=user, running_jobs=[j.raw for j in n.jobs]
    )
    n.part.touch()
    sim.drain_repair[n.idx] = repair
    if not n.jobs:
        scheduler.node_drained(sim, n)


def resume(sim: Sim, n: Node) -> None:
    t = sim.now
    for ev in sim.node_events:
        if ev[0] == n.name and ev[2] is None:
            ev[2] = t
    was = "down" if n.down else "drain"
    n.down = False
    n.drain = False
    set_reason(n, "", "", 0)
    n.part.version += 1
    ground_truth.log(sim, t, "resume", node=n.name, was=was)
    n.part.touch()
