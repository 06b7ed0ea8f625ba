"""A corpus of hostile inputs for every parser: nothing escapes as an exception, every line is accounted for,
and the values that survive mean what Slurm meant."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from slurmscope.collectors.parsing import parse_slurm_time
from slurmscope.collectors.registry import COLLECTORS

from slurmscope.hostlist import expand_hostlist

UTC = timezone.utc
SNAP = datetime(2026, 11, 1, tzinfo=UTC)
HEADER = "JobID|JobIDRaw|Partition|Account|User|Submit|Start|End|Elapsed|Timelimit|State|ExitCode|NNodes|NCPUS|AllocTRES|NodeList|JobName"


def sacct_line(
    job: int,
    *,
    submit="2026-10-01T10:00:00",
    start="2026-10-01T10:05:00",
    end="2026-10-01T11:05:00",
    elapsed="01:00:00",
    ncpus="8",
    name="train",
    nodelist="gpu[001-002]",
    state="COMPLETED",
) -> str:
    return (
        f"{job}|{job}|gpu|research|alice|{submit}|{start}|{end}|{elapsed}|1-00:00:00|{state}|0:0|2|{ncpus}|"
        f"cpu={ncpus},gres/gpu=16|{nodelist}|{name}"
    )


def parse_sacct(text: str | bytes, tz: str = "UTC"):
    from slurmscope.collectors import sacct

    data = text.encode() if isinstance(text, str) else text
    return sacct.parse(data, cluster="c", snapshot_time=SNAP, tz=ZoneInfo(tz), source="hostile")


def accounted(parsed) -> int:
    return parsed.rows + parsed.quarantine.height


HOSTILE_LINES = {
    "very long job name": sacct_line(1, name="x" * 1_000_000),
    "NUL bytes": sacct_line(2, name="a\x00b\x00"),
    "huge cpu count": sacct_line(3, ncpus="9" * 40),
    "negative elapsed": sacct_line(4, elapsed="-00:00:05"),
    "epoch start": sacct_line(
        5,
        submit="1970-01-01T00:00:00",
        start="1970-01-01T00:00:01",
        end="1970-01-01T00:00:02",
        elapsed="00:00:01",
    ),
    "year 2100": sacct_line(
        6, submit="2100-01-01T00:00:00", start="2100-01-01T00:00:00", end="2100-01-01T01:00:00"
    ),
    "nested hostlist": sacct_line(7, nodelist="a[" * 500 + "1" + "]" * 500),
    "control characters": sacct_line(8, name="\x1b[31mred\x07"),
}


@pytest.mark.parametrize("label", sorted(HOSTILE_LINES))
def test_every_hostile_sacct_line_is_kept_or_quarantined(label):
    good = sacct_line(100)
    parsed = parse_sacct("\n".join([HEADER, good, HOSTILE_LINES[label], sacct_line(101)]) + "\n")
    assert accounted(parsed) == 3
    jobs = parsed.tables["jobs"]
    assert {100, 101} <= set(jobs["job_id_raw"].to_list()), "good lines around a bad one survive"
    if parsed.quarantine.height:
        assert all(r for r in parsed.quarantine["reason"].to_list())


def test_long_name_survives_whole():
    parsed = parse_sacct(HEADER + "\n" + HOSTILE_LINES["very long job name"] + "\n")
    assert parsed.tables["jobs"]["name"].to_list() == ["x" * 1_000_000]


def test_epoch_and_far_future_dates_are_exact():
    parsed = parse_sacct("\n".join([HEADER, HOSTILE_LINES["epoch start"], HOSTILE_LINES["year 2100"]]) + "\n")
    jobs = {r["job_id_raw"]: r for r in parsed.tables["jobs"].to_dicts()}
    assert jobs[5]["start_time"] == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert jobs[6]["end_time"] == datetime(2100, 1, 1, 1, 0, tzinfo=UTC)


def test_negative_elapsed_is_never_stored_as_a_negative_duration():
    parsed = parse_sacct(HEADER + "\n" + HOSTILE_LINES["negative elapsed"] + "\n")
    if parsed.tables.get("jobs") is not None and parsed.tables["jobs"].height:
        elapsed = parsed.tables["jobs"]["elapsed_seconds"].to_list()[0]
        assert elapsed is None or elapsed >= 0
    else:
        assert parsed.quarantine.height == 1


def test_huge_numbers_do_not_overflow_silently():
    parsed = parse_sacct(HEADER + "\n" + HOSTILE_LINES["huge cpu count"] + "\n")
    if parsed.tables["jobs"].height:
        assert parsed.tables["jobs"]["cpus"].to_list()[0] is None  # not a wrapped-around integer
    else:
        assert parsed.quarantine.height == 1


@pytest.mark.parametrize(
    ("local", "candidates"),
    [
        # America/New_York falls back at 02:00 EDT on 2026-11-01: 01:30 happens twice.
        (
            "2026-11-01T01:30:00",
            {datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 1, 6, 30, tzinfo=UTC)},
        ),
        # ... and springs forward at 02:00 EST on 2026-03-08: 02:30 never happens.
        (
            "2026-03-08T02:30:00",
            {datetime(2026, 3, 8, 6, 30, tzinfo=UTC), datetime(2026, 3, 8, 7, 30, tzinfo=UTC)},
        ),
        ("2026-07-01T12:00:00", {datetime(2026, 7, 1, 16, 0, tzinfo=UTC)}),
    ],
)
def test_dst_transitions_in_the_cluster_zone(local, candidates):
    got = parse_slurm_time(local, ZoneInfo("America/New_York"))
    assert got in candidates
    parsed = parse_sacct(
        HEADER + "\n" + sacct_line(9, submit=local, start=local, end="2026-12-01T00:00:00") + "\n",
        tz="America/New_York",
    )
    assert parsed.tables["jobs"]["submit_time"].to_list()[0] == got


def test_deeply_nested_hostlist_is_refused_not_a_crash():
    try:
        nodes = expand_hostlist("a[" * 500 + "1" + "]" * 500)
    except ValueError:
        return
    assert isinstance(nodes, list)


def test_hostlist_bomb_is_refused():
    with pytest.raises(ValueError):
        expand_hostlist("n[0-999999999]")


OTHER_PARSERS = {c.kind: c.module for c in COLLECTORS if c.ingestable and not c.spool and c.kind != "sacct"}
GARBAGE = [
    b"",
    b"\x00" * 1000,
    b"\xff\xfe\xfd garbage \x80\n" * 50,
    ("|" * 10_000 + "\n").encode(),
    ("x" * 2_000_000).encode(),
    "gpu[001-004,010]|mixed+drain|\u2603\u2603\n".encode() * 20,
    b"\r\n\r\n\n\n",
    b"Total backfilled jobs (since last slurm start): 99999999999999999999999999\n",
    b"NodeName=gpu01 State=DOWN+DRAIN Reason=\xe9t\xe9 [root@2026-01-01T00:00:00]\n",
]


@pytest.mark.parametrize("kind", sorted(OTHER_PARSERS))
@pytest.mark.parametrize("blob", range(len(GARBAGE)))
def test_other_parsers_never_raise_on_hostile_bytes(kind, blob):
    parsed = OTHER_PARSERS[kind].parse(
        GARBAGE[blob], cluster="c", snapshot_time=SNAP, tz=UTC, source="hostile"
    )
    nonblank = [ln for ln in GARBAGE[blob].splitlines() if ln.strip(b" \t\r\x00")]
    if nonblank:
        assert accounted(parsed) >= 1, "a non-empty input must leave rows or quarantine behind"
    for reason in parsed.quarantine["reason"].to_list():
        assert reason
