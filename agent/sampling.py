"""Readings of one GPU, their per-minute aggregation, and the device as the agent knows it.

The aggregation is pure: readings in, records out. A field that failed is None and counted, never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurmscope.agent.attribution import GpuRef

from slurmscope.spool import (
    CLOCK_EVENT_CAUSES,
    GPM_FIELDS,
    HW_THROTTLE_MASK,
    NVLINK_COUNTERS,
    VIOLATION_POLICIES,
    activity_source,
    iso,
)

THROTTLE_MASK = HW_THROTTLE_MASK
"""Throttled = a hardware clock-event cause (slurmscope/spool.py cites NVML); a GPU at its power cap is not."""


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
    # GPM percent by GPM_FIELDS name, over the time since the previous reading
    gpm: dict[str, float] | None = None
    # slow fields (read every slow interval)
    ecc_corr_vol: int | None = None
    ecc_unc_vol: int | None = None
    ecc_corr_agg: int | None = None
    ecc_unc_agg: int | None = None
    remapped_pending: bool | None = None
    remapped_failed: bool | None = None
    retired_pages: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remapped_corr: int | None = None
    remapped_unc: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink: dict[int, dict[str, int]] | None = None  # link -> counter (NVLINK_COUNTERS) -> NVML's raw count
    violations: dict[str, int] | None = None  # policy (VIOLATION_POLICIES) -> NVML violation time, ns
    errors: int = 0

    @property
    def nvlink_totals(self) -> dict[str, int] | None:
        """Each NVLink counter summed over the links that answered."""
        if self.nvlink is None:
            return None
        return {c: sum(v[c] for v in self.nvlink.values() if c in v) for c in NVLINK_COUNTERS}


SLOW_FIELDS = (
    "ecc_corr_vol",
    "ecc_unc_vol",
    "ecc_corr_agg",
    "ecc_unc_agg",
    "remapped_pending",
    "remapped_failed",
    "retired_pages",
    "retired_sbe",
    "retired_dbe",
    "retired_pending",
    "remapped_corr",
    "remapped_unc",
    "pcie_gen",
    "pcie_width",
    "nvlink",
    "violations",
)
COUNTERS = {
    "energy_mj": "energy",
    "pcie_replay": "pcie_replay_delta",
    "ecc_corr_vol": "ecc_corrected_delta",
    "ecc_unc_vol": "ecc_uncorrected_delta",
}
LATEST = {
    "ecc_corr_agg": "ecc_corrected_total",
    "ecc_unc_agg": "ecc_uncorrected_total",
    "remapped_pending": "remapped_pending",
    "remapped_failed": "remapped_failed",
    "retired_pages": "retired_pages",
    "pcie_gen": "pcie_link_gen",
    "pcie_width": "pcie_link_width",
    "remapped_corr": "remapped_correctable",
    "remapped_unc": "remapped_uncorrectable",
    "retired_sbe": "retired_pages_sbe",
    "retired_dbe": "retired_pages_dbe",
    "retired_pending": "retired_pages_pending",
}
"""Slow readings kept as the minute's latest value (Reading attribute -> sample record key)."""


