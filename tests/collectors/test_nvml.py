"""Central NVML ingest: spool files loaded once, corrupt ones quarantined, partial minutes merged, pulls acked."""

from __future__ import annotations

import hashlib
import json
import urllib.error
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slurmscope.agent.agent import Agent
from slurmscope.agent.fake import fake_from_spec
from slurmscope.agent.http import start_http
from slurmscope.agent.sampling import MinuteAggregator, Reading
from slurmscope.agent.spool import list_spool
from slurmscope.collectors.collect import collect
from slurmscope.collectors.nvml import (
    AgentClient,
    ingest_bytes,
    ingest_spool_files,
    merge_samples,
    parse_spool,
)

from slurmscope.config import load_config
from slurmscope.db import connect, migrate
from slurmscope.spool import write_spool_file

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.fixture
def cfg():
    return load_config(None, env={})


def sample(minute: str, **kw) -> dict:
    rec = {
        "type": "sample",
        "gpu_uuid": "GPU-a",
        "gpu_index": 0,
        "minute": minute,
        "samples": 3,
        "util_gpu_mean": 10.0,
        "util_gpu_max": 20.0,
        "power_mean_watts": 100.0,
        "power_max_watts": 150.0,
        "energy_joules": 300.0,
        "ecc_corrected_delta": None,
        "ecc_corrected_total": None,
        "null_fields": 0,
    }
    rec.update(kw)
    return rec


def test_write_spool_file_is_complete_and_leaves_no_temp(tmp_path):
    p = write_spool_file(tmp_path, "gpu01", [sample("2027-01-15T08:00:00Z")], opened_at=T0)
    assert p.name == "gpu01_20270115T080000Z.jsonl"
    assert sorted(x.name for x in tmp_path.iterdir()) == [p.name]
    lines = p.read_bytes().split(b"\n")
    header, footer = json.loads(lines[0]), json.loads(lines[-2])
    assert header["format"] == "slurmscope-nvml-spool" and header["node"] == "gpu01"
    body = p.read_bytes()[: -len(lines[-2]) - 1]
    assert footer == {"type": "footer", "records": 1, "sha256": hashlib.sha256(body).hexdigest()}
    # never over an existing file
    q = write_spool_file(tmp_path, "gpu01", [], opened_at=T0)
    assert q.name == "gpu01_20270115T080000Z-1.jsonl" and p.read_bytes() == body + lines[-2] + b"\n"


def test_same_file_twice_loads_once(tmp_path, con, cfg):
    p = write_spool_file(
        tmp_path, "gpu01", [sample("2027-01-15T08:00:00Z"), sample("2027-01-15T08:01:00Z")], opened_at=T0
    )
    (first,) = ingest_spool_files(con, cfg, [p])
    (second,) = ingest_spool_files(con, cfg, [p])
    assert (first.rows, first.skipped, second.rows, second.skipped) == (2, False, 0, True)
    assert con.execute("SELECT count(*), sum(samples) FROM gpu_samples").fetchone() == (2, 6)
    assert con.execute("SELECT node, file_name, rows FROM spool_files").fetchall() == [("gpu01", p.name, 2)]


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda b: b[: len(b) // 2], "does not end with a newline"),
        (lambda b: b[: b.rfind(b"\n", 0, len(b) - 1) + 1], "no footer"),  # footer line lost
        (lambda b: b.replace(b'"samples":3', b'"samples":4', 1), "checksum mismatch"),
        (lambda b: b"garbage\n" + b, "not JSON"),
    ],
)
def test_corrupt_file_is_quarantined_not_loaded(tmp_path, con, cfg, damage, reason):
    good = write_spool_file(tmp_path, "gpu01", [sample("2027-01-15T08:00:00Z")], opened_at=T0).read_bytes()
    bad = damage(good)
    (res,) = [ingest_bytes(con, cfg, bad, file_name="gpu01_20270115T080000Z.jsonl")]
    assert res.rows == 0 and res.quarantined == len(bad.rstrip(b"\n").split(b"\n"))
    assert reason in res.error
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 0
    reasons = {
        r[0] for r in con.execute("SELECT reason FROM quarantine WHERE source LIKE 'nvml:%'").fetchall()
    }
    assert len(reasons) == 1 and reason in reasons.pop()
    # the intact file, delivered later under the same name, still loads
    ok = ingest_bytes(con, cfg, good, file_name="gpu01_20270115T080000Z.jsonl")
    assert ok.rows == 1 and ok.quarantined == 0


