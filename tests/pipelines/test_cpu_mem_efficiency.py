"""CPU and memory efficiency per attempt against Slurm's own seff (real captures) and hand-worked cases."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from slurmscope.collectors import sacct
from slurmscope.pipelines.cpu_mem_efficiency import efficiency_rows

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-22.05" / "seff"
NOW = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)
NAMES = ("burn2of4", "mem400", "mem2tasks", "exclusive", "pernode2")


def kbytes2str(kbytes: float) -> str:
    """seff's own formatting of a KiB amount (sub kbytes2str in contribs/seff/seff, Slurm 22.05.8)."""
    if kbytes == 0:
        return "0.00 MB"
    exp = int(math.log(kbytes) / math.log(1024))
    pre = "KMGTPE"[exp]
    return f"{kbytes / 1024**exp:.2f} {pre}B"


def seconds(hms: str) -> int:
    days, _, rest = hms.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def seff_output(name: str) -> dict:
    text = (FIX / f"seff_{name}.txt").read_text()
    cpu = re.search(r"CPU Efficiency: ([\d.]+)% of (\S+) core-walltime", text)
    mem_eff = re.search(r"Memory Efficiency: ([\d.]+)% of ([\d.]+ \w+)", text)
    return {
        "job_id": re.search(r"Job ID: (\d+)", text).group(1),
        "cpu_used": seconds(re.search(r"CPU Utilized: (\S+)", text).group(1)),
        "cpu_pct": float(cpu.group(1)),
        "core_walltime": seconds(cpu.group(2)),
        "mem_used": re.search(r"Memory Utilized: ([\d.]+ \w+)", text).group(1),
        "estimated": "(estimated maximum)" in text,
        "mem_pct": float(mem_eff.group(1)),
        "req_mem": mem_eff.group(2),
    }


def rows_of(parsed: sacct.Parsed) -> pl.DataFrame:
    return efficiency_rows(
        parsed.tables["jobs"].lazy(), parsed.tables["job_steps"].lazy(), "UTC", NOW
    ).collect()


def text_capture() -> sacct.Parsed:
    return sacct.parse((FIX / "seff_sacct.txt").read_bytes(), cluster="slurmbed", tz=UTC)


@pytest.mark.parametrize("source", ["text", "json"])
@pytest.mark.parametrize("name", NAMES)
def test_every_figure_is_the_one_seff_printed(name: str, source: str) -> None:
    parsed = (
        text_capture()
        if source == "text"
        else sacct.parse((FIX / "seff_sacct_json.json").read_bytes(), cluster="slurmbed", tz=UTC)
    )
    want = seff_output(name)
    got = rows_of(parsed).filter(pl.col("job_id") == want["job_id"]).row(0, named=True)
    assert got["cpu_used_seconds"] == want["cpu_used"]
    assert got["core_walltime_seconds"] == want["core_walltime"]
    assert f"{got['cpu_efficiency'] * 100:.2f}" == f"{want['cpu_pct']:.2f}"
    assert kbytes2str(got["req_mem_bytes"] / 1024) == want["req_mem"]
    if want["mem_used"] == "0.00 MB":
        # seff prints 0 when no step recorded a peak (the job ended before the first 30-s sample); here
        # that is "not measured", and the job's steps indeed have no MaxRSS
        steps = parsed.tables["job_steps"].filter(pl.col("job_id_raw") == int(want["job_id"]))
        assert steps["max_rss_bytes"].null_count() == steps.height
        assert got["mem_used_bytes"] is None and got["memory_efficiency"] is None
    else:
        assert kbytes2str(got["mem_used_bytes"] / 1024) == want["mem_used"]
        assert (got["mem_tasks"] != 1) == want["estimated"]
        assert f"{got['memory_efficiency'] * 100:.2f}" == f"{want['mem_pct']:.2f}"


