"""Live collection: run each Slurm command (argument list, timeout, TZ=UTC), parse, load.

Order matters: sacct runs last so that it can also ask, by job id, for the jobs that its -S/-E time
window hides (held, waiting on a dependency, --begin in the future): those are the ids in the squeue
snapshot taken moments before, plus jobs still stored as PENDING. A failed or timed-out command records
its error in collector_runs and leaves data and watermark untouched; one collector failing never stops
the others, and a missing collector module is reported, not raised.

sacct output that exits 0 but is garbage is not a success either: when at least half of its lines are
quarantined, or it stops mid-line, its good rows and its quarantined lines are stored but the run is
recorded as an error and the watermark stays, so the window is read again on the next run and the
exporter shows the collector failing (docs/ingest.md, "Live collection", item 3). A few bad lines among
good ones are quarantined and the watermark moves on, so one unparseable line cannot stall collection.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import TypeVar

import duckdb
from slurmscope.collectors.base import Parsed, RunRecord, get_watermark, load, record_failure, sha256
from slurmscope.collectors.runner import CommandError, CommandResult, CommandTimeout, run_command

from slurmscope.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")

# Exit codes that still carry the measurement: `scontrol ping` exits 1 when any controller is DOWN and
# prints which. Recording that as a failed run stored nothing, so /metrics kept the last "UP" for the
# whole outage (seen on the test bed with slurmctld stopped) and SlurmControllerUnreachable could not fire.
DATA_EXIT_CODES: dict[str, frozenset[int]] = {"ping": frozenset({1})}

ORDER = ("config", "ping", "sinfo", "squeue", "sshare", "sdiag", "reservations", "events", "sacct", "nvml")
JOBS_PER_CALL = 500


@dataclass
class Outcome:
    collector: str
    status: str  # 'ok' | 'error' | 'timeout' | 'skipped'
    rows: int = 0
    error: str | None = None


def collect(
    con: duckdb.DuckDBPyConnection, cfg: Config, kind: str = "all", *, now: datetime | None = None
) -> list[Outcome]:
    """Run one collector kind, or all of them in ORDER; one Outcome per kind."""
    return collect_with(lambda fn: fn(con), cfg, kind, now=now)


def collect_with(
    db: Callable[[Callable[[duckdb.DuckDBPyConnection], T]], T],
    cfg: Config,
    kind: str = "all",
    *,
    now: datetime | None = None,
) -> list[Outcome]:
    """`collect`, with the database reached only through `db(fn)`, which runs fn(con) and returns its result.

    Slurm commands run between those calls, never inside one: `serve` passes a `db` that takes its write
    lock, so a command hanging until its timeout (sinfo and squeue retry for the whole timeout while
    slurmctld is down) keeps the other collectors and the pipelines waiting for nothing.
    """
    kinds = ORDER if kind == "all" else (kind,)
    if any(k not in ORDER for k in kinds):
        raise ValueError(f"unknown collector {kind!r}; expected one of {', '.join(ORDER)} or all")
    outcomes = []
    for k in kinds:
        at = now or datetime.now(UTC)
        try:
            if k == "nvml":
                outcomes.append(db(lambda con: _collect_nvml(con, cfg)))
            elif k == "sacct":
                outcomes.append(_collect_sacct(db, cfg, at))
            else:
                outcomes.append(_collect_snapshot(db, cfg, k, at))
        except Exception as exc:  # a bug in one collector must not stop the others
            log.exception("collector %s failed", k)
            msg = f"{type(exc).__name__}: {exc}"
            run = RunRecord(cluster=cfg.cluster, collector=k, source="live")
            try:
                db(lambda con, run=run, msg=msg: _record(con, run, "error", msg))
            except Exception:  # the database itself is the problem; the outcome still says what failed
                log.exception("cannot record the failure of %s", k)
            outcomes.append(Outcome(k, "error", 0, msg))
    return outcomes


def _module(kind: str) -> ModuleType | str:
    name = f"slurmscope.collectors.{kind}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return f"collector module {name} is not installed"
        raise
    missing = [a for a in ("command", "parse", "TABLES") if not hasattr(module, a)]
    if missing:
        return f"collector module {name} lacks {', '.join(missing)}"
    return module


def untrusted_output(data: bytes, rows: int, quarantined: int) -> str | None:
    """Why an exit-0 output must not count as a successful run, or None when it may.

    Advancing the watermark past a window whose output was garbage would lose that window's jobs for
    good whenever the window is wider than the overlap (a catch-up after an outage), and the exporter
    would call the collector healthy. Slurm ends every line with a newline, so output without one was
    cut short and its later records are missing, however good the first ones look.
    """
    if data and not data.endswith(b"\n"):
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
    """One command's output, parsed and judged, ready to load: made without touching the database."""

    kind: str
    module: ModuleType
    run: RunRecord
    failure: tuple[str, str] | None = None  # (status, message): nothing to load
    parsed: Parsed | None = None
    digest: str | None = None
    watermark: datetime | None = None
    verdict: str | None = None
    elapsed: float = 0.0


