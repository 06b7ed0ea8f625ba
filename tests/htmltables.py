"""The tables of an HTML page read back as the text a reader sees, cell by cell, for tests of the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Table:
    section: str | None  # id of the enclosing <section>
    table_id: str | None
    rows: list[list[str]] = field(default_factory=list)  # header rows included


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[Table] = []
        self.sections: list[str | None] = []
        self.open: list[Table] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id"))
        elif tag == "table":
            t = Table(self.sections[-1] if self.sections else None, a.get("id"))
            self.tables.append(t)
            self.open.append(t)
        elif tag == "tr" and self.open:
            self.open[-1].rows.append([])
        elif tag in ("td", "th") and self.open:
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self.sections:
            self.sections.pop()
        elif tag == "table" and self.open:
            self.open.pop()
        elif tag in ("td", "th") and self.cell is not None and self.open:
            self.open[-1].rows[-1].append(
                "".join(self.cell).strip(" \t\r\n")
            )  # indentation (em spaces) stays
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def tables(page: str) -> list[Table]:
    reader = _Reader()
    reader.feed(page)
    return reader.tables


def row(page: str, label: str, section: str | None = None) -> list[str]:
    """The first row (of `section`'s tables, if given) whose first cell reads `label`."""
    for t in tables(page):
        if section is None or t.section == section:
            for r in t.rows:
                if r and r[0] == label:
                    return r
    raise AssertionError(f"no row {label!r}" + (f" in section {section!r}" if section else ""))
