"""squeue parser: real captures in their recorded formats, pending reasons, arrays, dependencies, GPUs, CLI."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from slurmscope.collectors import squeue
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.cli import main
from tests.paths import FIXTURES

FIX = FIXTURES
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
UTCZ = ZoneInfo("UTC")
US = "\x1f"
S = "SckyzO__slurm_exporter"
SQUEUE_O = "JobID:|,Account:|,UserName:|,Partition:|,State:|,NumNodes:|,NumCPUs:|,tres-alloc:"
# The OSC capture's -O list is not recorded upstream; this one is read off its header line (ACCOUNT, JOBID,
# EXEC_HOST, ...), every field with the ":\x1f" suffix the provenance note gives.
OSC_FIELDS = (
    "Account,JobID,exechost,mincpus,NumCPUs,mintmpdisk,NumNodes,EndTime,Dependency,Feature,ArrayJobID,"
    "GroupName,GroupID,OverSubscribe,SocketsPerNode,JobArrayID,CoresPerSocket,Name,ThreadsPerCore,Comment,"
    "ArrayTaskID,TimeLimit,TimeLeft,MinMemory,TimeUsed,ReqNodes,NodeList,Command,Contiguous,QOS,Partition,"
    "Priority,Reason,StartTime,StateCompact,State,UserName,UserID,Reservation,SubmitTime,WCKey,Licenses,"
    "ExcNodes,CoreSpec,Nice,SchedNodes,SCT,WorkDir,tres-alloc,tres-per-node"
)
OSC_FORMAT = ",".join(f"{f}:\\x1f" for f in OSC_FIELDS.split(","))
RIVOS = (
    '{"a": "%a", "id": %A, "end_time": "%e", "state": "%T", "p": "%P", "cpu": %C, "mem": "%m", '
    '"array_id": "%K", "r":  "%R"}'
)


def parse(data: bytes | str, fmt: str | None = None, tz: ZoneInfo = UTCZ):
    if isinstance(data, str):
        data = data.encode()
    return squeue.parse(data, cluster="c", snapshot_time=T0, tz=tz, fmt=fmt)


def job(df: pl.DataFrame, job_id: str) -> dict:
    rows = df.filter(pl.col("job_id") == job_id).to_dicts()
    assert len(rows) == 1, job_id
    return rows[0]


CAPTURES = [
    (
        "vpenso__prometheus-slurm-exporter/squeue.txt",
        "%A,%T",
        42,
        {
            "15451729": {"state": "RUNNING", "job_id_raw": 15451729},
        },
    ),
    (
        "treydock__prometheus-slurm-exporter/squeue.txt",
        "%i|%T|%r|%P|%V",
        17,
        {
            "1888": {"state": "RUNNING", "submit_time": datetime(2020, 6, 4, 8, 46, 55, tzinfo=UTC)},
        },
    ),
    (
        f"{S}/squeue_jobs.txt",
        SQUEUE_O,
        9,
        {
            "222": {
                "partition": "cpu,gpu",
                "state": "PENDING",
                "user": "carol",
                "account": "physics",
                "cpus": 2,
                "nodes": 1,
                "gpus": 0,
            },
            "219": {"state": "SUSPENDED", "user": "dave"},
        },
    ),
    (f"{S}/slurm-24.11.7/squeue_jobs.txt", SQUEUE_O, 15, {"15": {"partition": "debug", "cpus": 4}}),
    (f"{S}/slurm-26.05.2/squeue_jobs.txt", SQUEUE_O, 14, {}),
    (
        f"{S}/squeue_jobs_accounts_view.txt",
        "JobID:20|,Account:20|,State:20|,NumNodes:20|,NumCPUs:20|,tres-alloc:",
        13,
        {
            "9722": {"account": "account_a", "nodes": 8, "cpus": 32, "gpus": 32},
            "10501": {"gpus": 2},
            "10243": {"gpus": 0},
        },
    ),
    (
        f"{S}/squeue_jobs_users_view.txt",
        "JobID:20|,UserName:20|,State:20|,NumNodes:20|,NumCPUs:20|,tres-alloc:",
        None,
        {
            "10422": {"user": "carol", "state": "RUNNING", "cpus": 288, "gpus": 4},
        },
    ),
    (
        "rug-cit-hpc__hb-jobinfo/squeue.txt",
        "%i|%E;%R;%C",
        10,
        {
            "7219441": {"dependency": "afterany:7219440(unfulfilled)", "reason": "Dependency", "cpus": 384},
            "8322514_33": {
                "array_job_id": 8322514,
                "array_task_id": "33",
                "reason": None,
                "job_id_raw": None,
            },
            "8326038": {
                "reason": "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority "
                "partitions"
            },
        },
    ),
    ("rug-cit-hpc__slurm-jobinfo/squeue.txt", "%i|%E;%R", 3, {"18120717": {"reason": "JobHeldUser"}}),
    (
        "OSC__ood_core/non_utf8_job_name.txt",
        OSC_FORMAT,
        1,
        {
            "29471683_9": {
                "job_id_raw": 123,
                "array_job_id": 29471683,
                "array_task_id": "9",
                "state": "COMPLETED",
                "name": "\ufffd non-utf8",
                "user": "annie.oakley",
                "cpus": 40,
                "timelimit_seconds": 1800,
                "gpus": 0,
                "submit_time": datetime(2024, 6, 26, 14, 1, 13, tzinfo=UTC),
            },
        },
    ),
    (
        "OSC__ood_core/null_submit_time.txt",
        OSC_FORMAT,
        4,
        {
            "6787542": {
                "state": "RUNNING",
                "user": "crokosky",
                "timelimit_seconds": 3600,
                "partition": "quick",
            },
            "6783828": {"state": "TIMEOUT", "reason": "TimeLimit"},
        },
    ),
]


@pytest.mark.parametrize(("path", "fmt", "rows", "checks"), CAPTURES, ids=[c[0] for c in CAPTURES])
def test_capture_parses_without_quarantine(path, fmt, rows, checks):
    data = (FIX / path).read_bytes()
    p = parse(data, fmt)
    assert p.quarantine.height == 0, p.quarantine.to_dicts()[:3]
    df = p.tables["pending_jobs"]
    if rows is None:
        rows = sum(1 for line in data.split(b"\n") if line.strip())
    assert df.height == rows
    for job_id, expected in checks.items():
        row = job(df, job_id)
        for col, value in expected.items():
            assert row[col] == value, (job_id, col)


def test_vpenso_states_as_counted_in_the_raw_text():
    df = parse((FIX / "vpenso__prometheus-slurm-exporter/squeue.txt").read_bytes(), "%A,%T").tables[
        "pending_jobs"
    ]
    counts = dict(df.group_by("state").len().iter_rows())
    assert counts == {
        "RUNNING": 28,
        "PENDING": 4,
        "COMPLETING": 2,
        "CANCELLED": 1,
        "COMPLETED": 1,
        "CONFIGURING": 1,
        "FAILED": 1,
        "NODE_FAIL": 1,
        "PREEMPTED": 1,
        "SUSPENDED": 1,
        "TIMEOUT": 1,
    }


def test_osc_job_name_with_an_extra_separator_keeps_the_columns():
    df = parse((FIX / "OSC__ood_core/null_submit_time.txt").read_bytes(), OSC_FORMAT).tables["pending_jobs"]
    row = job(df, "6779842")
    assert row["name"] == f"cupd3_n_fcc_mix_n15{US}cohp"
    assert row["state"] == "RUNNING" and row["timelimit_seconds"] == 4 * 86400


def test_rivosinc_capture_keeps_good_lines_and_quarantines_upstreams_broken_ones():
    p = parse((FIX / "rivosinc__prometheus-slurm-exporter/squeue_fallback.txt").read_bytes(), RIVOS)
    df = p.tables["pending_jobs"]
    # upstream's file: a '#' comment line and two lines without the "r" field (its faulty-input test)
    assert p.quarantine["line_no"].to_list() == [7, 8, 9]
    assert df.height == 6
    assert job(df, "51447052")["reason"] == "(ReqNodeNotAvail, UnavailableNodes:cs[100,101,102])"
    assert job(df, "26515966")["reason"] is None  # running: %R is the node list
    assert job(df, "18804")["cpus"] == 24


DECLINED = [
    (f"{S}/queue_all_states.txt", "%P|%T|%C|%r|%u"),
    (f"{S}/slurm-24.11.7/queue_all_states.txt", "%P|%T|%C|%r|%u"),
    (f"{S}/slurm-24.11.7/queue_default_states.txt", "%P|%T|%C|%r|%u"),
    (f"{S}/slurm-26.05.2/queue_all_states.txt", "%P|%T|%C|%r|%u"),
    (f"{S}/slurm-26.05.2/queue_default_states.txt", "%P|%T|%C|%r|%u"),
]


@pytest.mark.parametrize(("path", "fmt"), DECLINED, ids=[c[0] for c in DECLINED])
def test_formats_without_job_ids_are_declined(path, fmt):
    problem = squeue.check_input((FIX / path).read_bytes(), fmt, None)
    assert problem and "docs/collectors.md" in problem


# --------------------------------------------------------------------------------- live format


def live(**kw) -> str:
    v = {
        "i": "42",
        "A": "42",
        "F": "42",
        "K": "N/A",
        "u": "alice",
        "a": "ml",
        "P": "gpu",
        "q": "normal",
        "T": "PENDING",
        "Q": "1000",
        "V": "2024-05-01T10:00:00",
        "S": "N/A",
        "D": "2",
        "C": "32",
        "b": "gres:gpu:4",
        "l": "1-00:00:00",
        "E": "(null)",
        "r": "Priority",
        "tasks": "2",
        "per_job": "N/A",
        "per_task": "N/A",
        "per_socket": "N/A",
        "sockets": "*",
        "j": "train",
    }
    v.update(kw)
    return US.join(v[c] for c in LIVE_KEYS)


# The live -O fields in order (squeue.LIVE_FIELDS, then Name), keyed by their -o letter where they have one.
LIVE_KEYS = (
    *"iAFKuaPqTQVSDCblEr",
    "tasks",
    "per_job",
    "per_task",
    "per_socket",
    "sockets",
    "j",
)


def argv_format(path) -> str:
    """The -o/-O value of a capture's recorded argument list (`<name>.argv` beside it)."""
    argv = path.with_suffix(".argv").read_text().splitlines()
    return next(a.split("=", 1)[1] for a in argv if a.startswith(("--format=", "--Format=")))


