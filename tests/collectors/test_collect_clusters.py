"""`collect --cluster all` on a site with two clusters: each is reached its own way (its slurm.conf, or -M
through slurmdbd) and its rows land under its name. The fake client (tests/fakes/slurm_clusters) answers
for whichever cluster a command was pointed at, with the real Slurm 22.05 captures of the test bed."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.db import connect
from tests.paths import FAKES, FIXTURES

COMMANDS = ("sacct", "sinfo", "squeue", "sshare", "sdiag", "sacctmgr", "scontrol")
TABLES = (
    "jobs",
    "job_steps",
    "node_states",
    "pending_jobs",
    "shares",
    "sched_stats",
    "node_events",
    "reservations",
    "slurm_partitions",
)


@pytest.fixture
def site(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in COMMANDS:
        (bin_dir / name).symlink_to(FAKES / "slurm_clusters")
    (tmp_path / "alpha").mkdir()
    (tmp_path / "alpha" / "slurm.conf").write_text("ClusterName=alpha\n")
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_SLURM_LOG", str(log))
    monkeypatch.setenv("FAKE_SLURM_FIXTURES", str(FIXTURES / "slurm-22.05"))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    for name in [n for n in os.environ if n.startswith("SLURMSCOPE_")]:
        monkeypatch.delenv(name)
    config = tmp_path / "slurmscope.toml"
    config.write_text(
        f'[slurm]\nbin_dir = "{bin_dir}"\ntimeout_seconds = 20\n'
        "[collect]\nsacct_initial_lookback_seconds = 86400\n"
        '[[clusters]]\nname = "alpha"\n'
        f'[clusters.slurm]\nconf = "{tmp_path / "alpha" / "slurm.conf"}"\n'
        '[[clusters]]\nname = "beta"\n'
        "[clusters.slurm]\ncluster_flag = true\n"
    )
    return tmp_path, config, log


def _calls(log) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()]


def test_collect_all_clusters_reaches_each_its_own_way(site):
    tmp_path, config, log = site
    db = tmp_path / "s.duckdb"
    res = CliRunner().invoke(
        main, ["--config", str(config), "--db", str(db), "--cluster", "all", "collect", "all"]
    )
    assert res.exit_code == 0, res.output
    assert "alpha: sinfo: ok" in res.output and "beta: sinfo: ok" in res.output
    calls = _calls(log)
    alpha = [c for c in calls if c[1] == "cluster=alpha"]
    beta = [c for c in calls if c[1] == "cluster=beta"]
    assert len(alpha) + len(beta) == len(calls)  # no command reached another cluster or none
    conf = f"conf={tmp_path / 'alpha' / 'slurm.conf'}"
    assert all(c[2] == conf and "-M" not in c for c in alpha)
    assert all(c[2] == "conf=" for c in beta)
    # beta: -M right after the command, except sacctmgr, which filters by Clusters=; and no scontrol ping
    # (it would ask the local slurm.conf's controllers, not beta's)
    assert all(c[3:5] == ["-M", "beta"] for c in beta if c[0] != "sacctmgr")
    assert [c for c in beta if c[0] == "sacctmgr"] and all(
        "Clusters=beta" in c for c in beta if c[0] == "sacctmgr"
    )
    assert not [c for c in beta if c[0] == "scontrol" and "ping" in c]
    assert [c for c in alpha if c[0] == "scontrol" and "ping" in c]
    assert {c[0] for c in alpha} == {c[0] for c in beta} == set(COMMANDS)

    con = connect(db, read_only=True)
    try:
        for table in TABLES:
            per = Counter(dict(con.execute(f"SELECT cluster, count(*) FROM {table} GROUP BY 1").fetchall()))  # noqa: S608 - table names above
            assert set(per) == {"alpha", "beta"} and per["alpha"] == per["beta"] > 0, (table, per)
        pings = dict(con.execute("SELECT cluster, count(*) FROM controller_pings GROUP BY 1").fetchall())
        assert set(pings) == {"alpha"}
        # sshare -M's "CLUSTER: beta" line is Slurm's banner, not a bad association
        assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0
        runs = con.execute(
            "SELECT cluster, collector, status FROM collector_runs WHERE status <> 'ok'"
        ).fetchall()
        assert runs == []
    finally:
        con.close()


def test_one_cluster_by_name_and_an_unlisted_name_is_refused(site):
    tmp_path, config, log = site
    db = tmp_path / "s.duckdb"
    res = CliRunner().invoke(
        main, ["--config", str(config), "--db", str(db), "--cluster", "beta", "collect", "sinfo"]
    )
    assert res.exit_code == 0, res.output
    assert [c[:5] for c in _calls(log)] == [["sinfo", "cluster=beta", "conf=", "-M", "beta"]]
    res = CliRunner().invoke(
        main, ["--config", str(config), "--db", str(db), "--cluster", "gamma", "collect"]
    )
    assert res.exit_code == 2 and "cluster 'gamma' is not in [[clusters]]" in res.output
    assert "(configured: alpha, beta)" in res.output
    res = CliRunner().invoke(
        main, ["--config", str(config), "--db", str(db), "--cluster", "beta", "collect", "ping"]
    )
    assert res.exit_code == 1 and "collector 'ping' cannot reach cluster 'beta' through -M" in res.output
