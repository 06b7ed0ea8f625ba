"""snapshots/sshare/<epoch>.txt: `sshare --all --long --parsable2`, the account tree with its Fair Tree values."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import ACCOUNTS

if TYPE_CHECKING:
    from ..engine import Sim

SSHARE_HEADER = (
    "Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS|"
    "GrpTRESMins|TRESRunMins"
)
TRES0 = "cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0"


def sshare(sim: Sim) -> str:
    usage = sim.fairshare.usage
    acct_usage = sim.fairshare.acct_usage
    total = sum(usage.values())
    lines = [SSHARE_HEADER, f"root|||0.000000|{int(total)}||1.000000||||{TRES0}"]
    children: dict[str, list[str]] = {}
    for a, (parent, _s, _n, _c) in ACCOUNTS.items():
        children.setdefault(parent, []).append(a)

    def visit(acct: str, depth: int) -> None:
        kids = children.get(acct, [])
        users = sim.accounts.acct_users.get(acct, [])
        tot_s = sum(ACCOUNTS[k][1] for k in kids) + len(users) or 1
        sib_u = sum(acct_usage[k] for k in kids) + sum(usage[u] for u in users)
        pad = " " * depth
        for k in kids:
            u = acct_usage[k]
            eff = u / sib_u if sib_u else 0.0
            lfs = sim.fairshare.level.get("a:" + k, float("inf"))
            lines.append(
                f"{pad}{k}||{ACCOUNTS[k][1]}|{ACCOUNTS[k][1] / tot_s:.6f}|{int(u)}|"
                f"{(u / total if total else 0):.6f}|{eff:.6f}||{_lfs(lfs)}||{TRES0}"
            )
            visit(k, depth + 1)
        for u in users:
            v = usage[u]
            eff = v / sib_u if sib_u else 0.0
            lfs = sim.fairshare.level.get("u:" + u, float("inf"))
            lines.append(
                f"{pad}{acct}|{u}|1|{1 / tot_s:.6f}|{int(v)}|{(v / total if total else 0):.6f}|"
                f"{eff:.6f}|{sim.fairshare.fs[u]:.6f}|{_lfs(lfs)}||{TRES0}"
            )

    visit("root", 1)
    return "\n".join(lines) + "\n"


def _lfs(v: float) -> str:
    return "inf" if v == float("inf") else f"{v:.6f}"
