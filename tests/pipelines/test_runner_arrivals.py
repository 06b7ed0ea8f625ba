"""Incremental windows follow what arrived: a late NVML spool file reaches the days it is about."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from slurmscope.collectors.nvml import ingest_bytes
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from slurmscope.spool import write_spool_file

DAY = datetime(2026, 3, 5, tzinfo=UTC)  # the day the agent could not be reached
NOW = datetime(2026, 3, 10, tzinfo=UTC)


def _cfg():
    return load_config(None, env={})


def _minutes(start: datetime, n: int) -> list[dict]:
    return [
        {
            "type": "sample",
            "gpu_uuid": "GPU-a",
            "gpu_index": 0,
            "minute": (start + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "samples": 60,
            "util_gpu_mean": 50.0,
            "util_gpu_max": 90.0,
            "null_fields": 0,
        }
        for i in range(n)
    ]


def _seed(con) -> None:
    """One 1-GPU job on gpu01 from 10:00 to 12:00 of DAY, stored (with its GPU) before the first run."""
    start, end = DAY + timedelta(hours=10), DAY + timedelta(hours=12)
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", state,'
        " start_time, end_time, elapsed_seconds, gpus, gpu_type, nodes, node_list, ingested_at)"
        " VALUES ('default', '777', 777, ?, 'a', 'u', 'gpu', 'COMPLETED', ?, ?, 7200, 1, 'h100', 1, 'gpu01', ?)",
        [start, start, end, DAY],
    )
    con.execute(
        "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, gpu_index,"
        " mig_instance, source) VALUES ('default', 'gpu01', 'GPU-a', '777', ?, ?, 0, '', 'prolog')",
        [start, end],
    )


def _sampled(con) -> float | None:
    return con.execute(
        "SELECT sum(sampled_gpu_hours) FROM mart_idle_gpus_daily WHERE day = ?", [DAY.date()]
    ).fetchone()[0]


def test_a_spool_file_of_an_unreachable_node_reaches_the_days_it_is_about(con, tmp_path):
    _seed(con)
    run_pipelines(con, _cfg(), now=NOW, only=["efficiency"])
    assert not _sampled(con)
    # five days later the node's agent is reachable again and its spool is loaded
    path = write_spool_file(tmp_path, "gpu01", _minutes(DAY + timedelta(hours=10), 120))
    assert ingest_bytes(con, _cfg(), path.read_bytes(), file_name=path.name).rows == 120
    assert con.execute(
        "SELECT window_start, window_end FROM collector_runs WHERE collector = 'nvml'"
    ).fetchone() == (DAY + timedelta(hours=10), DAY + timedelta(hours=11, minutes=59))
    run_pipelines(con, _cfg(), now=NOW + timedelta(hours=1), only=["efficiency"])
    assert _sampled(con) == 2.0
    (start,) = con.execute(
        "SELECT window_start FROM pipeline_runs WHERE run_at = ?", [NOW + timedelta(hours=1)]
    ).fetchone()
    assert start == DAY  # the late file's day, not the margin before the last run


def test_without_late_data_the_window_starts_a_margin_before_the_last_run(con):
    _seed(con)
    run_pipelines(con, _cfg(), now=NOW, only=["efficiency", "reliability"])
    run_pipelines(con, _cfg(), now=NOW + timedelta(hours=1), only=["efficiency", "reliability"])
    starts = dict(
        con.execute(
            "SELECT pipeline, window_start FROM pipeline_runs WHERE run_at = ?", [NOW + timedelta(hours=1)]
        ).fetchall()
    )
    # efficiency: the margin (10 minutes) before the last run, from that day's midnight (billing zone UTC);
    # reliability reads node events, whose late arrival leaves no trace: the lookback (2 days)
    assert starts["efficiency"].astimezone(UTC) == NOW - timedelta(days=1)
    assert starts["reliability"].astimezone(UTC) == NOW - timedelta(days=2)
