"""slurmrestd as the live source of `sched_stats` (`slurm.source = "rest"`), instead of the sdiag CLI.

Why it is shaped like this:
- `GET /slurm/<version>/diag` answers slurmctld's statistics, the numbers `sdiag` prints (the same
  `slurm_get_statistics` call: src/plugins/openapi/v0.0.38/diag.c, src/sdiag/sdiag.c). sdiag's own
  parser reads the JSON (`sdiag.json_row`, with sdiag's arithmetic for the means and cycles per minute)
  into the same table with the same key; the snapshot time is the statistics' own `req_time`, as the
  text's `sdiag output at`.
- The versions read are those with a real capture (slurm_json.READ_DIAG); for any other
  `slurm.rest_api_version` a run fails naming it rather than storing a row of NULLs.
- `fetch` is the only I/O, outside the write lock, through the shared client (collectors/slurmrestd.py).
"""

from __future__ import annotations

from datetime import datetime

from slurmscope.collectors import sdiag, slurm_json, slurmrestd

from slurmscope.config import Config

KIND = "sdiag_rest"
TABLES = sdiag.TABLES
parse = sdiag.parse


def fetch(cfg: Config, window: tuple[datetime | None, datetime | None]) -> bytes:
    """slurmctld's scheduler statistics, as slurmrestd's JSON."""
    version = slurmrestd.api_version(cfg, slurm_json.READ_DIAG, "diag")
    return slurmrestd.get(cfg, f"/slurm/{version}/diag")
