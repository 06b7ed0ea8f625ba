"""The NVML probe of benchmarks/nvml_real_gpu.sh: every pynvml call the agent makes, on every GPU, with its result
class and median latency; what the per-counter and GPM fields say; then 61 agent rounds in-process.

    .venv/bin/python -m benchmarks.nvml_probe OUT_DIR            (real NVML)
    FAKE=spec.json .venv/bin/python -m benchmarks.nvml_probe OUT_DIR   (the fake backend: a dry run)

Writes OUT_DIR/fields.json (per call: status, median µs, value) and OUT_DIR/details.json (per GPU: GPM support
and a 1-s GPM sample pair, violation time per policy and the same counters as NVML field values, the per-cause
clock-event counters and the current reasons, every NVLink's state and error counters, remapped rows, retired
pages per cause and pending, the PCIe link). It changes no GPU setting.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
from slurmscope.agent.agent import GPM_METRIC_IDS, NVLINK_COUNTER_IDS, VIOLATION_POLICY_IDS, Agent

from slurmscope.spool import CLOCK_EVENT_CAUSES


def backend() -> Any:
    if os.environ.get("FAKE"):
        from slurmscope.agent.fake import fake_from_spec, load_spec

        return fake_from_spec(load_spec(os.environ["FAKE"]), clock=time.time, sleep=time.sleep)
    return pynvml


def _err(exc: Exception) -> str:
    return type(exc).__name__.replace("NVMLError_", "")


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except pynvml.NVMLError as exc:
        return _err(exc)


def calls(nv: Any) -> list[tuple[str, Callable[[Any], Any]]]:
    def field(h: Any, fid: int) -> Any:
        v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
        if v.nvmlReturn != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(v.nvmlReturn)
        return v.value.uiVal

    corr, unc = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return [
        ("name", lambda h: nv.nvmlDeviceGetName(h)),
        ("uuid", lambda h: nv.nvmlDeviceGetUUID(h)),
        ("serial", lambda h: nv.nvmlDeviceGetSerial(h)),
        ("minor_number", lambda h: nv.nvmlDeviceGetMinorNumber(h)),
        ("pci_info", lambda h: nv.nvmlDeviceGetPciInfo(h).busId),
        ("utilization", lambda h: nv.nvmlDeviceGetUtilizationRates(h).gpu),
        ("memory_info", lambda h: nv.nvmlDeviceGetMemoryInfo(h).used),
        ("power", lambda h: nv.nvmlDeviceGetPowerUsage(h)),
        ("energy", lambda h: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
        ("temperature", lambda h: nv.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
        ("memory_temperature", lambda h: field(h, pynvml.NVML_FI_DEV_MEMORY_TEMP)),
        ("sm_clock", lambda h: nv.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
        ("mem_clock", lambda h: nv.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
        ("clock_event_reasons", lambda h: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
        ("pcie_replay", lambda h: nv.nvmlDeviceGetPcieReplayCounter(h)),
        ("pcie_link_gen", lambda h: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        ("pcie_link_width", lambda h: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
        (
            "ecc_volatile_corrected",
            lambda h: nv.nvmlDeviceGetTotalEccErrors(h, corr, pynvml.NVML_VOLATILE_ECC),
        ),
        (
            "ecc_aggregate_uncorrected",
            lambda h: nv.nvmlDeviceGetTotalEccErrors(h, unc, pynvml.NVML_AGGREGATE_ECC),
        ),
        ("remapped_rows", lambda h: nv.nvmlDeviceGetRemappedRows(h)),
        (
            "retired_pages",
            lambda h: len(
                nv.nvmlDeviceGetRetiredPages(h, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
            ),
        ),
        ("retired_pages_pending", lambda h: nv.nvmlDeviceGetRetiredPagesPendingStatus(h)),
        (
            "violation_power",
            lambda h: nv.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_POWER).violationTime,
        ),
        ("nvlink_state_0", lambda h: nv.nvmlDeviceGetNvLinkState(h, 0)),
        (
            "nvlink_errors_0",
            lambda h: nv.nvmlDeviceGetNvLinkErrorCounter(h, 0, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
        ),
        ("gpm_support", lambda h: nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice),
        ("mig_mode", lambda h: nv.nvmlDeviceGetMigMode(h)),
        (
            "processes",
            lambda h: [(p.pid, p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)],
        ),
    ]


def field_values(nv: Any, h: Any, prefix: str) -> dict[str, Any]:
    """Every pynvml NVML_FI_DEV_<prefix>* field as NVML returns it (unsigned 64-bit), or the error's name."""
    out = {}
    for name in sorted(n for n in dir(pynvml) if n.startswith(prefix)):
        fv = nv.nvmlDeviceGetFieldValues(h, [getattr(pynvml, name)])[0]
        key = name[len(prefix) :].lower()
        ok = fv.nvmlReturn == pynvml.NVML_SUCCESS
        out[key] = int(fv.value.ullVal) if ok else _err(pynvml.NVMLError(fv.nvmlReturn))
    return out


def gpm_pair(nv: Any, h: Any) -> Any:
    """The four GPM metrics over one second (two samples), as the agent asks for them."""
    a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    try:
        nv.nvmlGpmSampleGet(h, a)
        time.sleep(1.0)
        nv.nvmlGpmSampleGet(h, b)
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version, mg.numMetrics = pynvml.NVML_GPM_METRICS_GET_VERSION, len(GPM_METRIC_IDS)
        mg.sample1, mg.sample2 = a, b
        for k, name in enumerate(GPM_METRIC_IDS.values()):
            mg.metrics[k].metricId = getattr(pynvml, name)
        nv.nvmlGpmMetricsGet(mg)
        return {
            f: round(mg.metrics[k].value, 2)
            if mg.metrics[k].nvmlReturn == pynvml.NVML_SUCCESS
            else _err(pynvml.NVMLError(mg.metrics[k].nvmlReturn))
            for k, f in enumerate(GPM_METRIC_IDS)
        }
    finally:
        nv.nvmlGpmSampleFree(a)
        nv.nvmlGpmSampleFree(b)


