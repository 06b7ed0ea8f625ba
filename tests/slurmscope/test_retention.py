"""Retention: pipeline results and the lake across the rollup boundary, sacct months kept only in the lake,
run logs, and what `status` shows."""

from __future__ import annotations

import io
import json
import math
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner
from slurmscope.pipelines.runner import HISTORY_MARGIN, run_pipelines

from slurmscope import lake
from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.retention import jobs_cutoff, run_retention

SIM_END = datetime(2026, 11, 4, tzinfo=UTC)
# gpu_minutes_days = 7 at Nov 10 12:00 cuts at Nov 3 00:00: the demo's Nov 1 and 2 are rolled up, Nov 3 stays
RETENTION_NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)
CUT = datetime(2026, 11, 3, tzinfo=UTC)


@pytest.fixture(scope="module")
def telemetry_demo(tmp_path_factory) -> Path:
    """The demo cluster (64 GPUs, 3 days) with NVML minutes for all 3 days (the shared demo has the last)."""
    from slurmscope.demo import Progress, run_demo

    base = tmp_path_factory.mktemp("demo3")
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "simcluster"})
    run_demo(
        cfg,
        str(base / "demo.duckdb"),
        gpus=64,
        days=3,
        seed=7,
        port=0,
        out_dir=base / "out",
        serve=False,
        progress=Progress(stream=io.StringIO()),
        sim_options={"telemetry_days": 3},
    )
    return base / "demo.duckdb"


def _cfg(**retention):
    return load_config(None, env={}).with_overrides(cluster={"name": "simcluster"}, retention=retention)


GPU_MARTS = {
    "mart_job_efficiency": "job_id_raw, submit_time",
    "mart_idle_gpus_daily": 'day, account, "user"',
    "mart_cost_efficiency_daily": "day, account",
    "mart_gpu_health": "node, gpu_uuid, since",
    "mart_node_health": "node, since",
}


def _marts(con) -> dict[str, pl.DataFrame]:
    return {m: con.sql(f"SELECT * FROM {m} ORDER BY {k}").pl() for m, k in GPU_MARTS.items()}


def _same(a: pl.DataFrame, b: pl.DataFrame) -> list[str]:
    """Columns that differ: floats beyond 1e-9 relative, anything else at all."""
    assert a.columns == b.columns and a.height == b.height
    bad = []
    for c in a.columns:
        for x, y in zip(a[c].to_list(), b[c].to_list(), strict=True):
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
                    bad.append(c)
                    break
            elif x != y:
                bad.append(c)
                break
    return bad


# The simulator's agent writes spool version 2 (no GPM, no per-counter NVLink, PCIe link or retired-page
# detail): the demo's minutes get them here, as an agent of version 3 would write them. A third of the
# GPUs read GPM every minute, a third only in minutes 0-2 of every 7 (hours of both sources), a third never;
# SM activity varies minute by minute. NVLink replays, CRC floods and PCIe replays come in single minutes
# (over DCGM's limits: health.nvlink_replay_recovery = 1, 100 CRC errors a second, ceil(1.92 x 16) = 31
# PCIe replays a minute at gen 5 x16); the counters that only grow step on hour boundaries (a step inside an
# hour is read back from the hour's first minute: docs/configuration.md#gpu-minutes-and-their-hourly-rollups).
V3_MINUTES = """
UPDATE gpu_samples SET
    gpm_samples = CASE WHEN g = 0 OR (g = 1 AND k % 7 < 3) THEN samples END,
    sm_active_mean = CASE WHEN g = 0 OR (g = 1 AND k % 7 < 3) THEN util_gpu_mean * 0.6 + k % 5 END,
    sm_occupancy_mean = CASE WHEN g = 0 OR (g = 1 AND k % 7 < 3) THEN 20.0 + k % 3 END,
    tensor_active_mean = CASE WHEN g = 0 OR (g = 1 AND k % 7 < 3) THEN util_gpu_mean * 0.3 END,
    dram_active_mean = CASE WHEN g = 0 OR (g = 1 AND k % 7 < 3) THEN 35.0 END,
    activity_source = CASE WHEN g = 0 OR (g = 1 AND k % 7 < 3) THEN 'gpm'
                           WHEN util_gpu_mean IS NOT NULL THEN 'gpu_util' END,
    nvlink_replay_delta = CASE WHEN (k + g) % 613 = 5 THEN 2 ELSE 0 END,
    nvlink_recovery_delta = 0,
    nvlink_crc_flit_delta = CASE WHEN (k + g) % 887 = 3 THEN 7000 ELSE 0 END,
    nvlink_crc_data_delta = CASE WHEN (k + g) % 449 = 9 THEN 30 ELSE 0 END,
    nvlink_replay_total = (k + g) // 613 * 2,
    nvlink_crc_flit_total = (k + g) // 887 * 7000,
    pcie_replay_delta = CASE WHEN (k + g) % 701 = 11 THEN 40 WHEN (k + g) % 97 = 1 THEN 2 ELSE 0 END,
    pcie_link_gen = 5,
    pcie_link_width = 16,
    remapped_uncorrectable = CASE WHEN g = 2 THEN k // 1440 ELSE 0 END,
    retired_pages_sbe = k // 1440,
    retired_pages_dbe = 0,
    retired_pages_pending = g = 1 AND k // 60 % 24 < 6,
    violation_power_seconds = (k % 11) * 0.5,
    violation_thermal_seconds = 0.0
FROM (SELECT DISTINCT gpu_uuid AS u, hash(gpu_uuid) % 3 AS g FROM gpu_samples) AS x,
     (SELECT DISTINCT minute AS t, CAST(epoch(minute - TIMESTAMPTZ '2026-11-01 00:00:00+00') // 60 AS BIGINT) AS k
      FROM gpu_samples) AS y
WHERE gpu_samples.gpu_uuid = x.u AND gpu_samples.minute = y.t
"""


