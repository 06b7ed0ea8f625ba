"""The fake NVML: values from real nvidia-smi captures, pynvml's names, signatures and exceptions."""

from __future__ import annotations

import inspect

import pynvml
import pytest
from slurmscope.agent.fake import (
    CAPTURES,
    FakeGpu,
    FakeNVML,
    FakeProcess,
    builtin_profile,
    builtin_profiles,
    fake_from_spec,
    load_capture,
    profile_to_dict,
)


@pytest.fixture
def clock():
    t = [1000.0]
    return t


def make(clock, *entries, **kw):
    fake = fake_from_spec({"gpus": list(entries), "start": clock[0]}, clock=lambda: clock[0], **kw)
    fake.nvmlInit()
    return fake


def test_builtin_profiles_are_exactly_what_the_captures_say(fixtures):
    """The shipped profiles (package data, for when tests/ is absent) equal a fresh parse of the captures."""
    d = fixtures / "nvidia-smi"
    for model, fname in CAPTURES.items():
        for state in ("idle",) if fname.endswith(".xml") else ("idle", "load"):
            assert builtin_profiles()[f"{model}:{state}"] == profile_to_dict(load_capture(d / fname, state))


def test_h100_values_read_by_hand_from_the_capture(fixtures):
    # load :: query-gpu of the H100 capture: "631.95 W", "81559 MiB", "19818 MiB", "100 %", "11 %",
    # temperature.gpu 59, temperature.memory 54, clocks.current.sm "1980 MHz", CUDA Version 13.1
    p = load_capture(fixtures / "nvidia-smi" / CAPTURES["h100"], "load")
    assert p.name == "NVIDIA H100 80GB HBM3"
    assert p.power_mw == 631950
    assert p.memory_total_bytes == 81559 * 1024 * 1024
    assert p.memory_used_bytes == 19818 * 1024 * 1024
    assert (p.util_gpu, p.util_mem, p.temp_gpu, p.temp_mem, p.sm_clock_mhz) == (100, 11, 59, 54, 1980)
    assert p.cuda_version == 13010
    assert p.retired_pages is None  # "[N/A]" on Hopper
    assert p.remapped_rows == (0, 0, False, False)
    assert p.nvlink_links == 18  # `nvidia-smi nvlink -s` lists Link 0..17
    idle = load_capture(fixtures / "nvidia-smi" / CAPTURES["h100"], "idle")
    assert idle.clock_event_reasons == 0x1  # GPU idle
    assert idle.power_mw == 69850


def test_mig_devices_from_captures(fixtures):
    h = load_capture(fixtures / "nvidia-smi" / CAPTURES["h100-mig"])
    assert h.mig_mode == 1 and h.util_gpu is None
    assert [(m.gpu_instance_id, m.compute_instance_id, m.name) for m in h.mig_devices] == [
        (2, 0, "MIG 3g.40gb"),
        (3, 0, "MIG 2g.20gb"),
        (9, 0, "MIG 1g.10gb"),
        (10, 0, "MIG 1g.10gb"),
    ]
    a = load_capture(fixtures / "nvidia-smi" / CAPTURES["a100-mig"])
    assert (a.name, a.minor_number, a.pci_bus_id) == ("NVIDIA A100-SXM4-80GB", 1, "00000000:01:00.0")
    assert [m.gpu_instance_id for m in a.mig_devices] == [3, 4, 5, 6]
    assert a.temp_mem == 44 and a.power_mw == 67030 and a.util_gpu is None


def test_signatures_match_pynvml():
    """Every pynvml function the fake offers takes the same parameters as the real one."""
    checked = 0
    for name, member in inspect.getmembers(FakeNVML, inspect.isfunction):
        if not name.startswith("nvml"):
            continue
        real = getattr(pynvml, name)
        fake_params = list(inspect.signature(member).parameters)[1:]
        real_params = list(inspect.signature(real).parameters)
        assert fake_params == real_params, name
        checked += 1
    assert checked >= 30


