"""sacct that exits 0 but prints garbage (issue 9): what is kept, what is quarantined, whether the watermark moves.

The fake `sacct` (tests/fakes/sacct) prints the bytes given; expected rows are the good lines written here.
"""

from __future__ import annotations

import os
import random
import sys
from datetime import UTC, datetime, timedelta

import pytest
from slurmscope.collectors.base import get_watermark
from slurmscope.collectors.collect import collect, untrusted_output
from slurmscope.collectors.sacct import LIVE_FIELDS

from slurmscope.config import load_config
from tests.paths import FAKES

FAKES = FAKES
US = "\x1f"
NOW = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)
HEADER = US.join(LIVE_FIELDS.split(","))


def job(job_id: str, state: str = "COMPLETED") -> str:
    values = {
        "JobID": job_id,
        "JobIDRaw": job_id,
        "Cluster": "",
        "Partition": "gpu",
        "QOS": "normal",
        "Account": "ml",
        "User": "u",
        "UID": "1",
        "Submit": "2024-05-10T09:00:00",
        "Eligible": "2024-05-10T09:00:00",
        "Start": "2024-05-10T09:01:00",
        "End": "2024-05-10T09:31:00",
        "Elapsed": "00:30:00",
        "Timelimit": "01:00:00",
        "State": state,
        "ExitCode": "0:0",
        "NNodes": "1",
        "NCPUS": "4",
        "ReqMem": "4G",
        "AllocTRES": "cpu=4,gres/gpu=1,node=1",
        "NodeList": "g1",
        "Flags": "SchedMain",
        "Priority": "1",
        "Reason": "None",
        "JobName": f"name{job_id}",
    }
    return US.join(values.get(n, "") for n in LIVE_FIELDS.split(","))


def cut(line: str) -> str:
    """A record line cut in the middle of its fields, as a truncated write leaves it."""
    return line[: len(line) // 2]


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    for var in ("FAKE_SACCT_MODE", "FAKE_SACCT_JOBS_OUTPUT", "FAKE_SACCT_FAIL_ON_CALL", "FAKE_SACCT_LOG"):
        monkeypatch.delenv(var, raising=False)
    cfg = load_config(None, env={}).with_overrides(
        slurm={"bin_dir": str(FAKES), "timeout_seconds": 5.0},
        collect={
            "sacct_window_seconds": 86400,
            "sacct_overlap_seconds": 3600,
            "sacct_initial_lookback_seconds": 86400,
        },
    )

    def set_output(data: bytes) -> None:
        p = tmp_path / "out.txt"
        p.write_bytes(data)
        monkeypatch.setenv("FAKE_SACCT_OUTPUT", str(p))

    return cfg, set_output


def lines(*rows: str, newline: bool = True) -> bytes:
    return ("\n".join(rows) + ("\n" if newline else "")).encode()


def last_run(con) -> tuple:
    """The last window run (the by-id lookups that follow a good window are runs without a window)."""
    return con.execute(
        "SELECT status, rows, quarantined, error FROM collector_runs WHERE window_end IS NOT NULL"
        " ORDER BY run_id DESC LIMIT 1"
    ).fetchone()


def test_untrusted_output_rules():
    assert untrusted_output(b"", 0, 0) is None  # nothing at all is a quiet window, not garbage
    assert untrusted_output(b"h\na\nb\n", 2, 0) is None
    assert untrusted_output(b"h\na\nb\nc\nx\n", 3, 1) is None  # one bad line among three good ones
    assert "mostly garbage: 2 of 4" in untrusted_output(b"h\na\nb\nx\ny\n", 2, 2)
    assert "mostly garbage: 5 of 5" in untrusted_output(b"\x00\xff\n" * 5, 0, 5)
    assert "cut short" in untrusted_output(b"h\na\nb", 2, 0)  # the stream stopped mid-record


def test_random_bytes_are_quarantined_and_the_watermark_stays(con, env):
    cfg, set_output = env
    set_output(lines(HEADER, job("1")))
    [ok] = collect(con, cfg, "sacct", now=NOW)
    assert ok.status == "ok" and get_watermark(con, cfg.cluster, "sacct") == NOW
    rnd = random.Random(9)
    garbage = bytes(rnd.randrange(256) for _ in range(3000)) + b"\n"
    n_lines = sum(1 for ln in garbage.split(b"\n")[:-1] if ln.strip(b" \t\r"))
    set_output(garbage)
    [out] = collect(con, cfg, "sacct", now=NOW + timedelta(hours=2))
    assert out.status == "error" and "mostly garbage" in out.error and "watermark kept" in out.error
    assert get_watermark(con, cfg.cluster, "sacct") == NOW
    status, rows, quarantined, error = last_run(con)
    assert (status, rows, quarantined) == ("error", 0, n_lines) and error == out.error
    reasons = con.execute("SELECT reason FROM quarantine").fetchall()
    assert len(reasons) == n_lines and all(r for (r,) in reasons)
    # the job stored before the garbage is untouched
    assert con.execute("SELECT job_id, state FROM jobs").fetchall() == [("1", "COMPLETED")]


def test_mostly_truncated_output_keeps_its_good_lines_but_not_the_watermark(con, env):
    cfg, set_output = env
    set_output(lines(HEADER, job("1")))
    collect(con, cfg, "sacct", now=NOW)
    set_output(lines(HEADER, job("2"), cut(job("3")), cut(job("4"))))
    [out] = collect(con, cfg, "sacct", now=NOW + timedelta(hours=2))
    assert out.status == "error" and "2 of 3 lines quarantined" in out.error
    assert get_watermark(con, cfg.cluster, "sacct") == NOW
    # nothing good is lost: job 2 is stored; 3 and 4 wait in quarantine with the reason
    assert sorted(con.execute("SELECT job_id FROM jobs").fetchall()) == [("1",), ("2",)]
    assert last_run(con)[:3] == ("error", 1, 2)
    reasons = [r for (r,) in con.execute("SELECT reason FROM quarantine ORDER BY line_no").fetchall()]
    assert len(reasons) == 2 and all(f"fields, expected {len(LIVE_FIELDS.split(','))}" in r for r in reasons)
    # the next good run reads the same window again (from the old watermark) and gets jobs 3 and 4
    set_output(lines(HEADER, job("1"), job("2"), job("3"), job("4")))
    [again] = collect(con, cfg, "sacct", now=NOW + timedelta(hours=3))
    assert again.status == "ok" and get_watermark(con, cfg.cluster, "sacct") == NOW + timedelta(hours=3)
    assert sorted(con.execute("SELECT job_id FROM jobs").fetchall()) == [("1",), ("2",), ("3",), ("4",)]


def test_output_cut_short_does_not_advance_the_watermark(con, env):
    cfg, set_output = env
    set_output(lines(HEADER, job("1"), job("2"), cut(job("3")), newline=False))
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert out.status == "error" and "cut short" in out.error
    assert get_watermark(con, cfg.cluster, "sacct") is None
    assert sorted(con.execute("SELECT job_id FROM jobs").fetchall()) == [("1",), ("2",)]
    assert last_run(con)[:3] == ("error", 2, 1)


def test_one_bad_line_among_good_ones_is_quarantined_and_the_watermark_moves(con, env):
    cfg, set_output = env
    set_output(lines(HEADER, job("1"), job("2"), cut(job("3")), job("4")))
    [out] = collect(con, cfg, "sacct", now=NOW)
    assert (out.status, out.rows) == ("ok", 3)
    assert get_watermark(con, cfg.cluster, "sacct") == NOW
    assert last_run(con) == ("ok", 3, 1, None)
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1
