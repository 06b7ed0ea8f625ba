"""sinfo: one row per node per partition per snapshot, with state flags, CPUs, memory, GRES and drain reason.

The live command is node-oriented (`--Node`) with `--Format` fields ended by the unit separator 0x1F,
which no node name, state, GRES string or partition can contain; `Reason` (the only free text) is last,
so a 0x1F typed into a drain reason cannot shift the other columns. Recorded captures from other tools
use many `-o`/`-O` strings; `ingest sinfo --format` names one and the same parser reads it (see
docs/collectors.md for the supported and declined ones).

`sinfo -N` prints a node once for every partition it belongs to, so capacity must count distinct nodes:
`capacity()` does that, and docs/collectors.md says so for anyone querying node_states directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import (
    NULL_WORDS,
    expand_hostlist,
    gpu_count,
    parse_mem_mb,
    parse_slurm_time,
    split_lines,
)

from slurmscope.config import Config

KIND = "sinfo"
TABLES = {
    "node_states": TableSpec("node_states", ("cluster", "snapshot_time", "node", "partition")),
    # Only from recorded aggregated captures (no node names); see sql/0002_node_groups.sql.
    "node_groups": TableSpec("node_groups", ("cluster", "snapshot_time", "group_no")),
}

US = "\x1f"
# Padding between fixed-width columns. Not str.isspace(): Python counts the separators 0x1C-0x1F as
# whitespace, and those are exactly the delimiters machine-readable captures use.
WS = " \t"


def out_of_range(row: dict, schema: dict) -> str | None:
    """The first integer too large for its column (Int32/Int64), as a quarantine reason; None if all fit.

    Arbitrary input can hold any digit string; an overflowing value must quarantine its line, not crash
    the frame construction.
    """
    for col, dtype in schema.items():
        v = row.get(col)
        if isinstance(v, int) and not isinstance(v, bool):
            bits = 32 if dtype == pl.Int32 else 64 if dtype == pl.Int64 else None
            if bits and not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
                return f"{col} out of range: {v}"
    return None


def is_blank(text: str) -> bool:
    """A line with nothing but padding (0x1F/0x1E alone are not blank: they are empty fields)."""
    return not text.strip(" \t\r\n\f\v")


LIVE_FIELDS = (
    "NodeHost",
    "Partition",
    "StateComplete",
    "CPUsState",
    "Memory",
    "AllocMem",
    "Gres",
    "GresUsed",
    "Features",
    "UserLong",
    "Timestamp",
)
# Size left empty after ':' = no padding, no truncation; the suffix after it is the separator.
LIVE_FORMAT = ",".join(f"{f}:{US}" for f in LIVE_FIELDS) + ",Reason:"

NODE_STATES_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "node": pl.String,
    "partition": pl.String,
    "state": pl.String,
    "state_flags": pl.String,
    "state_raw": pl.String,
    "reason": pl.String,
    "reason_user": pl.String,
    "reason_time": pl.Datetime("us", "UTC"),
    "cpus_alloc": pl.Int32,
    "cpus_idle": pl.Int32,
    "cpus_other": pl.Int32,
    "cpus_total": pl.Int32,
    "memory_mb": pl.Int64,
    "alloc_memory_mb": pl.Int64,
    "gres": pl.String,
    "gres_used": pl.String,
    "gpus_total": pl.Int32,
    "gpus_used": pl.Int32,
    "gpu_type": pl.String,
    "features": pl.String,
}

NODE_GROUPS_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "group_no": pl.Int32,
    "partition": pl.String,
    "node_count": pl.Int32,
    "state": pl.String,
    "state_flags": pl.String,
    "state_raw": pl.String,
    "gres": pl.String,
    "gres_used": pl.String,
    "gpus_per_node": pl.Int32,
    "gpus_used_per_node": pl.Int32,
    "gpu_type": pl.String,
    "features": pl.String,
    "source": pl.String,
}


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live sinfo call (documented in docs/collectors.md)."""
    return [cfg.slurm_command("sinfo"), "--Node", "--noheader", f"--Format={LIVE_FORMAT}"]


# ------------------------------------------------------------------------------------ format strings


@dataclass(frozen=True)
class Field:
    """One column of a format string: its canonical name and the separator that follows it.

    `sep` None means the column is padded or space-separated (fixed-width `-O` or `%10x` output): the value
    is the next whitespace-free token. A literal `sep` ends the value at its next occurrence.
    """

    name: str
    sep: str | None