def test_the_seff_capture_by_hand() -> None:
    """Worked from seff_sacct.txt: job 1's CPU is both steps, 4.694 + 1.383 s = 4 + 1 whole seconds plus
    694 + 383 ms rounded to one second: 6; 6 / (26 s x 4 cores). Job 3's memory is step 3.0's MaxRSS x 2
    tasks; job 4's request is AllocTRES mem=16000M although ReqMem is 1000M."""
    rows = {r["job_id"]: r for r in rows_of(text_capture()).to_dicts()}
    assert (rows["1"]["cpu_used_seconds"], rows["1"]["core_walltime_seconds"], rows["1"]["steps"]) == (
        6,
        104,
        2,
    )
    assert rows["3"]["mem_used_bytes"] == 218042368 * 2 and rows["3"]["mem_tasks"] == 2
    assert (rows["4"]["req_mem_bytes"], rows["4"]["req_mem_rule"]) == (16000 * 2**20, "alloc_tres")
    assert rows["2"]["memory_efficiency"] == pytest.approx(429182976 / (1000 * 2**20))
    assert {r["end_day"] for r in rows.values()} == {datetime(2026, 12, 4).date()}


HEADER = "JobID|JobIDRaw|Submit|Start|End|Elapsed|State|NNodes|NCPUS|ReqMem|AllocTRES|NTasks|TotalCPU|MaxRSS"


def parse_lines(*lines: str) -> sacct.Parsed:
    parsed = sacct.parse(("\n".join([HEADER, *lines]) + "\n").encode(), cluster="c", tz=UTC)
    assert parsed.quarantine.height == 0, parsed.quarantine
    return parsed


T = "2024-05-01T10:00:00|2024-05-01T10:00:00|2024-05-01T11:00:00"


def test_old_release_per_cpu_and_per_node_requests() -> None:
    """Slurm before 21.08 prints seff's req_mem itself: 4000Mc x 8 allocated CPUs, 32000Mn x 2 nodes."""
    rows = rows_of(
        parse_lines(
            f"1|1|{T}|01:00:00|COMPLETED|1|8|4000Mc|cpu=8,mem=32000M,node=1|||",
            f"2|2|{T}|01:00:00|COMPLETED|2|16|32000Mn|cpu=16,node=2|||",
        )
    )
    got = {r["job_id"]: (r["req_mem_bytes"], r["req_mem_rule"]) for r in rows.to_dicts()}
    assert got == {"1": (8 * 4000 * 2**20, "per_cpu"), "2": (2 * 32000 * 2**20, "per_node")}


def test_largest_peak_wins_and_a_tie_goes_to_the_first_step_in_slurms_order() -> None:
    """Steps 0 and batch both peak at 1000 B; slurmdbd returns step 0 (id 0) before batch (0xFFFFFFFB),
    so seff takes step 0's 4 tasks: 4000 B. Step 1's 900 B x 8 tasks (7200 B) does not count: seff takes
    the largest per-task peak, not the largest product."""
    rows = rows_of(
        parse_lines(
            f"5|5|{T}|01:00:00|COMPLETED|1|8|8000M|cpu=8,mem=8000M,node=1|||",
            f"5.batch|5.batch|{T}|01:00:00|COMPLETED|1|8|||1|00:01.600|1000",
            f"5.0|5.0|{T}|01:00:00|COMPLETED|1|8|||4|01:00.700|1000",
            f"5.1|5.1|{T}|01:00:00|COMPLETED|1|8|||8|00:00.100|900",
        )
    )
    r = rows.row(0, named=True)
    assert (r["mem_used_bytes"], r["mem_tasks"]) == (4000, 4)
    # 1 + 60 + 0 whole seconds; 600 + 700 + 100 ms = 1.4 s, rounded: 1
    assert r["cpu_used_seconds"] == 62
    assert r["cpu_efficiency"] == pytest.approx(62 / (3600 * 8))


