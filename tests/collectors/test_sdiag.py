"""sdiag parser: main and backfill sections of several Slurm versions, snapshot time from the output, CLI."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from slurmscope.collectors import sdiag

from slurmscope.cli import main
from tests.paths import FIXTURES

FIX = FIXTURES
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def parse(data: bytes | str, tz: str = "UTC"):
    if isinstance(data, str):
        data = data.encode()
    return sdiag.parse(data, cluster="c", snapshot_time=T0, tz=ZoneInfo(tz))


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# Values read off each file by hand. vpenso's 2017 capture prints no epoch: its times are in the capture's
# zone (unknown upstream; read here as UTC).
CAPTURES = [
    (
        "vpenso__prometheus-slurm-exporter/sdiag.txt",
        {
            "snapshot_time": at(2017, 4, 12, 11, 4, 1),
            "data_since": at(2017, 4, 12, 2, 0, 0),
            "server_thread_count": 3,
            "agent_queue_size": 0,
            "jobs_submitted": 9706,
            "jobs_started": 35395,
            "jobs_completed": 31254,
            "jobs_canceled": 2835,
            "jobs_failed": 0,
            "jobs_pending": None,
            "main_last_cycle_us": 97209,
            "main_max_cycle_us": 1407590,
            "main_total_cycles": 34585,
            "main_mean_cycle_us": 74593,
            "main_mean_depth": 103,
            "main_cycles_per_minute": 63,
            "main_last_queue_length": 57011,
            "bf_backfilled_jobs": 111544,
            "bf_backfilled_jobs_since_reset": 793,
            "bf_backfilled_het_jobs": 10,
            "bf_total_cycles": 529,
            "bf_last_cycle_when": at(2017, 4, 12, 11, 3, 21),
            "bf_last_cycle_us": 1942890,
            "bf_max_cycle_us": 5933334,
            "bf_mean_cycle_us": 1960820,
            "bf_last_depth": 56,
            "bf_last_depth_try": 56,
            "bf_depth_mean": 29324,
            "bf_depth_mean_try": 1659,
            "bf_last_queue_length": 57064,
            "bf_queue_length_mean": 40772,
            "bf_table_size": None,
        },
    ),
    ("SckyzO__slurm_exporter/scheduler.txt", {"jobs_submitted": 9706, "bf_queue_length_mean": 40772}),
    (
        "treydock__prometheus-slurm-exporter/sdiag.txt",
        {
            # "Thu Jun 11 09:45:51 2020 (1591883151)": the epoch wins over the local wall time
            "snapshot_time": at(2020, 6, 11, 13, 45, 51),
            "data_since": at(2020, 6, 11, 0, 0, 0),
            "jobs_pending": 0,
            "jobs_running": 0,
            "main_total_cycles": 826,
            "main_last_cycle_us": 40,
            "bf_backfilled_jobs": 239,
            "bf_total_cycles": 0,
            "bf_last_cycle_when": at(2020, 6, 4, 16, 13, 16),
            "bf_table_size": 1,
            "bf_mean_cycle_us": None,
        },
    ),
    (
        "SckyzO__slurm_exporter/slurm-24.11.7/scheduler.txt",
        {
            "snapshot_time": at(2026, 7, 31, 4, 0, 28),
            "server_thread_count": 1,
            "jobs_submitted": 15,
            "jobs_started": 11,
            "main_last_cycle_us": 3508,
            "main_last_queue_length": 15,
            "bf_last_cycle_when": None,
            "bf_table_size": 0,
        },
    ),
    (
        "SckyzO__slurm_exporter/slurm-26.05.2/scheduler.txt",
        {
            "snapshot_time": at(2026, 7, 31, 3, 53, 19),
            "data_since": at(2026, 7, 31, 3, 51, 42),
            "jobs_pending": 6,
            "jobs_running": 8,
            "jobs_submitted": 14,
        },
    ),
    # test-bed recordings: the workload submits 20 jobs (README); other counters vary per run
    ("slurm-22.05/sdiag_final.txt", {"jobs_submitted": 20}),
    ("slurm-22.05/sdiag_mid.txt", {"jobs_submitted": 20}),
]


def test_real_22_05_values_match_the_raw_text():
    import re

    text = (FIX / "slurm-22.05/sdiag_final.txt").read_text()
    row = parse(text).tables["sched_stats"].row(0, named=True)
    epochs = [int(x) for x in re.findall(r"\((\d{10})\)", text)]
    assert row["snapshot_time"] == datetime.fromtimestamp(epochs[0], UTC)
    assert row["data_since"] == datetime.fromtimestamp(epochs[1], UTC)
    main_block = text.split("Main schedule statistics")[1].split("Backfilling stats")[0]
    bf_block = text.split("Backfilling stats")[1].split("Latency")[0]
    assert row["main_total_cycles"] == int(re.search(r"Total cycles:\s+(\d+)", main_block).group(1))
    assert row["bf_total_cycles"] == int(re.search(r"Total cycles:\s+(\d+)", bf_block).group(1))
    assert row["bf_last_cycle_us"] == int(re.search(r"\tLast cycle:\s+(\d+)", bf_block).group(1))
    assert row["jobs_started"] == int(re.search(r"Jobs started:\s+(\d+)", text).group(1))
    assert row["jobs_pending"] == int(re.search(r"Jobs pending:\s+(\d+)", text).group(1))


@pytest.mark.parametrize(("path", "expected"), CAPTURES, ids=[c[0] for c in CAPTURES])
def test_capture_parses_without_quarantine(path, expected):
    raw = (FIX / path).read_bytes()
    p = parse(raw)
    assert p.quarantine.height == 0, p.quarantine.to_dicts()
    df = p.tables["sched_stats"]
    assert df.height == 1
    row = df.row(0, named=True)
    for col, value in expected.items():
        assert row[col] == value, col
    assert row["raw_text"] == raw.decode()  # RPC tables and exit counters stay available


def test_main_and_backfill_labels_do_not_mix():
    text = (
        "sdiag output at Wed May 01 12:00:00 2024 (1714564800)\nMain schedule statistics (microseconds):\n"
        "\tLast cycle:   11\n\tTotal cycles: 12\nBackfilling stats\n\tLast cycle: 21\n\tTotal cycles: 22\n"
    )
    row = parse(text).tables["sched_stats"].row(0, named=True)
    assert (row["main_last_cycle_us"], row["main_total_cycles"]) == (11, 12)
    assert (row["bf_last_cycle_us"], row["bf_total_cycles"]) == (21, 22)
    assert row["snapshot_time"] == at(2024, 5, 1, 12, 0, 0)


def test_local_header_time_without_epoch_uses_the_zone():
    row = (
        parse("sdiag output at Wed Jan 15 10:00:00 2024\nJobs submitted: 1\n", tz="Europe/Berlin")
        .tables["sched_stats"]
        .row(0, named=True)
    )
    assert row["snapshot_time"] == at(2024, 1, 15, 9, 0, 0)


def test_not_sdiag_output_is_quarantined_whole():
    p = parse('{\n  "meta": {}\n}\n')
    assert p.tables["sched_stats"].height == 0
    assert p.quarantine["line_no"].to_list() == [1, 2, 3]


def test_bad_counter_is_quarantined_but_snapshot_kept():
    p = parse("sdiag output at Wed May 01 12:00:00 2024\nJobs submitted: lots\nJobs started: 3\n")
    assert p.quarantine["line_no"].to_list() == [2]
    assert p.tables["sched_stats"]["jobs_started"].to_list() == [3]


def test_json_whose_meta_names_no_version_is_declined():
    # rivosinc's `sdiag --json` shape without the data parser it names (tests/collectors/test_sdiag_json.py)
    p = parse('{"meta": {"Slurm": {"release": "23.02.4"}}, "statistics": {"jobs_submitted": 1}}\n')
    assert p.tables["sched_stats"].height == 0 and p.quarantine.height == 1
    assert "names no data parser version" in p.quarantine["reason"][0]


def test_cli_ingest_then_query(tmp_path):
    db = tmp_path / "d.duckdb"
    runner = CliRunner()
    res = runner.invoke(
        main, ["--db", str(db), "ingest", "sdiag", str(FIX / "treydock__prometheus-slurm-exporter/sdiag.txt")]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        main,
        [
            "--db",
            str(db),
            "query",
            "--format",
            "csv",
            "SELECT snapshot_time, bf_backfilled_jobs, main_total_cycles FROM sched_stats",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "2020-06-11 13:45:51+00:00,239,826" in res.output.splitlines()


def _check(data: bytes) -> None:
    p = parse(data)
    lines = data.split(b"\n")
    nonblank = {
        i for i, line in enumerate(lines, start=1) if line.decode("utf-8", "replace").strip(" \t\r\n\f\v")
    }
    q = set(p.quarantine["line_no"].to_list())
    if p.tables["sched_stats"].height == 0:
        assert q == nonblank  # nothing usable: every line quarantined
    else:
        assert q <= nonblank  # a snapshot keeps every line in raw_text


_WORDS = st.sampled_from(
    [
        "sdiag output at Wed May 01 12:00:00 2024",
        "Backfilling stats",
        "\tLast cycle: 5",
        "Jobs submitted: 7",
        "Main schedule statistics (microseconds):",
        "x: y",
        "*****",
        "Last cycle when: N/A",
        "garbage",
        "",
        "\t\tTotal cycles: 9",
    ]
)


@given(
    st.one_of(st.binary(max_size=400), st.lists(_WORDS, max_size=30).map(lambda xs: "\n".join(xs).encode()))
)
def test_never_raises_and_every_line_is_accounted_for(data):
    _check(data)


def test_counter_too_large_is_quarantined():
    p = parse(
        "sdiag output at Wed May 01 12:00:00 2024\nJobs submitted: 99999999999999999999\nJobs started: 2\n"
    )
    assert p.quarantine["line_no"].to_list() == [2]
    assert p.tables["sched_stats"]["jobs_submitted"].to_list() == [None]
