"""scontrol show reservation: reservations (maintenance windows, dedicated nodes) with their GPUs.

Reservations take nodes out of the general pool; the utilisation and backfill pipelines need to know
which nodes and GPUs were held, and when. The live call uses `--oneliner` (one reservation per line);
recorded files in the default multi-line form (a `ReservationName=` line followed by indented lines)
parse the same way. `No reservations in the system` is Slurm's way of printing an empty list.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import gpu_count, parse_int, parse_slurm_time, split_lines
from slurmscope.collectors.slurm_format import is_blank, out_of_range

from slurmscope.config import Config

KIND = "reservations"
TABLES = {"reservations": TableSpec("reservations", ("cluster", "name", "start_time"))}

RESERVATIONS_SCHEMA = {
    "cluster": pl.String,
    "name": pl.String,
    "start_time": pl.Datetime("us", "UTC"),
    "end_time": pl.Datetime("us", "UTC"),
    "node_list": pl.String,
    "node_count": pl.Int32,
    "gpus": pl.Int32,
    "accounts": pl.String,
    "users": pl.String,
    "flags": pl.String,
    "state": pl.String,
    "tres": pl.String,
    "seen_at": pl.Datetime("us", "UTC"),
}

_EMPTY = re.compile(r"^No reservations in the system\.?$")
_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=(.*)$", re.S)
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live call (documented in docs/collectors.md)."""
    return [cfg.slurm_command("scontrol"), *cfg.slurm_cluster_args(), "show", "reservation", "--oneliner"]


def pairs(text: str) -> dict[str, str]:
    """`Key=value` tokens of scontrol output; a token without `Key=` continues the previous value."""
    out: dict[str, str] = {}
    last: str | None = None
    for tok in text.split():
        m = _KEY.match(tok)
        if m:
            last = m.group(1)
            out[last] = m.group(2)
        elif last is not None:
            out[last] += " " + tok
    return out


def _time(s: str | None, snapshot_time: datetime, tz: ZoneInfo) -> datetime | None:
    """A reservation time; a bare HH:MM:SS (Slurm's same-day form) is on the snapshot's local date."""
    if s is None:
        return None
    m = _CLOCK.match(s.strip())
    if m:
        day = snapshot_time.astimezone(tz).date()
        h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        return datetime(day.year, day.month, day.day, h, mi, sec, tzinfo=tz).astimezone(UTC)
    return parse_slurm_time(s, tz)


def _null(s: str | None) -> str | None:
    return None if s is None or s.strip() in ("", "(null)", "N/A") else s.strip()


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
    """Multi-line or `--oneliner` reservation output -> reservations rows."""
    records: list[list[tuple[int, str, bytes | None]]] = []
    bad: list[dict] = []
    for line_no, text, raw in split_lines(data):
        if is_blank(text):
            continue
        s = text.strip()
        if _EMPTY.match(s):
            continue
        if s.startswith("ReservationName="):
            records.append([(line_no, text, raw)])
        elif records and "=" in s:
            records[-1].append((line_no, text, raw))
        else:
            bad.append(
                {
                    "line_no": line_no,
                    "raw_text": text,
                    "raw_bytes": raw,
                    "reason": "reservations: line outside a ReservationName= record",
                }
            )
    rows: dict[tuple[str, datetime], dict] = {}
    for rec in records:
        kv = pairs(" ".join(t for _, t, _ in rec))
        reason = None
        try:
            start = _time(kv.get("StartTime"), snapshot_time, tz)
            end = _time(kv.get("EndTime"), snapshot_time, tz)
            node_count = parse_int(kv.get("NodeCnt"))
        except ValueError as exc:
            reason = str(exc)
        else:
            if start is None:
                reason = "no StartTime"
        name = (kv.get("ReservationName") or "").strip()
        if not name and reason is None:
            reason = "empty ReservationName"
        if reason is not None:
            bad.extend(
                {"line_no": n, "raw_text": t, "raw_bytes": r, "reason": f"reservations: {reason}"}
                for n, t, r in rec
            )
            continue
        tres = _null(kv.get("TRES"))
        row = {
            "cluster": cluster,
            "name": name,
            "start_time": start,
            "end_time": end,
            "node_list": _null(kv.get("Nodes")),
            "node_count": node_count,
            "gpus": gpu_count(tres)[0] if tres is not None else None,
            "accounts": _null(kv.get("Accounts")),
            "users": _null(kv.get("Users")),
            "flags": _null(kv.get("Flags")),
            "state": _null(kv.get("State")),
            "tres": tres,
            "seen_at": snapshot_time,
        }
        problem = out_of_range(row, RESERVATIONS_SCHEMA)
        if problem:
            bad.extend(
                {"line_no": n, "raw_text": t, "raw_bytes": r, "reason": f"reservations: {problem}"}
                for n, t, r in rec
            )
            continue
        rows[(name, start)] = row
    df = (
        pl.DataFrame(list(rows.values()), schema=RESERVATIONS_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=RESERVATIONS_SCHEMA)
    )
    return Parsed(
        tables={"reservations": df}, quarantine=quarantine_frame(sorted(bad, key=lambda r: r["line_no"]))
    )