@dataclass(frozen=True)
class LineFormat:
    fields: tuple[Field, ...]
    prefix: str = ""
    trailer: str = ""
    free_text: frozenset[str] = frozenset()

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]


_ESCAPES = re.compile(r"\\(x[0-9a-fA-F]{2}|t|\\|\|)")


def unescape(fmt: str) -> str:
    r"""Turn the escapes a user types on a shell (`\x1f`, `\t`, `\|`, `\\`) into the characters."""

    def repl(m: re.Match) -> str:
        tok = m.group(1)
        if tok.startswith("x"):
            return chr(int(tok[1:], 16))
        return {"t": "\t", "\\": "\\", "|": "|"}[tok]

    return _ESCAPES.sub(repl, fmt)


def _strip_option(fmt: str) -> str:
    fmt = fmt.strip()
    for opt in ("--format=", "--Format=", "-o ", "-O ", "-o", "-O"):
        if fmt.startswith(opt):
            fmt = fmt[len(opt) :].strip()
            break
    if len(fmt) >= 2 and fmt[0] == fmt[-1] and fmt[0] in "'\"":
        fmt = fmt[1:-1]
    return fmt


def _sep(literal: str) -> str | None:
    return None if literal.strip(WS) == "" else literal


def parse_format(
    fmt: str, letters: dict[str, str], long_names: dict[str, str], free_text: frozenset[str] = frozenset()
) -> LineFormat:
    """A `-o` (`%n,%T`) or `-O` (`NodeHost:20,Gres: ,Reason:`) string as a LineFormat.

    Unknown fields are kept under their own name (`%x` or the lower-cased `-O` name) and ignored by the
    row builder, so any column layout can be split even when only some of its fields are used.
    """
    fmt = unescape(_strip_option(fmt))
    if "%" in fmt:
        return _parse_percent(fmt, letters, free_text)
    fields: list[Field] = []
    for item in fmt.split(","):
        if item == "" and fields:
            # A ',' suffix ("Nodes:,,Gres:") cannot be told apart from the list separator; Slurm reads
            # it the same way, so an empty item is skipped.
            continue
        name, colon, rest = item.partition(":")
        sep: str | None = None
        if colon:
            m = re.match(r"^\.?(\d*)(.*)$", rest, re.S)
            suffix = m.group(2) if m else rest
            sep = _sep(suffix)
        key = long_names.get(name.strip().lower(), name.strip().lower())
        fields.append(Field(key, sep))
    if not fields:
        raise ValueError(f"empty format string {fmt!r}")
    last = fields[-1]
    trailer = last.sep or ""
    fields[-1] = Field(last.name, None)
    return LineFormat(tuple(fields), "", trailer, free_text)


def _parse_percent(fmt: str, letters: dict[str, str], free_text: frozenset[str]) -> LineFormat:
    tokens = list(re.finditer(r"%(%|[.]?\d*[a-zA-Z])", fmt))
    names: list[str] = []
    literals: list[str] = []
    pos = 0
    cur = ""
    for m in tokens:
        cur += fmt[pos : m.start()]
        pos = m.end()
        if m.group(1) == "%":
            cur += "%"
            continue
        literals.append(cur)
        cur = ""
        letter = m.group(1)[-1]
        names.append(letters.get(letter, f"%{letter}"))
    cur += fmt[pos:]
    if not names:
        raise ValueError(f"no %-fields in format string {fmt!r}")
    prefix = literals[0]
    fields = []
    for i, name in enumerate(names):
        if i + 1 < len(names):
            fields.append(Field(name, _sep(literals[i + 1])))
        else:
            fields.append(Field(name, None))
    trailer = cur if cur.strip(WS) else ""
    return LineFormat(tuple(fields), prefix, trailer, free_text)


