"""squeue: a snapshot of every job the controller knows, with pending reasons, arrays and dependencies.

The live call lists all partitions (`--all`), one line per array task (`--array`) and every state
(`--states=all`) with `-O` fields (size 0: never cut) ended by the unit separator 0x1F; the job name, the
only text a user types, is last so a 0x1F inside it cannot shift the other columns. `-O` because a GPU
request has four forms and `-o` has letters for one only (`%b`, tres-per-node): `--gpus` is tres-per-job,
`--gpus-per-task` tres-per-task, `--gpus-per-socket` tres-per-socket (squeue(1) of 22.05, "-O"). Recorded
captures with other `-o`/`-O` strings, the previous live line included (PREVIOUS_LIVE_FORMAT), are read
with `ingest squeue --format` (docs/collectors.md lists them). Slurm's JSON of the jobs (`squeue --json`,
slurmrestd `/slurm/<version>/jobs`) is recognised by its leading `{`, read as a stream, and each job gives
the values the live line prints for it (`json_values`), typed by `_row`.
"""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from typing import IO
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors import slurm_json
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import (
    duration_expr,
    gpu_count,
    parse_duration,
    parse_slurm_time,
    split_lines,
    time_expr,
)
from slurmscope.collectors.slurm_format import (
    LineFormat,
    fast_path,
    is_blank,
    is_header,
    out_of_range,
    parse_format,
    split_line,
)
from slurmscope.collectors.slurm_human import Layout, Table, find_table, parse_date_line, split_row

from slurmscope.config import Config
from slurmscope.slurm_states import JOB_STATE_CODES, NULL_WORDS

KIND = "squeue"
TABLES = {"pending_jobs": TableSpec("pending_jobs", ("cluster", "snapshot_time", "job_id"))}

