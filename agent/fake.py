"""A fake NVML behind the pynvml interface, so the agent can be tested where no GPU exists.

The agent takes an `nvml` object and calls only pynvml functions by name; this module offers an object
with the same names, signatures, return types (real pynvml ctypes structures where pynvml returns them)
and exceptions (the real `pynvml.NVMLError_NotSupported`, `..._GpuIsLost`, ...). Values come from real
`nvidia-smi` captures (utkuozdemir/nvidia_gpu_exporter `--query-gpu` CSV sections, telegraf's
`nvidia-smi -q -x` XML): a field that the capture printed as N/A raises NotSupported here, as it would
on that GPU. On top of the captures a spec can force NotSupported/NoPermission/Unknown fields, schedule
XID events, make a GPU fall off the bus, and place processes (with their /proc cgroup) on GPUs.

Time is injected (`clock`, `sleep`), so tests run instantly and a simulator can run a day in seconds.
The demo runs its live agent on this backend too.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pynvml

# Field names used for forcing errors; the agent counts errors under the same names.
FIELDS = (
    "name",
    "uuid",
    "serial",
    "minor_number",
    "pci_info",
    "utilization",
    "memory_info",
    "power",
    "energy",
    "temperature",
    "memory_temperature",
    "sm_clock",
    "mem_clock",
    "clock_event_reasons",
    "pcie_replay",
    "ecc",
    "retired_pages",
    "remapped_rows",
    "nvlink",
    "pcie_link",
    "violation",
    "gpm",
    "mig_mode",
    "processes",
    "events",
)

MIB = 1024 * 1024
NA_VALUES = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}


# --------------------------------------------------------------------------------------------------
# Profiles: what one GPU looks like, read from real captures.
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigProfile:
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    name: str  # e.g. "MIG 3g.40gb"
    memory_total_bytes: int | None = None


@dataclass(frozen=True)
class GpuProfile:
    """Static identity plus one set of readings (idle or load) of a real GPU; None = NotSupported."""

    name: str
    uuid: str
    serial: str | None
    minor_number: int | None
    pci_bus_id: str  # NVML form: 00000000:00:09.0
    driver_version: str
    cuda_version: int | None  # NVML form: 13010 for 13.1
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    util_gpu: int | None
    util_mem: int | None
    power_mw: int | None
    temp_gpu: int | None
    temp_mem: int | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    clock_event_reasons: int | None
    pcie_replay: int | None
    ecc_enabled: bool
    ecc_volatile: tuple[int, int] | None  # (corrected, uncorrected)
    ecc_aggregate: tuple[int, int] | None
    retired_pages: tuple[int, int] | None  # (multiple single bit, double bit) counts
    remapped_rows: tuple[int, int, bool, bool] | None  # (correctable, uncorrectable, pending, failure)
    nvlink_links: int  # 0: no NVLink (NotSupported)
    mig_mode: int | None  # 1 enabled, 0 disabled, None NotSupported
    mig_devices: tuple[MigProfile, ...] = ()
    source: str = ""
    pcie_link_gen: int | None = None  # current PCIe generation and width
    pcie_link_width: int | None = None


def _num(value: str | None) -> float | None:
    if value is None:
        return None
    value = value.strip()
    if value in NA_VALUES or value.startswith("["):
        return None
    m = re.match(r"^(-?[0-9.]+)", value)
    return float(m.group(1)) if m else None


def _int(value: str | None) -> int | None:
    n = _num(value)
    return None if n is None else int(round(n))


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in NA_VALUES or value.startswith("[") else value


def _cuda(version: str | None) -> int | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10 if m else None


def _sections(text: str) -> list[tuple[str, str, str]]:
    """(title, command, body) of each `# title / # $ command` section of a nvidia_gpu_exporter capture."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("# $ ") and i > 0 and lines[i - 1].startswith("# "):
            title, cmd = lines[i - 1][2:].strip(), lines[i][4:].strip()
            j = i + 2  # skip the closing ##### line
            body = []
            while j < len(lines) and not (
                lines[j].startswith("#####") and j + 1 < len(lines) and lines[j + 1].startswith("# ")
            ):
                body.append(lines[j])
                j += 1
            out.append((title, cmd, "\n".join(body)))
            i = j
        else:
            i += 1
    return out


def parse_query_gpu_csv(body: str) -> dict[str, str]:
    """First data row of `nvidia-smi --query-gpu=... --format=csv`, keyed by field name without unit."""
    rows = list(csv.reader(io.StringIO(body.strip()), skipinitialspace=True))
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    return dict(zip(header, (v.strip() for v in rows[1]), strict=False))


def _mig_from_capture(text: str) -> tuple[MigProfile, ...]:
    """MIG devices: UUID and profile from `nvidia-smi -L`, GI/CI ids from the first `-q` section (same order)."""
    listing = []
    for m in re.finditer(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-fA-F-]+)\)", text, re.M):
        listing.append((m.group(1), int(m.group(2)), m.group(3)))
    if not listing:
        return ()
    seen: dict[int, tuple[str, str]] = {}
    for profile, idx, uuid in listing:
        seen.setdefault(idx, (profile, uuid))
    q_body = next((b for t, c, b in _sections(text) if c.strip() == "nvidia-smi -q"), "")
    ids = re.findall(r"GPU Instance ID\s*:\s*(\d+)\s*\n\s*Compute Instance ID\s*:\s*(\d+)", q_body)
    out = []
    for i, (idx, (profile, uuid)) in enumerate(sorted(seen.items())):
        gi, ci = (int(ids[i][0]), int(ids[i][1])) if i < len(ids) else (idx, 0)
        out.append(MigProfile(gi, ci, uuid, f"MIG {profile}"))
    return tuple(out)


