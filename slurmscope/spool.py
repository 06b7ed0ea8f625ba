"""The NVML spool format (version 3; versions 1 and 2 still read): what a node agent writes and the collector reads.

Both sides import this one module, so the writer and the reader cannot drift apart; docs/nvml.md defines
the format. A file is JSON Lines: a header, one record per line, a footer with the record count and the
sha256 of every byte before it. A file without its footer is never accepted, so a crash mid-write can
leave nothing the loader would take as complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SPOOL_FORMAT = "slurmscope-nvml-spool"
SPOOL_VERSION = 3
READ_VERSIONS = (1, 2, 3)
"""Agents not yet upgraded keep writing version 1 or 2 during a rolling upgrade; their files load with the
meaning their version documented (upgrade_v1_sample; a version 2 sample lacks only keys version 3 added, which
load as null: not read)."""
RECORD_TYPES = ("sample", "event", "job", "inventory", "nvlink")

# NVLink data-link error counters (nvmlNvLinkErrorCounter_t: NVML_NVLINK_ERROR_DL_CRC_FLIT, _DL_CRC_DATA,
# _DL_REPLAY, _DL_RECOVERY), read per link. Version 3 keeps per GPU and minute the sum over links of each
# counter's rise (`nvlink_<counter>_delta`) and of the raw counters (`nvlink_<counter>_total`), and one `nvlink`
# record per link and minute in which a counter rose (links without errors write nothing).
NVLINK_COUNTERS = ("crc_flit", "crc_data", "replay", "recovery")

# NVML's violation-time counters (nvmlDeviceGetViolationStatus, nvmlPerfPolicyType_t): how long each policy held
# the GPU below its application clocks, as `violation_<policy>_seconds` per minute. NVIDIA does not label them
# hardware or software; slurmscope counts as a fault only the two limits of the board itself, which neither the
# site's settings nor the workload explain: board limit and board reliability limit. Power is the configured
# power limit (the at-power-cap state of a training job), thermal includes the driver's software thermal target
# (the hardware part is the HW thermal clock-event reason above), sync boost a configured sync-boost group and
# low utilisation the workload: reported, never a fault.
VIOLATION_POLICIES = ("power", "thermal", "sync_boost", "board_limit", "low_util", "reliability")
HW_VIOLATIONS = ("board_limit", "reliability")

# GPM (GPU Performance Monitoring, Hopper and newer: nvmlGpmQueryDeviceSupport, nvmlGpmMetricsGet) profiling
# fields, as `<name>_mean` percent over the minute's `gpm_samples` readings: SM activity (NVML_GPM_METRIC_SM_UTIL,
# "percentage of SMs that were busy"), SM occupancy (NVML_GPM_METRIC_SM_OCCUPANCY, "warps that were active vs
# theoretical maximum"), tensor activity (NVML_GPM_METRIC_ANY_TENSOR_UTIL) and DRAM activity
# (NVML_GPM_METRIC_DRAM_BW_UTIL, "DRAM bw used vs theoretical maximum"). `activity_source` names what a minute's
# activity comes from: 'gpm' (SM activity) or 'gpu_util' (NVML utilisation.gpu, where GPM is not supported).
GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")


def activity_source(gpm_samples: int | None, util_gpu_mean: float | None) -> str | None:
    """'gpm' when the minute has GPM readings, else 'gpu_util' when it has GPU_UTIL, else None."""
    if gpm_samples:
        return "gpm"
    return None if util_gpu_mean is None else "gpu_util"


# Clock-event reasons per cause (NVML nvmlClocksEventReasons,
# https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html): the sample record counts the
# seconds each was active as `<cause>_seconds`. Only the hardware causes are a fault: HW slowdown ("reducing
# the core clocks by a factor of 2 or more": temperature too high, external power brake, power draw too high
# for fast-trigger protection), HW thermal slowdown and HW power brake slowdown. SW power cap ("the clocks
# have been optimized to ensure not to exceed currently set power limits") is a GPU running at its power
# limit, the normal state of a busy training job, and SW thermal slowdown the driver holding clocks below
# the thermal target: both are reported, never a fault. Idle (0x1), application clocks (0x2), sync boost
# (0x10) and display clocks (0x100) are not counted.
CLOCK_EVENT_CAUSES: dict[str, int] = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}
HW_THROTTLE_MASK = 0x8 | 0x40 | 0x80
"""Version 2 `throttle_seconds`: seconds with any hardware cause active."""
SW_CLOCK_MASK = 0x4 | 0x20
V1_THROTTLE_MASK = HW_THROTTLE_MASK | SW_CLOCK_MASK
"""Version 1 `throttle_seconds`: seconds with any of the five causes active, software ones included."""


def upgrade_v1_sample(rec: dict[str, Any]) -> dict[str, Any]:
    """A version 1 sample record in version 2 terms, exactly where the minute's OR of reasons allows.

    Version 1 counted one `throttle_seconds` for all five causes and kept the OR of the reasons seen. When
    that OR holds a single cause, or only hardware / only software causes, the split is exact; when it holds
    both a hardware and a software cause, how much of the time was hardware is unknown and stays null (the
    health rule counts a null minute as not throttled)."""
    out = dict(rec)
    total, reasons = rec.get("throttle_seconds"), rec.get("throttle_reasons")
    causes: dict[str, float | None] = dict.fromkeys(CLOCK_EVENT_CAUSES)
    hw: float | None = None
    if total is not None and reasons is not None:
        active = [c for c, bit in CLOCK_EVENT_CAUSES.items() if reasons & bit]
        for c in CLOCK_EVENT_CAUSES:
            if c not in active:
                causes[c] = 0.0
        if len(active) == 1:
            causes[active[0]] = float(total)
        if not reasons & SW_CLOCK_MASK:
            hw = float(total)
        elif not reasons & HW_THROTTLE_MASK:
            hw = 0.0
    out["throttle_seconds"] = hw
    for c, v in causes.items():
        out[f"{c}_seconds"] = v
    return out


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


def fsync_dir(directory: Path) -> None:
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
    fsync_dir(directory)
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
    "nvlink": ("gpu_uuid", "minute", "link"),
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
    if header.get("version") not in READ_VERSIONS:
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
            reason = check_record(rec)
        if reason:
            bad.append((no, raw, reason))
        else:
            if header["version"] == 1 and rec["type"] == "sample":
                rec = upgrade_v1_sample(rec)
            records.append((no, rec))
    return SpoolContent(header, records, bad, None, lines)


def check_record(rec: Any) -> str | None:
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