def _fetch(
    cfg: Config,
    module: ModuleType,
    kind: str,
    argv: list[str],
    at: datetime,
    *,
    window: tuple[datetime | None, datetime | None] = (None, None),
    watermark: datetime | None = None,
    parse_kwargs: dict | None = None,
    check_garbage: bool = False,
) -> _Fetched:
    run = RunRecord(
        cluster=cfg.cluster, collector=kind, source="live", window_start=window[0], window_end=window[1]
    )
    t0 = time.monotonic()
    failure: CommandError | None = None
    try:
        result = run_command(argv, timeout=float(cfg.get("slurm", "timeout_seconds")))
    except CommandTimeout as exc:
        return _Fetched(kind, module, run, failure=("timeout", str(exc)), elapsed=time.monotonic() - t0)
    except CommandError as exc:
        if exc.returncode not in DATA_EXIT_CODES.get(kind, ()):
            return _Fetched(kind, module, run, failure=("error", str(exc)), elapsed=time.monotonic() - t0)
        failure = exc
        result = CommandResult(tuple(argv), exc.stdout, b"", exc.returncode)
    parsed = module.parse(
        result.stdout,
        cluster=cfg.cluster,
        snapshot_time=at,
        tz=UTC,
        source=f"{kind}:live",
        **(parse_kwargs or {}),
    )
    if failure is not None and parsed.rows == 0:  # the exit code meant a real failure this time
        return _Fetched(kind, module, run, failure=("error", str(failure)), elapsed=time.monotonic() - t0)
    verdict = (
        untrusted_output(result.stdout, parsed.rows, parsed.quarantine.height) if check_garbage else None
    )
    if verdict is not None:
        watermark = None
    return _Fetched(
        kind,
        module,
        run,
        parsed=parsed,
        digest=sha256(result.stdout),
        watermark=watermark,
        verdict=verdict,
        elapsed=time.monotonic() - t0,
    )


def _load(con: duckdb.DuckDBPyConnection, f: _Fetched) -> Outcome:
    # The run's duration is its command, parse and load, not the wait for the database between them.
    f.run._t0 = time.monotonic() - f.elapsed
    if f.failure is not None:
        _record(con, f.run, *f.failure)
        return Outcome(f.kind, f.failure[0], 0, f.failure[1])
    hook_factory = getattr(f.module, "after_upsert", None)
    load(
        con,
        f.parsed,
        f.module.TABLES,
        f.run,
        content_sha=f.digest,
        watermark=f.watermark,
        after_upsert=hook_factory(f.parsed) if hook_factory else None,
        error=f.verdict,
    )
    if f.verdict is not None:
        return Outcome(f.kind, "error", f.parsed.rows, f.verdict)
    return Outcome(f.kind, "ok", f.parsed.rows)


def _collect_snapshot(db: Callable, cfg: Config, kind: str, at: datetime) -> Outcome:
    module = _module(kind)
    if isinstance(module, str):
        db(
            lambda con: _record(
                con, RunRecord(cluster=cfg.cluster, collector=kind, source="live"), "error", module
            )
        )
        return Outcome(kind, "error", 0, module)
    start = end = None
    if kind == "events":
        # Events are upserted by (node, time_start): re-reading the whole lookback keeps ongoing events
        # (no end yet) up to date without a watermark.
        start = at - timedelta(seconds=float(cfg.get("collect", "events_lookback_seconds")))
        end = at
    fetched = _fetch(cfg, module, kind, module.command(cfg, start=start, end=end), at, window=(start, end))
    return db(lambda con: _load(con, fetched))