def test_gpu_pipelines_over_a_range_spanning_the_cut_are_the_same_after_pruning(telemetry_demo, tmp_path):
    """Efficiency (GPM SM activity, useful GPU-seconds, activity source), cost's usage-weighted and
    useful-GPU-hour views, and health (NVLink, PCIe replay, remapped-row and retired-page rules), rebuilt over
    Nov 1-4 with Nov 1-2 rolled up, equal the runs over the minutes. Tolerance 1e-9 relative (float summation
    order): the demo's agent reads 6 samples every minute, so the rollups' samples-weighted means are the
    pipelines' held-weighted means, and every job minute is its own job's (rollup rows are per job, its
    partial minutes apart) and its own source's (GPM and GPU_UTIL minutes are rows apart)."""
    db = tmp_path / "d.duckdb"
    shutil.copy(telemetry_demo, db)
    con = connect(db)
    con.execute(V3_MINUTES)
    only = ["cost", "efficiency", "health"]
    run_pipelines(con, _cfg(), full=True, now=SIM_END, only=only)
    before = _marts(con)
    spanning = con.execute(
        "SELECT count(*) FROM mart_job_efficiency WHERE alloc_start < ? AND alloc_end > ?", [CUT, CUT]
    ).fetchone()[0]
    assert spanning > 0  # jobs whose GPU minutes lie on both sides of the cut
    # what the injected minutes make the marts say, so that equality below covers it
    rolled = before["mart_job_efficiency"].filter(pl.col("alloc_start") < CUT)
    assert set(rolled["activity_source"].drop_nulls()) == {"gpm", "gpu_util", "mixed"}
    assert set(before["mart_cost_efficiency_daily"]["activity_source"].drop_nulls()) >= {"mixed"}
    reasons = set(before["mart_gpu_health"].filter(pl.col("since") < CUT)["reason"].drop_nulls())
    assert {"nvlink_errors", "nvlink_crc_errors", "pcie_replay_rate", "retired_pages_pending"} <= reasons, (
        reasons
    )

    done = run_retention(con, _cfg(gpu_minutes_days=7), RETENTION_NOW)
    # one step per hour of Nov 1 and 2, oldest first
    assert [(d.table, d.step.start, d.status) for d in done] == [
        ("gpu_samples", datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=h), "ok") for h in range(48)
    ]
    assert con.execute("SELECT min(minute) FROM gpu_samples").fetchone()[0] == CUT
    hourly = con.execute(
        "SELECT count(*), count(DISTINCT (node, gpu_uuid, hour)) FROM gpu_samples_hourly"
    ).fetchone()
    assert hourly[1] == 32 * 48  # 32 sampled GPUs x 48 hours; more rows where jobs changed within an hour
    assert (
        sum(d.rows_removed for d in done) == 32 * 2 * 1440 and sum(d.rows_written for d in done) == hourly[0]
    )

    run_pipelines(con, _cfg(), full=True, now=SIM_END, only=only)
    after = _marts(con)
    assert {m: _same(before[m], after[m]) for m in GPU_MARTS} == dict.fromkeys(GPU_MARTS, [])
    con.close()


