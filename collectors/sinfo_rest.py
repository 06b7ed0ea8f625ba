"""slurmrestd as the live source of `node_states` (`slurm.source = "rest"`), instead of the sinfo CLI.

Why it is shaped like this:
- `GET /slurm/<version>/nodes` answers what 22.05's `sinfo --json` prints (src/sinfo/data.c calls the same
  openapi handler; the test bed's two captures are identical), so the rows come from sinfo's own parser
  (sinfo.parse, which reads JSON through `sinfo.json_values`: each node gives the values of the live
  `--Node --Format` line) into the same table with the same key, and equal the CLI rows of the same
  moment (tests/integration/test_rest_live.py).
- Partitions feed node_states through the node: each node lists its partitions (slurmctld fills the list
  from its partition table before answering, `slurm_populate_node_partitions`), one row per node and
  partition as `sinfo --Node` prints, so no second call to `/partitions` is needed.
- The node is keyed by its NodeName (`name`); its host name (`hostname`) is carried beside it as
  `sinfo.NODE_HOST`, since node_states has no host column.
- `fetch` is the only I/O, outside the write lock, through the shared client (collectors/slurmrestd.py).
"""

from __future__ import annotations

from datetime import datetime

from slurmscope.collectors import sinfo, slurm_json, slurmrestd

from slurmscope.config import Config

KIND = "sinfo_rest"
TABLES = sinfo.TABLES
parse = sinfo.parse


def fetch(cfg: Config, window: tuple[datetime | None, datetime | None]) -> bytes:
    """Every node, as slurmrestd's JSON."""
    version = slurmrestd.api_version(cfg, slurm_json.READ_NODES, "nodes")
    return slurmrestd.get(cfg, f"/slurm/{version}/nodes")