def details(nv: Any, h: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}
    reasons = _try(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h))
    d["clock_event_reasons"] = (
        reasons
        if isinstance(reasons, str)
        else {"mask": hex(reasons), "active": [c for c, bit in CLOCK_EVENT_CAUSES.items() if reasons & bit]}
    )
    d["clock_event_counters_ns"] = _try(lambda: field_values(nv, h, "NVML_FI_DEV_CLOCKS_EVENT_REASON_"))
    d["violation_ns"] = {}
    for policy, name in VIOLATION_POLICY_IDS.items():
        c = getattr(pynvml, name)
        d["violation_ns"][policy] = _try(lambda c=c: nv.nvmlDeviceGetViolationStatus(h, c).violationTime)
    d["perf_policy_fields"] = _try(lambda: field_values(nv, h, "NVML_FI_DEV_PERF_POLICY_"))
    links: Any = {}
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = _try(lambda link=link: nv.nvmlDeviceGetNvLinkState(h, link))
        if isinstance(state, str):
            links = state if link == 0 else links
            break
        links[link] = {"state": state}
        for c, name in NVLINK_COUNTER_IDS.items():
            counter = getattr(pynvml, name)
            links[link][c] = _try(lambda link=link, k=counter: nv.nvmlDeviceGetNvLinkErrorCounter(h, link, k))
    d["nvlink"] = links
    d["remapped_rows"] = _try(lambda: nv.nvmlDeviceGetRemappedRows(h))
    d["retired_pages"] = {}
    for cause, name in (
        ("multiple_single_bit", "MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
        ("double_bit", "DOUBLE_BIT_ECC_ERROR"),
    ):
        k = getattr(pynvml, f"NVML_PAGE_RETIREMENT_CAUSE_{name}")
        d["retired_pages"][cause] = _try(lambda k=k: len(nv.nvmlDeviceGetRetiredPages(h, k)))
    d["retired_pages_pending"] = _try(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
    d["pcie_link"] = _try(
        lambda: [nv.nvmlDeviceGetCurrPcieLinkGeneration(h), nv.nvmlDeviceGetCurrPcieLinkWidth(h)]
    )
    d["gpm_supported"] = _try(lambda: nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    if d["gpm_supported"] == 1:
        d["gpm_percent_over_1s"] = _try(lambda: gpm_pair(nv, h))
    return d


def probe(nv: Any, out: Path) -> dict[str, Any]:
    nv.nvmlInit()
    result: dict[str, Any] = {
        "backend": "nvml" if nv is pynvml else "fake",
        "driver": nv.nvmlSystemGetDriverVersion(),
        "cuda": nv.nvmlSystemGetCudaDriverVersion(),
        "gpus": [],
    }
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        g: dict[str, Any] = {"index": i, "fields": {}}
        for name, fn in calls(nv):
            times, value, status = [], None, "ok"
            for _ in range(20):
                t0 = time.perf_counter()
                try:
                    value = fn(h)
                except pynvml.NVMLError as exc:
                    status = _err(exc)
                times.append(time.perf_counter() - t0)
            g["fields"][name] = {
                "status": status,
                "median_us": round(1e6 * statistics.median(times), 1),
                "value": repr(value)[:200] if status == "ok" else None,
            }
        try:
            es = nv.nvmlEventSetCreate()
            nv.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
            try:
                nv.nvmlEventSetWait(es, 100)
                g["fields"]["xid_events"] = {"status": "ok (event pending)"}
            except pynvml.NVMLError_Timeout:
                g["fields"]["xid_events"] = {"status": "ok"}
            nv.nvmlEventSetFree(es)
        except pynvml.NVMLError as exc:
            g["fields"]["xid_events"] = {"status": _err(exc)}
        g["details"] = details(nv, h)
        result["gpus"].append(g)
    nv.nvmlShutdown()
    result["agent_round"] = agent_rounds(nv)
    (out / "fields.json").write_text(json.dumps(result, indent=1, default=str))
    details_by_gpu = {g["index"]: g["details"] for g in result["gpus"]}
    (out / "details.json").write_text(json.dumps(details_by_gpu, indent=1, default=str))
    return result


def agent_rounds(nv: Any) -> dict[str, Any]:
    """61 rounds of the agent at 1 s with this NVML: the first discovers, the rest are sampling rounds (every
    60th a slow one)."""
    with tempfile.TemporaryDirectory() as d:
        agent = Agent(nv, node="probe", spool_dir=Path(d), mapping_dir=None, interval=1)
        rounds = []
        for _ in range(61):
            t0, c0 = time.perf_counter(), time.process_time()
            agent.tick(time.time())
            rounds.append((time.perf_counter() - t0, time.process_time() - c0))
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
        agent.close(time.time())
    fast = rounds[1:]
    return {
        "rounds": len(fast),
        "median_wall_ms": round(1e3 * statistics.median(r[0] for r in fast), 2),
        "max_wall_ms": round(1e3 * max(r[0] for r in fast), 2),
        "median_cpu_ms": round(1e3 * statistics.median(r[1] for r in fast), 2),
        "gpm_supported": {dev.index: dev.gpm for dev in agent.devices},
        "field_errors": {f"gpu{k[0]}:{k[1]}:{k[2]}": v for k, v in sorted(agent.field_errors.items())},
    }


if __name__ == "__main__":
    res = probe(backend(), Path(sys.argv[1]))
    print(json.dumps(res["agent_round"], indent=1))
