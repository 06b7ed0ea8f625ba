#!/bin/bash
# slurmscope GPU->job mapping: mark the job's mapping finished (see slurm_prolog.sh and docs/nvml.md).
#
# Appends end_time=<epoch> and renames job_<id> to job_<id>.done; the agent records the closed interval
# with this exact end time (even if it was down when the job ended) and then deletes the file.
# Left-over .done files older than 7 days (agent not running) are removed. Always exits 0.

DIR="${SLURMSCOPE_MAPPING_DIR:-/run/slurmscope/gpu-jobs}"
JOB="${SLURM_JOB_ID:-}"
[[ "$JOB" =~ ^[0-9]+$ ]] || exit 0
f="$DIR/job_${JOB}"
if [[ -f "$f" ]]; then
    echo "end_time=$(date +%s)" >> "$f" 2>/dev/null && mv -f "$f" "$f.done" 2>/dev/null
fi
find "$DIR" -maxdepth 1 -name 'job_*.done' -mtime +7 -delete 2>/dev/null
exit 0
