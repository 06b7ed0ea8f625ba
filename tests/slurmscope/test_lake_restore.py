"""`slurmscope restore`: the lake holds every input of every pipeline, so a worker database filled from it
alone rebuilds the marts the source database has; a damaged lake or a database that already holds the
cluster is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from datetime import UTC

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from slurmscope.pipelines.runner import PIPELINES, run_pipelines

from slurmscope import lake
from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.db import connect

CLUSTER = "simcluster"
FILLED = {
    "jobs",
    "job_steps",
    "node_states",
    "shares",
    "gpu_samples",
    "gpu_jobs",
    "gpu_inventory",
    "reservations",
}
"""Raw tables the demo fills: restored empty would pass the comparison without restoring anything."""


def _config():
    return load_config(None, env={}).with_overrides(cluster={"name": CLUSTER})


@pytest.fixture(scope="module")
def rebuilt(demo_run, demo_lake, tmp_path_factory):
    """(source, worker): a copy of the demo database and a database restored from its lake, the marts of
    both rebuilt in full as of the demo's last pipeline run."""
    base = tmp_path_factory.mktemp("rebuilt")
    shutil.copy(demo_run.db_path, base / "source.duckdb")
    source = connect(base / "source.duckdb")
    now = source.execute("SELECT max(run_at) FROM pipeline_runs").fetchone()[0].astimezone(UTC)
    worker = connect(base / "worker.duckdb")
    restored = lake.restore(worker, str(demo_lake))
    for con in (source, worker):
        assert all(rows >= 0 for rows in run_pipelines(con, _config(), full=True, now=now).values())
    yield source, worker, restored
    source.close()
    worker.close()


def _rows(con, table: str, skip: set[str]) -> list[tuple]:
    cols = [c for c, _ in lake.columns(con, table) if c not in skip]
    sql = f'SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{table}"'
    return sorted(con.execute(sql).fetchall(), key=repr)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def test_the_lake_holds_every_table_a_pipeline_reads(tmp_path):
    """A pipeline input missing from RAW_TABLES would be missing from every worker database."""
    con = connect(tmp_path / "schema.duckdb")
    base = {
        t
        for (t,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        ).fetchall()
    }
    con.close()
    macros = {
        "gpu_minutes": {"gpu_samples", "gpu_samples_hourly"},
        "gpu_hours": {"gpu_samples", "gpu_samples_hourly"},
    }
    read: set[str] = set()
    for module in PIPELINES:
        for sql in module.INPUTS.values():
            for name in re.findall(r"\b(?:FROM|JOIN)\s+([a-z_]+)", sql, flags=re.IGNORECASE):
                read |= macros.get(name, {name} & base)
    inputs = {t for t in read if not t.startswith("mart_")}
    assert {
        "jobs",
        "job_steps",
        "gpu_inventory",
        "reservations",
        "slurm_config",
        "slurm_partitions",
    } <= inputs
    assert inputs <= set(lake.RAW_TABLES)


def test_every_raw_table_is_restored_row_for_row(demo_run, rebuilt):
    _, worker, restored = rebuilt
    source = demo_run.connect()
    try:
        for table in lake.RAW_TABLES:
            if table == "gpu_samples_hourly":
                continue  # the demo's minutes are all kept: no hour comes from the hourly table
            want = _rows(source, table, set())
            assert want or table not in FILLED, table
            assert _rows(worker, table, set()) == want, table
        assert worker.execute("SELECT count(*) FROM gpu_samples_hourly").fetchone()[0] == 0
        assert worker.execute("SELECT count(*) FROM retention_state").fetchone()[0] == 0
    finally:
        source.close()
    assert {r.partition.table for r in restored} <= set(lake.RAW_TABLES)


def test_marts_rebuilt_from_the_lake_equal_the_source_databases(rebuilt):
    source, worker, _ = rebuilt
    differ = []
    for table in lake.MART_TABLES:
        skip = {c for c, _ in lake.columns(source, table) if c in ("computed_at", "updated_at", "run_at")}
        a, b = _rows(source, table, skip), _rows(worker, table, skip)
        if len(a) != len(b) or not all(
            all(_same(x, y) for x, y in zip(ra, rb, strict=True)) for ra, rb in zip(a, b, strict=True)
        ):
            differ.append(f"{table}: {len(a)} rows in the source, {len(b)} rebuilt")
    assert not differ
    assert sum(_rows(source, t, set()) != [] for t in lake.MART_TABLES) >= 20  # the demo fills most marts