US = "\x1f"
LIVE_FIELDS = (
    "JobArrayID",
    "JobID",
    "ArrayJobID",
    "ArrayTaskID",
    "UserName",
    "Account",
    "Partition",
    "QOS",
    "State",
    "PriorityLong",
    "SubmitTime",
    "StartTime",
    "NumNodes",
    "NumCPUs",
    "tres-per-node",
    "TimeLimit",
    "Dependency",
    "Reason",
    "NumTasks",
    "tres-per-job",
    "tres-per-task",
    "tres-per-socket",
    "Sockets",
)
# Size 0 after ':' = no padding, no truncation; the suffix after it is the separator. Name last.
LIVE_FORMAT = ",".join(f"{f}:{US}" for f in LIVE_FIELDS) + ",Name:"
PREVIOUS_LIVE_FORMAT = US.join(f"%{c}" for c in "iAFKuaPqTQVSDCblErj")
"""The live line up to this version (`-o`, no tres-per-job/task/socket): captures recorded with it are read
with `--format` set to it (tests/fixtures/slurm-22.05/squeue_*.argv)."""

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
    "tasks": pl.Int32,
    "sockets_per_node": pl.Int32,
    "tres_per_job": pl.String,
    "tres_per_task": pl.String,
    "tres_per_socket": pl.String,
}


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live squeue call (documented in docs/collectors.md)."""
    return [
        cfg.slurm_command("squeue"),
        *cfg.slurm_cluster_args(),
        "--all",
        "--array",
        "--noheader",
        "--states=all",
        f"--Format={LIVE_FORMAT}",
    ]


LETTERS = {
    "i": "job_id",
    "A": "job_id_raw",
    "F": "array_job_id",
    "K": "array_task_id",
    "u": "user",
    "a": "account",
    "P": "partition",
    "q": "qos",
    "T": "state",
    "t": "state",
    "Q": "priority",
    "V": "submit_time",
    "S": "start_time",
    "D": "nodes",
    "C": "cpus",
    "b": "tres_per_node",
    "H": "sockets_per_node",
    "l": "timelimit",
    "E": "dependency",
    "r": "reason",
    "R": "reason_list",
    "j": "name",
    "k": "comment",
}
LONG_NAMES = {
    "jobarrayid": "job_id",
    "jobid": "job_id_raw",
    "arrayjobid": "array_job_id",
    "arraytaskid": "array_task_id",
    "username": "user",
    "user": "user",
    "account": "account",
    "partition": "partition",
    "qos": "qos",
    "state": "state",
    "statecompact": "state",
    "priority": "priority",
    "prioritylong": "priority",
    "submittime": "submit_time",
    "starttime": "start_time",
    "numnodes": "nodes",
    "numcpus": "cpus",
    "tres-per-node": "tres_per_node",
    "gres": "tres_per_node",
    "tres-per-job": "tres_per_job",
    "tres-per-task": "tres_per_task",
    "tres-per-socket": "tres_per_socket",
    "numtasks": "tasks",
    "sockets": "sockets_per_node",
    "tres-alloc": "tres_alloc",
    "tres": "tres_alloc",
    "timelimit": "timelimit",
    "dependency": "dependency",
    "reason": "reason",
    "reasonlist": "reason_list",
    "name": "name",
    "comment": "comment",
}
FREE_TEXT = frozenset({"name", "comment"})

_JOB_ID = re.compile(r"^([0-9]+)(?:_([0-9]+|\[[^\]]*\])|\+([0-9]+))?$")
# Padding stripped around values; one set for the per-line and the vectorised path (Python's str.strip()
# and Polars' strip_chars() disagree on 0x1C-0x1F and some Unicode spaces).
_STRIP = " \t\r\n\f\v"
_STATE = re.compile(r"^[A-Z_]+$")


def line_format(fmt: str | None, delimiter: str | None = None) -> LineFormat:
    """LineFormat of `fmt` (None = live). Raises ValueError when no column identifies the job."""
    lf = parse_format(fmt or LIVE_FORMAT, LETTERS, LONG_NAMES, FREE_TEXT)
    if delimiter:
        lf = lf.with_delimiter(delimiter)
    if not set(lf.names) & {"job_id", "job_id_raw"}:
        raise ValueError(
            f"squeue format {fmt!r} has no job id column (%i/%A, JobID/JobArrayID); pending_jobs is keyed by "
            "job id (see docs/collectors.md for the declined formats)"
        )
    return lf


def _null(s: str | None) -> str | None:
    if s is None:
        return None
    s = s.strip(_STRIP)
    return None if s in NULL_WORDS else s


def _int(s: str | None, what: str) -> int | None:
    s = _null(s)
    if s is None:
        return None
    if not re.fullmatch(r"-?[0-9]+", s):
        raise ValueError(f"{what} is not an integer: {s!r}")
    return int(s)


UNSET_COUNTS = ("*", "4294967294", "4294967295", "65534", "65535")
"""What squeue prints for a task or socket count that is not set: `*` (sockets per node), or slurm.h's NO_VAL
(0xfffffffe), INFINITE (0xffffffff), NO_VAL16 and INFINITE16 printed as numbers. slurmctld sends NO_VAL as the
task count of a job that ended without starting (`_pack_default_job_details`, 22.05: no task count, not
pending, nothing allocated), e.g. a job cancelled while pending."""


def _unset(s: str | None) -> str | None:
    return None if s is not None and s.strip(_STRIP) in UNSET_COUNTS else s


REQUEST_FORMS = ("tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket")
"""The four ways a job asks for GPUs, as squeue prints them (sbatch(1), 22.05): `--gpus` → tres-per-job,
`--gpus-per-node` and `--gres=gpu:N` → tres-per-node, `--gpus-per-task` → tres-per-task,
`--gpus-per-socket` → tres-per-socket."""


def requested_gpus(
    per_job: int | None,
    per_node: int | None,
    per_task: int | None,
    per_socket: int | None,
    *,
    nodes: int | None,
    tasks: int | None,
    sockets: int | None,
) -> int | None:
    """GPUs a job asks for, as slurmctld totals its request (`gres_job_state_validate` in src/common/gres.c,
    Slurm 22.05.8): the largest of the per-job count, per-node × nodes, per-socket × nodes × sockets per
    node, and per-task × tasks; a multiplier the job left unset counts once (per-node with no or 0 nodes:
    one node). None when the job used no form (the caller may fall back to tres-alloc)."""
    counts = []
    if per_job is not None:
        counts.append(per_job)
    if per_node is not None:
        counts.append(per_node * (nodes or 1))
    if per_socket is not None:
        counts.append(per_socket * (nodes * sockets if nodes and sockets else 1))
    if per_task is not None:
        counts.append(per_task * (tasks or 1))
    return max(counts) if counts else None


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
    elif task is not None and not task.startswith("[") and not re.fullmatch("[0-9]+", task):
        task = f"[{task}]"  # %K prints a pending range without brackets: same shape as jobs.array_task_id
    if raw is None and m.group(2) is None and m.group(3) is None:
        raw = int(m.group(1))
    if task is None:
        array_job_id = None  # %F prints the job's own id for a job that is not an array task
    state = _null(v.get("state"))
    if state is not None:
        state = JOB_STATE_CODES.get(state, state.upper())
        if not _STATE.match(state):
            raise ValueError(f"not a job state: {state!r}")
    reason = _null(v.get("reason"))
    if reason is None and v.get("reason_list") is not None:
        rl = v["reason_list"].strip(_STRIP)
        if rl.startswith("(") and rl.endswith(")"):
            reason = _null(rl[1:-1])
    nodes = _int(v.get("nodes"), "node count")
    cpus = _int(v.get("cpus"), "CPU count")
    tasks = _int(_unset(v.get("tasks")), "task count")
    sockets = _int(_unset(v.get("sockets_per_node")), "sockets per node")
    forms = {f: _null(v.get(f)) for f in REQUEST_FORMS}
    tpn = forms["tres_per_node"]
    gpus = requested_gpus(
        *(gpu_count(forms[f])[0] if forms[f] is not None else None for f in REQUEST_FORMS),
        nodes=nodes,
        tasks=tasks,
        sockets=sockets,
    )
    if gpus is None and _null(v.get("tres_alloc")) is not None:
        gpus = gpu_count(v["tres_alloc"])[0]
    elif gpus is None and any(f in v for f in (*REQUEST_FORMS, "tres_alloc")):
        gpus = 0
    row = {
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
        "tasks": tasks,
        "sockets_per_node": sockets,
        "tres_per_job": forms["tres_per_job"],
        "tres_per_task": forms["tres_per_task"],
        "tres_per_socket": forms["tres_per_socket"],
    }
    problem = out_of_range(row, PENDING_JOBS_SCHEMA)
    if problem:
        raise ValueError(problem)
    return row


# Slurm's own layouts, read without --format (collectors/slurm_human.py; titles as Slurm 22.05 prints them,
# tests/fixtures/slurm-22.05/human): every column right-justified but the last; NAME may hold spaces.
_RIGHT = frozenset({"NODELIST(REASON)"})
HUMAN_LAYOUTS = (
    Layout(
        "squeue",
        ("JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"),
        _RIGHT,
        "NAME",
    ),
    Layout(
        "squeue -l",
        ("JOBID", "PARTITION", "NAME", "USER", "STATE", "TIME", "TIME_LIMI", "NODES", "NODELIST(REASON)"),
        _RIGHT,
        "NAME",
    ),
)
HUMAN_FIELDS = {
    "JOBID": "job_id",
    "PARTITION": "partition",
    "NAME": "name",
    "USER": "user",
    "ST": "state",
    "STATE": "state",
    "TIME_LIMI": "timelimit",
    "NODES": "nodes",
    "NODELIST(REASON)": "reason_list",
}
CAPTURE_INSTEAD = "`squeue -l` or the live format (docs/collectors.md)"
HUMAN_REFUSED = {
    ("STEPID", "NAME", "PARTITION", "USER", "TIME", "NODELIST"): (
        "`squeue -s` output: job steps, not jobs; capture " + CAPTURE_INSTEAD
    ),
}
_HUMAN_IDS = frozenset({"JOBID", "STEPID"})


def human_table(lines: list) -> tuple[Table | None, str | None]:
    """The recognised human layout of the non-blank `lines`, or why a title line is refused."""
    return find_table(lines, HUMAN_LAYOUTS, _HUMAN_IDS, HUMAN_REFUSED, CAPTURE_INSTEAD)


def snapshot_from(data: bytes, tz: ZoneInfo) -> datetime | None:
    """The snapshot time printed in the output itself: the date line of `squeue -l`."""
    lines = [line for line in split_lines(data[:4096]) if not is_blank(line[1])]
    table, _ = human_table(lines)
    return parse_date_line(table.date, tz) if table is not None else None


def _human_rows(lines: list, table: Table, cluster: str, snapshot_time: datetime, tz: ZoneInfo) -> Parsed:
    """pending_jobs rows of a human layout, cut by the header's columns (a reason keeps its spaces).

    squeue cuts NAME and USER to 8 characters and PARTITION to 9: a value that fills its column may be
    cut, so it is stored as NULL rather than as a wrong name; a job id that fills its column is
    quarantined (the key cannot be known).
    """
    rows: list[dict] = []
    bad: list[dict] = []
    for line_no, text, raw in lines:
        if line_no <= table.header_no:
            continue
        values, cut, reason = split_row(text, table)
        if values is not None:
            if "JOBID" in cut:
                reason = (
                    f"job id {values['JOBID']!r} fills its column: {table.layout.command!r} may have cut it"
                )
            else:
                v = {
                    HUMAN_FIELDS[t]: (None if t in cut and t in ("NAME", "USER", "PARTITION") else x)
                    for t, x in values.items()
                    if t in HUMAN_FIELDS
                }
                try:
                    rows.append(_row(v, cluster, snapshot_time, tz))
                    continue
                except ValueError as exc:
                    reason = str(exc)
        bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"squeue: {reason}"})
    df = (
        pl.DataFrame(rows, schema=PENDING_JOBS_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=PENDING_JOBS_SCHEMA)
    )
    df = df.unique(subset=["job_id"], keep="last", maintain_order=True)
    return Parsed(tables={"pending_jobs": df}, quarantine=quarantine_frame(bad))


def _live_or_previous(lines: list) -> str:
    """The live format, or the one before migration 0023 when most lines have its field count (captures
    recorded with the command line documented before, simulator output of an older version), as sinfo
    does (collectors/sinfo.py)."""
    count = len(LIVE_FIELDS)  # separators in a line of the live format (Name follows the last one)
    previous = PREVIOUS_LIVE_FORMAT.count(US)
    sample = [line[1].count(US) for line in lines[:200]]
    old = sum(n == previous for n in sample)
    return PREVIOUS_LIVE_FORMAT if old > sum(n == count for n in sample) else LIVE_FORMAT


def check_input(data: bytes, fmt: str | None, delimiter: str | None) -> str | None:
    """Why `ingest` cannot read this input as asked (an unusable --format, a declined layout), or None."""
    if fmt is None and delimiter is None and slurm_json.is_json(data):
        return slurm_json.check_version(slurm_json.sniff_version(data), slurm_json.READ_JOBS, JSON_CAPTURE)
    if fmt is None and delimiter is None:
        _table, problem = human_table([line for line in split_lines(data) if not is_blank(line[1])])
        if problem:
            return problem
    try:
        line_format(fmt, delimiter)
    except ValueError as exc:
        return str(exc)
    return None


_NULLS = sorted(NULL_WORDS)


def _nul(col: str) -> pl.Expr:
    """The stripped text of a column, null for Slurm's null words (as _null does per value)."""
    t = pl.col(col).str.strip_chars(_STRIP)
    return pl.when(t.is_in(_NULLS)).then(None).otherwise(t)


