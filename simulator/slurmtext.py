"""Slurm's text forms of times, durations and hostlists, as the simulator's writers print them.

Times are UTC `YYYY-MM-DDTHH:MM:SS` (what the live commands print under `TZ=UTC`), from lookup tables:
the writers format millions of them.
"""

from __future__ import annotations

import time as _time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Node


class _Clock:
    """Lookup tables for time formatting, which the writer calls millions of times."""

    def __init__(self) -> None:
        self.days: dict[int, str] = {}
        self.hms: list[str] = []

    def table(self) -> list[str]:
        if not self.hms:
            self.hms = [f"T{h:02d}:{m:02d}:{s:02d}" for h in range(24) for m in range(60) for s in range(60)]
        return self.hms


_CLOCK = _Clock()


def ts(t: int) -> str:
    """UTC `YYYY-MM-DDTHH:MM:SS`."""
    d, s = divmod(t, 86400)
    day = _CLOCK.days.get(d)
    if day is None:
        day = _CLOCK.days[d] = datetime.fromtimestamp(d * 86400, UTC).strftime("%Y-%m-%d")
    return day + (_CLOCK.hms or _CLOCK.table())[s]


def duration(sec: int) -> str:
    """Slurm's elapsed/time-limit form: `[D-]HH:MM:SS`."""
    d, s = divmod(int(sec), 86400)
    hms = (_CLOCK.hms or _CLOCK.table())[s][1:]
    return f"{d}-{hms}" if d else hms


def limit_str(sec: int) -> str:
    """squeue's %l form: `M:SS` under an hour, `H:MM:SS` under a day, else `D-HH:MM:SS`."""
    d, s = divmod(int(sec), 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{m}:{s:02d}"


def ctime(t: int) -> str:
    return _time.strftime("%a %b %d %H:%M:%S %Y", _time.gmtime(t))


def ranges(idx: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in sorted(idx):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def hostlist(nodes: list[Node]) -> str:
    """Slurm's compressed hostlist (`h100-[001-004,007],a100-002`), grouped by prefix in first-seen order."""
    if not nodes:
        return "None assigned"
    groups: dict[str, list[Node]] = {}
    for n in nodes:
        groups.setdefault(n.prefix, []).append(n)
    parts = []
    for prefix, ns in groups.items():
        width = ns[0].width
        if len(ns) == 1:
            parts.append(ns[0].name)
            continue
        rs = ranges([n.num for n in ns])
        body = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in rs)
        parts.append(f"{prefix}[{body}]")
    return ",".join(parts)


def idx_list(idx: list[int]) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges(idx))
