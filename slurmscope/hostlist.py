"""Slurm hostlists: `gpu[001-004,010],cpu-a[1-3]` to node names and back.

Slurm prints node sets compressed (sacct NodeList, sinfo %N, sacctmgr event NodeName); every per-node
join needs them expanded, by collectors and pipelines alike. Expansion is bounded: a garbled or hostile
hostlist must not take all memory.
"""

from __future__ import annotations

import re

from slurmscope.slurm_states import NULL_WORDS

_BRACKET = re.compile(r"\[([^\]]*)\]")


def _split_top(s: str) -> list[str]:
    """Split on commas outside brackets."""
    out, depth, cur = [], 0, []
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [p.strip() for p in out if p.strip()]


def _expand_range(spec: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        if not dash:
            if not lo.isdigit():
                raise ValueError(f"bad hostlist range {spec!r}")
            out.append(lo)
            continue
        if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
            raise ValueError(f"bad hostlist range {spec!r}")
        if int(hi) - int(lo) > 1_000_000:
            raise ValueError(f"hostlist range too large {spec!r}")
        width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


MAX_HOSTLIST_NAMES = (
    1_000_000  # far beyond any cluster; a garbled or hostile hostlist must not take all memory
)


def expand_hostlist(s: str | None) -> list[str]:
    """Node names of a Slurm hostlist: `gpu[001-004,010],cpu-a[1-3]` -> gpu001..gpu004, gpu010, cpu-a1..3.

    Zero padding is kept; several bracket groups in one name (`r[1-2]n[01-02]`) expand as a product.
    `None assigned`, `(null)` and empty give []. Raises ValueError for unbalanced brackets or bad ranges.
    """
    if s is None:
        return []
    s = s.strip()
    if s in NULL_WORDS or s == "None assigned":
        return []
    if s.count("[") != s.count("]"):
        raise ValueError(f"unbalanced brackets in hostlist {s!r}")
    names: list[str] = []
    for item in _split_top(s):
        pieces = [[item]]
        while True:
            expanded = []
            changed = False
            for group in pieces:
                for name in group:
                    m = _BRACKET.search(name)
                    if not m:
                        expanded.append(name)
                        continue
                    changed = True
                    for num in _expand_range(m.group(1)):
                        expanded.append(name[: m.start()] + num + name[m.end() :])
                    if len(names) + len(expanded) > MAX_HOSTLIST_NAMES:
                        # several bracket groups multiply: each within its range limit, the product unbounded
                        raise ValueError(
                            f"hostlist expands to more than {MAX_HOSTLIST_NAMES:,} names {s[:200]!r}"
                        )
            pieces = [expanded]
            if not changed:
                break
        names.extend(pieces[0])
    return names


_TAIL_NUM = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(names: list[str]) -> str:
    """The inverse of expand_hostlist for one numeric suffix per name: [gpu001, gpu002, gpu004] -> gpu[001-002,004].

    Names are grouped by prefix and digit width (order of first appearance), numbers sorted and merged
    into ranges; names without a numeric suffix are kept as they are. Duplicates are dropped.
    """
    groups: dict[tuple[str, int], set[int]] = {}
    order: list[tuple[str, int] | str] = []
    plain_seen: set[str] = set()
    for name in names:
        m = _TAIL_NUM.match(name)
        if not m:
            if name not in plain_seen:
                plain_seen.add(name)
                order.append(name)
            continue
        prefix, digits = m.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        key = (prefix, width)
        if key not in groups:
            groups[key] = set()
            order.append(key)
        groups[key].add(int(digits))
    out: list[str] = []
    for key in order:
        if isinstance(key, str):
            out.append(key)
            continue
        prefix, width = key
        nums = sorted(groups[key])
        ranges: list[str] = []
        start = prev = nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if n is not None:
                start = prev = n
        if len(nums) == 1:
            out.append(prefix + ranges[0])
        else:
            out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)


def expand_hostlist_lenient(text: str | None) -> list[str]:
    """expand_hostlist for stored data: a list it cannot read stays one opaque name instead of raising.

    A pipeline reads NodeLists that are already in the database (e.g. `n[0-999999999]` from a garbled
    capture); the attempt must still be counted somewhere, and the bound must not exhaust memory there.
    """
    try:
        return expand_hostlist(text)
    except ValueError:
        return [text.strip()]
