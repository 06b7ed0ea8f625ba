"""slurmrestd as the live source of `pending_jobs` (`slurm.source = "rest"`), instead of the squeue CLI.

Why it is shaped like this:
- `GET /slurm/<version>/jobs` answers what 22.05's `squeue --json` prints (src/squeue/data.c calls the
  same openapi handler; identical on the test bed): every job slurmctld holds, in every state and
  partition, as the live `squeue --all --states=all` lists them. The rows come from squeue's own parser
  (squeue.parse, which reads JSON through `squeue.json_values`, pending arrays expanded per task as
  `--array` prints them) into the same table with the same key, so sacct's by-id lookups of the jobs its
  window hides read the same pending_jobs snapshot whichever source wrote it.
- `fetch` is the only I/O, outside the write lock, through the shared client (collectors/slurmrestd.py).
"""

from __future__ import annotations

from datetime import datetime

from slurmscope.collectors import slurm_json, slurmrestd, squeue

from slurmscope.config import Config

KIND = "squeue_rest"
TABLES = squeue.TABLES
parse = squeue.parse


def fetch(cfg: Config, window: tuple[datetime | None, datetime | None]) -> bytes:
    """Every job slurmctld holds, as slurmrestd's JSON."""
    version = slurmrestd.api_version(cfg, slurm_json.READ_JOBS, "jobs")
    return slurmrestd.get(cfg, f"/slurm/{version}/jobs")