def test_bad_record_inside_a_sound_file_is_quarantined_alone(tmp_path, con, cfg):
    recs = [
        sample("2027-01-15T08:00:00Z"),
        sample("2027-01-15T08:01:00Z", util_gpu_mean="high"),
        {"type": "event", "gpu_uuid": "GPU-a", "event_time": "not a time", "event_type": "xid"},
        {"type": "weather"},
    ]
    p = write_spool_file(tmp_path, "gpu01", recs, opened_at=T0)
    (res,) = ingest_spool_files(con, cfg, [p])
    assert (res.rows, res.quarantined) == (1, 3)
    got = sorted(r[0] for r in con.execute("SELECT line_no FROM quarantine").fetchall())
    assert got == [3, 4, 5]


def test_partial_minutes_from_two_files_merge_exactly(tmp_path, con, cfg):
    # one minute split by an agent restart: 2 samples (util 30, 60) then 4 samples (util 0,0,0,90)
    a = sample(
        "2027-01-15T08:00:00Z",
        samples=2,
        util_gpu_mean=45.0,
        util_gpu_max=60.0,
        power_mean_watts=200.0,
        power_max_watts=210.0,
        energy_joules=400.0,
        ecc_corrected_delta=None,
        throttle_reasons=4,
    )
    b = sample(
        "2027-01-15T08:00:00Z",
        samples=4,
        util_gpu_mean=22.5,
        util_gpu_max=90.0,
        power_mean_watts=110.0,
        power_max_watts=300.0,
        energy_joules=440.0,
        ecc_corrected_delta=1,
        ecc_corrected_total=7,
        throttle_reasons=1,
    )
    f1 = write_spool_file(tmp_path, "gpu01", [a], opened_at=T0)
    f2 = write_spool_file(tmp_path, "gpu01", [b], opened_at=T0 + 30)
    ingest_spool_files(con, cfg, [f1, f2])
    row = con.execute(
        "SELECT samples, util_gpu_mean, util_gpu_max, power_mean_watts, power_max_watts, energy_joules,"
        " ecc_corrected_delta, ecc_corrected_total, throttle_reasons FROM gpu_samples"
    ).fetchone()
    # util mean (30+60+0+0+0+90)/6 = 30; power (2*200 + 4*110)/6 = 140; energy 840; ECC delta 1 (0 + 1)
    assert row == (6, 30.0, 90.0, 140.0, 300.0, 840.0, 1, 7, 5)
    # the same two chunks inside one file give the same row
    con2 = connect(tmp_path / "other.duckdb")
    try:
        f3 = write_spool_file(tmp_path / "x", "gpu01", [a, b], opened_at=T0)
        ingest_spool_files(con2, cfg, [f3])
        assert (
            con2.execute(
                "SELECT samples, util_gpu_mean, util_gpu_max, power_mean_watts, power_max_watts, "
                "energy_joules, ecc_corrected_delta, ecc_corrected_total, throttle_reasons "
                "FROM gpu_samples"
            ).fetchone()
            == row
        )
    finally:
        con2.close()


def test_job_interval_open_then_closed_in_any_order(tmp_path, con, cfg):
    open_ = {
        "type": "job",
        "gpu_uuid": "GPU-a",
        "gpu_index": 0,
        "job_id": "9",
        "mig_instance": "",
        "interval_start": "2027-01-15T08:00:00Z",
        "interval_end": None,
        "source": "prolog",
    }
    closed = {**open_, "interval_end": "2027-01-15T09:30:00Z"}
    late = write_spool_file(tmp_path, "gpu01", [closed], opened_at=T0 + 3600)
    early = write_spool_file(tmp_path, "gpu01", [open_], opened_at=T0)
    ingest_bytes(con, cfg, late.read_bytes(), file_name=late.name)  # the later file arrives first
    ingest_bytes(con, cfg, early.read_bytes(), file_name=early.name)
    rows = con.execute("SELECT job_id, interval_start, interval_end FROM gpu_jobs").fetchall()
    assert len(rows) == 1 and rows[0][2].isoformat() == "2027-01-15T09:30:00+00:00"


