"""The kernel log: XIDs that never reach NVML, read from /dev/kmsg and resumed from a saved position."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from slurmscope.agent.attribution import normalize_bus_id

log = logging.getLogger(__name__)


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


class KmsgReader:
    """Reads /dev/kmsg without blocking and remembers the last sequence number per boot."""

    def __init__(self, path: str | Path | None, state_path: Path, boot_id: str, boot_time: float) -> None:
        """`path` None: no kernel log to read (a fake node), so nothing to warn about either."""
        self.path, self.state_path = str(path), state_path
        self.boot_id, self.boot_time = boot_id, boot_time
        self.fd: int | None = None
        self.buf = b""
        self.disabled = path is None
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
