"""What every benchmark records: wall and CPU seconds, peak RSS, the machine, and one JSON record per run.

On a shared machine a wall time means little without the load it ran under, so every record carries the
load average at the start and at the end, and CPU seconds (user + system over all threads, plus the
children waited for), which move less with the load. The record is printed on stdout and, with `--record
FILE`, appended to FILE as one line, so that docs/benchmarks.md can quote a run with the command that
produced it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@contextmanager
def timer() -> Iterator[dict[str, float]]:
    """Wall and CPU seconds of the block (this process, and the children it waited for inside the block),
    filled into the yielded dict when the block ends."""
    out: dict[str, float] = {}
    t, c, k = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    try:
        yield out
    finally:
        out["wall_s"] = round(time.perf_counter() - t, 3)
        out["cpu_s"] = round(_cpu(resource.RUSAGE_SELF) - c, 3)
        out["children_cpu_s"] = round(_cpu(resource.RUSAGE_CHILDREN) - k, 3)


def peak_rss_mib() -> float:
    """Peak resident set of this process so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def children_peak_rss_mib() -> float:
    """Peak resident set of the largest child waited for so far."""
    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty.strip() else "")


def machine() -> dict[str, Any]:
    """Cores, load average and the versions a figure depends on (no import: polars or duckdb loaded here
    would count in a subject's own memory)."""
    return {
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "polars": _version("polars"),
        "duckdb": _version("duckdb"),
        "commit": _commit(),
    }


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The subject's argument parser, with the options every benchmark shares."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", type=Path, help="also append this run's JSON record to this file (one line)")
    return ap


def _command() -> str:
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    prog = f"-m {spec.name}" if spec else sys.argv[0]
    return f".venv/bin/python {prog} {shlex.join(sys.argv[1:])}".rstrip()


def run(
    subject: str, ap: argparse.ArgumentParser, body: Callable[[argparse.Namespace], dict[str, Any]]
) -> None:
    """Parse the options, run `body` under a timer and print its record; a child run (`--child` set by a
    parent) prints only the body's result, on one line, for the parent to read."""
    args = ap.parse_args()
    if getattr(args, "child", None):
        print(json.dumps(body(args), default=str))
        return
    started, before = datetime.now(UTC), machine()
    with timer() as total:
        results = body(args)
    record = {
        "subject": subject,
        "command": _command(),
        "date": started.isoformat(timespec="seconds"),
        "args": {k: v for k, v in vars(args).items() if k not in ("record", "child")},
        "machine": before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "total": total,
        "peak_rss_mib": peak_rss_mib(),
        "children_peak_rss_mib": children_peak_rss_mib(),
        "results": results,
    }
    print(json.dumps(record, indent=1, default=str))
    if args.record:
        with open(args.record, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")


def in_child(module: str, *argv: str) -> dict[str, Any]:
    """Run `python -m module *argv` (argv including the module's `--child` option) in a fresh process, for
    its own CPU time and peak RSS; return the result it printed, or the tail of its stderr under "error"."""
    out = subprocess.run(
        [sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True, check=False
    )
    lines = out.stdout.strip().splitlines()
    if out.returncode or not lines:
        return {"error": out.stderr[-2000:]}
    return json.loads(lines[-1])