def profile_from_capture(text: str, state: str = "idle", source: str = "") -> GpuProfile:
    """A GpuProfile from a nvidia_gpu_exporter capture, using its `<state> :: query-gpu` CSV section."""
    sections = _sections(text)
    body = next((b for t, c, b in sections if t.startswith(f"{state} ::") and "--query-gpu=" in c), None)
    if body is None:
        raise ValueError(f"no '{state} :: query-gpu' section in capture {source}")
    q = parse_query_gpu_csv(body)
    cuda = re.search(r"CUDA Version\s*:\s*([0-9.]+)", text)
    nvlink_body = next((b for t, c, b in sections if c.strip() == "nvidia-smi nvlink -s"), "")
    links = len(re.findall(r"^\s+Link \d+:", nvlink_body, re.M))

    def pair(a: str, b: str) -> tuple[int, int] | None:
        x, y = _int(q.get(a)), _int(q.get(b))
        return None if x is None or y is None else (x, y)

    remap = None
    if _int(q.get("remapped_rows.correctable")) is not None:
        remap = (
            _int(q["remapped_rows.correctable"]),
            _int(q["remapped_rows.uncorrectable"]),
            q.get("remapped_rows.pending") == "Yes",
            q.get("remapped_rows.failure") == "Yes",
        )
    mig_mode = {"Enabled": 1, "Disabled": 0}.get(q.get("mig.mode.current", ""))
    power = _num(q.get("power.draw"))
    reasons = q.get("clocks_event_reasons.active", "")
    return GpuProfile(
        name=q["name"],
        uuid=q["uuid"],
        serial=_text(q.get("serial")),
        minor_number=_int(q.get("index")),  # single-GPU captures: minor number equals index 0
        pci_bus_id=q["pci.bus_id"],
        driver_version=q["driver_version"],
        cuda_version=_cuda(cuda.group(1) if cuda else None),
        memory_total_bytes=None if _int(q.get("memory.total")) is None else _int(q["memory.total"]) * MIB,
        memory_used_bytes=None if _int(q.get("memory.used")) is None else _int(q["memory.used"]) * MIB,
        util_gpu=_int(q.get("utilization.gpu")),
        util_mem=_int(q.get("utilization.memory")),
        power_mw=None if power is None else int(round(power * 1000)),
        temp_gpu=_int(q.get("temperature.gpu")),
        temp_mem=_int(q.get("temperature.memory")),
        sm_clock_mhz=_int(q.get("clocks.current.sm")),
        mem_clock_mhz=_int(q.get("clocks.current.memory")),
        clock_event_reasons=int(reasons, 16) if reasons.startswith("0x") else None,
        pcie_replay=_replay_from_q(text, state),  # not in the CSV field list; the -q text has it
        ecc_enabled=q.get("ecc.mode.current") == "Enabled",
        ecc_volatile=pair("ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total"),
        ecc_aggregate=pair("ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total"),
        retired_pages=pair("retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count"),
        remapped_rows=remap,
        nvlink_links=links,
        mig_mode=mig_mode,
        mig_devices=_mig_from_capture(text) if mig_mode == 1 else (),
        source=source,
        pcie_link_gen=_int(q.get("pcie.link.gen.current")),
        pcie_link_width=_int(q.get("pcie.link.width.current")),
    )


def _replay_from_q(text: str, state: str) -> int | None:
    body = next(
        (b for t, c, b in _sections(text) if t.startswith(f"{state} ::") and c.strip() == "nvidia-smi -q"), ""
    )
    m = re.search(r"Replays Since Reset\s*:\s*(\S+)", body)
    return _int(m.group(1)) if m else None


