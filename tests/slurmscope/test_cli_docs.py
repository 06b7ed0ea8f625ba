"""Every command of the CLI is documented in docs/cli.md, and its --help works."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from slurmscope.cli import main
from tests.paths import ROOT

DOC = (ROOT / "docs" / "cli.md").read_text()


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _commands(cmd, prefix + (name,))
        else:
            out.append(prefix + (name,))
    return out


COMMANDS = _commands(main)


def test_the_contract_commands_exist():
    expected = {
        ("demo",),
        ("simulate",),
        ("ingest",),
        ("collect",),
        ("agent",),
        ("pipelines", "run"),
        ("serve",),
        ("report",),
        ("dashboards", "build"),
        ("alerts", "build"),
        ("query",),
        ("status",),
    }
    assert expected <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_command_is_documented_and_has_help(path):
    assert f"## slurmscope {' '.join(path)}\n" in DOC
    res = CliRunner().invoke(main, [*path, "--help"])
    assert res.exit_code == 0 and "Usage:" in res.output
