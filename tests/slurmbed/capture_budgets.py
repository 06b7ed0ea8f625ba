#!/usr/bin/env python3
"""Capture Slurm's allocations (GrpTRESMins) and partitions' billing weights with the usage behind them.

    SLURMBED_DIR=/tmp/slurmbed-budgets .venv/bin/python tests/slurmbed/capture_budgets.py DIR

Starts the bed in its own directory (holding the bed lock, so no other session's state is touched), sets
GrpTRESMins on three account associations and one user association with sacctmgr, runs a few GPU and CPU
jobs of known size on the gpu (TRESBillingWeights CPU=0.25,Mem=0.0G,GRES/gpu=2.0), debug (no weights) and
cpu partitions, waits until they ended and two PriorityCalcPeriods (60 s each) passed, so that slurmctld
has charged their usage, and captures, within a few seconds:

  partitions_budgets.txt   the live partitions collector's command (collectors/partitions.py `command`)
  partitions_multiline_budgets.txt   `scontrol show partition` without --oneliner
  sshare_budgets.txt       the live sshare collector's command (collectors/sshare.py `command`)
  sacct_budgets.txt        the live sacct collector's command over the run
  assoc_budgets.txt        `sacctmgr show assoc` of the limits (what the administrator set, as Slurm shows it)
  config_budgets.txt       `scontrol show config`

Each file has a <name>.argv (argument list, one per line, 0x1F written \\x1f); DIR/budgets_record.json says
what was set and submitted (limits, jobs, sizes), written by this script, never read back from Slurm. Stdlib
and slurmscope only; runs as root; stops the bed at the end.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurmscope.collectors import partitions, sacct, slurm_config, sshare

from slurmscope.config import load_config

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402
from capture import write_capture  # noqa: E402
from capture_human import sh, state_of, submit, wait  # noqa: E402

LIMITS = {
    # association -> GrpTRESMins as given to sacctmgr
    "account pretraining": "gres/gpu=600",
    "account research": "gres/gpu=3000,billing=6000",
    "account vision": "billing=1200",
    "user sbbob account vision": "gres/gpu=60",
}
RUN_SECONDS = 90
JOBS = [
    # key, user, account, partition, GPUs, CPUs
    ("big", "sbalice", "pretraining", "gpu", 8, 16),
    ("pair", "sbbob", "vision", "gpu", 2, 4),
    ("shared", "sbbob", "pretraining", "gpu", 4, 8),
    ("one", "sbcarol", "infra", "gpu", 1, 2),
    ("debug", "sbalice", "pretraining", "debug", 2, 2),
    ("cpu", "sbdave", "students", "cpu", 0, 4),
]


def set_limits() -> None:
    for assoc, tres in LIMITS.items():
        words = assoc.split()
        if words[0] == "account":
            cluster.sacctmgr("modify", "account", f"name={words[1]}", "set", f"GrpTRESMins={tres}")
        else:
            cluster.sacctmgr(
                "modify", "user", f"name={words[1]}", f"account={words[3]}", "set", f"GrpTRESMins={tres}"
            )


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    lock = cluster.acquire_lock(900)
    if lock is None:
        print("bed busy", file=sys.stderr)
        return 4
    try:
        if cluster.BED == Path("/tmp/slurmscope-slurmbed"):
            raise SystemExit("set SLURMBED_DIR to a directory of its own: this script wipes it first")
        cluster.stop()
        shutil.rmtree(cluster.BED, ignore_errors=True)  # a fresh cluster: no usage before this run
        cluster.start()
        set_limits()
        began = datetime.now(UTC)
        jobs = {}
        for key, user, account, partition, gpus, cpus in JOBS:
            args = ["-A", account, "-p", partition, "-c", str(cpus), "-t", "5"]
            if gpus:
                args.append(f"--gres=gpu:{gpus}")
            jid = submit(user, key, args, RUN_SECONDS)
            jobs[key] = {
                "job_id": jid,
                "user": user,
                "account": account,
                "partition": partition,
                "gpus": gpus,
                "cpus": cpus,
                "sleep_seconds": RUN_SECONDS,
            }
        ids = [j["job_id"] for j in jobs.values()]
        wait(lambda: all(state_of(j) == "RUNNING" for j in ids), "jobs running", timeout=120)
        wait(lambda: all(state_of(j) == "" for j in ids), "jobs ended", timeout=RUN_SECONDS + 120)
        ended = datetime.now(UTC)
        time.sleep(130)  # two PriorityCalcPeriods: the ended jobs' usage is applied to the associations
        cfg = load_config(env={})
        start, end = began - timedelta(minutes=5), datetime.now(UTC) + timedelta(minutes=5)
        captured = datetime.now(UTC)
        write_capture(out, "partitions_budgets", partitions.command(cfg))
        write_capture(out, "partitions_multiline_budgets", ["scontrol", "show", "partition"])
        write_capture(out, "sshare_budgets", sshare.command(cfg))
        write_capture(out, "sacct_budgets", sacct.command(cfg, start=start, end=end))
        write_capture(
            out,
            "assoc_budgets",
            ["sacctmgr", "-n", "-P", "show", "assoc", "format=Account,User,GrpTRESMins"],
        )
        write_capture(out, "config_budgets", slurm_config.command(cfg))
        record = {
            "began_at": began.isoformat(),
            "jobs_ended_by": ended.isoformat(),
            "captured_at": captured.isoformat(),
            "limits": LIMITS,
            "jobs": jobs,
        }
        (out / "budgets_record.json").write_text(json.dumps(record, indent=1) + "\n")
        print(sh(["sshare", "-a", "-l", "-P"]))
    finally:
        cluster.stop()
        lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