def test_the_lake_keeps_every_minute_and_gets_the_same_hours_after_pruning(telemetry_demo, tmp_path):
    db, out = tmp_path / "d.duckdb", tmp_path / "lake"
    shutil.copy(telemetry_demo, db)
    con = connect(db)
    tables = ["gpu_samples", "gpu_samples_hourly"]
    lake.export(con, str(out), now=SIM_END, tables=tables)
    read = duckdb.connect()
    q = "SELECT * FROM read_parquet('{}/{}/*/*/*.parquet') ORDER BY ALL"
    minutes, hours = (read.execute(q.format(out, t)).fetchall() for t in tables)
    assert len(minutes) == 32 * 3 * 1440

    run_retention(con, _cfg(gpu_minutes_days=7), RETENTION_NOW)
    written = lake.export(con, str(out), now=SIM_END, tables=tables)
    # November lost two days of minutes in DuckDB: the re-export merges them back from the lake's own file
    assert read.execute(q.format(out, "gpu_samples")).fetchall() == minutes
    again = read.execute(q.format(out, "gpu_samples_hourly")).fetchall()
    assert len(again) == len(hours)
    assert all(
        math.isclose(x, y, rel_tol=1e-9) if isinstance(x, float) else x == y
        for a, b in zip(again, hours, strict=True)
        for x, y in zip(a, b, strict=True)
    )
    assert {w.status for w in written} <= {"written", "unchanged"} and lake.verify(str(out)) == []
    con.close()


@pytest.mark.parametrize("exported_before_pruning", [False, True])
def test_a_worker_restored_from_the_lake_reads_the_same_gpu_history(
    telemetry_demo, tmp_path, exported_before_pruning
):
    """`restore` takes the minutes the lake has and, for the hours before them, the hourly rows: a lake first
    written after retention (Nov 1-2 only as hours) gives a worker that reads the source's history through
    gpu_minutes; one written before it (every minute kept) gives the minutes as they were. Both rebuild the
    GPU marts of the source (which retention leaves as they were)."""
    db, out = tmp_path / "d.duckdb", tmp_path / "lake"
    shutil.copy(telemetry_demo, db)
    con = connect(db)
    con.execute(V3_MINUTES)
    history = "SELECT * FROM gpu_minutes('simcluster', '-infinity', 'infinity') ORDER BY ALL"
    unpruned = con.sql(history).pl()
    if exported_before_pruning:
        lake.export(con, str(out), now=SIM_END)
    run_retention(con, _cfg(gpu_minutes_days=7), RETENTION_NOW)
    lake.export(con, str(out), now=SIM_END)
    worker = connect(tmp_path / "worker.duckdb")
    lake.restore(worker, str(out), now=SIM_END)

    first_minute = worker.execute("SELECT min(minute) FROM gpu_samples").fetchone()[0]
    hours = worker.execute("SELECT count(*), max(hour) FROM gpu_samples_hourly").fetchone()
    boundary = worker.execute("SELECT boundary FROM retention_state").fetchall()
    if exported_before_pruning:
        assert first_minute == datetime(2026, 11, 1, tzinfo=UTC) and hours[0] == 0 and boundary == []
        want = unpruned
    else:
        assert first_minute == CUT and hours[1] == CUT - timedelta(hours=1) and boundary == [(CUT,)]
        want = con.sql(history).pl()
    got = worker.sql(history).pl()
    assert got.height == want.height == 32 * 3 * 1440 and _same(got, want) == []

    only = ["cost", "efficiency", "health"]
    for c in (con, worker):
        run_pipelines(c, _cfg(), full=True, now=SIM_END, only=only)
    source_marts, worker_marts = _marts(con), _marts(worker)
    assert {m: _same(source_marts[m], worker_marts[m]) for m in GPU_MARTS} == dict.fromkeys(GPU_MARTS, [])
    con.close()
    worker.close()


