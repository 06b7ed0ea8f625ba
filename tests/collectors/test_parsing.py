"""Shared Slurm value parsing: each rule checked on small hand-made inputs whose answer is worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from slurmscope.collectors.parsing import (
    duration_expr,
    gpu_count,
    is_mig_type,
    parse_duration,
    parse_exit_code,
    parse_mem_mb,
    parse_req_mem,
    parse_slurm_time,
    parse_tres,
    split_fields,
    split_lines,
    time_expr,
)

# ----------------------------------------------------------------------------------------------- lines


def test_split_lines_crlf_missing_final_newline_and_bad_utf8():
    data = b"a|b\r\nc\xffd|e\n\nlast"
    lines = split_lines(data)
    assert [(n, t) for n, t, _ in lines] == [(1, "a|b"), (2, "c\ufffdd|e"), (3, ""), (4, "last")]
    assert lines[0][2] is None
    assert lines[1][2] == b"c\xffd|e"


def test_split_lines_empty():
    assert split_lines(b"") == []
    assert split_lines(b"\n") == [(1, "", None)]


@given(st.binary(max_size=300))
def test_split_lines_keeps_every_line(data: bytes):
    lines = split_lines(data)
    expected = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    assert len(lines) == expected
    assert [n for n, _, _ in lines] == list(range(1, expected + 1))


# ---------------------------------------------------------------------------------------------- fields


def test_split_fields_exact_and_short():
    assert split_fields("a|b|c", "|", 3) == (["a", "b", "c"], None)
    fields, reason = split_fields("a|b", "|", 3)
    assert fields is None and "2 fields, expected 3" in reason


def test_split_fields_recovers_free_text_in_the_middle_and_last():
    # job name "x|y|z" in column 2 of 4
    assert split_fields("1|x|y|z|RUNNING", "|", 3, free_text=1) == (["1", "x|y|z", "RUNNING"], None)
    # job name last (the live collector's layout)
    assert split_fields("1|RUNNING|a|b", "|", 3, free_text=2) == (["1", "RUNNING", "a|b"], None)


def test_split_fields_without_free_text_is_refused():
    fields, reason = split_fields("1|2|3|4", "|", 3)
    assert fields is None and "no free-text column" in reason


def test_split_fields_multibyte_and_trailing():
    assert split_fields("1☃a☃b☃", "☃", 3, trailing=True) == (["1", "a", "b"], None)
    assert split_fields("1^|^a^|^b", "^|^", 3) == (["1", "a", "b"], None)
    fields, reason = split_fields("1☃a☃b", "☃", 3, trailing=True)
    assert fields is None and "--parsable" in reason


# ----------------------------------------------------------------------------------------------- times


def test_time_sentinels_are_none():
    for s in ("Unknown", "None", "(null)", "", "0", None, "N/A"):
        assert parse_slurm_time(s) is None


def test_time_utc_and_epoch():
    assert parse_slurm_time("2016-12-21T21:43:34") == datetime(2016, 12, 21, 21, 43, 34, tzinfo=UTC)
    # 1700000000 = 2023-11-14 22:13:20 UTC (date -u -d @1700000000)
    assert parse_slurm_time("1700000000") == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)


def test_time_local_zone_including_dst_edges():
    berlin = ZoneInfo("Europe/Berlin")
    # winter: UTC+1
    assert parse_slurm_time("2016-12-21T21:43:34", berlin) == datetime(2016, 12, 21, 20, 43, 34, tzinfo=UTC)
    # summer: UTC+2
    assert parse_slurm_time("2021-07-01T12:00:00", "Europe/Berlin") == datetime(2021, 7, 1, 10, tzinfo=UTC)
    # fall-back fold 02:30 happens twice: the earlier instant (still CEST, UTC+2) is used
    assert parse_slurm_time("2021-10-31T02:30:00", berlin) == datetime(2021, 10, 31, 0, 30, tzinfo=UTC)
    # spring-forward gap 02:30 does not exist: read with the offset before the gap (UTC+1)
    assert parse_slurm_time("2021-03-28T02:30:00", berlin) == datetime(2021, 3, 28, 1, 30, tzinfo=UTC)


def test_time_garbage_raises():
    with pytest.raises(ValueError):
        parse_slurm_time("yesterday")


def test_time_expr_matches_scalar():
    values = [
        "2016-12-21T21:43:34",
        "2021-10-31T02:30:00",
        "2021-03-28T02:30:00",
        "Unknown",
        "None",
        "1700000000",
        "0",
        "2021-07-01 12:00:00",
        "junk",
        None,
    ]
    for tz in ("UTC", "Europe/Berlin", "America/New_York"):
        got = (
            pl.DataFrame({"t": values}, schema={"t": pl.String})
            .select(time_expr(pl.col("t"), tz))["t"]
            .to_list()
        )
        want = []
        for v in values:
            try:
                want.append(parse_slurm_time(v, tz))
            except ValueError:
                want.append(None)
        assert got == want, tz


# ------------------------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("125-00:00:00", 125 * 86400),
        ("7-20:39:39", 7 * 86400 + 20 * 3600 + 39 * 60 + 39),
        ("00:00:24", 24),
        ("01:00:00", 3600),
        ("30:00", 1800),
        ("00:05.908", 5),
        ("1-04", 86400 + 4 * 3600),
        ("1-04:30", 86400 + 4 * 3600 + 30 * 60),
        ("90", 90 * 60),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
    ],
)
def test_parse_duration(text: str, seconds: int | None):
    assert parse_duration(text) == seconds


def test_duration_garbage_raises():
    with pytest.raises(ValueError):
        parse_duration("1:2:3:4")


def test_duration_expr_matches_scalar_on_printed_shapes():
    values = [
        "125-00:00:00",
        "7-20:39:39",
        "00:00:24",
        "30:00",
        "00:05.908",
        "UNLIMITED",
        "Partition_Limit",
        None,
    ]
    got = (
        pl.DataFrame({"d": values}, schema={"d": pl.String}).select(duration_expr(pl.col("d")))["d"].to_list()
    )
    assert got == [parse_duration(v) for v in values]


def test_exit_code():
    assert parse_exit_code("0:0") == (0, 0)
    assert parse_exit_code("1:15") == (1, 15)
    assert parse_exit_code("") == (None, None)


# --------------------------------------------------------------------------------------------- memory


def test_memory_units_and_scope():
    assert parse_req_mem("48000Mn") == (48000.0, "node")
    assert parse_req_mem("4000Mc") == (4000.0, "cpu")
    assert parse_req_mem("2G") == (2048.0, None)
    assert parse_mem_mb("62.50G") == 64000.0
    assert parse_mem_mb("1T") == 1024.0 * 1024
    assert parse_mem_mb("512K") == 0.5
    assert parse_mem_mb("31000") == 31000.0
    assert parse_mem_mb(".5Gn") == 512.0
    with pytest.raises(ValueError):
        parse_mem_mb("lots")


# ------------------------------------------------------------------------------------------------ TRES


def test_parse_tres():
    assert parse_tres("billing=12,cpu=12,gres/gpu=2,mem=31000M,node=1") == {
        "billing": 12.0,
        "cpu": 12.0,
        "gres/gpu": 2.0,
        "mem": 31000.0,
        "node": 1.0,
    }
    assert parse_tres("cpu=00:00:04,mem=62.50G")["cpu"] == 4.0
    assert parse_tres("cpu=00:00:04,mem=62.50G")["mem"] == 64000.0
    assert parse_tres("") == {}
    assert parse_tres("garbage,=,x=y") == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gres/gpu:h100=16,gres/gpu=16", (16, "h100", 0)),  # typed repeats untyped: 16, not 32
        ("billing=24,cpu=8,gres/gpu:v100=1,gres/gpu=1,mem=199G,node=1", (1, "v100", 0)),
        ("gres/gpu:a100=2,gres/gpu:v100=1", (3, "a100", 0)),  # typed only: sum the types
        ("gres/gpu=4", (4, None, 0)),
        ("gres/gpu:1g.10gb=1,gres/gpu=1", (0, "1g.10gb", 1)),  # a MIG slice is not a GPU
        ("gres/gpu:a100=2,gres/gpu:3g.40gb=1,gres/gpu=3", (2, "a100", 1)),
        ("gres/gpu:nvidia_a100_3g.40gb=2", (0, "nvidia_a100_3g.40gb", 2)),
        ("billing=12,cpu=12,mem=48000M,node=1", (0, None, 0)),
        ("", (0, None, 0)),
        (None, (0, None, 0)),
        # AllocGRES / sinfo GRES shapes
        ("gpu:2", (2, None, 0)),
        ("gpu:tesla:2", (2, "tesla", 0)),
        ("gpu:a100:4(S:0-3),nsight:no_consume:1", (4, "a100", 0)),
        ("gpu:a100:3(IDX:0-1,3)", (3, "a100", 0)),
        ("gpu:(null):0(IDX:N/A)", (0, None, 0)),
        ("mig:nvidia_a100_3g.40gb:7,gpu:a100:1", (1, "a100", 7)),
        ("gres/gpumem=100K,gres/gpuutil=90", (0, None, 0)),  # usage TRES are not GPU counts
        ("no_consume", (0, None, 0)),  # found by hypothesis: once raised IndexError
    ],
)
def test_gpu_count(text, expected):
    assert gpu_count(text) == expected


def test_is_mig_type():
    assert is_mig_type("1g.10gb") and is_mig_type("nvidia_a100_3g.40gb") and is_mig_type("1g.10gb+me")
    assert not is_mig_type("a100") and not is_mig_type("h100") and not is_mig_type(None)


@given(st.text(max_size=80))
def test_gpu_count_and_tres_never_raise(text: str):
    gpus, _, mig = gpu_count(text)
    assert gpus >= 0 and mig >= 0
    parse_tres(text)


def test_column_helpers_equal_the_scalar_parsers():
    from slurmscope.collectors.parsing import parse_duration_columns, parse_time_columns

    times = [
        "2016-12-21T21:43:34",
        "2021-10-31T02:30:00",
        "2021-03-28T02:30:00",
        "Unknown",
        "None",
        "1700000000",
        "0",
        "2021-07-01 12:00:00",
        "2021-07-01T12:00",
        "2021-07-01T12:00:00.25",
        "junk",
        None,
        # epochs past year 9999, signed or longer than 12 digits: not times (found by hypothesis)
        "300000000000",
        "253402300799",
        "253402300800",
        "+5",
        "0000000000005",
    ]
    durs = [
        "125-00:00:00",
        "7-20:39:39",
        "00:00:24",
        "30:00",
        "1:00",
        "00:05.908",
        "1-04",
        "1-04:30",
        "90",
        "UNLIMITED",
        "Partition_Limit",
        "",
        "1:2:3",
        "x",
        None,
        "0:0-0:0",
        "0:0-0",
        "1-2-3:4:5",
    ]  # a dash anywhere but after the days: not a duration (found by hypothesis)
    for tz in ("UTC", "Europe/Berlin"):
        df = parse_time_columns(
            pl.DataFrame({"a": times}, schema={"a": pl.String}), {"t": "a", "u": "missing"}, tz
        )
        want = []
        for v in times:
            try:
                want.append(parse_slurm_time(v, tz))
            except ValueError:
                want.append(None)
        assert df["t"].to_list() == want, tz
        assert df["u"].null_count() == len(times)
    df = parse_duration_columns(pl.DataFrame({"a": durs}, schema={"a": pl.String}), {"d": "a"})
    want = []
    for v in durs:
        try:
            want.append(parse_duration(v))
        except ValueError:
            want.append(None)
    assert df["d"].to_list() == want


@settings(max_examples=300)  # each example runs Polars twice; the scalar parsers get the full profile
@given(st.lists(st.one_of(st.none(), st.text(alphabet="0123456789-:.TU nko", max_size=22)), max_size=30))
def test_column_helpers_match_scalars_on_random_text(values):
    from slurmscope.collectors.parsing import parse_duration_columns, parse_time_columns

    df = pl.DataFrame({"a": values}, schema={"a": pl.String})
    got_t = parse_time_columns(df, {"t": "a"}, "Europe/Berlin")["t"].to_list()
    got_d = parse_duration_columns(df, {"d": "a"})["d"].to_list()
    for v, t, d in zip(values, got_t, got_d, strict=True):
        try:
            assert t == parse_slurm_time(v, "Europe/Berlin"), v
        except ValueError:
            assert t is None, v
        try:
            assert d == parse_duration(v), v
        except ValueError:
            assert d is None, v


# ---------------------------------------------------------------------------------------- usage fields


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        # the four shapes of sacct's _elapsed_time (src/sacct/print.c, 22.05), values from the seff capture
        ("00:06.078", 6.078),
        ("00:00:00", 0.0),
        ("01:02:03", 3723.0),
        ("2-01:00:00", 2 * 86400 + 3600.0),
        ("59:59.999", 3599.999),
        ("", None),
        (None, None),
    ],
)
def test_parse_cpu_time(text, seconds):
    from slurmscope.collectors.parsing import parse_cpu_time

    assert parse_cpu_time(text) == seconds


@pytest.mark.parametrize("text", ["abc", "6.078", "1:2:3:4", "00:06,078", "-00:01"])
def test_cpu_time_garbage_raises(text):
    from slurmscope.collectors.parsing import parse_cpu_time

    with pytest.raises(ValueError, match="CPU time"):
        parse_cpu_time(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("429182976", 429182976),  # --noconvert: bytes, bare (MaxRSS of the seff capture's job 2)
        ("4736K", 4736 * 1024),
        ("409.30M", 429182157),  # 409.30 x 1048576 = 429182156.8, rounded half up
        ("1.5G", 1610612736),
        ("0", 0),
        ("", None),
    ],
)
def test_parse_size_bytes(text, size):
    from slurmscope.collectors.parsing import parse_size_bytes

    assert parse_size_bytes(text) == size


def test_tres_usage_in_base_units_and_garbage_raises():
    from slurmscope.collectors.parsing import parse_tres_usage

    # step 3.0 of the seff capture, plus the GPU accounting entries a site with gres/gpuutil prints
    got = parse_tres_usage(
        "cpu=00:01:05,energy=0,fs/disk=88236,gres/gpumem=2G,gres/gpuutil=87,mem=436043776,pages=0,vmem=NONE"
    )
    assert got == {
        "cpu": 65.0,
        "energy": 0.0,
        "fs/disk": 88236.0,
        "gres/gpumem": 2.0 * 2**30,
        "gres/gpuutil": 87.0,
        "mem": 436043776.0,
        "pages": 0.0,
    }
    assert parse_tres_usage("") == {}
    for bad in ("mem", "mem=12Q", "cpu=x"):
        with pytest.raises(ValueError):
            parse_tres_usage(bad)


_USAGE_TEXT = st.one_of(
    st.none(),
    st.text(alphabet="0123456789-:.KMGTPEk ", max_size=16),
    st.builds(
        lambda d, h, m, s, f: f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{m:02d}:{s:02d}.{f:03d}",
        st.integers(0, 400),
        st.integers(0, 23),
        st.integers(0, 59),
        st.integers(0, 59),
        st.integers(0, 999),
    ),
    st.builds(
        lambda n, u: f"{n}{u}", st.floats(0, 1e6).map(lambda x: f"{x:.2f}"), st.sampled_from(list("KMGT"))
    ),
)


@settings(max_examples=300)
@given(st.lists(_USAGE_TEXT, max_size=30))
@example(["8E"])  # 2**63 bytes: beyond a BIGINT, null on both paths
def test_usage_column_helpers_match_the_scalars(values):
    """The vectorised path of the usage fields gives exactly the scalar parsers' results (null where they raise)."""
    from slurmscope.collectors.parsing import (
        parse_cpu_time,
        parse_cpu_time_columns,
        parse_size_bytes,
        parse_size_columns,
    )

    df = pl.DataFrame({"a": values}, schema={"a": pl.String})
    got_c = parse_cpu_time_columns(df, {"c": "a"})["c"].to_list()
    got_s = parse_size_columns(df, {"s": "a"})["s"].to_list()
    for v, c, s in zip(values, got_c, got_s, strict=True):
        for got, fn in ((c, parse_cpu_time), (s, parse_size_bytes)):
            try:
                want = fn(v)
            except ValueError:
                want = None
            assert got == want, (v, fn.__name__)


