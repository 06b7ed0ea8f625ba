"""squeue: a snapshot of every job the controller knows, with pending reasons, arrays and dependencies.

The live call lists all partitions (`--all`), one line per array task (`--array`) and every state
(`--states=all`) with `-o` fields ended by the unit separator 0x1F; the job name (`%j`), the only text a
user types, is last so a 0x1F inside it cannot shift the other columns. Recorded captures with other
`-o`/`-O` strings are read with `ingest squeue --format` (docs/collectors.md lists them).
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import (
    NULL_WORDS,
    gpu_count,
    parse_duration,
    parse_slurm_time,
    split_lines,
)
from slurmscope.collectors.sinfo import Field, LineFormat, is_blank, is_header, parse_format, split_line

from slurmscope.config import Config

KIND = "squeue"
TABLES = {"pending_jobs": TableSpec("pending_jobs", ("cluster", "snapshot_time", "job_id"))}

US = "\x1f"
LIVE_LETTERS = "iAFKuaPqTQVSDCblErj"
LIVE_FORMAT = US.join(f"%{c}" for c in LIVE_LETTERS)

PENDING_JOBS_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "job_id": pl.String,
    "job_id_raw": pl.Int64,
    "array_job_id": pl.Int64,
    "array_task_id": pl.String,
    "name": pl.String,
    "user": pl.String,
    "account": pl.String,
    "partition": pl.String,
    "qos": pl.String,
    "state": pl.String,
    "reason": pl.String,
    "priority": pl.Int64,
    "submit_time": pl.Datetime("us", "UTC"),
    "start_time": pl.Datetime("us", "UTC"),
    "nodes": pl.Int32,
    "cpus": pl.Int32,
    "gpus": pl.Int32,
    "tres_per_node": pl.String,
    "timelimit_seconds": pl.Int64,
    "dependency": pl.String,
}


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live squeue call (documented in docs/collectors.md)."""
    return [cfg.slurm_command("squeue"), "--all", "--array", "--noheader", "--states=all",
            f"--format={LIVE_FORMAT}"]


LETTERS = {
    "i": "job_id", "A": "job_id_raw", "F": "array_job_id", "K": "array_task_id", "u": "user", "a": "account",
    "P": "partition", "q": "qos", "T": "state", "t": "state", "Q": "priority", "V": "submit_time",
    "S": "start_time", "D": "nodes", "C": "cpus", "b": "tres_per_node", "l": "timelimit", "E": "dependency",
    "r": "reason", "R": "reason_list", "j": "name", "k": "comment",
}
LONG_NAMES = {
    "jobarrayid": "job_id", "jobid": "job_id_raw", "arrayjobid": "array_job_id", "arraytaskid": "array_task_id",
    "username": "user", "user": "user", "account": "account", "partition": "partition", "qos": "qos",
    "state": "state", "statecompact": "state", "priority": "priority", "prioritylong": "priority",
    "submittime": "submit_time", "starttime": "start_time", "numnodes": "nodes", "numcpus": "cpus",
    "tres-per-node": "tres_per_node", "tres-alloc": "tres_alloc", "timelimit": "timelimit",
    "dependency": "dependency", "reason": "reason", "reasonlist": "reason_list", "name": "name",
    "comment": "comment",
}
FREE_TEXT = frozenset({"name", "comment"})

# %t / StateCompact codes (man squeue, JOB STATE CODES).
COMPACT_STATES = {
    "BF": "BOOT_FAIL", "CA": "CANCELLED", "CD": "COMPLETED", "CF": "CONFIGURING", "CG": "COMPLETING",
    "DL": "DEADLINE", "F": "FAILED", "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "PD": "PENDING",
    "PR": "PREEMPTED", "R": "RUNNING", "RD": "RESV_DEL_HOLD", "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD",
    "RQ": "REQUEUED", "RS": "RESIZING", "RV": "REVOKED", "SI": "SIGNALING", "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT", "ST": "STOPPED", "S": "SUSPENDED", "TO": "TIMEOUT",
}
_JOB_ID = re.compile(r"^(\d+)(?:_(\d+|\[[^\]]*\])|\+(\d+))?$")
_STATE = re.compile(r"^[A-Z_]+$")


def line_format(fmt: str | None, delimiter: str | None = None) -> LineFormat:
    """LineFormat of `fmt` (None = live). Raises ValueError when no column identifies the job."""
    lf = parse_format(fmt or LIVE_FORMAT, LETTERS, LONG_NAMES, FREE_TEXT)
    if delimiter:
        lf = LineFormat(tuple(Field(f.name, delimiter if i < len(lf.fields) - 1 else None)
                              for i, f in enumerate(lf.fields)), lf.prefix, lf.trailer, lf.free_text)
    if not set(lf.names) & {"job_id", "job_id_raw"}:
        raise ValueError(
            f"squeue format {fmt!r} has no job id column (%i/%A, JobID/JobArrayID); pending_jobs is keyed by "
            "job id (see docs/collectors.md for the declined formats)"
        )
    return lf