def _vector_rows(
    df: pl.DataFrame, cluster: str, snapshot_time: datetime, tz: ZoneInfo
) -> tuple[pl.DataFrame, list[int]]:
    """Typed rows of split lines, in expressions; line numbers whose values need the per-line path.

    A row is handed back when any value is outside what the expressions read exactly as _row does
    (unusual times or durations, bad integers, unknown job id shapes): _row then converts it or gives
    the quarantine reason.
    """
    names = set(df.columns)

    def col(name: str) -> pl.Expr:
        if name not in names:
            return pl.lit(None, pl.String)
        if name in ("tasks", "sockets_per_node"):
            return pl.when(_nul(name).is_in(UNSET_COUNTS)).then(None).otherwise(_nul(name))
        return _nul(name)

    def as_int(name: str) -> tuple[pl.Expr, pl.Expr]:
        text = col(name)
        value = text.cast(pl.Int64, strict=False)
        return value, text.is_null() | (value.is_not_null() & text.str.contains(r"^-?[0-9]{1,18}$"))

    ok = pl.lit(True)
    raw, good = as_int("job_id_raw")
    ok = ok & good
    arr, good = as_int("array_job_id")
    ok = ok & good
    prio, good = as_int("priority")
    ok = ok & good
    nodes, good = as_int("nodes")
    ok = ok & good
    cpus, good = as_int("cpus")
    ok = ok & good
    tasks, good = as_int("tasks")
    ok = ok & good
    sockets, good = as_int("sockets_per_node")
    ok = ok & good
    jid_in = col("job_id")
    jid = pl.coalesce(jid_in, raw.cast(pl.String))
    m = jid.str.extract_groups(r"^([0-9]{1,18})(?:_([0-9]+|\[[^\]]*\])|\+([0-9]+))?$")
    base, task_from_id, het = (m.struct.field(k) for k in ("1", "2", "3"))
    ok = ok & base.is_not_null()
    k_task = col("array_task_id")
    k_task = (
        pl.when(k_task.is_null() | k_task.str.starts_with("[") | k_task.str.contains(r"^[0-9]+$"))
        .then(k_task)
        .otherwise(pl.concat_str(pl.lit("["), k_task, pl.lit("]")))
    )
    task = pl.when(task_from_id.is_not_null()).then(task_from_id).otherwise(k_task)
    array_job = pl.when(task_from_id.is_not_null()).then(pl.coalesce(arr, base.cast(pl.Int64))).otherwise(arr)
    array_job = pl.when(task.is_null()).then(None).otherwise(array_job)
    job_raw = (
        pl.when(raw.is_null() & task_from_id.is_null() & het.is_null())
        .then(base.cast(pl.Int64))
        .otherwise(raw)
    )
    st = col("state")
    state = st.replace(JOB_STATE_CODES).str.to_uppercase()
    ok = ok & (state.is_null() | state.str.contains(r"^[A-Z_]+$"))
    reason = col("reason")
    if "reason_list" in names:
        rl = pl.col("reason_list").str.strip_chars(_STRIP)
        inner = (
            pl.when(rl.str.starts_with("(") & rl.str.ends_with(")"))
            .then(rl.str.slice(1, rl.str.len_chars() - 2))
            .otherwise(None)
            .str.strip_chars(_STRIP)
        )
        inner = pl.when(inner.is_in(_NULLS)).then(None).otherwise(inner)
        reason = pl.coalesce(reason, inner)
    times = {}
    for name in ("submit_time", "start_time"):
        text = col(name)
        value = time_expr(text, tz)
        times[name] = value
        ok = ok & (
            text.is_null()
            | (
                value.is_not_null()
                & text.str.contains(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$")
            )
        )
    tl = col("timelimit")
    dur = duration_expr(tl)
    tl_null = tl.is_null() | tl.is_in(["UNLIMITED", "Partition_Limit", "INFINITE", "NOT_SET", "INVALID"])
    ok = ok & (
        tl_null
        | (
            dur.is_not_null()
            & tl.str.contains(
                r"^([0-9]{1,6}-[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}|([0-9]{1,6}:)?[0-9]{1,6}:[0-9]{1,2})$"
            )
        )
    )
    timelimit = pl.when(tl_null).then(None).otherwise(dur)
    frame = df.with_columns(
        _ok=ok,
        job_id=jid,
        job_id_raw=job_raw,
        array_job_id=array_job,
        array_task_id=task,
        state=state,
        reason=reason,
        priority=prio,
        nodes=nodes,
        cpus=cpus,
        tasks=tasks,
        sockets_per_node=sockets,
        submit_time=times["submit_time"],
        start_time=times["start_time"],
        timelimit_seconds=timelimit,
        **{f: col(f) for f in REQUEST_FORMS},
        tres_alloc=col("tres_alloc"),
        dependency=col("dependency"),
        user=col("user"),
        account=col("account"),
        partition=col("partition"),
        qos=col("qos"),
        name=pl.col("name") if "name" in names else pl.lit(None, pl.String),
    )
    bad = frame.filter(~pl.col("_ok"))["line_no"].to_list()
    frame = frame.filter(pl.col("_ok"))
    # GPUs: few distinct strings, each read once by the shared counting rule; requested_gpus in Float64
    # (exact below 2^53) so that a total beyond Int32 is seen and handed to the per-line path (quarantine)
    limit = 2**31 - 1

    def count(name: str) -> pl.Expr:
        values = {v: float(gpu_count(v)[0]) for v in frame[name].unique().to_list() if v is not None}
        return pl.col(name).replace_strict(values, default=None, return_dtype=pl.Float64)

    def times_or_one(*cols: str) -> pl.Expr:
        prod = pl.lit(1.0)
        for c in cols:
            prod = prod * pl.col(c).cast(pl.Float64)
        unset = pl.any_horizontal(*(pl.col(c).is_null() | (pl.col(c) == 0) for c in cols))
        return pl.when(unset).then(1.0).otherwise(prod)

    terms = [
        count("tres_per_job"),
        count("tres_per_node") * times_or_one("nodes"),
        count("tres_per_socket") * times_or_one("nodes", "sockets_per_node"),
        count("tres_per_task") * times_or_one("tasks"),
    ]
    asked = pl.max_horizontal(terms)
    any_form = pl.any_horizontal(pl.col(f).is_not_null() for f in REQUEST_FORMS)
    listed = any(f in names for f in (*REQUEST_FORMS, "tres_alloc"))
    gpus = (
        pl.when(any_form)
        .then(asked)
        .when(pl.col("tres_alloc").is_not_null())
        .then(count("tres_alloc"))
        .otherwise(pl.lit(0.0) if listed else pl.lit(None, pl.Float64))
    )
    frame = frame.with_columns(_gpus=gpus)
    fits = pl.col("_gpus").is_null() | (pl.col("_gpus") <= limit)
    for c in ("nodes", "cpus", "tasks", "sockets_per_node"):
        fits = fits & (pl.col(c).is_null() | pl.col(c).is_between(-(2**31), limit))
    bad += frame.filter(~fits)["line_no"].to_list()
    frame = frame.filter(fits).with_columns(gpus=pl.col("_gpus").cast(pl.Int64)).drop("_gpus")
    out = frame.with_columns(cluster=pl.lit(cluster), snapshot_time=pl.lit(snapshot_time))
    out = out.select("line_no", *[pl.col(c).cast(t) for c, t in PENDING_JOBS_SCHEMA.items()])
    return out, bad


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
    """squeue output -> pending_jobs rows (one per job id; `-P` repeats collapse into one); JSON as
    `parse_stream` reads it."""
    if fmt is None and delimiter is None and slurm_json.is_json(data[:4096]):
        out = parse_stream(io.BytesIO(data), cluster=cluster, snapshot_time=snapshot_time, tz=tz)
        if out.tables:
            return out
        return Parsed(tables={}, quarantine=slurm_json.every_line(data, out.quarantine["reason"][0]))
    return _parse(
        data,
        cluster=cluster,
        snapshot_time=snapshot_time,
        tz=tz,
        fmt=fmt,
        delimiter=delimiter,
        vectorise=True,
    )


def _parse(
    data: bytes,
    *,
    cluster: str,
    snapshot_time: datetime,
    tz: ZoneInfo,
    fmt: str | None,
    delimiter: str | None,
    vectorise: bool,
) -> Parsed:
    """Vectorised split and typing for lines of the expected shape; a per-line path for the rest."""
    lines = [line for line in split_lines(data) if not is_blank(line[1])]
    if fmt is None and delimiter is None:
        table, _problem = human_table(lines)
        if table is not None:
            return _human_rows(lines, table, cluster, snapshot_time, tz)
    lf = line_format(fmt or (None if delimiter else _live_or_previous(lines)), delimiter)
    if lines:
        values, _reason = split_line(lines[0][1], lf)
        if values is not None and is_header(values, ("job_id", "job_id_raw")):
            lines = lines[1:]  # a header line of column titles (squeue without --noheader)
    frames: list[pl.DataFrame] = []
    slow = lines
    if vectorise:
        frames, slow = fast_path(lines, lf, lambda split: _vector_rows(split, cluster, snapshot_time, tz))
    rows: list[dict] = []
    bad: list[dict] = []
    for line_no, text, raw in slow:
        values, reason = split_line(text, lf)
        if values is not None:
            try:
                row = _row(values, cluster, snapshot_time, tz)
            except ValueError as exc:
                reason = str(exc)
            else:
                rows.append({"line_no": line_no, **row})
                continue
        bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"squeue: {reason}"})
    schema = {"line_no": pl.Int64, **PENDING_JOBS_SCHEMA}
    frames.append(pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema))
    df = (
        pl.concat(frames)
        .sort("line_no")
        .unique(subset=["job_id"], keep="last", maintain_order=True)  # -P repeats: the last line wins
        .drop("line_no")
    )
    return Parsed(tables={"pending_jobs": df}, quarantine=quarantine_frame(bad))


