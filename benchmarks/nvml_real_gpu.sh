#!/usr/bin/env bash
# Check the NVML agent against a real GPU, the day one is lent (no GPU was available when this was written).
#
#   benchmarks/nvml_real_gpu.sh [OUT_DIR]        (from the repository root; default OUT_DIR=${OUT:-nvml-real-gpu})
#
# 1. makes sure `pynvml` (nvidia-ml-py) and slurmscope are importable (pip install when not; offline wheels
#    can be given with PIP_FIND_LINKS=/path PIP_NO_INDEX=1),
# 2. saves `nvidia-smi -q -x` and `nvidia-smi -L` (new fixtures for the fake),
# 3. calls every pynvml function the agent uses on every GPU: which fields were read, which raised
#    NotSupported / NoPermission / other, and each call's median latency (fields.json),
# 4. runs the agent's sampling round in-process 60 times with the real NVML (per-round cost, fields null),
# 5. runs `slurmscope agent` for 60 s at --interval 1 and records its CPU share and peak RSS, and checks
#    that the spool file it closes on SIGTERM loads with `slurmscope ingest nvml`,
# 6. writes summary.md to paste into docs/nvml.md ("Measured on a real GPU").
# Everything lands in OUT_DIR; the script never changes GPU settings (no MIG, clocks or reset calls).
set -u -o pipefail

OUT_DIR="${1:-${OUT:-nvml-real-gpu}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
    if [[ -x "$REPO/.venv/bin/python" ]]; then PY="$REPO/.venv/bin/python"; else PY="$(command -v python3)"; fi
fi
log() { echo "[nvml_real_gpu] $*" | tee -a "$OUT_DIR/run.log" >&2; }

log "python: $PY"
if ! "$PY" -c "import pynvml" 2>/dev/null; then
    log "installing nvidia-ml-py"
    "$PY" -m pip install --quiet "nvidia-ml-py~=13.615" 2>&1 | tee -a "$OUT_DIR/run.log" || true
fi
if ! "$PY" -c "import slurmscope.agent.agent" 2>/dev/null; then
    log "installing slurmscope from $REPO"
    "$PY" -m pip install --quiet "$REPO" 2>&1 | tee -a "$OUT_DIR/run.log" || true
fi
"$PY" -c "import pynvml, slurmscope.agent.agent" || { log "cannot import pynvml/slurmscope; stopping"; exit 1; }

if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L > "$OUT_DIR/nvidia-smi-L.txt" 2>&1 || true
    nvidia-smi -q -x > "$OUT_DIR/nvidia-smi-q.xml" 2>&1 || true
    nvidia-smi > "$OUT_DIR/nvidia-smi.txt" 2>&1 || true
else
    log "nvidia-smi not found (continuing with NVML only)"
fi

PROBE="$OUT_DIR/probe.py"
cat > "$PROBE" <<'EOF'
"""Every pynvml call the agent makes, on every GPU: result class and median latency; then agent rounds."""
import json, statistics, sys, tempfile, time
from pathlib import Path

import pynvml as nv

from slurmscope.agent.agent import Agent

