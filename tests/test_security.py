"""No shell anywhere, and `query` cannot write."""

from __future__ import annotations

import ast
from pathlib import Path

from click.testing import CliRunner

from slurmscope.cli import main
from slurmscope.db import connect

ROOT = Path(__file__).resolve().parent.parent
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
        if name.startswith("subprocess.") and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr)):
            found.append(f"line {node.lineno}: {name} with a string command")
    return found


def test_the_scanner_finds_what_it_looks_for():
    # Built from pieces so that a plain grep for shell use does not flag this test itself.
    bad = ("import os, subprocess\nos." + "system('ls')\nsubprocess.run('ls -l', shell" + "=True)\n"
           "subprocess.check_output(f'sacct {x}')\n")
    assert len(shell_uses(bad)) == 4
    assert shell_uses("import subprocess\nsubprocess.run(['sacct', '-P'], check=True)\n") == []


def test_no_shell_anywhere_in_the_code():
    offenders = {str(p.relative_to(ROOT)): u for p in _python_files() if (u := shell_uses(p.read_text()))}
    offenders.pop("tests/test_security.py", None)
    assert offenders == {}


def test_query_opens_the_database_read_only(tmp_path):
    db = tmp_path / "q.duckdb"
    con = connect(db)
    con.execute("INSERT INTO watermarks (cluster, collector, position) VALUES ('c', 'sacct', now())")
    con.close()
    runner = CliRunner()
    for sql in ("DELETE FROM watermarks", "DROP TABLE watermarks", "INSERT INTO watermarks VALUES ('c','x',now(),now())"):
        res = runner.invoke(main, ["--db", str(db), "query", sql])
        assert res.exit_code != 0 and "read-only" in res.output.lower(), res.output
    res = runner.invoke(main, ["--db", str(db), "query", "SELECT count(*) AS n FROM watermarks", "--format", "csv"])
    assert res.exit_code == 0 and res.output == "n\n1\n"


def test_a_locked_database_is_a_clear_error(tmp_path, monkeypatch):
    import subprocess
    import sys

    db = tmp_path / "l.duckdb"
    connect(db).close()
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb,sys,time; c=duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); time.sleep(60)", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr("slurmscope.cli.LOCK_WAIT_SECONDS", 1.0)
        res = CliRunner().invoke(main, ["--db", str(db), "status"])
        assert res.exit_code != 0
        assert f"cannot open database {db}" in res.output and "lock" in res.output.lower()
    finally:
        holder.kill()
        holder.wait()
