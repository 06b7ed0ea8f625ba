"""`doctor --cluster NAME` on a site with two clusters (tests/collectors/test_collect_clusters.py's fake
client): the Slurm probes reach each cluster the way its collectors do."""

from __future__ import annotations

import json

from click.testing import CliRunner

from slurmscope.cli import main
from tests.collectors.test_collect_clusters import _calls, site  # noqa: F401, F811  (the fixture)


def test_doctor_checks_a_cluster_the_way_its_collectors_reach_it(site):  # noqa: F811 - the imported fixture
    """`doctor --cluster NAME` runs its Slurm probes with that cluster's slurm.conf or -M, and skips the
    ping it cannot aim."""
    tmp_path, config, log = site
    db = tmp_path / "s.duckdb"
    for name in ("alpha", "beta"):
        res = CliRunner().invoke(
            main, ["--config", str(config), "--db", str(db), "--cluster", name, "doctor", "--format", "json"]
        )
        checks = {c["check"]: c for c in json.loads(res.output)["checks"]}
        assert checks["slurm.sinfo"]["status"] == checks["slurm.sacct"]["status"] == "pass", checks
        ping = checks["slurm.scontrol_ping"]
        assert (ping["status"], name) in {("pass", "alpha"), ("skip", "beta")}, ping
    calls = _calls(log)
    assert {c[0] for c in calls if c[1] == "cluster=alpha"} == {"sinfo", "sacct", "scontrol"}
    assert {c[0] for c in calls if c[1] == "cluster=beta"} == {"sinfo", "sacct", "scontrol"}
    assert all(c[3:5] == ["-M", "beta"] for c in calls if c[1] == "cluster=beta")
    assert not [c for c in calls if c[1] == "cluster=beta" and "ping" in c]
    assert not [c for c in calls if c[1] == "cluster=none"]
