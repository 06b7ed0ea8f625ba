"""Load recorded Slurm (and NVML spool) files: the `slurmscope ingest KIND FILE...` command.

Recorded, simulated and live data pass through the same parsers; this module only reads files, picks
the collector by kind (collectors/registry.py), and loads each file in its own transaction with its
collector_runs row. The source
of a file is `<kind>:<file name>` and the quarantine is keyed by the file's SHA-256, so ingesting the
same file twice changes no data row and adds no quarantine row.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import queue
import threading
import zlib
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb
import polars as pl
from slurmscope.collectors.base import (
    IngestResult,
    Parsed,
    Rows,
    RunRecord,
    TableSpec,
    cluster_mismatch,
    clusters_mismatch,
    clusters_of,
    data_span,
    load,
    prepare,
    quarantine_frame,
    sha256,
    upsert,
    write,
)
from slurmscope.collectors.registry import COLLECTORS, Collector

from slurmscope.config import Config
from slurmscope.db import setting, transaction


class IngestError(Exception):
    """An input that cannot be ingested as asked; the message says what to change."""


# Compressed inputs by magic bytes: (magic, name, opener); opener None = refused by name.
COMPRESSED = (
    (b"\x1f\x8b", "gzip", gzip.open),
    (b"\xfd7zXZ\x00", "xz", lzma.open),
    (b"BZh", "bzip2", bz2.open),  # + block size digit and the pi block magic, checked below
    (b"\x28\xb5\x2f\xfd", "zstd", None),
    (b"PK\x03\x04", "zip", None),
    (b"7z\xbc\xaf\x27\x1c", "7z", None),
)
REFUSED_HINT = {
    "zstd": "this Python has no zstd decoder; decompress it first (zstd -d FILE) and ingest the result",
    "zip": "a zip archive holds files, not one output; unpack it (unzip FILE) and ingest each file",
    "7z": "a 7z archive holds files, not one output; unpack it (7z x FILE) and ingest each file",
}


def _compression(head: bytes) -> tuple[str, object] | None:
    for magic, name, opener in COMPRESSED:
        if head.startswith(magic):
            if name == "bzip2" and not (len(head) >= 10 and head[3:4].isdigit() and head[4:10] == b"1AY&SY"):
                continue
            return name, opener
    return None


def open_input(path: Path):
    """A recorded file opened for binary reading, decompressing gzip, xz or bzip2 (found by magic bytes).

    Operators keep old captures compressed; reading the compressed bytes as text would quarantine every
    line, or worse, find "no header". Formats without a decoder in the standard library (zstd) and
    archives (zip, 7z) are refused by name with the command that unpacks them.
    """
    try:
        with open(path, "rb") as fh:
            found = _compression(fh.read(16))
        if found is None:
            return open(path, "rb")
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    name, opener = found
    if opener is None:
        raise IngestError(f"{path}: {name}-compressed input: {REFUSED_HINT[name]}")
    return opener(path, "rb")  # type: ignore[operator]


def read_input(path: Path, limit: int | None = None) -> bytes:
    """The (decompressed) bytes of a recorded file, the first `limit` of them when given."""
    fh = open_input(path)
    try:
        with fh:
            return fh.read(limit) if limit is not None else fh.read()
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        kind = {gzip.GzipFile: "gzip", lzma.LZMAFile: "xz", bz2.BZ2File: "bzip2"}.get(type(fh))
        if kind is not None:
            raise IngestError(f"{path}: damaged {kind} input: {exc}") from None
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None


def garbage_verdict(data: bytes, rows: int, quarantined: int) -> str | None:
    """Why a recorded file is not a successful ingest (docs/ingest.md, quarantine threshold), or None.

    The same threshold as the live collection: when at least half of the record lines are quarantined
    the file is not what the kind expects (another format, another command, random bytes). Loading its
    few "good" rows would store misread values, and an `ok` run would tell the exporter all is well.
    """
    if not quarantined or quarantined < rows:
        return None
    hint = ""
    if data.lstrip()[:1] in (b"{", b"["):
        hint = (
            " (it looks like JSON: sacct, sinfo, squeue and sdiag read Slurm's JSON of the versions"
            " docs/collectors.md lists, the other kinds none)"
        )
    return (
        f"mostly garbage: {quarantined} of {rows + quarantined} lines quarantined{hint}; no rows loaded,"
        " the lines are in the quarantine table"
    )


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
    at: str | datetime | None = None,
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
    at_time = resolve_at(at, tz)
    check = getattr(module, "check_input", None)
    for path in paths:
        head = read_input(path, 65536)
        if check is not None:
            problem = check(head, fmt, delimiter)
            if problem:
                raise IngestError(f"{path}: {problem}")
    return [_ingest_one(con, cfg, kind, module, path, fmt, delimiter, tz, at_time) for path in paths]


def resolve_at(at: str | datetime | None, tz: ZoneInfo) -> datetime | None:
    """`--at`: ISO 8601 (`2026-12-03T17:29:57`, read in the --timezone without an offset) or epoch seconds."""
    if at is None or isinstance(at, datetime):
        return at if at is None or at.tzinfo else at.replace(tzinfo=tz)
    text = at.strip()
    try:
        if text.isdigit():
            return datetime.fromtimestamp(int(text), UTC)
        t = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except (ValueError, OverflowError, OSError):
        raise IngestError(
            f"--at {at!r} is not a time: give ISO 8601 (2026-12-03T17:29:57, optionally with an offset) "
            "or epoch seconds"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=tz)


def is_snapshot(module: ModuleType) -> bool:
    """Whether the kind's rows are keyed by their snapshot time (sinfo, squeue, sshare, sdiag, ...)."""
    return any("snapshot_time" in spec.key for spec in module.TABLES.values())


