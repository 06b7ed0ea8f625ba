#!/usr/bin/env bash
# Check the NVML agent against a real GPU, the day one is lent (no GPU was available when this was written).
#
#   benchmarks/nvml_real_gpu.sh [OUT_DIR]        (from the repository root; default OUT_DIR=${OUT:-nvml-real-gpu})
#   FAKE=spec.json benchmarks/nvml_real_gpu.sh OUT_DIR   (the same run on the fake backend: a dry run of the
#                                                        script where no GPU is lent; nothing it prints is a GPU's)
#
# 1. makes sure `pynvml` (nvidia-ml-py) and slurmscope are importable (pip install when not; offline wheels
#    can be given with PIP_FIND_LINKS=/path PIP_NO_INDEX=1),
# 2. saves `nvidia-smi -q -x` and `nvidia-smi -L` (new fixtures for the fake),
# 3. calls every pynvml function the agent uses on every GPU: which fields were read, which raised
#    NotSupported / NoPermission / other, and each call's median latency (fields.json), and what the per-counter
#    fields say (details.json): GPM support and a 1-s GPM sample pair (SM activity, SM occupancy, tensor and
#    DRAM activity), the violation time of every perf policy (nvmlDeviceGetViolationStatus, and the same counters
#    as field values NVML_FI_DEV_PERF_POLICY_*, to settle their unit), the per-cause clock-event counters
#    (NVML_FI_DEV_CLOCKS_EVENT_REASON_*) beside the reasons active now, every NVLink's state and four error
#    counters, remapped rows, retired pages per cause and pending, the PCIe link (benchmarks/nvml_probe.py),
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

if [[ -n "${FAKE:-}" ]]; then
    log "FAKE=$FAKE: a dry run on the fake backend, no GPU is read"
elif command -v nvidia-smi >/dev/null; then
    nvidia-smi -L > "$OUT_DIR/nvidia-smi-L.txt" 2>&1 || true
    nvidia-smi -q -x > "$OUT_DIR/nvidia-smi-q.xml" 2>&1 || true
    nvidia-smi > "$OUT_DIR/nvidia-smi.txt" 2>&1 || true
else
    log "nvidia-smi not found (continuing with NVML only)"
fi

log "probing NVML calls and agent rounds"
(cd "$REPO" && "$PY" -m benchmarks.nvml_probe "$OUT_DIR") > "$OUT_DIR/probe.out" 2>&1 \
    || log "probe failed (see probe.out)"

log "running the agent for 60 s"
SLURMSCOPE="$(dirname "$PY")/slurmscope"
[[ -x "$SLURMSCOPE" ]] || SLURMSCOPE="$PY -m slurmscope.cli"
PORT="${PORT:-19401}"
FAKE_ARGS=()
[[ -n "${FAKE:-}" ]] && FAKE_ARGS=(--fake "$FAKE")
$SLURMSCOPE agent --port "$PORT" --spool "$OUT_DIR/spool" --interval 1 "${FAKE_ARGS[@]}" > "$OUT_DIR/agent.log" 2>&1 &
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
real = f.get("backend") != "fake"
lines = [f"# NVML agent on {'a real GPU' if real else 'the FAKE backend (a dry run: no GPU figure)'}", "",
         f"driver {f.get('driver')}, CUDA {f.get('cuda')}", "",
         "| GPU | field | status | median µs |", "|---|---|---|---|"]
for g in f["gpus"]:
    for name, r in g["fields"].items():
        lines.append(f"| {g['index']} | {name} | {r['status']} | {r.get('median_us', '')} |")
for g in f["gpus"]:
    d = g.get("details", {})
    links = d.get("nvlink")
    erring = links
    if isinstance(links, dict):
        erring = {k: v for k, v in links.items() if any(isinstance(x, int) and x for c, x in v.items() if c != "state")}
    lines += ["", f"GPU {g['index']}: GPM supported {d.get('gpm_supported')}; GPM over 1 s {d.get('gpm_percent_over_1s')}",
              f"- clock-event reasons now {d.get('clock_event_reasons')}; per-cause counters (ns) {d.get('clock_event_counters_ns')}",
              f"- violation time (ns) {d.get('violation_ns')}; as field values {d.get('perf_policy_fields')}",
              f"- NVLink: {len(links) if isinstance(links, dict) else links} links; with errors {erring}",
              f"- remapped rows {d.get('remapped_rows')}; retired pages {d.get('retired_pages')}, pending"
              f" {d.get('retired_pages_pending')}; PCIe link (gen, width) {d.get('pcie_link')}"]
lines += ["", f"agent round (in-process, {f.get('backend')}): {json.dumps(f.get('agent_round', {}))}",
          f"agent process at --interval 1 for 60 s: {json.dumps(proc)}"]
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
log "checking that the closed spool loads"
$SLURMSCOPE --db "$OUT_DIR/check.duckdb" ingest nvml "$OUT_DIR"/spool/*.jsonl >> "$OUT_DIR/run.log" 2>&1 \
    && $SLURMSCOPE --db "$OUT_DIR/check.duckdb" query \
        "SELECT gpu_index, count(*) AS minutes, sum(samples) AS samples, max(util_gpu_max) AS util_max,
                max(power_max_watts) AS power_max, sum(energy_joules) AS joules, sum(null_fields) AS null_fields,
                min(activity_source) AS activity, avg(sm_active_mean) AS sm_active, sum(gpm_samples) AS gpm,
                sum(nvlink_errors_delta) AS nvlink_errors, max(pcie_link_gen) AS pcie_gen,
                sum(violation_power_seconds) AS power_violation_s, max(remapped_uncorrectable) AS remapped_unc
         FROM gpu_samples GROUP BY 1 ORDER BY 1" > "$OUT_DIR/loaded.txt" 2>&1 \
    || log "ingest check failed (see run.log)"
log "done: $OUT_DIR/summary.md"
