"""scontrol show config: the controller's settings as key/value rows per snapshot.

Pipelines need a few of them (PriorityDecayHalfLife, PriorityUsageResetPeriod, TRESBillingWeights are
per partition elsewhere, PriorityWeight*), and keeping all of them lets an operator see when a setting
changed. Plugin sections after the main list ("Cgroup Support Configuration:", "MPI Plugins
Configuration:", ...) prefix their keys with the section title so equal names cannot collide. The trailing
"Slurmctld(primary) at host is UP" lines are stored as `status:Slurmctld(primary)`.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import parse_slurm_time, split_lines
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.config import Config

KIND = "config"
TABLES = {"slurm_config": TableSpec("slurm_config", ("cluster", "snapshot_time", "key"))}

SLURM_CONFIG_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "key": pl.String,
    "value": pl.String,
}

_KV = re.compile(r"^([A-Za-z][\w.\-/()\[\] ]*?)\s*=\s?(.*)$")
_AS_OF = re.compile(r"^Configuration data as of (\S+)")
_SECTION = re.compile(r"^([A-Za-z][\w /-]*):\s*$")
_STATUS = re.compile(r"^(Slurmctld|Slurmdbd)\(([^)]*)\) at (\S+) is (\w+)")


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live call (documented in docs/collectors.md)."""
    return [cfg.slurm_command("scontrol"), *cfg.slurm_cluster_args(), "show", "config"]


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
    """`scontrol show config` text -> slurm_config rows; the "as of" time, when printed, is the snapshot."""
    rows: dict[str, str | None] = {}
    bad: list[dict] = []
    section = ""
    when = snapshot_time
    for line_no, text, raw in split_lines(data):
        if is_blank(text):
            continue
        s = text.strip()
        m = _AS_OF.match(s)
        if m:
            try:
                when = parse_slurm_time(m.group(1), tz) or snapshot_time
            except ValueError:
                bad.append(
                    {"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": "config: bad date"}
                )
            continue
        m = _STATUS.match(s)
        if m:
            rows[f"status:{m.group(1)}({m.group(2)})"] = f"{m.group(4)} at {m.group(3)}"
            continue
        m = _SECTION.match(s)
        if m and "=" not in s:
            section = m.group(1).strip()
            continue
        m = _KV.match(s)
        if m:
            key = m.group(1).strip()
            value = m.group(2).strip()
            rows[f"{section}:{key}" if section else key] = None if value in ("", "(null)") else value
            continue
        bad.append(
            {
                "line_no": line_no,
                "raw_text": text,
                "raw_bytes": raw,
                "reason": "config: not a 'Key = value' line",
            }
        )
    df = pl.DataFrame(
        {
            "cluster": [cluster] * len(rows),
            "snapshot_time": [when] * len(rows),
            "key": list(rows),
            "value": list(rows.values()),
        },
        schema=SLURM_CONFIG_SCHEMA,
    )
    return Parsed(tables={"slurm_config": df}, quarantine=quarantine_frame(bad))
