"""sacct text read in slices (`parse_slices`, what `ingest` loads slice by slice) gives the rows of the
one-slice parse wherever the slices end, and a file ingested in tiny slices stores what one slice stores.

Ground truth is the one-slice parse of real captures, whose rows the other tests check by hand:
tests/fixtures/slurm-22.05/sacct_final.txt (the live format of the 22.05 test bed, jobs 12 and 13 requeued,
each attempt with its steps), .../seff/seff_sacct.txt (the usage fields), and rug-cit-hpc's hb-jobinfo
capture (headerless `--parsable`, a three-byte delimiter, 52 quarantined lines: test_ingest_cli.py).
"""

from __future__ import annotations

import io
import threading
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal
from slurmscope.collectors import base, sacct

from slurmscope.cli import main
from tests.collectors.test_ingest_cli import HB_FORMAT

FIX = Path(__file__).parents[1] / "fixtures"
UTC = ZoneInfo("UTC")
CAPTURES = {
    "live": ("slurm-22.05/sacct_final.txt", {}),
    "usage": ("slurm-22.05/seff/seff_sacct.txt", {}),
    "headerless": ("rug-cit-hpc__hb-jobinfo/sacct.txt", {"fmt": HB_FORMAT, "delimiter": "☃"}),
}


def sliced(data: bytes, size: int, **kw) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    parts = list(sacct.parse_slices(io.BytesIO(data), cluster="c", tz=UTC, slice_bytes=size, **kw))
    loaded = [p for p in parts if p.tables]
    jobs = pl.concat([p.tables["jobs"] for p in loaded], how="vertical_relaxed")
    steps = pl.concat([p.tables["job_steps"] for p in loaded], how="vertical_relaxed")
    return jobs, steps, pl.concat([p.quarantine for p in parts])


def line_starts(data: bytes) -> list[int]:
    return [i + 1 for i, b in enumerate(data[:-1]) if b == ord("\n")]


@pytest.mark.parametrize("capture", list(CAPTURES))
@pytest.mark.parametrize("seek", ["job lines", "any line"])
@pytest.mark.parametrize("workers", [1, 3])
def test_every_slice_boundary_gives_the_rows_of_one_slice(capture, seek, workers, monkeypatch):
    """Slices of 1 byte (a job and its steps each, or a line each: every boundary of the file at once) and
    of every line's offset (the first cut after each line, later cuts at multiples; every 10th line of the
    242-line headerless capture): "any line" also cuts between a job and its steps, which then find their
    allocation in the lines carried from the slices before. Three workers (every third size) parse each
    slice without those lines first, so a slice that needs them is parsed again with them."""
    name, kw = CAPTURES[capture]
    data = (FIX / name).read_bytes()
    whole = sacct.parse(data, cluster="c", tz=UTC, **kw)
    assert whole.tables["jobs"].height and whole.tables["job_steps"].height
    if seek == "any line":
        monkeypatch.setattr(sacct, "SLICE_SEEK_LINES", 0)
    sizes = [1, *line_starts(data)[:: 10 if capture == "headerless" else 1]]
    for size in sizes[:: 1 if workers == 1 else 3]:
        jobs, steps, q = sliced(data, size, workers=workers, **kw)
        # attempt is the rank within a slice; ranked over all slices it is the one-slice parse's
        attempt = sacct.output_attempts(jobs)
        assert attempt.to_list() == whole.tables["jobs"]["attempt"].to_list(), size
        assert_frame_equal(jobs.drop("attempt", "restarts"), whole.tables["jobs"].drop("attempt", "restarts"))
        assert_frame_equal(steps, whole.tables["job_steps"])
        assert_frame_equal(q, whole.quarantine)


def _parse_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("slurmscope-sacct-parse")]


def test_closing_the_slices_early_stops_the_parse_workers():
    data = (FIX / CAPTURES["live"][0]).read_bytes()
    parts = sacct.parse_slices(io.BytesIO(data), cluster="c", tz=UTC, slice_bytes=1, workers=2)
    next(parts)  # the header
    assert next(parts).tables["jobs"].height == 1
    assert _parse_workers()
    parts.close()
    assert _parse_workers() == []


def test_the_carry_keeps_each_jobs_latest_allocation_and_the_newest_rows(monkeypatch):
    """What the parse workers' slices are merged with, in order: a requeued job's later attempt replaces its
    earlier one (a step takes the latest allocation printed before it), and the oldest rows go first."""
    monkeypatch.setattr(sacct, "CARRY_ROWS", 3)
    t = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in range(5)]
    carry = sacct._carried({}, [(1, t[0]), (2, t[1])])
    carry = sacct._carried(carry, [(1, t[2]), (3, t[3]), (4, t[4])])
    assert list(carry.items()) == [(1, t[2]), (3, t[3]), (4, t[4])]
    assert sacct._carried(carry, []) == carry


