"""Parse time of the snapshot collectors' live formats (sinfo, squeue) at large-cluster sizes.

Usage: .venv/bin/python benchmarks/bench_snapshots.py [--nodes 10000] [--partitions 3] [--jobs 100000]
Prints wall seconds of the vectorised path and of the per-line path (the fallback for odd rows) on
generated output in the exact live formats, so docs/benchmarks.md can quote both.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from slurmscope.collectors import sinfo, squeue

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


def timed(fn) -> tuple[float, int]:
    t = time.perf_counter()
    parsed = fn()
    return time.perf_counter() - t, parsed.rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=100000)
    args = ap.parse_args()
    kw = dict(cluster="bench", snapshot_time=datetime.now(UTC), tz=ZoneInfo("UTC"), fmt=None, delimiter=None)
    s = sinfo_output(args.nodes, args.partitions)
    q = squeue_output(args.jobs)
    for vec in (True, False):
        secs, rows = timed(lambda v=vec: sinfo._parse(s, source="", vectorise=v, **kw))
        print(
            f"sinfo  {args.nodes} nodes x {args.partitions} partitions: {rows} rows, vectorise={vec}: {secs:.2f} s"
        )
        secs, rows = timed(lambda v=vec: squeue._parse(q, vectorise=v, **kw))
        print(f"squeue {args.jobs} jobs: {rows} rows, vectorise={vec}: {secs:.2f} s")


if __name__ == "__main__":
    main()
