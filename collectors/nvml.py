"""Per-node NVML agent (`slurmscope agent`): GPU telemetry, health and GPU-to-job attribution, spooled.

Why it is built this way (docs/nvml.md has the full story):
- Every NVML call may fail (NotSupported, NoPermission, GPU lost, Unknown). A failed field is null and
  counted, never zero; a lost GPU becomes a health event; the agent itself never dies on an NVML error.
- Jobs are attributed from the allocation (the prolog's mapping file, matched by device minor number, PCI
  bus id or UUID, never by NVML index order), cross-checked with the processes' cgroups. The mapping goes
  out as interval rows, never as a job label on a time series, and the agent never asks slurmctld.
- Per-minute aggregates go to an append-only journal (fsynced each minute) that becomes an hourly spool
  file, written by `write_spool_file` (temp file, fsync, atomic rename, directory fsync). A file without
  its footer is never accepted, so a crash mid-write can leave nothing the loader would take as complete.
- Pure code takes `now` as an argument; only `run_agent` reads the wall clock, so tests run instantly.

The agent imports neither polars nor duckdb: it must stay small on every GPU node.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

log = logging.getLogger(__name__)

KIND = "nvml"
SPOOL_FORMAT = "slurmscope-nvml-spool"
SPOOL_VERSION = 1
RECORD_TYPES = ("sample", "event", "job", "inventory")

# Clock-event reasons that mean "the GPU is held back", as opposed to idle (0x1) or an operator's
# application-clock setting (0x2) or display clocks (0x100).
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # sw power cap, hw slowdown, sw/hw thermal, power brake

# XIDs after which the GPU needs attention (NVIDIA XID catalogue: DBE, row-remap failure, NVLink,
# fallen off the bus, ECC rate, contained/uncontained errors, GSP timeouts/errors).
CRITICAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140})
XID_DEDUP_SECONDS = 10.0


# ==================================================================================================
# Pure parsing
# ==================================================================================================


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def iso(ts: float | datetime | None) -> str | None:
    if ts is None:
        return None
    dt = ts if isinstance(ts, datetime) else utc(ts)
    text = dt.astimezone(UTC).isoformat(timespec="microseconds")
    return text.replace(".000000", "").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"time without zone: {text!r}")
    return dt.astimezone(UTC)


_BUS_RE = re.compile(r"^(?:PCI:)?(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?$")


def normalize_bus_id(text: str | bytes | None) -> str | None:
    """'00000000:3B:00.0', '0000:3b:00.0', 'PCI:0000:3b:00' -> '0000:3b:00.0' (one form for matching)."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    m = _BUS_RE.match(text.strip().rstrip("\x00"))
    if not m:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4) or '0'}"


_JOB_COMPONENT = re.compile(r"^job_(\d+)$")


def parse_cgroup_job(text: str) -> str | None:
    """The Slurm job id of a process from its /proc/<pid>/cgroup text, or None.

    cgroup v1 lines look like `4:memory:/slurm/uid_1000/job_123/step_0/task_0`; v2 has one line
    `0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0`. Newer Slurm releases put a per-run or
    per-node component in front (`slurmstepd-<node>.scope`, a run directory): we take the `job_<id>` path
    component wherever it sits and ignore everything around it. The v2 line wins over v1 lines.
    """
    found_v1 = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hier, _controllers, path = parts
        for comp in path.split("/"):
            m = _JOB_COMPONENT.match(comp)
            if m:
                if hier == "0":
                    return m.group(1)
                found_v1 = found_v1 or m.group(1)
                break
    return found_v1


@dataclass(frozen=True)
class JobMapping:
    """One prolog mapping file: which devices a job holds on this node, since when."""

    job_id: str
    start_time: float | None
    devices: tuple[str, ...]
    pci_bus_ids: tuple[str, ...] = ()
    end_time: float | None = None


def parse_mapping(text: str) -> JobMapping | None:
    """Parse the key=value file written by collectors/slurm_prolog.sh (None if it names no job)."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        kv[k.strip()] = v.strip()
    job = kv.get("job_id", "")
    if not re.fullmatch(r"\d+", job):
        return None

    def num(key: str) -> float | None:
        try:
            return float(kv[key]) if kv.get(key) else None
        except ValueError:
            return None

    def items(key: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in kv.get(key, "").split(",") if x.strip() and x.strip() != "NoDevFiles")

    devices = items("devices")
    for key in ("cuda_visible_devices", "slurm_job_gpus"):
        devices = devices or items(key)
    return JobMapping(job, num("start_time"), devices, items("pci_bus_ids"), num("end_time"))


@dataclass(frozen=True)
class KmsgRecord:
    seq: int
    usec: int  # microseconds since boot
    priority: int
    message: str


def parse_kmsg_record(line: str) -> KmsgRecord | None:
    """A /dev/kmsg record `prio,seq,usec,flags[,...];message`; continuation lines give None."""
    if not line or line[0] in " \t" or ";" not in line:
        return None
    head, message = line.split(";", 1)
    parts = head.split(",")
    if len(parts) < 3:
        return None
    try:
        return KmsgRecord(int(parts[1]), int(parts[2]), int(parts[0]) & 7, message.rstrip("\n"))
    except ValueError:
        return None


@dataclass(frozen=True)
class XidMessage:
    pci_bus_id: str | None  # normalised, function .0
    xid: int
    detail: str


_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\)(?:\s*\[[^\]]*\])?:\s*(\d+),?\s*(.*)$")


def parse_xid(message: str) -> XidMessage | None:
    """`NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.` -> XidMessage."""
    m = _XID_RE.search(message)
    if not m:
        return None
    return XidMessage(normalize_bus_id(m.group(1)), int(m.group(2)), m.group(3).strip())


# ==================================================================================================
# Spool format: JSON Lines, header + records + footer (docs/nvml.md defines it)
# ==================================================================================================


def encode_record(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), sort_keys=True, allow_nan=False) + "\n").encode()


def _safe_node(node: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", node) or "node"


def spool_file_name(node: str, opened_at: float) -> str:
    return f"{_safe_node(node)}_{utc(opened_at):%Y%m%dT%H%M%S}Z.jsonl"


def spool_header(node: str, opened_at: float, *, cluster: str | None = None) -> dict[str, Any]:
    return {
        "type": "header",
        "format": SPOOL_FORMAT,
        "version": SPOOL_VERSION,
        "node": node,
        "opened_at": iso(opened_at),
        "cluster": cluster,
    }


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_spool_file(
    directory: str | os.PathLike[str],
    node: str,
    records: Iterable[dict[str, Any]],
    *,
    opened_at: float | None = None,
    name: str | None = None,
    cluster: str | None = None,
) -> Path:
    """Write one closed spool file atomically and durably; return its path.

    Header line, one JSON object per record, footer line with the record count and the sha256 of every
    byte before the footer. The bytes go to a hidden temp file, which is fsynced, renamed into place
    (never over an existing file) and the directory fsynced: a reader sees the whole file or nothing.
    The simulator writes its demo telemetry with this same function.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    records = list(records)
    if opened_at is None:
        times = [_record_time(r) for r in records]
        opened_at = min((t for t in times if t is not None), default=0.0)
    name = name or spool_file_name(node, opened_at)
    final = directory / name
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    n = 1
    while final.exists():
        final = directory / f"{stem}-{n}.jsonl"
        n += 1
    body = bytearray(encode_record(spool_header(node, opened_at, cluster=cluster)))
    for r in records:
        body += encode_record(r)
    footer = {"type": "footer", "records": len(records), "sha256": hashlib.sha256(body).hexdigest()}
    body += encode_record(footer)
    tmp = directory / f".tmp-{final.name}.{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk must not keep a half temp file holding its space
        raise
    os.rename(tmp, final)
    _fsync_dir(directory)
    return final


def _record_time(r: dict[str, Any]) -> float | None:
    for key in ("minute", "event_time", "interval_start", "seen_at"):
        if r.get(key):
            try:
                return parse_iso(r[key]).timestamp()
            except (TypeError, ValueError):
                return None
    return None


@dataclass
class SpoolContent:
    """A spool file checked line by line: `problem` set means the file as a whole is rejected."""

    header: dict[str, Any] | None
    records: list[tuple[int, dict[str, Any]]]  # (line_no, record)
    bad_lines: list[tuple[int, bytes, str]]  # (line_no, raw, reason)
    problem: str | None = None
    lines: list[bytes] = field(default_factory=list)


REQUIRED = {
    "sample": ("gpu_uuid", "minute"),
    "event": ("event_time", "event_type"),
    "job": ("gpu_uuid", "job_id", "interval_start"),
    "inventory": ("gpu_uuid", "seen_at"),
}
TIME_KEYS = ("minute", "event_time", "interval_start", "interval_end", "seen_at")


