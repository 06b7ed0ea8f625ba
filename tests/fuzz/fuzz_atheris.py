"""Coverage-guided fuzzing of one parser with atheris (libFuzzer for Python): whole inputs, raw bytes.

    nice -n 10 .venv/bin/python -m tests.fuzz.fuzz_atheris sdiag -runs=100000 -max_len=4096 [corpus_dir]

atheris is an optional extra (`pip install -e .[fuzz]`). The parser module and the shared parsing helpers
are instrumented, so libFuzzer keeps the inputs that reach new branches and mutates them (the hypothesis
fuzzer, tests/fuzz/fuzz_parsers.py, draws blind). Per input: parse() returns, every quarantine entry
names a line of the input with that line's text (and bytes when not UTF-8), and an input with a
non-blank line other than the parser's documented context lines (fuzz_parsers.consumed_whole) gives a row
or a quarantine entry. A failed check raises, and libFuzzer writes the input
to crash-<sha1> and stops. Not part of CI.
"""

from __future__ import annotations

import importlib
import sys
from datetime import UTC, datetime

import atheris

from tests.fuzz.fuzz_parsers import consumed_whole, parsers

SNAP = datetime(2026, 11, 1, tzinfo=UTC)
BLANK = b" \t\r\n\x0b\x0c"


def checker(kind: str, module):
    def test_one_input(data: bytes) -> None:
        parsed = module.parse(data, cluster="c", snapshot_time=SNAP, tz=UTC, source="atheris")
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        seen = set()
        for r in parsed.quarantine.iter_rows(named=True):
            no = r["line_no"]
            assert 1 <= no <= len(lines) and no not in seen and r["reason"], r
            seen.add(no)
            raw = lines[no - 1].removesuffix(b"\r")
            try:
                text, want_bytes = raw.decode("utf-8"), None
            except UnicodeDecodeError:
                text, want_bytes = raw.decode("utf-8", errors="replace"), raw
            assert r["raw_text"] == text and r["raw_bytes"] == want_bytes, (no, r, raw)
        if any(ln.strip(BLANK) and not consumed_whole(kind, ln) for ln in lines):
            assert parsed.rows + parsed.quarantine.height >= 1, data[:200]

    return test_one_input


def main() -> None:
    # Libraries first, uninstrumented: atheris' bytecode rewriting of polars made a plain DataFrame build
    # fail (AttributeError in polars' own series construction), a false finding. Only our code is traced:
    # the registry imports every collector, and with them the shared parsing helpers.
    for lib in ("polars", "duckdb", "pyarrow", "zoneinfo", "tomllib", "slurmscope.config", "slurmscope.db"):
        importlib.import_module(lib)
    with atheris.instrument_imports(include=["slurmscope"]):
        modules = parsers()
    if len(sys.argv) < 2 or sys.argv[1] not in modules:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(modules)}}} [libFuzzer options]")
    kind = sys.argv.pop(1)
    atheris.Setup(sys.argv, checker(kind, modules[kind]))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
