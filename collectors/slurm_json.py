"""Slurm's JSON (`sacct|sinfo|squeue|sdiag --json`, slurmrestd) read as a stream, turned into the text's values.

Why it is shaped like this:
- A month of `sacct --json` is gigabytes, and `json.load` holds about ten times the text as Python
  objects. `iter_document` walks the top-level object with the standard library's `raw_decode`: small
  members (`meta`, `errors`, `warnings`) are decoded whole, the one large array (`jobs`) element by
  element from a growing buffer, so only one job's objects and one buffer slice are alive at a time.
- The JSON and text forms of the same job must give the same rows. Rather than a second set of typing
  rules, each job (and each of its steps) is printed back as the sacct `--parsable2` line that `sacct
  --format=JSON_FIELDS` prints for it, and those lines go through the text parser (collectors/sacct.py).
  The JSON meaning of each field, per data parser version, is therefore in one place: `job_lines`.
- The same holds for slurmctld's documents (`sinfo --json`/`squeue --json` of 22.05, `scontrol show
  nodes --json`, slurmrestd `/slurm/v0.0.XX/nodes`, `/jobs`, `/diag`): collectors/sinfo.py, squeue.py
  and sdiag.py give each node, job or statistics block the values their text prints and type them with
  the text's own rules; `read_array` is their shared streaming loop.
- Versions differ in shape, not meaning: v0.0.38 (Slurm 22.05) prints plain numbers, v0.0.39 and later
  wrap most numbers as `{"set", "infinite", "number"}` and states as lists. `READ` (jobs from slurmdbd),
  `READ_NODES`, `READ_JOBS` and `READ_DIAG` list the versions checked against real output per document
  (docs/collectors.md); any other version is declined by name, because a field that moved would silently
  read as empty.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import IO, Any

import polars as pl
from slurmscope.collectors.base import quarantine_frame
from slurmscope.collectors.parsing import split_lines
from slurmscope.collectors.slurm_format import is_blank

# The versions read per document, each checked against real output (docs/collectors.md, "JSON and
# slurmrestd"): slurmdbd's jobs (sacct), slurmctld's nodes (sinfo), jobs (squeue) and statistics (sdiag).
READ = ("v0.0.38", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")
READ_NODES = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")
READ_JOBS = READ_NODES
READ_DIAG = ("v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41")
# Rows per slice of a streamed document: each slice becomes a DataFrame, so a large document is never
# held as Python objects at once.
ROWS_PER_SLICE = 20_000
# The sacct fields the rendered lines carry, in order; UID is not among them (no JSON version prints a
# job's uid), so a JSON load never blanks out the uid a text load stored.
FIELDS = (
    "JobID,JobIDRaw,Cluster,Partition,QOS,Account,User,Submit,Eligible,Start,End,Elapsed,Timelimit,"
    "State,ExitCode,NNodes,NCPUS,ReqMem,AllocTRES,NodeList,Flags,Priority,Reason,"
    "NTasks,TotalCPU,UserCPU,SystemCPU,MaxRSS,AveRSS,ReqTRES,TRESUsageInTot,TRESUsageInMax,ConsumedEnergyRaw,"
    "Comment,AdminComment,JobName"
)
DELIMITER = "\x1f"
# Columns a version prints wrong, so a JSON load leaves them as a text load stored them (or empty):
# Slurm 22.05's v0.0.38 prints every job's and step's exit_code as SUCCESS/0, failed ones too (seen on
# the test bed: `exit 1` is 1:0 in sacct's text and {"status": "SUCCESS", "return_code": 0} in --json).
UNRELIABLE = {"v0.0.38": ("exit_code", "signal")}
BLOCK = 1 << 20

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")


class JsonVersionError(ValueError):
    """JSON of a data parser version this release does not read; the message names it."""


def is_json(head: bytes) -> bool:
    """Slurm's JSON output starts with `{` (after white space); its text outputs never do."""
    return head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] == b"{"


_VERSION_PATTERNS = (
    re.compile(rb'"data_parser"\s*:\s*"data_parser/(v\d+\.\d+\.\d+)"'),
    re.compile(rb'"type"\s*:\s*"openapi\\?/dbv(\d+\.\d+\.\d+)"'),  # 22.05 escapes the slash
    re.compile(rb'"type"\s*:\s*"openapi\\?/v(\d+\.\d+\.\d+)"'),
)


