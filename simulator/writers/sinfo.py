"""snapshots/sinfo/<epoch>.txt: every node in the live sinfo `--Format` line, fields separated by 0x1F."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import USERS_SYS
from ..slurmtext import idx_list, ts

if TYPE_CHECKING:
    from ..engine import Sim

US = "\x1f"


def sinfo(sim: Sim) -> str:
    out = []
    for p in sim.cluster.parts.values():
        pname = p.name + ("*" if p.default else "")
        for n in p.nodes:
            used = n.cap - n.free
            if n.part.is_gpu:
                cpus_alloc = used * n.cpus_per_unit
            else:
                cpus_alloc = used
            mem_alloc = used * n.mem_per_unit
            if n.down:
                base = "down"
            elif cpus_alloc == 0:
                base = "reserved" if (n.resv and n.resv.start <= sim.now < n.resv.end) else "idle"
            elif cpus_alloc >= n.cpus:
                base = "allocated"
            else:
                base = "mixed"
            flags = []
            if n.drain:
                flags.append("drain")
            state = "+".join([base] + flags)
            cpus_other = (n.cpus - cpus_alloc) if (n.down or n.drain) else 0
            cpus_idle = n.cpus - cpus_alloc - cpus_other
            if n.gpu_type:
                gres = f"gpu:{n.gpu_type}:{n.cap}"
                idx = [g for g in range(n.cap) if n.owners[g] is not None]
                gres_used = f"gpu:{n.gpu_type}:{len(idx)}(IDX:{idx_list(idx) if idx else 'N/A'})"
            else:
                gres, gres_used = "(null)", "gpu:0"
            if n.reason:
                ruser, rtime, reason = USERS_SYS[n.reason_user], ts(n.reason_time), n.reason
            else:
                ruser, rtime, reason = "Unknown", "Unknown", "none"
            out.append(
                US.join(
                    (
                        n.name,
                        n.name,  # NodeHost: each simulated node runs on its own host
                        pname,
                        state,
                        f"{cpus_alloc}/{cpus_idle}/{cpus_other}/{n.cpus}",
                        str(n.mem_mb),
                        str(mem_alloc),
                        gres,
                        gres_used,
                        n.features,
                        ruser,
                        rtime,
                        reason,
                    )
                )
            )
    return "\n".join(out) + "\n"
