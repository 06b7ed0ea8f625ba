"""A DuckDB file held open by another process: DuckDB's file lock is per process, so a test of what a lock
does needs a second one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HOLDER = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "read_only")
print("held", flush=True)
if sys.argv[3]:
    time.sleep(float(sys.argv[3]))
    con.close()
sys.stdin.read()
"""


@contextmanager
def held(path: str | Path, *, read_only: bool = False, seconds: float | None = None) -> Iterator[None]:
    """The block runs while another process has `path` open (read-only or as a writer), until the block ends
    or, with `seconds`, until that long after it opened the file."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), "read_only" if read_only else "write", str(seconds or "")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
