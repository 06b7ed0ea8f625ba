"""sacctmgr show event: node DOWN/DRAIN history with reasons, from the accounting database.

sinfo only shows a node's current state; slurmdbd keeps every state change with its reason, who set
it and when it ended, which the reliability pipeline turns into downtime. The live call asks for a time
window (`Start=`/`End=`, UTC) with `--parsable2` and an explicit `format=`; `Reason` is the only free
text, so a `|` typed into a reason is given back to it (fields before it from the left, after it from
the right).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import parse_slurm_time, split_fields, split_lines
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.config import Config
from slurmscope.hostlist import expand_hostlist

KIND = "events"
TABLES = {"node_events": TableSpec("node_events", ("cluster", "node", "time_start"))}

FIELDS = ("Cluster", "ClusterNodes", "NodeName", "TimeStart", "TimeEnd", "State", "Reason", "User")

_COLUMNS = {
    "cluster": "cluster",
    "clusternodes": "cluster_nodes",
    "nodename": "node",
    "node": "node",
    "timestart": "time_start",
    "start": "time_start",
    "timeend": "time_end",
    "end": "time_end",
    "state": "state",
    "reason": "reason",
    "user": "user",
    "event": "event",
    "eventraw": "event_raw",
    "tres": "tres",
    "duration": "duration",
}

NODE_EVENTS_SCHEMA = {
    "cluster": pl.String,
    "node": pl.String,
    "time_start": pl.Datetime("us", "UTC"),
    "time_end": pl.Datetime("us", "UTC"),
    "state": pl.String,
    "reason": pl.String,
    "reason_user": pl.String,
    "event_type": pl.String,
    "tres": pl.String,
}


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live sacctmgr call for events overlapping [start, end) (UTC; runner sets TZ=UTC)."""
    argv = [cfg.slurm_command("sacctmgr"), "--parsable2", "show", "event"]
    if start is not None:
        argv.append(f"Start={_iso(start)}")
    if end is not None:
        argv.append(f"End={_iso(end)}")
    if cfg.slurm_cluster_args():  # sacctmgr has no -M: its own filter names the cluster
        argv.append(f"Clusters={cfg.cluster}")
    argv.append("format=" + ",".join(FIELDS))
    return argv


def _names(fields: list[str]) -> list[str]:
    return [_COLUMNS.get(re.sub(r"\s+", "", f).lower(), re.sub(r"\s+", "", f).lower()) for f in fields]


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
    """`sacctmgr -P show event` output (header kept, or field list in `fmt`) -> node_events rows.

    A `Cluster` column wins over `cluster`. Cluster-wide events (no NodeName) get node '' and
    event_type 'cluster'. `TimeEnd` of `Unknown` means the event is still open (NULL). A NodeName
    printed as a hostlist gives one row per node, so downtime can be summed per node.
    """
    delim = delimiter or "|"
    names = _names(fmt.split(",")) if fmt else None
    rows: dict[tuple[str, str, datetime], dict] = {}
    bad: list[dict] = []
    header_done = False
    for line_no, text, raw in split_lines(data):
        if is_blank(text):
            continue
        parts = _names(text.split(delim))
        if not header_done and "time_start" in parts and ("node" in parts or "state" in parts):
            names = parts
            header_done = True
            continue
        cols = names or _names(list(FIELDS))
        if "time_start" not in cols:
            bad.append(
                {
                    "line_no": line_no,
                    "raw_text": text,
                    "raw_bytes": raw,
                    "reason": "events: no TimeStart column in the header or --format",
                }
            )
            continue
        free = cols.index("reason") if "reason" in cols else None
        values, reason = split_fields(text, delim, len(cols), free_text=free)
        if values is None:
            bad.append(
                {"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"events: {reason}"}
            )
            continue
        v = dict(zip(cols, values, strict=True))
        try:
            start = parse_slurm_time(v["time_start"], tz)
            end = parse_slurm_time(v.get("time_end"), tz)
        except ValueError as exc:
            bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"events: {exc}"})
            continue
        if start is None:
            bad.append(
                {
                    "line_no": line_no,
                    "raw_text": text,
                    "raw_bytes": raw,
                    "reason": "events: event without a start time",
                }
            )
            continue
        node = (v.get("node") or "").strip()
        user = (v.get("user") or "").strip()
        user = re.sub(r"\(\d+\)$", "", user) or None
        event = (v.get("event") or "").strip().lower()
        row = {
            "cluster": (v.get("cluster") or "").strip() or cluster,
            "node": node,
            "time_start": start,
            "time_end": end,
            "state": (v.get("state") or "").strip() or None,
            "reason": (v.get("reason") or "").strip() or None,
            "reason_user": user,
            "event_type": event if event in ("node", "cluster") else ("node" if node else "cluster"),
            "tres": (v.get("tres") or "").strip() or None,
        }
        try:
            nodes = expand_hostlist(node) if node else [""]
        except ValueError:
            nodes = [node]
        for n in nodes or [""]:
            rows[(row["cluster"], n, start)] = dict(row, node=n)
    df = (
        pl.DataFrame(list(rows.values()), schema=NODE_EVENTS_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=NODE_EVENTS_SCHEMA)
    )
    return Parsed(tables={"node_events": df}, quarantine=quarantine_frame(bad))
