"""DuckDB connection, migrations and transactions.

The schema lives in sql/NNNN_name.sql; this module only applies those files in order and records each
one in `schema_migrations`, inside the same transaction as the DDL, so a crash mid-migration leaves the
database at the previous version rather than half-upgraded.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import duckdb

MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


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
    done = set(applied_versions(con))
    applied = []
    for m in migrations(upto):
        if m.version in done:
            continue
        with transaction(con):
            con.execute(m.sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [m.version, m.name])
        applied.append(m.version)
    return applied


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


def connect_waiting(
    path: str | Path, *, read_only: bool = False, wait_seconds: float = 30.0, sleep: float = 0.2
) -> duckdb.DuckDBPyConnection:
    """connect(), retrying while another process holds the file lock (serve writes in short bursts)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return connect(path, read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                raise
            time.sleep(sleep)


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
