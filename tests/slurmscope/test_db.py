from __future__ import annotations

import dataclasses
import gc
import gzip
import importlib
import inspect
import pkgutil
import re
import shutil
from datetime import date, datetime, timezone
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from slurmscope.collectors.base import Parsed, RunRecord, TableSpec, load, quarantine_frame, upsert

from slurmscope import db
from slurmscope.db import applied_versions, connect, definitions, migrate, migrations, transaction
from tests.paths import FIXTURES

BANDED = FIXTURES / "db"
SCHEMA_SQL = """
SELECT table_name, table_type, column_name, ordinal_position, data_type, is_nullable, column_default
FROM information_schema.tables JOIN information_schema.columns USING (table_catalog, table_schema, table_name)
WHERE table_catalog = current_database() ORDER BY ALL
"""


def test_fresh_database_has_every_migration_recorded(con):
    assert applied_versions(con) == [m.version for m in migrations()]
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for t in (
        "jobs",
        "job_steps",
        "node_states",
        "shares",
        "sched_stats",
        "pending_jobs",
        "gpu_samples",
        "gpu_events",
        "node_events",
        "reservations",
        "collector_runs",
        "quarantine",
        "watermarks",
    ):
        assert t in tables


def test_database_made_by_migration_1_upgrades_in_place(db_path):
    c = duckdb.connect(str(db_path))
    applied = migrate(c, upto=1)
    assert applied == [1]
    c.execute(
        "INSERT INTO watermarks (cluster, collector, position) VALUES ('c', 'sacct', TIMESTAMPTZ '2024-01-01 00:00:00+00')"
    )
    c.close()
    c = connect(db_path)
    assert applied_versions(c) == [m.version for m in migrations()]
    assert c.execute("SELECT count(*) FROM watermarks").fetchone()[0] == 1
    assert migrate(c) == []
    c.close()


def test_node_states_of_0016_upgrade_to_0017_with_rows_kept_and_the_host_column_added(db_path):
    """Rows stored before 0017 keep their node and have no recorded host; loads after it store both."""
    from slurmscope.collectors import sinfo

    c = duckdb.connect(str(db_path))
    migrate(c, upto=16)
    c.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state)'
        " VALUES ('c', TIMESTAMPTZ '2024-05-01 12:00:00+00', 'gpu01', 'gpu', 'IDLE')"
    )
    c.close()
    con = connect(db_path)
    try:
        assert applied_versions(con) == [m.version for m in migrations()]
        assert con.execute("SELECT node, node_host, state FROM node_states").fetchall() == [
            ("gpu01", None, "IDLE")
        ]
        line = "\x1f".join(
            ["gpu02", "vm", "gpu*", "down", "0/0/16/16", "64000", "0", "gpu:h100:8", "gpu:h100:0"]
        )
        parsed = sinfo.parse(
            (line + "\x1fh100\x1froot(0)\x1f2024-05-01T11:59:00\x1fXid 79\n").encode(),
            cluster="c",
            snapshot_time=datetime(2024, 5, 1, 12, 5, tzinfo=timezone.utc),
            tz=timezone.utc,
        )
        load(con, parsed, sinfo.TABLES, RunRecord(cluster="c", collector="sinfo", source="live"))
        assert con.execute(
            "SELECT node, node_host, state FROM node_states ORDER BY snapshot_time"
        ).fetchall() == [
            ("gpu01", None, "IDLE"),
            ("gpu02", "vm", "DOWN"),
        ]
    finally:
        con.close()


