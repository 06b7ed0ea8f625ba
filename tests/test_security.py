"""No shell anywhere, SQL formatted only from reviewed identifiers, and `query` cannot write."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.db import connect
from tests.dbhold import held
from tests.paths import ROOT

ROOT = ROOT
CODE_DIRS = ["slurmscope", "collectors", "pipelines", "dashboards", "alerts", "benchmarks", "tests"]


def _python_files() -> list[Path]:
    return [p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts]


def shell_uses(source: str) -> list[str]:
    """Calls that hand a string to a shell: a true `shell` argument, os.system, os.popen, or subprocess
    with a str command."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name in {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"}:
            found.append(f"line {node.lineno}: {name}")
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"line {node.lineno}: {name}(shell=...)")
        if (
            name.startswith("subprocess.")
            and node.args
            and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
        ):
            found.append(f"line {node.lineno}: {name} with a string command")
    return found


def test_the_scanner_finds_what_it_looks_for():
    # Built from pieces so that a plain grep for shell use does not flag this test itself.
    bad = (
        "import os, subprocess\nos." + "system('ls')\nsubprocess.run('ls -l', shell" + "=True)\n"
        "subprocess.check_output(f'sacct {x}')\n"
    )
    assert len(shell_uses(bad)) == 4
    assert shell_uses("import subprocess\nsubprocess.run(['sacct', '-P'], check=True)\n") == []


def test_no_shell_anywhere_in_the_code():
    offenders = {str(p.relative_to(ROOT)): u for p in _python_files() if (u := shell_uses(p.read_text()))}
    offenders.pop("tests/test_security.py", None)
    assert offenders == {}


SQL_WORDS = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|FROM|WHERE|INTO|VALUES|COPY|ATTACH|PRAGMA|JOIN)\b"
)
PRODUCT_DIRS = ["slurmscope", "collectors", "pipelines", "dashboards", "alerts"]