def snapshot_time(
    module: ModuleType, path: Path, data: bytes, tz: ZoneInfo, at: datetime | None, warnings: list[str]
) -> datetime:
    """When the recorded output was taken: what it prints itself, else `--at`, else the file's mtime.

    A copy, a checkout or an archive resets the modification time, so two snapshots copied at once would
    collapse into one and a copy made a day later moves the snapshot (fair-share decay then looks wrong):
    the content's own time comes first (the date line of `sinfo -l`/`squeue -l`, sdiag's own time), and
    the mtime is used only with a warning.
    """
    reader = getattr(module, "snapshot_from", None)
    own = reader(data, tz) if reader is not None else None
    if own is not None:
        if at is not None and abs((own - at).total_seconds()) >= 1:
            warnings.append(
                f"--at {at.isoformat()} ignored: the output prints its own time {own.isoformat()}"
            )
        return own
    if at is not None:
        return at
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(microsecond=0)
    if is_snapshot(module):
        warnings.append(
            f"snapshot time is the file's modification time {mtime.isoformat()} (the output prints no time of"
            " its own); give the capture time with --at"
        )
    return mtime


class _HashingReader:
    """A binary file whose bytes are hashed as the parser reads them, so a streamed file is read once."""

    def __init__(self, fh) -> None:
        self._fh = fh
        self._h = hashlib.sha256()
        self.blank = True  # nothing but whitespace read so far

    def read(self, size: int = -1) -> bytes:
        block = self._fh.read(size)
        self._h.update(block)
        if self.blank and block.strip():
            self.blank = False
        return block

    def drain(self) -> None:
        """Hash what the parser left unread (a document may stop early), so the digest is the file's."""
        while self.read(1 << 20):
            pass

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _ingest_one(
    con,
    cfg: Config,
    kind: str,
    module: ModuleType,
    path: Path,
    fmt,
    delimiter,
    tz: ZoneInfo,
    at: datetime | None = None,
) -> IngestResult:
    source = f"{kind}:{path.name}"
    streams = getattr(module, "streams", None)
    warnings: list[str] = []
    head = read_input(path, limit=65536)
    json_stream = streams is not None and streams(head, fmt=fmt, delimiter=delimiter)
    if not json_stream and hasattr(module, "parse_slices"):
        return _ingest_slices(con, cfg, kind, module, path, fmt, delimiter, tz, at, head)
    if json_stream:
        # JSON is read as a stream (gigabytes for a month of sacct --json): never held whole, read once
        snapshot = snapshot_time(module, path, head, tz, at, warnings)
        try:
            with open_input(path) as raw:
                fh = _HashingReader(raw)
                parsed = module.parse_stream(
                    fh,
                    cluster=cfg.cluster,
                    snapshot_time=snapshot,
                    tz=tz,
                    fmt=fmt,
                    delimiter=delimiter,
                    source=source,
                )
                fh.drain()
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
            raise IngestError(f"{path}: cannot read or decompress: {exc}") from None
        digest = fh.hexdigest()
        verdict = garbage_verdict(b"", parsed.rows, parsed.quarantine.height)
    else:
        data = read_input(path)
        if not data.strip():
            warnings.append("empty input: 0 rows")
        snapshot = snapshot_time(module, path, data, tz, at, warnings)
        digest = sha256(data)
        parsed = module.parse(
            data,
            cluster=cfg.cluster,
            snapshot_time=snapshot,
            tz=tz,
            fmt=fmt,
            delimiter=delimiter,
            source=source,
        )
        verdict = garbage_verdict(data, parsed.rows, parsed.quarantine.height)
        del data  # the raw text is not needed for loading; a large dump should not be held twice
    warnings.extend(parsed.warnings)
    mismatch = cluster_mismatch(parsed, cfg.cluster) if verdict is None else None
    if mismatch is not None:
        warnings.append(mismatch)
    hook_factory = getattr(module, "after_upsert", None)
    run = RunRecord(cluster=cfg.cluster, collector=kind, source=source)
    if not any(spec.touch for spec in module.TABLES.values()):
        # rows without an ingested_at that moves on change (jobs have one): the run's window says which
        # instants the file delivered, for the pipelines' incremental windows (collectors/base.py, data_span)
        run.window_start, run.window_end = data_span(parsed, module.TABLES)
    if verdict is not None:
        load(
            con,
            Parsed(quarantine=parsed.quarantine),
            module.TABLES,
            run,
            content_sha=digest,
            error=verdict,
            status="failed",
            warning="; ".join(warnings) or None,
        )
        return IngestResult(
            path=str(path),
            rows=0,
            quarantined=parsed.quarantine.height,
            error=verdict,
            status="failed",
            warnings=tuple(warnings),
        )
    load(
        con,
        parsed,
        module.TABLES,
        run,
        content_sha=digest,
        after_upsert=hook_factory(parsed) if hook_factory else None,
        warning="; ".join(warnings) or None,
    )
    return IngestResult(
        path=str(path), rows=parsed.rows, quarantined=parsed.quarantine.height, warnings=tuple(warnings)
    )