def _banded(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.duckdb"
    with gzip.open(BANDED / f"{name}.duckdb.gz", "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def test_mig_0020_applied_after_0022_and_0024_gives_the_fresh_schema_with_rows_kept(db_path, monkeypatch):
    """A database main made (0019, 0022 and 0024 applied, 0020 not: the MIG branch merged later) gets 0020 on
    its next open. 0020 and 0022 both alter mart_cost_efficiency_daily (a column added; energy_cost_usd made
    nullable): either order must give the schema a fresh database gets in numeric order."""
    fresh = connect(":memory:")
    want = fresh.execute(SCHEMA_SQL).fetchall()
    fresh.close()
    every = db.migrations
    monkeypatch.setattr(db, "migrations", lambda upto=None: [m for m in every(upto) if m.version != 20])
    c = duckdb.connect(str(db_path))
    assert 20 not in migrate(c, upto=24) and {19, 22, 24} <= set(applied_versions(c))
    c.execute(
        "INSERT INTO mart_cost_efficiency_daily (cluster, day, account, gpu_seconds, cost_usd, sampled_gpu_seconds,"
        " sampled_cost_usd, idle_gpu_seconds, idle_cost_usd, useful_gpu_seconds, energy_joules, energy_kwh,"
        " energy_cost_usd, gpm_gpu_seconds, activity_source)"
        " VALUES ('c', DATE '2026-11-01', 'a', 3600, 7, 3600, 7, 0, 0, 1800, 0, 0, NULL, 3600, 'gpm')"
    )
    c.close()
    monkeypatch.setattr(db, "migrations", every)
    c = connect(db_path)
    assert applied_versions(c) == [m.version for m in migrations()]
    assert c.execute(SCHEMA_SQL).fetchall() == want
    # the row is kept, its slices 0 (before 0020 no mart counted any), its NULL energy cost still NULL
    assert c.execute(
        "SELECT gpu_seconds, energy_cost_usd, gpm_gpu_seconds, activity_source, mig_gpu_seconds"
        " FROM mart_cost_efficiency_daily"
    ).fetchall() == [(3600.0, None, 3600.0, "gpm", 0.0)]
    c.close()


@pytest.mark.parametrize("name", ["banded-0042", "banded-0022"])
def test_database_made_by_the_banded_numbering_upgrades_in_place(tmp_path, name):
    """0001, 0005, 0010, ..., 0042 as recorded by the last release with them: each becomes its version in
    the plain sequence, the rest applies, and the schema ends as a fresh database's, rows kept."""
    path = _banded(tmp_path, name)
    fresh = connect(tmp_path / "fresh.duckdb")
    expected = fresh.execute(SCHEMA_SQL).fetchall()
    fresh.close()
    con = connect(path)
    try:
        assert con.execute("SELECT version, name FROM schema_migrations ORDER BY 1").fetchall() == [
            (m.version, m.name) for m in migrations()
        ]
        assert con.execute(SCHEMA_SQL).fetchall() == expected
        assert con.execute("SELECT count(*) FROM watermarks").fetchone()[0] == 1
        assert con.execute("SELECT * FROM metric_collector_success('c', now())").fetchall() == []
        if name == "banded-0042":
            assert con.execute("SELECT week, jobs, gpu_hours FROM mart_job_outcomes_weekly").fetchall() == [
                (date(2025, 1, 6), 2, 3.5)
            ]
        assert migrate(con) == []
    finally:
        con.close()


def _objects(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], str | None]:
    return {k: v for k, v in db._defined_objects(con).items() if (v or "").startswith(db.CHECKSUM)}


def test_every_view_and_metric_macro_is_created_with_its_file_checksum(con):
    shipped = {obj: d.checksum for d in definitions() for obj in d.objects}
    assert _objects(con) == shipped
    assert ("VIEW", "mart_job_outcomes_weekly") in shipped
    assert ("MACRO TABLE", "metric_node_down") in shipped


def test_a_changed_definition_is_recreated_and_a_dropped_one_removed(con, monkeypatch):
    shipped = definitions()
    assert db.sync_definitions(con) == []
    node_down = next(d for d in shipped if d.name == "metrics/node_down.sql")
    changed = dataclasses.replace(node_down, sql=node_down.sql.replace("ELSE 0 END", "ELSE 7 END"))
    kept = tuple(
        changed if d is node_down else d for d in shipped if d.name != "views/mart_job_outcomes_weekly.sql"
    )
    monkeypatch.setattr(db, "definitions", lambda: kept)
    assert db.sync_definitions(con) == ["metrics/node_down.sql"]
    objects = _objects(con)
    assert ("VIEW", "mart_job_outcomes_weekly") not in objects
    assert objects[("MACRO TABLE", "metric_node_down")] == changed.checksum
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state)'
        " VALUES ('c', TIMESTAMPTZ '2025-01-01 00:00:00+00', 'n1', 'gpu', 'IDLE')"
    )
    assert con.execute("SELECT node, value FROM metric_node_down('c', now())").fetchall() == [("n1", 7)]
    assert db.sync_definitions(con) == []


