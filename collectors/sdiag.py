"""sdiag: scheduler counters (main and backfill cycles, job counts) as one raw snapshot per run.

sdiag counters reset at midnight UTC and when slurmctld restarts, so this parser stores each snapshot as
printed (plus the whole text in raw_text) and leaves deltas to the pipelines. The text format has been
stable since Slurm 17.x with additions (RPC tables, "Main scheduler exit", "Backfill exit", pending RPC
lists); labels are matched per section because "Last cycle" and "Total cycles" appear in both the main
and the backfill section. Slurm's JSON of the statistics (`sdiag --json` of 23.02+, slurmrestd
`/slurm/<version>/diag`) is recognised by its leading `{` and gives the row the text of the same moment
gives (`json_row`), for the data parser versions in slurm_json.READ_DIAG.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors import slurm_json
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
    """The time sdiag prints for itself (`sdiag output at ... (epoch)`, JSON `req_time`), or None: ingest's
    snapshot time."""
    if slurm_json.is_json(data[:4096]):
        doc = _document(data)
        t = slurm_json.num(((doc or {}).get("statistics") or {}).get("req_time"))
        return _epoch(t)
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
    read, or input with no sdiag counter at all goes to quarantine. Slurm's JSON is read by `json_row`.
    """
    if slurm_json.is_json(data[:4096]):
        return _parse_json(data, cluster=cluster, snapshot_time=snapshot_time)
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


# ------------------------------------------------------------------------------------------- JSON

JSON_CAPTURE = "the text form (sdiag)"
# sched_stats column -> the statistics member it is, where the two mean the same printed number.
_JSON_SAME = {
    "server_thread_count": "server_thread_count",
    "agent_queue_size": "agent_queue_size",
    "jobs_submitted": "jobs_submitted",
    "jobs_started": "jobs_started",
    "jobs_completed": "jobs_completed",
    "jobs_canceled": "jobs_canceled",
    "jobs_failed": "jobs_failed",
    "jobs_pending": "jobs_pending",
    "jobs_running": "jobs_running",
    "main_last_cycle_us": "schedule_cycle_last",
    "main_max_cycle_us": "schedule_cycle_max",
    "main_total_cycles": "schedule_cycle_total",
    "main_last_queue_length": "schedule_queue_length",
    "bf_backfilled_jobs": "bf_backfilled_jobs",
    "bf_backfilled_jobs_since_reset": "bf_last_backfilled_jobs",
    "bf_backfilled_het_jobs": "bf_backfilled_het_jobs",
    "bf_total_cycles": "bf_cycle_counter",
    "bf_last_cycle_us": "bf_cycle_last",
    "bf_max_cycle_us": "bf_cycle_max",
    "bf_last_depth": "bf_last_depth",
    "bf_last_depth_try": "bf_last_depth_try",
    "bf_last_queue_length": "bf_queue_len",
    "bf_table_size": "bf_table_size",
}
# Means sdiag prints only once a cycle ran (sum / counter); the JSON prints 0 before that.
_JSON_MEANS = {
    "main_mean_cycle_us": ("schedule_cycle_mean", "schedule_cycle_total"),
    "main_mean_depth": ("schedule_cycle_mean_depth", "schedule_cycle_total"),
    "bf_mean_cycle_us": ("bf_cycle_mean", "bf_cycle_counter"),
    "bf_depth_mean": ("bf_depth_mean", "bf_cycle_counter"),
    "bf_depth_mean_try": ("bf_depth_mean_try", "bf_cycle_counter"),
    "bf_queue_length_mean": ("bf_queue_len_mean", "bf_cycle_counter"),
}
# v0.0.39 to v0.0.41 print the backfill queue length mean as `bf_table_size_mean` (parsers.c maps the
# name to STATS_MSG_BF_QUEUE_LEN_MEAN: 23.02.4 v0.0.39 line 5164, 24.05.5 v0.0.41 line 7329; rivosinc's
# 23.02.4 capture shows 3371 for both with a table size of 65). v0.0.41 also prints the sum, from which
# the mean is computed as sdiag does; v0.0.39 and v0.0.40 skip the sum, so the mean is unknown there.
_TABLE_SIZE_MEAN_WRONG = frozenset({"v0.0.39", "v0.0.40", "v0.0.41"})