def _null(s: str | None) -> str | None:
    if s is None:
        return None
    s = s.strip()
    return None if s in NULL_WORDS else s


def _int(s: str | None, what: str) -> int | None:
    s = _null(s)
    if s is None:
        return None
    if not re.fullmatch(r"-?\d+", s):
        raise ValueError(f"{what} is not an integer: {s!r}")
    return int(s)


def _row(v: dict[str, str], cluster: str, snapshot_time: datetime, tz: ZoneInfo) -> dict:
    """One pending_jobs row; raises ValueError (the quarantine reason) for values Slurm never prints."""
    job_id = _null(v.get("job_id"))
    raw = _int(v.get("job_id_raw"), "job id")
    if job_id is None:
        if raw is None:
            raise ValueError("no job id")
        job_id = str(raw)
    m = _JOB_ID.match(job_id)
    if not m:
        raise ValueError(f"not a job id: {job_id!r}")
    array_job_id = _int(v.get("array_job_id"), "array job id")
    task = _null(v.get("array_task_id"))
    if m.group(2) is not None:
        array_job_id = array_job_id if array_job_id is not None else int(m.group(1))
        task = m.group(2)
    elif task is not None and not task.startswith("[") and not task.isdigit():
        task = f"[{task}]"  # %K prints a pending range without brackets: same shape as jobs.array_task_id
    if raw is None and m.group(2) is None and m.group(3) is None:
        raw = int(m.group(1))
    if task is None:
        array_job_id = None  # %F prints the job's own id for a job that is not an array task
    state = _null(v.get("state"))
    if state is not None:
        state = COMPACT_STATES.get(state, state.upper())
        if not _STATE.match(state):
            raise ValueError(f"not a job state: {state!r}")
    reason = _null(v.get("reason"))
    if reason is None and v.get("reason_list") is not None:
        rl = v["reason_list"].strip()
        if rl.startswith("(") and rl.endswith(")"):
            reason = _null(rl[1:-1])
    nodes = _int(v.get("nodes"), "node count")
    cpus = _int(v.get("cpus"), "CPU count")
    tpn = _null(v.get("tres_per_node"))
    gpus: int | None = None
    if tpn is not None:
        per_node, _t, _m = gpu_count(tpn)
        gpus = per_node * (nodes or 1)
    elif _null(v.get("tres_alloc")) is not None:
        gpus = gpu_count(v["tres_alloc"])[0]
    elif "tres_per_node" in v or "tres_alloc" in v:
        gpus = 0
    return {
        "cluster": cluster,
        "snapshot_time": snapshot_time,
        "job_id": job_id,
        "job_id_raw": raw,
        "array_job_id": array_job_id,
        "array_task_id": task,
        "name": v.get("name"),
        "user": _null(v.get("user")),
        "account": _null(v.get("account")),
        "partition": _null(v.get("partition")),
        "qos": _null(v.get("qos")),
        "state": state,
        "reason": reason,
        "priority": _int(v.get("priority"), "priority"),
        "submit_time": parse_slurm_time(v.get("submit_time"), tz),
        "start_time": parse_slurm_time(v.get("start_time"), tz),
        "nodes": nodes,
        "cpus": cpus,
        "gpus": gpus,
        "tres_per_node": tpn,
        "timelimit_seconds": parse_duration(v.get("timelimit")),
        "dependency": _null(v.get("dependency")),
    }


def check_input(data: bytes, fmt: str | None, delimiter: str | None) -> str | None:
    """Why `ingest` cannot read this input as asked (an unusable --format), or None."""
    try:
        line_format(fmt, delimiter)
    except ValueError as exc:
        return str(exc)
    return None


def parse(data: bytes, *, cluster: str, snapshot_time: datetime, tz: ZoneInfo, fmt: str | None = None,
          delimiter: str | None = None, source: str = "") -> Parsed:
    """squeue output -> pending_jobs rows (one per job id; `-P` repeats collapse into one)."""
    lf = line_format(fmt, delimiter)
    rows: dict[str, dict] = {}
    bad: list[dict] = []
    first = True
    for line_no, text, raw in split_lines(data):
        if is_blank(text):
            continue
        values, reason = split_line(text, lf)
        if values is not None and first and is_header(values, ("job_id", "job_id_raw")):
            first = False  # a header line of column titles (squeue without --noheader)
            continue
        first = False
        if values is not None:
            try:
                row = _row(values, cluster, snapshot_time, tz)
            except ValueError as exc:
                reason = str(exc)
            else:
                rows[row["job_id"]] = row
                continue
        bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"squeue: {reason}"})
    df = pl.DataFrame(list(rows.values()), schema=PENDING_JOBS_SCHEMA, orient="row") if rows else \
        pl.DataFrame(schema=PENDING_JOBS_SCHEMA)
    return Parsed(tables={"pending_jobs": df}, quarantine=quarantine_frame(bad))
