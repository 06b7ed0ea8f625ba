"""sacct --parsable2 output -> `jobs` (one row per allocation attempt) and `job_steps`.

Why it is shaped like this:
- Accounting dumps are large (a year of a busy cluster is millions of lines), so the common case is
  vectorised: the text is split into lines and fields by Polars (any delimiter, multi-byte included, no
  quoting: a `"` in a job name is just a character), and every typed conversion is a Polars expression.
  Only lines whose field count is wrong go through the per-line path, which recovers a delimiter inside
  the one free-text column or quarantines the line with the reason.
- `--parsable2` has no escaping, so a `|` in a job name shifts the columns. When exactly one free-text
  field is present (the live collector asks for JobName only, and puts it last) the surplus belongs to
  it; with two or more free-text fields the line is ambiguous and is quarantined.
- The natural key is (cluster, job_id_raw, submit_time): a requeue gets a new Submit time, so `sacct
  --duplicates` gives one row per attempt, and the same attempt seen again in a later overlapping window
  (PENDING -> RUNNING -> COMPLETED) replaces its row. `attempt` cannot come from one window; it is
  recomputed from all stored rows of the job by `after_upsert`.
- Only the columns the input has are written, so a narrower capture never blanks out what a wider one
  stored for the same attempt.
"""

from __future__ import annotations

import io
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import IO
from zoneinfo import ZoneInfo

import duckdb
import polars as pl
from slurmscope.collectors import slurm_json
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import (
    gpu_count,
    int_expr,
    parse_cpu_time_columns,
    parse_duration_columns,
    parse_exit_code,
    parse_req_mem,
    parse_size_columns,
    parse_time_columns,
    parse_tres,
    parse_tres_usage_columns,
    split_fields,
    split_lines,
    unreadable,
)

from slurmscope.config import Config
from slurmscope.slurm_states import NULL_WORDS, normalise_job_state

KIND = "sacct"
TABLES = {
    # A change of state, times or GPUs moves ingested_at, so the next incremental pipeline run rebuilds from
    # the attempt's start: per-day columns (failed, running GPU-seconds) depend on how it ended.
    "jobs": TableSpec(
        "jobs", ("cluster", "job_id_raw", "submit_time"), touch=("state", "start_time", "end_time", "gpus")
    ),
    "job_steps": TableSpec("job_steps", ("cluster", "job_id_raw", "job_submit_time", "step_id")),
}

# The live field list (docs/ingest.md): the usage fields follow the allocation's, and the free-text fields
# (Comment, AdminComment, JobName) come last.
LIVE_FIELDS = (
    "JobID,JobIDRaw,Cluster,Partition,QOS,Account,User,UID,Submit,Eligible,Start,End,Elapsed,Timelimit,"
    "State,ExitCode,NNodes,NCPUS,ReqMem,AllocTRES,NodeList,Flags,Priority,Reason,"
    "NTasks,TotalCPU,UserCPU,SystemCPU,MaxRSS,AveRSS,ReqTRES,TRESUsageInTot,TRESUsageInMax,ConsumedEnergyRaw,"
    "Comment,AdminComment,JobName"
)
# ASCII unit separator: never typed by users, accepted by sacct's --delimiter.
LIVE_DELIMITER = "\x1f"

# Columns that hold user-typed text and may therefore contain the delimiter.
FREE_TEXT = frozenset(
    {
        "jobname",
        "comment",
        "admincomment",
        "systemcomment",
        "submitline",
        "workdir",
        "constraints",
        "extra",
        "stdout",
        "stderr",
        "stdin",
        "container",
        "licenses",
        "mcslabel",
    }
)

# sacct field names that are another name for the same print (sacct.c's field table maps them to one
# PRINT_ type): renamed on reading, so a list naming both reads them once.
ALIASES = {
    "jobidraw": "jobidraw",
    "nodes": "nodelist",
    "name": "jobname",
    "timelimitraw": "timelimitraw",
}
# Pairs that are not one print but mean the same quantity: (authoritative, other). The other is read only
# when the authoritative field is absent (docs/ingest.md, "Alias and duplicate columns").
# - NCPUS, AllocCPUS: one print in Slurm (PRINT_ALLOC_CPUS for both in src/sacct/sacct.c), so equal.
# - NNodes, AllocNodes: NNodes (PRINT_NNODES) is the allocated count once the job started and the
#   requested count before; AllocNodes (PRINT_ALLOC_NODES) is 0 for a job never allocated (seen on the
#   22.05 test bed: job 5 of tests/fixtures/slurm-22.05/human has NNodes 4, AllocNodes 0). Read alone, an
#   AllocNodes of 0 is stored as NULL (unknown request), not as a job on 0 nodes.
ALIAS_PAIRS = (("ncpus", "alloccpus"), ("nnodes", "allocnodes"))

# `sacct --format=ALL` of Slurm 22.05 (the header line it prints, captured on the test bed:
# tests/fixtures/slurm-22.05/human/human_sacct_all.txt): what `ingest sacct --format ALL` names.
ALL_FIELDS = {
    "22.05": tuple(
        (
            "Account AdminComment AllocCPUS AllocNodes AllocTRES AssocID AveCPU AveCPUFreq AveDiskRead "
            "AveDiskWrite AvePages AveRSS AveVMSize BlockID Cluster Comment Constraints ConsumedEnergy "
            "ConsumedEnergyRaw Container CPUTime CPUTimeRAW DBIndex DerivedExitCode Elapsed ElapsedRaw "
            "Eligible End ExitCode Flags GID Group JobID JobIDRaw JobName Layout MaxDiskRead MaxDiskReadNode "
            "MaxDiskReadTask MaxDiskWrite MaxDiskWriteNode MaxDiskWriteTask MaxPages MaxPagesNode "
            "MaxPagesTask MaxRSS MaxRSSNode MaxRSSTask MaxVMSize MaxVMSizeNode MaxVMSizeTask McsLabel MinCPU "
            "MinCPUNode MinCPUTask NCPUS NNodes NodeList NTasks Partition Priority QOS QOSRAW Reason "
            "ReqCPUFreq ReqCPUFreqGov ReqCPUFreqMax ReqCPUFreqMin ReqCPUS ReqMem ReqNodes ReqTRES "
            "Reservation ReservationId Reserved ResvCPU ResvCPURAW Start State Submit SubmitLine Suspended "
            "SystemComment SystemCPU Timelimit TimelimitRaw TotalCPU TRESUsageInAve TRESUsageInMax "
            "TRESUsageInMaxNode TRESUsageInMaxTask TRESUsageInMin TRESUsageInMinNode TRESUsageInMinTask "
            "TRESUsageInTot TRESUsageOutAve TRESUsageOutMax TRESUsageOutMaxNode TRESUsageOutMaxTask "
            "TRESUsageOutMin TRESUsageOutMinNode TRESUsageOutMinTask TRESUsageOutTot UID User UserCPU WCKey "
            "WCKeyID WorkDir "
        ).split()
    ),
}

# Usage fields (docs/ingest.md, "Usage fields"), read strictly: a value in no shape sacct prints quarantines
# its line, naming the field and the value (a misprinted measurement means the columns cannot be trusted).
CPU_TIME_FIELDS = {
    "total_cpu_seconds": "totalcpu",
    "user_cpu_seconds": "usercpu",
    "system_cpu_seconds": "systemcpu",
}
SIZE_FIELDS = {"max_rss_bytes": "maxrss", "ave_rss_bytes": "averss"}
COUNT_FIELDS = {"ntasks": "ntasks", "consumed_energy_joules": "consumedenergyraw"}
# From the TRES usage strings: (column, field, TRES name).
TRES_USAGE_FIELDS = (
    ("mem_tot_bytes", "tresusageintot", "mem"),
    ("gpu_util_tot_percent", "tresusageintot", "gres/gpuutil"),
    ("gpu_mem_tot_bytes", "tresusageintot", "gres/gpumem"),
    ("gpu_util_max_percent", "tresusageinmax", "gres/gpuutil"),
    ("gpu_mem_max_bytes", "tresusageinmax", "gres/gpumem"),
)
PRINTED = {
    "totalcpu": "TotalCPU",
    "usercpu": "UserCPU",
    "systemcpu": "SystemCPU",
    "maxrss": "MaxRSS",
    "averss": "AveRSS",
    "ntasks": "NTasks",
    "consumedenergyraw": "ConsumedEnergyRaw",
    "tresusageintot": "TRESUsageInTot",
    "tresusageinmax": "TRESUsageInMax",
}
_SHAPES = {
    "totalcpu": "a CPU time as sacct prints it ([D-]HH:MM:SS, MM:SS.mmm)",
    "maxrss": "a size as sacct prints it (bytes, or a number with K/M/G/T/P)",
    "ntasks": "a count",
    "tresusageintot": "a TRES usage string (name=value,...)",
}