def split_line(line: str, lf: LineFormat) -> tuple[dict[str, str] | None, str | None]:
    """Values of one output line by field name, or (None, reason).

    Fields before the (single) free-text field are read from the left, fields after it from the right,
    so separators typed into a drain reason or job name stay inside that value.
    """
    if lf.prefix:
        if not line.startswith(lf.prefix):
            return None, f"line does not start with {lf.prefix!r}"
        line = line[len(lf.prefix) :]
    if lf.trailer:
        stripped = line.rstrip(WS) if lf.trailer.strip(WS) else line
        if stripped.endswith(lf.trailer):
            line = stripped[: len(stripped) - len(lf.trailer)]
    fields = lf.fields
    n = len(fields)
    free = [i for i, f in enumerate(fields) if f.name in lf.free_text]
    # Extra separators belong to the free-text column; with several (job name and comment), to the first.
    pivot = free[0] if free else n - 1
    values: list[str | None] = [None] * n
    pos = 0
    for i in range(pivot):
        f = fields[i]
        if f.sep is None:
            while pos < len(line) and line[pos] in WS:
                pos += 1
            end = pos
            while end < len(line) and line[end] not in WS:
                end += 1
            if end == pos:
                return None, f"{i} fields, expected {n}"
            values[i] = line[pos:end]
            pos = end
        else:
            idx = line.find(f.sep, pos)
            if idx < 0:
                return None, f"{i + 1} fields, expected {n} (separator {f.sep!r} not found)"
            values[i] = line[pos:idx]
            pos = idx + len(f.sep)
    end = len(line)
    for i in range(n - 1, pivot, -1):
        sep = fields[i - 1].sep
        if sep is None:
            while end > pos and line[end - 1] in WS:
                end -= 1
            start = end
            while start > pos and line[start - 1] not in WS:
                start -= 1
            if start == end:
                return None, f"missing field {fields[i].name!r}, expected {n} fields"
            values[i] = line[start:end]
            end = start
        else:
            idx = line.rfind(sep, pos, end)
            if idx < 0:
                return None, f"missing field {fields[i].name!r} (separator {sep!r} not found)"
            values[i] = line[idx + len(sep) : end]
            end = idx
    middle = line[pos:end]
    prev_ws = pivot > 0 and fields[pivot - 1].sep is None
    if prev_ws or fields[pivot].sep is None:
        middle = middle.strip(WS)
        if not middle and prev_ws and fields[pivot].name not in lf.free_text:
            return None, f"missing field {fields[pivot].name!r}, expected {n} fields"
    values[pivot] = middle
    if not free:
        # Without a free-text column, a separator left in the last value means the line had extra fields.
        prev = fields[n - 2].sep if n > 1 else None
        last = values[n - 1] or ""
        if prev is not None and prev in last and fields[n - 1].name not in _MAY_CONTAIN.get(prev, ()):
            return None, f"more than {n} fields"
        if prev is None and n > 1 and any(ch in WS for ch in last.strip(WS)):
            return None, f"more than {n} fields"
    return {f.name: v for f, v in zip(fields, values, strict=True)}, None


def fast_path(
    lines: list[tuple[int, str, bytes | None]],
    lf: LineFormat,
    typed: Callable[[pl.DataFrame], tuple[pl.DataFrame, list[int]]],
) -> tuple[list[pl.DataFrame], list[tuple[int, str, bytes | None]]]:
    """The vectorised path shared by sinfo and squeue: split and type the clean lines in one pass.

    `typed(split)` returns the rows it could type and the line numbers it could not; those lines, with the
    ones vector_split refused, are returned for the per-line path. Returns (frames, slow lines).
    """
    if len(lines) <= 1:
        return [], lines
    split, slow = vector_split(lines, lf)
    if split is None:
        return [], slow
    fast, redo = typed(split)
    if redo:
        wanted = set(redo)
        slow = sorted(slow + [line for line in lines if line[0] in wanted])
    return [fast], slow