def version(meta: dict | None) -> str | None:
    """The data parser version of a document's `meta` (`v0.0.41`), or None when it names none.

    23.02's commands name it under `meta.plugins` (rivosinc's `sdiag --json` of 23.02.4), later ones and
    slurmrestd under `meta.plugin`, 22.05 as the openapi plugin's type (`openapi/v0.0.38`).
    """
    meta = meta or {}
    plugin = meta.get("plugin") or meta.get("plugins") or {}
    if not isinstance(plugin, dict):
        return None
    dp = plugin.get("data_parser") or ""
    if dp.startswith("data_parser/"):
        return dp.removeprefix("data_parser/")
    t = plugin.get("type") or ""
    for prefix in ("openapi/dbv", "openapi/v"):
        if t.startswith(prefix):
            return "v" + t.removeprefix(prefix)
    return None


def sniff_version(head: bytes) -> str | None:
    """The version named in the first bytes of a document (meta comes first in Slurm's output), if any."""
    for pat in _VERSION_PATTERNS:
        m = pat.search(head)
        if m:
            v = m.group(1).decode()
            return v if v.startswith("v") else "v" + v
    return None


def check_version(
    v: str | None, read: tuple[str, ...] = READ, capture: str = "the text form (sacct --parsable2)"
) -> str | None:
    """Why a document of version `v` is declined (None when it is read), naming what to capture instead."""
    if v is None or v in read:
        return None
    return f"Slurm JSON of data parser {v} is not read (read: {', '.join(read)}); capture {capture} instead"


def iter_document(fh: IO[bytes], array: str = "jobs") -> Iterator[tuple[str, Any]]:
    """Yield (key, value) for each top-level member, and ("<array>[]", element) for each element of `array`
    (an empty `array` is yielded as itself: ("<array>", [])).

    Raises ValueError on input that is not one JSON object. Reads `fh` in blocks; the buffer holds at
    most one element beyond what has been yielded.
    """
    buf = ""
    pos = 0
    eof = False
    decoder = _DECODER
    tail = b""

    def more() -> bool:
        nonlocal buf, pos, eof, tail
        if eof:
            return False
        chunk = fh.read(BLOCK)
        if not chunk:
            eof = True
            if tail:
                buf = buf[pos:] + tail.decode("utf-8", errors="replace")
                pos, tail = 0, b""
            return False
        chunk = tail + chunk
        # keep an incomplete UTF-8 sequence for the next block
        cut = len(chunk)
        for back in range(1, min(4, len(chunk)) + 1):
            b = chunk[-back]
            if b & 0xC0 != 0x80:
                need = 1 if b < 0x80 else 2 if b >> 5 == 6 else 3 if b >> 4 == 14 else 4
                if need > back:
                    cut = len(chunk) - back
                break
        tail = chunk[cut:]
        buf = buf[pos:] + chunk[:cut].decode("utf-8", errors="replace")
        pos = 0
        return True

    def skip_ws() -> None:
        nonlocal pos
        while True:
            pos = _WS.match(buf, pos).end()
            if pos < len(buf) or not more():
                return

    def expect(ch: str) -> None:
        nonlocal pos
        skip_ws()
        if pos >= len(buf) or buf[pos] != ch:
            got = buf[pos : pos + 20] if pos < len(buf) else "end of input"
            raise ValueError(f"JSON: expected {ch!r}, got {got!r}")
        pos += 1

    def value() -> Any:
        nonlocal pos
        while True:
            skip_ws()
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                # an incomplete value at the end of the buffer: read on; a real error stays one at EOF
                if not more():
                    raise ValueError(f"JSON: {exc.msg} at character {exc.pos}") from None
                continue
            if end == len(buf) and not eof and isinstance(obj, int | float):
                if more():  # a number may go on in the next block
                    continue
            pos = end
            return obj

    def peek() -> str:
        skip_ws()
        return buf[pos] if pos < len(buf) else ""

    if buf == "" and not more():
        raise ValueError("JSON: empty input")
    if peek() == "\ufeff":
        pos += 1
    expect("{")
    if peek() == "}":
        return
    while True:
        key = value()
        if not isinstance(key, str):
            raise ValueError("JSON: object key is not a string")
        expect(":")
        if key == array and peek() == "[":
            pos += 1
            if peek() == "]":
                pos += 1
                yield array, []
            else:
                while True:
                    yield f"{array}[]", value()
                    c = peek()
                    pos += 1
                    if c == "]":
                        break
                    if c != ",":
                        raise ValueError(f"JSON: expected ',' or ']' in {array}, got {c!r}")
        else:
            yield key, value()
        c = peek()
        pos += 1
        if c == "}":
            return
        if c != ",":
            raise ValueError(f"JSON: expected ',' or '}}', got {c!r}")