# ---- sacct months kept only in the lake -------------------------------------------------------------------

NOW = datetime(2026, 6, 15, tzinfo=UTC)  # sacct_lake_months = 3: attempts that ended before March 1 may go


def _sacct_db(path: Path) -> duckdb.DuckDBPyConnection:
    con = connect(path)
    attempts = [  # job_id_raw, submit, start, end
        (1, "2026-01-10 08:00", "2026-01-10 09:00", "2026-01-11 09:00"),
        (2, "2026-01-20 08:00", "2026-01-20 08:30", "2026-01-20 20:30"),
        (3, "2026-02-05 00:00", "2026-02-05 01:00", "2026-02-06 01:00"),
        (4, "2026-02-27 00:00", "2026-02-27 00:00", "2026-03-02 00:00"),  # ends after the cutoff: stays
        (5, "2026-05-01 00:00", "2026-05-01 01:00", "2026-05-02 01:00"),
    ]
    for jid, submit, start, end in attempts:
        con.execute(
            'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, attempt, account, "user", "partition",'
            " state, start_time, end_time, gpus, gpu_type, ingested_at) VALUES ('c', ?, ?, ?::TIMESTAMPTZ, 1,"
            " 'acct', 'u', 'gpu', 'COMPLETED', ?::TIMESTAMPTZ, ?::TIMESTAMPTZ, 4, 'h100', TIMESTAMPTZ '2026-06-01')",
            [str(jid), jid, submit + "+00", start + "+00", end + "+00"],
        )
        con.execute(
            "INSERT INTO job_steps (cluster, job_id_raw, job_submit_time, step_id, job_id, state, ingested_at)"
            " VALUES ('c', ?, ?::TIMESTAMPTZ, 'batch', ?, 'COMPLETED', TIMESTAMPTZ '2026-06-01')",
            [jid, submit + "+00", f"{jid}.batch"],
        )
    return con


def _lake_cfg(out: Path):
    return load_config(None, env={}).with_overrides(
        cluster={"name": "c"}, retention={"sacct_lake_months": 3}, lake={"export_dir": str(out)}
    )


def _ids(con, table: str = "jobs") -> list[int]:
    return [r[0] for r in con.execute(f"SELECT job_id_raw FROM {table} ORDER BY 1").fetchall()]


def test_sacct_months_leave_duckdb_only_once_the_lake_holds_them(tmp_path):
    con = _sacct_db(tmp_path / "s.duckdb")
    out = tmp_path / "lake"
    cfg = _lake_cfg(out)
    assert jobs_cutoff(NOW, 3) == datetime(2026, 3, 1, tzinfo=UTC)

    # nothing exported yet: both months wait, nothing is deleted
    done = run_retention(con, cfg, NOW)
    assert [(d.step.start.month, d.status) for d in done] == [(1, "waiting"), (2, "waiting")]
    assert (
        "not in the lake manifest" in done[0].detail and "slurmscope export --since 2026-01" in done[0].detail
    )
    assert _ids(con) == [1, 2, 3, 4, 5]

    lake.export(con, str(out), since="2026-01", now=NOW, tables=["jobs", "job_steps"])
    con.execute("UPDATE jobs SET state = 'FAILED' WHERE job_id_raw = 3")  # February changed after the export
    done = run_retention(con, cfg, NOW)
    assert [(d.table, d.step.start.month, d.status, d.rows_removed) for d in done] == [
        ("jobs", 1, "ok", 2),
        ("job_steps", 1, "ok", 2),
        ("jobs", 2, "waiting", 0),
    ]
    assert "1 row(s) differ from or are missing in the lake file" in done[2].detail
    assert _ids(con) == [3, 4, 5] and _ids(con, "job_steps") == [3, 4, 5]
    assert con.execute("SELECT boundary FROM retention_state WHERE name = 'jobs'").fetchall() == [
        (datetime(2026, 2, 1, tzinfo=UTC),)
    ]

    lake.export(con, str(out), since="2026-02", now=NOW, tables=["jobs", "job_steps"])
    run_retention(con, cfg, NOW)
    assert _ids(con) == [4, 5]  # job 4 ended after March 1: it stays until a later month's run
    # the lake still has every attempt, the changed one as it is now
    rows = (
        duckdb.connect()
        .execute(f"SELECT job_id_raw, state FROM read_parquet('{out}/jobs/*/*/*.parquet') ORDER BY 1")
        .fetchall()
    )
    assert rows == [(1, "COMPLETED"), (2, "COMPLETED"), (3, "FAILED"), (4, "COMPLETED"), (5, "COMPLETED")]


