"""The `-o`/`-O` format engine of the Slurm CLIs: a format string to a line layout, and lines split by it.

sinfo and squeue print whatever columns a `-o` (`%n,%T`, printf-like letters with widths and literal
separators) or `-O` (`NodeHost:20,Gres: ,Reason:`, names with a size and suffix) string asks for, padded
or separated; recorded captures use many of them. One engine reads them all, given each command's table of
letters and names: `parse_format` turns the string into a LineFormat, `split_line` (per line, with the
free-text column absorbing stray separators) and `fast_path`/`vector_split` (one vectorised pass over
clean lines) split output by it. The small line helpers the other collectors share live here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

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

    def with_delimiter(self, delimiter: str) -> LineFormat:
        """The same columns, separated by `delimiter` whatever the format shows (`ingest --delimiter`)."""
        fields = tuple(
            Field(f.name, delimiter if i < len(self.fields) - 1 else None) for i, f in enumerate(self.fields)
        )
        return LineFormat(fields, self.prefix, self.trailer, self.free_text)


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