HEADER_REQUIRED = ("jobid", "submit")
# A line of only these characters carries no record and is skipped (not quarantined).
BLANK = " \t\r"


def normalise_field(name: str) -> str:
    """`JobName%30` / `jobname` / ` JobName ` -> `jobname` (sacct field names are case-insensitive)."""
    name = name.strip().split("%", 1)[0].strip().lower()
    return ALIASES.get(name, name)


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """The live window query (COMMANDS.md): every user, every attempt, steps included, unit separator."""
    argv = [
        cfg.slurm_command("sacct"),
        *cfg.slurm_cluster_args(),
        "--allusers",
        "--duplicates",
        "--parsable2",
        "--noconvert",
        f"--delimiter={LIVE_DELIMITER}",
    ]
    if start is not None:
        argv.append(f"--starttime={_sacct_time(start)}")
    if end is not None:
        argv.append(f"--endtime={_sacct_time(end)}")
    argv.append(f"--format={LIVE_FIELDS}")
    return argv


def command_jobs(cfg: Config, job_ids: Iterable[str]) -> list[str]:
    """The same query by job id, for jobs a time window hides (held, dependency, future --begin)."""
    return [
        cfg.slurm_command("sacct"),
        *cfg.slurm_cluster_args(),
        "--allusers",
        "--duplicates",
        "--parsable2",
        "--noconvert",
        f"--delimiter={LIVE_DELIMITER}",
        f"--jobs={','.join(job_ids)}",
        f"--format={LIVE_FIELDS}",
    ]


def command_pending_ids(cfg: Config) -> list[str]:
    """Ids of the jobs slurmctld holds as pending (one per line; an array's pending part under its own id)."""
    return [
        cfg.slurm_command("squeue"),
        *cfg.slurm_cluster_args(),
        "--noheader",
        "--all",
        "--states=PENDING",
        "--format=%A",
    ]


def _sacct_time(t: datetime) -> str:
    """sacct reads naive times in its TZ; the runner sets TZ=UTC, so print UTC wall time."""
    if t.tzinfo is not None:
        t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S")


# ------------------------------------------------------------------------------------------- layout


def layout(
    data: bytes | str, fmt: str | None = None, delimiter: str | None = None
) -> tuple[list[str], int | None, bool, str | None]:
    """(fields, header_line_no, trailing, problem) for an input: where the field names come from.

    With `fmt` the names are those of sacct's --format; a header line matching them is skipped. Without
    it, the first non-blank line must be the header. `trailing` is True for `--parsable` (not 2) output,
    which ends each line with a delimiter. `problem` says why the input cannot be read as sacct output.
    """
    text = data if isinstance(data, str) else data[:65536].decode("utf-8", errors="replace")
    text = text.removeprefix("\ufeff")  # a byte-order mark from a Windows editor is not part of JobID
    delim = delimiter or (detect_delimiter(text) if not fmt else "|")
    first_no, first = None, None
    for i, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if line.strip(BLANK):
            first_no, first = i, line
            break
    all_release = None
    if fmt and fmt.strip().upper() in ("ALL", "ALL:22.05"):
        all_release = "22.05"
        fmt = ",".join(ALL_FIELDS[all_release])
    elif fmt and fmt.strip().upper().startswith("ALL"):
        return (
            [],
            None,
            False,
            f"--format {fmt.strip()}: only Slurm 22.05's ALL list is known (--format ALL); for another "
            "release give the field list itself (the header sacct --format=ALL prints, or sacct --helpformat)",
        )
    if fmt:
        fields = [normalise_field(f) for f in fmt.split(",") if f.strip()]
        header_no = None
        if first is not None:
            names = [normalise_field(f) for f in first.split(delim)]
            if names and names[-1] == "" and names[:-1] == fields:
                header_no, names = first_no, names[:-1]
            elif names == fields:
                header_no = first_no
        trailing = _looks_trailing(text, delim, len(fields), header_no)
    else:
        if first is None:
            return [], None, False, None
        fields = [normalise_field(f) for f in first.split(delim)]
        trailing = bool(fields) and fields[-1] == "" and len(fields) > 1
        if trailing:
            fields = fields[:-1]
        header_no = first_no
        if "jobid" not in fields:
            return (
                fields,
                header_no,
                trailing,
                (
                    f"the first line is not a sacct header (no JobID field with delimiter {delim!r}); "
                    "give the field list with --format, or the delimiter with --delimiter"
                ),
            )
    missing = [f for f in HEADER_REQUIRED if f not in fields]
    if missing:
        return (
            fields,
            header_no,
            trailing,
            (
                "sacct output without "
                + ", ".join(missing)
                + ": jobs are keyed by (cluster, JobIDRaw, Submit); "
                "capture with those fields in --format"
            ),
        )
    if all_release and first is not None and header_no is None:
        k = first.count(delim) + 1 - (1 if trailing else 0)
        if k != len(fields):
            return (
                fields,
                header_no,
                trailing,
                f"--format ALL is Slurm {all_release}'s list of {len(fields)} fields, but the first line has "
                f"{k}: the dump comes from another release; give its field list with --format (the header "
                "its sacct --format=ALL prints)",
            )
    return resolve_duplicates(fields), header_no, trailing, None


def resolve_duplicates(fields: list[str]) -> list[str]:
    """Field names with repeats and alias pairs settled, one column per position still.

    A name seen again (`TRESUsageOutTot` twice, or `Name` and `JobName`) keeps its first column: later
    ones become `name#2`, ... which no rule reads (the free-text count still sees them). Of an alias pair
    (ALIAS_PAIRS) the authoritative one is read; the other, present alone, stands in for it.
    """
    seen: dict[str, int] = {}
    out = []
    for f in fields:
        seen[f] = seen.get(f, 0) + 1
        out.append(f if seen[f] == 1 else f"{f}#{seen[f]}")
    return out


def base_field(name: str) -> str:
    """`jobname#2` -> `jobname`: the field a repeated column names."""
    return name.split("#", 1)[0]


def detect_delimiter(text: str) -> str:
    """The delimiter of a sacct header line: the text between `JobID` and the next field name.

    Only used when no --delimiter is given and the input has a header; falls back to `|`.
    """
    first = next((ln for ln in text.split("\n") if ln.strip(BLANK)), "")
    m = re.search(r"\bJobID(?:Raw)?([^A-Za-z0-9%_ ]+)[A-Za-z]", first, re.IGNORECASE) or re.search(
        r"[A-Za-z0-9]([^A-Za-z0-9%_ ]+)JobID(?:Raw)?\b", first, re.IGNORECASE
    )
    return m.group(1) if m else "|"


def _looks_trailing(text: str, delim: str, n: int, header_no: int | None) -> bool:
    """Headerless --parsable output: most lines have n+1 fields, the last one empty."""
    votes_trailing = votes_plain = 0
    for i, line in enumerate(text.split("\n")[:200], start=1):
        line = line.rstrip("\r")
        if not line.strip(BLANK) or i == header_no:
            continue
        k = line.count(delim) + 1
        if k == n + 1 and line.endswith(delim):
            votes_trailing += 1
        elif k == n:
            votes_plain += 1
    return votes_trailing > votes_plain


def check_input(data: bytes, fmt: str | None = None, delimiter: str | None = None) -> str | None:
    """Why `data` cannot be ingested as sacct output (None when it can); ingest reports it to the user."""
    if slurm_json.is_json(data):
        return slurm_json.check_version(slurm_json.sniff_version(data))
    if not delimiter and not fmt:
        delimiter = detect_delimiter(data[:65536].decode("utf-8", errors="replace"))
    return layout(data, fmt, delimiter)[3]


# -------------------------------------------------------------------------------------------- parse


# Bytes per slice of a text input (about 75,000 lines of the live format): what is parsed, and loaded by
# `ingest`, at once, so a dump of any size is never held whole. Allocation rows carried over from one slice
# to the next, for steps printed after their job's line in an earlier slice (sacct prints a job's steps
# right after it, and a slice ends before a job line, so this is for unusual orders only).
SLICE_BYTES = 16 << 20
CARRY_ROWS = 1000
# Lines a slice may run past SLICE_BYTES looking for a job line to end before (a run of steps, or garbage
# with no job line at all, is then cut anywhere: the carried allocations still find the steps' jobs).
SLICE_SEEK_LINES = 10_000
_MASKS = ("\ue000", "\ue001", "\ue002", "\ufdd0")  # private-use / non-characters

