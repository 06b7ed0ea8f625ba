"""Load recorded Slurm (and NVML spool) files: the `slurmscope ingest KIND FILE...` command.

Recorded, simulated and live data pass through the same parsers; this module only reads files, picks
the parser by kind, and loads each file in its own transaction with its collector_runs row. The source
of a file is `<kind>:<file name>` and the quarantine is keyed by the file's SHA-256, so ingesting the
same file twice changes no data row and adds no quarantine row.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb
from slurmscope.collectors.base import RunRecord, load, sha256

from slurmscope.config import Config

# Kinds whose parser lives in slurmscope.collectors.<kind>; nvml goes to the spool loader.
PARSER_KINDS = ("sacct", "sinfo", "squeue", "sshare", "sdiag", "events", "config", "reservations", "ping")


class IngestError(Exception):
    """An input that cannot be ingested as asked; the message says what to change."""


@dataclass(frozen=True)
class IngestResult:
    path: Path
    rows: int
    quarantined: int


def parser_module(kind: str) -> ModuleType:
    """The collector module of a kind, imported on demand (nothing is imported at start-up)."""
    if kind not in PARSER_KINDS:
        raise IngestError(f"unknown kind {kind!r}; expected one of {', '.join(PARSER_KINDS)} or nvml")
    name = f"slurmscope.collectors.{kind}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise IngestError(f"no parser for {kind!r} is installed (module {name} is missing)") from None
        raise
    for attr in ("parse", "TABLES"):
        if not hasattr(module, attr):
            raise IngestError(f"module {name} has no {attr}; it cannot ingest {kind!r} files")
    return module


def resolve_timezone(cfg: Config, timezone: str | None) -> ZoneInfo:
    if not timezone:
        return cfg.timezone
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise IngestError(
            f"--timezone {timezone!r} is not an IANA time zone such as 'Europe/Berlin'"
        ) from None


def ingest_files(
    con: duckdb.DuckDBPyConnection,
    cfg: Config,
    kind: str,
    paths: list[Path],
    fmt: str | None = None,
    delimiter: str | None = None,
    timezone: str | None = None,
) -> list[IngestResult]:
    """Parse and load each file; one transaction (data, quarantine, run record) per file.

    Raises IngestError before loading anything when an argument is unusable (unknown kind, bad zone,
    unreadable file, or output the parser cannot read at all, e.g. a sacct dump without header or
    --format). Lines the parser cannot use are quarantined, not errors.
    """
    paths = [Path(p) for p in paths]
    if kind == "nvml":
        try:
            from slurmscope.collectors.nvml_ingest import ingest_spool_files
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("slurmscope.collectors.nvml_ingest"):
                raise IngestError(
                    "no NVML spool loader is installed (slurmscope.collectors.nvml_ingest)"
                ) from None
            raise
        return ingest_spool_files(con, cfg, paths)
    if delimiter == "":
        raise IngestError("--delimiter must not be empty")
    module = parser_module(kind)
    tz = resolve_timezone(cfg, timezone)
    check = getattr(module, "check_input", None)
    for path in paths:
        try:
            with open(path, "rb") as fh:
                head = fh.read(65536)
        except OSError as exc:
            raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if check is not None:
            problem = check(head, fmt, delimiter)
            if problem:
                raise IngestError(f"{path}: {problem}")
    return [_ingest_one(con, cfg, kind, module, path, fmt, delimiter, tz) for path in paths]


def _ingest_one(
    con, cfg: Config, kind: str, module: ModuleType, path: Path, fmt, delimiter, tz: ZoneInfo
) -> IngestResult:
    source = f"{kind}:{path.name}"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    snapshot = datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(microsecond=0)
    digest = sha256(data)
    parsed = module.parse(
        data, cluster=cfg.cluster, snapshot_time=snapshot, tz=tz, fmt=fmt, delimiter=delimiter, source=source
    )
    del data  # the raw text is not needed for loading; a large dump should not be held twice
    hook_factory = getattr(module, "after_upsert", None)
    run = RunRecord(cluster=cfg.cluster, collector=kind, source=source)
    load(
        con,
        parsed,
        module.TABLES,
        run,
        content_sha=digest,
        after_upsert=hook_factory(parsed) if hook_factory else None,
    )
    return IngestResult(path=path, rows=parsed.rows, quarantined=parsed.quarantine.height)
