#!/usr/bin/env python3
"""Capture the output of every live command line in /work/notes/COMMANDS.md from the slurmbed cluster.

    .venv/bin/python tests/slurmbed/capture.py DIR TAG

Writes DIR/<command>_<TAG>.txt (raw bytes, exactly as printed with TZ=UTC) and DIR/<command>_<TAG>.argv
(the argument list, one per line; the unit separator shown as \\x1f). These files are the real-Slurm
fixtures under tests/fixtures/slurm-22.05/.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurmscope.collectors import sacct
from slurmscope.collectors.registry import COLLECTORS

from slurmscope.config import load_config

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402

US = "\x1f"


# The collectors' own argument lists, with the default configuration (commands found on PATH).
def sacct_argv(start: datetime, end: datetime) -> list[str]:
    return sacct.command(load_config(env={}), start=start, end=end)


def commands(start: datetime, end: datetime) -> dict[str, list[str]]:
    """kind -> argv of every live collector that runs a Slurm command, in collection order."""
    cfg = load_config(env={})
    return {
        c.kind: c.module.command(cfg, start=start, end=end)
        for c in COLLECTORS
        if c.live and not c.spool and hasattr(c.module, "command")
    }


def _run(argv: list[str]) -> bytes:
    r = subprocess.run(argv, env=cluster.env(), capture_output=True, timeout=60, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]}: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r.stdout


def write_capture(out: Path, name: str, argv: list[str], data: bytes | None = None) -> Path:
    """`out/<name>.txt` (the bytes printed; `argv` is run when `data` is None) and `out/<name>.argv`."""
    out.mkdir(parents=True, exist_ok=True)
    p = out / f"{name}.txt"
    p.write_bytes(_run(argv) if data is None else data)
    (out / f"{name}.argv").write_text("\n".join(a.replace(US, "\\x1f") for a in argv) + "\n")
    return p


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
        cmds["sacct_jobs"] = sacct.command_jobs(load_config(env={}), hidden)
    for name, argv in cmds.items():
        written[name] = write_capture(out, f"{name}_{tag}", argv, squeue_out if name == "squeue" else None)
    return written


if __name__ == "__main__":
    capture_all(Path(sys.argv[1]), sys.argv[2])
