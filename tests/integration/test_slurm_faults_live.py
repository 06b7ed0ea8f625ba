"""Faults on the real Slurm test bed (issue 9): sacct hanging past its timeout, sacct printing garbage, a
slurmctld restart and a slurmdbd outage under the running scheduler.

Each fault must be recorded in collector_runs, leave the sacct watermark and the stored rows alone, show
in the exporter (collector_success 0, last_success unchanged; the stale alert would fire, checked with
promtool on the rendered values), and collection must resume by itself once Slurm is back, with every job
the workload driver submitted in the jobs table. Expected values come from the driver's own record (what
it submitted, the states it saw with squeue), from the bytes the fault wrappers printed, and from Slurm's
own sdiag, never from the database under test.

The module has its own database and config (the session's live.duckdb is left alone) and collects in
process, through collectors/collect.py and the scheduler `slurmscope serve` runs (slurmscope/scheduler.py).
"""

from __future__ import annotations

import math
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from slurmscope.alerts.build import DEFAULT_RUNBOOK_BASE
from slurmscope.alerts.rules import ALERTS
from slurmscope.collectors.base import Outcome
from slurmscope.collectors.collect import collect
from slurmscope.collectors.sacct import LIVE_FIELDS
from slurmscope.pipelines.backfill import DELTA_COUNTERS, sched_deltas
from slurmscope.pipelines.runner import Window, pipeline_params

from slurmscope.config import Config, load_config
from slurmscope.db import connect
from slurmscope.exporter import render
from slurmscope.scheduler import Service, build_scheduler

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "slurmscope.rules.yaml"
US = b"\x1f"
N_FIELDS = len(LIVE_FIELDS.split(","))


@dataclass
class Rig:
    bed: object
    cfg: Config
    db: Path
    tmp: Path
    driver: object  # tests/slurmbed/workload.py Workload: its poller keeps the driver's view of every job
    submitted: list[str] = field(default_factory=list)

    def collect(self, kind: str, cfg: Config | None = None) -> list[Outcome]:
        con = connect(self.db)
        try:
            return collect(con, cfg or self.cfg, kind)
        finally:
            con.close()

    def query(self, sql: str, params: list | None = None) -> list[tuple]:
        con = connect(self.db)
        try:
            return con.execute(sql, params or []).fetchall()
        finally:
            con.close()

    def watermark(self, q: Callable[..., list[tuple]] | None = None) -> datetime | None:
        """The sacct watermark; `q` reads through the scheduler's lock while it runs."""
        rows = (q or self.query)("SELECT position FROM watermarks WHERE collector = 'sacct'")
        return rows[0][0] if rows else None

    def jobs(self) -> set[tuple]:
        return set(self.query("SELECT job_id_raw, submit_time, state, elapsed_seconds FROM jobs"))

    def last_run_id(self) -> int:
        return self.query("SELECT coalesce(max(run_id), 0) FROM collector_runs")[0][0]

    def runs_since(self, run_id: int, collector: str) -> list[tuple]:
        return self.query(
            "SELECT status, rows, quarantined, error FROM collector_runs WHERE run_id > ? "
            "AND collector = ? ORDER BY run_id",
            [run_id, collector],
        )

    def submit(self, name: str, seconds: int) -> str:
        """A one-CPU job on the cpu partition as sbdave, recorded by the driver."""
        jid = self.driver.submit(
            name,
            "sbdave",
            ["--partition=cpu", "-c", "1", "-t", "2"],
            first=seconds,
            expect={"final_state": "COMPLETED", "attempts": 1},
        )
        self.submitted.append(jid)
        return jid

    def wait_completed(self, jids: list[str], timeout: float = 120) -> None:
        for jid in jids:
            self.driver.poller.wait_for(jid, lambda s: s == "COMPLETED", "COMPLETED", timeout)