class ArrayRead:
    """What `read_array` found: the rows, the records it could not use, or why the whole document is declined."""

    def __init__(self) -> None:
        self.frames: list[pl.DataFrame] = []
        self.bad: list[dict] = []
        self.problem: str | None = None
        self.meta: dict | None = None
        self.version: str | None = None
        self.records = 0
        self.found = False  # the document has the array (possibly empty)

    def rows(self, schema: dict) -> pl.DataFrame:
        return pl.concat(self.frames, how="vertical_relaxed") if self.frames else pl.DataFrame(schema=schema)


def read_array(
    fh: IO[bytes],
    array: str,
    convert: Callable[[dict], list[dict]],
    schema: dict,
    *,
    read: tuple[str, ...],
    capture: str,
    what: str,
) -> ArrayRead:
    """Stream the `array` member of a Slurm document through `convert` (one element -> its rows).

    `convert` raises ValueError (or any error: a malformed record) to quarantine that record alone, with
    its JSON and the reason. The document's version comes from `meta`, which the commands print first and
    slurmrestd 23.11+ prints after the array: a declined version stops the read when it comes first and
    drops the rows when it comes last; a document without `meta`, or whose meta names no version, is
    declined (its version is unknown).
    `errors` of a document that gave no record are one quarantine row with Slurm's text. Record numbers
    count the array's elements from 1, in document order.
    """
    out = ArrayRead()
    pending: list[dict] = []
    errors: list = []

    def flush() -> None:
        nonlocal pending
        if pending:
            out.frames.append(pl.DataFrame(pending, schema=schema, orient="row"))
            pending = []

    try:
        for key, value in iter_document(fh, array):
            if key == "meta" and isinstance(value, dict):
                out.meta, out.version = value, version(value)
                out.problem = check_version(out.version, read, capture) or (
                    None
                    if out.version
                    else f"Slurm JSON whose meta names no data parser version; capture {capture} instead"
                )
                if out.problem:
                    return out
            elif key == "errors" and value:
                errors = value if isinstance(value, list) else [value]
            elif key == array:
                out.found = True
            elif key == f"{array}[]":
                out.found = True
                out.records += 1
                try:
                    if not isinstance(value, dict):
                        raise ValueError("not a JSON object")
                    pending += convert(value)
                except Exception as exc:  # one malformed record must not lose the others
                    reason = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
                    out.bad.append(
                        {
                            "line_no": out.records,
                            "raw_text": json.dumps(value)[:4000],
                            "raw_bytes": None,
                            "reason": f"{what}: unreadable record: {reason}",
                        }
                    )
                if len(pending) >= ROWS_PER_SLICE:
                    flush()
    except (ValueError, RecursionError) as exc:
        out.problem = f"not Slurm JSON: {exc}"
        return out
    if out.meta is None:
        out.problem = "Slurm JSON without a meta member: its data parser version is unknown"
        return out
    flush()
    if errors and not out.frames and not out.bad:
        why = "; ".join(
            str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
            for e in errors
        )
        out.bad.append(
            {
                "line_no": 0,
                "raw_text": "",
                "raw_bytes": None,
                "reason": f"Slurm reported errors: {why}"[:4000],
            }
        )
    return out


def every_line(data: bytes, reason: str) -> pl.DataFrame:
    """Quarantine rows for a whole input declined at once: every non-blank line, with the one reason."""
    rows = [
        {"line_no": no, "raw_text": text, "raw_bytes": raw, "reason": reason}
        for no, text, raw in split_lines(data)
        if not is_blank(text)
    ]
    return quarantine_frame(rows)


def epoch_text(v: Any) -> str:
    """An epoch time as the text parsers take it (`0`, unset and infinite: the text's `Unknown`)."""
    t = num(v)
    if t is None or t == float("inf") or t <= 0:
        return "Unknown"
    return str(int(t))


def duration_text(seconds: int | float | None) -> str:
    """Seconds as Slurm prints a duration (`D-HH:MM:SS`, `HH:MM:SS`)."""
    return _duration(seconds)


