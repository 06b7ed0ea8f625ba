"""Pending GPUs from every request form, against what Slurm 22.05 itself totals for each job.

The capture (tests/fixtures/slurm-22.05/README.md, "squeue_gpu_requests"): one held job per form, read with
the live collector's own squeue line; `scontrol show job -o` of the same moment prints each job's requested
TRES (`TRES=...,gres/gpu=N` for a pending job), which slurmctld computed from the same request.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from slurmscope.collectors import squeue

from slurmscope.config import load_config
from tests.paths import FIXTURES

CAPTURE = FIXTURES / "slurm-22.05"


def _slurm_totals() -> dict[str, int]:
    """job id -> gres/gpu of its TRES line in `scontrol show job -o` (0 when the job asks for no GPU)."""
    out = {}
    for line in (CAPTURE / "scontrol_gpu_requests.txt").read_text().splitlines():
        jid = re.search(r"\bJobId=(\d+)\b", line).group(1)
        tres = re.search(r"\bTRES=(\S+)", line).group(1)
        m = re.search(r"(?:^|,)gres/gpu=(\d+)", tres)
        out[jid] = int(m.group(1)) if m else 0
    return out


@pytest.fixture(scope="module")
def pending():
    argv = (CAPTURE / "squeue_gpu_requests.argv").read_text().splitlines()
    assert argv == [a.replace("\x1f", "\\x1f") for a in squeue.command(load_config(env={}))]
    p = squeue.parse(
        (CAPTURE / "squeue_gpu_requests.txt").read_bytes(),
        cluster="slurmbed",
        snapshot_time=datetime(2026, 12, 4, 14, 55, 37, tzinfo=UTC),
        tz=ZoneInfo("UTC"),
    )
    assert p.quarantine.height == 0
    return {r["job_id"]: r for r in p.tables["pending_jobs"].to_dicts()}


def test_every_request_form_counts_the_gpus_slurm_counts(pending):
    record = json.loads((CAPTURE / "gpu_requests_record.json").read_text())["jobs"]
    slurm = _slurm_totals()
    forms = 0
    for name, job in record.items():
        if "gpus" not in job:
            continue
        row = pending[job["job_id"]]
        assert row["gpus"] == slurm[job["job_id"]] == job["gpus"], (name, row)
        forms += 1
    assert forms == 12
    # each form reached its own column: the total is not read off one column for all of them
    by_name = {r["name"]: r for r in pending.values()}
    assert by_name["gpus_job"]["tres_per_job"] == "gres:gpu:5"
    assert by_name["gpus_per_task_2node"]["tres_per_task"] == "gres:gpu:2"
    assert by_name["gpus_per_task_2node"]["tasks"] == 4
    assert by_name["gpus_per_socket_2node"]["tres_per_socket"] == "gres:gpu:2"
    assert by_name["gpus_per_socket_2node"]["sockets_per_node"] == 1
    assert by_name["gres_typed_2node"]["tres_per_node"] == "gres:gpu:h100:2"


def test_pending_reasons_of_the_capture(pending):
    by_name = {r["name"]: r for r in pending.values()}
    assert by_name["queued-first"]["reason"] == "Resources"
    assert by_name["queued-second"]["reason"] == "Priority"
    assert by_name["gpus_job"]["reason"] == "JobHeldUser"
    assert by_name["all-gpu-nodes"]["state"] == "RUNNING"


@pytest.mark.parametrize(
    ("forms", "nodes", "tasks", "sockets", "expected"),
    [
        # --gres=gpu:2 / --gpus-per-node=2 on 3 nodes: 2 x 3
        ((None, 2, None, None), 3, None, None, 6),
        # a node count Slurm has not set yet counts one node
        ((None, 2, None, None), 0, None, None, 2),
        # --gpus=5: the job total, whatever the nodes
        ((5, None, None, None), 4, None, None, 5),
        # --gpus-per-task=2 with 4 tasks: 2 x 4
        ((None, None, 2, None), 2, 4, None, 8),
        # --gpus-per-socket=2, 2 nodes x 2 sockets: 2 x 2 x 2
        ((None, None, None, 2), 2, None, 2, 8),
        # --gpus-per-socket without --sockets-per-node: Slurm leaves it at the per-socket count
        ((None, None, None, 2), 2, None, None, 2),
        # --gpus=8 --gpus-per-node=4 on 3 nodes: the larger, 4 x 3 = 12
        ((8, 4, None, None), 3, None, None, 12),
        # no form at all
        ((None, None, None, None), 2, 2, 1, None),
    ],
)
def test_requested_gpus_is_the_largest_form(forms, nodes, tasks, sockets, expected):
    assert squeue.requested_gpus(*forms, nodes=nodes, tasks=tasks, sockets=sockets) == expected