def test_read_only_connection_refuses_writes(db_path):
    connect(db_path).close()
    ro = connect(db_path, read_only=True)
    with pytest.raises(duckdb.Error):
        ro.execute("INSERT INTO watermarks (cluster, collector, position) VALUES ('c', 'x', now())")
    ro.close()


def test_read_only_open_of_missing_database_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        connect(tmp_path / "nope.duckdb", read_only=True)


def test_transaction_rolls_back_on_error(con):
    with pytest.raises(RuntimeError):
        with transaction(con):
            con.execute("INSERT INTO watermarks (cluster, collector, position) VALUES ('c', 'x', now())")
            raise RuntimeError("boom")
    assert con.execute("SELECT count(*) FROM watermarks").fetchone()[0] == 0


def test_upsert_replaces_by_natural_key(con):
    spec = TableSpec("watermarks", ("cluster", "collector"))
    ts = pl.datetime(2024, 1, 1, time_zone="UTC")
    df = pl.DataFrame({"cluster": ["c", "c"], "collector": ["a", "b"]}).with_columns(position=ts)
    with transaction(con):
        upsert(con, spec, df)
    df2 = pl.DataFrame({"cluster": ["c"], "collector": ["a"]}).with_columns(
        position=pl.datetime(2025, 1, 1, time_zone="UTC")
    )
    with transaction(con):
        upsert(con, spec, df2)
    rows = con.execute("SELECT collector, year(position) FROM watermarks ORDER BY 1").fetchall()
    assert rows == [("a", 2025), ("b", 2024)]


def test_upsert_lets_go_of_each_frame_inside_a_long_transaction(con):
    """A dump is loaded slice by slice in one transaction, and DuckDB keeps whatever is registered in an open
    transaction until it ends: a registered slice would be held with every other (1M sacct lines: 0.5 GiB
    more). Frames whose column lives in pyarrow's pool (Polars reads it without a copy) show what is held."""
    con.execute("CREATE TABLE blobs (k BIGINT PRIMARY KEY)")
    spec = TableSpec("blobs", ("k",))
    n = 1_000_000
    frame_bytes = 8 * n
    base = pa.total_allocated_bytes()
    with transaction(con):
        for i in range(6):
            df = pl.from_arrow(pa.table({"k": pa.array(range(i * n, (i + 1) * n), pa.int64())}))
            upsert(con, spec, df)
            del df
            gc.collect()
        held = pa.total_allocated_bytes() - base
    assert con.execute("SELECT count(*), max(k) FROM blobs").fetchone() == (6 * n, 6 * n - 1)
    # the last frame may still be held until the next statement, never all six
    assert held < 2 * frame_bytes, f"{held / frame_bytes:.1f} frames still held inside the transaction"


def test_upsert_keeps_the_last_row_of_a_key_repeated_within_one_load(con):
    spec = TableSpec("watermarks", ("cluster", "collector"))
    df = pl.DataFrame(
        {
            "cluster": ["c", "c", "c"],
            "collector": ["a", "b", "a"],
            "position": ["2023-01-01", "2024-01-01", "2025-01-01"],
        }
    )
    df = df.with_columns(pl.col("position").str.to_datetime("%Y-%m-%d", time_zone="UTC"))
    with transaction(con):
        assert upsert(con, spec, df) == 2
    rows = con.execute("SELECT collector, year(position) FROM watermarks ORDER BY 1").fetchall()
    assert rows == [("a", 2025), ("b", 2024)]