@pytest.fixture(scope="module")
def rig(slurmbed, tmp_path_factory):
    bed = slurmbed
    tmp = tmp_path_factory.mktemp("faults")
    cfg = load_config(bed.config, env={}).with_overrides(
        database={"path": str(tmp / "faults.duckdb")}, slurm={"timeout_seconds": 20.0}
    )
    with pytest.MonkeyPatch.context() as mp:
        for k, v in bed.env().items():  # SLURM_CONF for the in-process collectors
            mp.setenv(k, v)
        driver = bed.workload.Workload()
        driver.poller.start()
        r = Rig(bed, cfg, tmp / "faults.duckdb", tmp, driver)
        first = [r.submit(f"fault-base-{i}", 2) for i in range(2)]
        r.wait_completed(first)
        _wait_until(lambda: _sacct_has(r, first), "sacct to know the first jobs", 60)
        for kind in ("sinfo", "squeue", "sdiag", "sacct"):
            [out] = r.collect(kind)
            assert out.status == "ok", out
        try:
            yield r
        finally:
            driver.poller.stop_evt.set()


def _wait_until(pred: Callable[[], bool], what: str, timeout: float, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def _sacct_has(rig: Rig, jids: list[str]) -> bool:
    """Slurm's accounting has the whole record of each job, as the driver ran it.

    After a slurmdbd outage the records arrive in pieces: sacct showed COMPLETED with End `Unknown` for
    ~9 s, and once JobName `allocation` with no Partition, before the full record. Judging the collector
    before that would judge Slurm.
    """
    r = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State,JobName,Partition,End", "-j", ",".join(jids)],
        env=rig.bed.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if r.returncode != 0:
        return False
    by_id = {j["job_id"]: j for j in rig.driver.jobs.values()}
    got = {f[0]: f[1:] for f in (line.split("|") for line in r.stdout.splitlines()) if len(f) == 5}
    return set(got) == set(jids) and all(
        got[j][:3] == [by_id[j]["final_state"], by_id[j]["name"], by_id[j]["partition"]]
        and got[j][3] != "Unknown"
        for j in jids
    )


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a killed child not yet reaped has done its harm)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] != "Z"


def _group_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(d.name))
    return out


def _scrape(rig: Rig, now: datetime) -> dict[tuple[str, str], float]:
    """(metric, collector) -> value of the two collector health gauges in the rendered /metrics."""
    con = connect(rig.db)
    try:
        body = render(con, rig.cfg, now).decode()
    finally:
        con.close()
    return _health(body)


def _health(body: str) -> dict[tuple[str, str], float]:
    """(metric, collector) for the collector gauges, (metric, role) for slurmscope_controller_up."""
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            if s.name in (
                "slurmscope_collector_success",
                "slurmscope_collector_last_success_timestamp_seconds",
            ):
                out[(s.name, s.labels["collector"])] = s.value
            elif s.name == CTLD_UP:
                out[(s.name, s.labels["role"])] = s.value
    return out


SUCCESS = "slurmscope_collector_success"
CTLD_UP = "slurmscope_controller_up"
LAST_OK = "slurmscope_collector_last_success_timestamp_seconds"


def _humanize_duration(seconds: float) -> str:
    """Prometheus' humanizeDuration for 1 min <= v < 1 day: whole seconds, truncated."""
    v = int(seconds)
    h, m, s = v // 3600, v // 60 % 60, v % 60
    return f"{h}h {m}m {s}s" if h else f"{m}m {s}s"