def _count(con, table: str) -> int:
    return con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


def test_a_damaged_partition_is_refused_before_anything_is_written(demo_lake, tmp_path):
    damaged = tmp_path / "lake"
    shutil.copytree(demo_lake, damaged)
    victim = sorted((damaged / "job_steps").rglob("data.parquet"))[-1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    con = connect(tmp_path / "worker.duckdb")
    with pytest.raises(lake.RestoreError, match=r"nothing restored.*job_steps/.*checksum differs"):
        lake.restore(con, str(damaged))
    assert all(_count(con, t) == 0 for t in lake.RAW_TABLES)
    con.close()


def test_a_cluster_already_in_the_database_or_not_in_the_lake_is_refused(demo_lake, tmp_path):
    con = connect(tmp_path / "worker.duckdb")
    with pytest.raises(
        lake.RestoreError, match=f"cluster\\(s\\) nope not in the lake .*; it holds {CLUSTER}$"
    ):
        lake.restore(con, str(demo_lake), clusters=["nope"])
    lake.restore(con, str(demo_lake), clusters=[CLUSTER])
    counts = {t: _count(con, t) for t in lake.RAW_TABLES}
    with pytest.raises(lake.RestoreError, match=f"already holds jobs rows of cluster {CLUSTER}"):
        lake.restore(con, str(demo_lake))
    assert {t: _count(con, t) for t in lake.RAW_TABLES} == counts  # nothing loaded twice
    with pytest.raises(lake.RestoreError, match="no such lake directory"):
        lake.restore(con, str(tmp_path / "missing"))
    con.close()


def test_cli_restores_then_pipelines_rebuild(demo_lake, tmp_path):
    db = tmp_path / "worker.duckdb"
    runner = CliRunner()
    res = runner.invoke(main, ["--db", str(db), "--cluster", CLUSTER, "restore", "--from", str(demo_lake)])
    assert res.exit_code == 0, res.output
    lines = [line.split("\t") for line in res.stdout.splitlines()]
    con = connect(db, read_only=True)
    jobs = _count(con, "jobs")
    con.close()
    assert sum(int(rows) for table, _, _, rows in lines if table == "jobs") == jobs > 0
    assert f"row(s) from {demo_lake}" in res.stderr
    again = runner.invoke(main, ["--db", str(db), "--cluster", CLUSTER, "restore", "--from", str(demo_lake)])
    assert again.exit_code == 1 and "already holds" in again.output and "Traceback" not in again.output
    rebuilt = runner.invoke(main, ["--db", str(db), "--cluster", CLUSTER, "pipelines", "run", "--full"])
    assert rebuilt.exit_code == 0, rebuilt.output
    # the worker's export back into (a copy of) the lake rewrites no raw partition: same rows, same bytes
    back = tmp_path / "lake"
    shutil.copytree(demo_lake, back)
    exported = runner.invoke(main, ["--db", str(db), "--cluster", CLUSTER, "export", "--out", str(back)])
    assert exported.exit_code == 0, exported.output
    status = {tuple(line.split("\t")[:3]): line.split("\t")[4] for line in exported.stdout.splitlines()}
    raw = {k: v for k, v in status.items() if k[0] in lake.RAW_TABLES}
    assert raw and set(raw.values()) == {"unchanged"}
    assert lake.verify(str(back)) == []


def test_a_file_with_a_column_the_table_lacks_is_refused_and_nothing_stays(demo_lake, tmp_path):
    """A file whose manifest entry was rewritten to match it (checksum right) still cannot add a column."""
    odd = tmp_path / "lake"
    shutil.copytree(demo_lake, odd)
    manifest = json.loads((odd / lake.MANIFEST).read_text())
    entry = next(p for p in manifest["partitions"] if p["table"] == "job_steps")
    path = odd / entry["path"]
    table = pq.read_table(path)
    pq.write_table(table.append_column("zz", pa.array([1] * table.num_rows)), path)
    entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (odd / lake.MANIFEST).write_text(json.dumps(manifest))
    con = connect(tmp_path / "worker.duckdb")
    with pytest.raises(lake.RestoreError, match=r"job_steps/.*: column\(s\) zz are not columns of job_steps"):
        lake.restore(con, str(odd))
    assert all(_count(con, t) == 0 for t in lake.RAW_TABLES)  # the jobs loaded before it were removed again
    con.close()
