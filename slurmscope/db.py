"""DuckDB connection, migrations and transactions.

The schema lives in sql/NNNN_name.sql; this module only applies those files in order and records each
one in `schema_migrations`, inside the same transaction as the DDL, so a crash mid-migration leaves the
database at the previous version rather than half-upgraded.

Views (sql/views/*.sql) and the metric queries (sql/metrics/*.sql, table macros) hold no data, so they are
not migrations: after the migrations, every definition whose file changed is re-created, all in one
transaction. Each object carries its file's checksum as its DuckDB comment, which is how an unchanged one
is skipped and one no longer shipped is found and dropped; the checksum of all the files together is the
comment of `schema_migrations`, so that opening an up-to-date database costs one catalog lookup (listing
the macros, duckdb_functions(), takes ~70 ms).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import duckdb

from slurmscope import rollup

MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
DEFINITION_FOLDERS = ("views", "metrics")  # in creation order: metric queries may read views
DEFINED = re.compile(r"^CREATE OR REPLACE (VIEW|MACRO) (\w+)(?:\([^)]*\))? AS\s+(TABLE\b)?", re.MULTILINE)
CHECKSUM = "slurmscope sha256:"

# Migrations were first numbered in bands per team (0001, 0005, 0010, ..., 0042). Databases migrated then
# record these names; they take the plain sequence's versions in place. The DDL is the same, except that
# 0041's two views now live in sql/views (CREATE OR REPLACE there takes over the existing ones).
BANDED_NAMES = {
    "0005_node_groups.sql": 2,
    "0010_marts_cost.sql": 3,
    "0011_marts_reliability.sql": 4,
    "0012_marts_backfill.sql": 5,
    "0020_marts_fairshare.sql": 6,
    "0021_marts_efficiency.sql": 7,
    "0022_marts_drift.sql": 8,
    "0030_gpu_jobs_mig_key.sql": 9,
    "0040_health.sql": 10,
    "0041_cost_reliability.sql": 11,
    "0042_fairshare_daily.sql": 12,
}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(upto: int | None = None) -> list[Migration]:
    """All migrations shipped in slurmscope.sql, ordered by version."""
    found = []
    for entry in resources.files("slurmscope.sql").iterdir():
        match = MIGRATION_NAME.match(entry.name)
        if match:
            version = int(match.group(1))
            if upto is None or version <= upto:
                found.append(Migration(version, entry.name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions in slurmscope.sql: {versions}")
    return found


@dataclass(frozen=True)
class Definition:
    """One file of sql/views or sql/metrics and the objects (kind, name) its statements create."""

    name: str
    sql: str
    objects: tuple[tuple[str, str], ...]

    @property
    def checksum(self) -> str:
        return CHECKSUM + hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


@cache
def definitions() -> tuple[Definition, ...]:
    """Every view and metric-query file shipped in slurmscope.sql, in creation order (read once per process)."""
    found = []
    for folder in DEFINITION_FOLDERS:
        entries = sorted(
            (
                e
                for e in resources.files("slurmscope.sql").joinpath(folder).iterdir()
                if e.name.endswith(".sql")
            ),
            key=lambda e: e.name,
        )
        for entry in entries:
            sql = entry.read_text(encoding="utf-8")
            objects = tuple(
                ("MACRO TABLE" if table else kind, name) for kind, name, table in DEFINED.findall(sql)
            )
            if not objects:
                raise RuntimeError(f"slurmscope.sql/{folder}/{entry.name} creates no view or macro")
            found.append(Definition(f"{folder}/{entry.name}", sql, objects))
    return tuple(found)


def _defined_objects(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], str | None]:
    """(kind, name) -> comment of the views and macros in the main schema."""
    rows = con.execute(
        "SELECT 'VIEW', view_name, comment FROM duckdb_views()"
        " WHERE NOT internal AND NOT temporary AND schema_name = 'main' AND database_name = current_database()"
        " UNION ALL SELECT CASE function_type WHEN 'table_macro' THEN 'MACRO TABLE' ELSE 'MACRO' END,"
        " function_name, comment FROM duckdb_functions()"
        " WHERE function_type IN ('macro', 'table_macro') AND NOT internal AND schema_name = 'main'"
        " AND database_name = current_database()"
    ).fetchall()
    return {(kind, name): comment for kind, name, comment in rows}


def sync_definitions(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Re-create the views and macros whose file changed, drop those no longer shipped; return the files run."""
    shipped = definitions()
    total = CHECKSUM + hashlib.sha256("".join(d.checksum for d in shipped).encode("ascii")).hexdigest()
    # fetchall, not fetchone: a result left unread would make the caller's next con.sql() fail
    recorded = con.execute(
        "SELECT comment FROM duckdb_tables() WHERE table_name = 'schema_migrations' AND schema_name = 'main'"
        " AND database_name = current_database()"
    ).fetchall()
    if recorded and recorded[0][0] == total:
        return []
    current = _defined_objects(con)
    stale = [
        obj
        for obj, comment in current.items()
        if (comment or "").startswith(CHECKSUM) and not any(obj in d.objects for d in shipped)
    ]
    changed = [d for d in shipped if any(current.get(obj, "") != d.checksum for obj in d.objects)]
    with transaction(con):
        for kind, name in stale:
            con.execute(f"DROP {kind} IF EXISTS {name}")  # noqa: S608 - a name read from the catalog
        for d in changed:
            con.execute(d.sql)
            for kind, name in d.objects:
                con.execute(f"COMMENT ON {kind} {name} IS '{d.checksum}'")  # noqa: S608 - names from shipped files
        con.execute(f"COMMENT ON TABLE schema_migrations IS '{total}'")
    return [d.name for d in changed]


