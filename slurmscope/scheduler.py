"""`slurmscope serve`: the one DuckDB writer on the head node.

It opens the database only for the length of one job (collect, pipelines, render), serialised by one lock
that no Slurm command or agent pull runs under, and serves /metrics from the bytes rendered after each job; why, in
docs/architecture.md ("One writer"). Several clusters (`[[clusters]]`) share that one lock and database: each
has its own collector, pipeline and report jobs, with its own settings (`Config.for_cluster`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from slurmscope.collectors.collect import collect_with
from slurmscope.collectors.registry import COLLECTORS, collector, scheduled
from slurmscope.config import Config
from slurmscope.db import LOCK_WAIT_SECONDS, connect_waiting

log = logging.getLogger("slurmscope.serve")

MISFIRE_GRACE_SECONDS = 30


class FairLock:
    """A first-come, first-served lock: jobs get the database in the order they asked for it.

    threading.Lock makes no promise of order, and under load the 1-minute collectors could take it again
    and again while a 5-minute collector waits (seen as sdiag never running in a test on a busy machine).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    def __enter__(self) -> FairLock:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            while ticket != self._serving:
                self._cond.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()


@dataclass
class Service:
    """State shared by the scheduled jobs: the write lock, the latest /metrics bytes, which clusters have new
    rows for the pipelines (`dirty`).

    `config` lists the clusters served (`Config.clusters`); a job for one cluster runs with that cluster's
    settings. With one cluster the monthly report goes to `report_dir/<month>/`, with several to
    `report_dir/<month>/<cluster>/` (the layout of `report --cluster all --out report_dir/<month>`). A job
    waits up to `lock_wait_seconds` for another process's hold on the database file.
    """

    config: Config
    db_path: str
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    lock: FairLock = field(default_factory=FairLock)
    metrics: bytes = b""
    dirty: set[str] = field(default_factory=set)
    report_dir: Path = Path("reports")
    lock_wait_seconds: float = LOCK_WAIT_SECONDS

    @property
    def clusters(self) -> tuple[str, ...]:
        return self.config.clusters

    def cluster_config(self, cluster: str | None) -> Config:
        return self.config.for_cluster(cluster or self.clusters[0])

    def report_path(self, month: str, cluster: str) -> Path:
        several = len(self.clusters) > 1
        return self.report_dir / month / cluster if several else self.report_dir / month

    def with_db(self, fn: Callable, *, read_only: bool = False):
        """Run fn(con) with the database open only for its duration, serialised with other writes.

        A `query` or `report` holding the file read-only makes DuckDB refuse the writer outright, so the
        job waits for it as readers wait for serve; failing at once lost that minute's snapshot.
        """
        with self.lock:
            con = connect_waiting(self.db_path, read_only=read_only, wait_seconds=self.lock_wait_seconds)
            try:
                return fn(con)
            finally:
                con.close()

    def run_collector(self, kind: str, cluster: str | None = None) -> None:
        cfg = self.cluster_config(cluster)
        try:
            # The Slurm command runs between two turns at the lock, not inside one (collect_with).
            outcomes = collect_with(self.with_db, cfg, kind)
            self.with_db(self._render)
        except Exception:
            log.exception("collector %s of %s crashed", kind, cfg.cluster)
            return
        for o in outcomes:
            level = logging.INFO if o.status == "ok" else logging.WARNING
            log.log(
                level,
                "collector %s of %s: %s rows=%s %s",
                o.collector,
                cfg.cluster,
                o.status,
                o.rows,
                o.error or "",
            )
            if o.warning:
                log.warning("collector %s of %s: %s", o.collector, cfg.cluster, o.warning)
            # New rows from a collector that feeds the marts: the pipelines run incrementally next.
            if o.status == "ok" and collector(o.collector).feeds_pipelines and o.rows:
                self.dirty.add(cfg.cluster)

    def run_pipelines(self, *, full: bool = False, cluster: str | None = None) -> None:
        cfg = self.cluster_config(cluster)
        if not full and cfg.cluster not in self.dirty:
            return
        from slurmscope.pipelines.runner import run_pipelines

        self.dirty.discard(cfg.cluster)

        def job(con):
            result = run_pipelines(con, cfg, full=full, now=self.clock())
            self._render(con)
            return result

        try:
            result = self.with_db(job)
            log.info("pipelines of %s (%s): %s", cfg.cluster, "full" if full else "incremental", result)
        except Exception:
            self.dirty.add(cfg.cluster)
            log.exception("pipelines of %s failed", cfg.cluster)

    def run_monthly_report(self, month: str | None = None, cluster: str | None = None) -> None:
        from slurmscope.report import build_report

        cfg = self.cluster_config(cluster)
        label = month or _month_before(self.clock())
        out_dir = self.report_path(label, cfg.cluster)
        try:
            self.with_db(
                lambda con: build_report(con, cfg, month=label, out_dir=out_dir, formats=["html", "csv"]),
                read_only=True,
            )
        except Exception:
            log.exception("monthly report %s of %s failed", label, cfg.cluster)

    def missed_report_month(self, cluster: str | None = None) -> str | None:
        """The month whose report fell due while serve was not running, or None.

        The job store is in memory, so a 04:00-on-the-1st run missed by a stopped serve is not remembered;
        instead the latest due report is made at start when it is not on disk and the database was already
        collecting this cluster before it fell due (a fresh installation, or a cluster added since, has no
        month to report). Within the misfire grace the cron job runs it itself. Only the latest month: older
        gaps are an operator's call.
        """
        cluster = cluster or self.clusters[0]
        now = self.clock()
        due = now.replace(day=1, hour=REPORT_HOUR, minute=0, second=0, microsecond=0)
        if now < due:
            due = _first_of_month_before(due)
        if (now - due).total_seconds() <= MISFIRE_GRACE_SECONDS:
            return None
        label = _month_before(due)
        if (self.report_path(label, cluster) / "report.html").exists():
            return None
        if self.db_path == ":memory:" or not Path(self.db_path).exists():
            return None
        first = self.with_db(
            lambda con: con.execute(
                "SELECT min(started_at) FROM collector_runs WHERE cluster = ?", [cluster]
            ).fetchone()[0],
            read_only=True,
        )
        return label if first is not None and first < due else None

    def run_export(self) -> None:
        from slurmscope.lake import export

        out = self.config.get("lake", "export_dir")
        try:
            done = self.with_db(lambda con: export(con, out, now=self.clock()), read_only=True)
            written = sum(w.status == "written" for w in done)
            log.info("export to %s: %s partition(s) written, %s unchanged", out, written, len(done) - written)
        except Exception:
            log.exception("export to %s failed", out)

    def run_retention(self) -> None:
        """Retention's steps, each in its own turn at the write lock (collectors load in between)."""
        from slurmscope.retention import run_retention

        try:
            done = run_retention(None, self.config, self.clock(), turn=self.with_db)
        except Exception:
            log.exception("retention failed")
            return
        for d in done:
            level = logging.INFO if d.status == "ok" else logging.WARNING
            log.log(
                level,
                "retention %s %s: %s removed %s rows %s",
                d.table,
                d.step.cluster,
                d.status,
                d.rows_removed,
                d.detail or "",
            )

    def render_now(self) -> None:
        try:
            self.with_db(self._render)
        except Exception:
            log.exception("initial render failed")

    def _render(self, con) -> None:
        from slurmscope.exporter import render

        self.metrics = render(con, self.config, self.clock())


