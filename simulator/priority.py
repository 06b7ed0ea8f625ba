"""Slurm's multifactor priority with Fair Tree fair-share, over the simulated account tree.

Usage is decayed billing-seconds charged from running allocations every PriorityCalcPeriod; Fair Tree
ranks siblings by LevelFS = (shares / sibling shares) / (usage / sibling usage), depth first, and a
user's fair-share factor is its rank. sshare snapshots print these same values.
"""

from __future__ import annotations

from .model import ACCOUNTS, Accounts

W_AGE, W_FS, W_SIZE, W_PART, W_QOS, MAX_AGE = 1000, 10000, 1000, 1000, 10000, 7 * 86400
QOS = {"high": 1000, "normal": 100, "debug": 500, "low": 0}


class FairShare:
    """Per-user usage and fair-share factors, and the priority they give a pending job."""

    def __init__(self, accounts: Accounts, total_nodes: int) -> None:
        self.total_nodes = total_nodes
        self.kids: dict[str, list[tuple[str, str, int]]] = {}
        for a, (parent, shares, _n, _c) in ACCOUNTS.items():
            self.kids.setdefault(parent, []).append(("a", a, shares))
        for a, us in accounts.acct_users.items():
            self.kids.setdefault(a, []).extend(("u", u, 1) for u in us)
        self.kid_shares = {a: sum(x[2] for x in kids) for a, kids in self.kids.items()}
        self.paths: dict[str, list[str]] = {}
        for u, (a, _uid) in accounts.users.items():
            path = []
            while a != "root":
                path.append(a)
                a = ACCOUNTS[a][0]
            self.paths[u] = path
        self.usage: dict[str, float] = dict.fromkeys(accounts.users, 0.0)  # decayed billing-seconds
        self.run_rate: dict[str, float] = dict.fromkeys(accounts.users, 0.0)  # billing units running now
        self.fs: dict[str, float] = dict.fromkeys(accounts.users, 1.0)
        self.level: dict[str, float] = {}
        self.acct_usage: dict[str, float] = dict.fromkeys(ACCOUNTS, 0.0)

    def prio(self, account: str, user: str, qos: str, nnodes: int, submit: int, now: int) -> int:
        age = min(1.0, max(0, now - submit) / MAX_AGE)
        size = nnodes / self.total_nodes
        return int(W_AGE * age + W_FS * self.fs[user] + W_SIZE * size + W_PART + W_QOS * QOS[qos] / 1000)

    def decay(self, dt: int, half_life: int) -> None:
        """One PriorityCalcPeriod of `dt` seconds: decay every user's usage and charge what runs now."""
        decay = 0.5 ** (dt / half_life)
        for u in self.usage:
            self.usage[u] = self.usage[u] * decay + self.run_rate[u] * dt

    def fair_tree(self) -> None:
        """Fair Tree: siblings ranked by LevelFS = shares/usage, depth first; a user's factor is its rank."""
        usage = self.usage
        acct_usage: dict[str, float] = dict.fromkeys(ACCOUNTS, 0.0)
        for u, path in self.paths.items():
            v = usage[u]
            for a in path:
                acct_usage[a] += v
        order: list[str] = []
        level: dict[str, float] = {}
        inf = float("inf")

        def visit(acct: str) -> None:
            kids = self.kids.get(acct)
            if not kids:
                return
            uses = [acct_usage[k] if t == "a" else usage[k] for t, k, _s in kids]
            tot_u = sum(uses)
            tot_s = self.kid_shares[acct]
            scored = []
            for (t, k, sh), u in zip(kids, uses, strict=True):
                lfs = (sh / tot_s) / (u / tot_u) if u > 0 else inf
                level[t + ":" + k] = lfs
                scored.append((-lfs, k, t))
            scored.sort()
            for _neg, k, t in scored:
                if t == "u":
                    order.append(k)
                else:
                    visit(k)

        visit("root")
        n = len(order)
        fs = self.fs
        for rank, u in enumerate(order):
            fs[u] = (n - rank) / n
        self.level = level
        self.acct_usage = acct_usage
