"""Bad input is not a success (issue 14 item 8): garbage fails the run, empty input warns, compression is read.

Ground truth: real `sinfo --json` captures and the live-format sacct capture of the Slurm 22.05 test bed
(tests/fixtures/slurm-22.05/), whose row counts the other tests establish; random bytes from a fixed seed.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import random
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from slurmscope.cli import main

FIX = Path(__file__).parents[1] / "fixtures" / "slurm-22.05"


@pytest.fixture(autouse=True)
def _no_local_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("SLURMSCOPE_CONFIG", "SLURMSCOPE_DB"):
        monkeypatch.delenv(var, raising=False)


def ingest(db: Path, *args: str):
    return CliRunner().invoke(main, ["--db", str(db), "ingest", *args], catch_exceptions=False)


def runs(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT collector, status, rows, quarantined, error, warning FROM collector_runs ORDER BY run_id"
        ).fetchall()


def count(db: Path, table: str) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608 - test table names


def test_random_bytes_fail_the_run_and_the_exit(tmp_path):
    junk = tmp_path / "random.bin"
    junk.write_bytes(random.Random(14).randbytes(4096))
    db = tmp_path / "s.duckdb"
    res = ingest(db, "sinfo", str(junk))
    assert res.exit_code != 0
    assert "mostly garbage" in res.output and "failed" in res.output
    [(collector, status, rows, quarantined, error, _w)] = runs(db)
    assert (collector, status, rows) == ("sinfo", "failed", 0)
    assert quarantined > 0 and "quarantined" in error
    assert count(db, "node_states") == 0
    assert count(db, "quarantine") == quarantined  # kept to be looked at
    st = CliRunner().invoke(main, ["--db", str(db), "status", "--format", "csv"], catch_exceptions=False)
    [row] = [ln for ln in st.output.splitlines() if ln.startswith("sinfo,")]
    assert row.split(",")[1] == "failed"  # `status` no longer says ok


def test_json_cut_short_is_a_failed_run(tmp_path):
    # the bed's real `sinfo --json` (read whole it loads 9 rows: tests/collectors/test_sinfo_json.py), cut
    f = tmp_path / "sinfo.json"
    f.write_bytes((FIX / "human" / "human_sinfo_json.txt").read_bytes()[:5000])
    db = tmp_path / "s.duckdb"
    res = ingest(db, "sinfo", str(f))
    assert res.exit_code != 0 and "mostly garbage" in res.output
    assert runs(db)[0][1:3] == ("failed", 0)
    assert count(db, "node_states") == 0


def test_a_few_bad_lines_among_good_ones_still_succeed(tmp_path):
    good = (FIX / "sinfo_final.txt").read_bytes()
    f = tmp_path / "sinfo.txt"
    f.write_bytes(good + b"this line is not sinfo output\n")
    db = tmp_path / "s.duckdb"
    res = ingest(db, "sinfo", str(f))
    assert res.exit_code == 0, res.output
    [(_c, status, rows, quarantined, _e, _w)] = runs(db)
    assert (status, quarantined) == ("ok", 1) and rows == good.count(b"\n")


def test_empty_input_succeeds_with_a_warning(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    db = tmp_path / "s.duckdb"
    res = ingest(db, "sacct", str(empty), "--format", "jobid,submit")
    assert res.exit_code == 0, res.output
    assert "warning: empty input" in res.output
    assert runs(db) == [("sacct", "ok", 0, 0, None, "empty input: 0 rows")]


@pytest.mark.parametrize(
    "ext, compress", [("gz", gzip.compress), ("xz", lzma.compress), ("bz2", bz2.compress)]
)
def test_compressed_capture_gives_the_same_rows(tmp_path, ext, compress):
    plain = (FIX / "sacct_final.txt").read_bytes()
    f = tmp_path / f"sacct_final.txt.{ext}"
    f.write_bytes(compress(plain))
    fmt = ["--delimiter", "\x1f"]
    db1, db2 = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    assert ingest(db1, "sacct", str(FIX / "sacct_final.txt"), *fmt).exit_code == 0
    res = ingest(db2, "sacct", str(f), *fmt)
    assert res.exit_code == 0, res.output
    q = "SELECT * EXCLUDE (ingested_at, source) FROM jobs ORDER BY ALL"  # source: the file name
    with duckdb.connect(str(db1), read_only=True) as a, duckdb.connect(str(db2), read_only=True) as b:
        rows = a.execute(q).fetchall()
        assert rows and rows == b.execute(q).fetchall()


def test_zstd_and_archives_are_refused_by_name(tmp_path):
    z = tmp_path / "dump.zst"
    z.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 32)  # the zstd frame magic (RFC 8878, 3.1.1)
    res = ingest(tmp_path / "s.duckdb", "sacct", str(z))
    assert res.exit_code != 0
    assert "zstd-compressed" in res.output and "zstd -d" in res.output
    assert "header" not in res.output
    zp = tmp_path / "dump.zip"
    zp.write_bytes(b"PK\x03\x04" + b"\x00" * 32)
    res = ingest(tmp_path / "s.duckdb", "sinfo", str(zp))
    assert res.exit_code != 0 and "zip archive" in res.output


def test_truncated_gzip_is_refused_as_damaged(tmp_path):
    f = tmp_path / "cut.gz"
    f.write_bytes(gzip.compress((FIX / "sacct_final.txt").read_bytes())[:200])
    res = ingest(tmp_path / "s.duckdb", "sacct", str(f), "--delimiter", "\x1f")
    assert res.exit_code != 0 and "damaged gzip" in res.output


def test_json_given_to_a_kind_that_reads_none_fails_with_a_hint(tmp_path):
    db = tmp_path / "s.duckdb"
    res = ingest(db, "sshare", str(FIX / "json-state" / "rest_nodes_a.json"))
    assert res.exit_code != 0 and "it looks like JSON" in res.output
    assert runs(db)[0][1] == "failed"


@pytest.mark.parametrize("kind, name", [("sinfo", "sinfo_out.json"), ("squeue", "squeue_out.json")])
def test_json_of_a_declined_version_is_refused_by_name(tmp_path, kind, name):
    # rivosinc's real Slurm 21.08.5 `sinfo --json` / `squeue --json` (openapi/v0.0.37, not read)
    db = tmp_path / "s.duckdb"
    res = ingest(db, kind, str(FIX.parent / "rivosinc__prometheus-slurm-exporter" / name))
    assert res.exit_code != 0 and "v0.0.37 is not read" in res.output
    assert runs(db) == []  # refused before anything loads, as a sacct version is
