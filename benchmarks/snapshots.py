"""Parse time of the snapshot collectors' live formats (sinfo, squeue) at large-cluster sizes.

    .venv/bin/python -m benchmarks.snapshots [--nodes 10000] [--partitions 3] [--jobs 100000]

Generated output in the exact live formats (docs/collectors.md), parsed with the vectorised path and with
the per-line path forced (the fallback for lines with a wrong field count, hostlists or values outside the
exact shapes): the per-line path is the reference the vectorised one must beat, and both give identical
frames (the hypothesis properties in tests/collectors/test_sinfo.py and tests/collectors/test_squeue.py).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from slurmscope.collectors import sinfo, squeue

from benchmarks.harness import parser, run, timer

US = "\x1f"


def sinfo_output(nodes: int, partitions: int) -> bytes:
    states = ["mixed+drain", "idle", "allocated", "down*", "idle+drain"]
    lines = []
    for n in range(nodes):
        for p in range(partitions):
            lines.append(
                US.join(
                    [
                        f"gpu{n:05d}",
                        f"host{n // 4:05d}",
                        "gpu*" if p == 0 else f"p{p}",
                        states[n % len(states)],
                        f"{n % 64}/{64 - n % 64}/0/64",
                        "512000",
                        str(1000 * (n % 64)),
                        "gpu:h100:8(S:0-1)",
                        f"gpu:h100:{n % 9}(IDX:0-{n % 8})",
                        "h100,ib",
                        "root(0)" if n % 5 == 0 else "Unknown",
                        "2024-04-30T08:15:00" if n % 5 == 0 else "Unknown",
                        "ECC errors" if n % 5 == 0 else "none",
                    ]
                )
            )
    return ("\n".join(lines) + "\n").encode()


def squeue_output(jobs: int) -> bytes:
    lines = []
    for i in range(jobs):
        array = i % 10 == 0
        lines.append(
            US.join(
                [
                    f"{i}_{i % 7}" if array else str(i),
                    str(i),
                    str(i),
                    str(i % 7) if array else "N/A",
                    f"user{i % 300}",
                    f"acct{i % 40}",
                    "gpu",
                    "normal",
                    "PENDING" if i % 3 else "RUNNING",
                    str(1000 + i % 5000),
                    "2024-05-01T10:00:00",
                    "N/A" if i % 3 else "2024-05-01T11:00:00",
                    str(1 + i % 4),
                    str(8 * (1 + i % 4)),
                    "gres:gpu:4" if i % 2 else "N/A",
                    "1-00:00:00",
                    "(null)" if i % 11 else f"afterok:{i - 1}",
                    "Priority" if i % 3 else "None",
                    f"job-{i % 97}",
                ]
            )
        )
    return ("\n".join(lines) + "\n").encode()


def body(args: argparse.Namespace) -> dict[str, Any]:
    kw = dict(cluster="bench", snapshot_time=datetime.now(UTC), tz=ZoneInfo("UTC"), fmt=None, delimiter=None)
    s = sinfo_output(args.nodes, args.partitions)
    q = squeue_output(args.jobs)
    out: dict[str, Any] = {}
    for vec in (True, False):
        path = "vectorised" if vec else "per_line"
        with timer() as t:
            rows = sinfo._parse(s, source="", vectorise=vec, **kw).rows
        out[f"sinfo_{path}"] = {**t, "lines": args.nodes * args.partitions, "rows": rows}
        with timer() as t:
            rows = squeue._parse(q, vectorise=vec, **kw).rows
        out[f"squeue_{path}"] = {**t, "lines": args.jobs, "rows": rows}
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=100000)
    run("snapshots", ap, body)


if __name__ == "__main__":
    main()
