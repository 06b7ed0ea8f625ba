"""Scale of the simulator's scheduling and accounting side (issue 4: 10,000 GPUs x 30 days, <= 60 s, <= 4 GB).

    .venv/bin/python -m benchmarks.simulator [--gpus 10000] [--days 30] [--seed 1] [--out DIR]

Simulates with hourly snapshots and writes every file (sacct with steps, snapshots, telemetry, and the
events.jsonl ground truth unless --no-events); records jobs, attempts, output sizes and the simulator's
own split of its time. The process is single-threaded, so CPU seconds are the figure to compare on a
shared machine.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from slurmscope.simulator import simulate

from benchmarks.harness import parser, run, timer


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.out is None:
        with tempfile.TemporaryDirectory(prefix="simbench-") as tmp:
            return measure(args, Path(tmp))
    return measure(args, args.out)


def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    with timer() as t:
        summary = simulate(
            gpus=args.gpus,
            days=args.days,
            seed=args.seed,
            out_dir=out,
            write_events_jsonl=not args.no_events,
            steps=not args.no_steps,
        )
    return {
        "simulate": t,
        "timing_s": summary["timing_s"],
        "jobs_submitted": summary["jobs_submitted"],
        "attempts": summary["attempts_finished"],
        "backfilled": summary["backfilled"],
        "bytes": {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()},
    }


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument("--days", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, help="keep the files here (default: a temporary directory, removed)")
    ap.add_argument("--no-events", action="store_true", help="skip events.jsonl")
    ap.add_argument("--no-steps", action="store_true", help="omit .extern/.batch step lines")
    run("simulator", ap, body)


if __name__ == "__main__":
    main()