def sacct_windows(
    watermark: datetime | None, now: datetime, *, overlap: float, window: float, lookback: float
) -> list[tuple[datetime, datetime]]:
    """[start, end) windows from the watermark minus the overlap (or now minus the lookback) up to now.

    The overlap re-reads jobs that were still changing at the end of the last window (RUNNING ->
    COMPLETED); upserts by attempt key make the re-read harmless.
    """
    start = (
        (watermark - timedelta(seconds=overlap))
        if watermark is not None
        else now - timedelta(seconds=lookback)
    )
    start = min(start, now)
    step = timedelta(seconds=max(window, 60.0))
    out = []
    while start < now:
        end = min(start + step, now)
        out.append((start, end))
        start = end
    return out or [(now, now)]


def _collect_sacct(db: Callable, cfg: Config, at: datetime) -> Outcome:
    module = _module("sacct")
    if isinstance(module, str):
        db(
            lambda con: _record(
                con, RunRecord(cluster=cfg.cluster, collector="sacct", source="live"), "error", module
            )
        )
        return Outcome("sacct", "error", 0, module)
    at = at.astimezone(UTC).replace(microsecond=0)

    def plan(con: duckdb.DuckDBPyConnection) -> tuple[datetime | None, list[str]]:
        return (
            get_watermark(con, cfg.cluster, "sacct"),
            module.valid_job_ids(module.pending_job_ids(con, cfg.cluster)),
        )

    # The by-id list is read before this run's windows load: jobs those windows print are current anyway.
    watermark, ids = db(plan)
    windows = sacct_windows(
        watermark,
        at,
        overlap=float(cfg.get("collect", "sacct_overlap_seconds")),
        window=float(cfg.get("collect", "sacct_window_seconds")),
        lookback=float(cfg.get("collect", "sacct_initial_lookback_seconds")),
    )
    live = {"delimiter": module.LIVE_DELIMITER}
    rows = 0
    for start, end in windows:
        fetched = _fetch(
            cfg,
            module,
            "sacct",
            module.command(cfg, start=start, end=end),
            at,
            window=(start, end),
            watermark=end,
            parse_kwargs=live,
            check_garbage=True,
        )
        out = db(lambda con, f=fetched: _load(con, f))
        if out.status != "ok":
            return Outcome("sacct", out.status, rows, out.error)  # later windows wait for the next run
        rows += out.rows
    for i in range(0, len(ids), JOBS_PER_CALL):
        fetched = _fetch(
            cfg,
            module,
            "sacct",
            module.command_jobs(cfg, ids[i : i + JOBS_PER_CALL]),
            at,
            parse_kwargs=live,
            check_garbage=True,
        )
        out = db(lambda con, f=fetched: _load(con, f))
        if out.status != "ok":
            return Outcome("sacct", out.status, rows, "by job id: " + (out.error or ""))
        rows += out.rows
    return Outcome("sacct", "ok", rows)


def _collect_nvml(con: duckdb.DuckDBPyConnection, cfg: Config) -> Outcome:
    try:
        module = importlib.import_module("slurmscope.collectors.nvml_ingest")
    except ModuleNotFoundError as exc:
        if exc.name == "slurmscope.collectors.nvml_ingest":
            return Outcome(
                "nvml", "skipped", 0, "NVML spool collector (slurmscope.collectors.nvml_ingest) not installed"
            )
        raise
    fn = getattr(module, "collect_nvml", None)
    if fn is None:
        return Outcome("nvml", "skipped", 0, "slurmscope.collectors.nvml_ingest has no collect_nvml")
    result = fn(con, cfg)
    if isinstance(result, Outcome):
        return result
    if isinstance(result, int):
        return Outcome("nvml", "ok", result)
    if isinstance(result, (list, tuple)):
        return Outcome("nvml", "ok", sum(int(getattr(r, "rows", 0) or 0) for r in result))
    return Outcome("nvml", "ok", 0)