def profile_from_xml(text: str, gpu: int = 0, source: str = "") -> GpuProfile:
    """A GpuProfile from `nvidia-smi -q -x` (telegraf fixtures). MIG UUIDs are not in v12 XML: derived."""
    root = ET.fromstring(text)  # noqa: S314 - a checked-in capture, not untrusted input
    g = root.findall("gpu")[gpu]

    def t(path: str) -> str | None:
        el = g.find(path)
        return None if el is None or el.text is None else el.text.strip()

    def ecc(kind: str) -> tuple[int, int] | None:
        base = f"ecc_errors/{kind}/"
        vals = [
            _int(t(base + f))
            for f in ("sram_correctable", "dram_correctable", "sram_uncorrectable", "dram_uncorrectable")
        ]
        if any(v is None for v in vals):
            return None
        return (vals[0] + vals[1], vals[2] + vals[3])

    mig_mode = {"Enabled": 1, "Disabled": 0}.get(t("mig_mode/current_mig") or "")
    uuid = t("uuid") or ""
    migs = []
    for m in g.findall("mig_devices/mig_device"):
        gi, ci = int(m.findtext("gpu_instance_id")), int(m.findtext("compute_instance_id"))
        digest = hashlib.sha256(f"{uuid}/{gi}/{ci}".encode()).hexdigest()
        mig_uuid = f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        total = _int(m.findtext("fb_memory_usage/total"))
        migs.append(MigProfile(gi, ci, mig_uuid, "MIG", None if total is None else total * MIB))
    power = _num(t("gpu_power_readings/power_draw") or t("power_readings/power_draw"))
    retired = None
    if _int(t("retired_pages/multiple_single_bit_retirement/retired_count")) is not None:
        retired = (
            _int(t("retired_pages/multiple_single_bit_retirement/retired_count")),
            _int(t("retired_pages/double_bit_retirement/retired_count")),
        )
    remap = None
    if g.find("remapped_rows/remapped_row_corr") is not None:
        remap = (
            _int(t("remapped_rows/remapped_row_corr")),
            _int(t("remapped_rows/remapped_row_unc")),
            t("remapped_rows/remapped_row_pending") == "Yes",
            t("remapped_rows/remapped_row_failure") == "Yes",
        )
    active = 0
    for el in g.findall("clocks_event_reasons/*"):
        if (el.text or "").strip() == "Active":
            active |= _REASON_BITS.get(el.tag.replace("clocks_event_reason_", ""), 0)
    return GpuProfile(
        name=t("product_name") or "",
        uuid=uuid,
        serial=_text(t("serial")),
        minor_number=_int(t("minor_number")),
        pci_bus_id=t("pci/pci_bus_id") or g.get("id", ""),
        driver_version=root.findtext("driver_version", "").strip(),
        cuda_version=_cuda(root.findtext("cuda_version")),
        memory_total_bytes=None
        if _int(t("fb_memory_usage/total")) is None
        else _int(t("fb_memory_usage/total")) * MIB,
        memory_used_bytes=None
        if _int(t("fb_memory_usage/used")) is None
        else _int(t("fb_memory_usage/used")) * MIB,
        util_gpu=_int(t("utilization/gpu_util")),
        util_mem=_int(t("utilization/memory_util")),
        power_mw=None if power is None else int(round(power * 1000)),
        temp_gpu=_int(t("temperature/gpu_temp")),
        temp_mem=_int(t("temperature/memory_temp")),
        sm_clock_mhz=_int(t("clocks/sm_clock")),
        mem_clock_mhz=_int(t("clocks/mem_clock")),
        clock_event_reasons=active,
        pcie_replay=_int(t("pci/replay_counter")),
        ecc_enabled=t("ecc_mode/current_ecc") == "Enabled",
        ecc_volatile=ecc("volatile"),
        ecc_aggregate=ecc("aggregate"),
        retired_pages=retired,
        remapped_rows=remap,
        nvlink_links=0,
        mig_mode=mig_mode,
        mig_devices=tuple(migs),
        source=source,
        pcie_link_gen=_int(t("pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
        pcie_link_width=_int(t("pci/pci_gpu_link_info/link_widths/current_link_width")),
    )


_REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}


# The captures the shipped profiles (profiles/<model>.json) are distilled from, so that the fake works from
# an installed package without tests/; tests/agent/test_fake.py checks that the files are exactly what the
# parsers above read from these captures, and `python -m slurmscope.agent.fake tests/fixtures/nvidia-smi`
# writes them again.
CAPTURES = {
    "h100": "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
    "h100-mig": "linux-x86_64__nvidia-h100-mig__590.48.01.txt",
    "h200": "linux-x86_64__nvidia-h200__590.48.01.txt",
    "l40s": "linux-x86_64__nvidia-l40s__595.80.txt",
    "a100-mig": "a100-sxm4-v12.xml",
}


def load_capture(path: str | Path, state: str = "idle") -> GpuProfile:
    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".xml":
        return profile_from_xml(text, source=path.name)
    return profile_from_capture(text, state, source=path.name)


@functools.cache
def builtin_profiles() -> dict[str, dict[str, Any]]:
    """The shipped profiles as `profile_to_dict` gives them, keyed `model:state`; read once, when first needed."""
    out = {}
    for entry in resources.files("slurmscope.agent").joinpath("profiles").iterdir():
        if entry.name.endswith(".json"):
            for state, data in json.loads(entry.read_text(encoding="utf-8")).items():
                out[f"{entry.name[: -len('.json')]}:{state}"] = data
    return out


def builtin_profile(model: str, state: str = "idle") -> GpuProfile:
    """A profile by short name ('h100', 'h100-mig', 'h200', 'l40s', 'a100-mig') and state ('idle'/'load')."""
    key = f"{model}:{state}" if model != "a100-mig" else "a100-mig:idle"
    data = builtin_profiles()[key]
    migs = tuple(MigProfile(**m) for m in data.get("mig_devices", ()))
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k != "mig_devices"}
    return GpuProfile(**fields, mig_devices=migs)


def profile_to_dict(p: GpuProfile) -> dict[str, Any]:
    d = {k: getattr(p, k) for k in p.__dataclass_fields__ if k != "mig_devices"}
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
    d["mig_devices"] = [m.__dict__.copy() for m in p.mig_devices]
    return d


# --------------------------------------------------------------------------------------------------
# Models for what no capture holds: GPM profiling metrics and violation time
# --------------------------------------------------------------------------------------------------

GPM_ARCHITECTURE = re.compile(r"\b(GH200|H100|H200|H800|H20)\b")
"""Hopper product names: NVML's GPM is "for Hopper or newer fully supported devices" (nvmlGpmQueryDeviceSupport).
The captures do not record GPM support; the fake decides it from the product name, so the H100 and H200
profiles have GPM and the L40S (Ada) and A100 (Ampere) profiles do not."""


def gpm_supported(profile: GpuProfile) -> bool:
    return bool(GPM_ARCHITECTURE.search(profile.name))


def gpm_model(util_gpu: float, values: dict[str, Any]) -> dict[str, float]:
    """The fake's GPM metrics (percent) for a GPU at `util_gpu` percent GPU_UTIL. A model, not a measurement: no
    GPM capture exists to distil. It says what the efficiency pipeline needs to be tested against: SM activity
    is below GPU_UTIL (a kernel running on some SMs counts fully in GPU_UTIL), and occupancy, tensor and DRAM
    activity are shares of it. The ratios are illustrative; `values` (sm_active, sm_occupancy, tensor_active,
    dram_active) replace any of them."""
    sm = float(values.get("sm_active", 0.85 * util_gpu))
    return {
        "sm_active": sm,
        "sm_occupancy": float(values.get("sm_occupancy", 0.5 * sm)),
        "tensor_active": float(values.get("tensor_active", 0.6 * sm)),
        "dram_active": float(values.get("dram_active", 0.4 * util_gpu)),
    }