# Bytes that may serve as the "separator" when Polars reads whole lines: any one absent from the input.
_LINE_SEPARATORS = [bytes([c]) for c in (0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, *range(14, 32))]


def _read_lines(data: bytes, offset: int = 0) -> pl.DataFrame:
    """(line_no, line) for every physical line (numbered from offset + 1): LF or CRLF, invalid UTF-8
    replaced, blank lines null.

    Polars' CSV reader splits lines in parallel without building Python strings; it is given a separator
    byte that does not occur in the input, so each line is one field (quoting off). The pure-Python split
    is the fallback for inputs that contain every candidate byte.
    """
    sep = next((c for c in _LINE_SEPARATORS if data.find(c) < 0), None)
    if sep is not None and data:
        df = pl.read_csv(
            io.BytesIO(data),
            has_header=False,
            separator=sep.decode(),
            quote_char=None,
            comment_prefix=None,
            schema={"line": pl.String},
            encoding="utf8-lossy",
            row_index_name="line_no",
            row_index_offset=offset + 1,
            raise_if_empty=False,
            eol_char="\n",
        )
        return df.with_columns(pl.col("line_no").cast(pl.Int64))
    rows = split_lines(data)
    return pl.DataFrame(
        {"line_no": [r[0] + offset for r in rows], "line": [r[1] for r in rows]},
        schema={"line_no": pl.Int64, "line": pl.String},
    )


def raw_lines(data: bytes, line_nos: Iterable[int]) -> dict[int, bytes]:
    """Original bytes of the given lines (1-based) when they are not valid UTF-8, for the quarantine."""
    wanted = sorted(set(line_nos))
    out: dict[int, bytes] = {}
    if not wanted:
        return out
    pos, no, k = 0, 1, 0
    while k < len(wanted) and pos <= len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        if no == wanted[k]:
            raw = data[pos:end]
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                out[no] = raw
            k += 1
        pos, no = end + 1, no + 1
    return out


def _split_lines(
    lines_df: pl.DataFrame, fields: list[str], delim: str, trailing: bool
) -> tuple[pl.DataFrame, list[dict]]:
    """(line_no, line) -> a frame of String columns (line_no, one per field) and the unsplittable lines.

    The per-line path runs only for lines whose field count is wrong.
    """
    n = len(fields)
    want = n + (1 if trailing else 0)
    # One split into a list per line gives both the field count and the fields (a count and an exact split
    # each cost more than it does).
    lines_df = lines_df.with_columns(pl.col("line").str.split(delim).alias("_l"))
    good_mask = pl.col("_l").list.len() == want
    if trailing:
        good_mask = good_mask & (pl.col("_l").list.last() == "")
    lines_df = lines_df.with_columns(good_mask.alias("_good"))
    free = [i for i, f in enumerate(fields) if base_field(f) in FREE_TEXT]
    free_idx = free[0] if len(free) == 1 else None
    fixed: dict[int, str] = {}
    quarantined: list[dict] = []
    odd = lines_df.filter(~pl.col("_good")).select("line_no", "line")
    placeholder = None
    if odd.height and free_idx is not None:  # without one free-text field no odd line is recovered
        # A recovered line is rewritten with its free-text delimiters masked, then split with all the others
        # in file order (steps must follow their job); a character absent from the slice does the masking.
        placeholder = next(
            (c for c in _MASKS if not lines_df["line"].str.contains(c, literal=True).any()), None
        )
    for no, line in odd.iter_rows():
        parts, reason = split_fields(line, delim, n, free_text=free_idx, trailing=trailing)
        if parts is not None and placeholder is None:
            parts, reason = None, "delimiter inside a free-text field, and no free character to mask it"
        if parts is None:
            if len(free) > 1 and line.count(delim) + 1 > want:
                reason += f" (free-text fields {', '.join(fields[i] for i in free)}: cannot tell which holds the delimiter)"
            quarantined.append({"line_no": no, "raw_text": line, "raw_bytes": None, "reason": reason})
        else:
            fixed[no] = delim.join(p.replace(delim, placeholder) for p in parts) + (delim if trailing else "")
    if odd.height:
        keys = list(fixed)
        lines_df = lines_df.filter(pl.col("_good") | pl.col("line_no").is_in(keys))
        if keys:
            lines_df = lines_df.with_columns(
                pl.col("line_no")
                .replace_strict(keys, list(fixed.values()), default=None, return_dtype=pl.String)
                .alias("_fixed")
            ).with_columns(
                pl.when(pl.col("_fixed").is_not_null())
                .then(pl.col("_fixed").str.split(delim))
                .otherwise(pl.col("_l"))
                .alias("_l")
            )
    split = lines_df.select(
        "line_no",
        pl.col("_l").list.to_struct(fields=fields + (["_trail"] if trailing else [])).alias("_f"),
    ).unnest("_f")
    if trailing:
        split = split.drop("_trail")
    if fixed and free_idx is not None:
        free_col = pl.col(fields[free_idx])
        split = split.with_columns(free_col.str.replace_all(placeholder, delim, literal=True))
    return split, quarantined


def _quarantine(data: bytes, rows: list[dict], offset: int = 0) -> pl.DataFrame:
    """Quarantine frame in line order, with the original bytes of lines that were not valid UTF-8 (`data`
    is the slice whose first line is line offset + 1)."""
    rows = sorted(rows, key=lambda r: r["line_no"])
    suspects = [r["line_no"] - offset for r in rows if "\ufffd" in r["raw_text"]]
    if suspects:
        raw = raw_lines(data, suspects)
        for r in rows:
            r["raw_bytes"] = raw.get(r["line_no"] - offset)
    return quarantine_frame(rows)


def _quarantine_every_line(data: bytes, reason: str, offset: int = 0) -> Parsed:
    """No rows: every non-blank line is kept in quarantine with the one reason the whole input failed."""
    rows = [
        {"line_no": no + offset, "raw_text": text, "raw_bytes": raw, "reason": reason}
        for no, text, raw in split_lines(data)
        if text.strip(BLANK)
    ]
    return Parsed(tables={}, quarantine=quarantine_frame(rows))


def _col(df: pl.DataFrame, name: str) -> pl.Expr:
    return pl.col(name) if name in df.columns else pl.lit(None, dtype=pl.String)


def _null_if_blank(e: pl.Expr) -> pl.Expr:
    e = e.str.strip_chars()
    return pl.when(e.is_in(["", "(null)", "Unknown", "None", "N/A", "None assigned"])).then(None).otherwise(e)


def _map_unique(
    values: pl.Series, fn: Callable[[str], tuple], names: list[str], dtypes: list
) -> pl.DataFrame:
    """Apply a scalar parser once per distinct value (TRES, State, ExitCode, Flags, ReqMem repeat a lot).

    Returns one column per output name, aligned with `values`; null inputs give null outputs. One join
    maps every output at once (a `replace_strict` per output hashes the text once each: 2.5x the time).
    """
    uniq = values.drop_nulls().unique()
    results = [fn(u) for u in uniq.to_list()]
    table = pl.DataFrame(
        [uniq.alias("_v")]
        + [
            pl.Series(name, [r[i] for r in results], dtype=dtype)
            for i, (name, dtype) in enumerate(zip(names, dtypes, strict=True))
        ]
    )
    return values.alias("_v").to_frame().join(table, on="_v", how="left", maintain_order="left").drop("_v")


def _tres_info(s: str) -> tuple:
    gpus, gtype, mig = gpu_count(s)
    tres = parse_tres(s)
    mem = tres.get("mem")
    mem_bytes = round(mem * 1048576.0) if mem is not None and 0 <= mem * 1048576.0 < 9.2e18 else None
    return gpus, gtype, mig, tres.get("billing"), mem_bytes


def _state_info(s: str) -> tuple:
    s = s.strip()
    if s in NULL_WORDS:
        return None, None
    return normalise_job_state(s), s


def _exit_info(s: str) -> tuple:
    try:
        return parse_exit_code(s)
    except ValueError:
        return None, None


def _sched_by(s: str) -> tuple:
    flags = set(s.split(","))
    for flag, who in (("SchedBackfill", "backfill"), ("SchedMain", "main"), ("SchedSubmit", "submit")):
        if flag in flags:
            return (who,)
    return (None,)


