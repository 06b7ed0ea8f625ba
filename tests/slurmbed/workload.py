#!/usr/bin/env python3
"""Run a small AI-cluster workload on the slurmbed cluster and record what it did.

    python3 tests/slurmbed/workload.py --out record.json [--snapshots DIR]

Submits, as the bed's Linux users, the job mix a GPU cluster sees: a two-node exclusive training job, a GPU
array with one failing task, a job the backfill scheduler starts, preemption by QOS, an admin requeue, a
NODE_FAIL requeue, a drain while busy, FAILED/TIMEOUT/CANCELLED jobs and jobs left pending (held,
dependency, begin time). The record is the *driver's own* account: job ids, the states it caused, the
number of attempts, and the running intervals it observed by polling squeue once a second. Tests compare
the collectors' tables with this record, so it never reads sacct or the slurmscope database.

GPU-partition jobs ask for CPUs in multiples of 4 so that their billing (CPU=0.25, GRES/gpu=2.0) is an
integer: sacct prints billing truncated to an integer while slurmctld charges fair-share usage with the
unrounded value, and the fair-share reference must be exact (docs/testbed.md).

Runs as root (it submits with runuser and administers nodes with scontrol). Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402

WORK = cluster.P["work"]
DOWN_REASON = "slurmbed: simulated node failure"
DRAIN_REASON = "slurmbed: ECC errors on GPU 3"
RESERVATION = "maint-gpu01"
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}

# A job script that records nothing Slurm would not; attempt-aware so a requeued job is short the 2nd time.
SCRIPT = """#!/bin/bash
trap 'exit 143' TERM
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then secs={again}; else secs={first}; fi
if [ -n "$SLURM_ARRAY_TASK_ID" ] && [ "$SLURM_ARRAY_TASK_ID" = "{fail_task}" ]; then sleep 3; exit 3; fi
sleep "$secs" &
wait $!
exit {rc}
"""


def sh(argv: list[str], user: str | None = None, check: bool = True) -> str:
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    r = cluster.run(argv, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


class Poller(threading.Thread):
    """Poll squeue once a second and keep each job's observed RUNNING intervals (epoch seconds)."""

    def __init__(self, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.lock = threading.Lock()
        self.states: dict[str, str] = {}  # job id as printed -> state
        self.raw: dict[str, str] = {}  # job id as printed -> JobIDRaw
        self.reasons: dict[str, str] = {}
        self.nodes: dict[str, str] = {}
        self.intervals: dict[str, list[list[float]]] = {}  # job id -> [start, end, unc_s, unc_e, seen]
        self.stop_evt = threading.Event()
        self.last_poll: float | None = None
        self.times: dict[str, tuple[str, str]] = {}  # job id -> squeue's (StartTime, EndTime)

    def poll_once(self) -> None:
        """One squeue sample. It shows the state at some instant in [tb, ta] (the command's own run
        time), so a state change lies between the previous sample's tb and this sample's ta: keep the
        middle of that span and half its width as the uncertainty (it grows when the machine is busy)."""
        tb = time.time()
        out = sh(
            ["squeue", "--all", "--array", "--noheader", "--states=all", "-o", "%i|%A|%T|%r|%N|%S|%e"],
            check=False,
        )
        self.observe(out, tb, time.time())

    def observe(self, out: str, tb: float, ta: float) -> None:
        """Fold one squeue sample (taken between tb and ta) into the states and RUNNING intervals."""
        prev_b = self.last_poll
        with self.lock:
            for line in out.splitlines():
                parts = line.strip().split("|")
                if len(parts) != 7:
                    continue
                jid, raw, state, reason, nodes, st, en = parts
                self.times[jid] = (st, en)
                self.raw[jid] = raw
                self.reasons[jid] = reason
                prev = self.states.get(jid)
                ivs = self.intervals.setdefault(jid, [])
                if state == "RUNNING":
                    self.nodes[jid] = nodes
                    if prev != "RUNNING":
                        lo = tb if prev_b is None else prev_b
                        # [start, end, start uncertainty, end uncertainty, last sample seen running]
                        ivs.append([(lo + ta) / 2, ta, (ta - lo) / 2, (ta - tb) / 2, tb])
                    else:
                        ivs[-1][1], ivs[-1][3], ivs[-1][4] = ta, (ta - tb) / 2, tb
                elif prev == "RUNNING" and ivs:
                    lo = ivs[-1][4]
                    ivs[-1][1], ivs[-1][3] = (lo + ta) / 2, (ta - lo) / 2
                self.states[jid] = state
            self.last_poll = tb

    def run(self) -> None:
        while not self.stop_evt.is_set():
            self.poll_once()
            self.stop_evt.wait(self.interval)

    def state(self, jid: str) -> str | None:
        with self.lock:
            return self.states.get(jid)

    def wait_for(self, jid: str, pred: Callable[[str | None], bool], what: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.state(jid)):
                return
            time.sleep(0.3)
        raise RuntimeError(f"job {jid}: timed out waiting for {what} (state {self.state(jid)})")


class Workload:
    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}
        self.poller = Poller()
        self.events: list[dict] = []
        self.t0 = time.time()

    def note(self, what: str, **kw) -> None:
        self.events.append({"t": round(time.time(), 3), "what": what, **kw})
        print(f"workload +{time.time() - self.t0:6.1f}s {what} {kw}", file=sys.stderr, flush=True)

    def submit(
        self,
        name: str,
        user: str,
        args: list[str],
        *,
        first: int = 10,
        again: int = 5,
        rc: int = 0,
        fail_task: str = "none",
        gpus: int = 0,
        expect: dict,
    ) -> str:
        """Submit as `user`; `gpus` is the job's total GPU count (all nodes) per attempt."""
        script = WORK / user / f"{name}.sh"
        script.write_text(SCRIPT.format(first=first, again=again, rc=rc, fail_task=fail_task))
        script.chmod(0o755)
        out = sh(
            [
                "sbatch",
                "--parsable",
                f"--job-name={name}",
                f"--chdir={WORK / user}",
                f"--output={WORK / user}/%x-%j.out",
                *args,
                str(script),
            ],
            user=user,
        )
        jid = out.split(";")[0]
        acct = cluster.USERS[user][0]
        for a in args:
            if a.startswith("--account="):
                acct = a.split("=", 1)[1]
        part = next((a.split("=", 1)[1] for a in args if a.startswith("--partition=")), "gpu")
        qos = next((a.split("=", 1)[1] for a in args if a.startswith("--qos=")), "normal")
        self.jobs[name] = {
            "name": name,
            "job_id": jid,
            "user": user,
            "account": acct,
            "partition": part,
            "qos": qos,
            "gpus": gpus,
            "args": args,
            **expect,
        }
        self.note("submit", name=name, job_id=jid)
        return jid

    def running(self, jid: str, timeout: float = 240) -> None:
        self.poller.wait_for(jid, lambda s: s == "RUNNING", "RUNNING", timeout)

    def run(self, mid_hook: Callable[[], None] | None = None) -> dict:
        self.poller.start()
        W = self  # noqa: N806
        # A future maintenance reservation, so that `scontrol show reservation` has something real to show.
        sh(
            [
                "scontrol",
                "create",
                "reservation",
                f"ReservationName={RESERVATION}",
                "StartTime=now+2hours",
                "Duration=60",
                "Nodes=gpu01",
                "Users=root",
                "Flags=MAINT",
            ]
        )
        W.note("reservation", name=RESERVATION)
        g8 = ["--exclusive", "--gres=gpu:8"]
        # --- CPU partition: a backfill scenario on cpu01 (16 CPUs) and a plain failure.
        cpu_long = W.submit(
            "cpu-long",
            "sbdave",
            ["--partition=cpu", "-c", "12", "-t", "2"],
            first=40,
            expect={"final_state": "COMPLETED", "attempts": 1},
        )
        W.running(cpu_long)
        cpu_big = W.submit(
            "cpu-wide",
            "sbdave",
            ["--partition=cpu", "-c", "16", "-t", "1", "--qos=high"],
            first=5,
            expect={"final_state": "COMPLETED", "attempts": 1},
        )
        W.poller.wait_for(cpu_big, lambda s: s == "PENDING", "PENDING")
        time.sleep(1.5)
        W.submit(
            "cpu-backfill",
            "sbdave",
            ["--partition=cpu", "-c", "4", "-t", "1", "--nice=10000"],
            first=20,
            expect={"final_state": "COMPLETED", "attempts": 1, "sched_by": "backfill"},
        )
        W.submit(
            "exit-one",
            "sbdave",
            ["--partition=cpu", "-c", "1", "-t", "1"],
            first=2,
            rc=1,
            expect={"final_state": "FAILED", "attempts": 1, "exit_code": 1},
        )
        # --- GPU: preemption victim pinned to gpu04, training job on two nodes, array.
        low = W.submit(
            "low-victim",
            "sbdave",
            ["--qos=low", "-w", "gpu04", "-t", "5", *g8],
            first=300,
            gpus=8,
            expect={"final_state": "PREEMPTED", "attempts": 1},
        )
        W.running(low)
        W.submit(
            "train-2node",
            "sbalice",
            ["-N", "2", "-t", "2", *g8],
            first=40,
            gpus=16,
            expect={"final_state": "COMPLETED", "attempts": 1},
        )
        arr = W.submit(
            "gpu-array",
            "sbbob",
            ["--array=0-3", "--gres=gpu:2", "-c", "4", "-t", "1"],
            first=15,
            fail_task="2",
            gpus=2,
            expect={
                "final_state": "COMPLETED",
                "attempts": 1,
                "array": True,
                "tasks": {"0": "COMPLETED", "1": "COMPLETED", "2": "FAILED", "3": "COMPLETED"},
            },
        )
        W.submit(
            "high-preemptor",
            "sbcarol",
            ["--qos=high", "-w", "gpu04", "-t", "1", *g8],
            first=15,
            gpus=8,
            expect={"final_state": "COMPLETED", "attempts": 1},
        )
        W.poller.wait_for(low, lambda s: s in FINAL_STATES, "preemption", 120)
        W.note("preempted", job_id=low, state=W.poller.state(low))
        # --- Requeue by the admin: a long first attempt, a short second one.
        rq = W.submit(
            "admin-requeue",
            "sbalice",
            ["--requeue", "--gres=gpu:4", "-c", "4", "-t", "5"],
            first=300,
            again=8,
            gpus=4,
            expect={"final_state": "COMPLETED", "attempts": 2, "first_attempt_state": "REQUEUED"},
        )
        # --- NODE_FAIL: an exclusive --requeue job whose node the admin sets DOWN, resumed later.
        nf = W.submit(
            "node-fail",
            "sbbob",
            ["--requeue", "-t", "5", *g8],
            first=300,
            again=8,
            gpus=8,
            expect={"final_state": "COMPLETED", "attempts": 2, "first_attempt_state": "NODE_FAIL"},
        )
        # Time limit, cancel running, cancel pending (held), pending forever (held, dependency, begin).
        W.submit(
            "time-limit",
            "sbcarol",
            ["--partition=debug", "--gres=gpu:1", "-c", "1", "-t", "1"],
            first=600,
            gpus=1,
            expect={"final_state": "TIMEOUT", "attempts": 1},
        )
        cr = W.submit(
            "cancel-running",
            "sbbob",
            ["--gres=gpu:2", "-c", "4", "-t", "5"],
            first=300,
            gpus=2,
            expect={"final_state": "CANCELLED", "attempts": 1},
        )
        cp = W.submit(
            "cancel-pending",
            "sbalice",
            ["--hold", "--gres=gpu:1", "-t", "1"],
            first=5,
            gpus=1,
            expect={"final_state": "CANCELLED", "attempts": 1, "never_started": True},
        )
        held = W.submit(
            "held",
            "sbalice",
            ["--hold", "--gres=gpu:8", "-t", "10"],
            first=5,
            gpus=8,
            expect={"final_state": "PENDING", "attempts": 1, "pending_reason": "JobHeldUser"},
        )
        W.submit(
            "after-held",
            "sbbob",
            [f"--dependency=afterok:{held}", "--gres=gpu:1", "-t", "1"],
            first=5,
            gpus=1,
            expect={"final_state": "PENDING", "attempts": 1, "pending_reason": "Dependency"},
        )
        W.submit(
            "begin-later",
            "sbcarol",
            ["--begin=now+3hours", "--gres=gpu:1", "-t", "1"],
            first=5,
            gpus=1,
            expect={"final_state": "PENDING", "attempts": 1, "pending_reason": "BeginTime"},
        )
        sh(["scancel", cp])
        W.note("scancel pending", job_id=cp)
        W.running(rq)
        W.running(nf)
        W.running(cr)
        time.sleep(3)
        sh(["scontrol", "requeue", rq])
        W.note("scontrol requeue", job_id=rq)
        sh(["scancel", cr])
        W.note("scancel running", job_id=cr)
        with W.poller.lock:
            nf_node = W.poller.nodes[nf]
        sh(["scontrol", "update", f"nodename={nf_node}", "state=down", f"reason={DOWN_REASON}"])
        W.note("node down", node=nf_node, job_id=nf)
        # Drain gpu04 while busy: a job on it, then the drain; it finishes and the node stays DRAINED.
        W.poller.wait_for(arr + "_3", lambda s: s in FINAL_STATES, "array end", 120)
        drain_node = next(n for n in reversed(cluster.GPU_NODES) if n != nf_node)
        busy = W.submit(
            "on-drained-node",
            "sbcarol",
            ["-w", drain_node, "--gres=gpu:2", "-c", "4", "-t", "2"],
            first=25,
            gpus=2,
            expect={"final_state": "COMPLETED", "attempts": 1},
        )
        W.running(busy)
        sh(["scontrol", "update", f"nodename={drain_node}", "state=drain", f"reason={DRAIN_REASON}"])
        W.note("node drain", node=drain_node)
        time.sleep(8)
        sh(["scontrol", "update", f"nodename={nf_node}", "state=resume"])
        W.note("node resume", node=nf_node)
        if mid_hook:
            W.note("mid hook")
            mid_hook()
        # Wait for every job that can end to end (requeued ones come back after their ~120 s BeginTime).
        for name, job in W.jobs.items():
            if job["final_state"] == "PENDING":
                continue
            ids = [f"{job['job_id']}_{t}" for t in job["tasks"]] if job.get("array") else [job["job_id"]]
            for jid in ids:
                W.poller.wait_for(jid, lambda s: s in FINAL_STATES, f"{name} to end", 300)
        time.sleep(2)
        W.poller.poll_once()
        W.poller.stop_evt.set()
        W.note("done")
        return W.record(nf_node, drain_node)

    def record(self, nf_node: str, drain_node: str) -> dict:
        with self.poller.lock:
            intervals = {
                k: [[round(a, 3), round(b, 3)] for a, b, *_ in v] for k, v in self.poller.intervals.items()
            }
            uncertainty = {
                k: [round(us + ue + 1.0, 3) for _, _, us, ue, _ in v]
                for k, v in self.poller.intervals.items()
            }
            raw = dict(self.poller.raw)
            reasons = dict(self.poller.reasons)
            states = dict(self.poller.states)
        # A short job can start and end between two samples; then take slurmctld's own start/end of its
        # last attempt (squeue %S/%e, whole seconds; never sacct).
        with self.poller.lock:
            times = dict(self.poller.times)

        def fill(jid: str, expected: dict) -> None:
            ivs = intervals.setdefault(jid, [])
            if expected.get("never_started") or expected["final_state"] == "PENDING":
                return
            if not ivs and expected["attempts"] == 1 and jid in times:
                st, en = (datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp() for t in times[jid])
                ivs.append([st, en])
                uncertainty.setdefault(jid, []).append(1.0)

        jobs = []
        for job in self.jobs.values():
            if job.get("array"):
                for task, st in job["tasks"].items():
                    fill(f"{job['job_id']}_{task}", {**job, "final_state": st})
            else:
                fill(job["job_id"], job)
            if job.get("array"):
                for task, st in job["tasks"].items():
                    jid = f"{job['job_id']}_{task}"
                    jobs.append(
                        {
                            **{k: v for k, v in job.items() if k != "tasks"},
                            "job_id": jid,
                            "array_job_id": job["job_id"],
                            "array_task_id": int(task),
                            "job_id_raw": raw.get(jid),
                            "final_state": st,
                            "exit_code": 3 if st == "FAILED" else 0,
                            "intervals": intervals.get(jid, []),
                            "interval_slack": uncertainty.get(jid, []),
                            "last_squeue_state": states.get(jid),
                        }
                    )
            else:
                jid = job["job_id"]
                jobs.append(
                    {
                        **job,
                        "job_id_raw": raw.get(jid, jid),
                        "intervals": intervals.get(jid, []),
                        "interval_slack": uncertainty.get(jid, []),
                        "last_squeue_state": states.get(jid),
                        "last_squeue_reason": reasons.get(jid),
                    }
                )
        gpu_seconds: dict[str, float] = {}
        slack: dict[str, float] = {}
        for j in jobs:
            for (a, b), unc in zip(j["intervals"], j["interval_slack"], strict=True):
                gpu_seconds[j["account"]] = gpu_seconds.get(j["account"], 0.0) + j["gpus"] * (b - a)
                # Each edge is known to within half the span between two samples; sacct's whole seconds
                # add up to 1 s more (the +1 in interval_slack).
                slack[j["account"]] = slack.get(j["account"], 0.0) + j["gpus"] * unc
        return {
            "cluster": cluster.CLUSTER,
            "started": self.t0,
            "finished": time.time(),
            "jobs": jobs,
            "events": self.events,
            "nodes": {
                drain_node: {"state": "drained", "reason": DRAIN_REASON},
                nf_node: {"state": "idle", "down_reason": DOWN_REASON},
            },
            "reservation": {"name": RESERVATION, "nodes": "gpu01", "flags": "MAINT"},
            "down_node": nf_node,
            "drain_node": drain_node,
            "gpu_seconds_by_account": gpu_seconds,
            "gpu_seconds_tolerance_by_account": slack,
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where to write the JSON record")
    ap.add_argument("--snapshots", help="capture COMMANDS.md outputs here mid-workload and at the end")
    args = ap.parse_args()
    hook = None
    if args.snapshots:
        import capture

        def hook() -> None:
            capture.capture_all(Path(args.snapshots), "mid")

    rec = Workload().run(hook)
    Path(args.out).write_text(json.dumps(rec, indent=2, sort_keys=True))
    if args.snapshots:
        capture.capture_all(Path(args.snapshots), "final")
    return 0


if __name__ == "__main__":
    sys.exit(main())
