"""A pipeline run per group of nodes writes what one pass over every node writes.

Health holds a day and its look-back of every GPU's minutes while it judges them; on a fleet the runner splits
the nodes into groups by the hash of their name (BATCH_ROWS minutes each) and concatenates the marts. That is
only right if no rule looks across nodes, which this checks on the demo's history, faults included.
Efficiency's rows do look across nodes (a job's GPUs on several nodes, a job's MIG slices shared out by its
sacct record): its groups' partial sums are combined, which this checks on the demo's history with its jobs
spread over two nodes each. Drift compares each GPU with the fleet's minutes: its groups compare theirs with
fleet medians DuckDB computes over every node, and the scores across GPUs are combined.
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from slurmscope.pipelines import drift, efficiency, health, runner

MARTS = ("mart_node_health", "mart_gpu_health")
EFFICIENCY_KEYS = {
    "mart_job_efficiency": ["cluster", "job_id_raw", "submit_time"],
    "mart_idle_gpus_daily": ["cluster", "day", "account", "user"],
    "mart_mig_efficiency": ["cluster", "job_id_raw", "submit_time", "mig_instance"],
}
MIG_JOB = 990001
DRIFT_KEYS = ["cluster", "as_of", "signal", "entity_type", "entity"]


def _marts(con) -> dict[str, list[tuple]]:
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in MARTS}  # noqa: S608 - fixed mart names


def _in_groups(demo, module, rows: int, monkeypatch) -> int:
    """Make `module` run in five or more groups of nodes for `rows` of its BATCH_ROWS count; their number."""
    monkeypatch.setattr(module, "BATCH_ROWS", max(1, int(rows) // 5))
    batches = runner.node_batches(demo.con, module, demo.params)
    assert batches >= 5
    return batches


def test_health_per_group_of_nodes_equals_one_pass(demo, monkeypatch):
    con, cfg, now = demo.con, demo.cfg, demo.now
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
    _in_groups(demo, health, con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0], monkeypatch)
    assert runner.run_pipelines(con, cfg, full=True, now=now, only=["health"])["mart_gpu_health"] > 0
    batched = _marts(con)

    assert batched == one_pass
    statuses = {row[0] for row in con.execute("SELECT DISTINCT status FROM mart_gpu_health").fetchall()}
    assert statuses == {"ok", "degraded", "failing"}, statuses  # the faults were judged
    nodes = con.execute("SELECT count(DISTINCT node) FROM mart_node_health").fetchone()[0]
    assert nodes >= 5


def _efficiency_marts(con) -> dict[str, pl.DataFrame]:
    return {t: con.sql(f"SELECT * FROM {t}").pl().sort(keys) for t, keys in EFFICIENCY_KEYS.items()}  # noqa: S608 - fixed mart names


def _spread_over_nodes(con) -> None:
    """The jobs of the two nodes with the most GPU intervals (the demo's short jobs) also hold the GPUs of the
    other one, in the same order and at the same times: busy on one node and idle on the other, or idle on
    both. And a job holds one MIG instance on each node, its share of a GPU from its sacct record (one
    1g.10gb slice per instance: 1/7 of a GPU each, which a group holding only some of the instances would make
    more)."""
    nodes = [
        r[0]
        for r in con.execute(
            "SELECT node FROM gpu_jobs GROUP BY node ORDER BY count(*) DESC, node"
        ).fetchall()
    ]
    assert len(nodes) >= 3
    gpus = {
        n: [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT gpu_uuid FROM gpu_samples WHERE node = ? ORDER BY 1", [n]
            ).fetchall()
        ]
        for n in nodes
    }
    moved = [
        (a, ga, b, gb) for a, b in (nodes[:2], nodes[1::-1]) for ga, gb in zip(gpus[a], gpus[b], strict=False)
    ]
    con.execute("CREATE TEMP TABLE moved (node VARCHAR, gpu_uuid VARCHAR, to_node VARCHAR, to_gpu VARCHAR)")
    con.executemany("INSERT INTO moved VALUES (?, ?, ?, ?)", moved)
    con.execute(
        "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance)"
        " SELECT g.cluster, m.to_node, m.to_gpu, g.job_id, g.interval_start, g.interval_end, g.mig_instance"
        " FROM gpu_jobs g JOIN moved m USING (node, gpu_uuid)"
    )
    start = con.execute("SELECT min(minute) + INTERVAL 3 HOUR FROM gpu_samples").fetchone()[0]
    end = start + timedelta(minutes=90)
    k = len(nodes)
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, attempt, "user", account, start_time,'
        " end_time, nodes, gpus, mig_slices, alloc_tres) VALUES ('simcluster', ?, ?, ?, 1, 'migu', 'miga', ?, ?,"
        " ?, 0, ?, ?)",
        [
            str(MIG_JOB),
            MIG_JOB,
            start - timedelta(minutes=5),
            start,
            end,
            k,
            k,
            f"billing={k},cpu={k},gres/gpu:1g.10gb={k},gres/gpu={k},node={k}",
        ],
    )
    con.executemany(
        "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance)"
        " VALUES ('simcluster', ?, ?, ?, ?, ?, ?)",
        [(n, gpus[n][0], str(MIG_JOB), start, end, f"MIG-{n}") for n in nodes],
    )


def test_efficiency_per_group_of_nodes_equals_one_pass(demo, monkeypatch):
    con, cfg, now, params = demo.con, demo.cfg, demo.now, demo.params
    _spread_over_nodes(con)

    assert runner.node_batches(con, efficiency, params) == 1
    assert runner.run_pipelines(con, cfg, full=True, now=now, only=["efficiency"])["mart_job_efficiency"] > 0
    one_pass = _efficiency_marts(con)
    rows = runner._read(con, efficiency.BATCH_ROWS_SQL, params.sql()).collect().item()
    batches = _in_groups(demo, efficiency, rows, monkeypatch)
    # the precondition: jobs whose GPUs, and a job whose MIG slices, are in several groups of nodes
    spread = con.execute(
        "SELECT job_id, mig_instance <> '' FROM gpu_jobs GROUP BY ALL HAVING count(DISTINCT hash(node) % ?) >= 2",
        [batches],
    ).fetchall()
    assert len(spread) >= 10
    assert (str(MIG_JOB), True) in spread
    assert runner.run_pipelines(con, cfg, full=True, now=now, only=["efficiency"])["mart_job_efficiency"] > 0
    batched = _efficiency_marts(con)

    for table, frame in one_pass.items():
        assert_frame_equal(batched[table], frame, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
    jobs = one_pass["mart_job_efficiency"]
    assert jobs["gpus"].max() == 16  # 8 GPUs on each of two nodes: one row per attempt
    assert jobs["zero_util"].any() and not jobs["zero_util"].all()
    slices = one_pass["mart_mig_efficiency"]
    assert slices.height >= 3
    assert slices["fraction_source"].unique().to_list() == ["sacct"]
    assert slices["gpu_fraction"].to_list() == pytest.approx([1 / 7] * slices.height)


def test_drift_per_group_of_nodes_equals_one_pass(demo, monkeypatch):
    con, cfg, now, params = demo.con, demo.cfg, demo.now, demo.params
    # a GPU running 15 C hotter than its peers at the same work
    con.execute(
        "UPDATE gpu_samples SET temp_gpu_max_celsius = temp_gpu_max_celsius + 15"
        " WHERE (node, gpu_uuid) = (SELECT (node, gpu_uuid) FROM gpu_samples ORDER BY node, gpu_uuid LIMIT 1)"
    )

    assert runner.node_batches(con, drift, params) == 1
    assert runner.run_pipelines(con, cfg, full=True, now=now, only=["drift"])["mart_drift"] > 0
    one_pass = con.sql("SELECT * FROM mart_drift").pl().sort(DRIFT_KEYS)
    rows = runner._read(con, drift.BATCH_ROWS_SQL, params.sql()).collect().item()
    batches = _in_groups(demo, drift, rows, monkeypatch)
    assert runner.run_pipelines(con, cfg, full=True, now=now, only=["drift"])["mart_drift"] > 0
    batched = con.sql("SELECT * FROM mart_drift").pl().sort(DRIFT_KEYS)

    gpu = one_pass.filter(pl.col("signal").str.ends_with("_vs_fleet"))
    assert set(gpu["signal"]) == {signal for signal, *_ in drift.GPU_METRICS}
    assert gpu.filter(pl.col("signal") == "gpu_temperature_vs_fleet")["breached"].any()
    groups = con.execute(
        "SELECT count(DISTINCT hash(node) % ?) FROM mart_drift WHERE signal LIKE 'gpu_%_vs_fleet'", [batches]
    ).fetchone()[0]
    assert groups >= 3  # the GPUs scored together came from several groups
    assert one_pass.height > gpu.height  # the other families, once
    assert_frame_equal(batched, one_pass, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