def applied_versions(con: duckdb.DuckDBPyConnection) -> list[int]:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
    ).fetchone()[0]
    if not exists:
        return []
    return [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]


def migrate(con: duckdb.DuckDBPyConnection, upto: int | None = None) -> list[int]:
    """Apply pending migrations, each in its own transaction; return the versions applied now."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL,"
        " applied_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp)"
    )
    _renumber_banded(con)
    done = set(applied_versions(con))
    applied = []
    for m in migrations(upto):
        if m.version in done:
            continue
        with transaction(con):
            con.execute(m.sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
        applied.append(m.version)
    if upto is None:
        rollup.sync_macros(con)  # first: metric queries (sql/metrics/_gpu_latest.sql) call gpu_minutes
        sync_definitions(con)
    return applied


def _renumber_banded(con: duckdb.DuckDBPyConnection) -> None:
    """Record migrations applied under the banded numbering by their version in the plain sequence."""
    rows = con.execute(
        "SELECT version, name, applied_at FROM schema_migrations WHERE list_contains(?, name)",
        [list(BANDED_NAMES)],
    ).fetchall()
    if not rows:
        return
    names = {m.version: m.name for m in migrations()}
    with transaction(con):
        con.execute("DELETE FROM schema_migrations WHERE list_contains(?, name)", [list(BANDED_NAMES)])
        con.executemany(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            [(BANDED_NAMES[name], names[BANDED_NAMES[name]], at) for _, name, at in rows],
        )


def connect(
    path: str | Path, *, read_only: bool = False, migrate_schema: bool = True
) -> duckdb.DuckDBPyConnection:
    """Open the database; writers migrate it to the current schema, readers never write.

    Sessions run in UTC so that TIMESTAMPTZ values print and compare the same on every host.
    """
    path = str(path)
    if read_only and path != ":memory:" and not Path(path).exists():
        raise FileNotFoundError(
            f"database {path} does not exist (run a collector or `slurmscope demo` first)"
        )
    con = duckdb.connect(path, read_only=read_only)
    con.execute("SET TimeZone = 'UTC'")
    if not read_only and migrate_schema:
        migrate(con)
    return con


# How long a process waits for another's hold on the file: serve's jobs and readers' queries are short.
LOCK_WAIT_SECONDS = 30.0


def connect_waiting(
    path: str | Path, *, read_only: bool = False, wait_seconds: float = LOCK_WAIT_SECONDS, sleep: float = 0.2
) -> duckdb.DuckDBPyConnection:
    """connect(), retrying while another process holds the file lock: serve writes in short bursts, and a
    reader's query holds a shared lock that keeps serve's next job out until it ends."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return connect(path, read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                raise
            time.sleep(sleep)