# Slices of one file parsed at once (besides the one being upserted): with two, parsing keeps ahead of
# DuckDB's single-threaded insert on two cores (docs/benchmarks.md, "ingest"); each adds a slice to the peak.
PARSE_WORKERS = 2


class _Garbage(Exception):
    """Raised inside the load transaction to roll back the rows of a file judged garbage."""


T = TypeVar("T")


def ahead(items: Iterator[T]) -> Iterator[T]:
    """`items`, each produced one step ahead in a worker thread.

    The next slice is read and parsed (Polars, which releases the GIL) while the caller upserts the last
    one (DuckDB, which does too), so the two overlap when two cores are free (docs/benchmarks.md,
    "ingest"). An error in the worker is raised here, after the items before it; closing this generator
    stops the worker, closes `items` (a parser's own threads stop with it) and waits for both.
    """
    q: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
        except BaseException as exc:  # handed to the consumer, raised there
            put(("error", exc))
            return
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        put(("done", None))

    worker = threading.Thread(target=work, name="slurmscope-parse-ahead", daemon=True)
    worker.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "done":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        worker.join()


@dataclass(frozen=True)
class _Ready:
    """A parsed slice made ready to write: its rows prepared, and what the end of the load keeps of it."""

    rows: tuple[tuple[Rows, bool], ...]  # each with whether no earlier slice of the file had any of its keys
    keys: dict[str, pl.DataFrame]
    clusters: set[str]
    quarantine: pl.DataFrame
    warnings: tuple[str, ...]


def _ready(
    parts: Iterator[Parsed], tables: dict[str, TableSpec], keys: dict[str, list[str]], track: set[str]
) -> Iterator[_Ready]:
    """Each slice's Polars work done in the thread that parses ahead, leaving the writing thread (DuckDB's
    single-threaded insert into keyed tables, the ingest's critical path) only the writes.

    For the `track` tables it also says which slices bring only keys no earlier slice had, by the hashes
    of the keys seen so far: a collision only sends a slice down the upsert's lookup, never a repeated
    key past it.
    """
    seen = {t: pl.Series(dtype=pl.UInt64) for t in track}

    def new_keys(t: str, df: pl.DataFrame) -> bool:
        if t not in seen:
            return False
        hashes = df.select(tables[t].key).hash_rows()
        new = not seen[t].is_in(hashes.implode()).any()
        seen[t].append(hashes)
        return new

    with closing(parts):  # type: ignore[type-var]
        for part in parts:
            yield _Ready(
                rows=tuple(
                    (prepare(tables[t], df), new_keys(t, df)) for t, df in part.tables.items() if df.height
                ),
                keys={t: df.select(keys[t]).unique() for t, df in part.tables.items() if t in keys},
                clusters=clusters_of(part),
                quarantine=part.quarantine,
                warnings=tuple(part.warnings),
            )


