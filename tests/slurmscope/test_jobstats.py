"""`slurmscope job`: a hand-made requeued 8-GPU job whose every figure is worked out below.

Job 4242 (sbalice, account ml): attempt 1 starts 10:00, NODE_FAIL at 10:10, no GPU mapped; attempt 2 runs
11:00-12:00 on g01 with 8 GPUs mapped for the whole hour. Each minute, GPUs 0-5 read 90 % (max 100 %),
40 GiB of 80 GiB, 600 W, 36 000 J; GPUs 6 and 7 read 0 %, 1 GiB, 80 W, 4 800 J. Its batch step used 2 h of
CPU on 16 CPUs over 1 h (12.5 %) and peaked at 32 GiB of 250 GiB allocated (12.8 %).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from slurmscope.collectors.ingest import ingest_files

from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.db import connect

NOW = datetime(2026, 5, 1, 13, 0, tzinfo=UTC)
HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|Submit|Start|End|Elapsed|State|NNodes|NCPUS|ReqMem|"
    "AllocTRES|NodeList|NTasks|TotalCPU|MaxRSS"
)
TRES = "billing=16,cpu=16,gres/gpu:h100=8,gres/gpu=8,mem=256000M,node=1"
SACCT = "\n".join(
    [
        HEADER,
        "4242|4242|train|sbalice|ml|gpu|2026-05-01T09:59:00|2026-05-01T10:00:00|2026-05-01T10:10:00|00:10:00|"
        f"NODE_FAIL|1|16|256000M|{TRES}|g02|||",
        "4242.batch|4242.batch||||||2026-05-01T10:00:00|2026-05-01T10:10:00|00:10:00|CANCELLED|1|16|||g02|1|"
        "00:10:00|1G",
        "4242|4242|train|sbalice|ml|gpu|2026-05-01T10:10:00|2026-05-01T11:00:00|2026-05-01T12:00:00|01:00:00|"
        f"COMPLETED|1|16|256000M|{TRES}|g01|||",
        "4242.batch|4242.batch||||||2026-05-01T11:00:00|2026-05-01T12:00:00|01:00:00|COMPLETED|1|16|||g01|1|"
        "02:00:00|32G",
    ]
)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    (tmp_path / "sacct.txt").write_text(SACCT + "\n")
    con = connect(path)
    cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})
    [r] = ingest_files(con, cfg, "sacct", [tmp_path / "sacct.txt"], timezone="UTC")
    assert (r.rows, r.quarantined) == (4, 0)
    con.execute(
        """INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, gpu_index,
                                 mig_instance, source)
           SELECT 'c1', 'g01', 'GPU-' || i, '4242', TIMESTAMPTZ '2026-05-01 11:00:00+00',
                  TIMESTAMPTZ '2026-05-01 12:00:00+00', i, '', 'prolog' FROM range(8) t(i)"""
    )
    con.execute(
        """INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, gpu_index, samples, util_gpu_mean,
                                    util_gpu_max, mem_used_max_bytes, mem_total_bytes, power_mean_watts,
                                    energy_joules)
           SELECT 'c1', 'g01', 'GPU-' || i, TIMESTAMPTZ '2026-05-01 11:00:00+00' + INTERVAL (m) MINUTE, i, 4,
                  CASE WHEN i < 6 THEN 90 ELSE 0 END, CASE WHEN i < 6 THEN 100 ELSE 0 END,
                  CAST(CASE WHEN i < 6 THEN 40 ELSE 1 END AS BIGINT) * 1073741824, CAST(80 AS BIGINT) * 1073741824,
                  CASE WHEN i < 6 THEN 600 ELSE 80 END, CASE WHEN i < 6 THEN 36000 ELSE 4800 END
           FROM range(8) g(i), range(60) t(m)"""
    )
    con.close()
    return path


def run(db, *args: str):
    return CliRunner().invoke(main, ["--db", str(db), "--cluster", "c1", "job", *args])


def _report(db, job_id: str = "4242") -> dict:
    from slurmscope.jobstats import job_report

    con = connect(db, read_only=True)
    try:
        cfg = load_config(env={}).with_overrides(cluster={"name": "c1"})
        return json.loads(json.dumps(job_report(con, cfg, job_id, NOW), default=str))
    finally:
        con.close()


def test_json_gives_each_attempt_and_each_gpu(db):
    res = run(db, "4242", "--format", "json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    first, second = report["attempts"]
    assert (first["attempt"], first["state"], first["gpus"]) == (1, "NODE_FAIL", [])
    assert (second["attempt"], second["state"], len(second["gpus"])) == (2, "COMPLETED", 8)
    busy, idle = second["gpus"][0], second["gpus"][7]
    assert (busy["gpu_index"], busy["held_seconds"], busy["sampled_seconds"]) == (0, 3600.0, 3600.0)
    assert (busy["util_mean_percent"], busy["util_max_percent"], busy["power_mean_watts"]) == (
        90.0,
        100.0,
        600.0,
    )
    assert (busy["mem_used_max_bytes"], busy["mem_total_bytes"]) == (40 * 2**30, 80 * 2**30)
    assert busy["energy_joules"] == 60 * 36000
    assert (idle["gpu_index"], idle["util_mean_percent"], idle["energy_joules"]) == (7, 0.0, 60 * 4800)
    assert second["cpu"] == {"used_seconds": 7200, "core_walltime_seconds": 3600 * 16, "efficiency": 0.125}
    mem = second["memory"]
    assert (mem["used_bytes"], mem["requested_bytes"], mem["request_rule"]) == (
        32 * 2**30,
        256000 * 2**20,
        "alloc_tres",
    )
    assert report["sm_activity"] is False and second["utilisation_source"] == "util_gpu_mean"
    # 6.25 % of a 10-minute x 16-CPU attempt; 1 GiB of 250 GiB
    assert first["cpu"]["efficiency"] == pytest.approx(600 / 9600)
    assert second["verdict"] == (
        "2 of 8 GPUs idle; CPU efficiency 12 %: over-allocated CPUs;"
        " memory efficiency 13 %: more memory requested than used"
    )


def test_text_names_the_fallback_and_shows_the_verdict(db):
    res = run(db, "4242")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "Job 4242 (train) on cluster c1: user sbalice, account ml, partition gpu"
    assert "  CPU:    12.5 % of 16:00:00 core-walltime (02:00:00 used, as seff computes it)" in lines
    assert "  Memory: 32.00 GiB used of 250.00 GiB requested: 12.8 %" in lines
    gpu6 = next(ln for ln in lines if ln.startswith("  6 "))
    assert gpu6.split() == [
        "6",
        "g01",
        "0.0",
        "%",
        "0.0",
        "%",
        "1.00",
        "GiB",
        "/",
        "80.00",
        "GiB",
        "80",
        "W",
        "0.288",
        "MJ",
    ]
    assert (
        "  SM activity: not read (no GPM readings from the node agents); utilisation is NVML GPU_UTIL"
        in lines
    )
    assert "  GPUs: 8 allocated, none mapped by the node agents (no samples)" in lines
    assert lines[-1] == (
        "  Verdict: 2 of 8 GPUs idle; CPU efficiency 12 %: over-allocated CPUs;"
        " memory efficiency 13 %: more memory requested than used"
    )


def test_sm_activity_is_read_where_the_agents_read_gpm(db):
    con = connect(db)
    con.execute(
        "UPDATE gpu_samples SET activity_source = 'gpm', sm_active_mean = CASE WHEN gpu_index < 6 THEN 45 ELSE 0 END"
    )
    con.close()
    report = _report(db)
    second = report["attempts"][1]
    assert report["sm_activity"] is True and second["utilisation_source"] == "sm_active_mean"
    assert [g["sm_active_mean_percent"] for g in second["gpus"]] == [45.0] * 6 + [0.0] * 2
    assert "SM active" in run(db, "4242").output


def test_unknown_job_is_one_line_and_exit_1_and_nothing_is_written(db):
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    res = run(db, "999")
    assert res.exit_code == 1
    assert res.output == "Error: job 999 not found in cluster c1\n"
    assert run(db, "4242").exit_code == 0
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_missing_database_and_bad_format_fail(tmp_path):
    res = CliRunner().invoke(main, ["--db", str(tmp_path / "none.duckdb"), "job", "1"])
    assert res.exit_code == 1 and "does not exist" in res.output
    assert not (tmp_path / "none.duckdb").exists()
    assert CliRunner().invoke(main, ["job", "1", "--format", "xml"]).exit_code == 2


MIG_TRES_H100 = "billing=1,cpu=4,gres/gpu:1g.10gb=1,gres/gpu=1,mem=64000M,node=1"
MIG_TRES_A100 = "billing=1,cpu=4,gres/gpu:a100_3g.40gb=1,gres/gpu=1,mem=64000M,node=1"


@pytest.fixture
def mig_db(tmp_path):
    """Job 5151 holds MIG-a (the H100 MIG capture's name, 1g.10gb: 1 of 7 compute slices) for 40 minutes and,
    in a second attempt, MIG-c on an A100 whose NVML name carries no profile, so its share comes from the
    sacct record (a100_3g.40gb: 3 of 7). No sample of either instance: NVML gives no utilisation per MIG
    device."""
    path = tmp_path / "m.duckdb"
    lines = [
        HEADER,
        "5151|5151|eval|sbbob|ml|mig|2026-05-01T09:59:00|2026-05-01T10:00:00|2026-05-01T10:40:00|00:40:00|"
        f"NODE_FAIL|1|4|64000M|{MIG_TRES_H100}|m01|||",
        "5151|5151|eval|sbbob|ml|mig|2026-05-01T10:40:00|2026-05-01T11:00:00|2026-05-01T11:30:00|00:30:00|"
        f"COMPLETED|1|4|64000M|{MIG_TRES_A100}|m02|||",
    ]
    (tmp_path / "sacct.txt").write_text("\n".join(lines) + "\n")
    con = connect(path)
    cfg = load_config(env={}).with_overrides(
        cluster={"name": "c1"}, billing={"mig_models": {"1g.10gb": "h100"}}
    )
    [r] = ingest_files(con, cfg, "sacct", [tmp_path / "sacct.txt"], timezone="UTC")
    assert (r.rows, r.quarantined) == (2, 0)
    con.execute(
        """INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, gpu_index,
                                 mig_instance, source) VALUES
           ('c1', 'm01', 'GPU-9', '5151', TIMESTAMPTZ '2026-05-01 10:00:00+00', TIMESTAMPTZ '2026-05-01 10:40:00+00',
            0, 'MIG-a', 'prolog'),
           ('c1', 'm02', 'GPU-7', '5151', TIMESTAMPTZ '2026-05-01 11:00:00+00', TIMESTAMPTZ '2026-05-01 11:30:00+00',
            0, 'MIG-c', 'prolog')"""
    )
    con.execute(
        """INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, model) VALUES
           ('c1', 'm01', 'MIG-a', TIMESTAMPTZ '2026-05-01 10:00:00+00', 'NVIDIA H100 80GB HBM3 MIG 1g.10gb'),
           ('c1', 'm02', 'MIG-c', TIMESTAMPTZ '2026-05-01 11:00:00+00', 'NVIDIA A100-SXM4-40GB MIG')"""
    )
    con.close()
    return path


def test_mig_slices_are_shown_with_their_share_of_a_gpu(mig_db):
    report = _report(mig_db, "5151")
    first, second = report["attempts"]
    assert first["gpus"] == [] and second["gpus"] == []
    [a] = first["mig_slices"]
    # 1g.10gb on an H100: 1 of 7 compute slices, from NVIDIA's profile table via the agent's NVML name;
    # 40 minutes held = 2400 s, so 2400 / 7 GPU-seconds
    assert (a["mig_instance"], a["node"], a["gpu_uuid"]) == ("MIG-a", "m01", "GPU-9")
    assert (a["mig_profile"], a["fraction_source"]) == ("1g.10gb", "nvml")
    assert a["gpu_fraction"] == pytest.approx(1 / 7)
    assert a["held_seconds"] == pytest.approx(2400)
    assert a["gpu_seconds"] == pytest.approx(2400 / 7)
    assert (a["activity"], a["util_mean_percent"]) == ("unavailable", None)
    [c] = second["mig_slices"]
    # the A100's NVML name carries no profile: the attempt's sacct record says 3g.40gb, 3 of 7
    assert (c["mig_instance"], c["fraction_source"]) == ("MIG-c", "sacct")
    assert c["gpu_fraction"] == pytest.approx(3 / 7)
    assert c["gpu_seconds"] == pytest.approx(1800 * 3 / 7)


def test_mig_text_lists_the_slices_and_says_activity_is_not_inferred(mig_db):
    res = CliRunner().invoke(main, ["--db", str(mig_db), "--cluster", "c1", "job", "5151"])
    assert res.exit_code == 0, res.output
    assert "MIG-a" in res.output and "0.143 (nvml)" in res.output and "0.429 (sacct)" in res.output
    assert "1 MIG slice(s) (1g.10gb)" in res.output
    assert "none mapped by the node agents" not in res.output
    assert "NVML reports no utilisation per MIG device" in res.output