def _promtool_would_fire(rig: Rig, collector: str, failed_at: datetime) -> None:
    """Scrape the exporter every 10 minutes for 40 minutes after the failure (the database frozen, as
    when every later run fails too), replay the samples once a minute in promtool (each minute repeats
    the latest render) and check both collector alerts fire when their expressions and `for:` say, with
    the rendered labels and values."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    origin = math.ceil(failed_at.timestamp())  # promtool's time 0: the failed run is already recorded
    success, last = [], []
    for minute in range(41):
        if minute % 10 == 0:
            h = _scrape(rig, datetime.fromtimestamp(origin + 60 * minute, UTC))
        success.append(h[(SUCCESS, collector)])
        last.append(round(h[(LAST_OK, collector)] - origin, 3))
    assert set(success) == {0.0} and len(set(last)) == 1 and last[0] < 0  # last success is before the failure
    stale = next(a for a in ALERTS if a.name == "SlurmscopeCollectorStale")
    failing = next(a for a in ALERTS if a.name == "SlurmscopeCollectorFailing")
    threshold = next(  # the limit of the collector's interval class
        float(m.group(2))
        for m in re.finditer(r'collector=~"([^"]+)"\} > (\d+)', stale.expr)
        if collector in m.group(1).split("|")
    )
    for_min = {a.name: int(a.for_.rstrip("m")) for a in (stale, failing)}
    v = last[0]
    # time() - v > threshold from the first whole minute m0 past it; the alert fires `for:` later.
    m0 = math.floor((threshold + v) / 60) + 1
    fire_stale = m0 + for_min[stale.name]
    fire_failing = for_min[failing.name]  # failing from the first sample
    assert fire_stale <= 40
    labels = {"cluster": rig.cfg.cluster, "collector": collector}
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items())

    def expected(alert, at_min: int, description: str) -> dict:
        return {
            "exp_labels": {"severity": alert.severity, **labels},
            "exp_annotations": {
                "summary": alert.summary,
                "description": description,
                "runbook_url": f"{DEFAULT_RUNBOOK_BASE}{alert.name}.md",
            },
        }

    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"{SUCCESS}{{{sel}}}", "values": " ".join(f"{x:g}" for x in success)},
                    {"series": f"{LAST_OK}{{{sel}}}", "values": " ".join(repr(x) for x in last)},
                ],
                "alert_rule_test": [
                    {"eval_time": f"{fire_stale - 1}m", "alertname": stale.name, "exp_alerts": []},
                    {
                        "eval_time": f"{fire_stale}m",
                        "alertname": stale.name,
                        "exp_alerts": [
                            expected(
                                stale,
                                fire_stale,
                                f"Collector {collector} of cluster {rig.cfg.cluster} last succeeded "
                                f"{_humanize_duration(60 * fire_stale - v)} ago.",
                            )
                        ],
                    },
                    {"eval_time": f"{fire_failing - 1}m", "alertname": failing.name, "exp_alerts": []},
                    {
                        "eval_time": f"{fire_failing}m",
                        "alertname": failing.name,
                        "exp_alerts": [
                            expected(
                                failing,
                                fire_failing,
                                f"The last run of collector {collector} of cluster {rig.cfg.cluster} "
                                f"failed, and it has not succeeded for {failing.for_}.",
                            )
                        ],
                    },
                ],
            }
        ],
    }
    path = rig.tmp / f"alert-{collector}.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    res = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


# --------------------------------------------------------------------------------------- sacct hangs


def test_hanging_sacct_is_killed_recorded_and_keeps_the_watermark(rig):
    real = rig.cfg.slurm_command("sacct")
    pidfile, childfile = rig.tmp / "hang.pid", rig.tmp / "hang-child.pid"
    # Sleeps (in a background child, which a kill of the wrapper alone would leave behind), then execs sacct.
    wrapper = _script(
        rig.tmp / "sacct-hang",
        f"""#!/bin/sh