# ------------------------------------------------------------------------------------------- JSON

JSON_CAPTURE = "`squeue --json`, slurmrestd /slurm/<version>/jobs, or the live text format"
# squeue's %T is job_state_string(): the first of these flags that is set, else the base state
# (src/common/slurm_protocol_defs.c, 22.05.8 and 25.11.0); v0.0.40+ list the base state and the flags.
_STATE_FLAG_PRECEDENCE = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "EXPEDITING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)
_BASE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)
_TASK_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?$")


def _json_state(v) -> str:
    if isinstance(v, str):  # v0.0.38: job_state_string() already
        return v
    words = [w for w in v or [] if isinstance(w, str)]
    flag = next((f for f in _STATE_FLAG_PRECEDENCE if f in words), None)
    return flag or next((w for w in words if w in _BASE_STATES), words[0] if words else "")


def array_tasks(task_string: str) -> list[int]:
    """The task ids `squeue --array` prints one line each for: the array's task string without its `%`
    throttle, read as Slurm's bit_unfmt reads it (`2-5`, `1,3,7-9`; `0-20:4` is the step form
    xlate_array_task_str prints). A list Slurm cut short (`...`, SLURM_BITSTR_LEN) cannot be expanded."""
    text = task_string.split("%", 1)[0]
    if text.endswith("..."):
        raise ValueError(f"array task list cut short by Slurm ({task_string!r}, SLURM_BITSTR_LEN)")
    out: list[int] = []
    for part in text.split(","):
        m = _TASK_RANGE.match(part.strip())
        if not m:
            raise ValueError(f"not an array task list: {task_string!r}")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        step = int(m.group(3)) if m.group(3) else 1
        if last < first or step < 1 or (last - first) // step > 10_000_000:
            raise ValueError(f"not an array task list: {task_string!r}")
        out += range(first, last + 1, step)
    return sorted(set(out))


