"""The account CPU and memory efficiency families, end to end: ingest of the real seff capture, pipeline run,
/metrics, with the values worked out by hand from seff's own figures (tests/fixtures/slurm-22.05/seff)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families
from slurmscope.collectors.ingest import ingest_files
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.exporter import render
from tests.paths import ROOT

FIX = ROOT / "tests" / "fixtures" / "slurm-22.05" / "seff"
NOW = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)


def _series(body: bytes, name: str) -> dict[str, float]:
    return {
        s.labels["account"]: s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
        if s.name == name
    }


@pytest.fixture
def loaded(con):
    cfg = load_config(env={}).with_overrides(cluster={"name": "slurmbed"})
    [r] = ingest_files(con, cfg, "sacct", [FIX / "seff_sacct.txt"], timezone="UTC")
    assert (r.status, r.quarantined) == ("ok", 0)
    return cfg


def test_account_ratios_are_the_sums_of_seffs_per_job_figures(con, loaded):
    """All five jobs are students' (sbdave). seff printed CPU utilized 6, 0, 1, 1, 0 s over core-walltimes
    104, 43, 88, 96, 72 s: 8 / 403. Memory: jobs 1 and 4 recorded no peak (seff: 0.00 MB) and are left out;
    jobs 2, 3, 5 used 429182976, 218042368 x 2 and 113098752 x 2 bytes of 1000, 1200 and 4000 MiB."""
    assert run_pipelines(con, loaded, full=True, now=NOW, only=["cpu_mem_efficiency"]) == {
        "mart_job_cpu_mem_efficiency": 5
    }
    body = render(con, loaded, NOW)
    assert _series(body, "slurmscope_account_cpu_efficiency_ratio") == {"students": pytest.approx(8 / 403)}
    used = 429182976 + 218042368 * 2 + 113098752 * 2
    assert _series(body, "slurmscope_account_memory_efficiency_ratio") == {
        "students": pytest.approx(used / ((1000 + 1200 + 4000) * 2**20))
    }


def test_jobs_of_last_month_are_not_this_months_ratio(con, loaded):
    run_pipelines(con, loaded, full=True, now=NOW, only=["cpu_mem_efficiency"])
    body = render(con, loaded, datetime(2027, 1, 2, tzinfo=UTC))
    assert _series(body, "slurmscope_account_cpu_efficiency_ratio") == {}
    assert _series(body, "slurmscope_account_memory_efficiency_ratio") == {}


def test_a_second_run_changes_nothing_and_an_incremental_run_equals_the_full_one(con, loaded):
    run_pipelines(con, loaded, full=True, now=NOW, only=["cpu_mem_efficiency"])
    full = con.execute("SELECT * FROM mart_job_cpu_mem_efficiency ORDER BY ALL").fetchall()
    run_pipelines(con, loaded, now=NOW, only=["cpu_mem_efficiency"])
    assert con.execute("SELECT * FROM mart_job_cpu_mem_efficiency ORDER BY ALL").fetchall() == full