_ENTRY = st.one_of(
    st.sampled_from(
        ["cpu=00:01:05", "cpu=1-00:00:01", "cpu=5", "mem=4096", "mem=4.5M", "mem=NONE", "mem=", "=5"]
    ),
    st.sampled_from(
        ["gres/gpuutil=87", "gres/gpumem=2G", "energy=0", "vmem=12Q", "mem", "", " mem = 7 ", "cpu=x"]
    ),
    st.builds(
        lambda k, v: f"{k}={v}",
        st.sampled_from(["mem", "cpu", "gres/gpuutil"]),
        st.text("0123456789.:-KMG", max_size=8),
    ),
)


@settings(max_examples=300)
@given(st.lists(st.one_of(st.none(), st.lists(_ENTRY, max_size=6).map(",".join)), max_size=20))
def test_tres_usage_columns_match_the_scalar_parser(values):
    from slurmscope.collectors.parsing import parse_tres_usage, parse_tres_usage_columns

    df = pl.DataFrame({"a": values}, schema={"a": pl.String})
    got = parse_tres_usage_columns(df, "a", {"m": "mem", "u": "gres/gpuutil", "c": "cpu"}, "ok")
    for v, row in zip(values, got.iter_rows(named=True), strict=True):
        try:
            want = parse_tres_usage(v)
        except ValueError:
            assert row["ok"] is False, v
            continue
        assert row["ok"] is True, v
        assert (row["m"], row["u"], row["c"]) == (
            want.get("mem"),
            want.get("gres/gpuutil"),
            want.get("cpu"),
        ), v
