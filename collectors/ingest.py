"""Load recorded Slurm (and NVML spool) files: the `slurmscope ingest KIND FILE...` command.

Recorded, simulated and live data pass through the same parsers; this module only reads files, picks
the collector by kind (collectors/registry.py), and loads each file in its own transaction with its
collector_runs row. The source
of a file is `<kind>:<file name>` and the quarantine is keyed by the file's SHA-256, so ingesting the
same file twice changes no data row and adds no quarantine row.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb
from slurmscope.collectors.base import IngestResult, RunRecord, load, sha256
from slurmscope.collectors.registry import COLLECTORS, Collector

from slurmscope.config import Config


class IngestError(Exception):
    """An input that cannot be ingested as asked; the message says what to change."""


def ingestable(kind: str) -> Collector:
    """The registered collector that ingests files of `kind`."""
    for c in COLLECTORS:
        if c.ingestable and c.kind == kind:
            return c
    known = ", ".join(c.kind for c in COLLECTORS if c.ingestable)
    raise IngestError(f"unknown kind {kind!r}; expected one of {known}")


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
    spec = ingestable(kind)
    if spec.spool:
        return spec.module.ingest_spool_files(con, cfg, paths)
    if delimiter == "":
        raise IngestError("--delimiter must not be empty")
    module = spec.module
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


class _HashingReader:
    """A binary file whose bytes are hashed as the parser reads them, so a streamed file is read once."""

    def __init__(self, fh) -> None:
        self._fh = fh
        self._h = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        block = self._fh.read(size)
        self._h.update(block)
        return block

    def drain(self) -> None:
        """Hash what the parser left unread (a document may stop early), so the digest is the file's."""
        while self.read(1 << 20):
            pass

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _ingest_one(
    con, cfg: Config, kind: str, module: ModuleType, path: Path, fmt, delimiter, tz: ZoneInfo
) -> IngestResult:
    source = f"{kind}:{path.name}"
    streams = getattr(module, "streams", None)
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
        snapshot = datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(microsecond=0)
        kwargs = {
            "cluster": cfg.cluster,
            "snapshot_time": snapshot,
            "tz": tz,
            "fmt": fmt,
            "delimiter": delimiter,
        }
        if streams is not None and streams(head):
            # JSON is read as a stream (gigabytes for a month of sacct --json): never held whole, read once
            with open(path, "rb") as raw:
                fh = _HashingReader(raw)
                parsed = module.parse_stream(fh, source=source, **kwargs)
                fh.drain()
            digest = fh.hexdigest()
        else:
            data = path.read_bytes()
            digest = sha256(data)
            parsed = module.parse(data, source=source, **kwargs)
            del data  # the raw text is not needed for loading; a large dump should not be held twice
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None
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
    return IngestResult(path=str(path), rows=parsed.rows, quarantined=parsed.quarantine.height)
