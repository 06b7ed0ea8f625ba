#!/usr/bin/env python3
"""Capture Slurm's human output formats (and ALL/alias sacct lists) from a set-up state of the slurmbed.

    SLURMBED_DIR=/tmp/slurmbed-realinput python3 tests/slurmbed/capture_human.py DIR

Starts the bed (own directory, so another engineer's bed state is untouched), sets up one state on
purpose: gpu01 DOWN with a reason, gpu02 DRAINING (drained while a job runs), gpu03 allocated, gpu04
idle, cpu01 mixed; pending jobs whose reasons have spaces (a node request on the DOWN node, a 4-node job
that cannot fit), one held, one with a future begin. Then captures every command line in CAPTURES into
DIR/human_<name>.txt, writes DIR/human_commands.txt (exact command lines) and DIR/human_record.json
(what was set up, and `scontrol show job -o`/`show node -o` of the same moment: an independent view),
and stops the bed. Why a state of its own: the rows each format gives can be checked against values this
script chose, not against another parser's reading. Stdlib only; runs as root.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402

DOWN_REASON = "Xid 79: GPU has fallen off the bus"
DRAIN_REASON = "ECC errors, replace DIMM B2"
WORK = cluster.P["work"]


def sh(argv: list[str], user: str | None = None) -> str:
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    r = subprocess.run(argv, env=cluster.env(), capture_output=True, text=True, timeout=60, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


def submit(user: str, name: str, args: list[str], secs: int = 900) -> str:
    d = WORK / user
    d.mkdir(parents=True, exist_ok=True)
    return sh(
        [
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--chdir={d}",
            f"--output={d}/%j.out",
            *args,
            "--wrap",
            f"sleep {secs}",
        ],
        user=user,
    ).split(";")[0]


def state_of(jid: str) -> str:
    return sh(["squeue", "-h", "-j", jid, "-o", "%T"])


def wait(pred, what: str, timeout: float = 90) -> None:
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if pred():
            return
        time.sleep(1)
    raise RuntimeError(f"timed out waiting for {what}")


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    lock = cluster.acquire_lock(900)
    if lock is None:
        print("bed busy", file=sys.stderr)
        return 4
    t_start = datetime.now(UTC).replace(microsecond=0)
    try:
        cluster.start()
        jobs: dict[str, dict] = {}

        def job(key, user, name, args, **expect):
            jid = submit(user, name, args)
            jobs[key] = {"job_id": jid, "user": user, "name": name, "args": args, **expect}
            return jid

        sh(["scontrol", "update", "nodename=gpu01", "state=down", f"reason={DOWN_REASON}"])
        j = job(
            "drain_victim",
            "sbalice",
            "pretrain llm",
            ["-w", "gpu02", "--gres=gpu:2", "-c", "4", "-t", "30"],
            state="RUNNING",
            node="gpu02",
            partition="gpu",
        )
        wait(lambda: state_of(j) == "RUNNING", "drain_victim RUNNING")
        sh(["scontrol", "update", "nodename=gpu02", "state=drain", f"reason={DRAIN_REASON}"])
        j = job(
            "full_node",
            "sbbob",
            "eval-sweep",
            ["-w", "gpu03", "--gres=gpu:8", "-c", "16", "-t", "30"],
            state="RUNNING",
            node="gpu03",
            partition="gpu",
        )
        j2 = job(
            "cpu_long",
            "sbdave",
            "cpu long run",
            ["-p", "cpu", "-c", "12", "-t", "30"],
            state="RUNNING",
            node="cpu01",
            partition="cpu",
        )
        wait(lambda: state_of(j) == "RUNNING" and state_of(j2) == "RUNNING", "running jobs")
        job(
            "on_down_node",
            "sbcarol",
            "needs-gpu01",
            ["-w", "gpu01", "--gres=gpu:1", "-t", "10"],
            state="PENDING",
            partition="gpu",
        )
        job(
            "four_nodes",
            "sbalice",
            "four node job",
            ["-N", "4", "--exclusive", "--gres=gpu:8", "-t", "10"],
            state="PENDING",
            partition="gpu",
        )
        job(
            "held",
            "sbalice",
            "held",
            ["--hold", "--gres=gpu:1", "-t", "1"],
            state="PENDING",
            reason="JobHeldUser",
        )
        job(
            "begin_later",
            "sbcarol",
            "begin-later",
            ["--begin=now+3hours", "--gres=gpu:1", "-t", "1"],
            state="PENDING",
            reason="BeginTime",
        )
        time.sleep(12)  # a few scheduler passes (sched_interval=3, bf_interval=2) set the pending reasons
        at = datetime.now(UTC)
        start = (t_start - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S")
        end = (at + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
        sacct = ["sacct", "--allusers", "--duplicates", f"--starttime={start}", f"--endtime={end}"]
        captures = {
            "sinfo": ["sinfo"],
            "sinfo_l": ["sinfo", "-l"],
            "sinfo_N_l": ["sinfo", "-N", "-l"],
            "sinfo_N": ["sinfo", "-N"],
            "sinfo_partition_summary": ["sinfo", "-o", "%P|%a|%D|%T|%C|%N"],
            "squeue": ["squeue"],
            "squeue_l": ["squeue", "-l"],
            "sdiag": ["sdiag"],
            "sacct_all": [*sacct, "--parsable2", "--format=ALL"],
            "sacct_all_noheader": [*sacct, "--parsable2", "--noheader", "--format=ALL"],
            "sacct_aliases": [
                *sacct,
                "--parsable2",
                "--format=JobID,JobIDRaw,Submit,State,NCPUS,AllocCPUS,NNodes,AllocNodes,"
                "ReqCPUS,TRESUsageOutTot,TRESUsageOutTot,JobName",
            ],
            "sacct_helpformat": ["sacct", "--helpformat"],
            "sinfo_json": ["sinfo", "--json"],
            "squeue_json": ["squeue", "--json"],
            "sacct_json": [*sacct, "--json"],
            "scontrol_jobs": ["scontrol", "show", "job", "-o"],
            "scontrol_nodes": ["scontrol", "show", "node", "-o"],
        }
        lines = []
        for name, argv in captures.items():
            r = subprocess.run(argv, env=cluster.env(), capture_output=True, timeout=60, check=False)
            (out / f"human_{name}.txt").write_bytes(r.stdout)
            q = " ".join(
                a
                if a.replace("-", "")
                .replace("=", "")
                .replace(",", "")
                .replace("_", "")
                .replace(":", "")
                .replace(".", "")
                .isalnum()
                else f"'{a}'"
                for a in argv
            )
            lines.append(f"human_{name}.txt: {q}  (exit {r.returncode})")
            if r.returncode:
                (out / f"human_{name}.stderr").write_bytes(r.stderr)
        (out / "human_commands.txt").write_text("\n".join(lines) + "\n")
        record = {
            "captured_at": at.isoformat(),
            "nodes": {
                "gpu01": {"state": "down", "reason": DOWN_REASON},
                "gpu02": {"state": "draining", "reason": DRAIN_REASON},
                "gpu03": {"state": "allocated"},
                "gpu04": {"state": "idle"},
                "cpu01": {"state": "mixed"},
            },
            "jobs": jobs,
        }
        (out / "human_record.json").write_text(json.dumps(record, indent=1) + "\n")
    finally:
        cluster.stop()
        lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