def test_live_command_line():
    from slurmscope.config import load_config

    argv = squeue.command(load_config(None))
    assert argv[:5] == ["squeue", "--all", "--array", "--noheader", "--states=all"]
    fields = [
        "JobArrayID",
        "JobID",
        "ArrayJobID",
        "ArrayTaskID",
        "UserName",
        "Account",
        "Partition",
        "QOS",
        "State",
        "PriorityLong",
        "SubmitTime",
        "StartTime",
        "NumNodes",
        "NumCPUs",
        "tres-per-node",
        "TimeLimit",
        "Dependency",
        "Reason",
        "NumTasks",
        "tres-per-job",
        "tres-per-task",
        "tres-per-socket",
        "Sockets",
    ]
    assert argv[5] == "--Format=" + ",".join(f"{f}:{US}" for f in fields) + ",Name:"
    assert len(LIVE_KEYS) == len(squeue.line_format(None).names)


def test_live_pending_job_with_gpus_per_node():
    r = parse(live() + "\n").tables["pending_jobs"].row(0, named=True)
    assert (r["job_id"], r["job_id_raw"], r["array_job_id"], r["array_task_id"]) == ("42", 42, None, None)
    assert (r["state"], r["reason"], r["priority"]) == ("PENDING", "Priority", 1000)
    assert (r["nodes"], r["cpus"], r["gpus"], r["tres_per_node"]) == (2, 32, 8, "gres:gpu:4")
    assert r["timelimit_seconds"] == 86400 and r["start_time"] is None and r["dependency"] is None
    assert r["submit_time"] == datetime(2024, 5, 1, 10, tzinfo=UTC)