def _ingest_slices(
    con,
    cfg: Config,
    kind: str,
    module: ModuleType,
    path: Path,
    fmt,
    delimiter,
    tz: ZoneInfo,
    at: datetime | None,
    head: bytes,
) -> IngestResult:
    """Text read, parsed and upserted slice by slice inside one transaction, so a dump of any size is never
    held whole (docs/ingest.md, "Speed and memory").

    The transaction is still the unit: a crash or a read error mid-file rolls every slice back. What the
    slices leave for the end is small: their quarantined lines, the key columns the module's after_upsert
    hook reads (`HOOK_KEYS`, run once over all slices), and the clusters seen. A file judged garbage once
    read (garbage_verdict) is rolled back and recorded as a failed run with its quarantine, as before.
    """
    source = f"{kind}:{path.name}"
    warnings: list[str] = []
    snapshot = snapshot_time(module, path, head, tz, at, warnings)
    run = RunRecord(cluster=cfg.cluster, collector=kind, source=source)
    keys = getattr(module, "HOOK_KEYS", {})
    quarantined: list[pl.DataFrame] = []
    kept: dict[str, list[pl.DataFrame]] = {t: [] for t in keys}
    parse_warnings: list[str] = []
    clusters: set[str] = set()
    rows = 0
    try:
        # each full row group of the transaction goes to the file, not five at a time: a big load holds less
        # in memory (1M sacct lines: 0.3 GiB less peak, at the same speed; docs/benchmarks.md). One DuckDB
        # thread: an insert from a stream of batches has no parallel work for a second one, and the parse
        # threads hold the cores (1M lines: 0.9 CPU-s less; docs/benchmarks.md).
        with (
            open_input(path) as raw,
            setting(con, "write_buffer_row_group_count", 1),
            setting(con, "threads", 1),
            transaction(con),
        ):
            # Into a table empty until now, a slice of keys new to the file needs no lookup of stored keys,
            # and only what more than one slice printed needs the hook (after_upsert).
            empty = {
                t
                for t, spec in module.TABLES.items()
                if not con.execute(f"SELECT 1 FROM {spec.name} LIMIT 1").fetchall()  # noqa: S608 - TableSpec names, from code
            }
            fh = _HashingReader(raw)
            parts = module.parse_slices(
                fh,
                cluster=cfg.cluster,
                snapshot_time=snapshot,
                tz=tz,
                fmt=fmt,
                delimiter=delimiter,
                source=source,
                workers=PARSE_WORKERS,
            )
            with closing(ahead(_ready(parts, module.TABLES, keys, empty))) as slices:
                for part in slices:
                    for prepared, new in part.rows:
                        rows += write(con, prepared, new=new)
                    for table, df in part.keys.items():
                        kept[table].append(df)
                    clusters |= part.clusters
                    if part.quarantine.height:
                        quarantined.append(part.quarantine)
                    parse_warnings += [w for w in part.warnings if w not in parse_warnings]
            fh.drain()
            q = pl.concat(quarantined) if quarantined else quarantine_frame()
            verdict = garbage_verdict(head, rows, q.height)
            if verdict is not None:
                raise _Garbage(verdict)
            if fh.blank:
                warnings.insert(0, "empty input: 0 rows")
            warnings.extend(parse_warnings)
            mismatch = clusters_mismatch(clusters, cfg.cluster)
            if mismatch is not None:
                warnings.append(mismatch)
            digest = fh.hexdigest()
            if q.height:
                q = q.with_columns(
                    pl.lit(run.cluster).alias("cluster"),
                    pl.lit(source).alias("source"),
                    pl.lit(digest).alias("content_sha256"),
                )
                upsert(con, TableSpec("quarantine", ("cluster", "source", "content_sha256", "line_no")), q)
            hook = getattr(module, "after_upsert", None)
            if hook is not None and kept:
                keys_loaded = Parsed(tables={t: pl.concat(v) for t, v in kept.items() if v})
                hook(keys_loaded, slices_into_empty=empty.issuperset(keys))(con)
            run.insert(con, status="ok", rows=rows, quarantined=q.height, warning="; ".join(warnings) or None)
    except _Garbage as exc:
        verdict = str(exc)
        warnings.extend(parse_warnings)
        load(
            con,
            Parsed(quarantine=q),
            module.TABLES,
            run,
            content_sha=fh.hexdigest(),
            error=verdict,
            status="failed",
            warning="; ".join(warnings) or None,
        )
        return IngestResult(
            path=str(path),
            rows=0,
            quarantined=q.height,
            error=verdict,
            status="failed",
            warnings=tuple(warnings),
        )
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        kind_name = {gzip.GzipFile: "gzip", lzma.LZMAFile: "xz", bz2.BZ2File: "bzip2"}.get(type(raw))
        if kind_name is not None:
            raise IngestError(f"{path}: damaged {kind_name} input: {exc}") from None
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return IngestResult(path=str(path), rows=rows, quarantined=q.height, warnings=tuple(warnings))
