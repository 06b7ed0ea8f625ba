"""Live collection: run each Slurm command (argument list, timeout, TZ=UTC), parse, load.

Order matters: sacct runs last so that it can also ask, by job id, for the jobs that its -S/-E time
window hides (held, waiting on a dependency, --begin in the future): those are the ids in the squeue
snapshot taken moments before, plus jobs still stored as PENDING. A failed or timed-out command records
its error in collector_runs and leaves data and watermark untouched; one collector failing never stops
the others. The kinds and their order come from collectors/registry.py.

sacct output that exits 0 but is garbage is not a success either: when at least half of its lines are
quarantined, or it stops mid-line, its good rows and its quarantined lines are stored but the run is
recorded as an error and the watermark stays, so the window is read again on the next run and the
exporter shows the collector failing (docs/ingest.md, "Live collection", item 3). A few bad lines among
good ones are quarantined and the watermark moves on, so one unparseable line cannot stall collection.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import duckdb
from slurmscope.collectors import sacct, slurm_json
from slurmscope.collectors.base import (
    Outcome,
    Parsed,
    RunRecord,
    cluster_mismatch,
    get_watermark,
    load,
    record_failure,
    set_watermark,
    sha256,
)
from slurmscope.collectors.command import CommandError, CommandTimeout, run_command
from slurmscope.collectors.registry import COLLECTORS, Collector, active, scheduled, unreachable

from slurmscope.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")

JOBS_PER_CALL = 500


def collect(
    con: duckdb.DuckDBPyConnection, cfg: Config, kind: str = "all", *, now: datetime | None = None
) -> list[Outcome]:
    """Run one live collector kind, or all of them in registry order; one Outcome per kind."""
    return collect_with(lambda fn: fn(con), cfg, kind, now=now)


def collect_with(
    db: Callable[[Callable[[duckdb.DuckDBPyConnection], T]], T],
    cfg: Config,
    kind: str = "all",
    *,
    now: datetime | None = None,
) -> list[Outcome]:
    """`collect`, with the database reached only through `db(fn)`, which runs fn(con) and returns its result.

    Fetches (Slurm commands, the NVML agents' HTTP pulls) run between those calls, never inside one:
    `serve` passes a `db` that takes its write lock, so a command hanging until its timeout (sinfo and
    squeue retry for the whole timeout while slurmctld is down) or a silent agent keeps the other
    collectors and the pipelines waiting for nothing.
    """
    live = [c for c in COLLECTORS if c.live]
    if kind == "all":
        specs = list(scheduled(cfg))
    elif kind in unreachable(cfg):
        raise ValueError(
            f"collector {kind!r} cannot reach cluster {cfg.cluster!r} through -M (slurm.cluster_flag): it asks"
            " the controllers of the local slurm.conf; set slurm.conf for this cluster"
        )
    else:
        # `collect sacct` with slurm.source = "rest" reads jobs from slurmrestd; a kind named itself runs
        specs = [c for c in active(cfg.get("slurm", "source")) if c.replaces == kind]
        specs = specs or [c for c in live if c.kind == kind]
    if not specs:
        raise ValueError(
            f"unknown collector {kind!r}; expected one of {', '.join(c.kind for c in live)} or all"
        )
    outcomes = []
    for c in specs:
        at = now or datetime.now(UTC)
        try:
            if c.spool:
                outcomes.append(_collect_spool(db, cfg, c))
            elif c.windowed:
                outcomes.append(_collect_sacct(db, cfg, c, at))
            else:
                outcomes.append(_collect_snapshot(db, cfg, c, at))
        except Exception as exc:  # a bug in one collector must not stop the others
            log.exception("collector %s failed", c.kind)
            msg = f"{type(exc).__name__}: {exc}"
            run = RunRecord(cluster=cfg.cluster, collector=c.kind, source="live")
            try:
                db(lambda con, run=run, msg=msg: _record(con, run, "error", msg))
            except Exception:  # the database itself is the problem; the outcome still says what failed
                log.exception("cannot record the failure of %s", c.kind)
            outcomes.append(Outcome(c.kind, "error", 0, msg))
    return outcomes


def untrusted_output(data: bytes, rows: int, quarantined: int) -> str | None:
    """Why an exit-0 output must not count as a successful run, or None when it may.

    Advancing the watermark past a window whose output was garbage would lose that window's jobs for
    good whenever the window is wider than the overlap (a catch-up after an outage), and the exporter
    would call the collector healthy. Slurm ends every line with a newline, so output without one was
    cut short and its later records are missing, however good the first ones look.
    """
    # a JSON document need not end with a newline (slurmrestd's does not); its parser catches a cut
    if data and not data.endswith(b"\n") and not slurm_json.is_json(data[:64]):
        return (
            f"output cut short (no final newline): {rows} row(s) kept, {quarantined} line(s) quarantined;"
            " watermark kept"
        )
    if quarantined and quarantined >= rows:
        return (
            f"mostly garbage: {quarantined} of {rows + quarantined} lines quarantined (see the quarantine"
            " table); watermark kept"
        )
    return None


def _record(con: duckdb.DuckDBPyConnection, run: RunRecord, status: str, error: str) -> None:
    try:
        record_failure(con, run, status, error)
    except duckdb.Error:  # the database itself is the problem; the outcome still says what failed
        log.exception("cannot record the failure of %s", run.collector)


@dataclass
class _Fetched:
    """One source's output, parsed and judged, ready to load: made without touching the database."""

    spec: Collector
    run: RunRecord
    failure: tuple[str, str] | None = None  # (status, message): nothing to load
    parsed: Parsed | None = None
    digest: str | None = None
    watermark: datetime | None = None
    watermark_key: str | None = None
    verdict: str | None = None
    warning: str | None = None
    elapsed: float = 0.0


def _fetch(
    cfg: Config,
    spec: Collector,
    at: datetime,
    *,
    window: tuple[datetime | None, datetime | None] = (None, None),
    argv: list[str] | None = None,
    fetcher: Callable[[], bytes] | None = None,
    watermark: datetime | None = None,
    parse_kwargs: dict | None = None,
    check_garbage: bool = False,
) -> _Fetched:
    """Fetch (the module's own `fetch`, else its command; `argv` overrides both), parse and judge."""
    run = RunRecord(
        cluster=cfg.cluster, collector=spec.kind, source="live", window_start=window[0], window_end=window[1]
    )
    t0 = time.monotonic()

    def failed(status: str, message: str) -> _Fetched:
        return _Fetched(spec, run, failure=(status, message), elapsed=time.monotonic() - t0)

    module = spec.module
    failure: CommandError | None = None
    try:
        if fetcher is not None:
            data = fetcher()
        elif argv is None and hasattr(module, "fetch"):
            data = module.fetch(cfg, window)
        else:
            argv = argv or module.command(cfg, start=window[0], end=window[1])
            data = run_command(
                argv,
                timeout=float(cfg.get("slurm", "timeout_seconds")),
                env=cfg.slurm_environment(os.environ),
            ).stdout
    except CommandTimeout as exc:
        return failed("timeout", str(exc))
    except CommandError as exc:
        if exc.returncode not in spec.data_exit_codes:
            return failed("error", str(exc))
        failure, data = exc, exc.stdout
    except TimeoutError as exc:  # a module's own fetch (HTTP) ran past its timeout
        return failed("timeout", str(exc))
    except OSError as exc:
        return failed("error", str(exc))
    parsed = module.parse(
        data,
        cluster=cfg.cluster,
        snapshot_time=at,
        tz=UTC,
        source=f"{spec.kind}:live",
        **(parse_kwargs or {}),
    )
    if failure is not None and parsed.rows == 0:  # the exit code meant a real failure this time
        return failed("error", str(failure))
    verdict = untrusted_output(data, parsed.rows, parsed.quarantine.height) if check_garbage else None
    if verdict is not None:
        watermark = None
    warnings = [*parsed.warnings, cluster_mismatch(parsed, cfg.cluster)]
    return _Fetched(
        spec,
        run,
        parsed=parsed,
        digest=sha256(data),
        watermark=watermark,
        verdict=verdict,
        warning="; ".join(w for w in warnings if w) or None,
        elapsed=time.monotonic() - t0,
    )


def _load(con: duckdb.DuckDBPyConnection, f: _Fetched) -> Outcome:
    # The run's duration is its fetch, parse and load, not the wait for the database between them.
    f.run._t0 = time.monotonic() - f.elapsed
    kind = f.spec.kind
    if f.failure is not None:
        _record(con, f.run, *f.failure)
        return Outcome(kind, f.failure[0], 0, f.failure[1])
    hook_factory = getattr(f.spec.module, "after_upsert", None)
    load(
        con,
        f.parsed,
        f.spec.module.TABLES,
        f.run,
        content_sha=f.digest,
        watermark=f.watermark,
        watermark_key=f.watermark_key,
        after_upsert=hook_factory(f.parsed) if hook_factory else None,
        error=f.verdict,
        warning=f.warning,
    )
    if f.verdict is not None:
        return Outcome(kind, "error", f.parsed.rows, f.verdict, f.warning)
    return Outcome(kind, "ok", f.parsed.rows, warning=f.warning)


def _collect_snapshot(db: Callable, cfg: Config, spec: Collector, at: datetime) -> Outcome:
    window = (None, None)
    if spec.lookback_setting is not None:
        window = (at - timedelta(seconds=float(cfg.get("collect", spec.lookback_setting))), at)
    fetched = _fetch(cfg, spec, at, window=window)
    return db(lambda con: _load(con, fetched))


def next_window_seconds(previous: float, rows: int, *, target_rows: int, low: float, high: float) -> float:
    """The next sacct window, sized from what the last one returned: about `target_rows` records a call.

    A fixed window is wrong both ways: a day at a time took about 2,500 calls to read five years of a small
    cluster, while a day of a busy one is millions of lines in one call. Growth is capped at 4x a call, so a
    quiet week does not launch a month-long call into a busy one.
    """
    size = previous * 4 if rows <= 0 else previous * target_rows / rows
    return max(low, min(high, previous * 4, size))


@dataclass(frozen=True)
class WindowPlan:
    """How a windowed source walks [start, end): the first window's length and the sizing bounds."""

    first_seconds: float
    target_rows: int
    low_seconds: float
    high_seconds: float

    @classmethod
    def from_config(cls, cfg: Config) -> WindowPlan:
        high = float(cfg.get("collect", "sacct_max_window_seconds"))
        return cls(
            first_seconds=min(float(cfg.get("collect", "sacct_window_seconds")), high),
            target_rows=int(cfg.get("collect", "sacct_target_rows")),
            low_seconds=min(60.0, high),
            high_seconds=high,
        )


def _walk_windows(
    db: Callable,
    cfg: Config,
    spec: Collector,
    at: datetime,
    start: datetime,
    end: datetime,
    *,
    watermark_key: str,
    progress: Callable[[datetime, int], None] | None = None,
    warnings: dict[str, None] | None = None,
) -> tuple[Outcome | None, int]:
    """Load [start, end) in windows sized by what sacct returns, moving `watermark_key` after each one.

    Returns (the failed window's outcome or None, rows loaded). A failure stops the walk: the windows after
    it wait for the next run, which resumes from the last window that loaded. Each window's warning is
    recorded with its run and added to `warnings` (once per text).
    """
    plan = WindowPlan.from_config(cfg)
    live = {"delimiter": sacct.LIVE_DELIMITER}
    size, rows = plan.first_seconds, 0
    while True:
        stop = min(start + timedelta(seconds=size), end)
        fetched = _fetch(
            cfg, spec, at, window=(start, stop), watermark=stop, parse_kwargs=live, check_garbage=True
        )
        fetched.watermark_key = watermark_key
        out = db(lambda con, f=fetched: _load(con, f))
        _note(warnings, out)
        if out.status != "ok":
            return out, rows
        rows += out.rows
        if progress is not None:
            progress(stop, out.rows)
        size = next_window_seconds(
            (stop - start).total_seconds() or size,
            out.rows,
            target_rows=plan.target_rows,
            low=plan.low_seconds,
            high=plan.high_seconds,
        )
        start = stop
        if start >= end:
            return None, rows


def _live_pending_ids(cfg: Config) -> list[str]:
    """The ids slurmctld holds as pending now (`squeue`), so that `collect sacct` alone also finds held,
    dependent and --begin jobs: slurmdbd selects a pending job for a -S/-E window by its eligible time,
    which a held or dependent job does not have yet (Slurm's as_mysql_jobacct_process.c)."""
    argv = sacct.command_pending_ids(cfg)
    try:
        out = run_command(
            argv, timeout=float(cfg.get("slurm", "timeout_seconds")), env=cfg.slurm_environment(os.environ)
        ).stdout
    except CommandError as exc:
        log.warning("cannot list pending jobs with squeue (%s); by-id lookups use the stored ones", exc)
        return []
    return sacct.valid_job_ids(out.decode("utf-8", "replace").split())


def _collect_sacct(db: Callable, cfg: Config, spec: Collector, at: datetime) -> Outcome:
    at = at.astimezone(UTC).replace(microsecond=0)

    def plan(con: duckdb.DuckDBPyConnection) -> tuple[datetime | None, list[str]]:
        return (
            get_watermark(con, cfg.cluster, spec.kind),
            sacct.valid_job_ids(sacct.pending_job_ids(con, cfg.cluster)),
        )

    # The by-id list is read before this run's windows load: jobs those windows print are current anyway.
    watermark, ids = db(plan)
    by_ids = getattr(spec.module, "fetch_ids", None)
    if by_ids is None:
        ids = sorted(set(ids) | set(_live_pending_ids(cfg)))
    if watermark is None:
        start = at - timedelta(seconds=float(cfg.get("collect", "sacct_initial_lookback_seconds")))
    else:
        start = watermark - timedelta(seconds=float(cfg.get("collect", "sacct_overlap_seconds")))
    start = min(start, at)
    warnings: dict[str, None] = {}
    failed, rows = _walk_windows(db, cfg, spec, at, start, at, watermark_key=spec.kind, warnings=warnings)
    if failed is not None:  # later windows wait for the next run
        return Outcome(spec.kind, failed.status, rows, failed.error, _joined(warnings))
    return _by_ids(db, cfg, spec, at, ids, since=start, rows=rows, warnings=warnings)


def _note(warnings: dict[str, None] | None, out: Outcome) -> None:
    if warnings is not None and out.warning:
        warnings[out.warning] = None


def _joined(warnings: dict[str, None] | None) -> str | None:
    return "; ".join(warnings or {}) or None


def _by_ids(
    db: Callable,
    cfg: Config,
    spec: Collector,
    at: datetime,
    ids: list[str],
    *,
    since: datetime,
    rows: int,
    warnings: dict[str, None] | None = None,
) -> Outcome:
    """Ask by id for the pending jobs and for the holes in the ids of the jobs submitted since `since`."""
    holes = db(lambda con: sacct.missing_job_ids(con, cfg.cluster, since))
    ids = sorted(set(ids) | set(holes), key=lambda i: (len(i), i))
    by_ids = getattr(spec.module, "fetch_ids", None)
    live = {"delimiter": sacct.LIVE_DELIMITER}
    for i in range(0, len(ids), JOBS_PER_CALL):
        chunk = ids[i : i + JOBS_PER_CALL]
        fetched = _fetch(
            cfg,
            spec,
            at,
            argv=None if by_ids else sacct.command_jobs(cfg, chunk),
            fetcher=(lambda chunk=chunk: by_ids(cfg, chunk)) if by_ids else None,
            parse_kwargs=live,
            check_garbage=True,
        )
        out = db(lambda con, f=fetched: _load(con, f))
        _note(warnings, out)
        if out.status != "ok":
            return Outcome(spec.kind, out.status, rows, "by job id: " + (out.error or ""), _joined(warnings))
        rows += out.rows
    return Outcome(spec.kind, "ok", rows, warning=_joined(warnings))


def backfill_key(kind: str, since: datetime) -> str:
    """The watermark a history import moves: one per start date, apart from the live collector's."""
    return f"{kind}:since={since.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def backfill_with(
    db: Callable[[Callable[[duckdb.DuckDBPyConnection], T]], T],
    cfg: Config,
    since: datetime,
    *,
    now: datetime | None = None,
    progress: Callable[[float, float, int], None] | None = None,
) -> Outcome:
    """`collect sacct --since DATE`: read the accounting history from DATE up to where live collection
    starts (its watermark, else now), in windows sized by what sacct returns.

    Resumable: each loaded window moves a watermark of its own (backfill_key), so a run killed halfway
    starts again where it stopped, and the live collector's watermark is not touched, which lets a site
    that collects already import its older years. On a database that never collected, the live watermark
    is set to where the import ended, so the next `collect` continues from there. `progress(done, total,
    rows)` is told after every window (seconds of history done and in all).
    """
    at = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    since = since.astimezone(UTC)
    spec = next(c for c in active(cfg.get("slurm", "source")) if c.windowed)
    key = backfill_key(spec.kind, since)
    marker, live_mark = db(
        lambda con: (get_watermark(con, cfg.cluster, key), get_watermark(con, cfg.cluster, spec.kind))
    )
    end = min(live_mark or at, at)
    start = min(marker or since, end)
    total = (end - since).total_seconds()
    if progress is not None:
        progress((start - since).total_seconds(), total, 0)
    if start >= end:
        return Outcome(spec.kind, "ok", 0)

    def told(stop: datetime, rows: int) -> None:
        if progress is not None:
            progress((stop - since).total_seconds(), total, rows)

    warnings: dict[str, None] = {}
    failed, rows = _walk_windows(
        db, cfg, spec, at, start, end, watermark_key=key, progress=told, warnings=warnings
    )
    if failed is not None:
        return Outcome(spec.kind, failed.status, rows, failed.error, _joined(warnings))
    out = _by_ids(db, cfg, spec, at, [], since=since, rows=rows, warnings=warnings)
    if out.status == "ok" and live_mark is None:
        db(lambda con: set_watermark(con, cfg.cluster, spec.kind, end))
    return out


def _collect_spool(db: Callable, cfg: Config, spec: Collector) -> Outcome:
    """Pull the agents' spool files outside the lock, load them inside it, acknowledge after the commit."""
    module = spec.module
    # Which listed files are loaded already: a short read of its own, between the HTTP calls.
    pulls = module.fetch(
        cfg, (None, None), loaded=lambda listed: db(lambda con: module.loaded_files(con, cfg, listed))
    )
    outcome = db(lambda con: module.load(con, cfg, pulls))
    module.acknowledge(pulls)
    unacked = [p for p in pulls if p.ack_error is not None and p.error is None]
    if not unacked:
        return outcome

    def record(con: duckdb.DuckDBPyConnection) -> None:
        for p in unacked:
            run = RunRecord(cluster=cfg.cluster, collector=spec.kind, source=f"nvml:{p.source}")
            _record(con, run, "error", f"{p.source}: acknowledgement failed: {p.ack_error}")

    db(record)
    errors = [outcome.error] if outcome.error else []
    errors += [f"nvml:{p.source}: acknowledgement failed: {p.ack_error}" for p in unacked]
    return Outcome(spec.kind, "error", outcome.rows, "; ".join(errors))