echo $$ > {pidfile}
sleep 300 &
echo $! > {childfile}
wait
exec {real} "$@"
""",
    )
    cfg = rig.cfg.with_overrides(slurm={"sacct": str(wrapper), "timeout_seconds": 3.0})
    wm, jobs, run0 = rig.watermark(), rig.jobs(), rig.last_run_id()
    before = _scrape(rig, datetime.now(UTC))
    assert before[(SUCCESS, "sacct")] == 1.0
    [out] = rig.collect("sacct", cfg)
    failed_at = datetime.now(UTC)
    assert out.status == "timeout" and out.rows == 0
    [(status, rows, _q, error)] = rig.runs_since(run0, "sacct")
    assert status == "timeout" and "timed out after 3 s" in error and str(wrapper) in error
    assert rig.watermark() == wm and rig.jobs() == jobs
    # the hung command was killed with its whole process group: no orphan left behind
    pid, child = int(pidfile.read_text()), int(childfile.read_text())
    assert not _alive(pid) and not _alive(child)
    assert _group_members(pid) == []
    # the exporter says so: failing, last success unchanged, and both alerts would fire
    after = _scrape(rig, datetime.now(UTC))
    assert after[(SUCCESS, "sacct")] == 0.0
    assert after[(LAST_OK, "sacct")] == before[(LAST_OK, "sacct")]
    _promtool_would_fire(rig, "sacct", failed_at)
    # the next run with the real sacct resumes from the kept watermark
    [ok] = rig.collect("sacct")
    assert ok.status == "ok" and rig.watermark() > wm
    assert _scrape(rig, datetime.now(UTC))[(SUCCESS, "sacct")] == 1.0


# ------------------------------------------------------------------------------------- sacct garbage


GARBAGE_WRAPPER = """#!/usr/bin/python3
import os, random, subprocess, sys
mode, real, log = sys.argv[1], sys.argv[2], sys.argv[3]
args = sys.argv[4:]
if mode == "random":
    rnd = random.Random(int(os.environ.get("GARBAGE_SEED", "7")))
    out = bytes(rnd.randrange(256) for _ in range(6000)) + b"\\n"