def _mem_info(s: str) -> tuple:
    try:
        return parse_req_mem(s)
    except ValueError:
        return None, None


def parse(
    data: bytes,
    *,
    cluster: str,
    snapshot_time: datetime | None = None,
    tz: ZoneInfo | None = None,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
) -> Parsed:
    """sacct output -> Parsed(jobs, job_steps, quarantine). Pure; never raises on any bytes.

    `tz` is the zone the times were printed in (UTC for live collection). Lines with the wrong number of
    fields are recovered when one free-text field can absorb the surplus, else quarantined; so are lines
    without a usable key (job id, Submit) and steps whose allocation line is not in the same output.
    """
    if slurm_json.is_json(data[:4096]):
        out = _parse_json(io.BytesIO(data), cluster=cluster, source=source)
        if isinstance(out, str):  # declined or not JSON: every line says why, as for unreadable text
            return _quarantine_every_line(data, out)
        return out
    try:
        return _parse(data, cluster=cluster, tz=tz, fmt=fmt, delimiter=delimiter, source=source)
    except Exception as exc:  # a parser bug must not lose the input: quarantine every line, say why
        return _quarantine_every_line(data, f"parser error: {type(exc).__name__}: {exc}")


# Jobs per slice of rendered JSON: each slice goes through the text parser on its own (steps follow their
# job within a slice), so a month of `sacct --json` never exists as Python objects at once.
JSON_JOBS_PER_SLICE = 20_000


def streams(head: bytes, fmt: str | None = None, delimiter: str | None = None) -> bool:
    """True for input that `parse_stream` reads from an open file instead of whole bytes (JSON: sacct's text
    never starts with `{`, whatever the format)."""
    return slurm_json.is_json(head)


def parse_stream(
    fh: IO[bytes],
    *,
    cluster: str,
    snapshot_time: datetime | None = None,
    tz: ZoneInfo | None = None,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
) -> Parsed:
    """`sacct --json` or a slurmrestd `/slurmdb/v0.0.XX/jobs` response -> the rows `parse` gives for its text.

    Each job is printed back as its sacct line (collectors/slurm_json.py) and typed by the text parser, so
    both forms share one set of rules; times are epoch seconds, so `tz` does not apply. A document of a
    version that is not read, or that is not JSON at all, quarantines one line saying so. The quarantine's
    line numbers count the rendered records (a job, then each of its steps), in document order.
    """
    out = _parse_json(fh, cluster=cluster, source=source)
    if isinstance(out, str):
        return Parsed(
            tables={},
            quarantine=quarantine_frame([{"line_no": 1, "raw_text": "", "raw_bytes": None, "reason": out}]),
        )
    return out


def _parse_json(fh: IO[bytes], *, cluster: str, source: str) -> Parsed | str:
    """The rows of a Slurm JSON document, or why the whole document is declined."""
    jobs_parts: list[pl.DataFrame] = []
    steps_parts: list[pl.DataFrame] = []
    q_parts: list[pl.DataFrame] = []
    lines: list[str] = []
    n_jobs = 0
    offset = 0
    meta: dict | None = None
    problem: str | None = None
    errors: list = []
    bad: list[dict] = []

    def flush() -> None:
        nonlocal lines, offset
        if not lines:
            return
        text = ("\n".join(lines) + "\n").encode()
        p = _parse(
            text,
            cluster=cluster,
            tz=UTC,
            fmt=slurm_json.FIELDS,
            delimiter=slurm_json.DELIMITER,
            source=source,
        )
        if "jobs" in p.tables:
            drop = slurm_json.UNRELIABLE.get(slurm_json.version(meta) or "", ())
            jobs_parts.append(p.tables["jobs"].drop(drop, strict=False))
            steps_parts.append(p.tables["job_steps"].drop(drop, strict=False))
        if p.quarantine.height:
            q_parts.append(p.quarantine.with_columns(pl.col("line_no") + offset))
        offset += len(lines)
        lines = []

    try:
        for key, value in slurm_json.iter_document(fh, "jobs"):
            if key == "meta" and isinstance(value, dict):
                meta = value
                problem = slurm_json.check_version(slurm_json.version(meta))
                if problem:
                    break
            elif key == "errors" and value:
                errors = value
            elif key == "jobs[]":
                if not isinstance(value, dict):
                    continue
                try:
                    lines += slurm_json.job_lines(value)
                except Exception as exc:  # one malformed record must not lose the others
                    bad.append(
                        {
                            "line_no": offset + len(lines) + 1,
                            "raw_text": json.dumps(value)[:4000],
                            "raw_bytes": None,
                            "reason": f"unreadable job record: {type(exc).__name__}: {exc}",
                        }
                    )
                    lines.append("")  # keeps the numbering; blank lines carry no record
                n_jobs += 1
                if n_jobs % JSON_JOBS_PER_SLICE == 0:
                    flush()
        if problem is None and meta is not None:
            problem = slurm_json.check_version(slurm_json.version(meta))
        if problem is None and meta is None:
            problem = "Slurm JSON without a meta member: its data parser version is unknown"
    except (ValueError, RecursionError) as exc:
        problem = f"not Slurm JSON: {exc}"
    if problem is not None:
        return problem
    flush()
    if errors and not jobs_parts:
        why = "; ".join(
            str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
            for e in errors
        )
        q_parts.append(
            quarantine_frame(
                [
                    {
                        "line_no": 0,
                        "raw_text": "",
                        "raw_bytes": None,
                        "reason": f"Slurm reported errors: {why}"[:4000],
                    }
                ]
            )
        )
    if bad:
        q_parts.append(quarantine_frame(bad))
    q = pl.concat(q_parts).sort("line_no") if q_parts else quarantine_frame()
    if not jobs_parts:
        return Parsed(tables={}, quarantine=q)
    jobs = pl.concat(jobs_parts, how="vertical_relaxed")
    attempt = output_attempts(jobs)
    jobs = jobs.with_columns(attempt.alias("attempt"), (attempt - 1).alias("restarts"))
    steps = pl.concat(steps_parts, how="vertical_relaxed")
    return Parsed(tables={"jobs": jobs, "job_steps": steps}, quarantine=q)


def _parse(data: bytes, *, cluster: str, tz, fmt, delimiter, source) -> Parsed:
    """The slices of `parse_slices` over the whole input, as one result (attempts ranked over all of it)."""
    parts = list(
        parse_slices(io.BytesIO(data), cluster=cluster, tz=tz, fmt=fmt, delimiter=delimiter, source=source)
    )
    if not parts:  # nothing but blank lines
        return Parsed(tables={}, quarantine=quarantine_frame())
    q = pl.concat([p.quarantine for p in parts]) if len(parts) > 1 else parts[0].quarantine
    loaded = [p for p in parts if "jobs" in p.tables]
    if not loaded:
        return Parsed(tables={}, quarantine=q)
    tables = {
        t: pl.concat([p.tables[t] for p in loaded], how="vertical_relaxed")
        if len(loaded) > 1
        else loaded[0].tables[t]
        for t in ("jobs", "job_steps")
    }
    # The rank within this output; after_upsert corrects it from all stored rows, and only rows whose
    # rank really differs (attempts seen in other windows) are rewritten there.
    attempt = output_attempts(tables["jobs"])
    tables["jobs"] = tables["jobs"].with_columns(attempt.alias("attempt"), (attempt - 1).alias("restarts"))
    return Parsed(tables=tables, quarantine=q)


# What after_upsert reads of the rows: `ingest`, which loads a file slice by slice, keeps these columns of
# every slice to run the hook once at the end.
HOOK_KEYS = {"jobs": ("cluster", "job_id_raw")}


