"""events.jsonl: what the simulator did, one JSON object per line, for tests to reconcile the marts with.

Lines are built as text, not with json.dumps: a 10,000-GPU month writes millions of them, and every
value is a number, a list or one of the simulator's own strings (never a quote or a backslash).
Submit, start and end lines, the bulk of the file, have their own functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import cpus, gpus
from ..slurmtext import hostlist, idx_list, ts

if TYPE_CHECKING:
    from ..engine import Sim
    from ..model import Job


def _j(v: object) -> str:
    if isinstance(v, str):
        return '"' + v + '"'
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ",".join(_j(x) for x in v) + "]"
    return str(v)


def log(sim: Sim, t: int, typ: str, **kw: object) -> None:
    if not sim.cfg.write_events_jsonl:
        return
    body = ",".join(f'"{k}":{_j(v)}' for k, v in kw.items())
    sim.ev.append(f'{{"t":"{ts(t)}","type":"{typ}",{body}}}')


def submit(sim: Sim, j: Job) -> None:
    if not sim.cfg.write_events_jsonl:
        return
    array = f',"array_job_id":{j.array_id}' if j.array_id else ""
    sim.ev.append(
        f'{{"t":"{ts(j.submit)}","type":"submit","job_id_raw":{j.raw},"job":"{j.jid}","attempt":{j.attempt},'
        f'"cls":"{j.cls}","user":"{j.user}","account":"{j.account}","partition":"{j.part.name}",'
        f'"qos":"{j.qos}","nodes":{j.nnodes},"gpus":{gpus(j)},"cpus":{cpus(j)},'
        f'"timelimit":{j.limit},"work":{j.work},"cont_of":{j.cont_of}{array}}}'
    )


def start(sim: Sim, j: Job, t: int, how: str) -> None:
    if not sim.cfg.write_events_jsonl:
        return
    gi = ",".join(f'"{idx_list(g)}"' for g in j.gpu_idx)
    sim.ev.append(
        f'{{"t":"{ts(t)}","type":"start","job_id_raw":{j.raw},"job":"{j.jid}","attempt":{j.attempt},'
        f'"sched_by":"{how}","nodes":"{hostlist(j.nodes)}","expected_end":"{ts(t + j.limit)}",'
        f'"priority":{j.priority},"gpu_idx":[{gi}]}}'
    )


def end(sim: Sim, j: Job, t: int, ran: bool, state: str, exit_code: str, cause: str) -> None:
    if not sim.cfg.write_events_jsonl:
        return
    gsec = (t - j.start) * gpus(j) if ran else 0
    sb = f'"{j.sched_by}"' if j.sched_by else "null"
    sim.ev.append(
        f'{{"t":"{ts(t)}","type":"end","job_id_raw":{j.raw},"job":"{j.jid}","attempt":{j.attempt},'
        f'"state":"{state}","cause":"{cause}","exit_code":"{exit_code}",'
        f'"elapsed":{(t - j.start) if ran else 0},"gpu_seconds":{gsec},"account":"{j.account}",'
        f'"sched_by":{sb}}}'
    )