def read_spool_bytes(data: bytes) -> SpoolContent:
    """Validate a spool file (pure). A missing header/footer, a count or checksum mismatch rejects it."""
    if not data.endswith(b"\n"):
        lines = data.split(b"\n")
        return SpoolContent(None, [], [], "file does not end with a newline (truncated)", lines)
    lines = data[:-1].split(b"\n")
    if len(lines) < 2:
        return SpoolContent(None, [], [], "no header and footer", lines)
    try:
        header = json.loads(lines[0])
        footer = json.loads(lines[-1])
    except ValueError:
        return SpoolContent(None, [], [], "header or footer is not JSON", lines)
    if not isinstance(header, dict) or header.get("type") != "header" or header.get("format") != SPOOL_FORMAT:
        return SpoolContent(None, [], [], "first line is not a slurmscope spool header", lines)
    if header.get("version") != SPOOL_VERSION:
        return SpoolContent(header, [], [], f"unsupported spool version {header.get('version')!r}", lines)
    if not isinstance(footer, dict) or footer.get("type") != "footer":
        return SpoolContent(header, [], [], "no footer (file was not closed)", lines)
    if footer.get("records") != len(lines) - 2:
        return SpoolContent(
            header, [], [], f"footer counts {footer.get('records')} records, file has {len(lines) - 2}", lines
        )
    body = data[: len(data) - len(lines[-1]) - 1]
    if footer.get("sha256") != hashlib.sha256(body).hexdigest():
        return SpoolContent(header, [], [], "checksum mismatch", lines)
    if not isinstance(header.get("node"), str) or not header["node"]:
        return SpoolContent(header, [], [], "header names no node", lines)
    records, bad = [], []
    for no, raw in enumerate(lines[1:-1], start=2):
        reason = None
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            rec, reason = None, f"not JSON: {exc}"
        if reason is None:
            reason = _check_record(rec)
        if reason:
            bad.append((no, raw, reason))
        else:
            records.append((no, rec))
    return SpoolContent(header, records, bad, None, lines)