def parse_slices(
    fh: IO[bytes],
    *,
    cluster: str,
    snapshot_time: datetime | None = None,
    tz: ZoneInfo | None = None,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
    slice_bytes: int | None = None,
    workers: int = 1,
) -> Iterator[Parsed]:
    """sacct text read from an open file in slices of about `slice_bytes`, each parsed on its own: the rows
    `parse` gives for the whole text, split in line order, with line numbers counted over the whole input.

    A slice ends before a job line (a JobID without `.`), so a job's steps are parsed with it; allocations
    at the end of a slice are carried to the next for steps printed further away. Each slice's `attempt` is
    its rank within that slice: the caller ranks attempts over everything it stored (after_upsert).

    With `workers` > 1, that many slices are parsed at once in threads (Polars releases the GIL), each
    without the carried allocations; the rare slice holding a step whose allocation it does not print, but
    the carried ones do, is parsed again, in order, with them. The slices come out in order either way,
    with the same rows.
    """
    head = fh.read(65536)  # what `layout` reads
    if not delimiter and not fmt:
        delimiter = detect_delimiter(head.decode("utf-8", errors="replace"))
    delim = delimiter or "|"
    fields, header_no, trailing, problem = layout(head, fmt, delimiter)
    key = fields.index("jobid") if "jobid" in fields else None
    blocks = _blocks(fh, head, slice_bytes or SLICE_BYTES, delim.encode("utf-8"), key)

    def one(block: bytes, offset: int, carry: dict[int, datetime]) -> tuple[Parsed, list, set[int]]:
        return _parse_slice(
            block, offset, fields, header_no, trailing, delim, tz, cluster, source, carry, problem
        )

    carry: dict[int, datetime] = {}
    offset = 0
    if workers <= 1:
        for block in blocks:
            parsed, tail, _ = one(block, offset, carry)
            carry = _carried(carry, tail)
            yield parsed
            offset += block.count(b"\n")
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="slurmscope-sacct-parse") as pool:
        running: deque = deque()
        try:
            for block in blocks:
                running.append((block, offset, pool.submit(one, block, offset, {})))
                offset += block.count(b"\n")
                if len(running) >= workers:
                    parsed, carry = _in_order(running.popleft(), carry, one)
                    yield parsed
            while running:
                parsed, carry = _in_order(running.popleft(), carry, one)
                yield parsed
        finally:
            for *_, future in running:
                future.cancel()


def _in_order(entry: tuple, carry: dict[int, datetime], one: Callable) -> tuple[Parsed, dict[int, datetime]]:
    """A slice parsed without the carried allocations, parsed again with them when they hold the job of a
    step it does not print the allocation of; and the carry for the next slice."""
    block, offset, future = entry
    parsed, tail, orphans = future.result()
    if not carry.keys().isdisjoint(orphans):
        parsed, tail, _ = one(block, offset, carry)
    return parsed, _carried(carry, tail)


def _carried(carry: dict[int, datetime], tail: list[tuple[int, datetime]]) -> dict[int, datetime]:
    """The allocations carried past a slice: the latest CARRY_ROWS, a job's latest allocation once."""
    out = dict(carry)
    for job_id, submit in tail:
        out.pop(job_id, None)
        out[job_id] = submit
    for job_id in list(out)[: max(0, len(out) - CARRY_ROWS)]:
        del out[job_id]
    return out


def _blocks(fh: IO[bytes], head: bytes, size: int, delim: bytes, key: int | None) -> Iterator[bytes]:
    """Whole lines of `head` + the rest of `fh`, at least `size` bytes a block (but the last), each block
    ending before a line whose field `key` (JobID) has no `.` (a job line), or after SLICE_SEEK_LINES more
    lines without one."""
    buf = head
    eof = False
    size = max(size, 1)
    while True:
        while not eof and len(buf) <= size:
            more = fh.read(max(size, 1 << 20))
            eof = not more
            buf += more
        cut = _cut(buf, size, delim, key)
        if cut is None and not eof:  # no end found yet: read on (bounded by the seek limit)
            more = fh.read(max(size, 1 << 20))
            eof = not more
            buf += more
            continue
        if cut is None:
            if buf:
                yield buf
            return
        yield buf[:cut]
        buf = buf[cut:]


def _cut(buf: bytes, size: int, delim: bytes, key: int | None) -> int | None:
    """Where a block of `buf` ends: the start of the first job line at or past `size` (None: not in `buf`)."""
    pos = buf.find(b"\n", size - 1) + 1
    seen = 0
    while pos and pos < len(buf):
        end = buf.find(b"\n", pos)
        if end < 0:
            return None  # the line is not complete yet
        if key is None or seen >= SLICE_SEEK_LINES:
            return pos
        parts = buf[pos:end].split(delim, key + 1)
        if len(parts) > key and b"." not in parts[key] and parts[key].strip(BLANK.encode()):
            return pos
        seen += 1
        pos = end + 1
    return None


def _parse_slice(
    block: bytes,
    offset: int,
    fields: list[str],
    header_no: int | None,
    trailing: bool,
    delim: str,
    tz,
    cluster: str,
    source: str,
    carry: dict[int, datetime],
    problem: str | None,
) -> tuple[Parsed, list[tuple[int, datetime]], set[int]]:
    """One slice's rows (jobs with their rank within the slice as `attempt`), the allocations it ends with
    (for `_carried`), and the jobs of steps whose allocation it does not print (looked up in `carry`)."""
    if problem is not None or not fields:
        return _quarantine_every_line(block, problem or "no sacct fields", offset), [], set()
    try:
        jobs, steps, q, tail, orphans = _parse_block(
            block, offset, fields, header_no, trailing, delim, tz, cluster, source, carry
        )
    except Exception as exc:  # a parser bug must not lose the input: quarantine the slice, say why
        return _quarantine_every_line(block, f"parser error: {type(exc).__name__}: {exc}", offset), [], set()
    if jobs is None:
        return Parsed(tables={}, quarantine=q), tail, orphans
    attempt = output_attempts(jobs)
    jobs = jobs.with_columns(attempt.alias("attempt"), (attempt - 1).alias("restarts"))
    return Parsed(tables={"jobs": jobs, "job_steps": steps}, quarantine=q), tail, orphans


def _parse_block(
    block: bytes,
    offset: int,
    fields: list[str],
    header_no: int | None,
    trailing: bool,
    delim: str,
    tz,
    cluster: str,
    source: str,
    carry: dict[int, datetime],
) -> tuple[pl.DataFrame | None, pl.DataFrame | None, pl.DataFrame, list[tuple[int, datetime]], set[int]]:
    """One slice (lines offset + 1, ...) -> jobs, steps (None when no line splits), quarantine, the
    allocations it ends with, the jobs of steps whose allocation it does not print."""
    lines_df = _read_lines(block, offset).filter(pl.col("line").str.strip_chars(BLANK) != "")
    if header_no is not None:
        lines_df = lines_df.filter(pl.col("line_no") != header_no)
    df, quarantined = _split_lines(lines_df, fields, delim, trailing)
    del lines_df
    jobs = steps = None
    tail: list[tuple[int, datetime]] = []
    orphans: set[int] = set()
    if df.height:
        jobs, steps, tail, orphans = _typed(
            df,
            fields=fields,
            delim=delim,
            trailing=trailing,
            tz=tz,
            cluster=cluster,
            source=source,
            carry=carry,
            quarantined=quarantined,
        )
    return jobs, steps, _quarantine(block, quarantined, offset), tail, orphans


def step_submit_times(typed: pl.DataFrame) -> pl.Series:
    """For each step line, the Submit of the latest allocation line of the same job printed before it.

    sacct prints a job's steps right after its allocation line, so the previous allocation line (a plain
    gather) answers nearly every step; the per-job window, a group-by, runs only over the jobs of the
    steps that gather did not resolve.
    """
    frame = typed.select(
        "job_id_raw",
        "_is_step",
        pl.when(~pl.col("_is_step")).then(pl.col("submit_time")).alias("_alloc"),
        pl.when(~pl.col("_is_step"))
        .then(pl.int_range(pl.len(), dtype=pl.Int64))
        .forward_fill()
        .alias("_prev"),
    )
    near = frame.select(
        pl.when(
            pl.col("_is_step") & (pl.col("job_id_raw").gather(pl.col("_prev")) == pl.col("job_id_raw"))
        ).then(pl.col("_alloc").gather(pl.col("_prev")))
    ).to_series()
    open_steps = frame["_is_step"] & near.is_null()
    if open_steps.any():
        rows = frame["job_id_raw"].is_in(frame["job_id_raw"].filter(open_steps).unique().implode())
        far = frame.filter(rows).select(pl.col("_alloc").forward_fill().over("job_id_raw")).to_series()
        idx = rows.arg_true()
        near = near.scatter(idx, near.gather(idx).fill_null(far))
    return near.alias("job_submit_time")


def output_attempts(jobs: pl.DataFrame) -> pl.Series:
    """Dense rank of submit time per (cluster, job_id_raw) within this output, as an Int32 series.

    Almost every job id occurs once, so the rank (a window over all rows, the slowest step of a large
    parse) is computed only on the rows whose job id repeats; the rest are attempt 1.
    """
    attempt = pl.Series("attempt", [1], dtype=pl.Int32).new_from_index(0, jobs.height)
    repeated = jobs["job_id_raw"].is_duplicated()
    if repeated.any():
        rank = jobs.filter(repeated).select(
            pl.col("submit_time").rank("dense").over("cluster", "job_id_raw").cast(pl.Int32)
        )
        attempt = attempt.scatter(repeated.arg_true(), rank.to_series())
    return attempt


