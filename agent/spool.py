"""The agent's side of the spool: the current segment's journal, the listing it serves, acks, pruning.

Per-minute aggregates go to an append-only journal (fsynced each flush) that becomes a closed spool file
once per rotation period (a minute by default, so the central store is at most about two minutes behind),
written by `write_spool_file` (temp file, fsync, atomic rename, directory fsync); the format itself lives
in slurmscope.spool, shared with the central reader.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from slurmscope.spool import (
    check_record,
    encode_record,
    fsync_dir,
    parse_iso,
    spool_file_name,
    spool_header,
    write_spool_file,
)


class SpoolJournal:
    """The current segment's records: appended to a hidden journal (fsynced per flush), closed each period.

    Closing writes the file with `write_spool_file` and removes the journal. After a crash, `recover`
    turns each leftover journal (minus a torn last line) into a closed file, so nothing that was fsynced
    is lost and nothing half-written is ever served.
    """

    PREFIX = ".journal-"

    def __init__(
        self, directory: Path, node: str, cluster: str | None = None, *, rotate_seconds: float = 60.0
    ) -> None:
        if rotate_seconds < 1:
            raise ValueError("rotate_seconds must be >= 1")
        self.directory, self.node, self.cluster = directory, node, cluster
        self.rotate_seconds = float(rotate_seconds)
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
            self._fh = open(self.path, "ab")  # noqa: SIM115 - kept open for the segment
            self._fh.write(encode_record(spool_header(self.node, self.opened_at, cluster=self.cluster)))
            self._sync()
            fsync_dir(self.directory)
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
                self._fh = open(self.path, "ab")  # noqa: SIM115 - kept open for the segment
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
        """A new rotation period (aligned to the epoch, so minutes close on the minute) has begun."""
        period = self.rotate_seconds
        return self.opened_at is not None and int(now // period) != int(self.opened_at // period)

    def close(self) -> Path | None:
        """Close the segment: write the spool file, then drop the journal."""
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
        fsync_dir(self.directory)
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
                elif isinstance(rec, dict) and check_record(rec) is None:
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
            fsync_dir(directory)
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
    fsync_dir(directory)
    return "deleted"