def _rise(prev: int | None, value: int) -> int:
    """A counter's rise since the previous reading; nothing when it went backwards (driver reload, reset)."""
    return value - prev if prev is not None and value >= prev else 0


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
        self.prev_link: dict[tuple[int, str], int] = {}  # (link, counter) -> last raw NVLink count
        self.prev_violation: dict[str, int] = {}
        self.last_time: float | None = None
        self.last_slow: dict[str, Any] = {}
        self._reset()

    def _reset(self) -> None:
        self.n = 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.maxes: dict[str, float] = {}
        self.deltas: dict[str, int] = {}
        self.link_deltas: dict[tuple[int, str], int] = {}
        self.violation_ns: dict[str, int] = {}
        self.gpm_n = 0
        self.gpm_sums: dict[str, float] = {}
        self.gpm_counts: dict[str, int] = {}
        self.throttle_seconds = 0.0
        self.cause_seconds = dict.fromkeys(CLOCK_EVENT_CAUSES, 0.0)
        self.reasons_or: int | None = None
        self.errors = 0
        self.slow: dict[str, Any] = {}
        self.first = self.last = None

    def add(self, r: Reading) -> list[dict[str, Any]]:
        out = []
        minute = int(r.time // 60) * 60
        chunk = int(r.time // self.flush_seconds)
        if self.minute is not None and (minute != self.minute or chunk != self.chunk):
            out.extend(self.flush())
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
            for cause, bit in CLOCK_EVENT_CAUSES.items():
                if r.reasons & bit:
                    self.cause_seconds[cause] += dt
        for key in COUNTERS:
            v = getattr(r, key)
            if v is None:
                continue
            self.deltas[key] = self.deltas.get(key, 0) + _rise(self.prev.get(key), v)
            self.prev[key] = v
        for link, counts in (r.nvlink or {}).items():
            for counter, v in counts.items():
                key = (link, counter)
                self.link_deltas[key] = self.link_deltas.get(key, 0) + _rise(self.prev_link.get(key), v)
                self.prev_link[key] = v
        for policy, v in (r.violations or {}).items():
            self.violation_ns[policy] = self.violation_ns.get(policy, 0) + _rise(
                self.prev_violation.get(policy), v
            )
            self.prev_violation[policy] = v
        if r.gpm:
            self.gpm_n += 1
            for name, v in r.gpm.items():
                self.gpm_sums[name] = self.gpm_sums.get(name, 0.0) + v
                self.gpm_counts[name] = self.gpm_counts.get(name, 0) + 1
        for key in (*LATEST, "nvlink_totals"):
            v = getattr(r, key)
            if v is not None:
                self.slow[key] = v
                self.last_slow[key] = v
        return out

    def nvlink_records(self, minute: str) -> list[dict[str, Any]]:
        """One `nvlink` record per link whose counters rose in the minute (the others write nothing)."""
        out = []
        for link in sorted({link for link, _ in self.link_deltas}):
            d = {c: self.link_deltas.get((link, c)) for c in NVLINK_COUNTERS}
            if any(d.values()):
                out.append(
                    {
                        "type": "nvlink",
                        "gpu_uuid": self.identity["gpu_uuid"],
                        "minute": minute,
                        "link": link,
                        **{f"{c}_delta": d[c] for c in NVLINK_COUNTERS},
                    }
                )
        return out

    def flush(self) -> list[dict[str, Any]]:
        """The records of the current (possibly partial) minute: its sample and its `nvlink` records."""
        if self.minute is None or self.n == 0:
            return []

        def mean(k: str) -> float | None:
            return round(self.sums[k] / self.counts[k], 4) if self.counts.get(k) else None

        def delta(k: str) -> int | None:
            if k in self.deltas:
                return self.deltas[k]
            return 0 if k in self.prev else None

        slow = {**self.last_slow, **self.slow}
        energy = delta("energy_mj")
        linked = {c for _, c in self.prev_link}
        link_sums = {
            c: (sum(v for (_, k), v in self.link_deltas.items() if k == c) if c in linked else None)
            for c in NVLINK_COUNTERS
        }
        totals = slow.get("nvlink_totals") or {}
        known = [v for v in link_sums.values() if v is not None]
        util = mean("util_gpu")
        rec = {
            "type": "sample",
            **self.identity,
            "minute": iso(self.minute),
            "samples": self.n,
            "first_sample": iso(self.first),
            "last_sample": iso(self.last),
            "util_gpu_mean": util,
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
            **{
                f"{c}_seconds": None if self.reasons_or is None else round(v, 3)
                for c, v in self.cause_seconds.items()
            },
            "pcie_replay_delta": delta("pcie_replay"),
            "ecc_corrected_delta": delta("ecc_corr_vol"),
            "ecc_uncorrected_delta": delta("ecc_unc_vol"),
            **{key: slow.get(attr) for attr, key in LATEST.items()},
            "nvlink_errors_delta": sum(known) if known else None,
            **{f"nvlink_{c}_delta": link_sums[c] for c in NVLINK_COUNTERS},
            **{f"nvlink_{c}_total": totals.get(c) for c in NVLINK_COUNTERS},
            **{
                f"violation_{p}_seconds": (
                    round(self.violation_ns.get(p, 0) / 1e9, 3) if p in self.prev_violation else None
                )
                for p in VIOLATION_POLICIES
            },
            "gpm_samples": self.gpm_n,
            **{
                f"{f}_mean": (
                    round(self.gpm_sums[f] / self.gpm_counts[f], 4) if self.gpm_counts.get(f) else None
                )
                for f in GPM_FIELDS
            },
            "activity_source": activity_source(self.gpm_n, util),
            "null_fields": self.errors,
        }
        links = self.nvlink_records(rec["minute"])
        self._reset()
        return [rec, *links]


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
    failing_xid: tuple[int, float] | None = None  # the latest XID whose action is failing, and when
    throttle_seconds_total: float = 0.0  # a hardware cause active
    clock_event_seconds_total: dict[str, float] = field(
        default_factory=dict
    )  # per cause (CLOCK_EVENT_CAUSES)
    gpm: bool | None = None  # NVML supports GPM on it (None: not asked yet)
    gpm_buf: list[Any] = field(default_factory=list)  # two nvmlGpmSample_t buffers
    gpm_next: int = 0  # the buffer the next nvmlGpmSampleGet fills
    gpm_have_prev: bool = False  # the other buffer holds the previous round's sample

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
