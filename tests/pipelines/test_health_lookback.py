"""Health's one-day look-back, read compactly.

A verdict at or after a window's start reads whole minutes only from shortly before it (events, throttling,
the latest sample: Health.whole_minutes_seconds); of the rest of the day before, health.INPUTS["samples"]
reads the first and last minute of each unchanged run of a GPU's uncorrectable remap count and each GPU's
last minute there, which keep the remap window's minimum and a silent GPU's last sample. An incremental run
must still write what a full rebuild, which reads every minute, writes.
"""

from __future__ import annotations

from datetime import timedelta

from slurmscope.pipelines import health, runner

from tests.pipelines.test_runner_batches import _marts

H = timedelta(hours=1)
M = timedelta(minutes=1)


def _runs(con, gpu, reason) -> list[tuple]:
    return con.execute(
        "SELECT since, last_seen FROM mart_gpu_health WHERE gpu_uuid = ?"
        " AND list_contains(string_split(reasons, ','), ?) ORDER BY since",
        [gpu, reason],
    ).fetchall()


def test_an_incremental_run_reading_the_look_back_compactly_equals_a_full_rebuild(demo):
    con, now = demo.con, demo.now
    cfg = demo.cfg.with_overrides(health={"remap_window_seconds": 12 * 3600})
    # The demo's GPU minutes cover its last day, the window; the same minutes a day earlier give it its whole
    # look-back.
    start = now - 24 * H
    assert con.execute("SELECT min(minute) FROM gpu_samples").fetchone()[0] >= start
    con.execute(
        "INSERT INTO gpu_samples SELECT * REPLACE (minute - INTERVAL 1 DAY AS minute) FROM gpu_samples"
    )
    (na, ga), (nb, gb), (nc, gc) = con.execute(
        "SELECT DISTINCT node, gpu_uuid FROM gpu_samples ORDER BY ALL LIMIT 3"
    ).fetchall()
    # a: 5 rows remapped, 1 from 14 h to 10 h before the window, then 5 again. At the window's start the
    # 12-hour remap window holds only the end of the run of 1s: growing, from a minimum that only that run's
    # last minute, in the look-back, carries.
    con.execute(
        "UPDATE gpu_samples SET remapped_uncorrectable = CASE WHEN minute >= ? AND minute < ? THEN 1 ELSE 5 END"
        " WHERE node = ? AND gpu_uuid = ?",
        [start - 14 * H, start - 10 * H, na, ga],
    )
    # b: silent from 6 h before the window: judged stale on its last minute, which lies in the look-back.
    con.execute(
        "DELETE FROM gpu_samples WHERE node = ? AND gpu_uuid = ? AND minute >= ?", [nb, gb, start - 6 * H]
    )
    # c: throttled by hardware from 40 to 5 minutes before the window, and an uncorrectable ECC error counted
    # 30 minutes before it (its aggregate counter rises then): both judged at the window's start.
    con.execute(
        "UPDATE gpu_samples SET throttle_seconds = CASE WHEN minute >= ? AND minute < ? THEN 60 ELSE 0 END,"
        " ecc_uncorrected_total = CASE WHEN minute >= ? THEN 1 ELSE 0 END WHERE node = ? AND gpu_uuid = ?",
        [start - 40 * M, start - 5 * M, start - 30 * M, nc, gc],
    )

    runner.run_pipelines(con, cfg, full=True, now=now, only=["health"])
    full = _marts(con)
    runner.run_pipeline(con, cfg, health, runner.Window(start, now, False))
    assert _marts(con) == full

    params = runner.pipeline_params(cfg, runner.Window(start, now, False))
    read = runner.read_inputs(con, health, params)["samples"].collect().height
    every = con.execute(
        "SELECT count(*) FROM gpu_samples WHERE minute >= ? AND minute <= ?", [start - 24 * H, now]
    ).fetchone()[0]
    assert read < every * 0.6, (read, every)  # the window and 70 minutes, not the window and a day
    # The verdicts the look-back decides, each at the window's start.
    assert any(since < start <= last < start + 2 * H for since, last in _runs(con, ga, "row_remap_growing"))
    assert any(since <= start <= last for since, last in _runs(con, gb, "telemetry_stale"))
    assert any(since <= start <= last for since, last in _runs(con, gc, "throttling"))
    assert any(since <= start <= last for since, last in _runs(con, gc, "uncorrectable_ecc"))