def test_two_mig_instances_of_one_gpu_for_one_job(tmp_path, con, cfg):
    recs = [
        {
            "type": "job",
            "gpu_uuid": "GPU-a",
            "gpu_index": 0,
            "job_id": "9",
            "mig_instance": m,
            "interval_start": "2027-01-15T08:00:00Z",
            "interval_end": None,
            "source": "prolog",
        }
        for m in ("MIG-1", "MIG-2")
    ]
    ingest_spool_files(con, cfg, [write_spool_file(tmp_path, "gpu01", recs, opened_at=T0)])
    assert con.execute("SELECT count(*) FROM gpu_jobs").fetchone()[0] == 2


def test_migration_0009_keeps_existing_rows(tmp_path):
    con = connect(tmp_path / "old.duckdb", migrate_schema=False)
    try:
        migrate(con, upto=8)
        con.execute(
            "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, mig_instance) "
            "VALUES ('c', 'n', 'GPU-a', '1', TIMESTAMPTZ '2027-01-15 08:00:00+00', NULL)"
        )
        assert 9 in migrate(con)
        assert con.execute("SELECT job_id, mig_instance FROM gpu_jobs").fetchall() == [("1", "")]
    finally:
        con.close()


def test_parse_spool_never_raises_on_junk():
    for junk in (b"", b"\n", b"\xff\xfe\n", b'{"type":"header"}\n', b"{}\n{}\n"):
        ps = parse_spool(junk)
        assert ps.problem is not None and ps.node is None


def _agent(tmp_path: Path, node: str) -> tuple[Agent, list[float]]:
    t = [T0]
    fake = fake_from_spec({"gpus": [{"model": "h200", "state": "load"}], "start": T0}, clock=lambda: t[0])
    agent = Agent(
        fake, node=node, spool_dir=tmp_path / node, mapping_dir=None, interval=10, clock=lambda: t[0]
    )
    while t[0] < T0 + 3700:  # a closed file per minute; the 61 completed minutes are all closed
        agent.tick(t[0])
        t[0] += 10
    return agent, t


def test_collect_from_agent_http_and_shared_path_then_prune(tmp_path, con):
    over_http, _ = _agent(tmp_path, "gpu01")
    on_disk, _ = _agent(tmp_path, "gpu02")
    server = start_http(over_http, "127.0.0.1", 0)
    try:
        cfg = load_config(None, env={}).with_overrides(
            nvml={
                "agents": [f"http://127.0.0.1:{server.server_address[1]}"],
                "spool_paths": [str(tmp_path / "gpu02")],
            }
        )
        [out] = collect(con, cfg, "nvml")
        assert (out.collector, out.status, out.error) == ("nvml", "ok", None)
        # every completed minute per node at 10 s sampling: 61 minute rows, 366 samples each
        assert con.execute(
            "SELECT node, count(*), sum(samples) FROM gpu_samples GROUP BY node ORDER BY node"
        ).fetchall() == [("gpu01", 61, 366), ("gpu02", 61, 366)]
        # acknowledged: the agent deleted its files, the shared path holds an .ack marker per file
        assert list_spool(tmp_path / "gpu01") == []
        closed = [p for p in Path(tmp_path / "gpu02").glob("*.jsonl") if not p.name.startswith(".")]
        acks = list(Path(tmp_path / "gpu02").glob("*.jsonl.ack"))
        assert len(closed) == 61 and len(acks) == len(closed) and list_spool(tmp_path / "gpu02") == []
        on_disk.tick(T0 + 3700)  # the agent prunes acknowledged files on its next round
        assert [p.name for p in (tmp_path / "gpu02").iterdir() if not p.name.startswith(".")] == []
        [again] = collect(con, cfg, "nvml")
        assert (again.collector, again.status, again.rows) == ("nvml", "ok", 0)
    finally:
        server.shutdown()
        server.server_close()