def test_a_damaged_lake_file_keeps_the_month_in_duckdb(tmp_path):
    con = _sacct_db(tmp_path / "s.duckdb")
    out = tmp_path / "lake"
    lake.export(con, str(out), since="2026-01", now=NOW, tables=["jobs", "job_steps"])
    path = out / "jobs/cluster=c/month=2026-01/data.parquet"
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    done = run_retention(con, _lake_cfg(out), NOW)
    assert done[0].status == "waiting" and "checksum differs from the manifest" in done[0].detail
    assert _ids(con) == [1, 2, 4, 5]  # January kept; February's files are sound, so it went


def test_a_late_record_for_a_lake_only_month_is_merged_into_the_lake_not_lost(tmp_path):
    con = _sacct_db(tmp_path / "s.duckdb")
    out = tmp_path / "lake"
    lake.export(con, str(out), since="2026-01", now=NOW, tables=["jobs", "job_steps"])
    run_retention(con, _lake_cfg(out), NOW)
    assert 1 not in _ids(con)
    con.execute(  # slurmdbd's backlog: a January attempt reaches the database in June
        "INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, state, end_time)"
        " VALUES ('c', '9', 9, TIMESTAMPTZ '2026-01-25 00:00:00+00', 'COMPLETED', TIMESTAMPTZ '2026-01-26 00:00:00+00')"
    )
    written = lake.export(con, str(out), since="2026-01", now=NOW, tables=["jobs"])
    jan = next(w for w in written if w.partition.month == "2026-01")
    assert (jan.status, jan.rows) == ("written", 3)
    ids = (
        duckdb.connect()
        .execute(
            f"SELECT job_id_raw FROM read_parquet('{out}/jobs/cluster=c/month=2026-01/data.parquet') ORDER BY 1"
        )
        .fetchall()
    )
    assert ids == [(1,), (2,), (9,)]


def test_a_full_rebuild_keeps_the_marts_of_months_only_the_lake_has(tmp_path):
    """The nightly `--full` would otherwise rebuild January's charges from an empty January."""
    con = _sacct_db(tmp_path / "s.duckdb")
    out = tmp_path / "lake"
    cfg = _lake_cfg(out)
    run_pipelines(con, cfg, full=True, now=NOW, only=["cost"])
    q = "SELECT day, account, gpu_seconds, cost_usd FROM mart_cost_daily ORDER BY ALL"
    before = con.execute(q).fetchall()
    assert any(r[0].month == 1 for r in before)
    lake.export(con, str(out), since="2026-01", now=NOW, tables=["jobs", "job_steps"])
    run_retention(con, cfg, NOW)
    assert (
        con.execute("SELECT count(*) FROM jobs WHERE submit_time < '2026-03-01'").fetchone()[0] == 1
    )  # job 4
    run_pipelines(con, cfg, full=True, now=NOW, only=["cost"])
    assert con.execute(q).fetchall() == before
    floor = con.execute(
        "SELECT min(window_start) FROM pipeline_runs WHERE pipeline = 'cost' AND run_at = ?", [NOW]
    ).fetchone()[0]
    # the rebuild started at the first local midnight on or after the boundary (Mar 1) + 62 days
    assert floor >= datetime(2026, 3, 1, tzinfo=UTC) + HISTORY_MARGIN - timedelta(days=1)


# ---- Slurm snapshots kept only in the lake ----------------------------------------------------------------