# Every expression product code may interpolate into SQL text, per file, each reviewed as a trusted
# identifier or SQL fragment written in code (never CLI arguments, config values or file content; those go
# in as `?` / `$name` parameters). A new interpolation fails test_sql_interpolates_only_reviewed_names
# until it is reviewed and added here. The `query` command runs the user's own SQL, by design, on a
# read-only connection (test_query_opens_the_database_read_only); it formats nothing.
SQL_INTERPOLATION_ALLOWED: dict[str, set[str]] = {
    # views and macros the migration runner drops: kinds and names read from its own catalog query
    "slurmscope/db.py": {"kind", "name"},
    # the metric's table macro, named after the catalog entry or its shared query (sql/metrics)
    "slurmscope/exporter.py": {"metric.macro", "macro"},
    # sql/metrics/_slurm_states.sql rendered from the module's own constant state sets (sql_list checks words)
    "slurmscope/slurm_states.py": {
        "unavailable_flags",
        "down_flags",
        "terminal",
        "sql_list(NODE_METRIC_UNAVAILABLE_STATES)",
        "sql_list(NODE_METRIC_DOWN_STATES)",
        "sql_list(NODE_METRIC_OTHER_STATES)",
        "sql_list(JOB_SYSTEM_FAILURE_STATES)",
        "sql_list(JOB_USER_FAILURE_STATES)",
        "sql_array(JOB_NOT_ENDED_STATES)",
        "sql_array(JOB_INCIDENT_LINKED_STATES)",
        "sql_array(JOB_PENDING_SCHEDULER_REASONS)",
        "JOB_CANCELLED_BY_ROOT",  # a constant string without a quote
    },
    # upsert: table name from the collectors' TableSpec constants; columns double-quoted by _quote
    "collectors/base.py": {"_quote(c)", "col_sql", "exists", "key_sql", "match", "set_sql", "spec.name"},
    # whether the tables a load writes held rows before it: names from the module's TableSpec constants
    "collectors/ingest.py": {"spec.name"},
    # column lists from the module's SCHEMAS constants; the key and minute-range filters are module literals
    "collectors/nvml.py": {
        "', '.join(_JOB_COLS)",
        "', '.join(sets)",
        "cols",
        "', '.join(_SAMPLE_COLS)",
        "', '.join(_sample_merge_sets())",
        "_SAMPLE_IN_RANGE",
        "_SAMPLE_KEY.format(s='excluded')",
        "_SAMPLE_KEY.format(s='s')",
    },
    # the rollup SQL generated from RULES (column names, double-quoted) and gpu_samples' column types read
    # from the catalog; every other piece is a literal fragment of the module; values are macro parameters
    "slurmscope/rollup.py": {
        "', '.join(cols)",
        "', '.join(parts)",
        "aggregate_sql(f'SELECT {cols} FROM gpu_samples WHERE cluster = cluster_name AND minute > {hour_lo} "
        "AND minute < hi AND minute >= {b}')",
        "aggregate_sql(segment_sql(f'SELECT {cols} FROM gpu_samples WHERE cluster = cluster_name AND minute > "
        "{hour_lo} AND minute < hi AND minute >= {b}'), ordered_sums=False)",
        "MINUTE_SOURCE",
        "by",
        "end",
        "group",
        "hit",
        "mark",
        "b",
        "c",
        "cast",
        "cols",
        "expand_sql(hourly, types)",
        "hour_lo",
        "minutes",
        "order",
        "sampled",
        "source",
        "w",
        "weighted",
    },
    # retention: fixed filters and table names of the module, column names from rollup.RULES and the catalog,
    # SQL generated by slurmscope.rollup; values are parameters
    "slurmscope/retention.py": {
        "JOBS_DELETABLE",
        "SNAPSHOT_DELETABLE",
        "STEPS_OF_DELETABLE",
        "cols",
        "column",
        "names",
        "rollup.aggregate_sql(source, order='_order')",
        "rollup.aggregate_sql(source, order='_order', repeated_minutes=True)",
        "rollup.expand_sql(stored, types)",
        "rollup.hour_of('minute')",
        "step.kind",
        "table",
        "touched",
        "where",
    },
    # status: the table names of RETENTION_TABLES, literals
    "slurmscope/cli.py": {
        "', '.join((f\"'{t}'\" for t in RETENTION_TABLES))",
        "', '.join((f\"('{t}')\" for t in RETENTION_TABLES))",
    },
    # HISTORY "INTERVAL 61 DAY"; the rest are SQL fragments built at import from module constants, and the
    # builders' parameters, which every call passes as literals (column expressions and table aliases)
    "pipelines/drift.py": {
        "HISTORY",
        "JOBS",
        "_FAILED",
        "h",
        "hour",
        "us",
        "_day('e - 1', 'h1')",
        "_day('epoch_us(end_time)', 'h')",
        "_day('epoch_us(start_time)', 'h')",
        "_day('s', 'h0')",
        "_hour_join('e - 1', 'h1')",
        "_hour_join('epoch_us(end_time)', 'h')",
        "_hour_join('epoch_us(start_time)', 'h')",
        "_hour_join('s', 'h0')",
        # SAMPLES the gpu_minutes call, ONCE "$batch = 0"; the fleet medians' column lists from GPU_METRICS
        "SAMPLES",
        "ONCE",
        "_day('us', 'h')",
        "_hour_join('us', 'h')",
        "', '.join((f'CAST({c} AS DOUBLE) AS {c}' for _, c, *_ in GPU_METRICS))",
        "', '.join((f'median({c}) AS {c}' for _, c, *_ in GPU_METRICS))",
        # the deviations' column lists: `c` and the joins run over GPU_METRICS' column names; the binned
        # minutes of the nodes a literal condition of the module names
        "c",
        "_GPU_MEDIANS",
        "', '.join((c for _, c, *_ in GPU_METRICS))",
        "', '.join((f'{c} AS fleet_{c}' for _, c, *_ in GPU_METRICS))",
        "nodes",
        "_binned_minutes('true')",
        "_binned_minutes('$node_group')",
    },
    # the gpu_jobs query, a module constant, reused by the batch row count
    "pipelines/efficiency.py": {"GPU_JOBS_SQL"},
    "pipelines/health.py": {
        "LOOKBACK",
        "WHOLE",
        "SAMPLE_COLUMNS",
    },  # an interval, a $parameter's, a column list
    # a column list literal; an int constant; the constant GPU fault event types; a filter built from constant
    # state sets
    "pipelines/reliability.py": {
        "_JOB_COLS",
        "FAULT_LEAD_SECONDS",
        "tuple(FAULT_GPU_EVENTS)",
        "_SNAPSHOT_FILTER",
    },
    # mart table and window column from the pipeline registry (MART_TABLES), checked against the catalog
    # and the group filter `where`, built from two ints
    "pipelines/runner.py": {"cols", "qcol", "sql", "table", "where"},
    # lake export: table names from TABLES (checked against information_schema), columns from the catalog,
    # all double-quoted by _q; expr, where and order are built from those quoted names; values are parameters
    "slurmscope/lake.py": {
        "_q(table)",
        "cols",  # restore: a partition's column names, each checked against the table's and quoted
        "expr",
        "order",
        "where",
        "col",
        # SOURCES' fixed query; the merge of a thinned month: natural keys from NATURAL_KEYS, quoted
        "SOURCES[table]",
        "_month_expr('minute', types[column])",
        "kept",
        "names",
        "own",
        "same",
        "source",
        "sql",
        "t_where",
    },
}


