"""slurmrestd as the live source of `jobs` and `job_steps` (`slurm.source = "rest"`), instead of the sacct CLI.

Why it is shaped like this:
- A site that runs slurmrestd often has no Slurm client on the monitoring host, or wants one long-lived
  authenticated endpoint instead of munge on every box. The accounting query is the same one: slurmrestd's
  `/slurmdb/<version>/jobs` answers from slurmdbd exactly what `sacct --json` prints (on the test bed its
  `jobs` array is byte-for-byte the same), so the rows come from the same parser (sacct.parse, which
  reads JSON through collectors/slurm_json.py) and load into the same tables with the same key.
- `fetch` is the only I/O and runs outside the write lock (collectors/base.py), through the shared
  slurmrestd client (collectors/slurmrestd.py: unix socket or JWT).
- The window is sent as `now-Nseconds` / `now+Nseconds`: slurmrestd parses absolute times in its own zone,
  which the collector cannot know; relative times mean the same instant in any zone.
- Jobs the window hides (held, dependency, future `--begin`) are asked for by id, one `/job/<id>` call
  each (v0.0.38 has no id filter on `/jobs`), merged into one document.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from slurmscope.collectors import sacct, slurm_json, slurmrestd

from slurmscope.config import Config

KIND = "sacct_rest"
TABLES = sacct.TABLES
parse = sacct.parse
streams = sacct.streams
parse_stream = sacct.parse_stream
after_upsert = sacct.after_upsert


def _relative(t: datetime, now: datetime) -> str:
    delta = int((t.astimezone(UTC) - now).total_seconds())
    return f"now%2B{delta}seconds" if delta >= 0 else f"now-{-delta}seconds"


def fetch(cfg: Config, window: tuple[datetime | None, datetime | None]) -> bytes:
    """The jobs of the window, as slurmrestd's JSON (what `sacct --json -S -E` prints)."""
    version = slurmrestd.api_version(cfg, slurm_json.READ, "jobs")
    now = datetime.now(UTC)
    query = []
    if window[0] is not None:
        query.append(f"start_time={_relative(window[0], now)}")
    if window[1] is not None:
        query.append(f"end_time={_relative(window[1], now)}")
    return slurmrestd.get(cfg, f"/slurmdb/{version}/jobs" + ("?" + "&".join(query) if query else ""))


def fetch_ids(cfg: Config, job_ids: Iterable[str]) -> bytes:
    """The given jobs (every attempt), one `/job/<id>` call each, as one document."""
    version = slurmrestd.api_version(cfg, slurm_json.READ, "jobs")
    meta, jobs = None, []
    for jid in sacct.valid_job_ids(job_ids):
        try:
            doc = json.loads(slurmrestd.get(cfg, f"/slurmdb/{version}/job/{jid}"))
        except slurmrestd.HTTPError:  # a job slurmdbd no longer knows (purged) must not block the others
            continue
        meta = meta or doc.get("meta")
        jobs += doc.get("jobs") or []
    return (
        json.dumps({"meta": meta or {"plugin": {"type": f"openapi/db{version}"}}, "jobs": jobs}).encode()
        + b"\n"
    )
