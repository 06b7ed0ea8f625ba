"""scontrol ping: is each slurmctld (primary, backups) answering? One row per controller per snapshot."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import split_lines
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.config import Config

KIND = "ping"
TABLES = {"controller_pings": TableSpec("controller_pings", ("cluster", "snapshot_time", "host"))}

CONTROLLER_PINGS_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "host": pl.String,
    "role": pl.String,
    "up": pl.Boolean,
}

# "Slurmctld(primary) at ctl1 is UP", "Slurmctld(backup) at ctl2 is DOWN", "Slurmctld(backup1) at ..."
_PING = re.compile(r"^Slurmctld\(([A-Za-z]+)\d*(?:\[\d+\])?\) at (\S+) is (UP|DOWN)\b", re.IGNORECASE)


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live call (documented in docs/collectors.md)."""
    return [cfg.slurm_command("scontrol"), "ping"]


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
    """`scontrol ping` text -> controller_pings rows (role primary/backup, up true/false)."""
    rows: dict[str, dict] = {}
    bad: list[dict] = []
    for line_no, text, raw in split_lines(data):
        if is_blank(text):
            continue
        s = text.strip()
        m = _PING.match(s)
        if not m:
            bad.append(
                {
                    "line_no": line_no,
                    "raw_text": text,
                    "raw_bytes": raw,
                    "reason": "ping: not a 'Slurmctld(role) at host is UP|DOWN' line",
                }
            )
            continue
        role, host, status = m.groups()
        rows[host] = {
            "cluster": cluster,
            "snapshot_time": snapshot_time,
            "host": host,
            "role": role.lower(),
            "up": status.upper() == "UP",
        }
    df = (
        pl.DataFrame(list(rows.values()), schema=CONTROLLER_PINGS_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=CONTROLLER_PINGS_SCHEMA)
    )
    return Parsed(tables={"controller_pings": df}, quarantine=quarantine_frame(bad))
