"""sacct --json and slurmrestd job responses give the rows of the text path (real captures, ground truth)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from slurmscope.collectors import sacct, slurm_json
from slurmscope.collectors.ingest import IngestError, ingest_files

from slurmscope.config import load_config
from slurmscope.db import connect

FIX = Path(__file__).resolve().parents[1] / "fixtures"
BED = FIX / "slurm-22.05" / "json"
WEB = FIX / "rackslab__Slurm-web" / "slurmrestd"

# The columns that differ between `sacct --parsable2` and `sacct --json` of the same 22.05 state, and why
# (docs/collectors.md): JSON has no uid; v0.0.38 prints every exit code as 0 (so JSON leaves them unset);
# the text state names who cancelled (`CANCELLED by 0`), the JSON state does not; the text Flags carry
# 22.05's `StartRecieved`, which v0.0.38's flag list has no name for.
ABSENT_FROM_JSON = {"jobs": {"uid", "exit_code", "signal"}, "job_steps": {"exit_code", "signal"}}
DIFFERENT = {"state_raw", "flags"}
KEYS = {"jobs": ["job_id_raw", "submit_time"], "job_steps": ["job_id_raw", "job_submit_time", "step_id"]}
# The usage fields (sql/0018): JSON has them, text captures made with the older live field list do not.
USAGE = {
    "jobs": {
        "total_cpu_seconds",
        "user_cpu_seconds",
        "system_cpu_seconds",
        "consumed_energy_joules",
        "req_tres",
        "comment",
        "admin_comment",
    },
    "job_steps": {
        "ntasks",
        "total_cpu_seconds",
        "user_cpu_seconds",
        "system_cpu_seconds",
        "max_rss_bytes",
        "ave_rss_bytes",
        "tres_usage_in_tot",
        "tres_usage_in_max",
        "mem_tot_bytes",
        "gpu_util_tot_percent",
        "gpu_mem_tot_bytes",
        "gpu_util_max_percent",
        "gpu_mem_max_bytes",
        "consumed_energy_joules",
    },
}


def _text(name: str) -> sacct.Parsed:
    return sacct.parse((BED / name).read_bytes(), cluster="c", tz=UTC, delimiter=sacct.LIVE_DELIMITER)


def _json(path: Path) -> sacct.Parsed:
    return sacct.parse(path.read_bytes(), cluster="c", tz=UTC)


def _same_rows(text: sacct.Parsed, js: sacct.Parsed) -> dict[str, pl.DataFrame]:
    """Assert equal rows on every shared column but the named ones; return the named columns, joined."""
    assert text.quarantine.height == 0 and js.quarantine.height == 0
    diffs = {}
    for table in ("jobs", "job_steps"):
        a, b = text.tables[table], js.tables[table]
        assert set(a.columns) - set(b.columns) == ABSENT_FROM_JSON[table]
        assert set(b.columns) - set(a.columns) <= USAGE[table]
        same = [c for c in b.columns if c not in DIFFERENT and c in a.columns]
        assert a.height == b.height
        assert a.select(same).sort(KEYS[table]).equals(b.select(same).sort(KEYS[table]))
        assert a.select(same).schema == b.select(same).schema
        named = [c for c in DIFFERENT if c in b.columns]
        diffs[table] = (
            a.select(KEYS[table] + named)
            .join(b.select(KEYS[table] + named), on=KEYS[table], suffix="_json")
            .sort(KEYS[table])
        )
    return diffs


@pytest.mark.parametrize("tag", ["final", "requeue"])
def test_sacct_json_gives_the_text_rows_of_the_same_moment(tag: str) -> None:
    diffs = _same_rows(_text(f"sacct_text_{tag}.txt"), _json(BED / f"sacct_json_{tag}.json"))
    jobs = diffs["jobs"]
    # the only state_raw difference is the canceller's uid, which JSON does not print
    changed = jobs.filter(pl.col("state_raw") != pl.col("state_raw_json"))
    assert changed.select("job_id_raw", "state_raw", "state_raw_json").rows() == [
        (15, "CANCELLED by 0", "CANCELLED")
    ]
    assert (
        jobs.filter(pl.col("flags") != pl.col("flags_json"))
        .select((pl.col("flags").str.replace(",StartRecieved", "") == pl.col("flags_json")).all())
        .item()
    )


@pytest.mark.parametrize("tag", ["final", "requeue"])
def test_jobs_a_window_hides_json_and_text(tag: str) -> None:
    diffs = _same_rows(_text(f"sacct_jobs_text_{tag}.txt"), _json(BED / f"sacct_jobs_json_{tag}.json"))
    assert diffs["jobs"]["job_id_raw"].to_list() == [17, 18, 19]
    assert diffs["jobs"]["flags_json"].to_list() == [None, None, None]


@pytest.mark.parametrize("tag", ["final", "requeue"])
def test_rest_response_is_the_sacct_json_rows(tag: str) -> None:
    a, b = _json(BED / f"sacct_json_{tag}.json"), _json(BED / f"rest_jobs_{tag}.json")
    for table in ("jobs", "job_steps"):
        assert a.tables[table].sort(KEYS[table]).equals(b.tables[table].sort(KEYS[table]))


@pytest.mark.parametrize(
    ("tag", "record_file"), [("final", "workload_record"), ("requeue", "workload_record_requeue")]
)
def test_values_against_the_workload_record(tag: str, record_file: str) -> None:
    record = json.loads((BED / f"{record_file}.json").read_text())
    jobs = _json(BED / f"sacct_json_{tag}.json").tables["jobs"]
    for want in record["jobs"]:
        if want.get("array"):
            continue
        rows = jobs.filter(pl.col("job_id_raw") == int(want["job_id_raw"])).sort("submit_time")
        if rows.height == 0:  # pending jobs the window hides
            continue
        assert rows.height == want["attempts"], want["name"]
        last = rows.row(-1, named=True)
        assert last["state"] == want["final_state"], want["name"]
        assert last["gpus"] == (want["gpus"] if last["state"] != "PENDING" else 0), want["name"]
        assert last["user"] == want["user"] and last["account"] == want["account"]
        if want.get("sched_by"):
            assert last["sched_by"] == want["sched_by"]
    # exit codes of v0.0.38 are not stored: `exit 1` (exit-one) would read as 0 there
    assert "exit_code" not in jobs.columns


@pytest.mark.parametrize(
    ("path", "expect"),
    [
        # hand-read from each capture: job id, state, nodes, cpus, elapsed, timelimit s, user, account
        (
            "24.05/0.0.41/slurmdb-job-completed.json",
            (649718, "COMPLETED", 0, 1, 1, 1, 60, "tpearson", "acoustic"),
        ),
        ("24.05/0.0.41/slurmdb-job-failed.json", (649719, "FAILED", 1, 1, 1, 1, 60, "agoodwin", "biology")),
        ("24.05/0.0.41/slurmdb-job-timeout.json", (649717, "TIMEOUT", 0, 1, 1, 83, 60, "ksoto", "optic")),
        ("24.05/0.0.41/slurmdb-job-pending.json", (649730, "PENDING", 0, 1, 64, 0, 60, "tmcgrath", "admin")),
        ("24.05/0.0.41/slurmdb-job-running.json", (649722, "RUNNING", 0, 1, 1, 88, 120, "ksoto", "optic")),
        # 24.11.5 (v0.0.42) and 25.05.4 (v0.0.43): 32 and 16 CPUs allocated, limit 2 min; pending: required.CPUs
        (
            "24.11/0.0.42/slurmdb-job-completed.json",
            (6362, "COMPLETED", 0, 1, 32, 61, 120, "jbeck", "biology"),
        ),
        ("24.11/0.0.42/slurmdb-job-pending.json", (6370, "PENDING", 0, 1, 4, 0, 60, "jbeck", "biology")),
        (
            "25.05/0.0.43/slurmdb-job-completed.json",
            (4742, "COMPLETED", 0, 1, 16, 60, 120, "progers", "biology"),
        ),
        ("25.05/0.0.43/slurmdb-job-pending.json", (4743, "PENDING", 0, 1, 128, 0, 60, "progers", "biology")),
        (
            "25.11/0.0.44/slurmdb-job-completed.json",
            (5749, "COMPLETED", 0, 1, 4, 30, 120, "vhartman", "biology"),
        ),
        ("25.11/0.0.44/slurmdb-job-failed.json", (5739, "FAILED", 1, 1, 1, 2, 60, "vhartman", "biology")),
        ("25.11/0.0.44/slurmdb-job-timeout.json", (5737, "TIMEOUT", 0, 1, 1, 82, 60, "vhartman", "biology")),
        (
            "25.11/0.0.44/slurmdb-job-pending.json",
            (5750, "PENDING", 0, 1, 128, 0, 60, "vhartman", "biology"),
        ),
        (
            "25.11/0.0.44/slurmdb-job-gpus-multi-nodes.json",
            (5679, "RUNNING", 0, 2, 2, 1, 60, "dperez", "acoustic"),
        ),
    ],
)
def test_slurmrestd_captures_of_later_versions(path: str, expect: tuple) -> None:
    p = _json(WEB / path)
    assert p.quarantine.height == 0
    job = p.tables["jobs"].row(0, named=True)
    got = (
        job["job_id_raw"],
        job["state"],
        job["exit_code"],
        job["nodes"],
        job["cpus"],
        job["elapsed_seconds"],
        job["timelimit_seconds"],
        job["user"],
        job["account"],
    )
    assert got == expect
    steps = p.tables["job_steps"]
    if job["state"] != "PENDING":
        assert steps["step_id"].to_list() == ["batch"]
        assert steps["job_submit_time"].to_list() == [job["submit_time"]]


def test_epoch_times_are_utc() -> None:
    job = _json(WEB / "25.11/0.0.44/slurmdb-job-completed.json").tables["jobs"].row(0, named=True)
    assert job["submit_time"] == datetime.fromtimestamp(1762942474, UTC)
    assert job["end_time"] == datetime.fromtimestamp(1762942505, UTC)


def _with_version(v: str) -> bytes:
    doc = json.loads((WEB / "24.05/0.0.41/slurmdb-job-completed.json").read_bytes())
    doc["meta"]["plugin"]["data_parser"] = f"data_parser/{v}"
    return json.dumps(doc).encode()


def test_an_unread_version_is_declined_by_name(tmp_path: Path) -> None:
    data = _with_version("v0.0.40")
    p = sacct.parse(data, cluster="c")
    assert p.rows == 0
    assert "v0.0.40" in p.quarantine["reason"][0]
    assert "v0.0.40" in sacct.check_input(data[:65536])
    f = tmp_path / "x.json"
    f.write_bytes(data)
    con = connect(str(tmp_path / "db.duckdb"))
    with pytest.raises(IngestError, match=r"v0\.0\.40"):
        ingest_files(con, load_config(env={}), "sacct", [f])


def test_not_json_after_a_brace_is_quarantined() -> None:
    p = sacct.parse(
        b'{"meta": {"plugin": {"data_parser": "data_parser/v0.0.41"}}, "jobs": [{"job_id": 1', cluster="c"
    )
    assert p.rows == 0 and p.quarantine["reason"][0].startswith("not Slurm JSON")


class _Tracking(io.BytesIO):
    """A file that records how far it has been read."""

    high = 0

    def read(self, n: int = -1) -> bytes:
        out = super().read(n)
        self.high = max(self.high, self.tell())
        return out


def test_iter_document_streams_the_jobs_array(monkeypatch: pytest.MonkeyPatch) -> None:
    data = (BED / "sacct_json_final.json").read_bytes()
    monkeypatch.setattr(slurm_json, "BLOCK", 4096)
    fh = _Tracking(data)
    it = slurm_json.iter_document(fh)
    assert next(it)[0] == "meta"
    assert next(it)[0] == "errors"
    key, first = next(it)
    assert key == "jobs[]" and first == json.loads(data)["jobs"][0]
    assert fh.high < len(data) // 4  # the first job came out before most of the file was read
    rest = [v for k, v in it if k == "jobs[]"]
    assert [first, *rest] == json.loads(data)["jobs"]


@pytest.mark.parametrize("block", [1, 3, 7, 1 << 20])
def test_iter_document_any_block_size(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    doc = {
        "jobs": [{"name": "é→🙂", "n": 12345678901234, "f": -1.5e3}, {"x": [None, True, "a\\"]}],
        "meta": {},
    }
    monkeypatch.setattr(slurm_json, "BLOCK", block)
    got = list(slurm_json.iter_document(io.BytesIO(json.dumps(doc, ensure_ascii=False).encode())))
    assert got == [("jobs[]", doc["jobs"][0]), ("jobs[]", doc["jobs"][1]), ("meta", {})]


def test_ingest_sacct_detects_json_and_loads_the_text_rows(tmp_path: Path) -> None:
    cfg = load_config(env={})
    con_t = connect(str(tmp_path / "t.duckdb"))
    con_j = connect(str(tmp_path / "j.duckdb"))
    ingest_files(
        con_t, cfg, "sacct", [BED / "sacct_text_final.txt"], delimiter=sacct.LIVE_DELIMITER, timezone="UTC"
    )
    ingest_files(con_j, cfg, "sacct", [BED / "sacct_json_final.json"])
    cols = "cluster, job_id, job_id_raw, submit_time, attempt, state, start_time, end_time, gpus, gpu_type, nodes, cpus, node_list, sched_by, req_mem_bytes"
    q = f"SELECT {cols} FROM jobs ORDER BY job_id_raw, submit_time"  # noqa: S608 - fixed text
    assert con_t.execute(q).fetchall() == con_j.execute(q).fetchall()
    assert con_j.execute("SELECT count(*) FROM jobs").fetchone()[0] == 18


def test_a_malformed_job_record_is_quarantined_alone() -> None:
    doc = json.loads((BED / "sacct_jobs_json_final.json").read_bytes())
    doc["jobs"].insert(1, {"job_id": 99, "time": "not an object"})
    p = sacct.parse(json.dumps(doc).encode(), cluster="c")
    assert p.tables["jobs"]["job_id_raw"].to_list() == [17, 18, 19]
    assert p.quarantine.height == 1 and "unreadable job record" in p.quarantine["reason"][0]
    assert '"job_id": 99' in p.quarantine["raw_text"][0]


def test_declined_bytes_quarantine_every_line() -> None:
    data = b"{ not json\nsecond line\n\nthird\n"
    p = sacct.parse(data, cluster="c")
    assert p.quarantine["line_no"].to_list() == [1, 2, 4]
    assert set(p.quarantine["reason"]) == {p.quarantine["reason"][0]}
    assert p.quarantine["reason"][0].startswith("not Slurm JSON")


def test_a_requeued_attempt_with_two_scheduler_flags_is_read_as_sacct_prints_it() -> None:
    """Seen on the bed: node-fail's 2nd attempt has STARTED_ON_SCHEDULE and STARTED_ON_BACKFILL in JSON,
    `SchedMain` in sacct's text (which prints the first of submit, main, backfill)."""
    doc = json.loads((BED / "sacct_json_requeue.json").read_bytes())
    flags = [j["flags"] for j in doc["jobs"] if j["job_id"] == 13]
    assert ["STARTED_ON_SCHEDULE", "STARTED_ON_BACKFILL"] in [f[1:] for f in flags]
    jobs = _json(BED / "sacct_json_requeue.json").tables["jobs"].filter(pl.col("job_id_raw") == 13)
    text = _text("sacct_text_requeue.txt").tables["jobs"].filter(pl.col("job_id_raw") == 13)
    assert jobs.sort("submit_time")["sched_by"].to_list() == text.sort("submit_time")["sched_by"].to_list()
    assert text.sort("submit_time")["sched_by"].to_list() == ["backfill", "main"]


def test_usage_fields_of_sacct_json_equal_the_text_of_the_same_moment() -> None:
    """tests/fixtures/slurm-22.05/seff: the live command line with the usage fields, and --json right after;
    every usage column (CPU times, MaxRSS, AveRSS, NTasks, TRES usage, energy, ReqTRES) is equal, numbered
    steps (`1.0`) included."""
    seff = FIX / "slurm-22.05" / "seff"
    text = sacct.parse((seff / "seff_sacct.txt").read_bytes(), cluster="c", tz=UTC)
    js = _json(seff / "seff_sacct_json.json")
    _same_rows(text, js)
    for table in ("jobs", "job_steps"):
        assert USAGE[table] <= set(js.tables[table].columns) & set(text.tables[table].columns)
    assert sorted(js.tables["job_steps"]["step_id"].to_list()) == ["0", "0", "0"] + ["batch"] * 5
