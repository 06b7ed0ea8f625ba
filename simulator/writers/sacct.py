"""sacct.txt: `sacct --allusers --duplicates --parsable2` with its header, one line per allocation attempt.

A started attempt is followed by its `.extern` step and its `.batch` step (`.0` for interactive srun),
as Slurm 22.05 prints them. Lines are buffered on the run and streamed to the file by the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import ArrayRec, Job, cpus
from ..slurmtext import duration, hostlist, ts

if TYPE_CHECKING:
    from ..engine import Sim

SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "Cluster",
    "Partition",
    "QOS",
    "Account",
    "User",
    "UID",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "State",
    "ExitCode",
    "NNodes",
    "NCPUS",
    "ReqMem",
    "AllocTRES",
    "NodeList",
    "Flags",
    "Priority",
    "Reason",
    "JobName",
)
# sacct Flags as Slurm 22.05 prints them (sic "Recieved", verified on the test bed).
FLAGS = {
    "main": "SchedMain,StartRecieved",
    "backfill": "SchedBackfill,StartRecieved",
    "submit": "SchedSubmit,StartRecieved",
}


def _tres(j: Job) -> str:
    n0 = j.part.nodes[0]
    ncpus = cpus(j)
    mem = j.nnodes * j.units * n0.mem_per_unit
    if j.part.is_gpu:
        g = j.nnodes * j.units
        return (
            f"billing={g * 10},cpu={ncpus},gres/gpu:{j.part.gpu_type}={g},gres/gpu={g},mem={mem}M,"
            f"node={j.nnodes}"
        )
    return f"billing={ncpus},cpu={ncpus},mem={mem}M,node={j.nnodes}"


def record(sim: Sim, j: Job, at_end: bool = False) -> None:
    """One allocation attempt as sacct prints it, plus its steps."""
    c = sim.cfg.cluster
    ran = j.start > 0
    end = sim.t_end if at_end else j.end
    state = j.state
    if j.state == "PENDING":
        start_s, end_s, elapsed = "Unknown", "Unknown", 0
    elif at_end:
        start_s, end_s, elapsed = ts(j.start), "Unknown", end - j.start
    elif ran:
        start_s, end_s, elapsed = ts(j.start), ts(end), end - j.start
    else:
        start_s, end_s, elapsed = "Unknown", ts(end), 0  # cancelled while pending
    n0 = j.part.nodes[0]
    reqmem = f"{j.units * n0.mem_per_unit}M"  # per node, as --mem gives it
    if ran:
        tres = _tres(j)
        nodelist = hostlist(j.nodes)
        ncpus = cpus(j)
        flags = FLAGS[j.sched_by]
        reason = "None"
    else:
        tres, nodelist, ncpus, flags = "", "None assigned", cpus(j), "StartRecieved"
        reason = pending_reason(sim, j) if j.state == "PENDING" else "None"
    el = duration(elapsed)
    line = "|".join(
        (
            j.jid,
            str(j.raw),
            c,
            j.part.name,
            j.qos,
            j.account,
            j.user,
            str(j.uid),
            ts(j.submit),
            ts(j.eligible),
            start_s,
            end_s,
            el,
            duration(j.limit),
            state,
            j.exit,
            str(j.nnodes),
            str(ncpus),
            reqmem,
            tres,
            nodelist,
            flags,
            str(j.priority),
            reason,
            j.name,
        )
    )
    if not (ran and sim.cfg.steps):
        sim.records.append(line)
    else:
        # Step lines: their Submit/Eligible are the allocation's start; both steps share one tail.
        first = j.nodes[0]
        per_node_cpus = j.units * first.cpus_per_unit
        mem = j.units * first.mem_per_unit
        if j.part.is_gpu:
            step_tres = (
                f"cpu={per_node_cpus},gres/gpu:{j.part.gpu_type}={j.units},gres/gpu={j.units},"
                f"mem={mem}M,node=1"
            )
        else:
            step_tres = f"cpu={per_node_cpus},mem={mem}M,node=1"
        if state == "RUNNING":
            step_state = ext_state = "RUNNING"
        else:
            step_state = (
                "CANCELLED" if state.startswith("CANCELLED") or state in ("TIMEOUT", "NODE_FAIL") else state
            )
            ext_state = "COMPLETED" if state != "NODE_FAIL" else "CANCELLED"
        main_exit = j.exit if state not in ("TIMEOUT", "NODE_FAIL") else "0:15"
        times = f"{start_s}|{start_s}|{start_s}|{end_s}|{el}|"
        head = f"{c}|||{j.account}|||{times}"
        ext = (
            f"{j.jid}.extern|{j.raw}.extern|{head}|{ext_state}|0:0|{j.nnodes}|{ncpus}||"
            f"{tres.split(',', 1)[1]}|{nodelist}||||extern"
        )
        if j.interactive:
            main = (
                f"{j.jid}.0|{j.raw}.0|{head}|{step_state}|{main_exit}|{j.nnodes}|{ncpus}||{step_tres}|"
                f"{nodelist}||||bash"
            )
        else:
            main = (
                f"{j.jid}.batch|{j.raw}.batch|{head}|{step_state}|{main_exit}|1|{per_node_cpus}||"
                f"{step_tres}|{first.name}||||batch"
            )
        sim.records.append(f"{line}\n{ext}\n{main}")
    if not at_end:
        st = "CANCELLED" if state.startswith("CANCELLED") else state
        sim.state_counts[st] = sim.state_counts.get(st, 0) + 1


def pending_reason(sim: Sim, j: Job) -> str:
    if j in sim.begin_wait:
        return "BeginTime"
    if j.resv is not None:
        return "Reservation"
    q = j.part.queue
    if q and q[0][2] is j:
        return "Resources"
    return "Priority"


def final_records(sim: Sim) -> None:
    """Running and pending jobs at the end of the period, as a final sacct would print them."""
    for p in sim.cluster.parts.values():
        for _e, _r, j in p.running:
            record(sim, j, at_end=True)
        for _np, _jid, j in p.queue:
            if isinstance(j, ArrayRec):
                pending_array_record(sim, j)
            else:
                record(sim, j, at_end=True)
    for j in sim.waiting_resv + sim.begin_wait:
        record(sim, j, at_end=True)


def pending_array_record(sim: Sim, a: ArrayRec) -> None:
    c = sim.cfg.cluster
    rng_txt = f"[{a.next_task}-{a.ntasks - 1}]" if a.ntasks - 1 > a.next_task else f"[{a.next_task}]"
    q = a.part.queue
    reason = "Resources" if q and q[0][2] is a else "Priority"
    cpus = a.part.nodes[0].cpus_per_unit
    mem = a.part.nodes[0].mem_per_unit
    line = "|".join(
        (
            f"{a.raw}_{rng_txt}",
            str(a.raw),
            c,
            a.part.name,
            a.qos,
            a.account,
            a.user,
            str(a.uid),
            ts(a.submit),
            ts(a.submit),
            "Unknown",
            "Unknown",
            duration(0),
            duration(a.limit),
            "PENDING",
            "0:0",
            "1",
            str(cpus),
            f"{mem}M",
            "",
            "None assigned",
            "StartRecieved",
            str(a.priority),
            reason,
            a.name,
        )
    )
    sim.records.append(line)