VIOLATION_REASONS = {"power": 0x4 | 0x80, "thermal": 0x20 | 0x40, "sync_boost": 0x10, "low_util": 0x1}
"""The fake's violation-time model: a policy's time accrues while one of these clock-event reasons is reported
(power: SW power cap or HW power brake; thermal: SW or HW thermal slowdown; sync boost; low utilisation: idle).
Board limit and reliability accrue only in a spec's `violations` intervals; so can any policy."""

GPM_METRICS = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_active",
}
VIOLATION_POLICIES = {
    pynvml.NVML_PERF_POLICY_POWER: "power",
    pynvml.NVML_PERF_POLICY_THERMAL: "thermal",
    pynvml.NVML_PERF_POLICY_SYNC_BOOST: "sync_boost",
    pynvml.NVML_PERF_POLICY_BOARD_LIMIT: "board_limit",
    pynvml.NVML_PERF_POLICY_LOW_UTILIZATION: "low_util",
    pynvml.NVML_PERF_POLICY_RELIABILITY: "reliability",
}


class FakeGpmSample:
    """Opaque to the agent, like pynvml's nvmlGpmSample_t: what nvmlGpmSampleGet saw, for nvmlGpmMetricsGet."""

    __slots__ = ("gpu", "integrals", "time")

    def __init__(self) -> None:
        self.gpu: FakeGpu | None = None
        self.time: float | None = None
        self.integrals: dict[str, float] = {}


class FakeGpmMetricsGet:
    """pynvml.c_nvmlGpmMetricsGet_t's fields, holding fake samples (pynvml's ctypes struct cannot)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0  # noqa: N815 - pynvml's name
        self.sample1: FakeGpmSample | None = None
        self.sample2: FakeGpmSample | None = None
        self.metrics = (pynvml.c_nvmlGpmMetric_t * pynvml.NVML_GPM_METRIC_MAX)()


# --------------------------------------------------------------------------------------------------
# The fake library
# --------------------------------------------------------------------------------------------------


@dataclass
class FakeProcess:
    pid: int
    used_memory_bytes: int = 0
    gpu_instance_id: int | None = None  # MIG: which instance the process runs on
    compute_instance_id: int | None = None


@dataclass
class FakeGpu:
    """One simulated GPU. `values` overrides readings at run time (the simulator drives load this way)."""

    profile: GpuProfile
    uuid: str | None = None
    minor_number: int | None = None
    pci_bus_id: str | None = None
    not_supported: set[str] = field(default_factory=set)
    no_permission: set[str] = field(default_factory=set)
    unknown_error: set[str] = field(default_factory=set)
    lost_at: float | None = None  # fake-clock time the GPU falls off the bus
    xid_events: list[tuple[float, int]] = field(default_factory=list)  # (time, xid)
    # (from, until, mask): the clock-event reasons NVML reports in [from, until), e.g. 0x4 at the power cap,
    # 0x8 in HW slowdown; outside every interval the profile's (or `values`') reasons
    clock_events: list[tuple[float, float, int]] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)  # util_gpu, util_mem, power_mw, memory_used_bytes...
    # (at, link, counter, count): NVML's error counter `counter` (pynvml NVML_NVLINK_ERROR_DL_*) of `link` reads
    # `count` from `at` on (the latest step at or before now wins; `values["nvlink_errors"]` overrides)
    nvlink_steps: list[tuple[float, int, int, int]] = field(default_factory=list)
    # (from, until, policy): violation time of `policy` (VIOLATION_POLICIES' names) accrues in [from, until)
    violations: list[tuple[float, float, str]] = field(default_factory=list)
    energy_mj: float = 0.0
    violation_ns: dict[str, float] = field(default_factory=dict)
    gpm_integrals: dict[str, float] = field(default_factory=dict)  # percent x seconds per GPM metric
    _energy_t: float | None = None

    def value(self, name: str) -> Any:
        return self.values.get(name, getattr(self.profile, name))


class FakeHandle:
    """Opaque device handle, like pynvml's c_nvmlDevice_t pointer."""

    __slots__ = ("gpu", "index", "mig")

    def __init__(self, gpu: FakeGpu, index: int, mig: MigProfile | None = None) -> None:
        self.gpu, self.index, self.mig = gpu, index, mig

    def __repr__(self) -> str:
        return f"FakeHandle({self.index}{'' if self.mig is None else f', mig={self.mig.gpu_instance_id}'})"


@dataclass
class FakeEventData:
    """Same attribute names as pynvml.c_nvmlEventData_t."""

    device: FakeHandle
    eventType: int  # noqa: N815 - pynvml's name
    eventData: int  # noqa: N815
    gpuInstanceId: int = 0xFFFFFFFF  # noqa: N815
    computeInstanceId: int = 0xFFFFFFFF  # noqa: N815


class FakeEventSet:
    def __init__(self) -> None:
        self.handles: list[FakeHandle] = []
        self.delivered: set[tuple[int, float, int]] = set()


def _raise(code: int) -> None:
    raise pynvml.NVMLError(code)  # pynvml maps the code to its subclass, e.g. NVMLError_NotSupported


