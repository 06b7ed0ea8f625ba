"""`slurmscope doctor` on the live Slurm test bed: real sinfo, sacct, scontrol, munge and slurmdbd.

The bed's munged listens on its own socket (slurm.conf AuthInfo), so the munge check passing proves doctor
reads it from `scontrol show config`; with slurmdbd stopped, the sacct check must fail with its fix.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm


def _doctor(bed) -> tuple[int, dict]:
    r = subprocess.run(
        [sys.executable, "-m", "slurmscope.cli", "--config", str(bed.config), "--db", str(bed.db)]
        + ["doctor", "--format", "json"],
        env=bed.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return r.returncode, {c["check"]: c for c in json.loads(r.stdout)["checks"]}


def test_doctor_on_the_bed_and_with_slurmdbd_down(slurmbed):
    bed = slurmbed
    assert bed.collect().returncode == 0  # creates and migrates the database
    code, checks = _doctor(bed)
    for name in (
        "slurm.sinfo",
        "slurm.sacct",
        "slurm.scontrol_ping",
        "munge",
        "slurm.accounting",
        "database",
    ):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["slurm.scontrol_ping"]["detail"] == "slurmctld UP: " + socket.gethostname().split(".")[0]
    assert code == 0, checks  # nothing fails; the loopback exporter is a warning
    bed.cluster.stop_one("slurmdbd")
    try:
        code, checks = _doctor(bed)
    finally:
        bed.cluster.start_slurmdbd()
    assert code == 1
    assert checks["slurm.sacct"]["status"] == "fail"
    assert "slurmdbd" in checks["slurm.sacct"]["fix"]
    assert checks["slurm.sinfo"]["status"] == "pass"  # slurmctld still answers