def _snapshot_db(path: Path) -> duckdb.DuckDBPyConnection:
    """The sacct history above, with an sinfo snapshot of two 8-GPU nodes every 6 hours from January 10 to
    June 14 (job 1's node allocated while it ran) and a queue snapshot a day."""
    con = _sacct_db(path)
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, cpus_total, gpus_total,'
        " gpus_used, gpu_type) SELECT 'c', t, n, 'gpu', CASE WHEN used > 0 THEN 'ALLOCATED' ELSE 'IDLE' END, 64,"
        " 8, used, 'h100' FROM (SELECT t, n, CASE WHEN n = 'g1' AND t >= TIMESTAMPTZ '2026-01-10 09:00:00+00'"
        " AND t < TIMESTAMPTZ '2026-01-11 09:00:00+00' THEN 4 ELSE 0 END AS used"
        " FROM generate_series(TIMESTAMPTZ '2026-01-10 00:00:00+00', TIMESTAMPTZ '2026-06-14 00:00:00+00',"
        " INTERVAL 6 HOUR) s(t), (VALUES ('g1'), ('g2')) v(n))"
    )
    con.execute(
        "INSERT INTO pending_jobs (cluster, snapshot_time, job_id, state, reason) SELECT 'c', t, 'q' ||"
        " epoch(t)::BIGINT, 'PENDING', 'Priority' FROM generate_series(TIMESTAMPTZ '2026-01-10 00:00:00+00',"
        " TIMESTAMPTZ '2026-06-14 00:00:00+00', INTERVAL 1 DAY) s(t)"
    )
    return con


def _snapshot_cfg(out: Path):
    return load_config(None, env={}).with_overrides(
        cluster={"name": "c"}, retention={"snapshot_lake_months": 3}, lake={"export_dir": str(out)}
    )


def _months(con, table: str) -> list[tuple[int, int]]:
    return con.execute(
        f"SELECT month(timezone('UTC', snapshot_time)) AS m, count(*) FROM {table} GROUP BY m ORDER BY m"
    ).fetchall()


def test_snapshot_months_leave_duckdb_only_once_the_lake_holds_them(tmp_path):
    con = _snapshot_db(tmp_path / "s.duckdb")
    out = tmp_path / "lake"
    cfg = _snapshot_cfg(out)
    nodes, queue = _months(con, "node_states"), _months(con, "pending_jobs")
    assert [m for m, _ in nodes] == [1, 2, 3, 4, 5, 6]

    done = run_retention(con, cfg, NOW)  # nothing exported yet: every month before March waits
    assert [(d.table, d.step.start.month, d.status) for d in done] == [
        ("node_states", 1, "waiting"),
        ("node_states", 2, "waiting"),
        ("pending_jobs", 1, "waiting"),
        ("pending_jobs", 2, "waiting"),
    ]
    assert _months(con, "node_states") == nodes and _months(con, "pending_jobs") == queue

    lake.export(con, str(out), since="2026-01", now=NOW, tables=["node_states", "pending_jobs"])
    con.execute(  # a February snapshot changed after the export: February stays
        "UPDATE node_states SET state = 'DOWN' WHERE snapshot_time = TIMESTAMPTZ '2026-02-03 06:00:00+00'"
        " AND node = 'g2'"
    )
    done = run_retention(con, cfg, NOW)
    assert [(d.table, d.step.start.month, d.status, d.rows_removed) for d in done] == [
        ("node_states", 1, "ok", nodes[0][1]),
        ("node_states", 2, "waiting", 0),
        ("pending_jobs", 1, "ok", queue[0][1]),
        ("pending_jobs", 2, "ok", queue[1][1]),
    ]
    assert "1 row(s) differ from or are missing in the lake file" in done[1].detail
    assert _months(con, "node_states") == nodes[1:] and _months(con, "pending_jobs") == queue[2:]
    assert con.execute("SELECT name, boundary FROM retention_state ORDER BY name").fetchall() == [
        ("node_states", datetime(2026, 2, 1, tzinfo=UTC)),
        ("pending_jobs", datetime(2026, 3, 1, tzinfo=UTC)),
    ]
    # a recorded sinfo of January ingested late: its month is re-exported merged with the lake's rows
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, gpus_total, gpus_used)'
        " VALUES ('c', TIMESTAMPTZ '2026-01-20 00:01:00+00', 'g3', 'gpu', 'IDLE', 8, 0)"
    )
    lake.export(con, str(out), since="2026-01", now=NOW, tables=["node_states"])
    run_retention(con, cfg, NOW)
    assert _months(con, "node_states") == nodes[2:]
    lake_months = (
        duckdb.connect()
        .execute(
            f"SELECT month(timezone('UTC', snapshot_time)) AS m, count(*), count(*) FILTER (state = 'DOWN')"
            f" FROM read_parquet('{out}/node_states/*/*/*.parquet') GROUP BY m ORDER BY m"
        )
        .fetchall()
    )
    assert [(m, n) for m, n, _ in lake_months] == [(1, nodes[0][1] + 1), *nodes[1:]]
    assert sum(d for _, _, d in lake_months) == 1