def test_load_is_one_transaction_with_its_run_record(con):
    bad = Parsed(
        tables={"watermarks": pl.DataFrame({"collector": ["a"], "position": [None]})},
        quarantine=quarantine_frame(),
    )
    run = RunRecord(cluster="c", collector="t", source="unit")
    with pytest.raises(duckdb.Error):
        load(con, bad, {"watermarks": TableSpec("watermarks", ("cluster", "collector"))}, run)
    assert con.execute("SELECT count(*) FROM collector_runs").fetchone()[0] == 0


def test_quarantine_reingest_is_a_noop(con):
    q = quarantine_frame([{"line_no": 3, "raw_text": "x|y", "raw_bytes": None, "reason": "bad field count"}])
    for _ in range(2):
        load(
            con,
            Parsed(quarantine=q),
            {},
            RunRecord(cluster="c", collector="sacct", source="sacct:f"),
            content=b"same input",
        )
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM collector_runs").fetchone()[0] == 2


# ---- Polars schema dicts that restate a table ----------------------------------------------------------

# DuckDB column type -> the Polars dtype a frame loaded into it carries. DECIMAL(18,2) (invoiced amounts)
# takes a Float64 column: DuckDB rounds it on insert.
DUCKDB_POLARS = {
    "VARCHAR": pl.String(),
    "BIGINT": pl.Int64(),
    "INTEGER": pl.Int32(),
    "DOUBLE": pl.Float64(),
    "DECIMAL(18,2)": pl.Float64(),
    "BOOLEAN": pl.Boolean(),
    "DATE": pl.Date(),
    "TIMESTAMP WITH TIME ZONE": pl.Datetime("us", "UTC"),
    "BLOB": pl.Binary(),
}
MART = ("cluster",)  # the pipeline runner adds the cluster column to every mart frame
# constant -> (table, columns its writer adds before the load)
SCHEMA_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "collectors.base.QUARANTINE_SCHEMA": (
        "quarantine",
        ("cluster", "source", "content_sha256", "ingested_at"),
    ),
    "collectors.slurm_config.SLURM_CONFIG_SCHEMA": ("slurm_config", ()),
    "collectors.events.NODE_EVENTS_SCHEMA": ("node_events", ()),
    "collectors.nvml.SCHEMAS['gpu_samples']": ("gpu_samples", MART),
    "collectors.nvml.SCHEMAS['gpu_events']": ("gpu_events", MART),
    "collectors.nvml.SCHEMAS['gpu_jobs']": ("gpu_jobs", MART),
    "collectors.nvml.SCHEMAS['gpu_inventory']": ("gpu_inventory", MART),
    "collectors.nvml.SCHEMAS['gpu_nvlink_errors']": ("gpu_nvlink_errors", MART),
    "collectors.partitions.PARTITIONS_SCHEMA": ("slurm_partitions", ()),
    "collectors.ping.CONTROLLER_PINGS_SCHEMA": ("controller_pings", ()),
    "collectors.reservations.RESERVATIONS_SCHEMA": ("reservations", ()),
    "collectors.sdiag.SCHED_STATS_SCHEMA": ("sched_stats", ()),
    "collectors.sinfo.NODE_STATES_SCHEMA": ("node_states", ()),
    "collectors.sinfo.NODE_GROUPS_SCHEMA": ("node_groups", ()),
    "collectors.squeue.PENDING_JOBS_SCHEMA": ("pending_jobs", ()),
    "collectors.sshare.SHARES_SCHEMA": ("shares", ()),
    "pipelines.backfill.DAILY_SCHEMA": ("mart_backfill_daily", MART),
    "pipelines.budgets.PERIOD_SCHEMA": ("mart_budget_period", MART),
    "pipelines.backfill.WAIT_SCHEMA": ("mart_wait_times", MART),
    "pipelines.backfill.DELTA_SCHEMA": ("mart_sched_deltas", MART),
    "pipelines.backfill.OCC_SCHEMA": ("mart_occupancy", MART),
    "pipelines.cost.DAILY_SCHEMA": ("mart_cost_daily", MART),
    "pipelines.cost.MONTHLY_SCHEMA": ("mart_cost_monthly", MART),
    "pipelines.cost.CAPACITY_SCHEMA": ("mart_capacity_daily", MART),
    "pipelines.cost.EFFICIENCY_SCHEMA": ("mart_cost_efficiency_daily", MART),
    "pipelines.cost.COUNTER_SCHEMA": ("mart_usage_counters", MART),
    "pipelines.cost.UNALLOCATED_SCHEMA": ("mart_cost_unallocated_monthly", MART),
    "pipelines.cost.RESERVATION_SCHEMA": ("mart_cost_reservation_daily", MART),
    "pipelines.cost.BUDGET_SCHEMA": ("mart_budget_monthly", MART),
    "pipelines.cost.RATE_SCHEMA": ("mart_cost_rates_daily", MART),
    "pipelines.cost.RECONCILIATION_DAILY_SCHEMA": ("mart_cost_reconciliation_daily", MART),
    "pipelines.cost.RECONCILIATION_MONTHLY_SCHEMA": ("mart_cost_reconciliation_monthly", MART),
    "pipelines.cost.WASTE_SCHEMA": ("mart_cost_waste_daily", MART),
    "pipelines.drift.SCHEMA": ("mart_drift", ()),
    "pipelines.efficiency.JOB_SCHEMA": ("mart_job_efficiency", ()),
    "pipelines.efficiency.IDLE_SCHEMA": ("mart_idle_gpus_daily", ()),
    "pipelines.efficiency.MIG_SCHEMA": ("mart_mig_efficiency", ()),
    "pipelines.cpu_mem_efficiency.SCHEMA": ("mart_job_cpu_mem_efficiency", MART),
    "pipelines.fairshare.schema.FAIRSHARE_SCHEMA": ("mart_fairshare", ()),
    "pipelines.fairshare.schema.DAILY_SCHEMA": ("mart_fairshare_daily", ()),
    "pipelines.fairshare.schema.SUBMITS_SCHEMA": ("mart_fairshare_submits", ()),
    "pipelines.fairshare.schema.DRIFT_SCHEMA": ("mart_fairshare_drift", ()),
    "pipelines.health.NODE_SCHEMA": ("mart_node_health", MART),
    "pipelines.health.GPU_SCHEMA": ("mart_gpu_health", MART),
    "pipelines.reliability.OUTCOMES_SCHEMA": ("mart_job_outcomes_daily", MART),
    "pipelines.reliability.NODE_OUTCOMES_SCHEMA": ("mart_job_outcomes_node_daily", MART),
    "pipelines.reliability.REQUEUE_SCHEMA": ("mart_requeues_daily", MART),
    "pipelines.reliability.NODE_SCHEMA": ("mart_node_reliability", MART),
    "pipelines.reliability.FAULT_SCHEMA": ("mart_fault_impact", MART),
    "pipelines.reliability.GOODPUT_SCHEMA": ("mart_goodput", MART),
    "pipelines.reliability.INCIDENT_SCHEMA": ("mart_node_incidents", MART),
}
# Built from the parser's field maps in sorted order; sched_stats loads by column name.
ORDER_FREE = {"collectors.sdiag.SCHED_STATS_SCHEMA"}
# A reader's schema: the columns it selects from a table, not the whole table.
READS: dict[str, str] = {"pipelines.efficiency.GPU_JOBS_SCHEMA": "gpu_jobs"}


