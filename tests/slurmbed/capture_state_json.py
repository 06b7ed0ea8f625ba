#!/usr/bin/env python3
"""Capture node, queue and scheduler state as the live text, as `--json` and as slurmrestd JSON, same moment.

    SLURMBED_DIR=/tmp/slurmbed-restjson .venv/bin/python tests/slurmbed/capture_state_json.py DIR

Starts the bed in its own directory (holding the bed lock, so no other session's state is touched), sets
up a state on purpose (a DOWN node with a reason, a DRAINING node under a running job, an allocated and a
mixed node; pending jobs held, with a dependency, a future begin, a node request on the DOWN node, a
4-node request, an array throttled to 2 running tasks), starts slurmrestd (tests/slurmbed/cluster.py
`start_slurmrestd`, rest_auth/local) and captures two moments (`a`, then `b` after gpu01 is resumed and
the held job released). For each kind, in this order within a fraction of a second:

  <kind>_text_<TAG>.txt    the live collector's own command line (collectors/<kind>.py `command`)
  <kind>_json_<TAG>.json   the same command with `--json` (sinfo and squeue; 22.05's sdiag has no --json)
  rest_<endpoint>_<TAG>.json   curl over the unix socket: /slurm/v0.0.38/nodes and /partitions (sinfo),
                           /slurm/v0.0.38/jobs (squeue), /slurm/v0.0.38/diag (sdiag)
  the text command again: a capture is kept only when the two texts give the same rows (sdiag: the same
  counters), so the JSON was taken in the state the text shows; otherwise the kind is captured again.

Each file has a <name>.argv (argument list, one per line, 0x1F written \\x1f); DIR/state_record.json says
what was set up (node states and reasons, job ids, expected states and pending reasons), written by this
script, never read back from Slurm. Stdlib and slurmscope only; runs as root; stops the bed at the end.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from slurmscope.collectors import sdiag, sinfo, squeue

from slurmscope.config import load_config

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402
from capture_human import sh, state_of, submit, wait  # noqa: E402

DOWN_REASON = "Xid 79: GPU has fallen off the bus"
DRAIN_REASON = "ECC errors, replace DIMM B2"
US = "\x1f"
API = "v0.0.38"
TRIES = 20


def _run(argv: list[str]) -> bytes:
    r = subprocess.run(argv, env=cluster.env(), capture_output=True, timeout=60, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r.stdout


def _curl(sock: Path, path: str) -> list[str]:
    return ["curl", "-s", "--unix-socket", str(sock), f"http://localhost{path}"]


def _same_sdiag(a: bytes, b: bytes) -> bool:
    """Two sdiag texts of one state: every parsed counter equal (the printed time and RPC counts move)."""
    kw = {"cluster": "c", "snapshot_time": datetime.now(UTC), "tz": UTC}
    ra = sdiag.parse(a, **kw).tables["sched_stats"].drop("snapshot_time", "raw_text")
    rb = sdiag.parse(b, **kw).tables["sched_stats"].drop("snapshot_time", "raw_text")
    return ra.height == 1 and ra.equals(rb)


def capture_kind(out: Path, tag: str, kind: str, cmds: dict[str, list[str]], same) -> int:
    """Text, the other forms, text again; keep the set whose two texts agree. Returns the tries taken."""
    for attempt in range(1, TRIES + 1):
        text = cmds[f"{kind}_text"]
        before = _run(text)
        got = {name: _run(argv) for name, argv in cmds.items() if not name.endswith("_text")}
        after = _run(text)
        if same(before, after):
            for name, argv in cmds.items():
                ext = "txt" if name.endswith("_text") else "json"
                data = before if name.endswith("_text") else got[name]
                (out / f"{name}_{tag}.{ext}").write_bytes(data)
                (out / f"{name}_{tag}.argv").write_text(
                    "\n".join(a.replace(US, "\\x1f") for a in argv) + "\n"
                )
            return attempt
        time.sleep(0.7)
    raise RuntimeError(f"{kind}: the state kept changing across {TRIES} tries")


def capture_moment(out: Path, tag: str, sock: Path) -> dict[str, int]:
    cfg = load_config(env={})
    groups = {
        "sinfo": {
            "sinfo_text": sinfo.command(cfg),
            "sinfo_json": ["sinfo", "--json"],
            "rest_nodes": _curl(sock, f"/slurm/{API}/nodes"),
            "rest_partitions": _curl(sock, f"/slurm/{API}/partitions"),
        },
        "squeue": {
            "squeue_text": squeue.command(cfg),
            "squeue_json": ["squeue", "--json"],
            "rest_slurm_jobs": _curl(sock, f"/slurm/{API}/jobs"),
        },
        "sdiag": {"sdiag_text": sdiag.command(cfg), "rest_diag": _curl(sock, f"/slurm/{API}/diag")},
    }
    tries = {}
    for kind, cmds in groups.items():
        same = _same_sdiag if kind == "sdiag" else (lambda a, b: a == b)
        tries[kind] = capture_kind(out, tag, kind, cmds, same)
    return tries


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
        shutil.rmtree(cluster.BED, ignore_errors=True)  # a fresh cluster: job ids and states from 1
        cluster.start()
        jobs: dict[str, dict] = {}

        def job(key: str, user: str, name: str, args: list[str], secs: int = 900, **expect) -> str:
            jid = submit(user, name, args, secs)
            jobs[key] = {"job_id": jid, "user": user, "name": name, "args": args, **expect}
            return jid

        done = job("quick", "sbdave", "quick", ["-p", "cpu", "-c", "1", "-t", "5"], secs=1, state="COMPLETED")
        d = cluster.P["work"] / "sbdave"
        fail = sh(
            [
                "sbatch",
                "--parsable",
                "--job-name=exit-one",
                f"--chdir={d}",
                f"--output={d}/%j.out",
                "-p",
                "cpu",
                "-c",
                "1",
                "-t",
                "5",
                "--wrap",
                "exit 1",
            ],
            user="sbdave",
        ).split(";")[0]
        jobs["exit_one"] = {"job_id": fail, "user": "sbdave", "name": "exit-one", "state": "FAILED"}
        sh(["scontrol", "update", "nodename=gpu01", "state=down", f"reason={DOWN_REASON}"])
        victim = job(
            "drain_victim",
            "sbalice",
            "pretrain llm",
            ["-w", "gpu02", "--gres=gpu:2", "-c", "4", "-t", "30"],
            state="RUNNING",
            node="gpu02",
        )
        wait(lambda: state_of(victim) == "RUNNING", "drain_victim RUNNING")
        sh(["scontrol", "update", "nodename=gpu02", "state=drain", f"reason={DRAIN_REASON}"])
        full = job(
            "full_node",
            "sbbob",
            "eval-sweep",
            ["-w", "gpu03", "--gres=gpu:8", "-c", "16", "-t", "30"],
            state="RUNNING",
            node="gpu03",
        )
        cpu = job(
            "cpu_long",
            "sbdave",
            "cpu long run",
            ["-p", "cpu", "-c", "12", "-t", "30"],
            state="RUNNING",
            node="cpu01",
        )
        arr = job(
            "array",
            "sbbob",
            "sweep",
            ["-w", "gpu04", "--array=0-5%2", "--gres=gpu:1", "-c", "2", "-t", "30"],
            state="2 RUNNING, 4 PENDING (JobArrayTaskLimit)",
        )
        wait(lambda: state_of(full) == "RUNNING" and state_of(cpu) == "RUNNING", "running jobs")
        held = job(
            "held",
            "sbalice",
            "held",
            ["--hold", "--gres=gpu:1", "-t", "1"],
            state="PENDING",
            reason="JobHeldUser",
        )
        job(
            "after_held",
            "sbbob",
            "after-held",
            [f"--dependency=afterok:{held}", "-t", "1"],
            state="PENDING",
            reason="Dependency",
        )
        job(
            "begin_later",
            "sbcarol",
            "begin-later",
            ["--begin=now+3hours", "--gres=gpu:1", "-t", "1"],
            state="PENDING",
            reason="BeginTime",
        )
        job(
            "on_down_node",
            "sbcarol",
            "needs-gpu01",
            ["-w", "gpu01", "--gres=gpu:1", "-t", "10"],
            state="PENDING",
        )
        job(
            "four_nodes",
            "sbalice",
            "four node job",
            ["-N", "4", "--exclusive", "--gres=gpu:8", "-t", "10"],
            state="PENDING",
        )
        wait(lambda: state_of(done) == state_of(fail) == "", "quick jobs ended")  # squeue -j: gone once ended
        time.sleep(12)  # a few scheduler passes (sched_interval=3, bf_interval=2) set the pending reasons
        sock = cluster.start_slurmrestd()
        time.sleep(1)
        record = {
            "a": {
                "captured_at": datetime.now(UTC).isoformat(),
                "nodes": {
                    "gpu01": {"state": "down", "reason": DOWN_REASON},
                    "gpu02": {"state": "draining (mixed+drain)", "reason": DRAIN_REASON},
                    "gpu03": {"state": "allocated"},
                    "gpu04": {"state": "mixed (2 array tasks)"},
                    "cpu01": {"state": "mixed"},
                },
                "array_job_id": arr,
            }
        }
        record["a"]["tries"] = capture_moment(out, "a", sock)
        sh(["scontrol", "update", "nodename=gpu01", "state=resume"])
        sh(["scontrol", "release", held])
        time.sleep(8)
        record["b"] = {
            "captured_at": datetime.now(UTC).isoformat(),
            "changes": "gpu01 resumed (needs-gpu01 may start on it), the held job released",
        }
        record["b"]["tries"] = capture_moment(out, "b", sock)
        record["jobs"] = jobs
        (out / "state_record.json").write_text(json.dumps(record, indent=1) + "\n")
    finally:
        cluster.stop()
        lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