REPORT_HOUR = 4


def _first_of_month_before(t: datetime) -> datetime:
    return t.replace(year=t.year - 1, month=12) if t.month == 1 else t.replace(month=t.month - 1)


def _month_before(t: datetime) -> str:
    before = _first_of_month_before(t.replace(day=1))
    return f"{before.year:04d}-{before.month:02d}"


def job_id(base: str, cluster: str, several: bool) -> str:
    """`collect-sacct` with one cluster (as before clusters were listed); `collect-sacct@<cluster>` with several."""
    return f"{base}@{cluster}" if several else base


def build_scheduler(service: Service, intervals: dict[str, int] | None = None) -> BackgroundScheduler:
    """One BackgroundScheduler, in-memory job store rebuilt from config at every start, UTC.

    For each served cluster: every live collector of the registry that reaches it (`registry.scheduled`) at
    its own interval (or `intervals`, for every cluster), the pipelines after new rows and nightly, and the
    monthly report. One lake export and one retention schedule for all clusters.
    """
    several = len(service.clusters) > 1
    per_cluster = {
        cluster: intervals or {c.kind: c.interval_seconds for c in scheduled(service.cluster_config(cluster))}
        for cluster in service.clusters
    }
    jobs = sum(len(kinds) + 4 for kinds in per_cluster.values()) + 2  # + the lake export and retention
    # One thread per job (they mostly wait on the write lock), so none misses its slot waiting for a thread.
    sched = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(max_workers=jobs)},
        timezone=timezone.utc,
        job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": MISFIRE_GRACE_SECONDS},
    )
    phases = {c.kind: c.phase_seconds for c in COLLECTORS}
    for cluster, kinds in per_cluster.items():
        for kind, seconds in kinds.items():
            phase = phases.get(kind)
            # With a phase, the runs after the first fall at the phase past each epoch-aligned boundary.
            start = None if phase is None else datetime.fromtimestamp(phase, timezone.utc)
            sched.add_job(
                service.run_collector,
                IntervalTrigger(seconds=seconds, start_date=start, timezone=timezone.utc),
                args=[kind],
                kwargs={"cluster": cluster},
                id=job_id(f"collect-{kind}", cluster, several),
                name=f"collect {kind} of {cluster}",
                next_run_time=service.clock(),
            )
        sched.add_job(
            service.run_pipelines,
            IntervalTrigger(seconds=60, timezone=timezone.utc),
            kwargs={"cluster": cluster},
            id=job_id("pipelines-incremental", cluster, several),
            name=f"pipelines of {cluster} after new data",
        )
        sched.add_job(
            service.run_pipelines,
            CronTrigger(hour=2, minute=30, timezone=timezone.utc),
            kwargs={"full": True, "cluster": cluster},
            id=job_id("pipelines-full", cluster, several),
            name=f"nightly full rebuild of {cluster}",
        )
        sched.add_job(
            service.run_monthly_report,
            CronTrigger(day=1, hour=REPORT_HOUR, timezone=timezone.utc),
            kwargs={"cluster": cluster},
            id=job_id("report-monthly", cluster, several),
            name=f"monthly report of {cluster}",
        )
        try:
            missed = service.missed_report_month(cluster)
        except Exception:
            log.exception("cannot tell whether a monthly report of %s was missed", cluster)
            missed = None
        if missed:
            log.warning(
                "monthly report %s of %s was missed while serve was not running: making it now",
                missed,
                cluster,
            )
            sched.add_job(
                service.run_monthly_report,
                DateTrigger(run_date=service.clock(), timezone=timezone.utc),
                args=[missed],
                kwargs={"cluster": cluster},
                id=job_id("report-catch-up", cluster, several),
                name=f"missed monthly report {missed} of {cluster}",
            )
    retention = service.config.raw["retention"]
    if any(
        retention[k]
        for k in ("gpu_minutes_days", "sacct_lake_months", "snapshot_lake_months", "run_log_days")
    ):
        sched.add_job(
            service.run_retention,
            IntervalTrigger(seconds=retention["interval_seconds"], timezone=timezone.utc),
            id="retention",
            name="retention",
        )
    if service.config.get("lake", "export_dir"):
        sched.add_job(
            service.run_export,
            IntervalTrigger(
                seconds=service.config.get("lake", "export_interval_seconds"), timezone=timezone.utc
            ),
            id="lake-export",
            name="Parquet lake export",
        )
    return sched


def serve(
    cfg: Config,
    db_path: str,
    *,
    address: str | None = None,
    port: int | None = None,
    stop_event: threading.Event | None = None,
) -> None:
    """Run until SIGTERM/SIGINT; jobs in flight finish, none start after the signal."""
    from slurmscope.exporter import serve_metrics

    address = address or cfg.get("exporter", "address")
    port = port if port is not None else cfg.get("exporter", "port")
    service = Service(config=cfg, db_path=db_path)
    service.render_now()
    web_config = cfg.get("exporter", "web_config_file") or None
    server = serve_metrics(address, port, lambda: service.metrics, web_config=web_config)
    sched = build_scheduler(service)
    stop = stop_event or threading.Event()

    def on_signal(signum, _frame):
        log.warning("signal %s: stopping after the jobs in flight", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    sched.start()
    log.warning("serving /metrics on http://%s:%s/metrics (database %s)", address, port, db_path)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        sched.shutdown(wait=True)
        server.shutdown()
        log.warning("stopped")
        time.sleep(0)
