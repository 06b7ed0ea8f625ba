"""GPU-to-job attribution: prolog mapping files, process cgroups, and the intervals they imply.

Jobs are attributed from the allocation (the prolog's mapping file, matched by device minor number, PCI
bus id or UUID, never by NVML index order), cross-checked with the processes' cgroups. The mapping goes
out as interval rows, never as a job label on a time series, and the agent never asks slurmctld.
Everything here is pure given its inputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from slurmscope.spool import iso

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
