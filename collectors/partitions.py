"""scontrol show partition: each partition's settings as key/value rows per snapshot.

The cost pipeline needs TRESBillingWeights, which slurm.conf(5) sets per partition (`PartitionName=...
TRESBillingWeights=...`) and which `scontrol show config` therefore never prints; keeping every setting, as
the config collector does, lets an operator see when one changed. The live call uses `--oneliner` (one
partition per line); the default multi-line form (a `PartitionName=` line followed by indented lines)
parses the same way. Values may hold `=` (`TRES=cpu=64,mem=250G`), so a token is split at its first `=`;
`(null)` and an empty value are stored as NULL. `No partitions in the system` is Slurm's empty list.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import split_lines
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.config import Config

KIND = "partitions"
TABLES = {"slurm_partitions": TableSpec("slurm_partitions", ("cluster", "snapshot_time", "partition", "key"))}

PARTITIONS_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "partition": pl.String,
    "key": pl.String,
    "value": pl.String,
}

_EMPTY = re.compile(r"^No partitions in the system\.?$")
_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_/:.-]*)=(.*)$", re.S)


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live call (documented in docs/collectors.md)."""
    return [cfg.slurm_command("scontrol"), *cfg.slurm_cluster_args(), "show", "partition", "--oneliner"]


def _pairs(text: str) -> list[tuple[str, str]] | None:
    """`Key=value` tokens of one line; None when a token is not one (a value never holds a space here)."""
    out = []
    for tok in text.split():
        m = _KEY.match(tok)
        if not m:
            return None
        out.append((m.group(1), m.group(2)))
    return out


def parse(
    data: bytes,
    *,
    cluster: str,
    snapshot_time: datetime,
    tz: ZoneInfo,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
) -> Parsed:
    """`scontrol show partition [--oneliner]` text -> slurm_partitions rows (the snapshot is the run's time:
    scontrol prints none). A line of other tokens, or settings outside a PartitionName record (before any,
    or indented under a line that was quarantined), is quarantined."""
    rows: dict[tuple[str, str], str | None] = {}
    bad: list[dict] = []
    current: str | None = None

    def quarantine(line_no: int, text: str, raw: bytes | None, reason: str) -> None:
        bad.append(
            {"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"partitions: {reason}"}
        )

    for line_no, text, raw in split_lines(data):
        if is_blank(text) or _EMPTY.match(text.strip()):
            continue
        pairs = _pairs(text)
        if not pairs:
            quarantine(line_no, text, raw, "not 'Key=value' tokens")
            if text[:1] not in (" ", "\t"):
                current = None  # the lines indented under a bad record line are not the previous record's
            continue
        if pairs[0][0] == "PartitionName":
            current = pairs[0][1].strip() or None
            if current is None:
                quarantine(line_no, text, raw, "empty PartitionName")
                continue
            pairs = pairs[1:]
        elif current is None or text[:1] not in (" ", "\t"):
            quarantine(line_no, text, raw, "settings outside a PartitionName record")
            continue
        for key, value in pairs:
            v = value.strip()
            rows[(current, key)] = None if v in ("", "(null)") else v
    df = pl.DataFrame(
        {
            "cluster": [cluster] * len(rows),
            "snapshot_time": [snapshot_time] * len(rows),
            "partition": [p for p, _ in rows],
            "key": [k for _, k in rows],
            "value": list(rows.values()),
        },
        schema=PARTITIONS_SCHEMA,
    )
    return Parsed(tables={"slurm_partitions": df}, quarantine=quarantine_frame(bad))