def _check_record(rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return "record is not an object"
    kind = rec.get("type")
    if kind not in REQUIRED:
        return f"unknown record type {kind!r}"
    for key in REQUIRED[kind]:
        if rec.get(key) is None:
            return f"{kind} record without {key}"
    for key in TIME_KEYS:
        if rec.get(key) is not None:
            try:
                parse_iso(rec[key])
            except (TypeError, ValueError):
                return f"bad time in {key}: {rec[key]!r}"
    return None


class SpoolJournal:
    """The current hour's records: appended to a hidden journal (fsynced per flush), closed hourly.

    Closing writes the file with `write_spool_file` and removes the journal. After a crash, `recover`
    turns each leftover journal (minus a torn last line) into a closed file, so nothing that was fsynced
    is lost and nothing half-written is ever served.
    """

    PREFIX = ".journal-"

    def __init__(self, directory: Path, node: str, cluster: str | None = None) -> None:
        self.directory, self.node, self.cluster = directory, node, cluster
        self.opened_at: float | None = None
        self.name: str | None = None
        self.records: list[dict[str, Any]] = []
        self._fh = None
        self._good = 0  # journal bytes known fsynced; a failed append is cut back to this

    @property
    def path(self) -> Path | None:
        return None if self.name is None else self.directory / f"{self.PREFIX}{self.name}"

    def open(self, now: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.opened_at, self.name, self.records = now, spool_file_name(self.node, now), []
        while (self.directory / self.name).exists() or self.path.exists():
            self.opened_at += 1
            self.name = spool_file_name(self.node, self.opened_at)
        try:
            self._fh = open(self.path, "ab")  # noqa: SIM115 - kept open for the hour
            self._fh.write(encode_record(spool_header(self.node, self.opened_at, cluster=self.cluster)))
            self._sync()
            _fsync_dir(self.directory)
        except OSError:
            self._drop_fh()
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass
            self.name, self.opened_at = None, None
            raise
        self._good = self._fh.tell()

    def _sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def _drop_fh(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass  # what close could not flush was never acknowledged; the caller still holds it

    def append(self, records: list[dict[str, Any]]) -> None:
        """Append and fsync; on OSError (disk full, read-only) the journal is cut back and the error raised.

        The caller keeps the records and retries, so a record is in the journal once or not at all.
        """
        if not records:
            return
        if self.name is None:
            raise RuntimeError("journal not open")
        try:
            if self._fh is None:  # reopened after a failed append or a failed close
                os.truncate(self.path, self._good)
                self._fh = open(self.path, "ab")  # noqa: SIM115 - kept open for the hour
            self._fh.write(b"".join(encode_record(r) for r in records))
            self._sync()
        except OSError:
            self._drop_fh()
            try:
                os.truncate(self.path, self._good)
            except OSError:
                pass
            raise
        self._good = self._fh.tell()
        self.records.extend(records)

    def due(self, now: float) -> bool:
        return self.opened_at is not None and int(now // 3600) != int(self.opened_at // 3600)

    def close(self) -> Path | None:
        """Close the hour: write the spool file, then drop the journal."""
        if self.name is None:
            return None
        self._drop_fh()
        out = write_spool_file(
            self.directory,
            self.node,
            self.records,
            opened_at=self.opened_at,
            name=self.name,
            cluster=self.cluster,
        )
        self.path.unlink(missing_ok=True)
        _fsync_dir(self.directory)
        self.name, self.opened_at, self.records = None, None, []
        return out

    @classmethod
    def recover(cls, directory: Path) -> list[Path]:
        """Close journals a killed agent left behind; return the files written."""
        out = []
        if not directory.exists():
            return out
        for path in sorted(directory.glob(f"{cls.PREFIX}*.jsonl")):
            data = path.read_bytes()
            complete = data[: data.rfind(b"\n") + 1] if b"\n" in data else b""
            lines = complete.split(b"\n")[:-1]
            header, records = None, []
            for i, raw in enumerate(lines):
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                if i == 0:
                    header = rec if isinstance(rec, dict) and rec.get("type") == "header" else None
                elif isinstance(rec, dict) and _check_record(rec) is None:
                    records.append(rec)
            name = path.name[len(cls.PREFIX) :]
            if header is not None and not (directory / name).exists():
                opened = parse_iso(header["opened_at"]).timestamp()
                out.append(
                    write_spool_file(
                        directory,
                        header["node"],
                        records,
                        opened_at=opened,
                        name=name,
                        cluster=header.get("cluster"),
                    )
                )
            path.unlink()
        if out:
            _fsync_dir(directory)
        return out


def list_spool(directory: Path) -> list[dict[str, Any]]:
    """Closed, unacknowledged spool files: name, size, sha256 (what the HTTP listing serves)."""
    out = []
    if not directory.exists():
        return out
    for p in sorted(directory.glob("*.jsonl")):
        if p.name.startswith(".") or (directory / f"{p.name}.ack").exists():
            continue
        data = p.read_bytes()
        out.append({"name": p.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return out


def count_spool(directory: Path) -> int:
    """Closed, unacknowledged files, without reading them (cheap enough for every scrape)."""
    if not directory.exists():
        return 0
    names = {p.name for p in directory.iterdir()}
    return sum(1 for n in names if n.endswith(".jsonl") and not n.startswith(".") and f"{n}.ack" not in names)


def prune_acked(directory: Path) -> int:
    """Delete files the central side acknowledged by a `<name>.ack` marker (shared-filesystem mode)."""
    n = 0
    for marker in directory.glob("*.jsonl.ack"):
        target = directory / marker.name[: -len(".ack")]
        expected = marker.read_text(encoding="utf-8", errors="replace").strip()
        if target.exists():
            if expected and hashlib.sha256(target.read_bytes()).hexdigest() != expected:
                continue
            target.unlink()
            n += 1
        marker.unlink()
    return n


def ack_file(directory: Path, name: str, sha256: str | None) -> str:
    """Agent side of an HTTP ack: delete the file if its checksum matches. 'deleted'|'absent'|'mismatch'."""
    if "/" in name or name.startswith(".") or not name.endswith(".jsonl"):
        return "absent"
    path = directory / name
    if not path.exists():
        return "absent"
    if sha256 and hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
        return "mismatch"
    path.unlink()
    _fsync_dir(directory)
    return "deleted"


# ==================================================================================================
# Per-minute aggregation (pure: readings in, records out)
# ==================================================================================================


@dataclass
class Reading:
    """One sample of one GPU; None = not read (error or not due)."""

    time: float
    util_gpu: float | None = None
    util_mem: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None
    temp_gpu: float | None = None
    temp_mem: float | None = None
    sm_clock: float | None = None
    mem_clock: float | None = None
    reasons: int | None = None
    pcie_replay: int | None = None
    # slow fields (read every slow interval)
    ecc_corr_vol: int | None = None
    ecc_unc_vol: int | None = None
    ecc_corr_agg: int | None = None
    ecc_unc_agg: int | None = None
    remapped_pending: bool | None = None
    remapped_failed: bool | None = None
    retired_pages: int | None = None
    nvlink_errors: int | None = None
    errors: int = 0


SLOW_FIELDS = (
    "ecc_corr_vol",
    "ecc_unc_vol",
    "ecc_corr_agg",
    "ecc_unc_agg",
    "remapped_pending",
    "remapped_failed",
    "retired_pages",
    "nvlink_errors",
)
COUNTERS = {
    "energy_mj": "energy",
    "pcie_replay": "pcie_replay_delta",
    "ecc_corr_vol": "ecc_corrected_delta",
    "ecc_unc_vol": "ecc_uncorrected_delta",
    "nvlink_errors": "nvlink_errors_delta",
}


class MinuteAggregator:
    """Fold one GPU's readings into per-minute records (means, maxima, counter deltas, throttled time).

    Counter deltas are taken reading-to-reading, also across minute boundaries, so no energy falls
    between minutes; a counter that went backwards (driver reload) contributes nothing for that step.
    A delta is null only while the counter has never been read successfully (NotSupported stays null).
    With `flush_seconds` below 60 a minute goes out in several disjoint chunks (same `minute` key) that
    the loader merges exactly; that bounds what a SIGKILL can lose to one chunk.
    """

    def __init__(self, identity: dict[str, Any], interval: float, flush_seconds: float = 60.0) -> None:
        self.identity = identity
        self.interval = interval
        self.flush_seconds = min(max(float(flush_seconds), 1.0), 60.0)
        self.minute: int | None = None
        self.chunk: int | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.prev: dict[str, int] = {}
        self.last_time: float | None = None
        self.last_slow: dict[str, Any] = {}
        self._reset()

    def _reset(self) -> None:
        self.n = 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.maxes: dict[str, float] = {}
        self.deltas: dict[str, int] = {}
        self.throttle_seconds = 0.0
        self.reasons_or: int | None = None
        self.errors = 0
        self.slow: dict[str, Any] = {}
        self.first = self.last = None

    def add(self, r: Reading) -> list[dict[str, Any]]:
        out = []
        minute = int(r.time // 60) * 60
        chunk = int(r.time // self.flush_seconds)
        if self.minute is not None and (minute != self.minute or chunk != self.chunk):
            rec = self.flush()
            if rec:
                out.append(rec)
        self.minute, self.chunk = minute, chunk
        self.first = r.time if self.first is None else self.first
        self.last = r.time
        self.n += 1
        self.errors += r.errors
        for key in ("util_gpu", "util_mem", "power_w", "sm_clock", "mem_clock"):
            v = getattr(r, key)
            if v is not None:
                self.sums[key] = self.sums.get(key, 0.0) + v
                self.counts[key] = self.counts.get(key, 0) + 1
        for key in ("util_gpu", "power_w", "mem_used", "temp_gpu", "temp_mem"):
            v = getattr(r, key)
            if v is not None:
                self.maxes[key] = max(self.maxes.get(key, v), v)
        if r.mem_total is not None:
            self.maxes["mem_total"] = r.mem_total
        dt = (
            self.interval
            if self.last_time is None
            else min(max(r.time - self.last_time, 0.0), 2 * self.interval)
        )
        self.last_time = r.time
        if r.reasons is not None:
            self.reasons_or = (self.reasons_or or 0) | r.reasons
            if r.reasons & THROTTLE_MASK:
                self.throttle_seconds += dt
        for key in COUNTERS:
            v = getattr(r, key)
            if v is None:
                continue
            prev = self.prev.get(key)
            self.deltas[key] = self.deltas.get(key, 0) + (v - prev if prev is not None and v >= prev else 0)
            self.prev[key] = v
        for key in ("ecc_corr_agg", "ecc_unc_agg", "remapped_pending", "remapped_failed", "retired_pages"):
            v = getattr(r, key)
            if v is not None:
                self.slow[key] = v
                self.last_slow[key] = v
        return out

    def flush(self) -> dict[str, Any] | None:
        """The record of the current (possibly partial) minute; starts a new one."""
        if self.minute is None or self.n == 0:
            return None

        def mean(k: str) -> float | None:
            return round(self.sums[k] / self.counts[k], 4) if self.counts.get(k) else None

        def delta(k: str) -> int | None:
            if k in self.deltas:
                return self.deltas[k]
            return 0 if k in self.prev else None

        slow = {**self.last_slow, **self.slow}
        energy = delta("energy_mj")
        rec = {
            "type": "sample",
            **self.identity,
            "minute": iso(self.minute),
            "samples": self.n,
            "first_sample": iso(self.first),
            "last_sample": iso(self.last),
            "util_gpu_mean": mean("util_gpu"),
            "util_gpu_max": self.maxes.get("util_gpu"),
            "util_mem_mean": mean("util_mem"),
            "mem_used_max_bytes": self.maxes.get("mem_used"),
            "mem_total_bytes": self.maxes.get("mem_total"),
            "power_mean_watts": mean("power_w"),
            "power_max_watts": self.maxes.get("power_w"),
            "energy_joules": None if energy is None else energy / 1000.0,
            "temp_gpu_max_celsius": self.maxes.get("temp_gpu"),
            "temp_mem_max_celsius": self.maxes.get("temp_mem"),
            "sm_clock_mean_mhz": mean("sm_clock"),
            "mem_clock_mean_mhz": mean("mem_clock"),
            "throttle_seconds": None if self.reasons_or is None else round(self.throttle_seconds, 3),
            "throttle_reasons": self.reasons_or,
            "pcie_replay_delta": delta("pcie_replay"),
            "ecc_corrected_delta": delta("ecc_corr_vol"),
            "ecc_uncorrected_delta": delta("ecc_unc_vol"),
            "ecc_corrected_total": slow.get("ecc_corr_agg"),
            "ecc_uncorrected_total": slow.get("ecc_unc_agg"),
            "remapped_pending": slow.get("remapped_pending"),
            "remapped_failed": slow.get("remapped_failed"),
            "retired_pages": slow.get("retired_pages"),
            "nvlink_errors_delta": delta("nvlink_errors"),
            "null_fields": self.errors,
        }
        self._reset()
        return rec


# ==================================================================================================
# GPU <-> job attribution (pure given its inputs)
# ==================================================================================================


@dataclass(frozen=True)
class GpuRef:
    """What the attributor needs to know about a device to match mapping tokens against it."""

    uuid: str
    index: int
    minor: int | None
    bus_id: str | None  # normalised
    migs: tuple[tuple[str, int, int], ...] = ()  # (mig uuid, gpu instance id, compute instance id)


def resolve_token(token: str, gpus: list[GpuRef]) -> tuple[str, str] | None:
    """A mapping-file device token -> (gpu uuid, mig instance uuid or ''), by identity, never by index."""
    token = token.strip()
    if re.fullmatch(r"\d+", token):
        minor = int(token)
        return next(((g.uuid, "") for g in gpus if g.minor == minor), None)
    m = re.fullmatch(r"(\d+)/(\d+)/(\d+)", token)  # minor/gi/ci of a MIG instance
    if m:
        minor, gi, ci = (int(x) for x in m.groups())
        for g in gpus:
            if g.minor == minor:
                return next(((g.uuid, u) for u, a, b in g.migs if (a, b) == (gi, ci)), None)
        return None
    if token.startswith("GPU-"):
        return next(((g.uuid, "") for g in gpus if g.uuid == token), None)
    if token.startswith("MIG-"):
        for g in gpus:
            for u, _gi, _ci in g.migs:
                if u == token:
                    return (g.uuid, u)
        return None
    bus = normalize_bus_id(token)
    if bus:
        return next(((g.uuid, "") for g in gpus if g.bus_id == bus), None)
    return None


def mapping_targets(mapping: JobMapping, gpus: list[GpuRef]) -> tuple[set[tuple[str, str]], list[str]]:
    """Devices of a job on this node: PCI bus ids win over minor numbers; unresolved tokens returned."""
    targets, unresolved = set(), []
    tokens = list(mapping.pci_bus_ids)
    tokens += [t for t in mapping.devices if not (mapping.pci_bus_ids and re.fullmatch(r"\d+", t))]
    for t in tokens:
        hit = resolve_token(t, gpus)
        if hit:
            targets.add(hit)
        else:
            unresolved.append(t)
    return targets, unresolved


@dataclass
class ProcessSeen:
    gpu_uuid: str
    mig_uuid: str
    pid: int
    job_id: str | None


class Attributor:
    """Keeps GPU<->job intervals open while their evidence lasts and emits `job` records on changes.

    Evidence: a prolog mapping file (source 'prolog', start = the job start the prolog wrote, so a restart
    of the agent re-emits the same interval key), or a process whose cgroup names a job that no mapping
    covers (source 'cgroup'). The cgroup check also counts agreements and disagreements.
    """

    def __init__(self) -> None:
        self.open: dict[tuple[str, str, str, str], tuple[float, int]] = {}  # key -> (start, gpu index)
        self.cgroup_seen: set[tuple[str, str, str]] = set()
        self.checks = {"agree": 0, "disagree": 0, "no_job": 0, "unmapped_gpu": 0}
        self.unresolved_tokens = 0

    def update(
        self,
        now: float,
        gpus: list[GpuRef],
        mappings: list[JobMapping],
        finished: list[JobMapping],
        processes: list[ProcessSeen] | None,
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        index = {g.uuid: g.index for g in gpus}
        desired: dict[tuple[str, str, str, str], float] = {}
        covered: dict[tuple[str, str], set[str]] = {}
        for m in mappings:
            targets, unresolved = mapping_targets(m, gpus)
            self.unresolved_tokens += len(unresolved)
            for gpu_uuid, mig in targets:
                desired[(gpu_uuid, m.job_id, mig, "prolog")] = (
                    m.start_time if m.start_time is not None else now
                )
                covered.setdefault((gpu_uuid, mig), set()).add(m.job_id)
        events: list[dict[str, Any]] = []
        if processes is not None:
            seen = set()
            for p in processes:
                if p.job_id is None:
                    self.checks["no_job"] += 1
                    continue
                jobs = covered.get((p.gpu_uuid, p.mig_uuid)) or covered.get((p.gpu_uuid, ""))
                if jobs is None:
                    self.checks["unmapped_gpu"] += 1
                    seen.add((p.gpu_uuid, p.job_id, p.mig_uuid))
                elif p.job_id in jobs:
                    self.checks["agree"] += 1
                else:
                    self.checks["disagree"] += 1
                    seen.add((p.gpu_uuid, p.job_id, p.mig_uuid))
                    events.append(
                        {
                            "type": "event",
                            "gpu_uuid": p.gpu_uuid,
                            "event_time": iso(now),
                            "event_type": "attribution_mismatch",
                            "xid": None,
                            "pci_bus_id": None,
                            "source": "cgroup",
                            "detail": f"pid {p.pid} in job {p.job_id}, prolog maps job(s) "
                            f"{','.join(sorted(jobs))}",
                        }
                    )
            self.cgroup_seen = seen
        for gpu_uuid, job, mig in self.cgroup_seen:
            key = (gpu_uuid, job, mig, "cgroup")
            prev = self.open.get(key)
            desired[key] = prev[0] if prev else now
        for key, start in desired.items():
            if key not in self.open:
                self.open[key] = (start, index.get(key[0], -1))
                out.append(self._record(key, start, None, index.get(key[0])))
        ended = {(m.job_id): m.end_time for m in finished}
        for key in list(self.open):
            if key not in desired:
                start, idx = self.open.pop(key)
                end = ended.get(key[1]) if key[3] == "prolog" else None
                out.append(self._record(key, start, end if end is not None else now, idx))
        # Jobs that started and ended while the agent was down: only their `.done` file is left.
        for m in finished:
            for gpu_uuid, mig in mapping_targets(m, gpus)[0]:
                key = (gpu_uuid, m.job_id, mig, "prolog")
                start = m.start_time if m.start_time is not None else (m.end_time or now)
                if not any(r["gpu_uuid"] == gpu_uuid and r["job_id"] == m.job_id for r in out):
                    out.append(self._record(key, start, m.end_time or now, index.get(gpu_uuid)))
        return out + events

    @staticmethod
    def _record(
        key: tuple[str, str, str, str], start: float, end: float | None, idx: int | None
    ) -> dict[str, Any]:
        gpu_uuid, job, mig, source = key
        return {
            "type": "job",
            "gpu_uuid": gpu_uuid,
            "gpu_index": idx,
            "job_id": job,
            "mig_instance": mig,
            "interval_start": iso(start),
            "interval_end": iso(end),
            "source": source,
        }


# ==================================================================================================
# Kernel log (XIDs that never reach NVML), resumed from a saved position
# ==================================================================================================


class KmsgReader:
    """Reads /dev/kmsg without blocking and remembers the last sequence number per boot."""

    def __init__(self, path: str | Path, state_path: Path, boot_id: str, boot_time: float) -> None:
        self.path, self.state_path = str(path), state_path
        self.boot_id, self.boot_time = boot_id, boot_time
        self.fd: int | None = None
        self.buf = b""
        self.disabled = False
        self.last_seq = -1
        self.pending_seq = -1
        try:
            state = json.loads(state_path.read_text())
            if state.get("boot_id") == boot_id:
                self.last_seq = int(state.get("seq", -1))
        except (OSError, ValueError):
            pass
        self.pending_seq = self.last_seq

    def read(self) -> list[KmsgRecord]:
        if self.disabled:
            return []
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as exc:
                log.warning("cannot read %s (%s): kernel XIDs only through NVML events", self.path, exc)
                self.disabled = True
                return []
        out = []
        for _ in range(10000):
            try:
                chunk = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # ring buffer overran us; the next read continues
                    continue
                log.warning("reading %s failed: %s", self.path, exc)
                break
            if not chunk:
                break
            self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        for raw in lines:
            rec = parse_kmsg_record(raw.decode("utf-8", errors="replace"))
            if rec is None or rec.seq <= self.pending_seq:
                continue
            self.pending_seq = rec.seq
            out.append(rec)
        return out

    def event_time(self, rec: KmsgRecord) -> float:
        return self.boot_time + rec.usec / 1e6

    def commit(self) -> None:
        """Save the position once what was read is durably in the spool."""
        if self.pending_seq == self.last_seq:
            return
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"boot_id": self.boot_id, "seq": self.pending_seq}))
            os.replace(tmp, self.state_path)
        except OSError as exc:  # spool disk full/read-only: re-reading later only repeats deduped XIDs
            log.warning("cannot save the kernel log position: %s", exc)
            return
        self.last_seq = self.pending_seq

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def read_boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "unknown"


def read_boot_time(path: str = "/proc/stat") -> float:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0


# ==================================================================================================
# The agent
# ==================================================================================================


@dataclass
class Device:
    """One GPU as the agent knows it."""

    index: int
    handle: Any
    uuid: str
    name: str | None = None
    minor: int | None = None
    bus_id: str | None = None  # normalised
    bus_id_raw: str | None = None  # as NVML prints it
    serial: str | None = None
    mig_mode: bool | None = None
    migs: list[tuple[str, int, int, str | None]] = field(default_factory=list)  # uuid, gi, ci, name
    lost: bool = False
    healthy: bool = True
    reasons: set[str] = field(default_factory=set)
    agg: MinuteAggregator | None = None
    last: Reading | None = None
    xids: dict[int, int] = field(default_factory=dict)
    throttle_seconds_total: float = 0.0

    def ref(self) -> GpuRef:
        return GpuRef(
            self.uuid, self.index, self.minor, self.bus_id, tuple((u, gi, ci) for u, gi, ci, _ in self.migs)
        )

    def identity(self) -> dict[str, Any]:
        return {
            "gpu_uuid": self.uuid,
            "gpu_index": self.index,
            "gpu_minor": self.minor,
            "pci_bus_id": self.bus_id_raw,
            "model": self.name,
        }


def _str(v: Any) -> str:
    return v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)


class Agent:
    """Sampling, aggregation, attribution, events and spooling for one node. Drive it with `tick(now)`."""

    def __init__(
        self,
        nvml: Any,
        *,
        node: str,
        spool_dir: Path,
        mapping_dir: Path | None,
        interval: float = 10.0,
        slow_interval: float = 60.0,
        cluster: str | None = None,
        read_cgroup: Callable[[int], str | None] | None = None,
        proc_root: Path = Path("/proc"),
        kmsg: KmsgReader | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        flush_seconds: float = 60.0,
    ) -> None:
        if interval < 1:
            raise ValueError("interval must be >= 1 second")
        self.nvml, self.node, self.cluster = nvml, node, cluster
        self.spool_dir, self.mapping_dir = Path(spool_dir), mapping_dir
        self.interval, self.slow_interval = float(interval), float(slow_interval)
        self.proc_root = proc_root
        self.flush_seconds = flush_seconds
        self.read_cgroup = read_cgroup or self._read_cgroup
        self.kmsg, self.sleep, self.clock = kmsg, sleep, clock
        self.journal = SpoolJournal(self.spool_dir, node, cluster)
        self.attributor = Attributor()
        self.devices: list[Device] = []
        self.initialized = False
        self.event_set = None
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        self.last_slow: float | None = None
        self.last_init_try: float | None = None
        self.field_errors: dict[tuple[int, str, str], int] = {}
        self.stats = {
            "ticks": 0,
            "tick_seconds_last": 0.0,
            "tick_seconds_total": 0.0,
            "records": 0,
            "nvml_init_failures": 0,
            "xid_duplicates": 0,
            "event_wait_errors": 0,
            "spool_write_errors": 0,
        }
        self.spool_error: str | None = None
        self.recent_xids: dict[tuple[str, int], float] = {}
        self.pending: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.snapshot: dict[str, Any] = {"devices": [], "time": None}
        self.last_sample_time: float | None = None

    # -- errors -------------------------------------------------------------------------------------
    def _err_name(self, exc: Exception) -> str:
        name = type(exc).__name__
        return name.replace("NVMLError_", "") if name.startswith("NVMLError_") else "Other"

    def _call(self, dev: Device | None, fieldname: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; on any NVMLError count it under (gpu, field, error) and return None."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            err = self._err_name(exc)
            key = (dev.index if dev else -1, fieldname, err)
            self.field_errors[key] = self.field_errors.get(key, 0) + 1
            if err == "GpuIsLost" and dev is not None:
                raise _GpuLost() from exc
            return None

    # -- discovery ----------------------------------------------------------------------------------
    def _init(self, now: float) -> bool:
        if self.initialized:
            return True
        if self.last_init_try is not None and now - self.last_init_try < self.slow_interval:
            return False
        self.last_init_try = now
        nv = self.nvml
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            self.stats["nvml_init_failures"] += 1
            log.warning("NVML init failed (%s); retrying every %.0f s", exc, self.slow_interval)
            return False
        self.driver_version = self._call(None, "driver_version", nv.nvmlSystemGetDriverVersion)
        cuda = self._call(None, "cuda_version", nv.nvmlSystemGetCudaDriverVersion)
        self.cuda_version = None if cuda is None else f"{cuda // 1000}.{(cuda % 1000) // 10}"
        self.devices = []
        for i in range(count):
            dev = self._discover(i, now)
            if dev is not None:
                self.devices.append(dev)
        self._register_events()
        self.initialized = True
        return True

    def _discover(self, i: int, now: float) -> Device | None:
        nv = self.nvml
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = _str(nv.nvmlDeviceGetUUID(handle))
        except nv.NVMLError as exc:
            self.pending.append(
                {
                    "type": "event",
                    "gpu_uuid": "",
                    "event_time": iso(now),
                    "event_type": "gpu_lost" if self._err_name(exc) == "GpuIsLost" else "nvml_error",
                    "xid": None,
                    "pci_bus_id": None,
                    "source": "nvml",
                    "detail": f"GPU index {i}: {exc}",
                }
            )
            return None
        dev = Device(i, handle, uuid)
        try:
            dev.name = _opt_str(self._call(dev, "name", nv.nvmlDeviceGetName, handle))
            dev.minor = self._call(dev, "minor_number", nv.nvmlDeviceGetMinorNumber, handle)
            pci = self._call(dev, "pci_info", nv.nvmlDeviceGetPciInfo, handle)
            if pci is not None:
                dev.bus_id_raw = _str(pci.busId).rstrip("\x00")
                dev.bus_id = normalize_bus_id(dev.bus_id_raw)
            dev.serial = _opt_str(self._call(dev, "serial", nv.nvmlDeviceGetSerial, handle))
            self._discover_mig(dev)
        except _GpuLost:
            self._mark_lost(dev, now, "during discovery")
        dev.agg = MinuteAggregator(dev.identity(), self.interval, self.flush_seconds)
        return dev

    def _discover_mig(self, dev: Device) -> None:
        nv = self.nvml
        mode = self._call(dev, "mig_mode", nv.nvmlDeviceGetMigMode, dev.handle)
        dev.mig_mode = None if mode is None else bool(mode[0])
        dev.migs = []
        if not dev.mig_mode:
            return
        count = self._call(dev, "mig_mode", nv.nvmlDeviceGetMaxMigDeviceCount, dev.handle) or 0
        for j in range(count):
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(dev.handle, j)
            except nv.NVMLError:
                continue  # NotFound: no instance in this slot
            u = self._call(dev, "mig_uuid", nv.nvmlDeviceGetUUID, mh)
            gi = self._call(dev, "mig_ids", nv.nvmlDeviceGetGpuInstanceId, mh)
            ci = self._call(dev, "mig_ids", nv.nvmlDeviceGetComputeInstanceId, mh)
            name = self._call(dev, "name", nv.nvmlDeviceGetName, mh)
            if u is not None and gi is not None and ci is not None:
                dev.migs.append((_str(u), int(gi), int(ci), _opt_str(name)))

    def _register_events(self) -> None:
        nv = self.nvml
        try:
            self.event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            log.warning("NVML events unavailable (%s): XIDs only from the kernel log", exc)
            self.event_set = None
            return
        for dev in self.devices:
            if dev.lost:
                continue
            try:
                self._call(
                    dev,
                    "events",
                    nv.nvmlDeviceRegisterEvents,
                    dev.handle,
                    nv.nvmlEventTypeXidCriticalError,
                    self.event_set,
                )
            except _GpuLost:
                pass

    def inventory_records(self, now: float) -> list[dict[str, Any]]:
        out = []
        for d in self.devices:
            out.append(
                {
                    "type": "inventory",
                    "gpu_uuid": d.uuid,
                    "seen_at": iso(now),
                    "gpu_index": d.index,
                    "gpu_minor": d.minor,
                    "pci_bus_id": d.bus_id_raw,
                    "model": d.name,
                    "serial": d.serial,
                    "driver_version": self.driver_version,
                    "cuda_version": self.cuda_version,
                    "mig_mode": d.mig_mode,
                }
            )
            for u, gi, ci, name in d.migs:
                out.append(
                    {
                        "type": "inventory",
                        "gpu_uuid": u,
                        "seen_at": iso(now),
                        "gpu_index": d.index,
                        "gpu_minor": d.minor,
                        "pci_bus_id": d.bus_id_raw,
                        "model": name or f"{d.name} MIG {gi}/{ci}",
                        "serial": d.serial,
                        "driver_version": self.driver_version,
                        "cuda_version": self.cuda_version,
                        "mig_mode": True,
                    }
                )
        return out

    # -- health -------------------------------------------------------------------------------------
    def _event(
        self,
        now: float,
        dev: Device | None,
        event_type: str,
        *,
        xid: int | None = None,
        source: str = "nvml",
        detail: str = "",
        bus: str | None = None,
    ) -> dict[str, Any]:
        rec = {
            "type": "event",
            "gpu_uuid": dev.uuid if dev else "",
            "event_time": iso(now),
            "event_type": event_type,
            "xid": xid,
            "pci_bus_id": bus or (dev.bus_id_raw if dev else None),
            "source": source,
            "detail": detail,
        }
        self.pending.append(rec)
        return rec

    def _unhealthy(self, dev: Device, now: float, reason: str, source: str) -> None:
        was = dev.healthy
        dev.reasons.add(reason)
        dev.healthy = False
        if was:
            self._event(now, dev, "health", source=source, detail=f"unhealthy: {reason}")

    def _mark_lost(self, dev: Device, now: float, detail: str = "") -> None:
        if dev.lost:
            return
        dev.lost = True
        self._event(now, dev, "gpu_lost", detail=("GPU is lost " + detail).strip())
        self._unhealthy(dev, now, "gpu lost", "nvml")

    def handle_xid(
        self, now: float, dev: Device | None, xid: int, source: str, detail: str = "", bus: str | None = None
    ) -> None:
        key = (dev.uuid if dev else (bus or ""), xid)
        last = self.recent_xids.get(key)
        if last is not None and abs(now - last) < XID_DEDUP_SECONDS:
            self.stats["xid_duplicates"] += 1
            return
        self.recent_xids[key] = now
        self._event(now, dev, "xid", xid=xid, source=source, detail=detail, bus=bus)
        if dev is not None:
            dev.xids[xid] = dev.xids.get(xid, 0) + 1
            if xid in CRITICAL_XIDS:
                self._unhealthy(dev, now, f"xid {xid}", source)

    # -- sampling -----------------------------------------------------------------------------------
    def _sample(self, dev: Device, now: float, slow: bool) -> Reading:
        nv, h = self.nvml, dev.handle
        r = Reading(time=now)
        before = sum(self.field_errors.values())
        u = self._call(dev, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        if u is not None:
            r.util_gpu, r.util_mem = float(u.gpu), float(u.memory)
        m = self._call(dev, "memory_info", nv.nvmlDeviceGetMemoryInfo, h)
        if m is not None:
            r.mem_used, r.mem_total = int(m.used), int(m.total)
        p = self._call(dev, "power", nv.nvmlDeviceGetPowerUsage, h)
        r.power_w = None if p is None else p / 1000.0
        r.energy_mj = self._call(dev, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, h)
        r.temp_gpu = self._call(dev, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        fv = self._call(
            dev, "memory_temperature", nv.nvmlDeviceGetFieldValues, h, [nv.NVML_FI_DEV_MEMORY_TEMP]
        )
        if fv is not None:
            v = fv[0]
            if v.nvmlReturn == nv.NVML_SUCCESS:
                r.temp_mem = float(v.value.uiVal)
            else:
                err = {3: "NotSupported", 4: "NoPermission", 15: "GpuIsLost"}.get(v.nvmlReturn, "Other")
                key = (dev.index, "memory_temperature", err)
                self.field_errors[key] = self.field_errors.get(key, 0) + 1
        r.sm_clock = self._call(dev, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        r.mem_clock = self._call(dev, "mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        r.reasons = self._clock_reasons(dev)
        r.pcie_replay = self._call(dev, "pcie_replay", nv.nvmlDeviceGetPcieReplayCounter, h)
        if slow:
            corr = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
            unc = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            r.ecc_corr_vol = self._call(
                dev, "ecc", nv.nvmlDeviceGetTotalEccErrors, h, corr, nv.NVML_VOLATILE_ECC
            )
            if r.ecc_corr_vol is not None:
                r.ecc_unc_vol = self._call(
                    dev, "ecc", nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_VOLATILE_ECC
                )
                r.ecc_corr_agg = self._call(
                    dev, "ecc", nv.nvmlDeviceGetTotalEccErrors, h, corr, nv.NVML_AGGREGATE_ECC
                )
                r.ecc_unc_agg = self._call(
                    dev, "ecc", nv.nvmlDeviceGetTotalEccErrors, h, unc, nv.NVML_AGGREGATE_ECC
                )
            rows = self._call(dev, "remapped_rows", nv.nvmlDeviceGetRemappedRows, h)
            if rows is not None:
                r.remapped_pending, r.remapped_failed = bool(rows[2]), bool(rows[3])
            pages = self._call(
                dev,
                "retired_pages",
                nv.nvmlDeviceGetRetiredPages,
                h,
                nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            )
            if pages is not None:
                dbe = self._call(
                    dev,
                    "retired_pages",
                    nv.nvmlDeviceGetRetiredPages,
                    h,
                    nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
                )
                r.retired_pages = len(pages) + len(dbe or [])
            r.nvlink_errors = self._nvlink_errors(dev)
            self._check_slow_health(dev, r, now)
        r.errors = sum(self.field_errors.values()) - before
        return r

    def _clock_reasons(self, dev: Device) -> int | None:
        """Clock-event reasons; drivers before R535 only have the older ...ThrottleReasons name."""
        nv = self.nvml
        try:
            return nv.nvmlDeviceGetCurrentClocksEventReasons(dev.handle)
        except nv.NVMLError as exc:
            err = self._err_name(exc)
            if err == "GpuIsLost":
                raise _GpuLost() from exc
            if err == "FunctionNotFound" and hasattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons"):
                return self._call(
                    dev, "clock_event_reasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons, dev.handle
                )
            key = (dev.index, "clock_event_reasons", err)
            self.field_errors[key] = self.field_errors.get(key, 0) + 1
            return None

    def _nvlink_errors(self, dev: Device) -> int | None:
        nv, total, links = self.nvml, 0, 0
        counters = (
            nv.NVML_NVLINK_ERROR_DL_REPLAY,
            nv.NVML_NVLINK_ERROR_DL_RECOVERY,
            nv.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            nv.NVML_NVLINK_ERROR_DL_CRC_DATA,
        )
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                nv.nvmlDeviceGetNvLinkState(dev.handle, link)
            except nv.NVMLError as exc:
                if self._err_name(exc) == "GpuIsLost":
                    raise _GpuLost() from exc
                if link == 0:
                    key = (dev.index, "nvlink", self._err_name(exc))
                    self.field_errors[key] = self.field_errors.get(key, 0) + 1
                    return None
                break  # past the last link
            links += 1
            for c in counters:
                v = self._call(dev, "nvlink", nv.nvmlDeviceGetNvLinkErrorCounter, dev.handle, link, c)
                total += v or 0
        return total if links else None

    def _check_slow_health(self, dev: Device, r: Reading, now: float) -> None:
        prev = dev.last
        if r.remapped_failed:
            self._unhealthy(dev, now, "row remapping failed", "nvml")
        if r.remapped_pending and not (prev and prev.remapped_pending):
            self._event(now, dev, "ecc", detail="row remapping pending (reset required)")
        if (
            r.ecc_unc_vol is not None
            and prev is not None
            and prev.ecc_unc_vol is not None
            and r.ecc_unc_vol > prev.ecc_unc_vol
        ):
            self._event(now, dev, "ecc", detail=f"uncorrected ECC errors +{r.ecc_unc_vol - prev.ecc_unc_vol}")

    # -- processes / attribution -------------------------------------------------------------------
    def _read_cgroup(self, pid: int) -> str | None:
        try:
            return (self.proc_root / str(pid) / "cgroup").read_text()
        except OSError:
            return None

    def _processes(self) -> list[ProcessSeen]:
        out = []
        for dev in self.devices:
            if dev.lost:
                continue
            try:
                procs = self._call(
                    dev, "processes", self.nvml.nvmlDeviceGetComputeRunningProcesses, dev.handle
                )
            except _GpuLost:
                continue
            for p in procs or []:
                mig = ""
                gi = getattr(p, "gpuInstanceId", 0xFFFFFFFF)
                ci = getattr(p, "computeInstanceId", 0xFFFFFFFF)
                if dev.migs and gi != 0xFFFFFFFF:
                    mig = next(
                        (u for u, a, b, _ in dev.migs if a == gi and (b == ci or ci == 0xFFFFFFFF)), ""
                    )
                text = self.read_cgroup(int(p.pid))
                out.append(ProcessSeen(dev.uuid, mig, int(p.pid), parse_cgroup_job(text) if text else None))
        return out

    def _mappings(self) -> tuple[list[JobMapping], list[tuple[Path, JobMapping]]]:
        active, finished = [], []
        if self.mapping_dir is None or not self.mapping_dir.is_dir():
            return active, finished
        for entry in os.scandir(self.mapping_dir):
            if not entry.is_file() or entry.name.startswith("."):
                continue
            try:
                m = parse_mapping(Path(entry.path).read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            if m is None:
                continue
            if entry.name.endswith(".done"):
                finished.append((Path(entry.path), m))
            else:
                if m.start_time is None:
                    m = JobMapping(m.job_id, entry.stat().st_mtime, m.devices, m.pci_bus_ids)
                active.append(m)
        return active, finished

    # -- the loop body ------------------------------------------------------------------------------
    def recover(self) -> list[Path]:
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        return SpoolJournal.recover(self.spool_dir)

    def tick(self, now: float) -> None:
        """One sampling round at time `now`: sample, aggregate, attribute, read the kernel log, spool."""
        t0 = time.perf_counter()
        if self.journal.due(now):
            if self.spool_error is None:  # once per hour, not on every retry of a failing close
                self._flush_partial_minutes()
            self._write(now)
            try:
                self.journal.close()
            except OSError as exc:
                self._spool_failed(exc)
        if self.journal.name is None:
            try:
                self.journal.open(now)
            except OSError as exc:
                self._spool_failed(exc)
            else:
                if self.initialized:
                    self.pending.extend(self.inventory_records(now))
        if not self.initialized:
            if self._init(now):
                self.pending.extend(self.inventory_records(now))
        slow = self.last_slow is None or now - self.last_slow >= self.slow_interval - 1e-6
        if slow:
            self.last_slow = now
        for dev in self.devices:
            if dev.lost:
                if slow:
                    self._probe_lost(dev, now)
                continue
            try:
                r = self._sample(dev, now, slow)
            except _GpuLost:
                self._mark_lost(dev, now)
                continue
            self.pending.extend(dev.agg.add(r))
            if not slow and dev.last is not None:
                for key in SLOW_FIELDS:  # metrics show the last slow reading between slow rounds
                    if getattr(r, key) is None:
                        setattr(r, key, getattr(dev.last, key))
            dev.last = r
            if r.reasons is not None and r.reasons & THROTTLE_MASK:
                dev.throttle_seconds_total += self.interval
        if self.initialized:
            active, finished = self._mappings()
            procs = self._processes() if slow else None
            self.pending.extend(
                self.attributor.update(
                    now, [d.ref() for d in self.devices], active, [m for _, m in finished], procs
                )
            )
        else:
            finished = []
        self._read_kmsg(now)
        wrote = self._write(now)
        if wrote:
            for path, _ in finished:
                path.unlink(missing_ok=True)
            if self.kmsg is not None:
                self.kmsg.commit()
        try:
            prune_acked(self.spool_dir)
        except OSError as exc:
            log.warning("cannot prune acknowledged spool files: %s", exc)
        self.last_sample_time = now
        dt = time.perf_counter() - t0
        self.stats["ticks"] += 1
        self.stats["tick_seconds_last"] = dt
        self.stats["tick_seconds_total"] += dt
        self._update_snapshot(now)

    def _probe_lost(self, dev: Device, now: float) -> None:
        try:
            self.nvml.nvmlDeviceGetUUID(dev.handle)
        except self.nvml.NVMLError:
            return
        dev.lost = False
        self._event(now, dev, "gpu_recovered", detail="NVML answers again; health stays bad until restart")

    def _read_kmsg(self, now: float) -> None:
        if self.kmsg is None:
            return
        for rec in self.kmsg.read():
            x = parse_xid(rec.message)
            if x is None:
                continue
            dev = next(
                (d for d in self.devices if d.bus_id and x.pci_bus_id and d.bus_id == x.pci_bus_id), None
            )
            self.handle_xid(self.kmsg.event_time(rec), dev, x.xid, "kmsg", x.detail, bus=x.pci_bus_id)
        if self.kmsg.pending_seq != self.kmsg.last_seq and not self.pending:
            self.kmsg.commit()  # only non-XID lines were read: nothing to make durable first

    def _write(self, now: float) -> bool:
        if not self.pending:
            return False
        try:
            if self.journal.name is None:
                self.journal.open(now)
            self.journal.append(self.pending)
        except OSError as exc:
            self._spool_failed(exc)
            return False  # records stay pending (in memory) and are retried on the next write
        self.stats["records"] += len(self.pending)
        self.pending = []
        self.spool_error = None
        return True

    def _spool_failed(self, exc: OSError) -> None:
        """Spool directory full or read-only: keep sampling, hold records in memory, say so in /metrics."""
        self.stats["spool_write_errors"] += 1
        if self.spool_error is None:
            log.error(
                "cannot write the spool in %s (%s); holding records in memory and retrying",
                self.spool_dir,
                exc,
            )
        self.spool_error = exc.strerror or str(exc)

    def _flush_partial_minutes(self) -> None:
        for dev in self.devices:
            if dev.agg is not None:
                rec = dev.agg.flush()
                if rec:
                    self.pending.append(rec)

    def close(self, now: float) -> Path | None:
        """Graceful stop: write the partial minute and close the hour's file (the loader merges minutes)."""
        self._flush_partial_minutes()
        wrote = self._write(now)
        if self.kmsg is not None:
            if wrote or not self.pending:  # never move past kernel XIDs that did not reach the spool
                self.kmsg.commit()
            self.kmsg.close()
        try:
            out = self.journal.close()
        except OSError as exc:
            self._spool_failed(exc)
            log.error(
                "stopping with the spool unwritable: %d records held in memory are lost; the journal %s "
                "keeps everything written before and is closed at the next start",
                len(self.pending),
                self.journal.path,
            )
            out = None
        if self.initialized:
            try:
                if self.event_set is not None:
                    self.nvml.nvmlEventSetFree(self.event_set)
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass
        return out

    def wait_events(self, until: float) -> None:
        """Sleep until `until`, handling NVML XID events as they arrive (nvmlEventSetWait's timeout)."""
        nv = self.nvml
        while True:
            now = self.clock()
            remaining = until - now
            if remaining <= 0:
                return
            if self.event_set is None:
                self.sleep(remaining)
                return
            try:
                data = nv.nvmlEventSetWait(self.event_set, max(1, int(remaining * 1000)))
            except nv.NVMLError as exc:
                if self._err_name(exc) != "Timeout":
                    self.stats["event_wait_errors"] += 1
                    self.sleep(max(0.0, until - self.clock()))
                continue
            self.on_nvml_event(self.clock(), data)

    def on_nvml_event(self, now: float, data: Any) -> None:
        if not data.eventType & self.nvml.nvmlEventTypeXidCriticalError:
            return
        key = _handle_key(data.device)
        dev = next((d for d in self.devices if _handle_key(d.handle) == key), None)
        gi = getattr(data, "gpuInstanceId", 0xFFFFFFFF)
        detail = (
            ""
            if gi in (0xFFFFFFFF, None)
            else f"gpu instance {gi}, compute instance {data.computeInstanceId}"
        )
        with self.lock:
            self.handle_xid(now, dev, int(data.eventData), "nvml", detail)
            self._write(now)

    # -- metrics snapshot ---------------------------------------------------------------------------
    def _update_snapshot(self, now: float) -> None:
        devs = []
        for d in self.devices:
            r = d.last
            devs.append(
                {
                    "labels": {"node": self.node, "gpu": str(d.index), "uuid": d.uuid, "model": d.name or ""},
                    "reading": None if (r is None or d.lost) else r,
                    "healthy": d.healthy,
                    "lost": d.lost,
                    "xids": dict(d.xids),
                    "mig": bool(d.mig_mode),
                    "throttle_total": d.throttle_seconds_total,
                    "driver": self.driver_version or "",
                    "cuda": self.cuda_version or "",
                }
            )
        self.snapshot = {
            "devices": devs,
            "time": now,
            "errors": dict(self.field_errors),
            "stats": {**self.stats, "pending_records": len(self.pending)},
            "checks": dict(self.attributor.checks),
            "initialized": self.initialized,
        }


class _GpuLost(Exception):
    """Internal: an NVML call said the GPU is gone."""


def _opt_str(v: Any) -> str | None:
    return None if v is None else _str(v).rstrip("\x00")


def _handle_key(h: Any) -> Any:
    """Identity of a device handle: the pointer value for real pynvml handles, the object for fakes."""
    try:
        import ctypes

        return ctypes.cast(h, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return (id(getattr(h, "gpu", h)), getattr(h, "index", None), getattr(h, "mig", None))


# ==================================================================================================
# /metrics (node-local; no job label) and the spool endpoints
# ==================================================================================================


AGENT_SOURCE = "agent"
"""`source` label of the agent's slurmscope_gpu_* series; the central exporter's copies say "central"."""


def metric_families(agent: Agent) -> list[Any]:
    """Map the agent's last snapshot to Prometheus families. Computes nothing; null fields are omitted.

    Every series carries `cluster` (config cluster.name) so that one Prometheus can watch several clusters;
    the slurmscope_gpu_* series also carry `source="agent"`, because the central exporter serves some of the
    same names from the ingested spool (`source="central"`) and the two must never be added together.
    """
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    snap = agent.snapshot
    cluster = agent.cluster or ""
    base = ["node", "gpu", "uuid", "model"]
    names = ["cluster", *base, "source"]
    fams: dict[str, Any] = {}

    def g(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
        if name not in fams:
            fams[name] = GaugeMetricFamily(name, doc, labels=names + list(extra))
        return fams[name]

    def c(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
        if name not in fams:
            fams[name] = CounterMetricFamily(name, doc, labels=names + list(extra))
        return fams[name]

    gauges = [
        (
            "slurmscope_gpu_utilization_ratio",
            "GPU busy fraction (NVML utilisation.gpu / 100).",
            "util_gpu",
            0.01,
        ),
        ("slurmscope_gpu_memory_utilization_ratio", "Memory controller busy fraction.", "util_mem", 0.01),
        ("slurmscope_gpu_memory_used_bytes", "Framebuffer memory in use.", "mem_used", 1),
        ("slurmscope_gpu_memory_total_bytes", "Framebuffer memory size.", "mem_total", 1),
        ("slurmscope_gpu_power_watts", "Power draw.", "power_w", 1),
        ("slurmscope_gpu_temperature_celsius", "GPU core temperature.", "temp_gpu", 1),
        ("slurmscope_gpu_memory_temperature_celsius", "HBM temperature.", "temp_mem", 1),
        ("slurmscope_gpu_sm_clock_hertz", "SM clock.", "sm_clock", 1e6),
        ("slurmscope_gpu_memory_clock_hertz", "Memory clock.", "mem_clock", 1e6),
        (
            "slurmscope_gpu_clock_event_reasons",
            "Bitmask of active clock-event (throttle) reasons.",
            "reasons",
            1,
        ),
        (
            "slurmscope_gpu_remapped_rows_pending",
            "1 when a row remapping awaits a GPU reset.",
            "remapped_pending",
            1,
        ),
        ("slurmscope_gpu_remapped_rows_failed", "1 when a row remapping failed.", "remapped_failed", 1),
        ("slurmscope_gpu_retired_pages", "Retired framebuffer pages (pre-Ampere).", "retired_pages", 1),
    ]
    counters = [
        ("slurmscope_gpu_energy_joules", "Energy since driver load (NVML counter).", "energy_mj", 1e-3),
        ("slurmscope_gpu_pcie_replay", "PCIe replays since reset.", "pcie_replay", 1),
        ("slurmscope_gpu_nvlink_errors", "NVLink replay+recovery+CRC errors, all links.", "nvlink_errors", 1),
    ]
    for d in snap["devices"]:
        labels = [cluster, *(d["labels"][k] for k in base), AGENT_SOURCE]
        g("slurmscope_gpu_info", "GPU identity; value 1.", ("driver_version", "cuda_version")).add_metric(
            labels + [d["driver"], d["cuda"]], 1
        )
        g("slurmscope_gpu_healthy", "0 after a critical XID, a lost GPU or a failed row remap.").add_metric(
            labels, 1 if d["healthy"] else 0
        )
        g("slurmscope_gpu_lost", "1 while NVML reports the GPU lost.").add_metric(
            labels, 1 if d["lost"] else 0
        )
        g("slurmscope_gpu_mig_enabled", "1 when MIG mode is on.").add_metric(labels, 1 if d["mig"] else 0)
        c(
            "slurmscope_gpu_throttle_seconds", "Seconds with a power/thermal clock-event reason active."
        ).add_metric(labels, d["throttle_total"])
        xf = c("slurmscope_gpu_xid_errors", "XID errors seen by this agent since it started.", ("xid",))
        for xid, n in sorted(d["xids"].items()):
            xf.add_metric(labels + [str(xid)], n)
        r = d["reading"]
        if r is None:
            continue
        for name, doc, attr, scale in gauges:
            v = getattr(r, attr)
            if v is not None:
                g(name, doc).add_metric(labels, float(v) * scale)
        for name, doc, attr, scale in counters:
            v = getattr(r, attr)
            if v is not None:
                c(name, doc).add_metric(labels, float(v) * scale)
        for kind, attr in (("corrected", "ecc_corr_agg"), ("uncorrected", "ecc_unc_agg")):
            v = getattr(r, attr)
            if v is not None:
                c("slurmscope_gpu_ecc_errors", "Aggregate ECC errors.", ("type",)).add_metric(
                    labels + [kind], v
                )
    by_index = {
        d["labels"]["gpu"]: [cluster, *(d["labels"][k] for k in base), AGENT_SOURCE] for d in snap["devices"]
    }
    ef = c(
        "slurmscope_gpu_field_errors",
        "NVML calls that failed, by field and error (field left null).",
        ("field", "error"),
    )
    for (idx, fieldname, err), n in sorted(snap.get("errors", {}).items()):
        labels = by_index.get(str(idx), [cluster, agent.node, str(idx), "", "", AGENT_SOURCE])
        ef.add_metric(labels + [fieldname, err], n)
    out = list(fams.values())
    stats = snap.get("stats", {})
    up = GaugeMetricFamily(
        "slurmscope_agent_nvml_up", "1 when NVML is initialised.", labels=["cluster", "node"]
    )
    up.add_metric([cluster, agent.node], 1 if snap.get("initialized") else 0)
    last = GaugeMetricFamily(
        "slurmscope_agent_last_sample_timestamp_seconds",
        "Time of the last sample.",
        labels=["cluster", "node"],
    )
    if snap.get("time") is not None:
        last.add_metric([cluster, agent.node], snap["time"])
    dur = GaugeMetricFamily(
        "slurmscope_agent_sample_duration_seconds",
        "Wall time of the last sampling round.",
        labels=["cluster", "node"],
    )
    dur.add_metric([cluster, agent.node], stats.get("tick_seconds_last", 0.0))
    pend = GaugeMetricFamily(
        "slurmscope_agent_spool_files", "Closed spool files not yet acknowledged.", labels=["cluster", "node"]
    )
    pend.add_metric([cluster, agent.node], count_spool(agent.spool_dir))
    sw = CounterMetricFamily(
        "slurmscope_agent_spool_write_errors",
        "Spool writes that failed (directory full or read-only); records are kept in memory.",
        labels=["cluster", "node"],
    )
    sw.add_metric([cluster, agent.node], stats.get("spool_write_errors", 0))
    held = GaugeMetricFamily(
        "slurmscope_agent_spool_pending_records",
        "Records held in memory because the spool could not be written.",
        labels=["cluster", "node"],
    )
    held.add_metric([cluster, agent.node], stats.get("pending_records", 0))
    chk = CounterMetricFamily(
        "slurmscope_agent_attribution_checks",
        "Process cgroup vs prolog mapping checks.",
        labels=["cluster", "node", "result"],
    )
    for res, n in sorted(snap.get("checks", {}).items()):
        chk.add_metric([cluster, agent.node, res], n)
    return out + [up, last, dur, pend, sw, held, chk]


class _Collector:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self):  # noqa: ANN201 - prometheus_client protocol
        yield from metric_families(self.agent)


class _Handler(BaseHTTPRequestHandler):
    server_version = "slurmscope-agent"
    agent: Agent
    registry: Any
    auth: Any = None

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("http: " + fmt, *args)

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _denied(self) -> bool:
        """Every endpoint but /healthz needs the web config's credentials: /spool/<file>/ack deletes data."""
        if (
            urlparse(self.path).path == "/healthz"
            or self.auth is None
            or self.auth.check(self.headers.get("Authorization"))
        ):
            return False
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="slurmscope-agent"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def do_GET(self) -> None:  # noqa: N802
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if self._denied():
            return
        path = urlparse(self.path).path
        spool = self.agent.spool_dir
        if path == "/metrics":
            self._send(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        elif path in ("/spool", "/spool/"):
            body = json.dumps({"node": self.agent.node, "files": list_spool(spool)}).encode()
            self._send(200, body, "application/json")
        elif path.startswith("/spool/"):
            name = unquote(path[len("/spool/") :])
            p = spool / name
            if "/" in name or name.startswith(".") or not name.endswith(".jsonl") or not p.is_file():
                self._send(404, b"no such spool file\n")
                return
            self._send(200, p.read_bytes(), "application/x-ndjson")
        elif path == "/healthz":
            self._send(200, b"ok\n")
        else:
            self._send(404, b"not found\n")

    def do_POST(self) -> None:  # noqa: N802
        if self._denied():
            return
        url = urlparse(self.path)
        m = re.fullmatch(r"/spool/([^/]+)/ack", url.path)
        if not m:
            self._send(404, b"not found\n")
            return
        sha = (parse_qs(url.query).get("sha256") or [None])[0]
        result = ack_file(self.agent.spool_dir, unquote(m.group(1)), sha)
        code = {"deleted": HTTPStatus.OK, "absent": HTTPStatus.OK, "mismatch": HTTPStatus.CONFLICT}[result]
        self._send(int(code), (result + "\n").encode())


def start_http(
    agent: Agent, address: str, port: int, web_config: str | Path | None = None
) -> ThreadingHTTPServer:
    """/metrics, /spool, /healthz from a daemon thread; TLS and basic auth from an exporter-toolkit web config."""
    from prometheus_client import CollectorRegistry

    from slurmscope.webconfig import BasicAuth, WebConfig, load_web_config, server_context

    wc = load_web_config(web_config) if web_config else WebConfig()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(agent))
    auth = BasicAuth(wc.users) if wc.users else None
    handler = type("Handler", (_Handler,), {"agent": agent, "registry": registry, "auth": auth})
    server = ThreadingHTTPServer((address, port), handler)
    server.daemon_threads = True
    ctx = server_context(wc)
    if ctx is not None:
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    if not wc.users and address not in ("127.0.0.1", "::1", "localhost"):
        log.warning(
            "agent on %s:%d without basic auth: anyone who reaches the port can acknowledge (delete) "
            "spool files; set nvml.web_config_file",
            address,
            port,
        )
    threading.Thread(target=server.serve_forever, name="agent-http", daemon=True).start()
    return server


# ==================================================================================================
# Entry point
# ==================================================================================================


def run_agent(
    cfg: Any,
    *,
    port: int | None = None,
    spool: str | None = None,
    interval: float | None = None,
    fake: str | None = None,
    address: str = "0.0.0.0",
    node: str | None = None,  # noqa: S104
    stop: threading.Event | None = None,
    kmsg_path: str = "/dev/kmsg",
    flush_seconds: float = 60.0,
    web_config: str | None = None,
) -> None:
    """`slurmscope agent`: sample every `interval` seconds until SIGTERM/SIGINT (or `stop` is set)."""
    import signal

    interval = float(interval if interval is not None else cfg.get("nvml", "interval_seconds"))
    if interval < 1:
        import click

        raise click.BadParameter(f"must be >= 1 second, got {interval:g}", param_hint="--interval")
    slow = float(cfg.get("nvml", "slow_interval_seconds"))
    port = int(port if port is not None else cfg.get("nvml", "port"))
    spool_dir = Path(spool or cfg.get("nvml", "spool_dir"))
    mapping_dir = Path(cfg.get("nvml", "mapping_dir"))
    read_cgroup = None
    if fake:
        from slurmscope.collectors.fake_nvml import fake_from_spec, load_spec

        spec = load_spec(fake)
        nvml = fake_from_spec(spec, clock=time.time, sleep=time.sleep)
        node = node or spec.get("node")
        if spec.get("mapping_dir"):
            mapping_dir = Path(spec["mapping_dir"])
        cgroups = {int(k): v for k, v in spec.get("proc_cgroups", {}).items()}
        if cgroups:

            def read_cgroup(pid: int) -> str | None:
                return cgroups.get(pid)

        kmsg_path = spec.get("kmsg_path", kmsg_path)
    else:
        import pynvml as nvml
    node = node or socket.gethostname().split(".")[0]
    spool_dir.mkdir(parents=True, exist_ok=True)
    kmsg = KmsgReader(kmsg_path, spool_dir / ".kmsg-position.json", read_boot_id(), read_boot_time())
    agent = Agent(
        nvml,
        node=node,
        spool_dir=spool_dir,
        mapping_dir=mapping_dir,
        interval=interval,
        slow_interval=slow,
        cluster=cfg.cluster,
        read_cgroup=read_cgroup,
        kmsg=kmsg,
        flush_seconds=flush_seconds,
    )
    try:
        recovered = agent.recover()
    except OSError as exc:  # read-only or full spool: run anyway; the journals stay for the next start
        recovered = []
        log.error("cannot close the spool journals left in %s (%s); sampling anyway", spool_dir, exc)
    if recovered:
        log.warning("closed %d spool journal(s) left by a previous run", len(recovered))
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    server = start_http(agent, address, port, web_config or cfg.get("nvml", "web_config_file") or None)
    log.info("agent on %s:%d, node %s, spool %s, interval %.1f s", address, port, node, spool_dir, interval)
    try:
        while not stop.is_set():
            now = time.time()
            with agent.lock:
                agent.tick(now)
            nxt = (math.floor(now / interval) + 1) * interval
            while not stop.is_set() and time.time() < nxt:
                agent.wait_events(min(nxt, time.time() + 1.0))
    finally:
        server.shutdown()
        with agent.lock:
            agent.close(time.time())
