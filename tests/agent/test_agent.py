"""The NVML agent: attribution, aggregation, XID/health, NVML error handling, spool durability, endpoints.

The agent runs against the fake NVML (values from real nvidia-smi captures) on an injected clock, so a
few minutes of sampling take milliseconds. Expected values come from the captures, the fake's own
identity answers (never from the agent) or arithmetic done by hand in the comments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pynvml
import pytest
from slurmscope.agent.agent import Agent
from slurmscope.agent.attribution import JobMapping, normalize_bus_id, parse_cgroup_job, parse_mapping
from slurmscope.agent.fake import FIELDS, FakeProcess, fake_from_spec
from slurmscope.agent.http import start_http
from slurmscope.agent.kmsg import KmsgReader, parse_kmsg_record, parse_xid
from slurmscope.agent.sampling import MinuteAggregator, Reading
from slurmscope.agent.spool import SpoolJournal, list_spool
from slurmscope.collectors.nvml import ingest_spool_files, parse_spool

from slurmscope.config import load_config
from slurmscope.spool import read_spool_bytes, utc
from tests.paths import ROOT

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z, hour aligned
REPO = ROOT


# --------------------------------------------------------------------------------------------------
# pure parsers on literal strings
# --------------------------------------------------------------------------------------------------


def test_cgroup_v1_v2_and_newer_paths():
    v1 = (
        "12:devices:/slurm/uid_1000/job_123/step_0/task_0\n"
        "4:memory:/slurm/uid_1000/job_123/step_batch/task_0\n1:name=systemd:/system.slice/slurmd.service\n"
    )
    assert parse_cgroup_job(v1) == "123"
    assert parse_cgroup_job("0::/system.slice/slurmstepd.scope/job_4567/step_0/user/task_0\n") == "4567"
    # slurmd started per node (multiple-slurmd / Slurm 26 style): an extra component before job_<id>
    assert (
        parse_cgroup_job("0::/system.slice/slurmstepd-gpu01.scope/job_77/step_extern/slurm_processes\n")
        == "77"
    )
    assert (
        parse_cgroup_job("0::/system.slice/slurmstepd.scope/run_3f2a/job_88/step_batch/user/task_0\n") == "88"
    )
    assert parse_cgroup_job("0::/user.slice/user-1000.slice/session-3.scope\n") is None
    assert parse_cgroup_job("0::/system.slice/slurmstepd.scope/system\n") is None  # the stepd itself
    assert parse_cgroup_job("0::/x/job_12abc/y\n") is None
    assert parse_cgroup_job("") is None
    # the unified (v2) line wins over a stale v1 line
    assert (
        parse_cgroup_job(
            "3:cpuset:/slurm/uid_1/job_5/step_0\n0::/system.slice/slurmstepd.scope/job_6/step_0\n"
        )
        == "6"
    )


def test_bus_id_forms():
    for text in ("00000000:3B:00.0", "0000:3b:00.0", "PCI:0000:3b:00", "3b:00.0", b"00000000:3B:00.0\x00"):
        assert normalize_bus_id(text) == "0000:3b:00.0"
    assert normalize_bus_id("garbage") is None


def test_mapping_file():
    m = parse_mapping(
        "job_id=123\nstart_time=1799999400\ndevices=5,GPU-abc\npci_bus_ids=0000:37:00.0\nuid=1000\n"
    )
    assert m == JobMapping("123", 1799999400.0, ("5", "GPU-abc"), ("0000:37:00.0",), None)
    assert parse_mapping("job_id=12\ncuda_visible_devices=0,1\n").devices == ("0", "1")
    assert parse_mapping("devices=1\n") is None
    assert parse_mapping("job_id=x\n") is None


def test_kmsg_and_xid_lines():
    r = parse_kmsg_record(
        "3,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=2210, name=python, GPU has fallen off the bus."
    )
    assert (r.seq, r.usec, r.priority) == (1234, 5678901, 3)
    x = parse_xid(r.message)
    assert (x.pci_bus_id, x.xid) == ("0000:3b:00.0", 79) and x.detail.endswith("GPU has fallen off the bus.")
    assert parse_kmsg_record(" SUBSYSTEM=pci") is None
    assert parse_xid("NVRM: GPU at PCI:0000:3b:00: GPU-1234") is None


@pytest.mark.parametrize(
    "name,expected",
    [
        ("dmesg-with-xid-119.log", {("0000:9b:00.0", 119): 5}),
        ("dmesg.decode.iso.log", {("0000:38:00.0", 13): 16, ("0000:38:00.0", 43): 1}),
        ("dmesg.0.log", {("0000:19:00.0", 48): 1, ("0000:19:00.0", 63): 1, ("0000:19:00.0", 94): 9}),
    ],
)
def test_xid_lines_of_real_kernel_logs(fixtures, name, expected):
    """Counts per (bus, xid) are `grep -o 'NVRM: Xid (PCI:...): N' | sort | uniq -c` of each capture."""
    got: dict = {}
    for line in (fixtures / "gpud" / name).read_text(errors="replace").splitlines():
        x = parse_xid(line)
        if x:
            got[(x.pci_bus_id, x.xid)] = got.get((x.pci_bus_id, x.xid), 0) + 1
    assert got == expected


# --------------------------------------------------------------------------------------------------
# a tiny harness: fake NVML + agent on a fake clock
# --------------------------------------------------------------------------------------------------


class Env:
    def __init__(
        self,
        tmp: Path,
        gpus: list[dict],
        *,
        minors: list[int] | None = None,
        interval: float = 10,
        cgroups: dict[int, str] | None = None,
        kmsg: KmsgReader | None = None,
        flush: float = 60,
        cluster: str | None = None,
        rotate: float = 60,
    ):
        self.t = [T0]
        self.tmp = tmp
        self.fake = fake_from_spec({"gpus": gpus, "start": T0}, clock=self.clock, sleep=self.advance)
        for i, m in enumerate(minors or []):
            self.fake.gpus[i].minor_number = m
        self.map = tmp / "map"
        self.map.mkdir(exist_ok=True)
        self.spool = tmp / "spool"
        self.agent = Agent(
            self.fake,
            node="gpu01",
            spool_dir=self.spool,
            mapping_dir=self.map,
            interval=interval,
            read_cgroup=(cgroups or {}).get,
            kmsg=kmsg,
            clock=self.clock,
            sleep=self.advance,
            rotate_seconds=rotate,
            flush_seconds=flush,
            cluster=cluster,
        )

    def clock(self) -> float:
        return self.t[0]

    def advance(self, s: float) -> None:
        self.t[0] += s

    def run(self, seconds: float) -> None:
        end = self.t[0] + seconds
        while self.t[0] < end:
            self.agent.tick(self.t[0])
            self.t[0] += self.agent.interval

    def finish(self) -> list[dict]:
        self.agent.close(self.t[0])
        out = []
        for p in sorted(self.spool.glob("*.jsonl")):
            content = read_spool_bytes(p.read_bytes())
            assert content.problem is None and not content.bad_lines
            out += [r for _, r in content.records]
        return out

    def uuid_of_minor(self, minor: int) -> str:
        return next(g.uuid for g in self.fake.gpus if g.minor_number == minor)


def job_rows(records):
    return [r for r in records if r["type"] == "job"]


def test_allocated_gpu_without_process_is_attributed_and_idle(tmp_path, con):
    # NVML index order 0..3 has minors 7,3,5,1: minor 5 is NVML index 2, never index 5 or 0.
    env = Env(tmp_path, [{"model": "h100", "state": "idle", "count": 4}], minors=[7, 3, 5, 1])
    (env.map / "job_123").write_text(f"job_id=123\nstart_time={T0 - 600:.0f}\ndevices=5\n")
    env.run(180)
    records = env.finish()
    target = env.uuid_of_minor(5)
    assert job_rows(records) == [
        {
            "type": "job",
            "gpu_uuid": target,
            "gpu_index": 2,
            "job_id": "123",
            "mig_instance": "",
            "interval_start": "2027-01-15T07:50:00Z",
            "interval_end": None,
            "source": "prolog",
        }
    ]
    ingest_spool_files(con, load_config(None, env={}), sorted(env.spool.glob("*.jsonl")))
    # the idle-capture H100 reads "0 %": three allocated minutes, all idle, all charged to job 123
    rows = con.execute("""
        SELECT j.job_id, count(*), sum(s.samples), max(s.util_gpu_mean)
        FROM gpu_samples s JOIN gpu_jobs j USING (cluster, node, gpu_uuid)
        WHERE s.minute >= j.interval_start AND (j.interval_end IS NULL OR s.minute < j.interval_end)
        GROUP BY j.job_id""").fetchall()
    assert rows == [("123", 3, 18, 0.0)]


def test_process_cgroup_agrees_with_mapping(tmp_path):
    cg = {4242: "0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n"}
    env = Env(tmp_path, [{"model": "h100", "state": "load", "count": 2}], minors=[1, 0], cgroups=cg)
    env.fake.gpus[1].processes = [FakeProcess(4242, 1 << 30)]  # minor 0 = NVML index 1
    (env.map / "job_123").write_text(f"job_id=123\nstart_time={T0:.0f}\ndevices=0\n")
    env.run(120)
    records = env.finish()
    assert env.agent.attributor.checks["agree"] == 2  # two slow rounds (T0, T0+60)
    assert env.agent.attributor.checks["disagree"] == 0
    assert [(r["job_id"], r["gpu_uuid"], r["source"]) for r in job_rows(records)] == [
        ("123", env.uuid_of_minor(0), "prolog")
    ]
    assert not [r for r in records if r["type"] == "event" and r["event_type"] == "attribution_mismatch"]


def test_process_of_another_job_is_flagged_and_recorded(tmp_path):
    cg = {777: "4:memory:/slurm/uid_1000/job_999/step_0/task_0\n"}
    env = Env(tmp_path, [{"model": "h100", "state": "load"}], cgroups=cg)
    env.fake.gpus[0].processes = [FakeProcess(777)]
    (env.map / "job_123").write_text(f"job_id=123\nstart_time={T0:.0f}\ndevices=0\n")
    env.run(60)
    env.fake.gpus[0].processes = []
    env.run(60)
    records = env.finish()
    jobs = {(r["job_id"], r["source"], r["interval_end"]) for r in job_rows(records)}
    assert ("123", "prolog", None) in jobs
    assert ("999", "cgroup", None) in jobs and ("999", "cgroup", "2027-01-15T08:01:00Z") in jobs
    mism = [r for r in records if r["type"] == "event" and r["event_type"] == "attribution_mismatch"]
    assert len(mism) == 1 and "job 999" in mism[0]["detail"]


def test_mig_instances_map_to_the_right_job(tmp_path):
    cg = {
        501: "0::/system.slice/slurmstepd.scope/job_201/step_0/user/task_0\n",
        502: "0::/system.slice/slurmstepd.scope/job_202/step_0/user/task_0\n",
    }
    env = Env(tmp_path, [{"model": "h100"}, {"model": "h100-mig"}], minors=[0, 1], cgroups=cg)
    fake = env.fake
    fake.nvmlInit()
    parent = fake.nvmlDeviceGetHandleByIndex(1)
    by_gi = {}
    for j in range(4):
        mh = fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, j)
        by_gi[fake.nvmlDeviceGetGpuInstanceId(mh)] = fake.nvmlDeviceGetUUID(mh)
    parent_uuid = fake.nvmlDeviceGetUUID(parent)
    fake.nvmlShutdown()
    fake.gpus[1].processes = [FakeProcess(501, 0, 9, 0), FakeProcess(502, 0, 3, 0)]
    (env.map / "job_201").write_text(f"job_id=201\nstart_time={T0:.0f}\ndevices={by_gi[9]}\n")
    (env.map / "job_202").write_text(f"job_id=202\nstart_time={T0:.0f}\ndevices=1/3/0\n")
    env.run(60)
    records = env.finish()
    got = {(r["job_id"], r["gpu_uuid"], r["mig_instance"]) for r in job_rows(records)}
    assert got == {("201", parent_uuid, by_gi[9]), ("202", parent_uuid, by_gi[3])}
    assert env.agent.attributor.checks == {"agree": 2, "disagree": 0, "no_job": 0, "unmapped_gpu": 0}
    inv = {r["gpu_uuid"]: r["model"] for r in records if r["type"] == "inventory"}
    assert inv[by_gi[9]] == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"


def test_xid_79_becomes_event_and_health_signal(tmp_path, con):
    env = Env(tmp_path, [{"model": "h100", "state": "load", "lost_at": 25}, {"model": "h100"}])
    env.run(30)  # ticks at T0, +10, +20
    env.t[0] = T0 + 21  # the loop waits for events between ticks
    env.agent.wait_events(T0 + 30)  # the fake delivers XID 79 at T0+25
    # /metrics has it before the next sampling round (the real-time alerts wait for no tick)
    before = {d["labels"]["uuid"]: d for d in env.agent.snapshot["devices"]}[env.fake.gpus[0].uuid]
    assert (before["xids"], before["healthy"], env.agent.snapshot["time"]) == ({79: 1}, False, T0 + 20)
    env.run(10)  # tick at T0+30: every call says "GPU is lost"
    lost_uuid = env.fake.gpus[0].uuid
    events = [r for r in env.agent.journal.records if r["type"] == "event"]
    assert [(e["event_type"], e["xid"], e["gpu_uuid"], e["event_time"]) for e in events] == [
        ("xid", 79, lost_uuid, "2027-01-15T08:00:25Z"),
        ("health", None, lost_uuid, "2027-01-15T08:00:25Z"),
        ("gpu_lost", None, lost_uuid, "2027-01-15T08:00:30Z"),
    ]
    assert events[1]["detail"] == "unhealthy: xid 79"
    snap = {d["labels"]["uuid"]: d for d in env.agent.snapshot["devices"]}
    assert snap[lost_uuid]["healthy"] is False and snap[lost_uuid]["lost"] is True
    assert snap[env.fake.gpus[1].uuid]["healthy"] is True
    env.run(60)  # the agent keeps running; the healthy GPU keeps its samples
    env.finish()
    ingest_spool_files(con, load_config(None, env={}), sorted(env.spool.glob("*.jsonl")))
    assert con.execute("SELECT event_type, xid, source FROM gpu_events WHERE xid IS NOT NULL").fetchall() == [
        ("xid", 79, "nvml")
    ]
    per_gpu = dict(con.execute("SELECT gpu_uuid, sum(samples) FROM gpu_samples GROUP BY 1").fetchall())
    assert per_gpu == {lost_uuid: 3, env.fake.gpus[1].uuid: 10}


def test_kernel_log_xid_resumes_from_saved_position_and_dedups(tmp_path):
    kmsg = tmp_path / "kmsg"
    state = tmp_path / "kmsg.json"
    boot = T0 - 1000
    kmsg.write_text(
        "6,10,1000000,-;usb 1-1: new device\n"
        "3,11,995000000,-;NVRM: Xid (PCI:0000:27:00): 79, pid=1, GPU has fallen off the bus.\n"
        " SUBSYSTEM=pci\n"
    )
    env = Env(tmp_path, [{"model": "h100", "count": 2}], kmsg=KmsgReader(kmsg, state, "boot-a", boot))
    env.agent.tick(T0)
    # the same XID also arrives through NVML 2 s later: one event, not two
    env.agent.handle_xid(T0 - 3, env.agent.devices[1], 79, "nvml")
    xids = [r for r in env.agent.journal.records if r["type"] == "event" and r["event_type"] == "xid"]
    assert [(x["gpu_uuid"], x["source"], x["event_time"]) for x in xids] == [
        (env.fake.gpus[1].uuid, "kmsg", "2027-01-15T07:59:55Z")
    ]  # boot + 995 s
    assert env.agent.stats["xid_duplicates"] == 1
    assert json.loads(state.read_text()) == {"boot_id": "boot-a", "seq": 11}
    env.agent.close(T0 + 10)
    # restart: nothing old is read again, a new line is
    with kmsg.open("a") as fh:
        fh.write("3,12,996000000,-;NVRM: Xid (PCI:0000:17:00): 48, pid=1, DBE.\n")
    again = KmsgReader(kmsg, state, "boot-a", boot)
    assert [r.seq for r in again.read()] == [12]
    # after a reboot the whole buffer belongs to the new boot
    assert [r.seq for r in KmsgReader(kmsg, state, "boot-b", boot).read()] == [10, 11, 12]


def test_not_supported_ecc_is_null_not_zero(tmp_path, con):
    env = Env(
        tmp_path,
        [{"model": "h100", "state": "load", "not_supported": ["ecc"]}, {"model": "h100", "state": "load"}],
    )
    env.run(120)
    records = env.finish()
    ingest_spool_files(con, load_config(None, env={}), sorted(env.spool.glob("*.jsonl")))
    got = con.execute(
        "SELECT gpu_index, ecc_corrected_total, ecc_uncorrected_total, ecc_corrected_delta "
        "FROM gpu_samples ORDER BY gpu_index, minute"
    ).fetchall()
    assert got == [(0, None, None, None), (0, None, None, None), (1, 0, 0, 0), (1, 0, 0, 0)]
    assert env.agent.field_errors[(0, "ecc", "NotSupported")] == 2  # one per slow round
    text = b"".join(_metrics_lines(env.agent)).decode()
    ecc = [ln for ln in text.splitlines() if ln.startswith("slurmscope_gpu_ecc_errors_total{")]
    assert sorted(
        (('gpu="0"' in ln), ln.split('type="')[1].split('"')[0], ln.rsplit(" ", 1)[1]) for ln in ecc
    ) == [(False, "corrected", "0.0"), (False, "uncorrected", "0.0")]  # GPU 1 only: GPU 0 has no series
    assert [r for r in records if r["type"] == "sample" and r["gpu_index"] == 0][0]["null_fields"] >= 1


def _metrics_lines(agent):
    from prometheus_client import CollectorRegistry, generate_latest
    from slurmscope.agent.http import _Collector

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(agent))
    return [generate_latest(reg)]


def test_agent_never_dies_on_nvml_errors(tmp_path):
    broken = [f for f in FIELDS if f != "uuid"]
    env = Env(
        tmp_path, [{"model": "h100", "unknown_error": broken}, {"model": "h100", "unknown_error": ["uuid"]}]
    )

    calls = {"n": 0}
    real_init = env.fake.nvmlInit

    def flaky_init():
        calls["n"] += 1
        if calls["n"] == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        real_init()

    env.fake.nvmlInit = flaky_init
    env.run(30)  # init fails; retried after the slow interval
    assert not env.agent.initialized and env.agent.stats["nvml_init_failures"] == 1
    env.run(60)
    assert env.agent.initialized
    env.agent.on_nvml_event(env.t[0], type("E", (), {"eventType": 0, "device": None, "eventData": 0})())
    records = env.finish()
    samples = [r for r in records if r["type"] == "sample"]
    assert samples and all(r["util_gpu_mean"] is None and r["power_mean_watts"] is None for r in samples)
    assert all(r["null_fields"] > 0 for r in samples)
    assert env.agent.field_errors[(0, "utilization", "Unknown")] >= 1
    # a GPU without a readable UUID cannot be keyed: it is reported, not sampled, and nothing crashes
    errs = [r for r in records if r["type"] == "event" and r["event_type"] == "nvml_error"]
    assert len(errs) == 1 and "GPU index 1" in errs[0]["detail"]
    assert {r["gpu_index"] for r in samples} == {0}


def test_minute_aggregation_by_hand():
    agg = MinuteAggregator({"gpu_uuid": "GPU-x"}, interval=10)
    out = []
    # 08:00:00 .. 08:00:50, then 08:01:00 closes the minute
    for i, (util, power, energy, reasons) in enumerate(
        [
            (0, 100, 1_000, 0x1),
            (50, 300, 3_000, 0x4),
            (100, 500, 6_000, 0x4),
            (100, 500, 4_000, 0xC),  # SW power cap and HW slowdown together
            (100, 500, 9_000, 0),
            (100, 500, 10_000, 0),
        ]
    ):
        out += agg.add(
            Reading(time=T0 + 10 * i, util_gpu=util, power_w=power, energy_mj=energy, reasons=reasons)
        )
    assert out == []
    out += agg.add(Reading(time=T0 + 60, util_gpu=0, power_w=80, energy_mj=12_000, reasons=0x1))
    (rec,) = out
    assert rec["minute"] == "2027-01-15T08:00:00Z" and rec["samples"] == 6
    assert rec["util_gpu_mean"] == round(450 / 6, 4) and rec["util_gpu_max"] == 100
    assert rec["power_mean_watts"] == round(2400 / 6, 4) and rec["power_max_watts"] == 500
    # energy deltas: +2000 +3000, reset (6000->4000) counts 0, +5000 +1000 = 11000 mJ
    assert rec["energy_joules"] == 11.0
    # 10 s per sample: at the power cap in three samples (30 s), HW slowdown in one (10 s); only the hardware
    # cause is throttling (NVML nvmlClocksEventReasons: SW power cap = clocks kept under the power limit)
    assert rec["throttle_reasons"] == 0xD
    assert rec["sw_power_cap_seconds"] == 30.0 and rec["hw_slowdown_seconds"] == 10.0
    assert rec["throttle_seconds"] == 10.0
    assert rec["sw_thermal_seconds"] == rec["hw_thermal_seconds"] == rec["hw_power_brake_seconds"] == 0.0
    (nxt,) = agg.flush()
    assert nxt["energy_joules"] == 2.0  # 10000 -> 12000 lands in 08:01
    assert nxt["ecc_corrected_delta"] is None  # never read: unknown, not zero


def test_epilog_done_file_closes_interval_at_its_end_time(tmp_path):
    env = Env(tmp_path, [{"model": "h100", "count": 2}])
    (env.map / "job_5").write_text(f"job_id=5\nstart_time={T0:.0f}\ndevices=1\n")
    env.run(60)
    (env.map / "job_5").rename(env.map / "job_5.done")
    with (env.map / "job_5.done").open("a") as fh:
        fh.write(f"end_time={T0 + 42:.0f}\n")
    # a job that started and ended while the agent was not looking
    (env.map / "job_6.done").write_text(
        f"job_id=6\nstart_time={T0 + 5:.0f}\ndevices=0\nend_time={T0 + 50:.0f}\n"
    )
    env.run(10)
    records = env.finish()
    got = sorted(
        ((r["job_id"], r["interval_start"], r["interval_end"]) for r in job_rows(records)),
        key=lambda x: (x[0], x[1], x[2] or ""),
    )
    assert got == [
        ("5", "2027-01-15T08:00:00Z", None),
        ("5", "2027-01-15T08:00:00Z", "2027-01-15T08:00:42Z"),
        ("6", "2027-01-15T08:00:05Z", "2027-01-15T08:00:50Z"),
    ]
    assert not list(env.map.iterdir())  # recorded, then removed


def test_prolog_and_epilog_scripts(tmp_path):
    gpus = tmp_path / "gpus"
    for bus, minor in (("0000:17:00.0", 1), ("0000:27:00.0", 0)):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(
            f"Model: \t\t NVIDIA H100\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        )
    env_vars = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": "123",
        "SLURM_JOB_GPUS": "0",
        "SLURMSCOPE_MAPPING_DIR": str(tmp_path / "map"),
        "SLURMSCOPE_NVIDIA_PROC": str(gpus),
    }
    subprocess.run(["bash", str(REPO / "collectors" / "slurm_prolog.sh")], env=env_vars, check=True)
    m = parse_mapping((tmp_path / "map" / "job_123").read_text())
    assert (m.job_id, m.devices, m.pci_bus_ids) == ("123", ("0",), ("0000:27:00.0",))
    assert abs(m.start_time - time.time()) < 600
    subprocess.run(["bash", str(REPO / "collectors" / "slurm_epilog.sh")], env=env_vars, check=True)
    done = parse_mapping((tmp_path / "map" / "job_123.done").read_text())
    assert done.end_time is not None and done.end_time >= m.start_time
    # no GPUs, or not a job: exit 0 and write nothing (a failing prolog would drain the node)
    r = subprocess.run(
        ["bash", str(REPO / "collectors" / "slurm_prolog.sh")],
        env={**env_vars, "SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": ""},
        check=False,
    )
    assert r.returncode == 0 and not (tmp_path / "map" / "job_7").exists()


def test_http_metrics_spool_listing_download_and_ack(tmp_path):
    env = Env(tmp_path, [{"model": "h100", "state": "load", "count": 2}], cluster="c7", rotate=3600)
    env.run(3700)  # hourly rotation here: one closed file
    server = start_http(env.agent, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        gpu_lines = [ln for ln in text.splitlines() if ln.startswith("slurmscope_gpu_")]
        assert gpu_lines
        for ln in gpu_lines:
            for label in ('cluster="c7"', "node=", "gpu=", "uuid=", "model=", 'source="agent"'):
                assert label in ln, ln
            assert "job" not in ln.split("}")[0]
        uuid0 = env.fake.gpus[0].uuid
        assert (
            f'slurmscope_gpu_power_watts{{cluster="c7",gpu="0",model="NVIDIA H100 80GB HBM3",node="gpu01",'
            f'source="agent",uuid="{uuid0}"}} 631.95'
        ) in text
        assert (
            f'slurmscope_gpu_utilization_ratio{{cluster="c7",gpu="0",model="NVIDIA H100 80GB HBM3",node="gpu01",'
            f'source="agent",uuid="{uuid0}"}} 1.0'
        ) in text
        assert 'slurmscope_agent_spool_files{cluster="c7",node="gpu01"} 1.0' in text
        listing = json.loads(urllib.request.urlopen(f"{base}/spool", timeout=10).read())
        assert listing["node"] == "gpu01" and [f["name"] for f in listing["files"]] == [
            "gpu01_20270115T080000Z.jsonl"
        ]
        name, sha = listing["files"][0]["name"], listing["files"][0]["sha256"]
        body = urllib.request.urlopen(f"{base}/spool/{name}", timeout=10).read()
        assert read_spool_bytes(body).problem is None
        for bad in ("../etc/passwd", ".journal-x.jsonl"):
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(f"{base}/spool/{bad}", timeout=10)
        req = urllib.request.Request(f"{base}/spool/{name}/ack?sha256={'0' * 64}", method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 409 and (env.spool / name).exists()
        req = urllib.request.Request(f"{base}/spool/{name}/ack?sha256={sha}", method="POST", data=b"")
        assert urllib.request.urlopen(req, timeout=10).read() == b"deleted\n"
        assert not (env.spool / name).exists() and list_spool(env.spool) == []
    finally:
        server.shutdown()
        server.server_close()


def test_journal_recovery_after_torn_write(tmp_path):
    j = SpoolJournal(tmp_path, "gpu01")
    j.open(T0)
    j.append(
        [
            {
                "type": "event",
                "gpu_uuid": "GPU-1",
                "event_time": "2027-01-15T08:00:01Z",
                "event_type": "xid",
                "xid": 13,
            }
        ]
    )
    j._fh.write(b'{"type":"event","gpu_uuid":"GPU-1","event_ti')  # killed mid-line
    j._fh.flush()
    journal = j.path
    assert list_spool(tmp_path) == []  # never listed while open
    assert parse_spool(journal.read_bytes()).problem is not None  # and rejected if handed over anyway
    (path,) = SpoolJournal.recover(tmp_path)
    content = read_spool_bytes(path.read_bytes())
    assert content.problem is None and [r["xid"] for _, r in content.records] == [13]
    assert not journal.exists()


# --------------------------------------------------------------------------------------------------
# a real agent process killed with SIGKILL mid-run
# --------------------------------------------------------------------------------------------------

AGENT = (
    "import sys; from slurmscope.config import load_config; from slurmscope.agent.agent import run_agent; "
    "run_agent(load_config(None, env={}), port=0, spool=sys.argv[1], interval=1, fake=sys.argv[2], "
    "address='127.0.0.1', node='gpu01', kmsg_path=sys.argv[3], flush_seconds=1)"
)


def _start(tmp_path, spec):
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, str(tmp_path / "spool"), str(spec), str(tmp_path / "no-kmsg")],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )


def _wait_for(pred, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _sample_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b'"type":"sample"')
    except OSError:
        return 0


def test_sigkill_mid_write_then_restart_loses_nothing_written(tmp_path, con):
    spool = tmp_path / "spool"
    (tmp_path / "map").mkdir()
    (tmp_path / "map" / "job_1").write_text(f"job_id=1\nstart_time={time.time():.0f}\ndevices=0\n")
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {"gpus": [{"model": "h100", "state": "load", "count": 2}], "mapping_dir": str(tmp_path / "map")}
        )
    )
    a = _start(tmp_path, spec)
    try:

        def journal():
            return next(iter(spool.glob(".journal-*.jsonl")), None)

        assert _wait_for(lambda: journal() is not None and _sample_lines(journal()) >= 6), a.stderr
        a.send_signal(signal.SIGKILL)
    finally:
        a.wait(timeout=30)
    killed_at = time.time()
    jpath = journal()
    raw = jpath.read_bytes()
    # what SIGKILL left: a hidden journal the listing never serves and the loader rejects
    assert [f["name"] for f in list_spool(spool)] == [
        p.name for p in spool.glob("*.jsonl") if p.name[0] != "."
    ]
    assert parse_spool(raw).problem is not None
    assert parse_spool(raw[: len(raw) // 2]).problem is not None
    fsynced = [json.loads(line) for line in raw.split(b"\n")[1:] if line.strip()]
    last_before = max(r["last_sample"] for r in fsynced if r["type"] == "sample")

    b = _start(tmp_path, spec)
    try:
        assert _wait_for(
            lambda: (
                (journal() is not None and journal() != jpath and _sample_lines(journal()) >= 6)
                or len(list(spool.glob("*.jsonl"))) >= 2
            )
        ), b.stderr
        restarted_after = time.time() - killed_at
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=30) == 0
    finally:
        if b.poll() is None:
            b.kill()
    files = sorted(p for p in spool.glob("*.jsonl") if not p.name.startswith("."))
    assert not list(spool.glob(".journal-*")) and len(files) >= 2
    records = []
    for p in files:
        content = read_spool_bytes(p.read_bytes())
        assert content.problem is None
        records += [r for _, r in content.records]
    samples = [r for r in records if r["type"] == "sample"]
    # everything the killed agent had fsynced is in the recovered file
    assert sum(r["samples"] for r in fsynced if r["type"] == "sample") <= sum(
        r["samples"] for r in samples if r["last_sample"] <= last_before
    )
    # the restarted agent picks up where the first stopped: the hole is the restart itself, no more
    first_after = min(r["first_sample"] for r in samples if r["first_sample"] > last_before)
    gap = utc_ts(first_after) - utc_ts(last_before)
    assert gap <= restarted_after + 2.0
    cfg = load_config(None, env={})
    first = ingest_spool_files(con, cfg, files)
    assert all(r.quarantined == 0 and not r.skipped for r in first)
    again = ingest_spool_files(con, cfg, files)
    assert all(r.skipped and r.rows == 0 for r in again)
    total = con.execute("SELECT sum(samples) FROM gpu_samples").fetchone()[0]
    assert total == sum(r["samples"] for r in samples)
    minutes = [m[0] for m in con.execute("SELECT DISTINCT minute FROM gpu_samples ORDER BY 1").fetchall()]
    assert all((b - a).total_seconds() == 60 for a, b in zip(minutes, minutes[1:], strict=False))
    assert con.execute("SELECT count(*) FROM gpu_jobs WHERE job_id = '1'").fetchone()[0] == 1


def utc_ts(text: str) -> float:
    from slurmscope.spool import parse_iso

    return parse_iso(text).timestamp()


def test_utc_helper():
    assert utc(T0).isoformat() == "2027-01-15T08:00:00+00:00"


def test_old_driver_without_clocks_event_reasons_falls_back(tmp_path):
    """Drivers before R535 lack nvmlDeviceGetCurrentClocksEventReasons (NVML says FunctionNotFound)."""
    env = Env(tmp_path, [{"model": "h100", "state": "idle"}])
    fake = env.fake

    def missing(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    fake.nvmlDeviceGetCurrentClocksEventReasons = missing
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x4  # SW power cap
    env.run(60)
    (rec,) = [r for r in env.finish() if r["type"] == "sample"]
    assert rec["throttle_reasons"] == 0x4 and rec["sw_power_cap_seconds"] == 60.0
    assert rec["throttle_seconds"] == 0.0  # at the power cap is not throttled


def test_a_completed_minute_is_in_a_closed_spool_file_by_the_next_round(tmp_path):
    """The central store can only be as fresh as the newest closed file: with the default one-minute
    segments, the round that completes a minute also closes the file holding it (not an hour later)."""
    env = Env(tmp_path, [{"model": "h100", "state": "load"}])
    env.run(60)  # rounds at +0 .. +50 s: minute 0 still open
    assert list_spool(env.spool) == []
    env.run(10)  # the +60 s round completes minute 0 and closes its segment
    (listed,) = list_spool(env.spool)
    parsed = read_spool_bytes((env.spool / listed["name"]).read_bytes())
    assert parsed.problem is None
    minutes = [r["minute"] for _, r in parsed.records if r["type"] == "sample"]
    assert minutes == ["2027-01-15T08:00:00Z"]
    env.run(600)
    assert len(list_spool(env.spool)) == 11  # one closed segment per completed minute
    inventories = [
        r
        for f in list_spool(env.spool)
        for _, r in read_spool_bytes((env.spool / f["name"]).read_bytes()).records
        if r["type"] == "inventory"
    ]
    assert len(inventories) == 1  # once per hour, not once per segment