def test_live_arrays_dependency_and_name_with_separator():
    lines = [
        live(i="7_[5-9%2]", A="7", F="7", K="5-9%2", r="JobArrayTaskLimit", j=f"a{US}b|c"),
        live(i="7_3", A="11", F="7", K="3", T="RUNNING", r="None", S="2024-05-01T11:00:00"),
        live(i="8", A="8", F="8", E="afterok:7_3(unfulfilled)", r="Dependency", b="N/A"),
    ]
    p = parse("\n".join(lines) + "\n")
    assert p.quarantine.height == 0
    df = p.tables["pending_jobs"]
    pending = job(df, "7_[5-9%2]")
    assert (pending["array_job_id"], pending["array_task_id"], pending["job_id_raw"]) == (7, "[5-9%2]", 7)
    assert pending["name"] == f"a{US}b|c"
    task = job(df, "7_3")
    assert (task["array_job_id"], task["array_task_id"], task["job_id_raw"], task["reason"]) == (
        7,
        "3",
        11,
        None,
    )
    assert task["start_time"] == datetime(2024, 5, 1, 11, tzinfo=UTC)
    dep = job(df, "8")
    assert (dep["dependency"], dep["reason"], dep["gpus"]) == ("afterok:7_3(unfulfilled)", "Dependency", 0)