def vector_split(
    lines: list[tuple[int, str, bytes | None]], lf: LineFormat
) -> tuple[pl.DataFrame | None, list[tuple[int, str, bytes | None]]]:
    """Split, in one vectorised pass, the lines of a format whose separators are one repeated literal.

    Returns a frame (line_no, then one String column per field name, values as split_line gives them) for
    the clean UTF-8 lines with exactly the expected field count, and the other lines, which need the
    per-line path (free-text recovery, quarantine reasons). (None, lines) when the format does not qualify.
    """
    n = len(lf.fields)
    seps = {f.sep for f in lf.fields[:-1]}
    if n < 2 or lf.prefix or lf.trailer or len(seps) != 1 or None in seps:
        return None, lines
    delim = next(iter(seps))
    clean = [(no, text) for no, text, raw in lines if raw is None]
    if not clean:
        return None, lines
    df = pl.DataFrame(
        {"line_no": [c[0] for c in clean], "_t": [c[1] for c in clean]},
        schema={"line_no": pl.Int64, "_t": pl.String},
    )
    df = df.with_columns(pl.col("_t").str.split(delim).alias("_p"))
    ok = df.filter(pl.col("_p").list.len() == n)
    index = {f.name: i for i, f in enumerate(lf.fields)}  # a repeated name keeps its last column
    cols = [pl.col("_p").list.get(i).alias(name) for name, i in index.items()]
    out = ok.select(pl.col("line_no"), *cols)
    if not any(f.name in lf.free_text for f in lf.fields[:-1]):
        # split_line reads the last column as the rest of the line, padding removed
        out = out.with_columns(pl.col(lf.fields[-1].name).str.strip_chars(WS))
    done = set(out["line_no"].to_list())
    return out, [line for line in lines if line[0] not in done]


# Columns whose values legitimately hold a separator character (lists, GRES, hostlists).
_MAY_CONTAIN = {
    ",": (
        "gres",
        "gres_used",
        "features",
        "features_act",
        "partition",
        "tres",
        "tres_per_node",
        "dependency",
        "nodelist",
        "node_list",
        "reason",
        "name",
    ),
    "/": ("cpus_state",),
}


# ------------------------------------------------------------------------------------ node states

# sinfo state suffixes (man sinfo, NODE STATE CODES).
SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
# %t / StateCompact abbreviations of base states.
_COMPACT = {
    "alloc": "ALLOCATED",
    "mix": "MIXED",
    "comp": "COMPLETING",
    "drng": "DRAINING",
    "drain": "DRAINED",
    "resv": "RESERVED",
    "plnd": "PLANNED",
    "unk": "UNKNOWN",
    "futr": "FUTURE",
    "failg": "FAILING",
    "npc": "PERFCTRS",
    "pow_dn": "POWER_DOWN",
    "pow_up": "POWERING_UP",
    "boot": "REBOOT",
    "drained": "DRAINED",
    "draining": "DRAINING",
}
# Compact names of flags in StateComplete ("idle+drain", "mixed+cloud+powered_down").
_FLAG_ALIASES = {
    "drng": "DRAIN",
    "drain": "DRAIN",
    "maint": "MAINTENANCE",
    "resv": "RESERVED",
    "comp": "COMPLETING",
}
_STATE_WORD = re.compile(r"^[A-Za-z_]+$")
_DIGITS = re.compile(r"^[0-9]+$")  # not str.isdigit(): it accepts '²', which int() refuses


def parse_state(raw: str | None) -> tuple[str | None, str | None]:
    """(base state, '+'-joined flags) of a sinfo state: `drained*`, `mixed+drain`, `MIXED+DRAIN`, `idle~`.

    Suffix symbols become named flags; DRAINED/DRAINING also carry the DRAIN flag so that one test
    (`'DRAIN' in flags`) finds drained nodes in every notation. Unrecognised words are kept upper-cased.
    """
    if raw is None:
        return None, None
    s = raw.strip()
    if not s or s in NULL_WORDS:
        return None, None
    flags: list[str] = []
    state: str | None = None
    for i, part in enumerate(s.split("+")):
        part = part.strip()
        word = part.rstrip("".join(SUFFIX_FLAGS))
        for ch in part[len(word) :]:
            flags.append(SUFFIX_FLAGS[ch])
        if not word:
            continue
        low = word.lower()
        if i == 0:
            state = _COMPACT.get(low, word.upper())
            if state in ("DRAINED", "DRAINING"):
                flags.append("DRAIN")
        else:
            flags.append(_FLAG_ALIASES.get(low, word.upper()))
    seen: list[str] = []
    for f in flags:
        if f not in seen:
            seen.append(f)
    return state, ("+".join(seen) if seen else None)


def parse_cpus_state(s: str | None) -> tuple[int | None, int | None, int | None, int | None]:
    """`A/I/O/T` (allocated/idle/other/total) CPU counts; Nones when absent or malformed."""
    if not s:
        return None, None, None, None
    parts = s.strip().split("/")
    if len(parts) != 4 or not all(_DIGITS.match(p) for p in parts):
        return None, None, None, None
    a, i, o, t = (int(p) for p in parts)
    return a, i, o, t