def _typed(
    df: pl.DataFrame,
    *,
    fields: list[str],
    delim: str,
    trailing: bool,
    tz,
    cluster: str,
    source: str,
    carry: dict[int, datetime],
    quarantined: list[dict],
) -> tuple[pl.DataFrame, pl.DataFrame, list[tuple[int, datetime]], set[int]]:
    """Split fields (String columns) -> typed jobs and steps frames, the allocations the slice ends with,
    the jobs of steps whose allocation the slice does not print; unusable lines go to `quarantined`."""
    has = set(fields)
    tres_field = "alloctres" if "alloctres" in has else ("allocgres" if "allocgres" in has else None)
    jobid = _col(df, "jobid").str.strip_chars()
    base = (
        df.with_columns(
            jobid.alias("_jobid"),
            _col(df, "jobidraw").str.strip_chars().alias("_jobidraw"),
            (_col(df, tres_field) if tres_field else pl.lit(None, pl.String))
            .str.strip_chars()
            .alias("_tres"),
        )
        .with_columns(
            pl.col("_jobid").str.find(".", literal=True).alias("_dot"),
        )
        .with_columns(
            pl.col("_dot").is_not_null().alias("_is_step"),
            pl.when(pl.col("_dot").is_not_null())
            .then(pl.col("_jobid").str.slice(0, pl.col("_dot")))
            .otherwise(pl.col("_jobid"))
            .alias("_base"),
            pl.col("_jobid").str.slice(pl.col("_dot") + 1).alias("_step"),
            pl.col("_jobidraw").str.split_exact(".", 1).struct.field("field_0").alias("_rawbase"),
        )
    )
    # Arrays `123_4` / `123_[5-9%2]`, het components `123+1`: split on the literal separator (no regex).
    base = base.with_columns(
        pl.col("_base").str.split_exact("_", 1).alias("_arr"),
        pl.col("_base").str.split_exact("+", 1).alias("_het"),
    )
    arr, het = pl.col("_arr"), pl.col("_het")
    base = base.with_columns(
        arr.struct.field("field_0").cast(pl.Int64, strict=False).alias("_arr_id"),
        arr.struct.field("field_1").alias("_arr_task"),
        het.struct.field("field_0").cast(pl.Int64, strict=False).alias("_het_id"),
        het.struct.field("field_1").cast(pl.Int64, strict=False).alias("_het_off"),
    ).drop("_arr", "_het")
    is_arr = pl.col("_arr_task").is_not_null() & pl.col("_arr_id").is_not_null()
    is_het = pl.col("_het_off").is_not_null() & pl.col("_het_id").is_not_null()
    # job_id_raw: JobIDRaw when present; else the job id itself, or leader + offset for a het component
    # (Slurm numbers het components consecutively); an array task without JobIDRaw has no knowable id.
    derived_raw = (
        pl.when(is_het)
        .then(pl.col("_het_id") + pl.col("_het_off"))
        .when(is_arr)
        .then(None)
        .otherwise(pl.col("_base").cast(pl.Int64, strict=False))
    )
    base = base.with_columns(
        (int_expr(pl.col("_rawbase")) if "jobidraw" in has else derived_raw).alias("job_id_raw"),
        pl.when(is_arr).then(pl.col("_arr_id")).alias("array_job_id"),
        pl.when(is_arr).then(pl.col("_arr_task")).alias("array_task_id"),
        pl.when(is_het).then(pl.col("_het_id")).alias("het_job_id"),
        pl.when(is_het).then(pl.col("_het_off")).cast(pl.Int32, strict=False).alias("het_job_offset"),
    )
    base = parse_time_columns(base, {"submit_time": "submit", "start_time": "start", "end_time": "end"}, tz)
    base = parse_duration_columns(base, {"elapsed_seconds": "elapsed"})
    mapped = []
    if tres_field:
        mapped.append(
            _map_unique(
                base["_tres"],
                _tres_info,
                ["gpus", "gpu_type", "mig_slices", "billing", "alloc_mem_bytes"],
                [pl.Int32, pl.String, pl.Int32, pl.Float64, pl.Int64],
            )
        )
    if "state" in has:
        mapped.append(_map_unique(base["state"], _state_info, ["state", "state_raw"], [pl.String, pl.String]))
    if "exitcode" in has:
        mapped.append(
            _map_unique(base["exitcode"], _exit_info, ["exit_code", "signal"], [pl.Int32, pl.Int32])
        )
    base = base.rename({c: f"_in_{c}" for c in ("state", "flags") if c in base.columns})
    if mapped:
        base = pl.concat([base, *mapped], how="horizontal")
    for field in ("tresusageintot", "tresusageinmax"):
        if field in has:
            wanted = {f"_u_{col}": name for col, f, name in TRES_USAGE_FIELDS if f == field}
            base = parse_tres_usage_columns(base, field, wanted, f"_ok_{field}")
    base = parse_cpu_time_columns(base, {f"_u_{k}": v for k, v in CPU_TIME_FIELDS.items() if v in has})
    base = parse_size_columns(base, {f"_u_{k}": v for k, v in SIZE_FIELDS.items() if v in has})
    base = base.with_columns(
        int_expr(pl.col(src)).alias(f"_u_{out}") for out, src in COUNT_FIELDS.items() if src in has
    )
    # (the rule, a cheaper superset of it that picks the rows the rule is evaluated on, the field)
    bad_values = [
        (unreadable(src, f"_u_{out}"), pl.col(f"_u_{out}").is_null() & (pl.col(src).str.len_bytes() > 0), src)
        for out, src in {**CPU_TIME_FIELDS, **SIZE_FIELDS, **COUNT_FIELDS}.items()
        if src in has
    ] + [(pl.col(f"_ok_{f}").not_(),) * 2 + (f,) for f in ("tresusageintot", "tresusageinmax") if f in has]
    if tres_field:
        base = base.with_columns(pl.col("gpus").fill_null(0), pl.col("mig_slices").fill_null(0))

    cluster_col = (
        pl.coalesce(_null_if_blank(pl.col("cluster")), pl.lit(cluster))
        if "cluster" in has
        else pl.lit(cluster)
    )
    pick = {auth: auth if auth in has or other not in has else other for auth, other in ALIAS_PAIRS}
    node_field, cpu_field = pick["nnodes"], pick["ncpus"]
    nodes = int_expr(_col(df, node_field), pl.Int64)
    if node_field == "allocnodes":  # 0 = never allocated, not a request for 0 nodes (ALIAS_PAIRS)
        nodes = pl.when(nodes == 0).then(None).otherwise(nodes)
    cpus = int_expr(_col(df, cpu_field), pl.Int64)
    same = pl.col  # columns already typed above keep their name

    common: dict[str, pl.Expr] = {
        "cluster": cluster_col,
        "name": _col(df, "jobname"),
        "state": same("state") if "state" in has else None,
        "state_raw": same("state_raw") if "state" in has else None,
        "exit_code": same("exit_code") if "exitcode" in has else None,
        "signal": same("signal") if "exitcode" in has else None,
        "start_time": same("start_time"),
        "end_time": same("end_time"),
        "elapsed_seconds": same("elapsed_seconds"),
        # beyond Int32 is as unreadable as a non-number: NULL (a strict cast would fail the whole parse)
        "nodes": nodes.cast(pl.Int32, strict=False),
        "cpus": cpus.cast(pl.Int32, strict=False),
        "gpus": same("gpus") if tres_field else None,
        "alloc_tres": pl.col("_tres"),
        "node_list": _null_if_blank(_col(df, "nodelist")),
        "source": pl.lit(source),
    }
    # Only write what the input has (a narrower capture must not blank out a wider one's values).
    present = {
        "name": "jobname",
        "state": "state",
        "state_raw": "state",
        "exit_code": "exitcode",
        "signal": "exitcode",
        "start_time": "start",
        "end_time": "end",
        "elapsed_seconds": "elapsed",
        "nodes": node_field,
        "cpus": cpu_field,
        "gpus": tres_field,
        "alloc_tres": tres_field,
        "node_list": "nodelist",
    }
    common = {k: v for k, v in common.items() if k not in present or present[k] in has}

    mem_mult = (
        (
            pl.when(pl.col("_mem_scope") == "node")
            .then(nodes.cast(pl.Float64))
            .when(pl.col("_mem_scope") == "cpu")
            .then(cpus.cast(pl.Float64))
            .otherwise(1.0)
        )
        if "reqmem" in has
        else pl.lit(1.0)
    )
    mem_total = (pl.col("_mem_mb") * mem_mult * 1048576.0) if "reqmem" in has else pl.lit(None, pl.Float64)
    job_only: dict[str, pl.Expr] = {
        "user": _null_if_blank(_col(df, "user")),
        "uid": int_expr(_col(df, "uid")),
        "account": _null_if_blank(_col(df, "account")),
        "partition": _null_if_blank(_col(df, "partition")),
        "qos": _null_if_blank(_col(df, "qos")),
        "reason": _null_if_blank(_col(df, "reason")),
        "eligible_time": same("eligible_time"),
        "timelimit_seconds": same("timelimit_seconds"),
        "gpu_type": same("gpu_type") if tres_field else None,
        "mig_slices": same("mig_slices") if tres_field else None,
        "req_mem_bytes": pl.when(mem_total < 9.2e18).then(mem_total.round(0)).otherwise(None).cast(pl.Int64),
        "billing": same("billing") if tres_field else None,
        "sched_by": same("sched_by") if "flags" in has else None,
        "flags": _null_if_blank(pl.col("_in_flags")) if "flags" in has else None,
        "priority": int_expr(_col(df, "priority")),
        "req_mem_scope": pl.col("_mem_scope") if "reqmem" in has else None,
        "alloc_mem_bytes": same("alloc_mem_bytes") if tres_field else None,
        "req_tres": _null_if_blank(_col(df, "reqtres")),
        "comment": _null_if_blank(_col(df, "comment")),
        "admin_comment": _null_if_blank(_col(df, "admincomment")),
        **{c: pl.col(f"_u_{c}") if f in has else None for c, f in CPU_TIME_FIELDS.items()},
        "consumed_energy_joules": pl.col("_u_consumed_energy_joules") if "consumedenergyraw" in has else None,
    }
    job_present = {
        "user": "user",
        "uid": "uid",
        "account": "account",
        "partition": "partition",
        "qos": "qos",
        "reason": "reason",
        "eligible_time": "eligible",
        "timelimit_seconds": "timelimit",
        "gpu_type": tres_field,
        "mig_slices": tres_field,
        "req_mem_bytes": "reqmem",
        "billing": tres_field,
        "sched_by": "flags",
        "flags": "flags",
        "priority": "priority",
        "req_mem_scope": "reqmem",
        "alloc_mem_bytes": tres_field,
        "req_tres": "reqtres",
        "comment": "comment",
        "admin_comment": "admincomment",
        **CPU_TIME_FIELDS,
        "consumed_energy_joules": "consumedenergyraw",
    }
    job_only = {k: v for k, v in job_only.items() if job_present[k] in has}
    step_present = {
        **COUNT_FIELDS,
        **CPU_TIME_FIELDS,
        **SIZE_FIELDS,
        "tres_usage_in_tot": "tresusageintot",
        "tres_usage_in_max": "tresusageinmax",
        **{col: field for col, field, _ in TRES_USAGE_FIELDS},
    }
    step_only: dict[str, pl.Expr] = {
        c: pl.col(f"_u_{c}")
        for c, f in step_present.items()
        if f in has and c not in ("tres_usage_in_tot", "tres_usage_in_max")
    }
    step_only.update(
        {
            c: _null_if_blank(pl.col(f))
            for c, f in (("tres_usage_in_tot", "tresusageintot"), ("tres_usage_in_max", "tresusageinmax"))
            if f in has
        }
    )
    step_only = {
        c: (v.cast(pl.Int64) if c.endswith("_bytes") else v.cast(pl.Int32) if c == "ntasks" else v)
        for c, v in step_only.items()
    }

    typed = base.with_columns(**common).with_columns(**{f"_step_{c}": v for c, v in step_only.items()})
    # A PENDING attempt holds no allocation, but sacct 22.05 may print the previous attempt's AllocTRES and
    # Flags on a requeued job that waits again: never count GPUs or a scheduler (_job_columns) for it.
    pending = pl.col("state") == "PENDING"
    fix = {
        c: pl.when(pending).then(v).otherwise(pl.col(c))
        for c, v in (
            ("gpus", pl.lit(0, pl.Int32)),
            ("mig_slices", pl.lit(0, pl.Int32)),
            ("gpu_type", pl.lit(None, pl.String)),
        )
        if c in typed.columns
    }
    if fix and "state" in typed.columns:
        typed = typed.with_columns(**fix)
    # A step belongs to the allocation attempt printed before it (sacct prints each job, then its steps).
    typed = typed.with_columns(step_submit_times(typed).alias("job_submit_time"))
    orphans = set(
        typed.filter(pl.col("_is_step") & pl.col("job_submit_time").is_null())["job_id_raw"]
        .drop_nulls()
        .to_list()
    )
    if not carry.keys().isdisjoint(orphans):
        keys = list(carry)
        typed = typed.with_columns(
            pl.coalesce(
                "job_submit_time",
                pl.when(pl.col("_is_step")).then(
                    pl.col("job_id_raw").replace_strict(
                        keys, [carry[k] for k in keys], default=None, return_dtype=pl.Datetime("us", "UTC")
                    )
                ),
            ).alias("job_submit_time")
        )
    # The latest allocations, for steps printed in a later slice (those with a Submit only: a step takes the
    # latest allocation of its job that has one).
    tail_allocs = (
        typed.select("job_id_raw", "submit_time", "_is_step")
        .filter(
            ~pl.col("_is_step") & pl.col("job_id_raw").is_not_null() & pl.col("submit_time").is_not_null()
        )
        .tail(CARRY_ROWS)
    )
    tail = list(zip(tail_allocs["job_id_raw"].to_list(), tail_allocs["submit_time"].to_list(), strict=True))

    rules = [
        (pl.col("_jobid").is_null() | (pl.col("_jobid") == ""), "empty JobID"),
        (
            pl.col("job_id_raw").is_null()
            & (pl.col("array_job_id").is_not_null())
            & pl.lit("jobidraw" not in has),
            "array task without a JobIDRaw column: its job id is unknown (add JobIDRaw to --format)",
        ),
        (pl.col("job_id_raw").is_null(), "JobID/JobIDRaw is not a Slurm job id"),
        (
            ~pl.col("_is_step") & pl.col("submit_time").is_null(),
            "job without a Submit time (the key of the jobs table)",
        ),
        (pl.col("_is_step") & (pl.col("_step").is_null() | (pl.col("_step") == "")), "empty step id"),
        (
            pl.col("_is_step") & pl.col("job_submit_time").is_null(),
            "step without its job's allocation line earlier in the same output",
        ),
    ]
    reason = pl.when(rules[0][0]).then(pl.lit(rules[0][1]))
    for rule, why in rules[1:]:
        reason = reason.when(rule).then(pl.lit(why))
    for bad, _, field in bad_values:
        shape = (
            _SHAPES.get(field)
            or _SHAPES[
                {
                    "usercpu": "totalcpu",
                    "systemcpu": "totalcpu",
                    "averss": "maxrss",
                    "consumedenergyraw": "ntasks",
                    "tresusageinmax": "tresusageintot",
                }[field]
            ]
        )
        reason = reason.when(bad).then(
            pl.format(f"{PRINTED[field]} {{}}: not {shape}", pl.col(field).str.strip_chars())
        )
    reason = reason.otherwise(None).alias("_reason")
    # Polars evaluates every branch of a when/then chain on every row (a formatted message per usage field
    # per line): the chain runs only on the rows a cheap superset of its rules picks.
    maybe = pl.any_horizontal([r for r, _ in rules] + [cheap for _, cheap, _ in bad_values]).fill_null(False)
    suspects = typed.select(maybe).to_series().arg_true()
    reasons = pl.Series("_reason", [None], dtype=pl.String).new_from_index(0, typed.height)
    if suspects.len():
        reasons = reasons.scatter(suspects, typed[suspects].select(reason).to_series())
    typed = typed.with_columns(reasons)
    has_bad = typed["_reason"].is_not_null().any()
    bad = typed.filter(pl.col("_reason").is_not_null()) if has_bad else typed.clear()
    if bad.height:
        # The line had exactly the expected fields, so joining them gives back its text: from `df`, the
        # split fields as printed (typing has rewritten some columns of `typed`, e.g. State).
        text = pl.concat_str([pl.col(f).fill_null("") for f in fields], separator=delim)
        if trailing:
            text = text + pl.lit(delim)
        texts = dict(
            df.filter(pl.col("line_no").is_in(bad["line_no"].implode()))
            .select("line_no", text.alias("_text"))
            .iter_rows()
        )
        for no, why in bad.select("line_no", "_reason").iter_rows():
            quarantined.append({"line_no": no, "raw_text": texts[no], "raw_bytes": None, "reason": why})
    del bad

    job_cols = [
        "cluster",
        "job_id",
        "job_id_raw",
        "submit_time",
        "array_job_id",
        "array_task_id",
        "het_job_id",
        "het_job_offset",
        *[c for c in common if c != "cluster"],
    ]
    step_cols = [
        "cluster",
        "job_id_raw",
        "job_submit_time",
        "step_id",
        "job_id",
        *[c for c in common if c != "cluster"],
        *[f"_step_{c}" for c in step_only],
    ]
    # What only job lines store is read from job lines only (a step prints no Eligible, Timelimit, Flags,
    # ReqMem, User, ...): these text columns stay until the split.
    job_sources = JOB_PARSED.union(*(e.meta.root_names() for e in job_only.values()))
    job_inputs = [c for c in typed.columns if c in job_sources]
    # Keep only the output columns before filtering, so the raw text columns are freed, not copied.
    keep = [c for c in dict.fromkeys(job_cols + step_cols + job_inputs) if c not in ("job_id", "step_id")]
    typed = typed.select(
        *keep, "_is_step", "_reason", pl.col("_jobid").alias("job_id"), pl.col("_step").alias("step_id")
    )
    del base, df
    ok = pl.col("_reason").is_null()
    jobs = _job_columns(typed.filter(ok & ~pl.col("_is_step")), job_only, has, tz)
    jobs = jobs.select(list(dict.fromkeys(job_cols + list(job_only))))
    steps = (
        typed.filter(ok & pl.col("_is_step"))
        .select(list(dict.fromkeys(step_cols)))
        .rename({f"_step_{c}": c for c in step_only})
    )
    del typed
    return jobs, steps, tail, orphans


