"""events.txt: `sacctmgr --parsable2 show event`, the node DOWN/DRAIN history of the whole period."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..slurmtext import ts

if TYPE_CHECKING:
    from ..engine import Sim

EVENTS_HEADER = "Cluster|Cluster Nodes|NodeName|TimeStart|TimeEnd|State|Reason|User"


def events_text(sim: Sim) -> str:
    """sacctmgr --parsable2 show event for the whole simulated period (node DOWN/DRAIN history)."""
    out = [EVENTS_HEADER]
    for name, start, end, state, reason, user in sorted(sim.node_events, key=lambda e: (e[1], e[0])):
        out.append(
            "|".join(
                (
                    sim.cfg.cluster,
                    "",
                    name,
                    ts(start),
                    ts(end) if end else "Unknown",
                    state,
                    reason,
                    user,
                )
            )
        )
    return "\n".join(out) + "\n"