out = Path(sys.argv[1])
nv.nvmlInit()
n = nv.nvmlDeviceGetCount()
CALLS = [
    ("name", lambda h: nv.nvmlDeviceGetName(h)),
    ("uuid", lambda h: nv.nvmlDeviceGetUUID(h)),
    ("serial", lambda h: nv.nvmlDeviceGetSerial(h)),
    ("minor_number", lambda h: nv.nvmlDeviceGetMinorNumber(h)),
    ("pci_info", lambda h: nv.nvmlDeviceGetPciInfo(h).busId),
    ("utilization", lambda h: (nv.nvmlDeviceGetUtilizationRates(h).gpu, nv.nvmlDeviceGetUtilizationRates(h).memory)),
    ("memory_info", lambda h: (nv.nvmlDeviceGetMemoryInfo(h).used, nv.nvmlDeviceGetMemoryInfo(h).total)),
    ("power", lambda h: nv.nvmlDeviceGetPowerUsage(h)),
    ("energy", lambda h: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
    ("temperature", lambda h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
    ("memory_temperature", lambda h: _field(h, nv.NVML_FI_DEV_MEMORY_TEMP)),
    ("sm_clock", lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
    ("mem_clock", lambda h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
    ("clock_event_reasons", lambda h: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
    ("pcie_replay", lambda h: nv.nvmlDeviceGetPcieReplayCounter(h)),
    ("ecc_volatile_corrected", lambda h: nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)),
    ("ecc_aggregate_uncorrected", lambda h: nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC)),
    ("remapped_rows", lambda h: nv.nvmlDeviceGetRemappedRows(h)),
    ("retired_pages", lambda h: len(nv.nvmlDeviceGetRetiredPages(h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))),
    ("nvlink_state_0", lambda h: nv.nvmlDeviceGetNvLinkState(h, 0)),
    ("nvlink_errors_0", lambda h: nv.nvmlDeviceGetNvLinkErrorCounter(h, 0, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT)),
    ("mig_mode", lambda h: nv.nvmlDeviceGetMigMode(h)),
    ("processes", lambda h: [(p.pid, p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]),
]

def _field(h, fid):
    v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
    if v.nvmlReturn != nv.NVML_SUCCESS:
        raise nv.NVMLError(v.nvmlReturn)
    return v.value.uiVal

result = {"driver": nv.nvmlSystemGetDriverVersion(), "cuda": nv.nvmlSystemGetCudaDriverVersion(), "gpus": []}
for i in range(n):
    h = nv.nvmlDeviceGetHandleByIndex(i)
    g = {"index": i, "fields": {}}
    for name, fn in CALLS:
        times, value, status = [], None, "ok"
        for _ in range(20):
            t0 = time.perf_counter()
            try:
                value = fn(h)
            except nv.NVMLError as exc:
                status = type(exc).__name__.replace("NVMLError_", "")
            times.append(time.perf_counter() - t0)
        g["fields"][name] = {"status": status, "median_us": round(1e6 * statistics.median(times), 1),
                             "value": repr(value)[:200] if status == "ok" else None}
    try:
        es = nv.nvmlEventSetCreate()
        nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, es)
        try:
            nv.nvmlEventSetWait(es, 100)
            g["fields"]["xid_events"] = {"status": "ok (event pending)"}
        except nv.NVMLError_Timeout:
            g["fields"]["xid_events"] = {"status": "ok"}
        nv.nvmlEventSetFree(es)
    except nv.NVMLError as exc:
        g["fields"]["xid_events"] = {"status": type(exc).__name__.replace("NVMLError_", "")}
    result["gpus"].append(g)
nv.nvmlShutdown()

with tempfile.TemporaryDirectory() as d:
    agent = Agent(nv, node="probe", spool_dir=Path(d), mapping_dir=None, interval=1)
    rounds = []
    for k in range(61):
        t0 = time.perf_counter(); c0 = time.process_time()
        agent.tick(time.time())
        rounds.append((time.perf_counter() - t0, time.process_time() - c0))
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
    agent.close(time.time())
    fast = rounds[1:]
    result["agent_round"] = {
        "rounds": len(fast), "median_wall_ms": round(1e3 * statistics.median(r[0] for r in fast), 2),
        "max_wall_ms": round(1e3 * max(r[0] for r in fast), 2),
        "median_cpu_ms": round(1e3 * statistics.median(r[1] for r in fast), 2),
        "field_errors": {f"gpu{k[0]}:{k[1]}:{k[2]}": v for k, v in sorted(agent.field_errors.items())},
    }
(out / "fields.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result["agent_round"], indent=1))
EOF
log "probing NVML calls and agent rounds"
"$PY" "$PROBE" "$OUT_DIR" > "$OUT_DIR/probe.out" 2>&1 || log "probe failed (see probe.out)"

log "running the agent for 60 s"
SLURMSCOPE="$(dirname "$PY")/slurmscope"
[[ -x "$SLURMSCOPE" ]] || SLURMSCOPE="$PY -m slurmscope.cli"
PORT="${PORT:-19401}"
$SLURMSCOPE agent --port "$PORT" --spool "$OUT_DIR/spool" --interval 1 > "$OUT_DIR/agent.log" 2>&1 &
APID=$!
sleep 5
read_cpu() { awk '{print $14+$15}' "/proc/$APID/stat"; }
CPU0=$(read_cpu); T0=$(date +%s.%N)
for _ in 1 2 3 4; do sleep 15; curl -s "http://127.0.0.1:$PORT/metrics" > "$OUT_DIR/metrics.txt" || true; done
CPU1=$(read_cpu); T1=$(date +%s.%N)
HWM=$(awk '/^VmHWM/ {print $2}' "/proc/$APID/status")
kill -TERM "$APID"; wait "$APID"
TICK=$(getconf CLK_TCK)
"$PY" - "$OUT_DIR" "$CPU0" "$CPU1" "$T0" "$T1" "$HWM" "$TICK" <<'EOF'
import json, sys
from pathlib import Path
out, c0, c1, t0, t1, hwm, tick = Path(sys.argv[1]), *map(float, sys.argv[2:])
wall = t1 - t0
cpu = (c1 - c0) / tick
proc = {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 3), "cpu_share_of_one_core": round(cpu / wall, 5),
        "peak_rss_mb": round(hwm / 1024, 1)}
(out / "agent_process.json").write_text(json.dumps(proc, indent=1))
f = json.loads((out / "fields.json").read_text()) if (out / "fields.json").exists() else {"gpus": []}
lines = ["# NVML agent on a real GPU", "", f"driver {f.get('driver')}, CUDA {f.get('cuda')}", "",
         "| GPU | field | status | median µs |", "|---|---|---|---|"]
for g in f["gpus"]:
    for name, r in g["fields"].items():
        lines.append(f"| {g['index']} | {name} | {r['status']} | {r.get('median_us', '')} |")
lines += ["", f"agent round (in-process, real NVML): {json.dumps(f.get('agent_round', {}))}",
          f"agent process at --interval 1 for 60 s: {json.dumps(proc)}"]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
log "checking that the closed spool loads"
$SLURMSCOPE --db "$OUT_DIR/check.duckdb" ingest nvml "$OUT_DIR"/spool/*.jsonl >> "$OUT_DIR/run.log" 2>&1 \
    && $SLURMSCOPE --db "$OUT_DIR/check.duckdb" query \
        "SELECT gpu_index, count(*) AS minutes, sum(samples) AS samples, max(util_gpu_max) AS util_max,
                max(power_max_watts) AS power_max, sum(energy_joules) AS joules, sum(null_fields) AS null_fields
         FROM gpu_samples GROUP BY 1 ORDER BY 1" > "$OUT_DIR/loaded.txt" 2>&1 \
    || log "ingest check failed (see run.log)"
log "done: $OUT_DIR/summary.md"