def test_na_fields_raise_the_real_not_supported(clock):
    fake = make(clock, {"model": "l40s", "state": "load"}, {"model": "h100-mig"})
    l40s, mig = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigMode(l40s)  # mig.mode.current "[N/A]"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(l40s, 0)  # "Device does not have or support Nvlink"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetUtilizationRates(mig)  # utilization.gpu "[N/A]" in MIG mode
    fv = fake.nvmlDeviceGetFieldValues(l40s, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    assert fv[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED  # temperature.memory "N/A"
    assert fake.nvmlDeviceGetUtilizationRates(l40s).gpu == 9
    assert isinstance(fake.nvmlDeviceGetUtilizationRates(l40s), pynvml.c_nvmlUtilization_t)


def test_forced_errors_use_pynvml_classes(clock):
    fake = make(
        clock,
        {
            "model": "h100",
            "not_supported": ["ecc"],
            "no_permission": ["processes"],
            "unknown_error": ["power"],
        },
    )
    h = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetTotalEccErrors(h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        fake.nvmlDeviceGetComputeRunningProcesses(h)
    with pytest.raises(pynvml.NVMLError_Unknown):
        fake.nvmlDeviceGetPowerUsage(h)
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_gpu_falls_off_the_bus_and_emits_xid_79(clock):
    slept = []
    fake = make(clock, {"model": "h100", "lost_at": 30.0}, sleep=slept.append)
    h = fake.nvmlDeviceGetHandleByIndex(0)
    es = fake.nvmlEventSetCreate()
    fake.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait(es, 10_000)  # nothing due within 10 s
    assert slept == [10.0]
    ev = fake.nvmlEventSetWait(es, 60_000)  # due 30 s after start
    assert (ev.eventData, ev.eventType, ev.device.index) == (79, pynvml.nvmlEventTypeXidCriticalError, 0)
    assert slept[-1] == 30.0
    clock[0] += 30
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlEventSetWait(es, 0)  # delivered once only


def test_xid_stream_in_time_order(clock):
    fake = make(clock, {"model": "h100", "xid_events": [[20, 13], [5, 31]]}, {"model": "h100"})
    es = fake.nvmlEventSetCreate()
    for i in range(2):
        fake.nvmlDeviceRegisterEvents(
            fake.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, es
        )
    clock[0] += 100
    assert [fake.nvmlEventSetWait(es, 0).eventData for _ in range(2)] == [31, 13]


def test_energy_counter_integrates_power(clock):
    fake = make(clock, {"model": "h100", "state": "load"})
    h = fake.nvmlDeviceGetHandleByIndex(0)
    e0 = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    clock[0] += 10
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) - e0 == 631950 * 10  # mJ: 631.95 W for 10 s
    fake.set_values(0, power_mw=100_000)
    clock[0] += 5
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) - e0 == 631950 * 10 + 100_000 * 5


def test_identity_is_distinct_and_pci_struct_is_real(clock):
    fake = make(clock, {"model": "h100", "count": 3})
    uuids = {fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetHandleByIndex(i)) for i in range(3)}
    assert len(uuids) == 3 and all(u.startswith("GPU-") for u in uuids)
    info = fake.nvmlDeviceGetPciInfo(fake.nvmlDeviceGetHandleByIndex(1))
    assert isinstance(info, pynvml.nvmlPciInfo_t) and info.busId == "00000000:27:00.0" and info.bus == 0x27


def test_processes_are_pynvml_structs_with_mig_ids(clock):
    gpu = FakeGpu(builtin_profile("h100-mig"), processes=[FakeProcess(4242, 1 << 30, 9, 0)])
    fake = FakeNVML([gpu], clock=lambda: clock[0])
    fake.nvmlInit()
    procs = fake.nvmlDeviceGetComputeRunningProcesses(fake.nvmlDeviceGetHandleByIndex(0))
    assert isinstance(procs[0], pynvml.c_nvmlProcessInfo_v2_t)
    assert (procs[0].pid, procs[0].usedGpuMemory, procs[0].gpuInstanceId) == (4242, 1 << 30, 9)
    h = fake.nvmlDeviceGetHandleByIndex(0)
    migs = [fake.nvmlDeviceGetMigDeviceHandleByIndex(h, j) for j in range(4)]
    assert [fake.nvmlDeviceGetGpuInstanceId(m) for m in migs] == [2, 3, 9, 10]
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(h, 4)