# ------------------------------------------------------------------------------------ job -> lines


def num(v: Any) -> int | float | None:
    """A plain number (v0.0.38) or a `{"set", "infinite", "number"}` struct (v0.0.39+); None when unset."""
    if isinstance(v, dict):
        if v.get("infinite"):
            return float("inf")
        if not v.get("set", True):
            return None
        v = v.get("number")
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return v


def _states(v: Any) -> list[str]:
    if isinstance(v, dict):  # job: {"current": ..., "reason": ...}
        v = v.get("current")
    if isinstance(v, str):
        return [v] if v else []
    return [s for s in (v or []) if isinstance(s, str)]


def _time(v: Any) -> str:
    t = num(v)
    if t is None or t == float("inf") or t <= 0:
        return "Unknown"
    return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _duration(seconds: int | float | None) -> str:
    if seconds is None or seconds < 0:
        return ""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _limit(v: Any) -> str:
    """time.limit is in minutes; unset prints as sacct's Partition_Limit, infinite as UNLIMITED."""
    m = num(v)
    if m is None:
        return "Partition_Limit"
    if m == float("inf") or m >= 0xFFFFFFFE:
        return "UNLIMITED"
    return _duration(m * 60)


def _exit(v: Any) -> str:
    """`return_code:signal` as sacct prints ExitCode."""
    if not isinstance(v, dict):
        return ""
    rc = num(v.get("return_code"))
    sig = v.get("signal") or {}
    sig_no = num(sig.get("id", sig.get("signal_id"))) if isinstance(sig, dict) else None
    return f"{int(rc or 0)}:{int(sig_no or 0)}"


def _tres(items: Any) -> str:
    """A TRES list as sacct prints it with --noconvert: `name=count` sorted as text, memory in `M`."""
    out = []
    for t in items or []:
        if not isinstance(t, dict):
            continue
        count = num(t.get("count"))
        if count is None or count < 0:
            continue
        typ, name = t.get("type") or "", t.get("name") or ""
        key = f"{typ}/{name}" if name else typ
        val = f"{int(count)}M" if typ == "mem" else str(int(count))
        out.append((key, val))
    return ",".join(sorted(f"{k}={v}" for k, v in out))


def _job_energy(alloc: Any) -> str:
    """ConsumedEnergyRaw of a job line (src/sacct/print.c): the energy TRES of its allocation, 0 when it has
    none, empty when it has one without a value (NO_VAL, printed as null by v0.0.38)."""
    for t in alloc or []:
        if isinstance(t, dict) and t.get("type") == "energy" and not t.get("name"):
            c = num(t.get("count"))
            return str(int(c)) if c is not None and c != float("inf") and c >= 0 else ""
    return "0"


def _tres_count(items: Any, typ: str) -> int | None:
    for t in items or []:
        if isinstance(t, dict) and t.get("type") == typ and not t.get("name"):
            c = num(t.get("count"))
            return int(c) if c is not None and c >= 0 else None
    return None


# sacct's own names for the scheduling flags (src/common/slurmdb_defs.c, slurmdb_job_flags_str): it prints
# one scheduler, the first of submit, main, backfill that is set, then StartReceived. A requeued attempt's
# JSON can carry two (22.05, test bed: STARTED_ON_SCHEDULE and STARTED_ON_BACKFILL, text `SchedMain`).
_SCHED_FLAGS = (
    ("STARTED_ON_SUBMIT", "SchedSubmit"),
    ("STARTED_ON_SCHEDULE", "SchedMain"),
    ("STARTED_ON_BACKFILL", "SchedBackfill"),
)


def _flags(v: Any) -> str:
    if isinstance(v, str):
        v = [v]
    flags = set(v or [])
    out = [next((name for flag, name in _SCHED_FLAGS if flag in flags), None)]
    if "START_RECEIVED" in flags:
        out.append("StartReceived")
    return ",".join(f for f in out if f)


# Step states below JOB_COMPLETE (slurm.h job_states): sacct leaves such steps out of a job's TotalCPU,
# UserCPU and SystemCPU (src/sacct/options.c, get_data, Slurm 22.05).
_UNFINISHED = frozenset({"PENDING", "RUNNING", "SUSPENDED"})