# Tables that record the collection itself (runs, positions, bad lines, pulled files), not a cluster's data.
BOOKKEEPING_TABLES = ("collector_runs", "pipeline_runs", "quarantine", "spool_files", "watermarks")


def _data_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The raw tables with a cluster column (ARCHITECTURE.md §5: every table has one), marts excluded."""
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables JOIN information_schema.columns"
        " USING (table_catalog, table_schema, table_name)"
        " WHERE table_catalog = current_database() AND table_type = 'BASE TABLE' AND column_name = 'cluster'"
        " AND NOT starts_with(table_name, 'mart_') AND NOT list_contains(?, table_name) ORDER BY 1",
        [list(BOOKKEEPING_TABLES)],
    ).fetchall()
    return [r[0] for r in rows]


def _cluster_rows(con: duckdb.DuckDBPyConnection, tables: list[str]) -> dict[str, int]:
    present: dict[str, int] = {}
    for name in tables:  # table names from information_schema (_data_tables), double-quoted
        for c, n in con.execute(f'SELECT cluster, count(*) FROM "{name}" GROUP BY cluster').fetchall():  # noqa: S608 - name from information_schema
            present[c] = present.get(c, 0) + n
    return present


def missing_cluster(con: duckdb.DuckDBPyConnection, cluster: str) -> str | None:
    """Why a command run for `cluster` would work on nothing while other clusters have data, else None.

    sacct rows take the file's own Cluster column and the other kinds the configured name, so one site's
    accounting can sit under a name the command was not given while its sinfo and sshare rows sit under
    the default (issue 14: every mart empty, "no invoice rows", exit 0). Jobs are what the marts and the
    report are made of, so a cluster without jobs while another has some is refused, as is a cluster
    without any row while another has some; the message lists the clusters the database does hold. An
    empty database is not this case.
    """
    if con.execute("SELECT 1 FROM jobs WHERE cluster = ? LIMIT 1", [cluster]).fetchone():
        return None
    jobs = _cluster_rows(con, ["jobs"])
    if jobs:
        listed = ", ".join(f"{c!r} ({n:,} rows)" for c, n in sorted(jobs.items()))
        return (
            f"no jobs for cluster {cluster!r} (--cluster or cluster.name), but the database holds jobs of"
            f" {listed}: pass --cluster with one of them, or ingest with --cluster"
        )
    tables = _data_tables(con)
    for name in tables:
        if con.execute(f'SELECT 1 FROM "{name}" WHERE cluster = ? LIMIT 1', [cluster]).fetchone():  # noqa: S608 - name from information_schema
            return None
    present = _cluster_rows(con, tables)
    if not present:
        return None
    listed = ", ".join(f"{c!r} ({n:,} rows)" for c, n in sorted(present.items()))
    return (
        f"no data for cluster {cluster!r} (--cluster or cluster.name), but the database holds {listed}:"
        " pass --cluster with one of them"
    )


@contextmanager
def setting(con: duckdb.DuckDBPyConnection, name: str, value: object) -> Iterator[None]:
    """A DuckDB setting changed while the block runs, its previous value restored after. Most settings
    (`threads`, `write_buffer_row_group_count`, ...) belong to the database instance, not the connection:
    other cursors of the process see the value meanwhile. `name` comes from code, never from input."""
    if not re.fullmatch(r"[a-z_]+", name):
        raise ValueError(f"not a DuckDB setting name: {name!r}")
    old = con.execute("SELECT current_setting(?)", [name]).fetchone()[0]
    con.execute(f"SET {name} = ?", [value])
    try:
        yield
    finally:
        con.execute(f"SET {name} = ?", [old])


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN/COMMIT around a block; ROLLBACK and re-raise on any error."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