class FakeNVML:
    """Module-like object with the pynvml functions the agent uses. Not thread-safe, like a test double."""

    # constants the agent reads from the nvml object (same values as pynvml)
    NVMLError = pynvml.NVMLError
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_MEMORY_ERROR_TYPE_CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = pynvml.NVML_AGGREGATE_ECC
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = (
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    )
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_ERROR_DL_REPLAY = pynvml.NVML_NVLINK_ERROR_DL_REPLAY
    NVML_NVLINK_ERROR_DL_RECOVERY = pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
    NVML_NVLINK_ERROR_DL_CRC_FLIT = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
    NVML_NVLINK_ERROR_DL_CRC_DATA = pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA
    NVML_FI_DEV_MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP
    NVML_PERF_POLICY_POWER = pynvml.NVML_PERF_POLICY_POWER
    NVML_PERF_POLICY_THERMAL = pynvml.NVML_PERF_POLICY_THERMAL
    NVML_PERF_POLICY_SYNC_BOOST = pynvml.NVML_PERF_POLICY_SYNC_BOOST
    NVML_PERF_POLICY_BOARD_LIMIT = pynvml.NVML_PERF_POLICY_BOARD_LIMIT
    NVML_PERF_POLICY_LOW_UTILIZATION = pynvml.NVML_PERF_POLICY_LOW_UTILIZATION
    NVML_PERF_POLICY_RELIABILITY = pynvml.NVML_PERF_POLICY_RELIABILITY
    NVML_GPM_METRIC_SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL
    NVML_GPM_METRIC_SM_OCCUPANCY = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    NVML_GPM_METRIC_DRAM_BW_UTIL = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet  # noqa: N815 - pynvml's name
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError  # noqa: N815

    def __init__(
        self,
        gpus: Iterable[FakeGpu],
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], None] | None = None,
        driver_version: str | None = None,
        cuda_version: int | None = None,
        proc_cgroups: dict[int, str] | None = None,
    ) -> None:
        self.gpus = list(gpus)
        self.clock = clock
        self.sleep = sleep or (lambda s: None)
        first = self.gpus[0].profile if self.gpus else None
        self.driver_version = driver_version or (first.driver_version if first else "0")
        self.cuda_version = cuda_version or (first.cuda_version if first and first.cuda_version else 12000)
        self.proc_cgroups = proc_cgroups or {}  # pid -> /proc/<pid>/cgroup text, for the agent's reader
        self.initialized = 0
        self.calls = 0
        for i, g in enumerate(self.gpus):
            g.uuid = g.uuid or _derived_uuid(g.profile.uuid, i)
            g.minor_number = i if g.minor_number is None else g.minor_number
            g.pci_bus_id = g.pci_bus_id or f"00000000:{0x17 + 0x10 * i:02X}:00.0"

    # -- library --------------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802
        self.initialized += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        if self.initialized <= 0:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)
        self.initialized -= 1

    def _check_init(self) -> None:
        self.calls += 1
        if self.initialized <= 0:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._check_init()
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        self._check_init()
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:  # noqa: N802
        self._check_init()
        if not 0 <= index < len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if self._lost(gpu):
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        return FakeHandle(gpu, index)

    # -- helpers ----------------------------------------------------------------------------------
    def _lost(self, gpu: FakeGpu) -> bool:
        return gpu.lost_at is not None and self.clock() >= gpu.lost_at

    def _gate(self, handle: FakeHandle, fieldname: str, value: Any = ...) -> None:
        """Raise what the real library raises for this GPU/field; `value` None (N/A in capture) = NotSupported."""
        self._check_init()
        gpu = handle.gpu
        if self._lost(gpu):
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fieldname in gpu.unknown_error:
            _raise(pynvml.NVML_ERROR_UNKNOWN)
        if fieldname in gpu.no_permission:
            _raise(pynvml.NVML_ERROR_NO_PERMISSION)
        if fieldname in gpu.not_supported or value is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _advance_energy(self, gpu: FakeGpu) -> None:
        """Integrate what accrues over time (energy, violation time, GPM) from the last call to now.

        Values are constant between calls (set_values integrates first) and the clock-event reasons change only
        at the edges of `clock_events` and `violations`, so the integral is exact, piece by piece."""
        now = self.clock()
        if gpu._energy_t is not None and now > gpu._energy_t:
            t0 = gpu._energy_t
            power = gpu.value("power_mw") or 0
            gpu.energy_mj += power * (now - t0)
            gpm = gpm_model(gpu.value("util_gpu") or 0, gpu.values)
            for name, v in gpm.items():
                gpu.gpm_integrals[name] = gpu.gpm_integrals.get(name, 0.0) + v * (now - t0)
            edges = {t0, now} | {
                t for a, b, *_ in (*gpu.clock_events, *gpu.violations) for t in (a, b) if t0 < t < now
            }
            cuts = sorted(edges)
            for a, b in zip(cuts, cuts[1:], strict=False):
                reasons = self._reasons_at(gpu, a)
                for policy in VIOLATION_POLICIES.values():
                    held = bool(reasons & VIOLATION_REASONS.get(policy, 0)) or any(
                        x <= a < y and p == policy for x, y, p in gpu.violations
                    )
                    if held:
                        gpu.violation_ns[policy] = gpu.violation_ns.get(policy, 0.0) + (b - a) * 1e9
        gpu._energy_t = now

    def _reasons_at(self, gpu: FakeGpu, t: float) -> int:
        val = gpu.value("clock_event_reasons") or 0
        for since, until, mask in gpu.clock_events:
            if since <= t < until:
                val = mask
        return int(val)

    def set_values(self, index: int, **values: Any) -> None:
        """Change readings from now on (energy is integrated piecewise, so set before the change)."""
        gpu = self.gpus[index]
        self._advance_energy(gpu)
        gpu.values.update(values)

    # -- identity ---------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:  # noqa: N802
        self._gate(handle, "name")
        if handle.mig is not None:
            return f"{handle.gpu.profile.name} {handle.mig.name}"
        return handle.gpu.profile.name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:  # noqa: N802
        self._gate(handle, "uuid")
        if handle.mig is not None:
            return (
                handle.mig.uuid
                if handle.gpu.uuid == handle.gpu.profile.uuid
                else _derived_uuid(handle.mig.uuid, handle.index, prefix="MIG-")
            )
        return handle.gpu.uuid

    def nvmlDeviceGetSerial(self, handle: FakeHandle) -> str:  # noqa: N802
        self._gate(handle, "serial", handle.gpu.profile.serial)
        return handle.gpu.profile.serial

    def nvmlDeviceGetMinorNumber(self, handle: FakeHandle) -> int:  # noqa: N802
        self._gate(handle, "minor_number", handle.gpu.minor_number)
        return handle.gpu.minor_number

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> pynvml.nvmlPciInfo_t:  # noqa: N802
        self._gate(handle, "pci_info")
        info = pynvml.nvmlPciInfo_t()
        bus = handle.gpu.pci_bus_id
        info.busId = bus.encode()
        info.busIdLegacy = bus[-12:].encode() if len(bus) > 12 else bus.encode()
        parts = re.match(r"([0-9A-Fa-f]+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)", bus)
        if parts:
            info.domain, info.bus, info.device = (int(parts.group(k), 16) for k in (1, 2, 3))
        return info

    # -- fast fields ------------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> pynvml.c_nvmlUtilization_t:  # noqa: N802
        gpu = handle.gpu
        util = gpu.value("util_gpu")
        # NVML reports NotSupported for utilisation of a GPU in MIG mode (the captures print [N/A]).
        self._gate(handle, "utilization", None if util is None or gpu.value("mig_mode") == 1 else util)
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = int(util), int(gpu.value("util_mem") or 0)
        return u

    def nvmlDeviceGetMemoryInfo(
        self, handle: FakeHandle, version: int | None = None
    ) -> pynvml.c_nvmlMemory_t:  # noqa: N802
        gpu = handle.gpu
        total = (
            gpu.value("memory_total_bytes")
            if handle.mig is None
            else (handle.mig.memory_total_bytes or gpu.value("memory_total_bytes"))
        )
        self._gate(handle, "memory_info", total)
        m = pynvml.c_nvmlMemory_t()
        m.total = int(total)
        m.used = int(gpu.value("memory_used_bytes") or 0) if handle.mig is None else 0
        m.free = m.total - m.used
        return m

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:  # noqa: N802
        power = handle.gpu.value("power_mw")
        self._gate(handle, "power", power)
        return int(power)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:  # noqa: N802
        gpu = handle.gpu
        self._gate(handle, "energy", gpu.value("power_mw"))
        self._advance_energy(gpu)
        return int(gpu.energy_mj)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:  # noqa: N802
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        temp = handle.gpu.value("temp_gpu")
        self._gate(handle, "temperature", temp)
        return int(temp)

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list) -> Any:  # noqa: N802, N803
        """Like NVML: the call succeeds and each value carries its own nvmlReturn."""
        self._gate(handle, "field_values")
        arr = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for i, fid in enumerate(fieldIds):
            arr[i].fieldId = fid
            arr[i].timestamp = int(self.clock() * 1e6)
            value = None
            if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                gpu = handle.gpu
                if "memory_temperature" in gpu.no_permission:
                    arr[i].nvmlReturn = pynvml.NVML_ERROR_NO_PERMISSION
                    continue
                if "memory_temperature" not in gpu.not_supported:
                    value = gpu.value("temp_mem")
            if value is None:
                arr[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                arr[i].nvmlReturn = pynvml.NVML_SUCCESS
                arr[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                arr[i].value.uiVal = int(value)
        return arr

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, type: int) -> int:  # noqa: N802, A002
        if type == pynvml.NVML_CLOCK_SM:
            val, name = handle.gpu.value("sm_clock_mhz"), "sm_clock"
        elif type == pynvml.NVML_CLOCK_MEM:
            val, name = handle.gpu.value("mem_clock_mhz"), "mem_clock"
        else:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._gate(handle, name, val)
        return int(val)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:  # noqa: N802
        val = handle.gpu.value("clock_event_reasons")
        now = self.clock()
        for since, until, mask in handle.gpu.clock_events:
            if since <= now < until:
                val = mask
        self._gate(handle, "clock_event_reasons", val)
        return int(val)

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeHandle) -> int:  # noqa: N802
        val = handle.gpu.value("pcie_replay")
        self._gate(handle, "pcie_replay", val)
        return int(val)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeHandle) -> int:  # noqa: N802
        val = handle.gpu.value("pcie_link_gen")
        self._gate(handle, "pcie_link", val)
        return int(val)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeHandle) -> int:  # noqa: N802
        val = handle.gpu.value("pcie_link_width")
        self._gate(handle, "pcie_link", val)
        return int(val)

    def nvmlDeviceGetViolationStatus(self, device: FakeHandle, perfPolicyType: int) -> Any:  # noqa: N802, N803
        """Violation time per policy (VIOLATION_REASONS, the spec's `violations`), integrated like energy."""
        self._gate(device, "violation")
        policy = VIOLATION_POLICIES.get(perfPolicyType)
        if policy is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._advance_energy(device.gpu)
        out = pynvml.c_nvmlViolationTime_t()
        out.referenceTime = int(self.clock() * 1e6)
        out.violationTime = int(device.gpu.violation_ns.get(policy, 0.0))
        return out

    # -- GPM (model: gpm_model) --------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, device: FakeHandle) -> Any:  # noqa: N802
        self._gate(device, "gpm")
        out = pynvml.c_nvmlGpmSupport_t()
        out.version = pynvml.NVML_GPM_SUPPORT_VERSION
        out.isSupportedDevice = int(gpm_supported(device.gpu.profile))
        return out

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:  # noqa: N802
        self._check_init()
        return FakeGpmSample()

    def nvmlGpmSampleFree(self, gpmSample: FakeGpmSample) -> None:  # noqa: N802, N803
        self._check_init()

    def nvmlGpmSampleGet(self, device: FakeHandle, gpmSample: FakeGpmSample) -> FakeGpmSample:  # noqa: N802, N803
        gpu = device.gpu
        self._gate(device, "gpm", True if gpm_supported(gpu.profile) else None)
        self._advance_energy(gpu)
        gpmSample.gpu, gpmSample.time, gpmSample.integrals = gpu, self.clock(), dict(gpu.gpm_integrals)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: FakeGpmMetricsGet) -> FakeGpmMetricsGet:  # noqa: N802, N803
        """Each metric's mean between the two samples; a metric the model lacks is NotSupported."""
        self._check_init()
        a, b = metricsGet.sample1, metricsGet.sample2
        if a is None or b is None or a.gpu is None or a.gpu is not b.gpu or b.time <= a.time:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for i in range(metricsGet.numMetrics):
            m = metricsGet.metrics[i]
            name = GPM_METRICS.get(m.metricId)
            if name is None:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            m.nvmlReturn = pynvml.NVML_SUCCESS
            m.value = (b.integrals.get(name, 0.0) - a.integrals.get(name, 0.0)) / (b.time - a.time)
        return metricsGet

    # -- slow fields ------------------------------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, errorType: int, counterType: int) -> int:  # noqa: N802, N803
        gpu = handle.gpu
        counts = gpu.value("ecc_volatile" if counterType == pynvml.NVML_VOLATILE_ECC else "ecc_aggregate")
        self._gate(handle, "ecc", counts if gpu.value("ecc_enabled") else None)
        return int(counts[0 if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else 1])

    def nvmlDeviceGetRetiredPages(self, device: FakeHandle, sourceFilter: int) -> list[int]:  # noqa: N802, N803
        counts = device.gpu.value("retired_pages")
        self._gate(device, "retired_pages", counts)
        n = counts[
            0 if sourceFilter == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS else 1
        ]
        return [0x1000 * (k + 1) for k in range(n)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: FakeHandle) -> int:  # noqa: N802
        """Pending where retired pages are supported (pre-Hopper); `values["retired_pages_pending"]` sets it."""
        self._gate(device, "retired_pages", device.gpu.value("retired_pages"))
        return int(bool(device.gpu.values.get("retired_pages_pending", False)))

    def nvmlDeviceGetRemappedRows(self, device: FakeHandle) -> tuple[int, int, int, int]:  # noqa: N802
        rows = device.gpu.value("remapped_rows")
        self._gate(device, "remapped_rows", rows)
        return (int(rows[0]), int(rows[1]), int(bool(rows[2])), int(bool(rows[3])))

    def nvmlDeviceGetNvLinkState(self, device: FakeHandle, link: int) -> int:  # noqa: N802
        links = device.gpu.value("nvlink_links")
        self._gate(device, "nvlink", links or None)
        if device.gpu.value("mig_mode") == 1:
            _raise(
                pynvml.NVML_ERROR_NOT_SUPPORTED
            )  # "Nvlink queries are not supported for Devices in MIG mode"
        if link >= links:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, device: FakeHandle, link: int, counter: int) -> int:  # noqa: N802
        self.nvmlDeviceGetNvLinkState(device, link)
        now, count = self.clock(), 0
        for at, lk, ctr, n in sorted(device.gpu.nvlink_steps):
            if at <= now and (lk, ctr) == (link, counter):
                count = n
        errors = device.gpu.values.get("nvlink_errors", {})
        return int(errors.get((link, counter), count))

    def nvmlDeviceGetMigMode(self, device: FakeHandle) -> list[int]:  # noqa: N802
        mode = device.gpu.value("mig_mode")
        self._gate(device, "mig_mode", mode)
        return [int(mode), int(mode)]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeHandle) -> int:  # noqa: N802
        self._gate(device, "mig_mode", device.gpu.value("mig_mode"))
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeHandle, index: int) -> FakeHandle:  # noqa: N802
        self._gate(device, "mig_mode", device.gpu.value("mig_mode"))
        migs = device.gpu.profile.mig_devices
        if device.gpu.value("mig_mode") != 1 or index >= len(migs):
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeHandle(device.gpu, device.index, migs[index])

    def nvmlDeviceIsMigDeviceHandle(self, device: FakeHandle) -> int:  # noqa: N802
        self._check_init()
        return int(device.mig is not None)

    def nvmlDeviceGetGpuInstanceId(self, device: FakeHandle) -> int:  # noqa: N802
        self._check_init()
        if device.mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device.mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: FakeHandle) -> int:  # noqa: N802
        self._check_init()
        if device.mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device.mig.compute_instance_id

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list:  # noqa: N802
        self._gate(handle, "processes")
        out = []
        for p in handle.gpu.processes:
            info = pynvml.c_nvmlProcessInfo_v2_t()
            info.pid, info.usedGpuMemory = p.pid, p.used_memory_bytes
            info.gpuInstanceId = 0xFFFFFFFF if p.gpu_instance_id is None else p.gpu_instance_id
            info.computeInstanceId = 0xFFFFFFFF if p.compute_instance_id is None else p.compute_instance_id
            out.append(info)
        return out

    # -- events -----------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> FakeEventSet:  # noqa: N802
        self._check_init()
        return FakeEventSet()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, eventTypes: int, eventSet: FakeEventSet) -> None:  # noqa: N802, N803
        self._gate(handle, "events")
        if eventTypes & pynvml.nvmlEventTypeXidCriticalError:
            eventSet.handles.append(handle)

    def _pending(self, es: FakeEventSet) -> list[tuple[float, FakeHandle, int]]:
        out = []
        for h in es.handles:
            sched = list(h.gpu.xid_events)
            if h.gpu.lost_at is not None:
                sched.append((h.gpu.lost_at, 79))
            for t, xid in sched:
                if (h.index, t, xid) not in es.delivered:
                    out.append((t, h, xid))
        out.sort(key=lambda e: e[0])
        return out

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:  # noqa: N802, N803
        """Return the next due XID event, waiting (via the injected sleep) up to `timeoutms`."""
        self._check_init()
        now = self.clock()
        pending = self._pending(eventSet)
        if pending and pending[0][0] <= now:
            t, h, xid = pending[0]
        else:
            deadline = now + timeoutms / 1000.0
            if pending and pending[0][0] <= deadline:
                self.sleep(pending[0][0] - now)
                t, h, xid = pending[0]
            else:
                self.sleep(max(0.0, deadline - now))
                _raise(pynvml.NVML_ERROR_TIMEOUT)
        eventSet.delivered.add((h.index, t, xid))
        return FakeEventData(h, pynvml.nvmlEventTypeXidCriticalError, xid)

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:  # noqa: N802
        self._check_init()
        eventSet.handles.clear()