else:
    out = subprocess.run([real, *args], capture_output=True, check=True).stdout
    if any(a.startswith("--starttime=") for a in args):
        lines = out.split(b"\\n")
        head, recs, tail = lines[:1], [x for x in lines[1:] if x], []
        if mode == "truncate":  # keep a third of the records, cut the rest in the middle of their fields
            k = len(recs) // 3
            recs = recs[:k] + [x[: len(x) // 2] for x in recs[k:]]
        elif mode == "one-bad":  # one record cut short among good ones
            recs = recs[:-1] + [recs[-1][: len(recs[-1]) // 2]]
        out = b"\\n".join(head + recs) + b"\\n"
with open(log, "ab") as fh:
    fh.write(len(out).to_bytes(8, "big") + out)
sys.stdout.buffer.write(out)
"""


def _garbage_cfg(rig: Rig, mode: str) -> tuple[Config, Path]:
    body = _script(rig.tmp / "sacct-garbage.py", GARBAGE_WRAPPER)
    log = rig.tmp / f"printed-{mode}.bin"
    log.unlink(missing_ok=True)
    # slurm.sacct is one path: a tiny sh shim passes the mode, the real sacct and the log to the python body.
    shim = _script(
        rig.tmp / f"sacct-{mode}",
        f'#!/bin/sh\nexec {body} {mode} {rig.cfg.slurm_command("sacct")} {log} "$@"\n',
    )
    return rig.cfg.with_overrides(slurm={"sacct": str(shim)}), log


def _printed(log: Path) -> list[bytes]:
    data, out = log.read_bytes(), []
    while data:
        n = int.from_bytes(data[:8], "big")
        out.append(data[8 : 8 + n])
        data = data[8 + n :]
    return out


def _record_lines(out: bytes) -> list[bytes]:
    return [x for x in out.split(b"\n")[1:] if x.strip(b" \t\r")]


def test_random_bytes_from_sacct_are_quarantined_and_keep_the_watermark(rig):
    cfg, log = _garbage_cfg(rig, "random")
    wm, jobs, run0 = rig.watermark(), rig.jobs(), rig.last_run_id()
    q0 = rig.query("SELECT count(*) FROM quarantine")[0][0]
    last_ok = _scrape(rig, datetime.now(UTC))[(LAST_OK, "sacct")]
    [out] = rig.collect("sacct", cfg)
    [printed] = _printed(log)
    n_lines = len([x for x in printed.split(b"\n") if x.strip(b" \t\r")])
    assert n_lines > 10
    assert out.status == "error" and "mostly garbage" in out.error
    [(status, rows, quarantined, error)] = rig.runs_since(run0, "sacct")
    assert (status, rows, quarantined) == ("error", 0, n_lines) and "watermark kept" in error
    reasons = rig.query("SELECT reason FROM quarantine ORDER BY line_no")
    assert len(reasons) - q0 == n_lines and all(r for (r,) in reasons)
    assert rig.watermark() == wm and rig.jobs() == jobs
    h = _scrape(rig, datetime.now(UTC))
    assert h[(SUCCESS, "sacct")] == 0.0 and h[(LAST_OK, "sacct")] == last_ok


def test_truncated_sacct_lines_keep_the_good_ones_and_the_watermark(rig):
    new = [rig.submit(f"fault-trunc-{i}", 1) for i in range(3)]
    rig.wait_completed(new)
    _wait_until(lambda: _sacct_has(rig, new), "sacct to know the new jobs", 60)
    cfg, log = _garbage_cfg(rig, "truncate")
    wm, run0 = rig.watermark(), rig.last_run_id()
    [out] = rig.collect("sacct", cfg)
    [printed] = _printed(log)  # the window call only: a failed window stops the run before the by-id call
    recs = _record_lines(printed)
    good = [x for x in recs if x.count(US) == N_FIELDS - 1]
    cut = [x for x in recs if x.count(US) != N_FIELDS - 1]
    assert good and len(cut) >= len(good)
    assert out.status == "error" and "mostly garbage" in out.error
    [(status, rows, quarantined, _err)] = rig.runs_since(run0, "sacct")
    # every line is stored or quarantined; at least the cut ones are quarantined (steps whose allocation
    # line was cut are too), and the watermark stays
    assert status == "error" and rows + quarantined == len(recs) and quarantined >= len(cut)
    assert rig.watermark() == wm
    # nothing good is lost: every intact allocation line's attempt is stored with the state sacct printed
    stored = {(r[0], r[1]) for r in rig.query("SELECT job_id_raw, state FROM jobs")}
    for line in good:
        f = line.decode().split("\x1f")
        if "." not in f[0]:  # JobID without a step suffix: an allocation line
            assert (int(f[1]), f[14].split()[0]) in stored, f[:3]
    # one bad line among good ones is quarantined and the watermark moves on
    cfg1, log1 = _garbage_cfg(rig, "one-bad")
    run1 = rig.last_run_id()
    [out1] = rig.collect("sacct", cfg1)
    assert out1.status == "ok", out1
    window = _record_lines(_printed(log1)[0])
    assert sum(1 for x in window if x.count(US) != N_FIELDS - 1) == 1
    first = rig.runs_since(run1, "sacct")[0]
    assert first[0] == "ok" and first[2] >= 1 and first[1] + first[2] == len(window)
    assert rig.watermark() > wm
    # and the real sacct heals the rest: every job the driver submitted so far, in its final state
    [ok] = rig.collect("sacct")
    assert ok.status == "ok"
    _assert_driver_jobs_stored(rig)


def _assert_driver_jobs_stored(rig: Rig) -> None:
    with rig.driver.poller.lock:
        seen = dict(rig.driver.poller.states)
    stored = rig.query(
        'SELECT job_id, state, "user", account, partition, name FROM jobs WHERE cluster = ?',
        [rig.cfg.cluster],
    )
    by_id = {j["job_id"]: j for j in rig.driver.jobs.values()}
    assert set(rig.submitted) == set(by_id)
    mine = [r for r in stored if r[0] in by_id]
    rows = {r[0]: r[1:] for r in mine}
    assert len(mine) == len(rows), "an attempt stored twice"  # each ran once: none doubled
    for jid, j in by_id.items():
        assert seen.get(jid) == j["final_state"], (j["name"], seen.get(jid))  # what the driver saw
        assert rows.get(jid) == (j["final_state"], j["user"], j["account"], j["partition"], j["name"]), j[
            "name"
        ]


# ------------------------------------------------- slurmctld restart and slurmdbd outage under `serve`


INTERVALS = {"sinfo": 3, "squeue": 3, "sdiag": 3, "ping": 3, "sacct": 4}


def test_scheduler_rides_out_a_slurmctld_restart_and_a_slurmdbd_outage(rig):
    bed, cluster = rig.bed, rig.bed.cluster
    # With slurmctld down, sinfo/squeue/sdiag hang retrying rather than fail: the timeout cuts them.
    cfg = rig.cfg.with_overrides(slurm={"timeout_seconds": 5.0})
    service = Service(config=cfg, db_path=str(rig.db))
    sched = build_scheduler(service, INTERVALS)

    def q(sql: str, params: list | None = None) -> list[tuple]:
        return service.with_db(lambda con: con.execute(sql, params or []).fetchall())

    def statuses_since(t: datetime, kinds: tuple[str, ...]) -> dict[str, set[str]]:
        rows = q(
            "SELECT collector, status FROM collector_runs WHERE started_at >= ? AND collector IN "
            f"({', '.join('?' * len(kinds))})",
            [t, *kinds],
        )
        out: dict[str, set[str]] = {k: set() for k in kinds}
        for c, s in rows:
            out[c].add(s)
        return out

    def all_have(t: datetime, kinds: tuple[str, ...], ok: bool) -> Callable[[], bool]:
        """Every kind has a run since t that succeeded (ok) or failed (error or timeout)."""
        return lambda: all(("ok" in s) if ok else bool(s - {"ok"}) for s in statuses_since(t, kinds).values())

    ctl_kinds = ("sinfo", "squeue", "sdiag")
    sdiag_before = _sdiag(bed)
    metrics_down: dict = {}
    sched.start()
    try:
        batch_a = [rig.submit(f"fault-ctld-{i}", 8) for i in range(4)]
        for jid in batch_a:
            rig.driver.running(jid, 60)
        # slurmctld stops with jobs running; the controller collectors fail until it is back
        wm_before_ctld = rig.watermark(q)
        rig.driver.note("stop slurmctld")
        t_down = datetime.now(UTC)
        cluster.stop_one("slurmctld")
        _wait_until(all_have(t_down, ctl_kinds, ok=False), "sinfo, squeue and sdiag to fail", 90)
        _wait_until(
            lambda: (
                q("SELECT count(*) FROM controller_pings WHERE NOT up AND snapshot_time >= ?", [t_down])[0][0]
                > 0
            ),
            "scontrol ping to report the controller DOWN",
            30,
        )
        metrics_down = _health(service.metrics.decode())
        rig.driver.note("start slurmctld")
        t_up = datetime.now(UTC)
        cluster.start_slurmctld()
        _wait_until(all_have(t_up, ctl_kinds, ok=True), "sinfo, squeue and sdiag to succeed again", 90)
        rig.wait_completed(batch_a)
        # slurmdbd stops; jobs run meanwhile; sacct fails until it is back
        rig.driver.note("stop slurmdbd")
        t_dbd = datetime.now(UTC)
        cluster.stop_one("slurmdbd")
        batch_c = [rig.submit(f"fault-dbd-{i}", 2) for i in range(2)]
        _wait_until(all_have(t_dbd, ("sacct",), ok=False), "sacct to fail", 60)
        wm_during_dbd = rig.watermark(q)
        dbd_errors = q(
            "SELECT error FROM collector_runs WHERE collector = 'sacct' AND started_at >= ? "
            "AND status <> 'ok'",
            [t_dbd],
        )
        sacct_metrics_down = _health(service.metrics.decode())
        rig.wait_completed(batch_c)
        rig.driver.note("start slurmdbd")
        t_dbd_up = datetime.now(UTC)
        cluster.start_slurmdbd()
        everything = [*rig.submitted]
        _wait_until(lambda: _sacct_has(rig, everything), "sacct to know every job", 120)
        rig.driver.note("sacct knows every job")
        t_known = datetime.now(UTC)
        # no intervention from here: the scheduler's next sacct run must pick everything up
        _wait_until(all_have(t_known, ("sacct",), ok=True), "a sacct run after recovery", 60)
        metrics_up = _health(service.metrics.decode())
        rig.driver.note("collected after recovery")
    finally:
        sched.shutdown(wait=True)
    sdiag_after = _sdiag(bed)

    # while slurmctld was down: each controller collector recorded a failure with the reason
    errs = rig.query(
        "SELECT collector, error FROM collector_runs WHERE started_at >= ? AND started_at < ? "
        "AND status <> 'ok'",
        [t_down, t_up],
    )
    for kind in ctl_kinds:
        assert any(c == kind and e for c, e in errs), (kind, errs)
    for kind in ctl_kinds:
        assert metrics_down[(SUCCESS, kind)] == 0.0, kind
        assert metrics_up[(SUCCESS, kind)] == 1.0, kind
    # scontrol ping answered (exit 1, "... is DOWN"): the exporter says the controller is down, then up
    assert metrics_down[(CTLD_UP, "primary")] == 0.0 and metrics_up[(CTLD_UP, "primary")] == 1.0
    # the dbd outage: recorded, watermark held, exporter failing, then healed
    assert dbd_errors and all(e for (e,) in dbd_errors)
    assert wm_before_ctld is not None and wm_during_dbd is not None
    # the watermark during the outage is still the end of the last good window before the first failure
    first_fail = rig.query(
        "SELECT min(run_id) FROM collector_runs WHERE collector = 'sacct' AND status <> 'ok' "
        "AND started_at >= ?",
        [t_dbd],
    )[0][0]
    last_good_end = rig.query(
        "SELECT max(window_end) FROM collector_runs WHERE collector = 'sacct' "
        "AND status = 'ok' AND run_id < ?",
        [first_fail],
    )[0][0]
    assert wm_during_dbd == last_good_end
    held = rig.query(
        "SELECT count(*) FROM collector_runs WHERE collector = 'sacct' AND status <> 'ok' "
        "AND started_at >= ? AND started_at < ?",
        [t_dbd, t_dbd_up],
    )[0][0]
    assert held >= 1
    assert sacct_metrics_down[(SUCCESS, "sacct")] == 0.0 and metrics_up[(SUCCESS, "sacct")] == 1.0
    assert rig.watermark() > wm_during_dbd
    # no gap: every job the driver submitted in this module is stored, in the state the driver saw
    _assert_driver_jobs_stored(rig)

    # sdiag: Slurm's own counters really reset on the restart ...
    # (without the restart it would read its earlier value plus batches A and C; with it, batch C only)
    assert sdiag_after["Jobs submitted"] == len(batch_c)
    assert sdiag_before["Jobs submitted"] >= len(rig.submitted) - len(batch_a) - len(batch_c)
    assert sdiag_after["Data since"] != sdiag_before["Data since"]
    # ... the stored snapshots show the drop, and the reset-aware deltas never go negative
    con = connect(rig.db)
    try:
        stats = pl.from_arrow(
            con.sql(
                "SELECT * FROM sched_stats WHERE cluster = $c ORDER BY snapshot_time",
                params={"c": rig.cfg.cluster},
            ).to_arrow_table()
        )
    finally:
        con.close()
    naive = stats.select(pl.col("jobs_submitted").diff()).to_series().drop_nulls()
    assert naive.min() < 0, "no sdiag snapshot on both sides of the restart"
    first = stats["snapshot_time"].min()
    window = Window(first, datetime.now(UTC), False)
    deltas = sched_deltas(stats.lazy(), pipeline_params(rig.cfg, window)).collect()
    assert deltas["reset"].sum() >= 1
    for col in DELTA_COUNTERS:
        values = deltas[col].drop_nulls()
        assert values.min() >= 0, (col, deltas.select("snapshot_time", "reset", col))
    # summed deltas after the restart count what the new slurmctld saw: batch C was submitted to it
    after_reset = deltas.filter(pl.col("snapshot_time") > t_up)["jobs_submitted"].drop_nulls().sum()
    assert after_reset == len(batch_c)


def _sdiag(bed) -> dict[str, str]:
    out = {}
    for line in bed.slurm("sdiag").splitlines():
        if line.startswith("Data since"):  # `Data since      Wed Dec 02 13:56:59 2026 (1796219819)`, no colon
            out["Data since"] = line.removeprefix("Data since").strip()
        k, sep, v = line.partition(":")
        if sep and k.strip() not in out:
            out[k.strip()] = v.strip()
    out["Jobs submitted"] = int(out["Jobs submitted"])
    return out
