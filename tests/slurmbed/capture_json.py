#!/usr/bin/env python3
"""Capture one moment of the slurmbed cluster's accounting as sacct text, `sacct --json` and slurmrestd JSON.

    .venv/bin/python tests/slurmbed/capture_json.py DIR TAG [REST_SOCKET]

Writes, for the same -S/-E window (six hours back, five minutes ahead) and for the job ids squeue lists
(the jobs that window hides):
  DIR/sacct_text_<TAG>.txt      the live collector's own sacct command line (collectors/sacct.py)
  DIR/sacct_json_<TAG>.json     sacct --allusers --duplicates -S -E --json
  DIR/sacct_jobs_text_<TAG>.txt / sacct_jobs_json_<TAG>.json   the same by --jobs=<ids>
  DIR/rest_jobs_<TAG>.json      GET /slurmdb/v0.0.38/jobs?start_time=..&end_time=.. (when REST_SOCKET given)
and DIR/<name>_<TAG>.argv with each argument list (the URL for the REST capture). The text and JSON
commands run back to back, so a test can assert both give the same rows.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

from slurmscope.collectors import sacct

from slurmscope.config import load_config

sys.path.insert(0, str(Path(__file__).parent))
import cluster  # noqa: E402
from capture import _run  # noqa: E402

US = "\x1f"


def _sacct_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def json_argv(start: datetime, end: datetime) -> list[str]:
    return [
        "sacct",
        "--allusers",
        "--duplicates",
        f"--starttime={_sacct_time(start)}",
        f"--endtime={_sacct_time(end)}",
        "--json",
    ]


def capture(out: Path, tag: str, socket: str | None = None) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(env={})
    now = datetime.now(UTC).replace(microsecond=0)
    start, end = now - timedelta(hours=6), now + timedelta(minutes=5)
    squeue = subprocess.run(
        ["squeue", "--noheader", "--states=PENDING", "-o", "%i"],
        env=cluster.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    ids = sorted({i.split("_")[0] for i in squeue}, key=int)
    cmds: dict[str, list[str]] = {
        "sacct_text": sacct.command(cfg, start=start, end=end),
        "sacct_json": json_argv(start, end),
    }
    if ids:
        cmds["sacct_jobs_text"] = sacct.command_jobs(cfg, ids)
        cmds["sacct_jobs_json"] = ["sacct", "--allusers", "--duplicates", f"--jobs={','.join(ids)}", "--json"]
    if socket:
        url = (
            "http://localhost/slurmdb/v0.0.38/jobs"
            f"?start_time={quote(_sacct_time(start))}&end_time={quote(_sacct_time(end))}"
        )
        cmds["rest_jobs"] = ["curl", "-s", "--unix-socket", socket, url]
    written = {}
    for name, argv in cmds.items():
        ext = "txt" if name.endswith("text") else "json"
        p = out / f"{name}_{tag}.{ext}"
        p.write_bytes(_run(argv))
        (out / f"{name}_{tag}.argv").write_text("\n".join(a.replace(US, "\\x1f") for a in argv) + "\n")
        written[name] = p
    return written


if __name__ == "__main__":
    capture(Path(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