def _derived_uuid(base: str, i: int, prefix: str = "GPU-") -> str:
    """Captures mask UUIDs to zeros; give each fake GPU a distinct, stable one."""
    if i == 0 and not re.fullmatch(r"(GPU|MIG)-0{8}-0{4}-0{4}-0{4}-0{12}", base):
        return base
    d = hashlib.sha256(f"{base}/{i}".encode()).hexdigest()
    return f"{prefix}{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


# --------------------------------------------------------------------------------------------------
# Specs (for `slurmscope agent --fake SPEC.json` and the simulator)
# --------------------------------------------------------------------------------------------------


NVLINK_SPEC_COUNTERS = {
    "crc_flit": pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    "replay": pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
}


def fake_from_spec(
    spec: dict[str, Any], *, clock: Callable[[], float], sleep: Callable[[float], None] | None = None
) -> FakeNVML:
    """Build a FakeNVML from a JSON-able spec.

    {"gpus": [{"model": "h100", "state": "idle", "count": 8, "not_supported": ["ecc"],
               "lost_at": 120.0, "xid_events": [[30.0, 79]], "processes": [{"pid": 4242}],
               "clock_events": [[0.0, 600.0, 4], [300.0, 480.0, 12]],
               "nvlink_errors": [[60.0, 2, "replay", 3]], "violations": [[0.0, 30.0, "board_limit"]],
               "values": {"util_gpu": 35, "sm_active": 60}}],
     "start": 0.0}
    Times in the spec are seconds after `start` (default: the clock at build time).
    """
    start = float(spec.get("start", clock()))
    gpus = []
    for entry in spec.get("gpus", []):
        if "capture" in entry:
            profile = load_capture(entry["capture"], entry.get("state", "idle"))
        else:
            profile = builtin_profile(entry.get("model", "h100"), entry.get("state", "idle"))
        for _ in range(int(entry.get("count", 1))):
            g = FakeGpu(
                profile=profile,
                not_supported=set(entry.get("not_supported", ())),
                no_permission=set(entry.get("no_permission", ())),
                unknown_error=set(entry.get("unknown_error", ())),
                lost_at=None if entry.get("lost_at") is None else start + float(entry["lost_at"]),
                xid_events=[(start + float(t), int(x)) for t, x in entry.get("xid_events", ())],
                clock_events=[
                    (start + float(a), start + float(b), int(m)) for a, b, m in entry.get("clock_events", ())
                ],
                nvlink_steps=[
                    (start + float(at), int(link), NVLINK_SPEC_COUNTERS[name], int(n))
                    for at, link, name, n in entry.get("nvlink_errors", ())
                ],
                violations=[
                    (start + float(a), start + float(b), str(p)) for a, b, p in entry.get("violations", ())
                ],
                processes=[FakeProcess(**p) for p in entry.get("processes", ())],
                values=dict(entry.get("values", {})),
            )
            gpus.append(g)
    fake = FakeNVML(gpus, clock=clock, sleep=sleep)
    for i, g in enumerate(fake.gpus):
        g.minor_number = spec.get("minor_numbers", {}).get(str(i), g.minor_number)
    return fake


def load_spec(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _dump_builtin(fixture_dir: Path, out_dir: Path) -> None:
    for model, fname in CAPTURES.items():
        states = ("idle",) if fname.endswith(".xml") else ("idle", "load")
        data = {state: profile_to_dict(load_capture(fixture_dir / fname, state)) for state in states}
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        (out_dir / f"{model}.json").write_text(text, encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover - maintenance helper
    import sys

    _dump_builtin(Path(sys.argv[1]), Path(__file__).with_name("profiles"))
