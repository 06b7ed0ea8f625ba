#!/bin/bash
# slurmscope GPU->job mapping, written when Slurm allocates GPUs on this node.
#
# slurm.conf (every GPU node; see docs/nvml.md):
#   Prolog=/usr/local/lib/slurmscope/slurm_prolog.sh
#   Epilog=/usr/local/lib/slurmscope/slurm_epilog.sh
#   PrologFlags=Alloc      # run at allocation, so a GPU allocated to a job that never starts a step is mapped
#
# Writes $SLURMSCOPE_MAPPING_DIR/job_<id> (default /run/slurmscope/gpu-jobs), key=value lines:
#   job_id=123
#   start_time=1733140800            (epoch seconds)
#   devices=0,1                      (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES: device minor numbers,
#                                     or GPU-/MIG- UUIDs where the site's Slurm passes those)
#   pci_bus_ids=0000:17:00.0,...     (resolved from /proc/driver/nvidia/gpus/*/information; only written
#                                     when every minor number resolved)
#   uid=1000
# The slurmscope agent matches devices to NVML by minor number / PCI bus id / UUID, never by index order.
# A prolog that exits non-zero drains the node, so every failure here exits 0 and maps nothing.

DIR="${SLURMSCOPE_MAPPING_DIR:-/run/slurmscope/gpu-jobs}"
PROC_GPUS="${SLURMSCOPE_NVIDIA_PROC:-/proc/driver/nvidia/gpus}"
JOB="${SLURM_JOB_ID:-}"
DEVICES="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"

[[ "$JOB" =~ ^[0-9]+$ ]] || exit 0
[[ -n "$DEVICES" && "$DEVICES" != "NoDevFiles" ]] || exit 0
mkdir -p -m 0755 "$DIR" 2>/dev/null || exit 0

PCI=""
ALL_RESOLVED=1
for tok in ${DEVICES//,/ }; do
    [[ "$tok" =~ ^[0-9]+$ ]] || continue
    found=""
    for info in "$PROC_GPUS"/*/information; do
        [[ -r "$info" ]] || continue
        minor=$(sed -n 's/^Device Minor:[[:space:]]*\([0-9]*\).*/\1/p' "$info")
        if [[ "$minor" == "$tok" ]]; then
            found=$(basename "$(dirname "$info")")
            break
        fi
    done
    if [[ -n "$found" ]]; then
        PCI="${PCI:+$PCI,}$found"
    else
        ALL_RESOLVED=0
    fi
done

tmp="$DIR/.job_${JOB}.$$"
{
    echo "job_id=$JOB"
    echo "start_time=$(date +%s)"
    echo "devices=$DEVICES"
    if [[ -n "$PCI" && "$ALL_RESOLVED" == 1 ]]; then
        echo "pci_bus_ids=$PCI"
    fi
    echo "uid=${SLURM_JOB_UID:-}"
} > "$tmp" 2>/dev/null && mv -f "$tmp" "$DIR/job_${JOB}" 2>/dev/null
rm -f "$tmp" 2>/dev/null
exit 0