def test_nothing_measured_is_null_and_a_zero_walltime_is_zero_as_in_seff() -> None:
    rows = rows_of(
        parse_lines(
            f"7|7|{T}|00:00:00|COMPLETED|1|0|1000M|cpu=1,mem=1000M,node=1|||",
            f"7.batch|7.batch|{T}|00:00:00|COMPLETED|1|1|||1|00:00:00|",
            f"8|8|{T}|01:00:00|COMPLETED|1|2|1000M|cpu=2,mem=1000M,node=1|||",
        )
    )
    got = {r["job_id"]: r for r in rows.to_dicts()}
    # NCPUS 0 counts as 1 core (seff); Elapsed 0: core-walltime 0, efficiency 0 (seff's else branch)
    assert (got["7"]["cpus"], got["7"]["core_walltime_seconds"], got["7"]["cpu_efficiency"]) == (1, 0, 0.0)
    assert got["7"]["mem_used_bytes"] is None and got["7"]["memory_efficiency"] is None
    # no step lines at all: nothing to read, not 0 %
    assert (got["8"]["steps"], got["8"]["cpu_used_seconds"], got["8"]["cpu_efficiency"]) == (0, None, None)


def test_a_running_attempt_ends_its_window_at_now_and_a_pending_one_has_no_row() -> None:
    rows = rows_of(
        parse_lines(
            "9|9|2024-05-01T10:00:00|2024-05-01T10:00:00|Unknown|00:30:00|RUNNING|1|4|4G|cpu=4,node=1|||",
            "10|10|2024-05-01T10:00:00|Unknown|Unknown|00:00:00|PENDING|1|4|4G||||",
        )
    )
    assert rows["job_id"].to_list() == ["9"]
    r = rows.row(0, named=True)
    assert (r["window_end"], r["end_day"]) == (NOW, None)
    assert (r["req_mem_bytes"], r["req_mem_rule"]) == (4 * 2**30, "req_mem")


def test_full_rebuild_in_slices_equals_one_window(demo) -> None:
    """Sliced, each window reads only the attempts begun before its end and their steps; the mart must still be
    the one window's, attempts crossing a slice edge and the running ones included."""
    from slurmscope.pipelines import cpu_mem_efficiency, runner

    con, cfg, now = demo.con, demo.cfg, demo.now
    assert cpu_mem_efficiency.SLICEABLE
    # the simulator's steps carry no TotalCPU or MaxRSS: a batch step and a numbered one that do
    con.execute(
        """INSERT OR REPLACE INTO job_steps (cluster, job_id_raw, job_submit_time, step_id, job_id, ntasks,
                                  total_cpu_seconds, max_rss_bytes)
           SELECT cluster, job_id_raw, submit_time, s.id, job_id || '.' || s.id, s.n,
                  elapsed_seconds * greatest(cpus, 1) * s.f, (job_id_raw % 7 + 1) * s.n * 2^30
           FROM jobs, (VALUES ('batch', 1, 0.05), ('0', 2, 0.6)) s(id, n, f)
           WHERE cluster = 'simcluster' AND start_time IS NOT NULL"""
    )
    mart = "SELECT * FROM mart_job_cpu_mem_efficiency ORDER BY ALL"

    one = cfg.with_overrides(pipelines={"full_slice_days": 0})
    counted = runner.run_pipelines(con, one, full=True, now=now, only=["cpu_mem_efficiency"])
    whole = con.execute(mart).fetchall()
    sliced = cfg.with_overrides(pipelines={"full_slice_days": 1})
    windows = runner._slices(con, sliced, cpu_mem_efficiency, runner.Window(runner.EPOCH, now, True))
    crossing = con.execute(
        "SELECT count(*) FROM jobs WHERE cluster = 'simcluster' AND start_time < ? AND coalesce(end_time, ?) > ?",
        [windows[0].end, now, windows[0].end],
    ).fetchone()[0]
    assert len(windows) >= 3 and crossing > 0
    written = runner.run_pipelines(con, sliced, full=True, now=now, only=["cpu_mem_efficiency"])
    assert con.execute(mart).fetchall() == whole
    # rows written by the rebuild, not by its last slice
    assert written == counted == {"mart_job_cpu_mem_efficiency": len(whole)}
    runs = con.execute(
        "SELECT window_end FROM pipeline_runs WHERE pipeline = 'cpu_mem_efficiency' AND status = 'ok'"
        " ORDER BY window_end"
    ).fetchall()
    assert [r[0] for r in runs] == [w.end for w in windows]
    measured = con.execute(
        "SELECT count(*) FROM mart_job_cpu_mem_efficiency WHERE cpu_efficiency IS NOT NULL"
    ).fetchone()[0]
    assert len(whole) > 100 and measured > 100