def _gres_gpus(s: str | None) -> tuple[int | None, str | None]:
    if s is None:
        return None, None
    s = s.strip()
    if s in NULL_WORDS:
        return 0, None
    gpus, gtype, _mig = gpu_count(s)
    return gpus, gtype


def _mem(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        v = parse_mem_mb(s)
    except ValueError:
        return None
    return None if v is None else int(v)


def _null(s: str | None) -> str | None:
    if s is None:
        return None
    s = s.strip()
    return None if s in NULL_WORDS else s


def _user(s: str | None) -> str | None:
    """`root(0)` -> `root`; sinfo prints `Unknown` when no one set a reason."""
    s = _null(s)
    if s is None:
        return None
    return re.sub(r"\(\d+\)$", "", s) or None


# sinfo -o letters and -O names that the node_states row uses; anything else is split and ignored.
LETTERS = {
    "n": "node",
    "N": "nodelist",
    "P": "partition",
    "R": "partition",
    "T": "state",
    "t": "state",
    "C": "cpus_state",
    "c": "cpus",
    "m": "memory",
    "e": "free_mem",
    "f": "features",
    "b": "features_act",
    "G": "gres",
    "E": "reason",
    "H": "reason_time",
    "u": "reason_user",
    "U": "reason_user",
    "D": "node_count",
}
LONG_NAMES = {
    "nodehost": "node",
    "nodelist": "nodelist",
    "partition": "partition",
    "partitionname": "partition",
    "statelong": "state",
    "statecompact": "state",
    "statecomplete": "state",
    "cpusstate": "cpus_state",
    "cpus": "cpus",
    "memory": "memory",
    "allocmem": "alloc_mem",
    "freemem": "free_mem",
    "gres": "gres",
    "gresused": "gres_used",
    "features": "features",
    "featuresact": "features_act",
    "reason": "reason",
    "user": "reason_user",
    "userlong": "reason_user",
    "timestamp": "reason_time",
    "nodes": "node_count",
}
FREE_TEXT = frozenset({"reason"})


def line_format(fmt: str | None, delimiter: str | None = None) -> LineFormat:
    """The LineFormat of `fmt` (None = the live format). Raises ValueError when it has no node column."""
    lf = parse_format(fmt or LIVE_FORMAT, LETTERS, LONG_NAMES, FREE_TEXT)
    if delimiter:
        lf = LineFormat(
            tuple(
                Field(f.name, delimiter if i < len(lf.fields) - 1 else None) for i, f in enumerate(lf.fields)
            ),
            lf.prefix,
            lf.trailer,
            lf.free_text,
        )
    names = set(lf.names)
    if not names & {"node", "nodelist", "node_count"}:
        raise ValueError(
            f"sinfo format {fmt!r} has neither node names (NodeHost/NodeList, %n/%N) nor a node count "
            "(Nodes, %D): its lines cannot be tied to nodes (see docs/collectors.md, declined formats)"
        )
    if not names & {"node", "nodelist"} and not names & {"state", "gres", "gres_used"}:
        raise ValueError(
            f"sinfo format {fmt!r} has no node names and neither state nor GRES columns: nothing to store "
            "(see docs/collectors.md, declined formats)"
        )
    return lf


def _rows_for(
    values: dict[str, str], snapshot_time: datetime, cluster: str, tz: ZoneInfo
) -> tuple[list[dict], str | None]:
    if "node" in values:
        node = values["node"].strip()
        nodes = [node] if node else []
    else:
        try:
            nodes = expand_hostlist(values["nodelist"])
        except ValueError as exc:
            return [], str(exc)
    if not nodes:
        return [], "empty node name"
    partition = (values.get("partition") or "").strip()
    if partition in NULL_WORDS:
        partition = ""
    partition = partition.rstrip("*")
    state_raw = _null(values.get("state"))
    state, flags = parse_state(state_raw)
    if state is not None and not _STATE_WORD.match(state):
        return [], f"not a node state: {state_raw!r}"
    a, i, o, t = parse_cpus_state(values.get("cpus_state"))
    if values.get("cpus_state") is not None and t is None and values["cpus_state"].strip() not in NULL_WORDS:
        return [], f"not an A/I/O/T CPU count: {values['cpus_state']!r}"
    if t is None and _DIGITS.match(values.get("cpus", "").strip()):
        t = int(values["cpus"].strip())
    try:
        reason_time = parse_slurm_time(values.get("reason_time"), tz)
    except ValueError as exc:
        return [], str(exc)
    gres = _null(values.get("gres")) if "gres" in values else None
    gres_used = _null(values.get("gres_used")) if "gres_used" in values else None
    gpus_total, gtype = _gres_gpus(values.get("gres"))
    gpus_used, utype = _gres_gpus(values.get("gres_used"))
    reason = _null(values.get("reason"))
    row = {
        "cluster": cluster,
        "snapshot_time": snapshot_time,
        "partition": partition,
        "state": state,
        "state_flags": flags,
        "state_raw": state_raw,
        "reason": reason,
        "reason_user": _user(values.get("reason_user")),
        "reason_time": reason_time,
        "cpus_alloc": a,
        "cpus_idle": i,
        "cpus_other": o,
        "cpus_total": t,
        "memory_mb": _mem(values.get("memory")),
        "alloc_memory_mb": _mem(values.get("alloc_mem")),
        "gres": gres if "gres" in values else None,
        "gres_used": gres_used,
        "gpus_total": gpus_total,
        "gpus_used": gpus_used,
        "gpu_type": gtype or utype,
        "features": _null(values.get("features")),
    }
    problem = out_of_range(row, NODE_STATES_SCHEMA)
    if problem:
        return [], problem
    return [dict(row, node=n) for n in nodes], None


_TITLE = re.compile(r"^[A-Z][A-Z0-9_:()/ %-]*$")


def is_header(values: dict[str, str], id_columns: tuple[str, ...]) -> bool:
    """A column-title line (`HOSTNAMES GRES ...`, `JOBID|STATE`): every value upper-case, the id a word."""
    vals = [v.strip() for v in values.values() if v and v.strip()]
    ids = [values[c].strip() for c in id_columns if c in values and values[c]]
    return (
        bool(vals)
        and bool(ids)
        and all(_TITLE.match(v) for v in vals)
        and not any(ch.isdigit() for i in ids for ch in i)
    )


def _group_row(
    values: dict[str, str], group_no: int, snapshot_time: datetime, cluster: str, source: str
) -> tuple[dict | None, str | None]:
    count = (values.get("node_count") or "").strip()
    if not _DIGITS.match(count):
        return None, f"node count is not a number: {count!r}"
    partition = _null(values.get("partition")) or ""
    state_raw = _null(values.get("state"))
    state, flags = parse_state(state_raw)
    if state is not None and not _STATE_WORD.match(state):
        return None, f"not a node state: {state_raw!r}"
    gpn, gtype = _gres_gpus(values.get("gres"))
    used, utype = _gres_gpus(values.get("gres_used"))
    row = {
        "cluster": cluster,
        "snapshot_time": snapshot_time,
        "group_no": group_no,
        "partition": partition.rstrip("*"),
        "node_count": int(count),
        "state": state,
        "state_flags": flags,
        "state_raw": state_raw,
        "gres": _null(values.get("gres")),
        "gres_used": _null(values.get("gres_used")),
        "gpus_per_node": gpn,
        "gpus_used_per_node": used,
        "gpu_type": gtype or utype,
        "features": _null(values.get("features")) or _null(values.get("features_act")),
        "source": source or None,
    }
    problem = out_of_range(row, NODE_GROUPS_SCHEMA)
    return (None, problem) if problem else (row, None)


def check_input(data: bytes, fmt: str | None, delimiter: str | None) -> str | None:
    """Why `ingest` cannot read this input as asked (an unusable --format), or None."""
    try:
        line_format(fmt, delimiter)
    except ValueError as exc:
        return str(exc)
    return None


_CONTROL = r"[\x1c-\x1f]"  # separators Python's str.strip() removes and Polars' strip_chars() keeps


def _per_value(df: pl.DataFrame, col: str, fn) -> tuple[dict, set]:
    """fn applied once per distinct value of a column: ({value: result}, {values where fn raised})."""
    out: dict = {}
    bad: set = set()
    for v in df[col].unique().to_list():
        try:
            out[v] = fn(v)
        except ValueError:
            bad.add(v)
    return out, bad


def _fits32(*values: int | None) -> bool:
    return all(v is None or -(2**31) <= v < 2**31 for v in values)


def _vector_node_rows(
    df: pl.DataFrame, cluster: str, snapshot_time: datetime, tz: ZoneInfo
) -> tuple[pl.DataFrame, list[int]]:
    """node_states rows of split lines, converting each distinct value once with the per-line rules.

    Returns the rows (with line_no) and the line numbers that need the per-line path (a value that
    fails a rule, or a control character on which the two strip() flavours disagree).
    """
    names = set(df.columns)
    odd = pl.any_horizontal([pl.col(c).str.contains(_CONTROL) for c in df.columns if c != "line_no"])
    slow = df.filter(odd)["line_no"].to_list()
    df = df.filter(~odd)

    def node(v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("empty node name")
        return v

    def partition(v: str | None) -> str:
        v = (v or "").strip()
        return ("" if v in NULL_WORDS else v).rstrip("*")

    def state(v: str | None) -> tuple:
        raw = _null(v)
        st, flags = parse_state(raw)
        if st is not None and not _STATE_WORD.match(st):
            raise ValueError("not a node state")
        return raw, st, flags

    def cpus_state(v: str | None) -> tuple:
        a, i, o, t = parse_cpus_state(v)
        if v is not None and t is None and v.strip() not in NULL_WORDS:
            raise ValueError("not an A/I/O/T CPU count")
        if not _fits32(a, i, o, t):
            raise ValueError("out of range")
        return a, i, o, t

    def cpus(v: str | None) -> int | None:
        n = int(v.strip()) if v is not None and _DIGITS.match(v.strip()) else None
        if not _fits32(n):
            raise ValueError("out of range")
        return n

    def gres(v: str | None) -> tuple:
        g, gtype = _gres_gpus(v)
        if not _fits32(g):
            raise ValueError("out of range")
        return _null(v), g, gtype

    def mem(v: str | None) -> int | None:
        m = _mem(v)
        if m is not None and not -(2**63) <= m < 2**63:
            raise ValueError("out of range")
        return m

    rules = {
        "node": node,
        "partition": partition,
        "state": state,
        "cpus_state": cpus_state,
        "cpus": cpus,
        "memory": mem,
        "alloc_mem": mem,
        "gres": gres,
        "gres_used": gres,
        "reason": _null,
        "reason_user": _user,
        "features": _null,
        "reason_time": lambda v: parse_slurm_time(v, tz),
    }
    maps: dict[str, dict] = {}
    bad_rows = pl.lit(False)
    for col, fn in rules.items():
        if col in names:
            maps[col], bad = _per_value(df, col, fn)
            if bad:
                bad_rows = bad_rows | pl.col(col).is_in(list(bad))
    slow += df.filter(bad_rows)["line_no"].to_list()
    df = df.filter(~bad_rows)

    def get(col: str, pick=lambda r: r, dtype=pl.String, default=None) -> pl.Expr:
        if col not in maps:
            return pl.lit(default, dtype)
        mapping = {k: pick(v) for k, v in maps[col].items()}
        return pl.col(col).replace_strict(mapping, default=None, return_dtype=dtype)

    total = get("cpus_state", lambda r: r[3], pl.Int64)
    if "cpus" in maps:
        total = pl.when(total.is_null()).then(get("cpus", dtype=pl.Int64)).otherwise(total)
    gres_present = "gres" in maps
    out = df.select(
        "line_no",
        cluster=pl.lit(cluster),
        snapshot_time=pl.lit(snapshot_time),
        node=get("node"),
        partition=get("partition", default=""),
        state=get("state", lambda r: r[1]),
        state_flags=get("state", lambda r: r[2]),
        state_raw=get("state", lambda r: r[0]),
        reason=get("reason"),
        reason_user=get("reason_user"),
        reason_time=get("reason_time", dtype=pl.Datetime("us", "UTC")),
        cpus_alloc=get("cpus_state", lambda r: r[0], pl.Int64),
        cpus_idle=get("cpus_state", lambda r: r[1], pl.Int64),
        cpus_other=get("cpus_state", lambda r: r[2], pl.Int64),
        cpus_total=total,
        memory_mb=get("memory", dtype=pl.Int64),
        alloc_memory_mb=get("alloc_mem", dtype=pl.Int64),
        gres=get("gres", lambda r: r[0]) if gres_present else pl.lit(None, pl.String),
        gres_used=get("gres_used", lambda r: r[0]),
        gpus_total=get("gres", lambda r: r[1], pl.Int64),
        gpus_used=get("gres_used", lambda r: r[1], pl.Int64),
        gpu_type=pl.coalesce(get("gres", lambda r: r[2]), get("gres_used", lambda r: r[2])),
        features=get("features"),
    )
    out = out.select("line_no", *[pl.col(c).cast(t) for c, t in NODE_STATES_SCHEMA.items()])
    return out, slow


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
    """sinfo output -> node_states rows (node-oriented formats) or node_groups rows (aggregated ones).

    Lines that do not fit the format go to quarantine; a first line of column titles is skipped.
    Raises ValueError only for a format string that cannot describe nodes (never for the data).
    """
    return _parse(
        data,
        cluster=cluster,
        snapshot_time=snapshot_time,
        tz=tz,
        fmt=fmt,
        delimiter=delimiter,
        source=source,
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
    source: str,
    vectorise: bool,
) -> Parsed:
    """Node-per-line formats with one repeated separator (the live one) are split and typed per column
    and distinct value; hostlists, aggregated formats and odd lines take the per-line path."""
    lf = line_format(fmt, delimiter)
    per_node = bool(set(lf.names) & {"node", "nodelist"})
    id_cols = ("node", "nodelist") if per_node else ("node_count",)
    lines = [line for line in split_lines(data) if not is_blank(line[1])]
    if lines:
        values, _reason = split_line(lines[0][1], lf)
        if values is not None and is_header(values, id_cols):
            lines = lines[1:]
    frames: list[pl.DataFrame] = []
    slow = lines
    if vectorise and per_node and "nodelist" not in lf.names:
        frames, slow = fast_path(
            lines, lf, lambda split: _vector_node_rows(split, cluster, snapshot_time, tz)
        )
    rows: list[dict] = []
    groups: list[dict] = []
    bad: list[dict] = []
    for line_no, text, raw in slow:
        values, reason = split_line(text, lf)
        if values is not None:
            if per_node:
                new, reason = _rows_for(values, snapshot_time, cluster, tz)
                if reason is None:
                    rows.extend({"line_no": line_no, **r} for r in new)
                    continue
            else:
                group, reason = _group_row(values, line_no, snapshot_time, cluster, source)
                if group is not None:
                    groups.append(group)
                    continue
        bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"sinfo: {reason}"})
    tables: dict[str, pl.DataFrame] = {}
    if per_node:
        schema = {"line_no": pl.Int64, **NODE_STATES_SCHEMA}
        frames.append(
            pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
        )
        tables["node_states"] = (
            pl.concat(frames)
            .sort("line_no", maintain_order=True)
            .unique(subset=["node", "partition"], keep="last", maintain_order=True)  # a repeated line wins
            .drop("line_no")
        )
    else:
        tables["node_groups"] = (
            pl.DataFrame(groups, schema=NODE_GROUPS_SCHEMA, orient="row")
            if groups
            else pl.DataFrame(schema=NODE_GROUPS_SCHEMA)
        )
    return Parsed(tables=tables, quarantine=quarantine_frame(bad))


def capacity(node_states: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Per snapshot: distinct nodes, and GPUs/CPUs counted once per node however many partitions list it.

    A node in three partitions appears three times in `sinfo -N`; summing gpus_total over rows would
    triple its GPUs. The first row per (snapshot, node) is used (all of a node's rows carry the same
    hardware counts).
    """
    lf = node_states.lazy() if isinstance(node_states, pl.DataFrame) else node_states
    per_node = lf.group_by(["cluster", "snapshot_time", "node"]).agg(
        pl.col("gpus_total").max(),
        pl.col("gpus_used").max(),
        pl.col("cpus_total").max(),
        pl.col("cpus_alloc").max(),
    )
    return (
        per_node.group_by(["cluster", "snapshot_time"])
        .agg(
            pl.len().alias("nodes"),
            pl.col("gpus_total").sum().alias("gpus_total"),
            pl.col("gpus_used").sum().alias("gpus_used"),
            pl.col("cpus_total").sum().alias("cpus_total"),
            pl.col("cpus_alloc").sum().alias("cpus_alloc"),
        )
        .sort(["cluster", "snapshot_time"])
        .collect()
    )
