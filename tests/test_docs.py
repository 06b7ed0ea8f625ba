"""The docs stay true: relative links resolve, no developer's machine shows through, quoted counts are current.

Links are checked the way GitHub renders them (a file or folder relative to the page, a `#fragment` against
the anchors GitHub derives from the target's headings), because that is where users read these pages.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "runbooks").glob("*.md")]
)
IDS = [p.relative_to(ROOT).as_posix() for p in PAGES]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
# A page named in plain text ("see docs/alerts.md") is a link to the reader too.
DOC_MENTION = re.compile(r"(?<![\w/.$~-])(docs/[\w./-]+\.md)(?:#([\w-]+))?")
# Paths that exist only on the machine of whoever wrote the page.
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])(/work/|/root/|/home/[^/\s`]+/|/Users/[^/\s`]+/|[A-Z]:\\Users\\"
    r"|/tmp/\S*(?:venv|site-packages|pytest-of-|bash_jobs))"
)


def _prose(text: str) -> str:
    """The page without fenced code blocks and code spans, where link syntax is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: rendered text, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every fragment a link into `path` may name (duplicate headings get -1, -2, ... as on GitHub)."""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    out = set(HTML_ANCHOR.findall(text))
    for _, title in HEADING.findall(FENCE.sub("", text)):
        slug = github_anchor(title)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    prose = _prose(path.read_text(encoding="utf-8"))
    return INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)


def test_anchor_rules_match_github():
    assert github_anchor("Prometheus") == "prometheus"
    assert github_anchor("`serve` schedule (UTC, APScheduler 3.x)") == "serve-schedule-utc-apscheduler-3x"
    assert github_anchor("Agent and central GPU series: `cluster` and `source`") == (
        "agent-and-central-gpu-series-cluster-and-source"
    )
    assert (
        github_anchor("The demo's own history (`tests/x_live.py`)") == "the-demos-own-history-testsx_livepy"
    )
    assert github_anchor("pipelines: full rebuild and incremental day") == (
        "pipelines-full-rebuild-and-incremental-day"
    )


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:, file: ... are not checked here
            continue
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / unquote(file_part)).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and unquote(fragment).lower() not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_pages_named_in_text_exist(page):
    broken = []
    for name, fragment in DOC_MENTION.findall(page.read_text(encoding="utf-8")):
        if not (ROOT / name).exists():
            broken.append(f"{name}: no such page")
        elif fragment and fragment not in anchors(ROOT / name):
            broken.append(f"{name}#{fragment}: no such heading")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_no_machine_specific_paths(page):
    found = [
        f"line {n}: {m.group(0)}"
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for m in MACHINE_PATH.finditer(line)
    ]
    assert not found, found


def _quoted(pattern: str) -> list[tuple[str, int]]:
    rx = re.compile(pattern)
    return [
        (p.relative_to(ROOT).as_posix(), int(m.group(1).replace(",", "")))
        for p in PAGES
        for m in rx.finditer(p.read_text(encoding="utf-8"))
    ]


def test_quoted_counts_are_the_code_s():
    """Counts the docs quote (metric families, alerts, dashboards) are those of the catalog, rules and builders."""
    from slurmscope.alerts.rules import ALERTS
    from slurmscope.dashboards.build import MODULES

    from slurmscope.catalog import CATALOG
    from slurmscope.exporter import INTERNAL

    families = len(CATALOG) + len(INTERNAL)  # the rows of docs/metrics.md
    metrics_md = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert metrics_md.count("\n| `slurmscope_") == families
    quoted = {
        "metric families": (_quoted(r"(\d[\d,]*)\s+(?:`slurmscope_\*`\s+)?(?:metric\s+)?families"), families),
        "alerts": (_quoted(r"(\d+)\s+alerts\s+with\s+runbooks"), len(ALERTS)),
        "dashboards": (_quoted(r"(\d+)\s+Grafana\s+dashboards"), len(MODULES)),
    }
    assert all(hits for hits, _ in quoted.values()), "a count is no longer quoted: drop or move its check"
    wrong = [(what, page, n, want) for what, (hits, want) in quoted.items() for page, n in hits if n != want]
    assert not wrong, wrong
