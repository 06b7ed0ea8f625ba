#!/usr/bin/env python3
"""Capture the output of every live command line in /work/notes/COMMANDS.md from the slurmbed cluster.

    python3 tests/slurmbed/capture.py DIR TAG

Writes DIR/<command>_<TAG>.txt (raw bytes, exactly as printed with TZ=UTC) and DIR/<command>_<TAG>.argv
(the argument list, one per line; the unit separator shown as \\x1f). These files are the real-Slurm
fixtures under tests/fixtures/slurm-22.05/.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402

US = "\x1f"
SACCT_FIELDS = (
    "JobID,JobIDRaw,Cluster,Partition,QOS,Account,User,UID,Submit,Eligible,Start,End,Elapsed,"
    "Timelimit,State,ExitCode,NNodes,NCPUS,ReqMem,AllocTRES,NodeList,Flags,Priority,Reason,JobName"
)
SINFO_FIELDS = [
    "NodeHost",
    "Partition",
    "StateComplete",
    "CPUsState",
    "Memory",
    "AllocMem",
    "Gres",
    "GresUsed",
    "Features",
    "UserLong",
    "Timestamp",
]
SQUEUE_FMT = US.join(
    [
        "%i",
        "%A",
        "%F",
        "%K",
        "%u",
        "%a",
        "%P",
        "%q",
        "%T",
        "%Q",
        "%V",
        "%S",
        "%D",
        "%C",
        "%b",
        "%l",
        "%E",
        "%r",
        "%j",
    ]
)
EVENT_FIELDS = "Cluster,ClusterNodes,NodeName,TimeStart,TimeEnd,State,Reason,User"


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_argv(start: datetime, end: datetime) -> list[str]:
    return [
        "sacct",
        "--allusers",
        "--duplicates",
        "--parsable2",
        "--noconvert",
        f"--delimiter={US}",
        f"--starttime={iso(start)}",
        f"--endtime={iso(end)}",
        f"--format={SACCT_FIELDS}",
    ]


def sacct_jobs_argv(ids: list[str]) -> list[str]:
    return [
        "sacct",
        "--allusers",
        "--duplicates",
        "--parsable2",
        "--noconvert",
        f"--delimiter={US}",
        f"--jobs={','.join(ids)}",
        f"--format={SACCT_FIELDS}",
    ]


def commands(start: datetime, end: datetime) -> dict[str, list[str]]:
    return {
        "sacct": sacct_argv(start, end),
        "sinfo": [
            "sinfo",
            "--Node",
            "--noheader",
            "--Format=" + ",".join(f"{f}:{US}" for f in SINFO_FIELDS) + ",Reason:",
        ],
        "squeue": ["squeue", "--all", "--array", "--noheader", "--states=all", f"--format={SQUEUE_FMT}"],
        "sshare": ["sshare", "--all", "--long", "--parsable2"],
        "sdiag": ["sdiag"],
        "events": [
            "sacctmgr",
            "--parsable2",
            "show",
            "event",
            f"Start={iso(start)}",
            f"End={iso(end)}",
            f"format={EVENT_FIELDS}",
        ],
        "config": ["scontrol", "show", "config"],
        "reservations": ["scontrol", "show", "reservation", "--oneliner"],
        "ping": ["scontrol", "ping"],
    }


def _run(argv: list[str]) -> bytes:
    r = subprocess.run(argv, env=cluster.env(), capture_output=True, timeout=60, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r.stdout


def capture_all(out: Path, tag: str, start: datetime | None = None) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    start = start or now - timedelta(hours=6)
    end = now + timedelta(minutes=5)
    written = {}
    cmds = commands(start, end)
    squeue_out = _run(cmds["squeue"])
    hidden = sorted({line.split(US)[1] for line in squeue_out.decode().splitlines() if US in line}, key=int)
    if hidden:
        cmds["sacct_jobs"] = sacct_jobs_argv(hidden)
    for name, argv in cmds.items():
        data = squeue_out if name == "squeue" else _run(argv)
        p = out / f"{name}_{tag}.txt"
        p.write_bytes(data)
        (out / f"{name}_{tag}.argv").write_text("\n".join(a.replace(US, "\\x1f") for a in argv) + "\n")
        written[name] = p
    return written


if __name__ == "__main__":
    capture_all(Path(sys.argv[1]), sys.argv[2])
