#!/usr/bin/env python3
"""Run jobs of known CPU and memory use on the slurmbed and capture sacct (text and JSON) and Slurm's seff.

    SLURMBED_DIR=/tmp/slurmbed-seff .venv/bin/python tests/slurmbed/capture_seff.py DIR SEFF

SEFF is Slurm 22.05.8's own seff script (contribs/seff/seff at tag slurm-22-05-8-1 of SchedMD/slurm),
run by perl with Debian's libslurm-perl and libslurmdb-perl 22.05.8 (`apt-get install libslurm-perl
libslurmdb-perl`; Debian packages the Perl API seff needs, not seff itself). Starts the bed in its own
directory (the ports are fixed, so it takes the bed's lock), submits the jobs of JOBS, waits until
slurmdbd has recorded their ends, then writes:
  DIR/seff_sacct.txt, .argv         the live collector's sacct command line over the jobs' window
  DIR/seff_sacct_json.json, .argv   the same window with --json (run right after the text)
  DIR/seff_<name>.txt, .argv        `perl SEFF <job id>` for each job
  DIR/seff_record.json              what each job was asked to do (CPUs, burn seconds, MiB held), its id
and stops the bed. Stdlib and slurmscope only; runs as root.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurmscope.collectors import sacct

from slurmscope.config import load_config

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402
from capture import _run  # noqa: E402
from capture_human import sh  # noqa: E402

US = "\x1f"
BURN = "timeout {s} sh -c 'while :; do :; done'"
# Python keeps `b'x' * n` resident (every page written); held past JobAcctGatherFrequency=30 so the
# gatherer samples it.
HOLD = "python3 -c \"import time; b = b'x' * ({mib} << 20); time.sleep({s})\""

JOBS = {
    # 4 CPUs allocated, 2 busy for 20 s in the batch step, then a 1-CPU step busy 5 s: seff sums both steps
    "burn2of4": {
        "args": ["-p", "cpu", "-c", "4", "--mem-per-cpu=500M", "-t", "3"],
        "script": f"{BURN.format(s=20)} & {BURN.format(s=20)} & wait\nsrun -n1 -c1 {BURN.format(s=5)}\n",
        "cpus": 4,
        "busy_cpu_seconds": 2 * 20 + 5,
    },
    # one task holding 400 MiB for 40 s, 1000 MiB requested per node
    "mem400": {
        "args": ["-p", "cpu", "-c", "1", "--mem=1000M", "-t", "3"],
        "script": HOLD.format(mib=400, s=40) + "\n",
        "cpus": 1,
        "held_mib": 400,
    },
    # a 2-task step, each task holding 200 MiB: seff multiplies the step's MaxRSS by its 2 tasks
    "mem2tasks": {
        "args": ["-p", "cpu", "-n", "2", "--mem-per-cpu=600M", "-t", "3"],
        "script": "srun -n2 " + HOLD.format(mib=200, s=40) + "\n",
        "cpus": 2,
        "held_mib": 200,
        "tasks": 2,
    },
    # 1 CPU asked, a whole 16-CPU node allocated: seff's request is DefMemPerCPU x allocated CPUs
    "exclusive": {
        "args": ["-p", "gpu", "-c", "1", "--exclusive", "-t", "3"],
        "script": f"{BURN.format(s=5)}\n",
        "cpus": 16,
        "busy_cpu_seconds": 5,
    },
    # per-node memory on two nodes
    "pernode2": {
        "args": ["-p", "gpu", "-N", "2", "-c", "1", "--mem=2000M", "-t", "3"],
        "script": "srun -N2 -n2 " + HOLD.format(mib=100, s=35) + "\n",
        "cpus": 2,
        "held_mib": 100,
        "tasks": 2,
    },
}


def submit(user: str, name: str, args: list[str], script: str) -> str:
    d = cluster.P["work"] / user
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.sh"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return sh(
        [
            "sbatch",
            "--parsable",
            f"--job-name={name}",
            f"--chdir={d}",
            f"--output={d}/%j.out",
            *args,
            str(path),
        ],
        user=user,
    ).split(";")[0]


def ended_in_accounting(ids: list[str]) -> bool:
    out = sh(["sacct", "-n", "-X", "-P", "-o", "State", "-j", ",".join(ids)])
    states = out.split()
    return len(states) == len(ids) and not {"PENDING", "RUNNING", "COMPLETING"} & set(states)


def main(out: Path, seff: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    lock = cluster.acquire_lock(1800)
    if lock is None:
        print("bed busy", file=sys.stderr)
        return 4
    try:
        cluster.start()
        t0 = datetime.now(UTC).replace(microsecond=0)
        record = {"seff": str(seff), "seff_sha256": hashlib.sha256(seff.read_bytes()).hexdigest(), "jobs": {}}
        for name, spec in JOBS.items():
            jid = submit("sbdave", name, spec["args"], spec["script"])
            record["jobs"][name] = {"job_id": jid, **spec}
        ids = [j["job_id"] for j in record["jobs"].values()]
        deadline = time.monotonic() + 240
        while not ended_in_accounting(ids):
            if time.monotonic() > deadline:
                raise RuntimeError("jobs did not end in time")
            time.sleep(3)
        time.sleep(3)
        cfg = load_config(env={})
        start, end = (
            t0 - timedelta(minutes=5),
            datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5),
        )
        text_argv = sacct.command(cfg, start=start, end=end)
        json_argv = [
            "sacct",
            "--allusers",
            "--duplicates",
            f"--starttime={start.strftime('%Y-%m-%dT%H:%M:%S')}",
            f"--endtime={end.strftime('%Y-%m-%dT%H:%M:%S')}",
            "--json",
        ]
        cmds = {"seff_sacct.txt": text_argv, "seff_sacct_json.json": json_argv}
        cmds.update(
            {f"seff_{name}.txt": ["perl", str(seff), j["job_id"]] for name, j in record["jobs"].items()}
        )
        for file, argv in cmds.items():
            (out / file).write_bytes(_run(argv))
            (out / file).with_suffix(".argv").write_text(
                "\n".join(a.replace(US, "\\x1f") for a in argv) + "\n"
            )
        record["captured_at"] = datetime.now(UTC).isoformat()
        (out / "seff_record.json").write_text(json.dumps(record, indent=1) + "\n")
    finally:
        cluster.stop()
        lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]).resolve()))
