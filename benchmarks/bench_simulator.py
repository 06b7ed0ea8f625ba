"""Scale benchmark of the simulator's scheduling and accounting side (issue 4: 10,000 GPUs x 30 days).

Run: .venv/bin/python benchmarks/bench_simulator.py [--gpus 10000] [--days 30] [--seed 1] [--out DIR]
It simulates with hourly snapshots, writes every file, and prints wall time, jobs, attempts, peak RSS
and output sizes as one JSON object (the figures quoted in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from slurmscope.simulator import simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--no-events", action="store_true", help="skip events.jsonl")
    ap.add_argument("--no-steps", action="store_true", help="omit .extern/.batch step lines")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="simbench-"))
    t0 = time.perf_counter()
    summary = simulate(
        gpus=args.gpus,
        days=args.days,
        seed=args.seed,
        out_dir=out,
        write_events_jsonl=not args.no_events,
        steps=not args.no_steps,
    )
    wall = time.perf_counter() - t0
    sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
    print(
        json.dumps(
            {
                "gpus": args.gpus,
                "days": args.days,
                "wall_s": round(wall, 1),
                "timing_s": summary["timing_s"],
                "jobs_submitted": summary["jobs_submitted"],
                "attempts": summary["attempts_finished"],
                "backfilled": summary["backfilled"],
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                "bytes": sizes,
                "out": str(out),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