def _is_dtype(v: object) -> bool:
    return isinstance(v, pl.DataType) or (isinstance(v, type) and issubclass(v, pl.DataType))


def _schema_dicts() -> dict[str, dict[str, object]]:
    """Every module-level dict of Polars dtypes (or dict of them, per table) in collectors/ and pipelines/,
    named once, by the module that assigns it (not a module or package importing it)."""
    homes: dict[int, tuple[int, str, str, dict]] = {}
    for pkg in ("collectors", "pipelines"):
        root = importlib.import_module(f"slurmscope.{pkg}")
        for info in pkgutil.walk_packages(root.__path__, f"slurmscope.{pkg}."):
            mod = importlib.import_module(info.name)
            short = info.name.removeprefix("slurmscope.")
            source = inspect.getsource(mod)
            for name, value in vars(mod).items():
                if isinstance(value, dict) and value:
                    assigned = int(bool(re.search(rf"^{name}\s*[:=]", source, re.M)))
                    if id(value) not in homes or homes[id(value)][0] < assigned:
                        homes[id(value)] = (assigned, short, name, value)
    found = {}
    for _, short, name, value in homes.values():
        if all(_is_dtype(v) for v in value.values()):
            found[f"{short}.{name}"] = value
        elif all(isinstance(v, dict) and v and all(map(_is_dtype, v.values())) for v in value.values()):
            found.update({f"{short}.{name}[{k!r}]": v for k, v in value.items()})
    return found


