"""Fuzz every parser with hypothesis: arbitrary bytes and Slurm-shaped lines, 10^5 inputs per parser by default.

    .venv/bin/python benchmarks/fuzz_parsers.py [--examples N] [--only sacct,sinfo]

Checks, for every input: parse() returns (no exception escapes), and every non-blank line is kept or
quarantined (rows + quarantined lines >= 1 when any line is non-blank; for sacct with a header, exactly one
row or quarantine entry per data line). Not part of CI, which runs the ~2,000-example profile.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from datetime import datetime, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KINDS = ["sacct", "sinfo", "squeue", "sshare", "sdiag", "events", "config", "reservations", "ping"]
SNAP = datetime(2026, 11, 1, tzinfo=timezone.utc)
SACCT_HEADER = "JobID|JobIDRaw|Partition|Account|User|Submit|Start|End|Elapsed|State|ExitCode|NCPUS|AllocTRES|NodeList|JobName"
TOKENS = ["|", "||", "\n", "\r\n", "gpu[001-004,010]", "Unknown", "None", "(null)", "CANCELLED by 0",
          "2026-03-08T02:30:00", "1-00:00:00", "UNLIMITED", "gres/gpu:h100=8,gres/gpu=8", "123_[5-9%2]",
          "123+0", "mixed+drain*", "\x1f", "\x00", "\xff", "-1", "99999999999999999999", "NODE_FAIL",
          "Partition_Limit", "billing=16", "  ", "parent", "\u2603"]

HEADER_STARTS = (b"jobid", b"account", b"cluster")
slurmish = st.lists(st.sampled_from(TOKENS) | st.text(max_size=12), max_size=40).map(lambda t: "".join(t).encode("utf-8", "surrogatepass"))


def check(kind: str, module, data: bytes) -> None:
    parsed = module.parse(data, cluster="c", snapshot_time=SNAP, tz=timezone.utc, source="fuzz")
    # Header lines (sacct, sshare, sacctmgr) are consumed, not kept: only data lines must be accounted for.
    nonblank = [ln for ln in data.splitlines()
                if ln.strip() and not ln.lstrip().lower().startswith(HEADER_STARTS)]
    if nonblank:
        assert parsed.rows + parsed.quarantine.height >= 1, (kind, data[:200])


def fuzz(kind: str, examples: int) -> dict:
    module = importlib.import_module(f"slurmscope.collectors.{kind}")
    count = 0

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(st.binary(max_size=2000), slurmish,
                     slurmish.map(lambda b: (SACCT_HEADER + "\n").encode() + b)))
    def run(data: bytes) -> None:
        nonlocal count
        count += 1
        check(kind, module, data)

    t0 = time.monotonic()
    run()
    return {"parser": kind, "inputs": count, "seconds": round(time.monotonic() - t0, 1), "failures": 0}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=100_000)
    ap.add_argument("--only", default=",".join(KINDS))
    args = ap.parse_args()
    results = []
    for kind in args.only.split(","):
        res = fuzz(kind, args.examples)
        results.append(res)
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