def _text(v) -> str:
    return "" if v is None else str(v)


def _int_text(v) -> str:
    n = slurm_json.num(v)
    return "" if n is None or n == float("inf") else str(int(n))


def _tres_cpus(tres: str) -> str:
    """The `cpu=N` count of a TRES string (`cpu=4,mem=4000M,node=4`), or ''."""
    for item in tres.split(","):
        name, _, count = item.partition("=")
        if name == "cpu" and count.isdigit():
            return count
    return ""


def json_values(job: dict) -> list[dict[str, str]]:
    """The values of the live `squeue --all --array --states=all --format=<live>` line(s) of one JSON job.

    squeue's print functions (src/squeue/print.c, 22.05.8): %i is `A_[tasks]`, `A_T`, `H+O` or the id;
    %A the job id; %F the array's id (the job's own id otherwise); %K the task or `N/A`; %T
    job_state_string(); %Q the priority; %V and %S epoch times (start `N/A` when 0); %D `node_count`; %C
    `cpus` (see below); %b and tres-per-job/-task/-socket
    `tres_per_node`, `tres_per_job`, `tres_per_task`, `tres_per_socket` or `N/A`; NumTasks `tasks` and
    Sockets `sockets_per_node` (unset: empty, as `*` and NO_VAL are read); %l `time_limit` minutes (unset/infinite: UNLIMITED); %E `dependency` or
    `(null)`; %r the state description when set, else the reason; %j the name. With `--array` a pending
    array record prints one line per task (`_print_job_from_format`), each with that task id and the
    record's own job id.

    v0.0.38 prints no `cpus` for a job without a task count (src/plugins/openapi/v0.0.38/jobs.c; seen on
    the test bed for a job cancelled while held). %C is then the `cpu=` count of `tres_req_str`: slurmctld
    sets that to the job's total CPUs once it ran, else its minimum CPUs (set_job_tres_req_cnt,
    src/slurmctld/job_mgr.c 22.05.8), the numbers squeue's %C prints (_pack_job_info there), except for a
    job that is completing or pending again after a requeue.
    """
    raw = slurm_json.num(job.get("job_id"))
    if raw is None:
        raise ValueError("job without a job_id")
    raw = int(raw)
    arr = int(slurm_json.num(job.get("array_job_id")) or 0)
    task = slurm_json.num(job.get("array_task_id"))
    task_string = _text(job.get("array_task_string"))
    het = int(slurm_json.num(job.get("het_job_id")) or 0)
    het_off = int(slurm_json.num(job.get("het_job_offset")) or 0)
    limit = slurm_json.num(job.get("time_limit"))
    if isinstance(job.get("time_limit"), dict) and not job["time_limit"].get("set", True):
        timelimit = "NOT_SET"
    elif limit is None or limit == float("inf"):
        timelimit = "UNLIMITED"
    else:
        timelimit = slurm_json.duration_text(int(limit) * 60)
    start = slurm_json.num(job.get("start_time"))
    values = {
        "job_id_raw": str(raw),
        "array_job_id": str(arr) if (task_string or task is not None) else str(raw),
        "array_task_id": "N/A",
        "user": _text(job.get("user_name")),
        "account": _text(job.get("account")),
        "partition": _text(job.get("partition")),
        "qos": _text(job.get("qos")),
        "state": _json_state(job.get("job_state")),
        "priority": _int_text(job.get("priority")),
        "submit_time": slurm_json.epoch_text(job.get("submit_time")),
        "start_time": "N/A" if not start else slurm_json.epoch_text(start),
        "nodes": _int_text(job.get("node_count")),
        "cpus": _int_text(job.get("cpus")) or _tres_cpus(_text(job.get("tres_req_str"))),
        "tres_per_node": _text(job.get("tres_per_node")) or "N/A",
        "tres_per_job": _text(job.get("tres_per_job")) or "N/A",
        "tres_per_task": _text(job.get("tres_per_task")) or "N/A",
        "tres_per_socket": _text(job.get("tres_per_socket")) or "N/A",
        "tasks": _int_text(job.get("tasks")),
        "sockets_per_node": _int_text(job.get("sockets_per_node")),
        "timelimit": timelimit,
        "dependency": _text(job.get("dependency")) or "(null)",
        "reason": _text(job.get("state_description")) or _text(job.get("state_reason")),
        "name": _text(job.get("name")),
    }
    if task_string:
        return [dict(values, job_id=f"{arr}_{t}", array_task_id=str(t)) for t in array_tasks(task_string)]
    if task is not None and task != float("inf"):
        return [dict(values, job_id=f"{arr}_{int(task)}", array_task_id=str(int(task)))]
    if het:
        return [dict(values, job_id=f"{het}+{het_off}")]
    return [dict(values, job_id=str(raw))]