def _cpu_time(secs: int, usecs: int) -> str:
    """sacct's `_elapsed_time` (src/sacct/print.c, Slurm 22.05): TotalCPU, UserCPU, SystemCPU."""
    if usecs >= 1_000_000:
        secs += usecs // 1_000_000
        usecs %= 1_000_000
    subsec = usecs // 1000 if usecs > 0 else 0
    s, m, h, d = secs % 60, (secs // 60) % 60, (secs // 3600) % 24, secs // 86400
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h:02d}:{m:02d}:{s:02d}"
    if subsec:
        return f"{m:02d}:{s:02d}.{subsec:03d}"
    return f"00:{m:02d}:{s:02d}"


def _sec_usec(v: Any) -> tuple[int, int] | None:
    """A `{"seconds", "microseconds"}` CPU time (both numbers may be v0.0.39+ structs)."""
    if not isinstance(v, dict):
        return None
    secs, usecs = num(v.get("seconds")), num(v.get("microseconds"))
    if secs is None or secs == float("inf") or secs < 0:
        return None
    return int(secs), int(usecs) if usecs is not None and usecs != float("inf") and usecs >= 0 else 0


def _step_cpu(step: dict, part: str) -> tuple[int, int] | None:
    return _sec_usec((step.get("time") or {}).get(part))


def _usage_tres(items: Any) -> str:
    """A TRES usage list as sacct prints TRESUsageIn* with --noconvert (slurmdb_make_tres_string_from_simple
    with TRES_STR_FLAG_BYTES): cpu (milliseconds, CPU_TIME_ADJ) as a time, the rest bare, the entries sorted
    as text (slurm_char_list_to_xstr)."""
    out = []
    for t in items or []:
        if not isinstance(t, dict):
            continue
        count = num(t.get("count"))
        if count is None or count < 0:
            continue
        typ, name = t.get("type") or "", t.get("name") or ""
        key = f"{typ}/{name}" if name else typ
        if count == float("inf"):
            out.append(f"{key}=NONE")
        elif typ == "cpu":
            out.append(f"{key}={_duration(int(count) // 1000) or '00:00:00'}")
        else:
            out.append(f"{key}={int(count)}")
    return ",".join(sorted(out))


def _usage_count(items: Any, typ: str) -> str:
    """One entry of a TRES usage list as sacct prints MaxRSS / AveRSS with --noconvert (bytes, bare)."""
    for t in items or []:
        if isinstance(t, dict) and t.get("type") == typ and not t.get("name"):
            c = num(t.get("count"))
            return str(int(c)) if c is not None and c != float("inf") and c >= 0 else ""
    return ""


def _req_mem(job: dict) -> str:
    """ReqMem as sacct 21.08+ prints it: the job's whole request (its requested `mem` TRES), in `M`."""
    for t in (job.get("tres") or {}).get("requested") or []:
        if isinstance(t, dict) and t.get("type") == "mem":
            c = num(t.get("count"))
            return f"{int(c)}M" if c is not None and c >= 0 else ""
    return ""


def _clean(s: Any) -> str:
    s = "" if s is None else str(s)
    return s.replace(DELIMITER, " ").replace("\n", " ").replace("\r", " ")


def _job_id(job: dict) -> str:
    jid = job.get("job_id")
    array = job.get("array") or {}
    arr_id = num(array.get("job_id")) or 0
    task = num(array.get("task_id"))
    het = job.get("het") or {}
    het_id = num(het.get("job_id")) or 0
    het_off = num(het.get("job_offset"))
    if arr_id and task is not None:
        return f"{int(arr_id)}_{int(task)}"
    if arr_id and array.get("task"):
        return f"{int(arr_id)}_[{array['task']}]"
    if het_id and het_off is not None:
        return f"{int(het_id)}+{int(het_off)}"
    return str(jid)


