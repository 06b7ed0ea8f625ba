#!/usr/bin/env python3
"""Capture squeue for every GPU request form, and sshare with `parent` shares, from a set-up slurmbed state.

    SLURMBED_DIR=/tmp/slurmbed-gpureq .venv/bin/python tests/slurmbed/capture_gpu_requests.py DIR

Starts the bed in its own directory (another engineer's bed state is untouched; the lock is held throughout,
since the ports are shared), then:

1. submits one held job per way of asking for GPUs (`--gres=gpu:N`, typed `--gres`, `--gpus-per-node`,
   `--gpus`, typed `--gpus`, `--gpus-per-task` with `-n`, `--gpus-per-socket` with `--sockets-per-node`, a
   mix of `--gpus` and `--gpus-per-node`, a CPU-only job), plus a running job that holds every GPU node and
   two GPU jobs queued behind it (pending on Resources and on Priority);
2. writes DIR/squeue_gpu_requests.txt with the live collector's own command line (its .argv beside it) and
   DIR/scontrol_gpu_requests.txt (`scontrol show job -o` of the same moment: Slurm's own ReqTRES, the
   independent total each form must add up to) and DIR/gpu_requests_record.json (what was submitted);
3. gives some associations `Fairshare=parent` (a user, an account with sub-accounts under it, a user under
   root) and writes DIR/sshare_parent.txt with the live sshare command line;

then stops the bed. Stdlib and the project's collectors only (for the command lines); runs as root.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from slurmscope.collectors import squeue, sshare

from slurmscope.config import load_config

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402

US = "\x1f"
WORK = cluster.P["work"]

# name -> (user, sbatch arguments, GPUs the request adds up to, by the sbatch man page)
HELD = {
    "gres_node": ("sbalice", ["--gres=gpu:2"], 2),
    "gres_typed_2node": ("sbalice", ["-N", "2", "--gres=gpu:h100:2"], 4),
    "gpus_per_node_2node": ("sbbob", ["-N", "2", "--gpus-per-node=3"], 6),
    "gpus_job": ("sbbob", ["--gpus=5"], 5),
    "gpus_job_typed": ("sbcarol", ["--gpus=h100:4"], 4),
    "gpus_per_task": ("sbcarol", ["-n", "3", "--gpus-per-task=1"], 3),
    "gpus_per_task_2node": ("sbalice", ["-N", "2", "-n", "4", "--gpus-per-task=2"], 8),
    "gpus_per_socket_2node": ("sbbob", ["-N", "2", "--sockets-per-node=1", "--gpus-per-socket=2"], 4),
    "gpus_and_per_node": ("sbalice", ["-N", "2", "--gpus=8", "--gpus-per-node=4"], 8),
    "cpu_only": ("sbdave", ["-p", "cpu", "-c", "2"], 0),
}


def sh(argv: list[str], user: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    r = subprocess.run(argv, env=cluster.env(), capture_output=True, text=True, timeout=60, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.returncode}: {r.stderr.strip()}")
    return r


def submit(user: str, name: str, args: list[str], secs: int = 900) -> str:
    d = WORK / user
    d.mkdir(parents=True, exist_ok=True)
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--chdir={d}", f"--output={d}/%j.out", "-t", "10"]
    return sh([*argv, *args, "--wrap", f"sleep {secs}"], user=user).stdout.strip().split(";")[0]


def wait(pred, what: str, timeout: float = 90) -> None:
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if pred():
            return
        time.sleep(1)
    raise RuntimeError(f"timed out waiting for {what}")


def write(out: Path, name: str, argv: list[str], data: bytes) -> None:
    (out / f"{name}.txt").write_bytes(data)
    (out / f"{name}.argv").write_text("\n".join(a.replace(US, "\\x1f") for a in argv) + "\n")


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    lock = cluster.acquire_lock(1800)
    if lock is None:
        print("bed busy", file=sys.stderr)
        return 4
    cfg = load_config(env={})
    try:
        cluster.start()
        jobs: dict[str, dict] = {}
        for name, (user, args, gpus) in HELD.items():
            jobs[name] = {"job_id": submit(user, name, ["--hold", *args]), "user": user, "args": args}
            jobs[name].update(gpus=gpus, reason="JobHeldUser")
        blocker = submit("sbcarol", "all-gpu-nodes", ["-N", "4", "--exclusive", "--gres=gpu:8"])
        jobs["blocker"] = {"job_id": blocker, "user": "sbcarol", "state": "RUNNING"}
        wait(lambda: sh(["squeue", "-h", "-j", blocker, "-o", "%T"]).stdout.strip() == "RUNNING", "blocker")
        first = submit("sbalice", "queued-first", ["--gres=gpu:8"])
        second = submit("sbalice", "queued-second", ["--gres=gpu:8"])
        jobs["queued_first"] = {"job_id": first, "user": "sbalice", "gpus": 8, "reason": "Resources"}
        jobs["queued_second"] = {"job_id": second, "user": "sbalice", "gpus": 8, "reason": "Priority"}
        time.sleep(12)  # a few scheduler passes (sched_interval=3, bf_interval=2) set the pending reasons
        at = datetime.now(UTC)
        argv = squeue.command(cfg)
        write(out, "squeue_gpu_requests", argv, sh(argv).stdout.encode())
        scontrol = ["scontrol", "show", "job", "-o"]
        write(out, "scontrol_gpu_requests", scontrol, sh(scontrol).stdout.encode())
        sh(["scancel", *[j["job_id"] for j in jobs.values()]])

        def mgr(*args: str) -> None:
            sh(["sacctmgr", "-i", *args])

        mgr("add", "account", "pooled", "parent=research", "fairshare=parent")
        mgr("add", "account", "pooled-a", "parent=pooled", "fairshare=30")
        mgr("add", "account", "pooled-b", "parent=pooled", "fairshare=10")
        mgr("add", "user", "sbdave", "account=pooled-a", "fairshare=1")
        mgr("modify", "user", "where", "name=sbbob", "account=pretraining", "set", "fairshare=parent")
        mgr("add", "user", "sbcarol", "account=root", "fairshare=parent")
        shares = {
            "pooled": "parent (account under research, sub-accounts pooled-a 30 and pooled-b 10)",
            "pretraining/sbbob": "parent",
            "root/sbcarol": "parent",
        }
        argv = sshare.command(cfg)
        time.sleep(3)  # slurmctld applies association updates from slurmdbd asynchronously
        write(out, "sshare_parent", argv, sh(argv).stdout.encode())
        record = {"captured_at": at.isoformat(), "jobs": jobs, "parent_shares": shares}
        (out / "gpu_requests_record.json").write_text(json.dumps(record, indent=1) + "\n")
    finally:
        cluster.stop()
        lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
