"""Backfill's full rebuild, this tree against a git revision, interleaved so both see the same machine load.

    .venv/bin/python benchmarks/bench_backfill_ab.py --db /tmp/bf-10m.duckdb --rev 505e64a --rounds 2

CPU seconds on a shared machine drift with the load; a before/after pair taken minutes apart can differ more
than the change being measured. Each round runs the revision's pipelines/backfill.py and then the working
tree's, each in a fresh process through bench_full_rebuild_by_pipeline.one() (same config, same 30-day
slices), and prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def child(db: str, jobs: int, module_file: str) -> None:
    if module_file:
        name = "slurmscope.pipelines.backfill"
        spec = importlib.util.spec_from_file_location(name, module_file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    sys.path.insert(0, str(HERE))
    from bench_full_rebuild_by_pipeline import one

    print(json.dumps(one(db, "backfill", jobs, 365, 30)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--jobs", type=int, default=10_000_000)
    ap.add_argument("--rev", default="HEAD", help="git revision to compare the working tree against")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.db, args.jobs, args.child)
        return
    old = subprocess.run(
        ["git", "show", f"{args.rev}:pipelines/backfill.py"],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(old)
    for _ in range(args.rounds):
        for label, module_file in ((args.rev, f.name), ("tree", "")):
            out = subprocess.run(
                [sys.executable, __file__, "--db", args.db, "--jobs", str(args.jobs), "--child", module_file],
                capture_output=True,
                text=True,
                check=False,
            )
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
            res = json.loads(line) if out.returncode == 0 and line else {"error": out.stderr[-2000:]}
            print(json.dumps({"variant": label, **res}), flush=True)
    Path(f.name).unlink()


if __name__ == "__main__":
    main()
