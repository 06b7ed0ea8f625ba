"""sdiag: scheduler counters (main and backfill cycles, job counts) as one raw snapshot per run.

sdiag counters reset at midnight UTC and when slurmctld restarts, so this parser stores each snapshot as
printed (plus the whole text in raw_text) and leaves deltas to the pipelines. The text format has been
stable since Slurm 17.x with additions (RPC tables, "Main scheduler exit", "Backfill exit", pending RPC
lists); labels are matched per section because "Last cycle" and "Total cycles" appear in both the main
and the backfill section. `sdiag --json` is declined (docs/collectors.md): the live collector uses text.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import split_lines
from slurmscope.collectors.slurm_format import is_blank, out_of_range

from slurmscope.config import Config

KIND = "sdiag"
TABLES = {"sched_stats": TableSpec("sched_stats", ("cluster", "snapshot_time"))}

_HEADER_FIELDS = {
    "server thread count": "server_thread_count",
    "agent queue size": "agent_queue_size",
    "jobs submitted": "jobs_submitted",
    "jobs started": "jobs_started",
    "jobs completed": "jobs_completed",
    "jobs canceled": "jobs_canceled",
    "jobs failed": "jobs_failed",
    "jobs pending": "jobs_pending",
    "jobs running": "jobs_running",
}
_MAIN_FIELDS = {
    "last cycle": "main_last_cycle_us",
    "max cycle": "main_max_cycle_us",
    "total cycles": "main_total_cycles",
    "mean cycle": "main_mean_cycle_us",
    "mean depth cycle": "main_mean_depth",
    "cycles per minute": "main_cycles_per_minute",
    "last queue length": "main_last_queue_length",
}
_BF_FIELDS = {
    "total backfilled jobs (since last slurm start)": "bf_backfilled_jobs",
    "total backfilled jobs (since last stats cycle start)": "bf_backfilled_jobs_since_reset",
    "total backfilled heterogeneous job components": "bf_backfilled_het_jobs",
    "total cycles": "bf_total_cycles",
    "last cycle": "bf_last_cycle_us",
    "max cycle": "bf_max_cycle_us",
    "mean cycle": "bf_mean_cycle_us",
    "last depth cycle": "bf_last_depth",
    "last depth cycle (try sched)": "bf_last_depth_try",
    "depth mean": "bf_depth_mean",
    "depth mean (try depth)": "bf_depth_mean_try",
    "last queue length": "bf_last_queue_length",
    "queue length mean": "bf_queue_length_mean",
    "last table size": "bf_table_size",
    "mean table size": "bf_table_size_mean",
}
_INT_COLUMNS = sorted(set(_HEADER_FIELDS.values()) | set(_MAIN_FIELDS.values()) | set(_BF_FIELDS.values()))

SCHED_STATS_SCHEMA: dict[str, pl.DataType] = {
    "cluster": pl.String(),
    "snapshot_time": pl.Datetime("us", "UTC"),
    "data_since": pl.Datetime("us", "UTC"),
    **{
        c: (pl.Int32() if c in ("server_thread_count", "agent_queue_size") else pl.Int64())
        for c in _INT_COLUMNS
    },
    "bf_last_cycle_when": pl.Datetime("us", "UTC"),
    "raw_text": pl.String(),
}

# sdiag prints ctime-style dates ("Wed Apr 12 11:04:01 2017"), since 20.x followed by "(epoch)".
_CTIME = re.compile(r"^\w{3}\s+(\w{3})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})\s+(\d{4})(?:\s+\((\d+)\))?$")
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], start=1
    )
}
_KV = re.compile(r"^\s*([^:]+?):\s*(.*?)\s*$")
_SECTIONS = (
    ("main schedule statistics", "main"),
    ("main scheduler exit", "other"),
    ("backfilling stats", "bf"),
    ("backfill exit", "other"),
    ("remote procedure call statistics", "rpc"),
    ("pending rpc statistics", "rpc"),
    ("latency for", "other"),
)


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live sdiag call (plain text; documented in docs/collectors.md)."""
    return [cfg.slurm_command("sdiag"), *cfg.slurm_cluster_args()]


def parse_ctime(s: str, tz: ZoneInfo) -> datetime | None:
    """`Wed Apr 12 11:04:01 2017 (1491995041)` -> UTC; the epoch in parentheses wins when printed."""
    m = _CTIME.match(s.strip())
    if not m:
        return None
    mon, day, hh, mi, ss, year, epoch = m.groups()
    if epoch:
        try:
            return datetime.fromtimestamp(int(epoch), UTC)
        except (
            ValueError,
            OverflowError,
            OSError,
        ):  # beyond year 9999 or time_t: not a date (atheris found it)
            return None
    if mon not in _MONTHS:
        return None
    try:
        naive = datetime(int(year), _MONTHS[mon], int(day), int(hh), int(mi), int(ss))
    except ValueError:
        return None
    return naive.replace(tzinfo=tz).astimezone(UTC)