def _epoch(t) -> datetime | None:
    if t is None or t == float("inf") or t <= 0:
        return None
    try:
        return datetime.fromtimestamp(int(t), UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _document(data: bytes) -> dict | None:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def json_row(stats: dict, version: str | None) -> dict:
    """The sched_stats values sdiag's text prints for one JSON `statistics` block.

    The text's arithmetic (src/sdiag/sdiag.c `_print_stats`, 22.05.8): means are sum / counter, printed
    only when the counter is above 0 (the JSON prints 0 before, so those are NULL as in the text);
    cycles per minute is counter / ((req_time - req_time_start) / 60), printed only past 60 s (v0.0.41
    prints it from 60 s on, so it is recomputed here with sdiag's rule); `Last cycle when` is N/A at 0.
    Fields a version does not print are NULL: v0.0.38 has no `bf_last_depth`/`bf_last_depth_try`, the
    v0.0.39 and v0.0.40 captures no `bf_cycle_max`.
    """
    row: dict = {c: None for c in SCHED_STATS_SCHEMA}

    def n(key: str):
        v = slurm_json.num(stats.get(key))
        return None if v is None or v == float("inf") else int(v)

    for col, key in _JSON_SAME.items():
        row[col] = n(key)
    for col, (key, counter) in _JSON_MEANS.items():
        row[col] = n(key) if (n(counter) or 0) > 0 else None
    now, since = n("req_time"), n("req_time_start")
    if now is not None and since is not None and now - since > 60 and n("schedule_cycle_total") is not None:
        row["main_cycles_per_minute"] = n("schedule_cycle_total") // ((now - since) // 60)
    counter = n("bf_cycle_counter") or 0
    if counter > 0:
        if version not in _TABLE_SIZE_MEAN_WRONG:
            row["bf_table_size_mean"] = n("bf_table_size_mean")
        elif n("bf_table_size_sum") is not None:
            row["bf_table_size_mean"] = n("bf_table_size_sum") // counter
    row["bf_last_cycle_when"] = _epoch(n("bf_when_last_cycle"))
    row["data_since"] = _epoch(since)
    row["snapshot_time"] = _epoch(now)
    return row


def _parse_json(data: bytes, *, cluster: str, snapshot_time: datetime) -> Parsed:
    """One sched_stats row from Slurm's JSON, or one quarantine line saying why the document is declined."""
    empty = {"sched_stats": pl.DataFrame(schema=SCHED_STATS_SCHEMA)}

    def declined(why: str) -> Parsed:
        return Parsed(tables=empty, quarantine=slurm_json.every_line(data, f"sdiag: {why}"))

    doc = _document(data)
    if doc is None:
        return declined("not Slurm JSON: not one JSON object")
    problem = json_problem(doc)
    if problem:
        return declined(problem)
    row = json_row(doc["statistics"], slurm_json.version(doc.get("meta")))
    problem = out_of_range({k: v for k, v in row.items() if isinstance(v, int)}, SCHED_STATS_SCHEMA)
    if problem:
        return declined(problem)
    row["cluster"] = cluster
    row["snapshot_time"] = row["snapshot_time"] or snapshot_time
    row["raw_text"] = data.decode("utf-8", errors="replace")
    return Parsed(tables={"sched_stats": pl.DataFrame([row], schema=SCHED_STATS_SCHEMA, orient="row")})


def json_problem(doc: dict) -> str | None:
    """Why a JSON document cannot be read as statistics (no meta, a declined version, no statistics)."""
    if not isinstance(doc.get("meta"), dict):
        return "Slurm JSON without a meta member: its data parser version is unknown"
    v = slurm_json.version(doc["meta"])
    if v is None:
        return f"Slurm JSON whose meta names no data parser version; capture {JSON_CAPTURE} instead"
    problem = slurm_json.check_version(v, slurm_json.READ_DIAG, JSON_CAPTURE)
    if problem:
        return problem
    if not isinstance(doc.get("statistics"), dict):
        errors = doc.get("errors") or []
        why = "; ".join(str(e.get("error") or e) if isinstance(e, dict) else str(e) for e in errors)
        return "Slurm JSON without `statistics`" + (f": Slurm reported {why}" if why else "")
    return None


def check_input(data: bytes, fmt: str | None, delimiter: str | None) -> str | None:
    """Why `ingest` cannot read this input (a declined JSON version), or None."""
    if not slurm_json.is_json(data):
        return None
    problem = slurm_json.check_version(slurm_json.sniff_version(data), slurm_json.READ_DIAG, JSON_CAPTURE)
    if problem is None and b'"statistics"' in data and b'"meta"' not in data:
        problem = "Slurm JSON without a meta member: its data parser version is unknown"
    return problem
