"""The agent itself: one node's sampling loop (`Agent.tick`) and the `slurmscope agent` entry point.

Every NVML call may fail (NotSupported, NoPermission, GPU lost, Unknown). A failed field is null and
counted, never zero; a lost GPU becomes a health event; the agent itself never dies on an NVML error.
Pure code takes `now` as an argument; only `run_agent` reads the wall clock, so tests run instantly.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmscope.agent.attribution import (
    Attributor,
    JobMapping,
    ProcessSeen,
    normalize_bus_id,
    parse_cgroup_job,
    parse_mapping,
)
from slurmscope.agent.http import start_http
from slurmscope.agent.kmsg import KmsgReader, parse_xid, read_boot_id, read_boot_time
from slurmscope.agent.sampling import SLOW_FIELDS, THROTTLE_MASK, Device, MinuteAggregator, Reading
from slurmscope.agent.spool import SpoolJournal, prune_acked

from slurmscope import xid as xids
from slurmscope.spool import CLOCK_EVENT_CAUSES, iso

log = logging.getLogger(__name__)

XID_DEDUP_SECONDS = 10.0

# pynvml's names for the spool's NVLink counters, violation policies and GPM metrics, in the order of
# slurmscope/spool.py's NVLINK_COUNTERS, VIOLATION_POLICIES and GPM_FIELDS (tests/agent/test_agent_counters.py checks).
NVLINK_COUNTER_IDS = {
    "crc_flit": "NVML_NVLINK_ERROR_DL_CRC_FLIT",
    "crc_data": "NVML_NVLINK_ERROR_DL_CRC_DATA",
    "replay": "NVML_NVLINK_ERROR_DL_REPLAY",
    "recovery": "NVML_NVLINK_ERROR_DL_RECOVERY",
}
VIOLATION_POLICY_IDS = {
    "power": "NVML_PERF_POLICY_POWER",
    "thermal": "NVML_PERF_POLICY_THERMAL",
    "sync_boost": "NVML_PERF_POLICY_SYNC_BOOST",
    "board_limit": "NVML_PERF_POLICY_BOARD_LIMIT",
    "low_util": "NVML_PERF_POLICY_LOW_UTILIZATION",
    "reliability": "NVML_PERF_POLICY_RELIABILITY",
}
GPM_METRIC_IDS = {
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_active": "NVML_GPM_METRIC_DRAM_BW_UTIL",
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
        rotate_seconds: float = 60.0,
        xid_actions: dict[int, str] | None = None,
        xid_window_seconds: float = 3600.0,
    ) -> None:
        """`xid_actions` and `xid_window_seconds` are config health.xid_actions and health.event_window_seconds:
        an XID whose action is failing (NVIDIA's catalogue, slurmscope/xid.py) makes the GPU unhealthy for
        that long, as it makes the central verdict failing, so /metrics and the verdict agree."""
        if interval < 1:
            raise ValueError("interval must be >= 1 second")
        self.nvml, self.node, self.cluster = nvml, node, cluster
        self.xid_actions = {int(k): v for k, v in (xid_actions or {}).items()}
        self.xid_window = float(xid_window_seconds)
        self.spool_dir, self.mapping_dir = Path(spool_dir), mapping_dir
        self.interval, self.slow_interval = float(interval), float(slow_interval)
        self.proc_root = proc_root
        self.flush_seconds = flush_seconds
        self.read_cgroup = read_cgroup or self._read_cgroup
        self.kmsg, self.sleep, self.clock = kmsg, sleep, clock
        self.journal = SpoolJournal(self.spool_dir, node, cluster, rotate_seconds=rotate_seconds)
        self.inventory_at: float | None = None
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
            self._discover_gpm(dev)
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

    def _discover_gpm(self, dev: Device) -> None:
        """GPM where NVML says the GPU supports it (Hopper and newer); two sample buffers, used in turn.

        A GPU in MIG mode is left to GPU_UTIL: its per-instance GPM (nvmlGpmMigSampleGet) is not read."""
        nv = self.nvml
        dev.gpm = False
        if dev.mig_mode:
            return
        support = self._call(dev, "gpm", nv.nvmlGpmQueryDeviceSupport, dev.handle)
        if support is None or not support.isSupportedDevice:
            return
        bufs = [self._call(dev, "gpm", nv.nvmlGpmSampleAlloc) for _ in range(2)]
        if None in bufs:
            return
        dev.gpm, dev.gpm_buf = True, bufs

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
            if xid == 79:  # fallen off the bus: a state, held as a lost GPU is
                self._unhealthy(dev, now, "xid 79", source)
            elif xids.verdict_of(xid, self.xid_actions) == "failing":
                was = self.healthy(dev, now)
                dev.failing_xid = (xid, now)
                if was:
                    detail = f"unhealthy: xid {xid} ({self.xid_action(xid)})"
                    self._event(now, dev, "health", source=source, detail=detail)

    def xid_action(self, code: int) -> str:
        return str(xids.action_of(code, self.xid_actions))

    def healthy(self, dev: Device, now: float) -> bool:
        """False while the GPU is lost or its row remapping failed (states), or for the event window after an
        XID whose action is failing (reset_gpu, reboot_node, contact_support), as the verdict judges it."""
        if not dev.healthy:
            return False
        return dev.failing_xid is None or now - dev.failing_xid[1] >= self.xid_window

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
                err = _RETURN_NAMES.get(v.nvmlReturn, "Other")
                key = (dev.index, "memory_temperature", err)
                self.field_errors[key] = self.field_errors.get(key, 0) + 1
        r.sm_clock = self._call(dev, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        r.mem_clock = self._call(dev, "mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        r.reasons = self._clock_reasons(dev)
        r.pcie_replay = self._call(dev, "pcie_replay", nv.nvmlDeviceGetPcieReplayCounter, h)
        if dev.gpm:
            r.gpm = self._gpm(dev)
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
                r.remapped_corr, r.remapped_unc = int(rows[0]), int(rows[1])
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
                r.retired_sbe, r.retired_dbe = len(pages), None if dbe is None else len(dbe)
                r.retired_pages = len(pages) + len(dbe or [])
                pending = self._call(dev, "retired_pages", nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
                r.retired_pending = None if pending is None else bool(pending)
            r.pcie_gen = self._call(dev, "pcie_link", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
            r.pcie_width = self._call(dev, "pcie_link", nv.nvmlDeviceGetCurrPcieLinkWidth, h)
            r.violations = self._violations(dev)
            r.nvlink = self._nvlink(dev)
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

    def _nvlink(self, dev: Device) -> dict[int, dict[str, int]] | None:
        """Each link's error counters (nvmlDeviceGetNvLinkErrorCounter); None without NVLink (or in MIG mode)."""
        nv, out = self.nvml, {}
        ids = {c: getattr(nv, name) for c, name in NVLINK_COUNTER_IDS.items()}
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
            counts = {}
            for c, counter in ids.items():
                v = self._call(dev, "nvlink", nv.nvmlDeviceGetNvLinkErrorCounter, dev.handle, link, counter)
                if v is not None:
                    counts[c] = int(v)
            out[link] = counts
        return out or None

    def _violations(self, dev: Device) -> dict[str, int] | None:
        """NVML's violation time (ns) per policy (nvmlDeviceGetViolationStatus); policies NVML refuses are left
        out."""
        nv, out = self.nvml, {}
        for policy, name in VIOLATION_POLICY_IDS.items():
            v = self._call(dev, "violation", nv.nvmlDeviceGetViolationStatus, dev.handle, getattr(nv, name))
            if v is not None:
                out[policy] = int(v.violationTime)
        return out or None

    def _gpm(self, dev: Device) -> dict[str, float] | None:
        """The GPM metrics between this round's sample and the previous one (None in the first round or when
        NVML fails); the two buffers swap roles each round."""
        nv = self.nvml
        cur, prev = dev.gpm_buf[dev.gpm_next], dev.gpm_buf[1 - dev.gpm_next]
        if self._call(dev, "gpm", nv.nvmlGpmSampleGet, dev.handle, cur) is None:
            dev.gpm_have_prev = False
            return None
        have_prev, dev.gpm_have_prev, dev.gpm_next = dev.gpm_have_prev, True, 1 - dev.gpm_next
        if not have_prev:
            return None
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRIC_IDS)
        mg.sample1, mg.sample2 = prev, cur
        for i, name in enumerate(GPM_METRIC_IDS.values()):
            mg.metrics[i].metricId = getattr(nv, name)
        if self._call(dev, "gpm", nv.nvmlGpmMetricsGet, mg) is None:
            return None
        out = {}
        for i, field_ in enumerate(GPM_METRIC_IDS):
            m = mg.metrics[i]
            if m.nvmlReturn == nv.NVML_SUCCESS:
                out[field_] = float(m.value)
            else:
                key = (dev.index, f"gpm_{field_}", _RETURN_NAMES.get(m.nvmlReturn, "Other"))
                self.field_errors[key] = self.field_errors.get(key, 0) + 1
        return out or None

    def _check_slow_health(self, dev: Device, r: Reading, now: float) -> None:
        prev = dev.last
        if r.remapped_failed:
            self._unhealthy(dev, now, "row remapping failed", "nvml")
        if r.remapped_pending and not (prev and prev.remapped_pending):
            self._event(now, dev, "ecc", detail="row remapping pending (reset required)")
        if r.retired_pending and not (prev and prev.retired_pending):
            self._event(now, dev, "ecc", detail="page retirement pending (reset or reboot required)")
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
        if self.journal.name is None:
            try:
                self.journal.open(now)
            except OSError as exc:
                self._spool_failed(exc)
        if not self.initialized:
            self._init(now)
        if self.initialized and (
            self.inventory_at is None or int(now // 3600) != int(self.inventory_at // 3600)
        ):
            self.inventory_at = now
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
            if r.reasons is not None:
                if r.reasons & THROTTLE_MASK:
                    dev.throttle_seconds_total += self.interval
                for cause, bit in CLOCK_EVENT_CAUSES.items():
                    if r.reasons & bit:
                        total = dev.clock_event_seconds_total
                        total[cause] = total.get(cause, 0.0) + self.interval
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
        if self.journal.due(now):
            # After this round's write, so the minute that just completed is in the file that closes now.
            try:
                self.journal.close()
            except OSError as exc:
                self._spool_failed(exc)
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
                self.pending.extend(dev.agg.flush())

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
                for dev in self.devices:
                    for buf in dev.gpm_buf:
                        self.nvml.nvmlGpmSampleFree(buf)
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
            # /metrics shows the XID (and the health it costs) now, not at the next sampling round: the
            # real-time alerts' latency budget (docs/nvml.md) is scrape + evaluation, not + interval.
            self._update_snapshot(self.last_sample_time if self.last_sample_time is not None else now)

    # -- metrics snapshot ---------------------------------------------------------------------------
    def _update_snapshot(self, now: float) -> None:
        devs = []
        for d in self.devices:
            r = d.last
            devs.append(
                {
                    "labels": {"node": self.node, "gpu": str(d.index), "uuid": d.uuid, "model": d.name or ""},
                    "reading": None if (r is None or d.lost) else r,
                    "healthy": self.healthy(d, now),
                    "lost": d.lost,
                    "xids": dict(d.xids),
                    "mig": bool(d.mig_mode),
                    "gpm": d.gpm,
                    "throttle_total": d.throttle_seconds_total,
                    "clock_events": dict(d.clock_event_seconds_total),
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


_RETURN_NAMES = {3: "NotSupported", 4: "NoPermission", 15: "GpuIsLost"}
"""NVML return codes a per-value result carries (nvmlFieldValue_t, nvmlGpmMetric_t) -> the error's name."""


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
    kmsg_path: str | None = "/dev/kmsg",
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
        from slurmscope.agent.fake import fake_from_spec, load_spec

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
        rotate_seconds=float(cfg.get("nvml", "spool_rotate_seconds")),
        xid_actions=cfg.get("health", "xid_actions"),
        xid_window_seconds=float(cfg.get("health", "event_window_seconds")),
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
