"""Parser bugs found by the fuzzers in tests/fuzz/, each pinned by the smallest input that showed it.

Expected values are read off the input by hand: the line as printed, the number as written.
"""

from __future__ import annotations

from datetime import UTC, datetime

from slurmscope.collectors import sacct, sshare
from slurmscope.collectors.parsing import parse_duration_columns

SNAP = datetime(2026, 11, 1, tzinfo=UTC)
HEADER = "JobID|JobIDRaw|Partition|Account|User|Submit|Start|End|Elapsed|State|ExitCode|NCPUS|AllocTRES|NodeList|JobName"


def _sacct(text: str):
    return sacct.parse(text.encode(), cluster="c", snapshot_time=SNAP, tz=UTC, source="t")


def _job(
    job: int,
    *,
    ncpus: str = "8",
    elapsed: str = "00:01:00",
    submit: str = "2026-10-01T10:00:00",
    state: str = "COMPLETED",
) -> str:
    return f"{job}|{job}|gpu|acct|alice|{submit}|||{elapsed}|{state}|0:0|{ncpus}|cpu=8|n1|train"


def test_sshare_line_of_unit_separators_is_quarantined_not_dropped():
    # str.strip() treats 0x1C-0x1F as whitespace, so such a line passed for an (empty) dashed rule and vanished.
    for line in ("\x1f", "\x1c", "\x1c\x1d\x1e"):
        parsed = sshare.parse((line + "\n").encode(), cluster="c", snapshot_time=SNAP, tz=UTC)
        assert parsed.quarantine["raw_text"].to_list() == [line]
        assert parsed.rows == 0
    # a real dashed rule is still skipped
    rule = sshare.parse(b"----------- ----------\n", cluster="c", snapshot_time=SNAP, tz=UTC)
    assert rule.rows == 0 and rule.quarantine.height == 0


def test_sacct_quarantine_keeps_the_line_as_printed():
    # State '0' was rewritten by typing before the line's text was rebuilt from its fields: '...|0:0|' lost '0'.
    line = "0|0|0|0|0|0|0|0|0|0|0|0|0|0|0"
    parsed = _sacct(HEADER + "\n" + line + "\n")
    assert parsed.quarantine["raw_text"].to_list() == [line]
    assert parsed.quarantine["reason"].to_list() == ["job without a Submit time (the key of the jobs table)"]


def test_sacct_huge_elapsed_is_null_not_a_failed_parse_or_a_wrapped_number():
    # 99999999999999999999 bare minutes is beyond Int64: building the column raised and lost the whole
    # output; 9999999999999999:00:00 wrapped around in Int64 arithmetic to a negative duration.
    parsed = _sacct(
        HEADER
        + "\n"
        + _job(7, elapsed="99999999999999999999")
        + "\n"
        + _job(8, elapsed="9999999999999999:00:00")
        + "\n"
        + _job(9, elapsed="1-00:00:01")
        + "\n"
    )
    assert parsed.quarantine.height == 0
    got = {r["job_id_raw"]: r["elapsed_seconds"] for r in parsed.tables["jobs"].iter_rows(named=True)}
    assert got == {7: None, 8: None, 9: 86401}


def test_duration_columns_near_the_int64_edge_are_exact():
    import polars as pl

    df = pl.DataFrame(
        {
            "e": [
                "153722867280912930:07",
                "2562047788015215:30:07",
                "2562047788015216:00:00",
                "106751991167-00:00:00",
            ]
        }
    )
    out = parse_duration_columns(df, {"s": "e"})["s"].to_list()
    # by hand: 153722867280912930*60 + 7 = 2**63-1 and 2562047788015215*3600 + 30*60 + 7 = 2**63-1 (the
    # largest values that fit); a day count too large for the vectorised path is still exact
    assert out[0] == 2**63 - 1
    assert out[1] == 2**63 - 1
    assert out[2] is None  # 2562047788015216*3600 = 9223372036854777600 > 2**63-1
    assert out[3] == 106751991167 * 86400


def test_sdiag_epoch_beyond_the_calendar_is_a_bad_date_not_an_exception():
    # atheris mutated a real sdiag capture's "(epoch)" into 17 digits: fromtimestamp raised out of parse().
    from slurmscope.collectors import sdiag

    text = (
        "sdiag output at Wed Dec 02 13:57:41 2026 (1796219861)\n"
        "Data since      Wed Dec 02 13:56:59 2026 (17962198196219819)\n"
        "Jobs submitted: 3\n"
    )
    parsed = sdiag.parse(text.encode(), cluster="c", snapshot_time=SNAP, tz=UTC)
    assert parsed.quarantine.to_dicts() == [
        {"line_no": 2, "raw_text": text.splitlines()[1], "raw_bytes": None, "reason": "sdiag: bad date"}
    ]
    row = parsed.tables["sched_stats"].row(0, named=True)
    assert row["snapshot_time"] == datetime.fromtimestamp(1796219861, UTC) and row["jobs_submitted"] == 3
    assert row["data_since"] is None


def test_sacct_cpu_count_beyond_int32_does_not_lose_the_whole_output():
    # A strict Int32 cast made the whole parse fail, so every line (the good one too) went to quarantine.
    parsed = _sacct(HEADER + "\n" + _job(7, ncpus="2147483648") + "\n" + _job(8) + "\n")
    assert parsed.quarantine.height == 0
    jobs = {r["job_id_raw"]: r["cpus"] for r in parsed.tables["jobs"].iter_rows(named=True)}
    assert jobs == {7: None, 8: 8}  # unreadable as Int32, like a non-number; the neighbour is untouched


def test_hostlist_whose_bracket_groups_multiply_past_the_limit_is_refused():
    # atheris: each bracket group within the per-range limit, their product 1.7 million names (over 2 GB in
    # the events parser). One range of 10^6 was already refused; now the product is too.
    from slurmscope.collectors import events

    from slurmscope.hostlist import MAX_HOSTLIST_NAMES, expand_hostlist

    assert len(expand_hostlist("a[0-999]b[0-999]")) == 1000 * 1000 == MAX_HOSTLIST_NAMES
    try:
        expand_hostlist("a[0-999]b[0-1000]")  # 1000 * 1001 names
        raise AssertionError("not refused")
    except ValueError as exc:
        assert "more than 1,000,000 names" in str(exc)
    line = "c|n|x[0-999]y[0-999]z[0-9]|2026-10-01T10:00:00|Unknown|DOWN|bomb|root(0)\n"
    parsed = events.parse(
        ("|".join(events.FIELDS) + "\n" + line).encode(), cluster="c", snapshot_time=SNAP, tz=UTC
    )
    assert parsed.tables["node_events"]["node"].to_list() == ["x[0-999]y[0-999]z[0-9]"]  # kept as printed
