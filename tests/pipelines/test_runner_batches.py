"""A pipeline run per group of nodes writes what one pass over every node writes.

Health holds a day and its look-back of every GPU's minutes while it judges them; on a fleet the runner splits
the nodes into groups by the hash of their name (BATCH_ROWS minutes each) and concatenates the marts. That is
only right if no rule looks across nodes, which this checks on the demo's history, faults included.
"""

from __future__ import annotations

import shutil
from datetime import UTC

from slurmscope.pipelines import health, runner

from slurmscope.config import load_config
from slurmscope.db import connect

MARTS = ("mart_node_health", "mart_gpu_health")


def _marts(con) -> dict[str, list[tuple]]:
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in MARTS}  # noqa: S608 - fixed mart names


def test_health_per_group_of_nodes_equals_one_pass(demo_run, tmp_path, monkeypatch):  # noqa: F811
    db = tmp_path / "demo.duckdb"
    shutil.copy(demo_run.db_path, db)
    con = connect(db)
    now = con.execute("SELECT max(run_at) FROM pipeline_runs").fetchone()[0].astimezone(UTC)
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "simcluster"})
    # Faults on three of the nodes with GPU minutes: a GPU off the bus, an XID that wants a reset, a GPU running hot (degraded, below the failing limit).
    gpus = con.execute(
        "SELECT node, any_value(gpu_uuid), min(minute) + INTERVAL 6 HOUR FROM gpu_samples GROUP BY node ORDER BY node"
    ).fetchall()
    assert len(gpus) >= 3
    for (node, uuid, at), xid in zip(gpus[:2], (79, 48), strict=True):
        con.execute(
            "INSERT INTO gpu_events (cluster, node, gpu_uuid, event_time, event_type, xid, source)"
            " VALUES ('simcluster', ?, ?, ?, 'xid', ?, 'test')",
            [node, uuid, at, xid],
        )
    node, uuid, at = gpus[2]
    con.execute(
        "UPDATE gpu_samples SET temp_gpu_max_celsius = 90 WHERE node = ? AND gpu_uuid = ?"
        " AND minute BETWEEN ? AND ? + INTERVAL 1 HOUR",
        [node, uuid, at, at],
    )

    assert runner.run_pipelines(con, cfg, full=True, now=now, only=["health"])["mart_gpu_health"] > 0
    one_pass = _marts(con)
    minutes = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
    monkeypatch.setattr(health, "BATCH_ROWS", max(1, minutes // 5))
    params = runner.pipeline_params(cfg, runner.Window(runner.EPOCH, now, True))
    assert runner.node_batches(con, health, params) >= 5
    assert runner.run_pipelines(con, cfg, full=True, now=now, only=["health"])["mart_gpu_health"] > 0
    batched = _marts(con)

    assert batched == one_pass
    statuses = {row[0] for row in con.execute("SELECT DISTINCT status FROM mart_gpu_health").fetchall()}
    assert statuses == {"ok", "degraded", "failing"}, statuses  # the faults were judged
    nodes = con.execute("SELECT count(DISTINCT node) FROM mart_node_health").fetchone()[0]
    assert nodes >= 5