def test_sshare_months_leave_duckdb_only_once_the_lake_holds_them(tmp_path):
    """`shares` (a row per association at every sshare, every 5 minutes) is thinned like the other snapshots."""
    con = connect(tmp_path / "s.duckdb")
    con.execute(
        "INSERT INTO shares (cluster, snapshot_time, account, \"user\", raw_shares, raw_usage) SELECT 'c', t, a, '',"
        " 1, 10 FROM generate_series(TIMESTAMPTZ '2026-01-10 00:00:00+00', TIMESTAMPTZ '2026-06-14 00:00:00+00',"
        " INTERVAL 1 DAY) s(t), (VALUES ('root'), ('ml')) v(a)"
    )
    out = tmp_path / "lake"
    cfg = _snapshot_cfg(out)
    months = _months(con, "shares")
    done = run_retention(con, cfg, NOW)
    assert [(d.table, d.step.start.month, d.status) for d in done] == [
        ("shares", 1, "waiting"),
        ("shares", 2, "waiting"),
    ]
    lake.export(con, str(out), since="2026-01", now=NOW, tables=["shares"])
    done = run_retention(con, cfg, NOW)
    assert [(d.table, d.step.start.month, d.status, d.rows_removed) for d in done] == [
        ("shares", 1, "ok", months[0][1]),
        ("shares", 2, "ok", months[1][1]),
    ]
    assert _months(con, "shares") == months[2:]
    assert con.execute("SELECT name, boundary FROM retention_state").fetchall() == [
        ("shares", datetime(2026, 3, 1, tzinfo=UTC))
    ]
    (n,) = (
        duckdb.connect()
        .execute(f"SELECT count(*) FROM read_parquet('{out}/shares/*/*/*.parquet')")
        .fetchone()
    )
    assert n == sum(k for _, k in months)


def test_a_full_rebuild_keeps_the_capacity_of_months_only_the_lake_has_snapshots_of(tmp_path):
    """Without the floor, `--full` would price January's GPUs from no snapshots at all."""
    con = _snapshot_db(tmp_path / "s.duckdb")
    out = tmp_path / "lake"
    cfg = _snapshot_cfg(out)
    run_pipelines(con, cfg, full=True, now=NOW, only=["cost"])
    q = "SELECT day, capacity_gpu_seconds, allocated_gpu_seconds FROM mart_capacity_daily ORDER BY ALL"
    before = con.execute(q).fetchall()
    jan = [r for r in before if r[0].month == 1]
    assert jan and sum(r[1] for r in jan) > 0 and sum(r[2] for r in jan) > 0
    lake.export(con, str(out), since="2026-01", now=NOW, tables=["node_states", "pending_jobs"])
    run_retention(con, cfg, NOW)
    assert _months(con, "node_states")[0][0] == 3
    run_pipelines(con, cfg, full=True, now=NOW, only=["cost"])
    assert con.execute(q).fetchall() == before
    start = con.execute(
        "SELECT min(window_start) FROM pipeline_runs WHERE pipeline = 'cost' AND run_at = ?", [NOW]
    ).fetchone()[0]
    assert start >= datetime(2026, 3, 1, tzinfo=UTC) + HISTORY_MARGIN - timedelta(days=1)


# ---- run logs ---------------------------------------------------------------------------------------------