def streams(head: bytes, fmt: str | None = None, delimiter: str | None = None) -> bool:
    """True for input that `parse_stream` reads from an open file instead of whole bytes: JSON, unless a
    --format says the file is text (a `-o` format may print lines that start with `{`)."""
    return fmt is None and delimiter is None and slurm_json.is_json(head)


def parse_stream(
    fh: IO[bytes],
    *,
    cluster: str,
    snapshot_time: datetime,
    tz: ZoneInfo | None = None,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
) -> Parsed:
    """Slurm's JSON of the jobs -> the pending_jobs rows the live text of the same moment gives.

    Epoch times, so `tz` does not apply. A declined version or input that is not a jobs document
    quarantines one line saying why; a malformed job is quarantined alone (line_no = its place in the
    array). A document of slurmdbd's jobs (sacct --json) is not a queue and is refused by name.
    """

    def convert(job: dict) -> list[dict]:
        if "steps" in job and "job_state" not in job:
            raise ValueError("an accounting record (sacct --json), not a queue entry: use ingest sacct")
        return [_row(v, cluster, snapshot_time, UTC) for v in json_values(job)]

    got = slurm_json.read_array(
        fh,
        "jobs",
        convert,
        PENDING_JOBS_SCHEMA,
        read=slurm_json.READ_JOBS,
        capture=JSON_CAPTURE,
        what="squeue",
    )
    problem = got.problem
    if problem is None and not got.found:
        problem = "Slurm JSON without a `jobs` array: not the jobs of squeue or slurmrestd"
    if problem is not None:
        bad = [{"line_no": 1, "raw_text": "", "raw_bytes": None, "reason": f"squeue: {problem}"}]
        return Parsed(tables={}, quarantine=quarantine_frame(bad))
    df = got.rows(PENDING_JOBS_SCHEMA).unique(subset=["job_id"], keep="last", maintain_order=True)
    return Parsed(tables={"pending_jobs": df}, quarantine=quarantine_frame(got.bad))