def test_a_failed_acknowledgement_is_recorded_and_the_file_is_offered_again(tmp_path, con, monkeypatch):
    """The file loaded (its transaction committed), so it stays loaded; the agent keeps it, and the next
    run skips it as already loaded and acknowledges it then."""
    agent, _ = _agent(tmp_path, "gpu01")
    server = start_http(agent, "127.0.0.1", 0)
    real = AgentClient.fetch

    def refuse_acks(self, url, *, method="GET", timeout):
        if method == "POST":
            raise urllib.error.URLError("connection reset")
        return real(self, url, method=method, timeout=timeout)

    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cfg = load_config(None, env={}).with_overrides(nvml={"agents": [url]})
        offered = len(list_spool(tmp_path / "gpu01"))
        monkeypatch.setattr(AgentClient, "fetch", refuse_acks)
        [out] = collect(con, cfg, "nvml")
        assert out.status == "error" and "acknowledgement failed" in out.error and out.rows > 0
        assert len(list_spool(tmp_path / "gpu01")) == offered
        gets: list[str] = []

        def count_gets(self, url, *, method="GET", timeout):
            if method == "GET":
                gets.append(url.removeprefix(url_base))
            return real(self, url, method=method, timeout=timeout)

        url_base = url
        monkeypatch.setattr(AgentClient, "fetch", count_gets)
        [again] = collect(con, cfg, "nvml")
        assert (again.status, again.rows) == ("ok", 0)
        assert list_spool(tmp_path / "gpu01") == []
        # incremental: the listing only; the loaded files were acknowledged again, not downloaded again
        assert gets == ["/spool"]
        agent.tick(T0 + 3700)
        agent.tick(T0 + 3760)  # one more minute closes one more segment: exactly that one is downloaded
        gets.clear()
        [third] = collect(con, cfg, "nvml")
        assert third.status == "ok" and third.rows > 0
        assert len(gets) == 2 and gets[0] == "/spool" and gets[1].startswith("/spool/gpu01_")
    finally:
        server.shutdown()
        server.server_close()
    runs = con.execute(
        "SELECT status FROM collector_runs WHERE collector = 'nvml' ORDER BY run_id"
    ).fetchall()
    # each file's load, then the failed acknowledgement; a skip writes none; then the new segment's load
    assert runs == [("ok",)] * offered + [("error",), ("ok",)]


def test_unreachable_agent_is_a_recorded_failure_not_a_crash(con):
    cfg = load_config(None, env={}).with_overrides(
        nvml={"agents": ["http://127.0.0.1:9"]}, slurm={"timeout_seconds": 2.0}
    )
    [o] = collect(con, cfg, "nvml")
    assert o.status == "error" and o.rows == 0 and "127.0.0.1:9" in o.error
    assert con.execute("SELECT status FROM collector_runs WHERE collector = 'nvml'").fetchall() == [
        ("error",)
    ]


readings = st.lists(
    st.tuples(
        st.integers(0, 100), st.integers(50, 700), st.integers(0, 5000), st.sampled_from([0, 1, 4, 0x40])
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(rows=readings, flush=st.sampled_from([1, 2, 5, 10, 15, 20, 30]))
def test_chunks_merge_to_the_whole_minute(rows, flush):
    """A minute flushed in chunks and merged by the loader equals the minute aggregated in one go."""
    whole = MinuteAggregator({"gpu_uuid": "GPU-a"}, interval=1)
    chunked = MinuteAggregator({"gpu_uuid": "GPU-a"}, interval=1, flush_seconds=flush)
    parts, energy = [], 0
    for i, (util, power, step, reasons) in enumerate(rows):
        energy += step
        r = dict(time=T0 + i, util_gpu=util, power_w=power, energy_mj=energy, reasons=reasons)
        assert whole.add(Reading(**r)) == []
        parts += chunked.add(Reading(**r))
    parts += chunked.flush()
    merged = parts[0]
    for p in parts[1:]:
        merged = merge_samples(merged, p)
    (ref,) = whole.flush()
    for key in (
        "samples",
        "util_gpu_max",
        "power_max_watts",
        "energy_joules",
        "throttle_seconds",
        "throttle_reasons",
    ):
        assert merged[key] == pytest.approx(ref[key]), key
    for key in ("util_gpu_mean", "power_mean_watts"):
        assert merged[key] == pytest.approx(ref[key], abs=1e-3), key


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400), cut=st.integers(0, 2000), flip=st.integers(0, 2000))
def test_parse_spool_never_raises_and_never_accepts_a_damaged_file(tmp_path_factory, data, cut, flip):
    assert parse_spool(data).problem is not None
    good = write_spool_file(
        tmp_path_factory.mktemp("s"), "gpu01", [sample("2027-01-15T08:00:00Z")], opened_at=T0
    ).read_bytes()
    truncated = good[: cut % len(good)]
    assert parse_spool(truncated).problem is not None
    i = flip % len(good)
    flipped = good[:i] + bytes([good[i] ^ 0x01]) + good[i + 1 :]
    assert parse_spool(flipped).problem is not None  # any single flipped bit: header, body or footer
