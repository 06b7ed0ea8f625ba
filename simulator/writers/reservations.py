"""snapshots/reservations/<epoch>.txt: `scontrol show reservation --oneliner` of the advance reservation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..slurmtext import duration, hostlist, ts

if TYPE_CHECKING:
    from ..engine import Sim


def reservations_text(sim: Sim) -> str:
    r = sim.cluster.resv
    n = len(r.nodes)
    cores = sum(x.cpus for x in r.nodes)
    state = "ACTIVE" if r.start <= sim.t0 < r.end else "INACTIVE"
    return (
        f"ReservationName={r.name} StartTime={ts(r.start)} EndTime={ts(r.end)} "
        f"Duration={duration(r.end - r.start)} Nodes={hostlist(r.nodes)} NodeCnt={n} CoreCnt={cores} "
        f"Features=(null) PartitionName={r.partition} Flags=SPEC_NODES TRES=cpu={cores} Users=(null) "
        f"Groups=(null) Accounts={r.account} Licenses=(null) State={state} BurstBuffer=(null) Watts=n/a "
        f"MaxStartDelay=(null)\n"
    )