# The text columns _job_columns parses itself (the job_only expressions name the rest).
JOB_PARSED = frozenset({"eligible", "timelimit", "_in_flags", "reqmem"})


def _job_columns(jobs: pl.DataFrame, job_only: dict[str, pl.Expr], has: set[str], tz) -> pl.DataFrame:
    """The columns only the jobs table has, typed on the job lines alone (three in four lines are steps)."""
    jobs = parse_time_columns(jobs, {"eligible_time": "eligible"} if "eligible" in has else {}, tz)
    jobs = parse_duration_columns(jobs, {"timelimit_seconds": "timelimit"} if "timelimit" in has else {})
    mapped = []
    if "flags" in has:
        mapped.append(_map_unique(jobs["_in_flags"], _sched_by, ["sched_by"], [pl.String]))
    if "reqmem" in has:
        mapped.append(
            _map_unique(jobs["reqmem"], _mem_info, ["_mem_mb", "_mem_scope"], [pl.Float64, pl.String])
        )
    if mapped:
        jobs = pl.concat([jobs, *mapped], how="horizontal")
    jobs = jobs.with_columns(**job_only)
    if "sched_by" in jobs.columns and "state" in jobs.columns:  # the PENDING rule of _typed
        pending = pl.col("state") == "PENDING"
        jobs = jobs.with_columns(
            pl.when(pending).then(pl.lit(None, pl.String)).otherwise(pl.col("sched_by")).alias("sched_by")
        )
    return jobs


