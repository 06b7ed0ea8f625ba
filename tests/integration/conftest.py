"""The live Slurm test bed, started once per session and shared by every integration test.

Phases run in dependency order, each a session fixture, so that a single selected test still gets
everything it needs:

1. `slurmbed`: a fresh private cluster (tests/slurmbed/cluster.py), stopped at the end of the session.
2. `live`: the workload (tests/slurmbed/workload.py) with `slurmscope collect all --once` in the middle
   of it and again after the last job ended.
3. `fault`: slurmdbd stopped, a job run meanwhile, a collect that must fail, slurmdbd back, a collect
   that must recover.
4. `fairshare`: one PriorityCalcPeriod after the last job, `sshare -a -l -P` and sacct side by side.

Skips (with the reason) when not root or when Debian's Slurm packages are missing. The captures of every
live command are written to a temporary folder, or to tests/fixtures/slurm-22.05/ when
SLURMBED_UPDATE_FIXTURES=1 (that is how the committed real fixtures are regenerated); a comma-separated
list of kinds instead (`SLURMBED_UPDATE_FIXTURES=sinfo`) regenerates only those kinds' files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import pytest

SLURMBED = Path(__file__).resolve().parents[1] / "slurmbed"
FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-22.05"
CALC_PERIOD_SECONDS = 60  # PriorityCalcPeriod=1 (minutes) in cluster.py


def _bed_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    if str(SLURMBED) not in sys.path:
        sys.path.insert(0, str(SLURMBED))
    import capture  # noqa: PLC0415
    import cluster  # noqa: PLC0415
    import workload  # noqa: PLC0415

    return cluster, workload, capture


@dataclass
class CollectRun:
    returncode: int
    stderr: str
    at: datetime


@dataclass
class Bed:
    """Handle on the running cluster and the test database the CLI writes to."""

    cluster: ModuleType
    workload: ModuleType
    capture: ModuleType
    workdir: Path
    config: Path
    db: Path
    captures: Path
    collects: list[CollectRun] = field(default_factory=list)
    fixture_kinds: frozenset[str] = frozenset()  # kinds whose captures also go to FIXTURE_DIR

    def publish(self, kind: str, tag: str) -> None:
        """Copy `<kind>_<tag>.txt` and `.argv` into the committed fixtures when SLURMBED_UPDATE_FIXTURES names the kind."""
        if kind not in self.fixture_kinds or self.captures == FIXTURE_DIR:
            return
        for suffix in (".txt", ".argv"):
            shutil.copyfile(self.captures / f"{kind}_{tag}{suffix}", FIXTURE_DIR / f"{kind}_{tag}{suffix}")

    def env(self) -> dict[str, str]:
        return self.cluster.env()

    def collect(self, kind: str = "all") -> CollectRun:
        """`slurmscope collect <kind> --once` as a user runs it (a separate process, the real CLI)."""
        at = datetime.now(UTC)
        argv = [
            sys.executable,
            "-c",
            "from slurmscope.cli import main; main()",
            "--config",
            str(self.config),
            "--db",
            str(self.db),
            "collect",
            kind,
            "--once",
        ]
        r = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=300, check=False)
        run = CollectRun(r.returncode, r.stderr, at)
        self.collects.append(run)
        return run

    def query(self, sql: str, params: list[Any] | None = None) -> list[tuple]:
        """Read the test database; the connection is closed at once so that the next collect can write."""
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            return con.execute(sql, params or []).fetchall()
        finally:
            con.close()

    def slurm(self, *argv: str) -> str:
        r = subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True, timeout=60, check=False
        )
        if r.returncode != 0:
            raise RuntimeError(f"{argv}: exit {r.returncode}: {r.stderr.strip()}")
        return r.stdout


@pytest.fixture(scope="session")
def slurmbed(tmp_path_factory: pytest.TempPathFactory):
    cluster, workload, capture = _bed_modules()
    why = cluster.missing_requirements()
    if why:
        pytest.skip("Slurm test bed unavailable: " + "; ".join(why))
    # One session at a time: a second one would stop and wipe the cluster under the first.
    wait = float(os.environ.get("SLURMBED_LOCK_WAIT", "900"))
    lock = cluster.acquire_lock(wait)
    if lock is None:
        pytest.skip(f"another test session held the Slurm test bed for {wait:g} s (SLURMBED_LOCK_WAIT)")
    cluster.stop()
    shutil.rmtree(cluster.BED, ignore_errors=True)  # fresh accounting database: expectations start at zero
    try:
        cluster.start()
    except Exception as exc:  # a broken bed is a failure, with the daemons' logs to read
        logs = cluster.P["log"]
        tails = []
        for f in sorted(logs.glob("*.log")) if logs.exists() else []:
            tails.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        cluster.stop()
        lock.close()
        pytest.fail(f"slurmbed failed to start: {exc}\n" + "\n".join(tails), pytrace=False)
    work = tmp_path_factory.mktemp("slurmbed")
    config = work / "slurmscope.toml"
    config.write_text(
        f'[cluster]\nname = "{cluster.CLUSTER}"\ntimezone = "UTC"\n\n'
        f'[slurm]\nbin_dir = "{Path(shutil.which("sacct") or "/usr/bin/sacct").parent}"\ntimeout_seconds = 30.0\n\n'
        "[collect]\nsacct_initial_lookback_seconds = 86400\nsacct_overlap_seconds = 3600\n"
    )
    update = os.environ.get("SLURMBED_UPDATE_FIXTURES", "")
    captures = FIXTURE_DIR if update == "1" else work / "captures"
    kinds = frozenset(k.strip() for k in update.split(",") if k.strip() and update != "1")
    bed = Bed(cluster, workload, capture, work, config, work / "live.duckdb", captures, fixture_kinds=kinds)
    try:
        yield bed
    finally:
        if os.environ.get("SLURMBED_KEEP") != "1":
            cluster.stop()
        lock.close()


@dataclass
class Live:
    record: dict
    mid_collect: CollectRun
    final_collect: CollectRun
    mid_jobs: list[tuple]  # (job_id, job_id_raw, submit_time, state) after the mid-workload collect
    mid_job_states: dict[str, str]  # the driver's squeue view at the mid collect


@pytest.fixture(scope="session")
def live(slurmbed: Bed) -> Live:
    bed = slurmbed
    mid: dict[str, Any] = {}
    driver = bed.workload.Workload()

    def at_mid() -> None:
        with driver.poller.lock:
            mid["states"] = dict(driver.poller.states)
        mid["collect"] = bed.collect()
        mid["jobs"] = bed.query("SELECT job_id, job_id_raw, submit_time, state FROM jobs ORDER BY 2, 3")
        for kind in bed.capture.capture_all(bed.captures, "mid"):
            bed.publish(kind, "mid")

    record = driver.run(at_mid)
    final = bed.collect()
    for kind in bed.capture.capture_all(bed.captures, "final"):
        bed.publish(kind, "final")
    (bed.captures / "workload_record.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    if bed.fixture_kinds and bed.captures != FIXTURE_DIR:  # the record of the run those captures come from
        name = f"workload_record_{'_'.join(sorted(bed.fixture_kinds))}.json"
        (FIXTURE_DIR / name).write_text(json.dumps(record, indent=2, sort_keys=True))
    return Live(record, mid["collect"], final, mid["jobs"], mid["states"])


@dataclass
class Fault:
    job_id: str
    watermark_before: datetime | None
    watermark_after_failure: datetime | None
    failed: CollectRun
    errors: list[tuple]  # (collector, status, error) recorded by the failed collect
    recovered: CollectRun
    watermark_after_recovery: datetime | None


def _watermark(bed: Bed) -> datetime | None:
    rows = bed.query(
        "SELECT position FROM watermarks WHERE cluster = ? AND collector = 'sacct'", [bed.cluster.CLUSTER]
    )
    return rows[0][0] if rows else None


@pytest.fixture(scope="session")
def fault(slurmbed: Bed, live: Live) -> Fault:
    bed = slurmbed
    before = _watermark(bed)
    last_run = bed.query("SELECT coalesce(max(run_id), 0) FROM collector_runs")[0][0]
    bed.cluster.stop_one("slurmdbd")
    # A job that starts and ends while accounting is down: slurmctld keeps its records until slurmdbd is back.
    out = bed.slurm(
        "runuser",
        "-u",
        "sbdave",
        "--",
        "sbatch",
        "--parsable",
        "--partition=cpu",
        "-c",
        "1",
        "-t",
        "1",
        "--job-name=during-outage",
        f"--chdir={bed.cluster.P['work'] / 'sbdave'}",
        "--wrap",
        "sleep 2",
    )
    job_id = out.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = bed.slurm("squeue", "--noheader", "--states=all", "-j", job_id, "-o", "%T").strip()
        if st == "COMPLETED":
            break
        time.sleep(0.5)
    failed = bed.collect()
    errors = bed.query(
        "SELECT collector, status, error FROM collector_runs WHERE run_id > ? AND status <> 'ok'", [last_run]
    )
    after_failure = _watermark(bed)
    bed.cluster.start_slurmdbd()
    # slurmctld reconnects and sends what it kept; wait until accounting knows the job.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        r = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
            env=bed.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode == 0 and r.stdout.strip() == "COMPLETED":
            break
        time.sleep(1)
    recovered = bed.collect()
    return Fault(job_id, before, after_failure, failed, errors, recovered, _watermark(bed))


@dataclass
class FairShare:
    sshare_text: str
    sacct_text: str
    captured_at: float
    last_end: float


def _calc_ran_after(log: Path, t: float) -> bool:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return False
    for line in reversed(lines):
        if "_ft_debug" in line and line.startswith("["):
            try:
                ts = datetime.fromisoformat(line[1:24]).replace(tzinfo=UTC).timestamp()
            except ValueError:
                continue
            return ts > t
    return False


@pytest.fixture(scope="session")
def fairshare(slurmbed: Bed, fault: Fault) -> FairShare:
    """sshare after every job ended and one full PriorityCalcPeriod passed, with the matching sacct."""
    bed = slurmbed
    fmt = "JobIDRaw,Account,User,State,AllocTRES,ElapsedRaw,Start,End"

    def sacct_now() -> str:
        return bed.slurm(
            "sacct",
            "--allusers",
            "--duplicates",
            "-X",
            "--parsable2",
            "--noconvert",
            "--starttime=2020-01-01T00:00:00",
            f"--format={fmt}",
        )

    def open_ended(text: str) -> list[str]:
        rows = [line.split("|") for line in text.splitlines()[1:]]
        return [r[0] for r in rows if r[6] not in ("Unknown", "None", "") and r[7] in ("Unknown", "None", "")]

    # slurmctld charges a job as it runs; sacct learns its End later (the outage job reaches slurmdbd
    # after the reconnect, sometimes COMPLETED before its End). The pair is comparable only once no job
    # runs (the held, dependent and begin-later jobs stay pending and are never charged), every started job
    # has an End, and sacct reads the same before and after sshare.
    deadline = time.monotonic() + 120
    while True:
        queued = bed.slurm(
            "squeue", "--noheader", "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-o", "%i"
        ).strip()
        sacct = sacct_now()
        if not queued and not open_ended(sacct):
            break
        assert time.monotonic() < deadline, f"running {queued!r}, no End in sacct for {open_ended(sacct)}"
        time.sleep(1)
    ends = []
    for line in sacct.splitlines()[1:]:
        end = line.split("|")[7]
        if end not in ("Unknown", "None", ""):
            ends.append(datetime.fromisoformat(end).replace(tzinfo=UTC).timestamp())
    last_end = max(ends)
    # Wait for the first fair-share calculation after the last job ended: DebugFlags=Priority makes
    # slurmctld log `_ft_debug` lines at each one (daemons run with TZ=UTC). A full period is the bound.
    deadline = last_end + CALC_PERIOD_SECONDS + 10
    while time.time() < deadline and not _calc_ran_after(
        bed.cluster.P["log"] / "slurmctld.log", last_end + 1
    ):
        time.sleep(1)
    sshare = bed.slurm("sshare", "-a", "-l", "-P")
    captured = time.time()
    assert sacct_now() == sacct, "a job ran between the sacct and sshare captures"
    bed.captures.mkdir(parents=True, exist_ok=True)
    (bed.captures / "sshare_final.txt").write_text(sshare)
    (bed.captures / "sshare_final.argv").write_text("sshare\n-a\n-l\n-P\n")
    # The same moment in the live collector's sacct format, so the pair can be ingested as a fixture.
    argv = bed.capture.sacct_argv(datetime.fromtimestamp(last_end - 86400, UTC), datetime.now(UTC))
    (bed.captures / "sacct_fairshare.txt").write_bytes(bed.slurm(*argv).encode())
    (bed.captures / "sacct_fairshare.argv").write_text(
        "\n".join(a.replace("\x1f", "\\x1f") for a in argv) + "\n"
    )
    return FairShare(sshare, sacct, captured, last_end)
