"""snapshots/squeue/<epoch>.txt: running and pending jobs in the live squeue line (0x1F separators),
pending array tasks one per line as `squeue --array` prints them.

GPU requests take two of Slurm's forms, chosen by job id so the random stream is untouched: every third job
asks with `--gpus` (tres-per-job: the total), the others with `--gres=gpu:N` (tres-per-node: per node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import ArrayRec, Job, cpus
from ..slurmtext import limit_str, ts
from .sinfo import US

if TYPE_CHECKING:
    from ..engine import Sim


def squeue(sim: Sim, t: int) -> str:
    out = []
    for p in sim.cluster.parts.values():
        for _e, _raw, j in p.running:
            out.append(_line(sim, j, "RUNNING", "None", ts(j.start)))
        for i, (_np, _jid, j) in enumerate(p.queue):
            reason = "Resources" if i == 0 else "Priority"
            if isinstance(j, ArrayRec):
                for k in range(j.next_task, j.ntasks):
                    out.append(_array_line(sim, j, k, reason))
                    reason = "Priority"
            else:
                out.append(_line(sim, j, "PENDING", reason, "N/A"))
    for j in sim.waiting_resv:
        out.append(_line(sim, j, "PENDING", "Reservation", ts(j.resv.start)))
    for j in sim.begin_wait:
        out.append(_line(sim, j, "PENDING", "BeginTime", ts(j.eligible)))
    return "\n".join(out) + ("\n" if out else "")


def _line(sim: Sim, j: Job, state: str, reason: str, start: str) -> str:
    per_node, per_job = _request(j.part.is_gpu, j.raw, j.units, j.nnodes)
    arr = str(j.array_id) if j.array_id else str(j.raw)
    task = str(j.task) if j.array_id else "N/A"
    return US.join(
        (
            j.jid,
            str(j.raw),
            arr,
            task,
            j.user,
            j.account,
            j.part.name,
            j.qos,
            state,
            str(j.priority),
            ts(j.submit),
            start,
            str(j.nnodes),
            str(cpus(j)),
            per_node,
            limit_str(j.limit),
            "(null)",
            reason,
            str(j.nnodes),
            per_job,
            "N/A",
            "N/A",
            "*",
            j.name,
        )
    )


def _request(is_gpu: bool, raw: int, units: int, nnodes: int) -> tuple[str, str]:
    """(tres-per-node, tres-per-job) as squeue prints them for this job's GPU request."""
    if not is_gpu:
        return "N/A", "N/A"
    if raw % 3 == 1:
        return "N/A", f"gres:gpu:{units * nnodes}"
    return f"gres:gpu:{units}", "N/A"


def _array_line(sim: Sim, a: ArrayRec, k: int, reason: str) -> str:
    per_node, per_job = _request(a.part.is_gpu, a.raw, a.units, 1)
    cpus = a.part.nodes[0].cpus_per_unit
    return US.join(
        (
            f"{a.raw}_{k}",
            str(a.raw),
            str(a.raw),
            str(k),
            a.user,
            a.account,
            a.part.name,
            a.qos,
            "PENDING",
            str(a.priority),
            ts(a.submit),
            "N/A",
            "1",
            str(cpus),
            per_node,
            limit_str(a.limit),
            "(null)",
            reason,
            "1",
            per_job,
            "N/A",
            "N/A",
            "*",
            a.name,
        )
    )
