"""A cluster listed in `[[clusters]]`, reached the two ways a head node of several clusters reaches one, on
the real Slurm 22.05 test bed: through its own slurm.conf (`slurm.conf`, with no SLURM_CONF in the
environment) and through slurmdbd with `-M <cluster>` (`slurm.cluster_flag`). `collect --cluster all`
succeeds both ways and stores the same rows, and under `-M` sshare's `CLUSTER:` line is not quarantined.

A couple of short jobs are submitted first, so that sacct has something to return; the bed's own workload
(conftest `live`) is not needed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

pytestmark = pytest.mark.slurm


def _submit(bed, n: int) -> list[str]:
    ids = []
    for i in range(n):
        out = bed.slurm(
            "runuser",
            "-u",
            "sbdave",
            "--",
            "sbatch",
            "--parsable",
            "--partition=cpu",
            "-c",
            "1",
            "-t",
            "1",
            f"--job-name=mc-{i}",
            f"--chdir={bed.cluster.P['work'] / 'sbdave'}",
            "--wrap",
            "sleep 1",
        )
        ids.append(out.strip().split(";")[0])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        out = bed.slurm("sacct", "-n", "-X", "-P", "-j", ",".join(ids), "-o", "State")
        if out.split() == ["COMPLETED"] * n:
            return ids
        time.sleep(1)
    raise AssertionError(f"jobs {ids} did not complete in accounting: {out!r}")


def _collect(bed, tmp: Path, name: str, entry: str, env: dict[str, str]) -> tuple[Path, str]:
    cfg = tmp / f"{name}.toml"
    bin_dir = bed.config.read_text().split('bin_dir = "', 1)[1].split('"', 1)[0]
    cfg.write_text(
        f'[slurm]\nbin_dir = "{bin_dir}"\ntimeout_seconds = 30.0\n'
        "[collect]\nsacct_initial_lookback_seconds = 86400\n"
        f'[[clusters]]\nname = "{bed.cluster.CLUSTER}"\n[clusters.slurm]\n{entry}\n'
    )
    db = tmp / f"{name}.duckdb"
    argv = [
        sys.executable,
        "-c",
        "from slurmscope.cli import main; main()",
        "--config",
        str(cfg),
        "--db",
        str(db),
    ]
    r = subprocess.run(
        [*argv, "--cluster", "all", "collect", "all", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return db, r.stderr


def _rows(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_listed_cluster_through_its_slurm_conf_and_through_dash_m(slurmbed, tmp_path) -> None:
    bed = slurmbed
    ids = _submit(bed, 2)
    name = bed.cluster.CLUSTER
    banner = bed.slurm("sshare", "-M", name, "--all", "--long", "--parsable2").splitlines()[0]
    assert banner == f"CLUSTER: {name}"  # what Slurm itself prints under -M, even for one cluster

    no_conf = {k: v for k, v in bed.env().items() if k != "SLURM_CONF"}
    by_conf, _ = _collect(bed, tmp_path, "conf", f'conf = "{bed.cluster.SLURM_CONF}"', no_conf)
    by_flag, err = _collect(bed, tmp_path, "flag", "cluster_flag = true", bed.env())
    assert f"{name}: sshare: ok" in err and f"{name}: ping:" not in err

    status = f"SELECT collector, min(status) FROM collector_runs WHERE cluster = '{name}' GROUP BY 1"  # noqa: S608 - the bed's fixed name
    runs = {db: dict(_rows(db, status)) for db in (by_conf, by_flag)}
    assert set(runs[by_conf].values()) == set(runs[by_flag].values()) == {"ok"}
    assert set(runs[by_conf]) - set(runs[by_flag]) == {"ping"}  # -M cannot aim scontrol ping

    for sql in (
        'SELECT job_id_raw, submit_time, state, account, "user", gpus FROM jobs ORDER BY ALL',
        "SELECT node, state, gpus_total FROM node_states ORDER BY ALL",
        'SELECT account, "user", raw_shares, parent FROM shares ORDER BY ALL',
        "SELECT name, node_list, start_time FROM reservations ORDER BY ALL",
    ):
        conf_rows, flag_rows = _rows(by_conf, sql), _rows(by_flag, sql)
        assert conf_rows == flag_rows, sql
        assert conf_rows or "reservations" in sql, sql
    jobs = {str(r[0]) for r in _rows(by_flag, "SELECT job_id_raw FROM jobs")}
    assert set(ids) <= jobs
    assert {c for (c,) in _rows(by_flag, "SELECT DISTINCT cluster FROM jobs")} == {name}
    for db in (by_conf, by_flag):
        assert _rows(db, "SELECT count(*) FROM quarantine") == [(0,)]