# ----------------------------------------------------------------------------------------- attempts

ATTEMPT_SQL = """
UPDATE jobs SET attempt = r.rn, restarts = r.rn - 1
FROM (
    SELECT j.cluster, j.job_id_raw, j.submit_time,
           row_number() OVER (PARTITION BY j.cluster, j.job_id_raw ORDER BY j.submit_time) AS rn
    FROM jobs j
    JOIN (SELECT DISTINCT cluster, job_id_raw FROM _affected_jobs) a
      ON j.cluster = a.cluster AND j.job_id_raw = a.job_id_raw
) r
WHERE jobs.cluster = r.cluster AND jobs.job_id_raw = r.job_id_raw AND jobs.submit_time = r.submit_time
  AND (jobs.attempt IS DISTINCT FROM r.rn OR jobs.restarts IS DISTINCT FROM r.rn - 1)
"""


def recompute_attempts(con: duckdb.DuckDBPyConnection, affected: pl.DataFrame) -> None:
    """attempt = rank by submit time among ALL stored rows of each affected (cluster, job_id_raw).

    restarts = attempt - 1: the requeues before this attempt that the database has seen (sacct 22.05 has
    no Restarts field, and a window may hold only some attempts).

    A window holds only some attempts of a requeued job, so the rank must come from the table. Runs
    inside the load transaction, over the affected jobs only.
    """
    if affected.height == 0:
        return
    con.register("_affected_jobs", affected.select("cluster", "job_id_raw").unique().to_arrow())
    try:
        con.execute(ATTEMPT_SQL)
    finally:
        con.unregister("_affected_jobs")


def after_upsert(
    parsed: Parsed, *, slices_into_empty: bool = False
) -> Callable[[duckdb.DuckDBPyConnection], None]:
    """The hook base.load runs inside the transaction: recompute attempts of the jobs just loaded.

    `slices_into_empty`: `parsed` holds the keys of each slice of one load (unique within a slice) into a
    jobs table that held no row before it. A slice ranks the attempts it prints, so only a job printed in
    more than one slice can be ranked wrong (1M lines: 0.3 s less on one core after the last slice).
    """
    jobs = parsed.tables.get("jobs")
    if jobs is not None and slices_into_empty:
        jobs = jobs.filter(pl.struct("cluster", "job_id_raw").is_duplicated())

    def hook(con: duckdb.DuckDBPyConnection) -> None:
        if jobs is not None:
            recompute_attempts(con, jobs)

    return hook


# ------------------------------------------------------------------------------------- live helpers


def pending_job_ids(con: duckdb.DuckDBPyConnection, cluster: str, limit: int = 20000) -> list[str]:
    """Jobs a -S/-E window can miss: those in the latest squeue snapshot and those stored as PENDING."""
    rows = con.execute(
        """
        WITH snap AS (SELECT max(snapshot_time) AS t FROM pending_jobs WHERE cluster = ?)
        SELECT DISTINCT id FROM (
            SELECT coalesce(CAST(p.job_id_raw AS VARCHAR), regexp_extract(p.job_id, '^[0-9]+(_[0-9]+)?')) AS id
            FROM pending_jobs p, snap WHERE p.cluster = ? AND p.snapshot_time = snap.t
            UNION ALL
            SELECT CAST(job_id_raw AS VARCHAR) FROM jobs WHERE cluster = ? AND state = 'PENDING'
        ) WHERE id IS NOT NULL AND id <> ''
        ORDER BY id LIMIT ?
        """,
        [cluster, cluster, cluster, limit],
    ).fetchall()
    return [r[0] for r in rows]


def missing_job_ids(
    con: duckdb.DuckDBPyConnection, cluster: str, since: datetime, limit: int = 100_000
) -> list[str]:
    """Job ids missing between the lowest and highest stored id of the jobs submitted since `since`.

    Slurm numbers jobs in submission order, so a hole is a job no -S/-E window printed: one cancelled (or
    still held) before it was ever eligible, which slurmdbd never selects by time. Asked for by id, such a
    job is found; an id that never reached accounting costs one empty answer.
    """
    rows = con.execute(
        """
        WITH ids AS (SELECT DISTINCT job_id_raw AS id FROM jobs WHERE cluster = ? AND submit_time >= ?),
        bounds AS (SELECT min(id) AS lo, max(id) AS hi FROM ids)
        SELECT CAST(g.range AS VARCHAR) FROM bounds, range(bounds.lo, bounds.hi) AS g
        WHERE bounds.lo IS NOT NULL AND g.range NOT IN (SELECT id FROM ids)
        ORDER BY g.range LIMIT ?
        """,
        [cluster, since, limit],
    ).fetchall()
    return [r[0] for r in rows]


_ID = re.compile(r"^\d+(_\d+)?$")


def valid_job_ids(ids: Iterable[str]) -> list[str]:
    """Only plain ids reach the command line (an argument list, but sacct should not see junk either)."""
    return [i for i in ids if _ID.match(i)]