def test_a_slice_ends_before_a_job_line():
    data = (FIX / CAPTURES["live"][0]).read_bytes()
    blocks = list(sacct._blocks(io.BytesIO(data[1:]), data[:1], 1, b"\x1f", 0))
    assert b"".join(blocks) == data
    assert blocks[0] == data[: data.index(b"\n") + 1]  # the header alone
    for block in blocks[1:]:
        lines = block.decode().splitlines()
        assert "." not in lines[0].split("\x1f")[0]  # starts with a job line
        assert all("." in ln.split("\x1f")[0] for ln in lines[1:])  # then only its steps


def _ingest(db: Path, path: Path, *args: str):
    return CliRunner().invoke(
        main, ["--db", str(db), "ingest", "sacct", str(path), *args], catch_exceptions=False
    )


def _dump(db: Path) -> dict[str, list]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {
            t: con.execute(f"SELECT * EXCLUDE (ingested_at) FROM {t} ORDER BY ALL").fetchall()  # noqa: S608 - test table names
            for t in ("jobs", "job_steps")
        } | {
            "quarantine": con.execute(
                "SELECT line_no, raw_text, reason, content_sha256 FROM quarantine ORDER BY ALL"
            ).fetchall(),
            "runs": con.execute("SELECT status, rows, quarantined, error FROM collector_runs").fetchall(),
        }


@pytest.mark.parametrize("capture", ["live", "headerless"])
def test_ingest_in_tiny_slices_stores_what_one_slice_stores(tmp_path, monkeypatch, capture):
    """Attempts (jobs 12 and 13 requeued) are ranked over the whole file once its slices are loaded."""
    name, kw = CAPTURES[capture]
    args = ["--format", kw["fmt"], "--delimiter", kw["delimiter"]] if kw else []
    whole, tiny = tmp_path / "whole.duckdb", tmp_path / "tiny.duckdb"
    assert _ingest(whole, FIX / name, *args).exit_code == 0
    monkeypatch.setattr(sacct, "SLICE_BYTES", 1)
    monkeypatch.setattr(sacct, "SLICE_SEEK_LINES", 0)
    assert _ingest(tiny, FIX / name, *args).exit_code == 0
    expected = _dump(whole)
    assert _dump(tiny) == expected
    if capture == "live":
        attempts = {(r[2], r[4]) for r in expected["jobs"]}  # (job_id_raw, attempt)
        assert {(12, 1), (12, 2), (13, 1), (13, 2)} <= attempts


def test_attempts_printed_twice_in_one_file_load_once_into_an_empty_store(tmp_path, monkeypatch):
    """Overlapping windows appended to one file: a slice of keys new to the file skips the lookup of stored
    keys, a slice repeating earlier ones is upserted, and the store holds what one printing gives."""
    data = (FIX / CAPTURES["live"][0]).read_bytes()
    (tmp_path / "once").mkdir()
    (tmp_path / "twice").mkdir()
    once, twice = tmp_path / "once" / "sacct.txt", tmp_path / "twice" / "sacct.txt"
    once.write_bytes(data)
    twice.write_bytes(data + data[data.index(b"\n") + 1 :])
    assert _ingest(tmp_path / "once.duckdb", once, "--delimiter", "\x1f").exit_code == 0
    monkeypatch.setattr(sacct, "SLICE_BYTES", 1)
    monkeypatch.setattr(sacct, "SLICE_SEEK_LINES", 0)
    calls = []
    real = base.write

    def spy(con, rows, **kw):
        calls.append(kw.get("new", False))
        return real(con, rows, **kw)

    monkeypatch.setattr("slurmscope.collectors.ingest.write", spy)
    assert _ingest(tmp_path / "twice.duckdb", twice, "--delimiter", "\x1f").exit_code == 0
    expected, got = _dump(tmp_path / "once.duckdb"), _dump(tmp_path / "twice.duckdb")
    assert (got["jobs"], got["job_steps"]) == (expected["jobs"], expected["job_steps"])
    assert True in calls and False in calls  # the first printing skipped the lookup, the second did not


def test_a_crash_between_slices_leaves_nothing_half_loaded(tmp_path, monkeypatch):
    """The transaction is the unit: the slices already upserted are rolled back with the run."""
    path = FIX / CAPTURES["live"][0]
    db = tmp_path / "s.duckdb"
    monkeypatch.setattr(sacct, "SLICE_BYTES", 1)
    calls = []
    real = base.write

    def crash_on_the_fifth(con, rows, **kw):
        calls.append(rows.spec.name)
        if len(calls) == 5:
            raise RuntimeError("killed")
        return real(con, rows, **kw)

    monkeypatch.setattr("slurmscope.collectors.ingest.write", crash_on_the_fifth)
    with pytest.raises(RuntimeError, match="killed"):
        _ingest(db, path, "--delimiter", "\x1f")
    assert _parse_workers() == []
    with duckdb.connect(str(db), read_only=True) as con:
        for table in ("jobs", "job_steps", "quarantine", "collector_runs"):
            assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table  # noqa: S608
    monkeypatch.setattr("slurmscope.collectors.ingest.write", real)
    assert _ingest(db, path, "--delimiter", "\x1f").exit_code == 0
    assert _dump(db)["runs"][0][:2] == ("ok", sacct.parse(path.read_bytes(), cluster="c", tz=UTC).rows)
