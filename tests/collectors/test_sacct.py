"""sacct parser on small hand-made outputs: every value below was worked out by hand from the input line."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from slurmscope.collectors import sacct
from slurmscope.collectors.sacct import LIVE_FIELDS, parse

US = "\x1f"
UTCZ = ZoneInfo("UTC")


# The live list without its other free-text fields: JobName is then the only one (delimiter recovery).
ONE_FREE_TEXT = [n for n in LIVE_FIELDS.split(",") if n not in ("Comment", "AdminComment")]


def live(rows: list[list[str]], delim: str = US, eol: str = "\n", names: list[str] | None = None) -> bytes:
    """Output of the live command: header line then rows, in LIVE_FIELDS order (or `names`)."""
    names = names or LIVE_FIELDS.split(",")
    lines = [delim.join(names)]
    for r in rows:
        assert len(r) == len(names), r
        lines.append(delim.join(r))
    return (eol.join(lines) + eol).encode("utf-8")


def row(names: list[str] | None = None, **kw: str) -> list[str]:
    """One live-format line with defaults for every field not given."""
    base = {
        "JobID": "100",
        "JobIDRaw": "100",
        "Cluster": "",
        "Partition": "gpu",
        "QOS": "normal",
        "Account": "ml",
        "User": "alice",
        "UID": "1001",
        "Submit": "2024-05-01T10:00:00",
        "Eligible": "2024-05-01T10:00:00",
        "Start": "2024-05-01T10:05:00",
        "End": "2024-05-01T11:05:00",
        "Elapsed": "01:00:00",
        "Timelimit": "1-00:00:00",
        "State": "COMPLETED",
        "ExitCode": "0:0",
        "NNodes": "1",
        "NCPUS": "8",
        "ReqMem": "64G",
        "AllocTRES": "billing=8,cpu=8,mem=64G,node=1",
        "NodeList": "gpu001",
        "Flags": "SchedMain",
        "Priority": "1000",
        "Reason": "None",
        "JobName": "train",
    }
    unknown = set(kw) - set(base) - set(LIVE_FIELDS.split(","))
    assert not unknown, unknown
    base.update(kw)
    return [base.get(n, "") for n in names or LIVE_FIELDS.split(",")]


def p(data: bytes, **kw) -> sacct.Parsed:
    kw.setdefault("cluster", "c1")
    kw.setdefault("tz", UTCZ)
    kw.setdefault("delimiter", US)
    return parse(data, snapshot_time=datetime(2024, 5, 2, tzinfo=UTC), **kw)


def job(parsed, job_id: str) -> dict:
    rows = parsed.tables["jobs"].filter(pl.col("job_id") == job_id).to_dicts()
    assert len(rows) == 1, (job_id, rows)
    return rows[0]


def test_live_format_values():
    data = live(
        [
            row(),
            row(
                JobID="100.batch",
                JobIDRaw="100.batch",
                Submit="2024-05-01T10:05:00",
                NodeList="gpu001",
                JobName="batch",
                AllocTRES="cpu=8,mem=64G,node=1",
                State="COMPLETED",
                Elapsed="00:59:58",
            ),
            row(
                JobID="100.0",
                JobIDRaw="100.0",
                Submit="2024-05-01T10:05:01",
                JobName="python",
                State="FAILED",
                ExitCode="1:0",
            ),
            row(
                JobID="101",
                JobIDRaw="101",
                State="CANCELLED by 1234",
                ExitCode="0:15",
                Flags="SchedBackfill",
                AllocTRES="billing=32,cpu=32,gres/gpu:h100=4,gres/gpu=4,mem=256G,node=1",
                Cluster="other",
                Timelimit="UNLIMITED",
                Start="None",
                End="2024-05-01T10:01:00",
                NodeList="None assigned",
                Elapsed="00:00:00",
            ),
            row(
                JobID="102",
                JobIDRaw="102",
                State="RUNNING",
                End="Unknown",
                Timelimit="Partition_Limit",
                AllocTRES="cpu=2,gres/gpu:1g.10gb=1,gres/gpu=1,mem=8G,node=1",
                ReqMem="4000Mc",
                NCPUS="2",
                Flags="SchedSubmit",
                Elapsed="5-01:02:03",
            ),
        ]
    )
    out = p(data)
    assert out.quarantine.height == 0
    assert out.tables["jobs"].height == 3 and out.tables["job_steps"].height == 2

    j = job(out, "100")
    assert j["cluster"] == "c1"
    assert j["job_id_raw"] == 100
    assert j["submit_time"] == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert j["start_time"] == datetime(2024, 5, 1, 10, 5, tzinfo=UTC)
    assert j["elapsed_seconds"] == 3600 and j["timelimit_seconds"] == 86400
    assert (j["state"], j["exit_code"], j["signal"]) == ("COMPLETED", 0, 0)
    assert (j["gpus"], j["gpu_type"], j["mig_slices"], j["billing"]) == (0, None, 0, 8.0)
    assert j["req_mem_bytes"] == 64 * 1024**3
    assert j["sched_by"] == "main" and j["priority"] == 1000 and j["uid"] == 1001
    assert j["reason"] is None and j["name"] == "train" and j["node_list"] == "gpu001"

    c = job(out, "101")
    assert c["cluster"] == "other"  # the Cluster column wins over --cluster
    assert (c["state"], c["state_raw"]) == ("CANCELLED", "CANCELLED by 1234")
    assert (c["exit_code"], c["signal"]) == (0, 15)
    assert c["sched_by"] == "backfill"
    assert (c["gpus"], c["gpu_type"]) == (4, "h100")  # typed + untyped: 4, not 8
    assert c["timelimit_seconds"] is None and c["start_time"] is None and c["node_list"] is None

    r = job(out, "102")
    assert r["end_time"] is None and r["timelimit_seconds"] is None
    assert (r["gpus"], r["gpu_type"], r["mig_slices"]) == (0, "1g.10gb", 1)  # a MIG slice is not a GPU
    assert r["req_mem_bytes"] == 4000 * 2 * 1024**2  # 4000M per CPU x 2 CPUs
    assert r["sched_by"] == "submit" and r["elapsed_seconds"] == 5 * 86400 + 3723

    steps = out.tables["job_steps"].sort("step_id").to_dicts()
    assert [s["step_id"] for s in steps] == ["0", "batch"]
    assert all(s["job_submit_time"] == datetime(2024, 5, 1, 10, 0, tzinfo=UTC) for s in steps)
    assert steps[0]["exit_code"] == 1 and steps[0]["state"] == "FAILED" and steps[0]["job_id"] == "100.0"
    assert steps[1]["elapsed_seconds"] == 3598


def test_arrays_and_het_jobs():
    data = live(
        [
            row(
                JobID="200_[5-9%2]",
                JobIDRaw="200",
                State="PENDING",
                Start="Unknown",
                End="Unknown",
                AllocTRES="",
                NodeList="None assigned",
                Reason="JobArrayTaskLimit",
            ),
            row(JobID="200_4", JobIDRaw="204", State="RUNNING", End="Unknown"),
            row(JobID="200_5", JobIDRaw="200", State="RUNNING", End="Unknown"),
            row(JobID="300+0", JobIDRaw="300", AllocTRES="cpu=4,gres/gpu=2,node=1"),
            row(JobID="300+1", JobIDRaw="301", AllocTRES="cpu=16,node=1"),
            row(JobID="300+0.0", JobIDRaw="300.0"),
        ]
    )
    out = p(data)
    assert out.quarantine.height == 0
    jobs = out.tables["jobs"]
    pend = jobs.filter(pl.col("job_id") == "200_[5-9%2]").to_dicts()[0]
    assert (pend["array_job_id"], pend["array_task_id"], pend["job_id_raw"]) == (200, "[5-9%2]", 200)
    assert pend["reason"] == "JobArrayTaskLimit" and pend["gpus"] == 0
    t4 = job(out, "200_4")
    assert (t4["array_job_id"], t4["array_task_id"], t4["job_id_raw"]) == (200, "4", 204)
    h1 = job(out, "300+1")
    assert (h1["het_job_id"], h1["het_job_offset"], h1["job_id_raw"]) == (300, 1, 301)
    assert job(out, "300+0")["gpus"] == 2
    step = out.tables["job_steps"].to_dicts()[0]
    assert (step["job_id_raw"], step["step_id"], step["job_id"]) == (300, "0", "300+0.0")


def test_job_name_with_the_delimiter_is_recovered_when_it_is_the_only_free_text_field():
    one = ONE_FREE_TEXT
    data = live(
        [row(one, JobName="a|b|c"), row(one, JobID="101", JobIDRaw="101", JobName='quote " and |')],
        delim="|",
        names=one,
    )
    out = p(data, delimiter="|")
    assert out.quarantine.height == 0
    assert job(out, "100")["name"] == "a|b|c"
    assert job(out, "101")["name"] == 'quote " and |'
    assert job(out, "100")["partition"] == "gpu"


def test_free_text_in_the_middle_is_recovered():
    data = b"JobID|JobName|Submit|State\n7|x|y|2024-05-01T00:00:00|COMPLETED\n"
    out = parse(data, cluster="c", tz=UTCZ)
    assert out.quarantine.height == 0
    j = out.tables["jobs"].to_dicts()[0]
    assert (j["name"], j["state"], j["job_id_raw"]) == ("x|y", "COMPLETED", 7)


def test_two_free_text_fields_with_extra_delimiters_are_quarantined_with_reason():
    data = b"JobID|JobName|Comment|Submit\n7|x|y|z|2024-05-01T00:00:00\n8|a|b|2024-05-01T00:00:00\n"
    out = parse(data, cluster="c", tz=UTCZ)
    assert out.tables["jobs"]["job_id"].to_list() == ["8"]
    q = out.quarantine.to_dicts()
    assert len(q) == 1 and q[0]["line_no"] == 2
    assert "jobname, comment" in q[0]["reason"] and "5 fields, expected 4" in q[0]["reason"]
    assert q[0]["raw_text"] == "7|x|y|z|2024-05-01T00:00:00"


def test_short_line_is_quarantined():
    out = p(live([row()]) + b"105\x1f105\n")
    assert out.tables["jobs"].height == 1
    assert out.quarantine["reason"].to_list() == [f"2 fields, expected {len(LIVE_FIELDS.split(','))}"]


def test_multibyte_delimiters_and_crlf():
    for delim in ("☃", "^|^", US):
        out = p(
            live([row(JobName="n|x"), row(JobID="101", JobIDRaw="101")], delim=delim, eol="\r\n"),
            delimiter=delim,
        )
        assert out.quarantine.height == 0, delim
        assert job(out, "100")["name"] == "n|x"
        assert job(out, "101")["priority"] == 1000  # no stray \r in the second-to-last fields either
        assert job(out, "101")["name"] == "train"


def test_non_utf8_name_is_kept_with_replacement():
    data = live([row()]).replace(b"train", b"tr\xffain")
    out = p(data)
    assert out.quarantine.height == 0
    assert job(out, "100")["name"] == "tr\ufffdain"


def test_bad_utf8_line_quarantined_keeps_raw_bytes():
    data = live([row()]) + b"bad\xfe\x1fline\n"
    out = p(data)
    q = out.quarantine.to_dicts()
    assert len(q) == 1 and q[0]["raw_bytes"] == b"bad\xfe\x1fline" and q[0]["line_no"] == 3


def test_headerless_with_format_and_timezone_and_epoch():
    fmt = "JobID,Submit,Start,End,State,AllocGRES"
    data = b"5|2024-01-15T12:00:00|1705320000|Unknown|RUNNING|gpu:tesla:2\n"
    out = parse(data, cluster="c", tz=ZoneInfo("America/New_York"), fmt=fmt)
    j = out.tables["jobs"].to_dicts()[0]
    assert j["submit_time"] == datetime(2024, 1, 15, 17, 0, tzinfo=UTC)  # EST = UTC-5
    assert j["start_time"] == datetime(2024, 1, 15, 12, 0, tzinfo=UTC)  # epoch seconds are already UTC
    assert (j["gpus"], j["gpu_type"]) == (2, "tesla")
    # a header line matching --format is skipped, not quarantined
    out2 = parse(b"JobID|Submit|Start|End|State|AllocGRES\n" + data, cluster="c", tz=UTCZ, fmt=fmt)
    assert out2.quarantine.height == 0 and out2.tables["jobs"].height == 1


def test_parsable_trailing_delimiter():
    fmt = "JobID,JobName,Submit,Comment"
    data = "9☃nm☃2024-01-01T00:00:00☃☃\n9.batch☃batch☃2024-01-01T00:00:05☃☃\n".encode()
    out = parse(data, cluster="c", tz=UTCZ, fmt=fmt, delimiter="☃")
    assert out.quarantine.height == 0
    assert out.tables["jobs"]["name"].to_list() == ["nm"]
    assert out.tables["job_steps"]["step_id"].to_list() == ["batch"]


def test_narrow_capture_writes_only_its_columns():
    out = parse(b"JobID|Submit|State\n5|2024-01-01T00:00:00|COMPLETED\n", cluster="c", tz=UTCZ)
    cols = set(out.tables["jobs"].columns)
    assert {"job_id", "job_id_raw", "submit_time", "state"} <= cols
    assert not cols & {"gpus", "partition", "account", "node_list", "timelimit_seconds"}


def test_missing_key_fields_and_orphan_steps():
    assert "without submit" in sacct.check_input(b"JobID|State\n1|COMPLETED\n")
    assert "not a sacct header" in sacct.check_input(b"1|2|3\n")
    data = live(
        [
            row(JobID="100.batch", JobIDRaw="100.batch"),
            row(JobID="x", JobIDRaw="x"),
            row(JobID="103", JobIDRaw="103", Submit="Unknown"),
        ]
    )
    reasons = p(data).quarantine["reason"].to_list()
    assert reasons == [
        "step without its job's allocation line earlier in the same output",
        "JobID/JobIDRaw is not a Slurm job id",
        "job without a Submit time (the key of the jobs table)",
    ]


def test_requeue_attempts_in_one_output_each_with_its_steps():
    data = live(
        [
            row(JobID="500", JobIDRaw="500", Submit="2024-05-01T10:00:00", State="REQUEUED"),
            row(JobID="500.batch", JobIDRaw="500.batch", State="CANCELLED"),
            row(JobID="500", JobIDRaw="500", Submit="2024-05-01T12:00:00", State="COMPLETED"),
            row(JobID="500.batch", JobIDRaw="500.batch", State="COMPLETED"),
        ]
    )
    out = p(data)
    jobs = out.tables["jobs"].sort("submit_time")
    assert jobs["state"].to_list() == ["REQUEUED", "COMPLETED"]
    steps = out.tables["job_steps"].sort("job_submit_time")
    assert steps["job_submit_time"].to_list() == [
        datetime(2024, 5, 1, 10, tzinfo=UTC),
        datetime(2024, 5, 1, 12, tzinfo=UTC),
    ]
    assert steps["state"].to_list() == ["CANCELLED", "COMPLETED"]


def test_command_is_an_argument_list_with_utc_window():
    from slurmscope.config import load_config

    cfg = load_config(None, env={})
    argv = sacct.command(
        cfg,
        start=datetime(2024, 5, 1, 12, tzinfo=ZoneInfo("Europe/Berlin")),
        end=datetime(2024, 5, 2, tzinfo=UTC),
    )
    assert argv[0].endswith("sacct")
    assert "--starttime=2024-05-01T10:00:00" in argv and "--endtime=2024-05-02T00:00:00" in argv
    assert f"--delimiter={US}" in argv and "--duplicates" in argv and "--parsable2" in argv
    assert argv[-1] == f"--format={LIVE_FIELDS}" and LIVE_FIELDS.endswith("JobName")


# ----------------------------------------------------------------------------------------- properties


def _accounted(data: bytes, out) -> None:
    lines = [ln for ln in data.split(b"\n")]
    if lines and lines[-1] == b"":
        lines.pop()
    nonblank = [i for i, ln in enumerate(lines, 1) if ln.rstrip(b"\r").strip(b" \t\r")]
    kept = out.rows
    quarantined = out.quarantine.height
    header = 1 if (kept or quarantined < len(nonblank)) else 0
    assert kept + quarantined + header == len(nonblank)
    assert out.quarantine["line_no"].is_unique().all()


@given(st.binary(max_size=400))
def test_parse_never_raises_on_arbitrary_bytes(data: bytes):
    out = parse(data, cluster="c", tz=UTCZ)
    _accounted(data, out)
    out = parse(data, cluster="c", tz=UTCZ, fmt="JobID,JobIDRaw,Submit,State,JobName", delimiter=US)
    _accounted(data, out)


_field = st.one_of(
    st.sampled_from(
        [
            "100",
            "100.batch",
            "7_3",
            "7_[1-3]",
            "5+1",
            "",
            "Unknown",
            "None",
            "2024-05-01T10:00:00",
            "CANCELLED by 3",
            "gres/gpu:a100=2,gres/gpu=2",
            "1-00:00:00",
            "0:9",
            "|",
            US,
            '"',
        ]
    ),
    st.text(max_size=8),
)


@given(st.lists(st.lists(_field, min_size=1, max_size=30), max_size=12), st.sampled_from(["|", US, "^|^"]))
def test_every_line_after_a_header_is_kept_or_quarantined(rows, delim):
    header = delim.join(LIVE_FIELDS.split(","))
    body = "\n".join(delim.join(r) for r in rows)
    data = (header + "\n" + body + "\n").encode("utf-8", errors="surrogatepass")
    out = parse(data, cluster="c", tz=UTCZ, delimiter=delim)
    lines = [ln for ln in body.split("\n")] if rows else []
    nonblank = [ln for ln in lines if ln.strip(" \t\r")]
    assert out.rows + out.quarantine.height == len(nonblank)


def test_delimiter_is_detected_from_the_header_when_not_given():
    for delim in ("☃", "^|^", US, "|"):
        data = live([row(ONE_FREE_TEXT, JobName="a|b")], delim=delim, names=ONE_FREE_TEXT)
        out = parse(data, cluster="c", tz=UTCZ)
        assert out.quarantine.height == 0, delim
        assert job(out, "100")["name"] == "a|b"
    assert sacct.detect_delimiter("Cluster☃JobID☃Submit") == "☃"


def test_pending_requeued_attempt_counts_no_gpus_even_if_sacct_repeats_the_old_alloc_tres():
    # seen on Slurm 22.05 (tests/fixtures/slurm-22.05/sacct_mid.txt, job 13): the waiting second attempt
    # still shows the first attempt's AllocTRES and SchedBackfill
    out = p(
        live(
            [
                row(
                    State="PENDING",
                    Start="Unknown",
                    End="Unknown",
                    Flags="SchedBackfill,StartRecieved",
                    AllocTRES="billing=20,cpu=16,gres/gpu:h100=8,gres/gpu=8,mem=16000M,node=1",
                )
            ]
        )
    )
    j = job(out, "100")
    assert (j["gpus"], j["gpu_type"], j["sched_by"]) == (0, None, None)
    assert j["alloc_tres"].endswith("node=1")  # the raw string is still kept


def test_slices_give_the_same_result_as_one_pass(monkeypatch):
    rows = []
    for j in range(1, 8):
        rows.append(
            row(
                ONE_FREE_TEXT,
                JobID=str(j),
                JobIDRaw=str(j),
                Submit=f"2024-05-01T10:0{j}:00",
                JobName="a|b" if j == 3 else "n",
            )
        )
        rows.append(
            row(ONE_FREE_TEXT, JobID=f"{j}.batch", JobIDRaw=f"{j}.batch", Submit="2024-05-01T11:00:00")
        )
        rows.append(row(ONE_FREE_TEXT, JobID=f"{j}.0", JobIDRaw=f"{j}.0", Submit="2024-05-01T11:00:01"))
    data = live(rows, delim="|", names=ONE_FREE_TEXT)
    whole = p(data, delimiter="|")
    monkeypatch.setattr(sacct, "CHUNK_LINES", 2)  # steps land at the start of the next slice
    sliced = p(data, delimiter="|")
    assert sliced.quarantine.height == whole.quarantine.height == 0
    for t in ("jobs", "job_steps"):
        assert sliced.tables[t].equals(whole.tables[t]), t
    steps = sliced.tables["job_steps"]
    assert steps.height == 14
    assert (
        steps.filter(pl.col("job_id_raw") == 5)["job_submit_time"].to_list()
        == [datetime(2024, 5, 1, 10, 5, tzinfo=UTC)] * 2
    )


def test_byte_order_mark_before_the_header():
    out = parse(
        b"\xef\xbb\xbfJobID|Submit|State\r\n5|2024-01-01T00:00:00|COMPLETED\r\n", cluster="c", tz=UTCZ
    )
    assert out.quarantine.height == 0 and out.tables["jobs"]["job_id"].to_list() == ["5"]


# The fast paths of a large parse must equal the plain window expressions they replace, on any order of
# allocation and step lines (steps far from their job, jobs repeated, a step before any allocation line).
_rows = st.lists(st.tuples(st.integers(1, 4), st.booleans(), st.none() | st.integers(0, 5)), max_size=40)


@settings(max_examples=300)
@given(_rows)
def test_step_submit_times_equals_the_per_job_forward_fill(rows):
    df = pl.DataFrame(
        {
            "job_id_raw": [r[0] for r in rows],
            "_is_step": [r[1] for r in rows],
            "submit_time": [None if r[2] is None else datetime(2026, 1, 1, r[2], tzinfo=UTC) for r in rows],
        },
        schema={"job_id_raw": pl.Int64, "_is_step": pl.Boolean, "submit_time": pl.Datetime("us", "UTC")},
    )
    expected = (
        df.select(pl.when(~pl.col("_is_step")).then(pl.col("submit_time")).forward_fill().over("job_id_raw"))
        .to_series()
        .to_list()
    )
    got = sacct.step_submit_times(df).to_list()
    steps = [i for i, r in enumerate(rows) if r[1]]
    assert [got[i] for i in steps] == [expected[i] for i in steps]


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 5), st.integers(0, 3)), max_size=40))
def test_output_attempts_equals_the_dense_rank_per_job(rows):
    df = pl.DataFrame(
        {
            "cluster": [r[0] for r in rows],
            "job_id_raw": [r[1] for r in rows],
            "submit_time": [datetime(2026, 1, 1, r[2], tzinfo=UTC) for r in rows],
        },
        schema={"cluster": pl.String, "job_id_raw": pl.Int64, "submit_time": pl.Datetime("us", "UTC")},
    )
    expected = df.select(pl.col("submit_time").rank("dense").over("cluster", "job_id_raw").cast(pl.Int32))
    assert sacct.output_attempts(df).to_list() == expected.to_series().to_list()


# ---------------------------------------------------------------------------------------- usage fields

_CPU = st.one_of(
    st.sampled_from(["", "00:06.078", "01:02:03", "2-00:00:01", "00:00:00", "garbage", "1:2"]),
    st.builds(
        lambda m, s, f: f"{m:02d}:{s:02d}.{f:03d}",
        st.integers(0, 59),
        st.integers(0, 59),
        st.integers(0, 999),
    ),
)
_SIZE = st.one_of(
    st.sampled_from(["", "0", "4736K", "409.30M", "12Q", "1.5G", "-5"]),
    st.integers(0, 2**40).map(str),
)
_TRES = st.sampled_from(
    ["", "cpu=00:00:01,mem=4096,gres/gpuutil=87,gres/gpumem=2G", "energy=0", "mem", "cpu=x"]
)
_COUNT = st.sampled_from(["", "1", "2", "16", "x"])


@settings(max_examples=150)
@given(st.lists(st.tuples(_COUNT, _CPU, _SIZE, _SIZE, _TRES, _COUNT), min_size=1, max_size=12))
def test_usage_fields_of_each_step_line_equal_the_scalar_parsers_or_quarantine_it(steps):
    """The vectorised parse against a per-line reference: each step line holds exactly what the scalar parsers
    give for its values, or, when one of them raises, is quarantined with a reason naming that field."""
    from slurmscope.collectors.parsing import parse_cpu_time, parse_int, parse_size_bytes, parse_tres_usage

    names = [*ONE_FREE_TEXT]
    lines = [row(names)]
    for i, (nt, cpu, rss, ave, tres, energy) in enumerate(steps):
        kw = dict(NTasks=nt, TotalCPU=cpu, UserCPU=cpu, MaxRSS=rss, AveRSS=ave, TRESUsageInTot=tres)
        lines.append(row(names, JobID=f"100.{i}", JobIDRaw=f"100.{i}", ConsumedEnergyRaw=energy, **kw))
    out = p(live(lines, names=names))
    got = {r["step_id"]: r for r in out.tables["job_steps"].to_dicts()} if "job_steps" in out.tables else {}
    reasons = dict(zip(out.quarantine["line_no"].to_list(), out.quarantine["reason"].to_list(), strict=True))
    for i, (nt, cpu, rss, ave, tres, energy) in enumerate(steps):
        values = [
            ("NTasks", parse_int, nt),
            ("TotalCPU", parse_cpu_time, cpu),
            ("MaxRSS", parse_size_bytes, rss),
        ]
        values += [("AveRSS", parse_size_bytes, ave), ("TRESUsageInTot", parse_tres_usage, tres)]
        values += [("ConsumedEnergyRaw", parse_int, energy)]
        want, bad = {}, []
        for name, fn, text in values:
            try:
                want[name] = fn(text)
            except ValueError:
                bad.append(name)
        if bad:
            assert str(i) not in got
            assert reasons[i + 3].split(" ")[0] in bad  # header, job line, then step i
            continue
        r = got[str(i)]
        assert r["ntasks"] == want["NTasks"] and r["consumed_energy_joules"] == want["ConsumedEnergyRaw"]
        assert r["total_cpu_seconds"] == want["TotalCPU"] == r["user_cpu_seconds"]
        assert (r["max_rss_bytes"], r["ave_rss_bytes"]) == (want["MaxRSS"], want["AveRSS"])
        usage = want["TRESUsageInTot"]
        assert r["mem_tot_bytes"] == (int(usage["mem"]) if "mem" in usage else None)
        assert r["gpu_util_tot_percent"] == usage.get("gres/gpuutil")
        assert r["gpu_mem_tot_bytes"] == (int(usage["gres/gpumem"]) if "gres/gpumem" in usage else None)
    assert out.rows + out.quarantine.height == len(lines)


def test_usage_values_of_a_real_capture_in_base_units():
    """tests/fixtures/slurm-22.05/seff/seff_sacct.txt, read by hand: job 1's line prints sacct's roll-up
    00:06.078 (its two steps' 4 s 694943 us + 1 s 383701 us, summed in microseconds as sacct does, shown in
    ms; the steps print 00:04.694 and 00:01.383); step 3.0 ran 2 tasks, MaxRSS 218042368 B,
    TRESUsageInTot mem 436043776 B (the sum of the two peaks); job 4's AllocTRES mem=16000M."""
    from pathlib import Path

    data = (Path(__file__).parents[1] / "fixtures" / "slurm-22.05" / "seff" / "seff_sacct.txt").read_bytes()
    out = parse(data, cluster="c", tz=UTCZ)
    assert out.quarantine.height == 0
    j = {r["job_id"]: r for r in out.tables["jobs"].to_dicts()}
    s = {r["job_id"]: r for r in out.tables["job_steps"].to_dicts()}
    assert j["1"]["total_cpu_seconds"] == 6.078 and j["1"]["req_tres"] == "billing=4,cpu=4,mem=2000M,node=1"
    assert (s["1.batch"]["total_cpu_seconds"], s["1.0"]["total_cpu_seconds"]) == (4.694, 1.383)
    assert (s["3.0"]["ntasks"], s["3.0"]["max_rss_bytes"], s["3.0"]["mem_tot_bytes"]) == (
        2,
        218042368,
        436043776,
    )
    assert s["3.0"]["tres_usage_in_max"].startswith("cpu=00:00:00,energy=0,fs/disk=44118,mem=218042368")
    assert (j["4"]["alloc_mem_bytes"], j["4"]["req_mem_bytes"], j["4"]["req_mem_scope"]) == (
        16000 * 2**20,
        1000 * 2**20,
        None,
    )
    assert (j["2"]["consumed_energy_joules"], s["2.batch"]["consumed_energy_joules"]) == (None, 0)