def job_lines(job: dict) -> list[str]:
    """The sacct `--parsable2 --noconvert --format=FIELDS` lines of one JSON job: the job, then its steps."""
    tm = job.get("time") or {}
    tres = job.get("tres") or {}
    alloc = tres.get("allocated") or []
    req = tres.get("requested") or []
    state = job.get("state") or {}
    states = _states(state)
    started = num(tm.get("start")) not in (None, 0)
    nodes = num(job.get("allocation_nodes")) or 0
    if not nodes or not started:
        nodes = _tres_count(req, "node") or nodes
    cpus = _tres_count(alloc, "cpu") if started else None
    if cpus is None:
        cpus = num((job.get("required") or {}).get("CPUs"))
        if cpus is None:
            cpus = _tres_count(req, "cpu")
    jid = _job_id(job)
    raw = str(job.get("job_id"))
    node_list = job.get("nodes") or ""
    cpu = {"total": [0, 0], "user": [0, 0], "system": [0, 0]}
    for step in job.get("steps") or []:
        if not set(_states(step.get("state"))) & _UNFINISHED:
            for part, acc in cpu.items():
                su = _step_cpu(step, part)
                if su is not None:
                    acc[0] += su[0]
                    acc[1] += su[1]
    comment = job.get("comment") or {}
    comment = comment if isinstance(comment, dict) else {"job": comment}
    line = [
        jid,
        raw,
        job.get("cluster") or "",
        job.get("partition") or "",
        job.get("qos") or "",
        job.get("account") or "",
        job.get("user") or "",
        _time(tm.get("submission")),
        _time(tm.get("eligible")),
        _time(tm.get("start")),
        _time(tm.get("end")),
        _duration(num(tm.get("elapsed"))),
        _limit(tm.get("limit")),
        " ".join(states[:1]) or "",
        _exit(job.get("exit_code")),
        str(int(nodes)) if nodes is not None else "",
        str(int(cpus)) if cpus is not None else "",
        _req_mem(job),
        _tres(alloc) if started else "",
        node_list,
        _flags(job.get("flags")),
        str(int(p)) if (p := num(job.get("priority"))) is not None and p != float("inf") else "",
        (state.get("reason") if isinstance(state, dict) else "") or "",
        "",
        _cpu_time(*cpu["total"]),
        _cpu_time(*cpu["user"]),
        _cpu_time(*cpu["system"]),
        "",
        "",
        _tres(req),
        "",
        "",
        _job_energy(alloc),
        comment.get("job") or "",
        comment.get("administrator") or "",
        job.get("name") or "",
    ]
    out = [DELIMITER.join(_clean(x) for x in line)]
    for step in job.get("steps") or []:
        out.append(_step_line(step, jid, raw, job))
    return out


def _step_line(step: dict, jid: str, raw: str, job: dict) -> str:
    tm = step.get("time") or {}
    sid = (step.get("step") or {}).get("id")
    if isinstance(sid, dict):  # v0.0.39+: {"job_id", "step_id"} in some captures
        sid = sid.get("step_id")
    sid = "" if sid is None else str(sid)  # v0.0.38 prints a numbered step's id as a number: 0 is a step
    part = sid.rsplit(".", 1)[1] if "." in sid else sid
    nodes = step.get("nodes") or {}
    tres = step.get("tres") or {}
    alloc = tres.get("allocated") or []
    usage = tres.get("requested") or {}  # v0.0.38: "requested" holds tres_usage_in, "consumed" tres_usage_out
    usage = usage if isinstance(usage, dict) else {}
    states = _states(step.get("state"))
    tasks = num((step.get("tasks") or {}).get("count"))
    energy = num(((step.get("statistics") or {}).get("energy") or {}).get("consumed"))
    cpu = {part: _step_cpu(step, part) for part in ("total", "user", "system")}
    line = [
        f"{jid}.{part}",
        f"{raw}.{part}",
        job.get("cluster") or "",
        "",
        "",
        job.get("account") or "",
        "",
        _time(tm.get("start")),  # sacct prints a step's start as its Submit
        _time(tm.get("start")),
        _time(tm.get("start")),
        _time(tm.get("end")),
        _duration(num(tm.get("elapsed"))),
        "",
        " ".join(states[:1]),
        _exit(step.get("exit_code")),
        str(int(c)) if (c := num(nodes.get("count"))) is not None else "",
        str(c) if (c := _tres_count(alloc, "cpu")) is not None else "",
        "",
        _tres(alloc),
        nodes.get("range") or "",
        "",
        "",
        "",
        str(int(tasks)) if tasks is not None and tasks != float("inf") else "",
        *(_cpu_time(*cpu[part]) if cpu[part] is not None else "" for part in ("total", "user", "system")),
        _usage_count(usage.get("max"), "mem"),
        _usage_count(usage.get("average"), "mem"),
        "",
        _usage_tres(usage.get("total")),
        _usage_tres(usage.get("max")),
        str(int(energy)) if energy is not None and energy != float("inf") and energy >= 0 else "",
        "",
        "",
        (step.get("step") or {}).get("name") or "",
    ]
    return DELIMITER.join(_clean(x) for x in line)
