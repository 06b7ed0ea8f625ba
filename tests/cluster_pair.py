"""Two clusters in one database, and each alone in its own, built once per session from the shared demo.

Cluster `simcluster` is the demo's raw data as ingested. Cluster `b` is hand-made from it so that any row
of one cluster leaking into the other's marts changes them: the same node names, job ids and times (a join
that forgets `cluster` matches), two thirds of the attempts (every job id divisible by 3 dropped), accounts
renamed `<account>-b`, and every sinfo snapshot of the first GPU node DOWN. Its price book is its own
(`[[clusters]]` entry: $3.00 per GPU-hour against the top-level $2.00).

    combined   both clusters' raw rows; pipelines run per cluster (`for_cluster`), one after the other
    alone[c]   only cluster c's raw rows; pipelines run for c

tests/conftest.py imports the fixture (like `demo_run`): a test just names `cluster_pair`.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

CONFIG = """\
[billing.rates]
default = 2.0

[[clusters]]
name = "simcluster"

[[clusters]]
name = "b"
[clusters.billing.rates]
default = 3.0
"""
NAMES = ("simcluster", "b")


@dataclass
class ClusterPair:
    config_path: Path
    combined: Path
    alone: dict[str, Path]
    now: datetime
    month: str

    def config(self):
        from slurmscope.config import load_config

        return load_config(self.config_path, env={})


def raw_tables(con) -> list[str]:
    """Every table the collectors write (a `cluster` column, not a mart, not the pipelines' own record)."""
    rows = con.execute(
        "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t"
        " USING (table_schema, table_name) WHERE c.table_schema = 'main' AND t.table_type = 'BASE TABLE'"
        " AND c.column_name = 'cluster' AND c.table_name NOT LIKE 'mart_%' AND c.table_name <> 'pipeline_runs'"
        " ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def add_cluster_b(con) -> None:
    """Copy the demo's raw rows as cluster `b`, changed as the module docstring says."""
    for table in raw_tables(con):
        new = "'b' AS cluster" + (
            ", nextval('collector_run_id') AS run_id" if table == "collector_runs" else ""
        )
        con.execute(
            f"INSERT INTO {table} SELECT * REPLACE ({new}) FROM {table} WHERE cluster = 'simcluster'"  # noqa: S608 - table names from information_schema
        )
    con.execute("DELETE FROM jobs WHERE cluster = 'b' AND job_id_raw % 3 = 0")
    con.execute("DELETE FROM job_steps WHERE cluster = 'b' AND job_id_raw % 3 = 0")
    con.execute("UPDATE jobs SET account = account || '-b' WHERE cluster = 'b'")
    first = con.execute(
        "SELECT min(node) FROM node_states WHERE cluster = 'b' AND gpus_total > 0"
    ).fetchone()[0]
    con.execute("UPDATE node_states SET state = 'DOWN' WHERE cluster = 'b' AND node = ?", [first])


def marts(con) -> list[str]:
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        " AND table_type = 'BASE TABLE' AND table_name LIKE 'mart_%' ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def keep_only(con, cluster: str) -> None:
    for table in raw_tables(con):
        con.execute(f"DELETE FROM {table} WHERE cluster <> ?", [cluster])  # noqa: S608 - table names from information_schema
    for table in marts(con):
        con.execute(f"DELETE FROM {table}")  # noqa: S608 - table names from the database
    con.execute("DELETE FROM pipeline_runs")


def build(demo_db: Path, base: Path, now: datetime) -> ClusterPair:
    from slurmscope.pipelines.runner import run_pipelines

    from slurmscope.config import load_config
    from slurmscope.db import connect

    config_path = base / "slurmscope.toml"
    config_path.write_text(CONFIG)
    cfg = load_config(config_path, env={})
    combined = base / "combined.duckdb"
    shutil.copyfile(demo_db, combined)
    con = connect(combined)
    try:
        keep_only(con, "simcluster")  # the demo's own marts go: every run below starts from raw rows
        add_cluster_b(con)
    finally:
        con.close()
    alone = {}
    for name in NAMES:
        alone[name] = base / f"{name}.duckdb"
        shutil.copyfile(combined, alone[name])
        con = connect(alone[name])
        try:
            keep_only(con, name)
            con.execute("CHECKPOINT")
            run_pipelines(con, cfg.for_cluster(name), full=True, now=now)
        finally:
            con.close()
    con = connect(combined)
    try:
        for name in NAMES:
            run_pipelines(con, cfg.for_cluster(name), full=True, now=now)
    finally:
        con.close()
    return ClusterPair(config_path, combined, alone, now, now.strftime("%Y-%m"))


@pytest.fixture(scope="session")
def cluster_pair(demo_run, tmp_path_factory) -> ClusterPair:
    end = datetime.fromisoformat(demo_run.result.summary["end"]).replace(tzinfo=UTC)
    return build(demo_run.db_path, tmp_path_factory.mktemp("pair"), end)