def test_every_schema_dict_is_checked_against_its_table():
    assert sorted(_schema_dicts()) == sorted({**SCHEMA_TABLES, **READS})


@pytest.fixture(scope="module")
def migrated():
    c = connect(":memory:")
    yield c
    c.close()


@pytest.mark.parametrize("constant", sorted(SCHEMA_TABLES))
def test_schema_dict_matches_its_table(migrated, constant):
    table, added = SCHEMA_TABLES[constant]
    columns = migrated.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?"
        " ORDER BY ordinal_position",
        [table],
    ).fetchall()
    assert columns, f"{table} is not in the migrated schema"
    schema = _schema_dicts()[constant]
    restated = [c for c, _ in columns if c not in added]
    if constant in ORDER_FREE:
        assert sorted(schema) == sorted(restated)
    else:
        assert list(schema) == restated
    types = dict(columns)
    for col, dtype in schema.items():
        assert DUCKDB_POLARS[types[col]] == dtype, (col, types[col], dtype)


@pytest.mark.parametrize("constant", sorted(READS))
def test_reader_schema_names_columns_of_its_table_with_their_types(migrated, constant):
    types = dict(
        migrated.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
            [READS[constant]],
        ).fetchall()
    )
    schema = _schema_dicts()[constant]
    assert set(schema) <= set(types), sorted(set(schema) - set(types))
    for col, dtype in schema.items():
        assert DUCKDB_POLARS[types[col]] == dtype, (col, types[col], dtype)


def test_a_writer_connection_is_ready_for_the_relation_api(tmp_path):
    """connect() must leave no unread result behind, or the caller's first con.sql() fails
    (seen in the live fault test once the definition sync ran on every writer connect)."""
    connect(tmp_path / "db.duckdb").close()
    con = connect(tmp_path / "db.duckdb")
    try:
        assert con.sql("SELECT count(*) FROM schema_migrations").to_arrow_table().num_rows == 1
    finally:
        con.close()


def test_setting_is_restored_after_the_block_even_when_it_fails():
    con = duckdb.connect()
    con.execute("SET threads = 2")
    with db.setting(con, "threads", 1):
        assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1
    with pytest.raises(duckdb.Error), db.setting(con, "write_buffer_row_group_count", 1):
        con.execute("SELECT * FROM no_such_table")
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 2
    assert con.execute("SELECT current_setting('write_buffer_row_group_count')").fetchone()[0] == 5
    with pytest.raises(ValueError, match="not a DuckDB setting name"), db.setting(con, "threads = 1; --", 1):
        pass