def test_compact_states_and_local_times():
    df = parse(
        "1 PD 2024-01-15T10:00:00\n2 CG 2024-01-15T10:00:00\n", "%i %t %V", tz=ZoneInfo("Europe/Berlin")
    ).tables["pending_jobs"]
    assert df["state"].to_list() == ["PENDING", "COMPLETING"]
    assert df["submit_time"].to_list() == [datetime(2024, 1, 15, 9, tzinfo=UTC)] * 2


def test_counts_slurm_leaves_unset_are_null_not_a_bad_line():
    # a job cancelled while pending: slurmctld sends NO_VAL (4294967294) as its task count (22.05)
    r = parse(live(i="16", A="16", F="16", T="CANCELLED", tasks="4294967294", sockets="*") + "\n")
    assert r.quarantine.height == 0
    row = r.tables["pending_jobs"].row(0, named=True)
    assert (row["state"], row["tasks"], row["sockets_per_node"], row["gpus"]) == ("CANCELLED", None, None, 8)


def test_bad_values_are_quarantined_with_a_reason():
    p = parse(live(C="lots") + "\n" + live(i="x1") + "\n" + live(T="running?") + "\n" + "42\n")
    assert p.tables["pending_jobs"].height == 0
    reasons = p.quarantine["reason"].to_list()
    assert "CPU count is not an integer" in reasons[0]
    assert "not a job id" in reasons[1]
    assert "not a job state" in reasons[2]
    assert f"expected {len(LIVE_KEYS)}" in reasons[3]


def test_real_slurm_22_05_squeue(fixtures):
    for tag in ("mid", "final"):
        path = fixtures / f"slurm-22.05/squeue_{tag}.txt"
        assert argv_format(path) == squeue.PREVIOUS_LIVE_FORMAT.replace(US, "\\x1f")
        p = parse(path.read_bytes(), squeue.PREVIOUS_LIVE_FORMAT)
        assert p.quarantine.height == 0
    df = p.tables["pending_jobs"]
    raw = (fixtures / "slurm-22.05/squeue_final.txt").read_text().splitlines()
    assert df.height == len({line.split(US)[0] for line in raw})
    held = job(df, "17")  # tests/fixtures/slurm-22.05/README.md: job 17 is held
    assert (held["state"], held["reason"], held["priority"], held["gpus"]) == ("PENDING", "JobHeldUser", 0, 8)


# --------------------------------------------------------------------------------- CLI


