"""Slurm's human output (`sinfo`, `sinfo -l`, `sinfo -N -l`, `squeue`, `squeue -l`) told by its header lines.

Operators capture what they type, not a `--format` string. These outputs are fixed-width columns under a
line of column titles (after a date line with `-l`), and values are cut to their column's width. Splitting
them on whitespace breaks on every value with a space (a pending reason, a job name, a drain reason), and
reading them with the live format quarantines every line or stores the title line as a node. Each known
layout is recognised by its exact title sequence; a title line that is none of them is refused with the
format to capture instead, never guessed at.

Splitting follows the header: titles are justified like their values, so a right-justified column ends
where its title ends and the last (left-justified) column starts where its title starts. Only the free-text
columns (a job name in the middle, the reason last) are cut by position; the others are whitespace tokens.
A value that fills its fixed-width column may have been cut by Slurm: `fills()` tells the parsers so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

DATE_LINE = re.compile(
    r"^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
    r"\d{2}:\d{2}:\d{2} \d{4}$"
)
_TITLE = re.compile(r"^[A-Z][A-Z0-9_:()/%-]*$")


@dataclass(frozen=True)
class Layout:
    """One known human layout: its command line, its titles, and which columns are left-justified."""

    command: str
    titles: tuple[str, ...]
    left: frozenset[str]
    free_mid: str | None = None  # a middle column whose values may contain spaces (squeue NAME)


@dataclass(frozen=True)
class Table:
    """A recognised output: layout, the header's line number and title spans, the date line if any."""

    layout: Layout
    header_no: int
    spans: tuple[tuple[int, int], ...]
    header_len: int
    date: str | None


def parse_date_line(text: str | None, tz: ZoneInfo) -> datetime | None:
    """`Thu Dec 03 17:29:57 2026` (the first line of `sinfo -l`/`squeue -l`, printed in local time)."""
    if not text:
        return None
    return datetime.strptime(re.sub(" +", " ", text.strip()), "%a %b %d %H:%M:%S %Y").replace(tzinfo=tz)


def _tokens(line: str) -> list[tuple[str, int, int]]:
    return [(m.group(0), m.start(), m.end()) for m in re.finditer(r"[^ \t]+", line)]


def find_table(
    lines: list[tuple[int, str, bytes | None]],
    layouts: tuple[Layout, ...],
    id_titles: frozenset[str],
    refused: dict[tuple[str, ...], str],
    capture_instead: str,
) -> tuple[Table | None, str | None]:
    """(table, None) for a known layout, (None, why) for a title line that is not one, (None, None) else.

    `lines` are the non-blank lines. A first line that is a date is taken as `-l`'s date line. A line of
    upper-case titles that includes one of `id_titles` is a header; `refused` names known layouts that are
    declined on purpose, with their reason.
    """
    if not lines:
        return None, None
    date = None
    i = 0
    if DATE_LINE.match(lines[0][1].strip()):
        date, i = lines[0][1].strip(), 1
    if i >= len(lines):
        return None, None
    no, header, _raw = lines[i]
    toks = _tokens(header)
    titles = tuple(t for t, _s, _e in toks)
    if not titles or not all(_TITLE.match(t) for t in titles) or not set(titles) & id_titles:
        return None, None
    for lay in layouts:
        if lay.titles == titles:
            spans = tuple((s, e) for _t, s, e in toks)
            return Table(lay, no, spans, len(header.rstrip("\r\n")), date), None
    if titles in refused:
        return None, refused[titles]
    known = ", ".join(f"`{lay.command}`" for lay in layouts)
    return None, (
        f"column titles {' '.join(titles)!r} are not one of the layouts read without --format ({known}); "
        f"give the -o/-O string it was printed with as ingest --format, or capture {capture_instead}"
    )


def split_row(text: str, table: Table) -> tuple[dict[str, str] | None, set[str], str | None]:
    """(values by title, titles whose value may have been cut, None) of one data line, or (None, set(), why).

    A value may have been cut when it fills its fixed-width column (`width`): for a right-justified one,
    when it starts at the column's first character (a shorter value has padding there, even when the cut
    ends on a space); for the padded last column, when fewer than two characters of padding are left
    (a cut that ends on a space looks like one character of padding).
    """
    titles = table.layout.titles
    n = len(titles)
    s_last = table.spans[-1][0]
    if len(text) <= s_last or (s_last > 0 and text[s_last - 1] not in " \t"):
        return None, set(), f"line does not line up with the {table.layout.command!r} header"
    last = text[s_last:]
    values: dict[str, str] = {titles[-1]: last.strip(" \t")}
    cut: set[str] = set()
    w = width(table, titles[-1])
    if w is not None and len(values[titles[-1]]) >= w - 1:
        cut.add(titles[-1])
    head = text[:s_last]
    mid = table.layout.free_mid
    if mid is None:
        toks = head.split()
        if len(toks) != n - 1:
            return None, set(), f"{len(toks) + 1} columns, expected {n} ({table.layout.command!r} header)"
        values.update(zip(titles[:-1], toks, strict=True))
    else:
        k = titles.index(mid)
        start, end = table.spans[k - 1][1], table.spans[k][1]
        before, after = head[:start].split(), head[end:].split()
        if len(before) != k or len(after) != n - k - 2 or (len(head) > start and head[start] not in " \t"):
            return None, set(), f"line does not line up with the {table.layout.command!r} header"
        values.update(zip(titles[:k], before, strict=True))
        values[mid] = head[start:end].strip(" \t")
        if head[start + 1 : start + 2] not in (" ", "\t", ""):
            cut.add(mid)
        values.update(zip(titles[k + 1 : -1], after, strict=True))
    for t in titles[:-1]:
        w = width(table, t)
        if t != mid and w is not None and len(values[t]) >= w:
            cut.add(t)
    return values, cut, None


def width(table: Table, title: str) -> int | None:
    """The fixed width of a column when the header shows it, else None (sized to its widest value).

    A right-justified column after another right-justified one spans from the end of the previous title
    (plus the one-space separator) to the end of its own; the last column's width shows as the header's
    trailing padding (`REASON` padded to 20 in `sinfo -N -l`).
    """
    titles = table.layout.titles
    k = titles.index(title)
    left = table.layout.left
    if k == len(titles) - 1:
        w = table.header_len - table.spans[k][0]
        return w if w > len(title) else None
    if title in left:
        return None
    if k == 0:
        return table.spans[0][1]
    if titles[k - 1] in left:
        return None
    return table.spans[k][1] - table.spans[k - 1][1] - 1