def test_old_run_log_rows_go_but_each_collectors_first_last_and_last_good_run_stay(tmp_path):
    con = connect(tmp_path / "r.duckdb")
    rows = [  # collector, started, status
        ("sinfo", "2026-01-01", "ok"),  # sinfo's first run and last success: old, kept
        ("sinfo", "2026-01-02", "error"),  # sinfo's last run: old, kept
        ("sacct", "2025-12-01", "error"),  # sacct's first run: kept
        ("sacct", "2026-01-01", "ok"),  # sacct's last success: old, kept
        ("sacct", "2026-01-02", "error"),
        ("sacct", "2026-06-10", "error"),  # recent
        ("nvml", "2026-01-01", "ok"),  # nvml's first run: kept
        ("nvml", "2026-02-01", "ok"),
        ("nvml", "2026-02-02", "error"),
        ("nvml", "2026-06-14", "ok"),
    ]
    for collector, started, status in rows:
        con.execute(
            "INSERT INTO collector_runs (cluster, collector, started_at, status) VALUES ('c', ?, ?::TIMESTAMPTZ, ?)",
            [collector, started + " 00:00:00+00", status],
        )
    for name, loaded in (("old.jsonl", "2026-01-01"), ("new.jsonl", "2026-06-14")):
        con.execute(
            "INSERT INTO spool_files (cluster, node, file_name, sha256, loaded_at) VALUES ('c', 'n', ?, 'x', ?::TIMESTAMPTZ)",
            [name, loaded + " 00:00:00+00"],
        )
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "c"}, retention={"run_log_days": 90})
    done = run_retention(con, cfg, NOW)  # before 2026-03-17
    assert [(d.table, d.rows_removed) for d in done] == [("collector_runs", 3), ("spool_files", 1)]
    left = con.execute(
        "SELECT collector, strftime(started_at, '%m-%d'), status FROM collector_runs ORDER BY ALL"
    )
    assert left.fetchall() == [
        ("nvml", "01-01", "ok"),
        ("nvml", "06-14", "ok"),
        ("sacct", "01-01", "ok"),
        ("sacct", "06-10", "error"),
        ("sacct", "12-01", "error"),
        ("sinfo", "01-01", "ok"),
        ("sinfo", "01-02", "error"),
    ]
    assert con.execute("SELECT file_name FROM spool_files").fetchall() == [("new.jsonl",)]


# ---- status -----------------------------------------------------------------------------------------------


def test_status_shows_the_database_size_and_what_retention_removed(telemetry_demo, tmp_path):
    db = tmp_path / "d.duckdb"
    shutil.copy(telemetry_demo, db)
    con = connect(db)
    run_retention(con, _cfg(gpu_minutes_days=7), RETENTION_NOW)
    hourly = con.execute("SELECT count(*) FROM gpu_samples_hourly").fetchone()[0]
    con.close()
    res = CliRunner().invoke(main, ["--db", str(db), "--cluster", "simcluster", "status", "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["database"] == [
        {
            "file": str(db),
            "file_bytes": db.stat().st_size,
            "used_bytes": out["database"][0]["used_bytes"],
            "free_bytes": out["database"][0]["free_bytes"],
            "wal": out["database"][0]["wal"],
        }
    ]
    assert 0 < out["database"][0]["used_bytes"] <= db.stat().st_size
    gpu = next(r for r in out["retention"] if r["table"] == "gpu_samples")
    assert gpu["rows"] == 32 * 1440 and gpu["last_removed"] == gpu["removed_total"] == 32 * 2 * 1440
    assert (gpu["removed_from"], gpu["removed_to"]) == (
        "2026-11-01 00:00:00+00:00",
        "2026-11-02 23:59:00+00:00",
    )
    assert gpu["boundary"] == "2026-11-03 00:00:00+00:00" and gpu["hourly_rows_written"] == hourly
    assert gpu["older_in"] == f"gpu_samples_hourly ({hourly} rows)" and gpu["status"] == "ok"
    assert [r["table"] for r in out["retention"]] == [
        "gpu_samples",
        "jobs",
        "job_steps",
        "node_states",
        "pending_jobs",
        "collector_runs",
        "spool_files",
    ]
    table = CliRunner().invoke(main, ["--db", str(db), "--cluster", "simcluster", "status"])
    assert "# database" in table.output and "# retention" in table.output
    # CSV is one table: the collectors' by default (as before retention), another by --section
    base = ["--db", str(db), "--cluster", "simcluster", "status", "--format", "csv"]
    assert CliRunner().invoke(main, base).output.startswith("collector,last_status,")
    csv_rows = CliRunner().invoke(main, [*base, "--section", "retention"]).output.splitlines()
    assert csv_rows[0].startswith("table,rows,boundary,older_in,") and len(csv_rows) == 8
    assert csv_rows[1].startswith(f"gpu_samples,{32 * 1440},2026-11-03 00:00:00+00:00,")
    two = CliRunner().invoke(main, [*base, "--section", "retention", "--section", "database"])
    assert two.exit_code == 2 and "--format csv prints one table" in two.output