def test_cli_ingest_then_query(tmp_path):
    db = tmp_path / "q.duckdb"
    runner = CliRunner()
    res = runner.invoke(
        main,
        [
            "--db",
            str(db),
            "ingest",
            "squeue",
            str(FIX / "rug-cit-hpc__hb-jobinfo/squeue.txt"),
            "--format",
            "%i|%E;%R;%C",
        ],
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
            "SELECT job_id, reason, cpus FROM pending_jobs WHERE dependency IS NOT NULL ORDER BY job_id",
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[1:] == [
        "7219441,Dependency,384",
        "7635166,Dependency,256",
        "8094007,Dependency,256",
    ]


# --------------------------------------------------------------------------------- properties

_ALPHABET = st.sampled_from(
    list("0123456789_[]%-+|;, ()\x1f\x1c\nPDRCGabc:²")
    + ["PENDING", "N/A", "(null)", "gres:gpu:2", "2024-05-01T10:00:00"]
)


def _check_total(data: bytes, fmt: str | None) -> None:
    p = parse(data, fmt)
    lines = data.split(b"\n")
    q = set(p.quarantine["line_no"].to_list())
    assert q <= set(range(1, len(lines) + 1))
    first = True
    for i, line in enumerate(lines, start=1):
        if is_blank(line.decode("utf-8", "replace")):
            continue
        if i not in q:
            alone = parse(line, fmt)
            assert alone.tables["pending_jobs"].height == 1 or (first and alone.quarantine.height == 0), line
        first = False


@given(
    st.one_of(st.binary(max_size=300), st.lists(_ALPHABET, max_size=80).map(lambda xs: "".join(xs).encode())),
    st.sampled_from([None, "%i|%E;%R;%C"]),
)
def test_never_raises_and_every_line_kept_or_quarantined(data, fmt):
    _check_total(data, fmt)


# ------------------------------------------------------------------------- vectorised == per-line path

_VALUES = {
    "i": ["42", "7_3", "7_[5-9%2]", "8+1", "x", "", "99999999999999999999", "١٢"],
    "A": ["42", "N/A", "", "-1", "abc", "123456789012345678901"],
    "F": ["42", "7", "N/A"],
    "K": ["N/A", "3", "5-9%2", "[1-2]", "²"],
    "u": ["alice", " bob ", "(null)", "\x1calice"],
    "a": ["ml", ""],
    "P": ["gpu", "cpu,gpu", ""],
    "q": ["normal", "(null)"],
    "T": ["PENDING", "R", "pd", "running?", "", "ß"],
    "Q": ["1000", "0", "-5", "1.5", "N/A", "99999999999999999999"],
    "V": ["2024-05-01T10:00:00", "2024-03-31T02:30:00", "Unknown", "1714557600", "2024-05-01", "bad"],
    "S": ["N/A", "2024-05-01T11:00:00", "2024-10-27T02:30:00"],
    "D": ["1", "2", "0", "", "3000000000"],
    "C": ["32", "x", "2147483648"],
    "b": ["N/A", "gres:gpu:4", "gres/gpu:h100:2", "gres:gpu:1g.10gb:2", "gres:gpu:3000000000", "(null)"],
    "l": ["1-00:00:00", "5:00", "UNLIMITED", "1-02:30", "30", "10:00:00.5", "9999999-00:00:00"],
    "E": ["(null)", "afterok:7_3(unfulfilled)"],
    "r": ["None", "Priority", "(null)"],
    "tasks": ["1", "4", "", "N/A", "3000000000", "x", "4294967294"],
    "per_job": ["N/A", "gres:gpu:8", "gres:gpu:h100:4", "gres:gpu:3000000000"],
    "per_task": ["N/A", "gres:gpu:1", "gres:gpu:2"],
    "per_socket": ["N/A", "gres:gpu:2"],
    "sockets": ["*", "1", "2", "2000000000"],
    "j": ["train", "a\x1fb", "", " spaced "],
}


@st.composite
def _live_lines(draw):
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.text(alphabet="0123456789\x1f|ab", max_size=20)))
            continue
        lines.append(US.join(draw(st.sampled_from(_VALUES[c])) for c in LIVE_KEYS))
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=150)  # each example runs both paths (~70 ms); the no-raise property runs the CI count
@given(_live_lines(), st.sampled_from(["UTC", "Europe/Berlin"]))
def test_vectorised_path_equals_per_line_path(data, zone):
    from polars.testing import assert_frame_equal

    kw = dict(cluster="c", snapshot_time=T0, tz=ZoneInfo(zone), fmt=None, delimiter=None)
    fast = squeue._parse(data, vectorise=True, **kw)
    slow = squeue._parse(data, vectorise=False, **kw)
    assert_frame_equal(fast.tables["pending_jobs"], slow.tables["pending_jobs"])
    assert_frame_equal(fast.quarantine.sort("line_no"), slow.quarantine.sort("line_no"))