def _literal_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant))
    return None


def _add_operands(node: ast.AST, inner: set[int]) -> list[ast.AST]:
    """The operands of a chain a + b + c (the inner BinOps are recorded so the chain is read once)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        inner.update((id(node.left), id(node.right)))
        return _add_operands(node.left, inner) + _add_operands(node.right, inner)
    return [node]


def sql_interpolations(source: str) -> list[tuple[int, str]]:
    """(line, expression) for every non-literal value put into SQL text by an f-string, str.format, `%` or
    `+`: text counts as SQL when its literal part has an upper-case SQL keyword."""
    found = []
    inner: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        exprs: list[ast.AST] = []
        if isinstance(node, ast.JoinedStr) and SQL_WORDS.search(_literal_text(node) or ""):
            exprs = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
        elif (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
        ):
            recv, text = node.func.value, _literal_text(node.func.value)
            # a literal SQL template, or a module constant (UPPER_CASE) holding one
            if (text is not None and SQL_WORDS.search(text)) or (
                isinstance(recv, ast.Name) and recv.id.lstrip("_").isupper()
            ):
                exprs = [*node.args, *(k.value for k in node.keywords)]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            text = _literal_text(node.left)
            if text is not None and SQL_WORDS.search(text):
                exprs = list(node.right.elts) if isinstance(node.right, ast.Tuple) else [node.right]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and id(node) not in inner:
            ops = _add_operands(node, inner)
            if any(SQL_WORDS.search(_literal_text(o) or "") for o in ops):
                exprs = [o for o in ops if _literal_text(o) is None]
        found += [(e.lineno, ast.unparse(e)) for e in exprs if not isinstance(e, ast.Constant)]
    return sorted(found)


def test_the_sql_scanner_finds_formatted_values():
    bad = (
        "def f(con, user, table, day):\n"
        "    con.execute(f\"SELECT * FROM jobs WHERE user = '{user}'\")\n"
        "    con.execute(\"DELETE FROM jobs WHERE day = '%s'\" % day)\n"
        '    con.execute("SELECT * FROM {} WHERE a = 1".format(table))\n'
        '    con.execute("SELECT * FROM jobs WHERE account = \'" + user + "\'")\n'
    )
    assert [e for _, e in sql_interpolations(bad)] == ["user", "day", "table", "user"]  # lines 2-5
    ok = (
        "def f(con, user):\n"
        '    con.execute("SELECT * FROM jobs WHERE user = ?", [user])\n'
        '    con.execute(f"{user} is not SQL")\n'
        "    con.execute(f\"SELECT {'literal'} FROM jobs\")\n"
    )
    assert sql_interpolations(ok) == []


def test_sql_interpolates_only_reviewed_names():
    """SQL takes parameters: any value formatted into product SQL must be a reviewed identifier source."""
    offenders = {}
    for d in PRODUCT_DIRS:
        for p in (ROOT / d).rglob("*.py"):
            rel = str(p.relative_to(ROOT))
            allowed = SQL_INTERPOLATION_ALLOWED.get(rel, set())
            new = sorted({f"line {n}: {e}" for n, e in sql_interpolations(p.read_text()) if e not in allowed})
            if new:
                offenders[rel] = new
    assert offenders == {}


def test_query_opens_the_database_read_only(tmp_path):
    db = tmp_path / "q.duckdb"
    con = connect(db)
    con.execute("INSERT INTO watermarks (cluster, collector, position) VALUES ('c', 'sacct', now())")
    con.close()
    runner = CliRunner()
    for sql in (
        "DELETE FROM watermarks",
        "DROP TABLE watermarks",
        "INSERT INTO watermarks VALUES ('c','x',now(),now())",
    ):
        res = runner.invoke(main, ["--db", str(db), "query", sql])
        assert res.exit_code != 0 and "read-only" in res.output.lower(), res.output
    res = runner.invoke(
        main, ["--db", str(db), "query", "SELECT count(*) AS n FROM watermarks", "--format", "csv"]
    )
    assert res.exit_code == 0 and res.output == "n\n1\n"


def test_a_locked_database_is_a_clear_error(tmp_path, monkeypatch):
    db = tmp_path / "l.duckdb"
    connect(db).close()
    with held(db):
        monkeypatch.setattr("slurmscope.db.LOCK_WAIT_SECONDS", 1.0)
        res = CliRunner().invoke(main, ["--db", str(db), "status"])
        assert res.exit_code != 0
        assert f"cannot open database {db}" in res.output and "lock" in res.output.lower()