def snapshot_from(data: bytes, tz: ZoneInfo) -> datetime | None:
    """The time sdiag prints for itself (`sdiag output at ... (epoch)`), or None: ingest's snapshot time."""
    for _no, text, _raw in split_lines(data[:4096]):
        low = text.strip().lower()
        if low.startswith("sdiag output at"):
            return parse_ctime(text.strip()[len("sdiag output at") :], tz)
    return None


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
    """sdiag text -> one sched_stats row (snapshot time from "sdiag output at", else the given time).

    Every line is kept in raw_text; a counter line whose value is not a number, a date that cannot be
    read, or input with no sdiag counter at all goes to quarantine.
    """
    lines = split_lines(data)
    row: dict = {c: None for c in SCHED_STATS_SCHEMA}
    section = "header"
    bad: list[dict] = []
    found = 0
    when = snapshot_time
    for line_no, text, raw in lines:
        stripped = text.strip()
        if is_blank(text) or (stripped and set(stripped) == {"*"}):
            continue
        low = stripped.lower()
        sec = next((name for prefix, name in _SECTIONS if low.startswith(prefix)), None)
        if sec is not None:
            section = sec
            found += 1
            continue
        if section in ("rpc", "other"):
            continue  # RPC tables and exit-reason counters stay in raw_text
        if low.startswith("sdiag output at"):
            t = parse_ctime(stripped[len("sdiag output at") :], tz)
            if t is None:
                bad.append(
                    {"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": "sdiag: bad date"}
                )
            else:
                when = t
                found += 1
            continue
        if low.startswith("data since"):
            t = parse_ctime(stripped[len("data since") :], tz)
            if t is None:
                bad.append(
                    {"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": "sdiag: bad date"}
                )
            else:
                row["data_since"] = t
                found += 1
            continue
        m = _KV.match(stripped)
        if not m:
            bad.append(
                {
                    "line_no": line_no,
                    "raw_text": text,
                    "raw_bytes": raw,
                    "reason": "sdiag: not a 'label: value' line",
                }
            )
            continue
        label, value = m.group(1).strip().lower(), m.group(2)
        table = {"header": _HEADER_FIELDS, "main": _MAIN_FIELDS, "bf": _BF_FIELDS}[section]
        if section == "bf" and label == "last cycle when":
            found += 1
            if value.strip() not in ("N/A", ""):
                t = parse_ctime(value, tz)
                if t is None:
                    bad.append(
                        {"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": "sdiag: bad date"}
                    )
                row["bf_last_cycle_when"] = t
            continue
        col = table.get(label)
        if col is None:
            v = value.strip()
            if re.fullmatch(r"-?\d+", v) or parse_ctime(v, tz) is not None:
                found += 1  # a counter or time this schema has no column for (kept in raw_text)
                continue
            bad.append(
                {
                    "line_no": line_no,
                    "raw_text": text,
                    "raw_bytes": raw,
                    "reason": f"sdiag: unknown line in {section} section",
                }
            )
            continue
        if not re.fullmatch(r"-?\d+", value):
            bad.append(
                {
                    "line_no": line_no,
                    "raw_text": text,
                    "raw_bytes": raw,
                    "reason": f"sdiag: {label!r} is not an integer",
                }
            )
            continue
        problem = out_of_range({col: int(value)}, SCHED_STATS_SCHEMA)
        if problem:
            bad.append(
                {"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"sdiag: {problem}"}
            )
            continue
        row[col] = int(value)
        found += 1
    nonblank = [(n, t, r) for n, t, r in lines if not is_blank(t)]
    if found == 0:
        bad = [
            {"line_no": n, "raw_text": t, "raw_bytes": r, "reason": "sdiag: not sdiag output"}
            for n, t, r in nonblank
        ]
        return Parsed(
            tables={"sched_stats": pl.DataFrame(schema=SCHED_STATS_SCHEMA)}, quarantine=quarantine_frame(bad)
        )
    row["cluster"] = cluster
    row["snapshot_time"] = when
    row["raw_text"] = data.decode("utf-8", errors="replace")
    df = pl.DataFrame([row], schema=SCHED_STATS_SCHEMA, orient="row")
    return Parsed(tables={"sched_stats": df}, quarantine=quarantine_frame(bad))
