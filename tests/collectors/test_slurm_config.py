"""`scontrol show config` parser: the real 22.05 capture, sections, junk quarantined, the CLI."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from slurmscope.collectors import ping, reservations
from slurmscope.collectors import slurm_config as config_parser

from slurmscope.cli import main
from slurmscope.config import load_config
from tests.collectors.scontrol_support import _ALPHABET, FIX, S, _accounted, at, run


def test_command_lines():
    cfg = load_config(None)
    assert config_parser.command(cfg) == ["scontrol", "show", "config"]
    assert reservations.command(cfg) == ["scontrol", "show", "reservation", "--oneliner"]
    assert ping.command(cfg) == ["scontrol", "ping"]


def test_real_22_05_config():
    text = (FIX / "slurm-22.05/config_final.txt").read_text()
    p = run(config_parser, text)
    assert p.quarantine.height == 0
    df = p.tables["slurm_config"]
    # every "Key = value" line and the controller status line
    assert df.height == sum(" = " in line for line in text.splitlines()) + 1
    kv = dict(zip(df["key"], df["value"], strict=True))
    assert kv["ClusterName"] == "slurmbed"
    assert kv["PriorityDecayHalfLife"] == "7-00:00:00"
    assert kv["SLURM_VERSION"] == "22.05.8"
    assert kv["PriorityWeightTRES"] is None
    assert kv["SchedulerParameters"].startswith("bf_interval=2,bf_resolution=10")
    assert kv["status:Slurmctld(primary)"] == "UP at vm"
    as_of = text.splitlines()[0].removeprefix("Configuration data as of ")  # the snapshot time
    assert set(df["snapshot_time"]) == {datetime.fromisoformat(as_of).replace(tzinfo=UTC)}


def test_config_sections_prefix_their_keys_and_junk_is_quarantined():
    text = (
        "Configuration data as of 2024-01-15T10:00:00\nMpiDefault              = none\n"
        "WaitTime = 0 sec\n\nCgroup Support Configuration:\nAllowedRAMSpace         = 100.0%\n"
        "MPI Plugins Configuration:\nPMIxCliTmpDirBase       = (null)\nthis is not config\n"
    )
    p = run(config_parser, text, tz="Europe/Berlin")
    kv = dict(zip(p.tables["slurm_config"]["key"], p.tables["slurm_config"]["value"], strict=True))
    assert kv == {
        "MpiDefault": "none",
        "WaitTime": "0 sec",
        "Cgroup Support Configuration:AllowedRAMSpace": "100.0%",
        "MPI Plugins Configuration:PMIxCliTmpDirBase": None,
    }
    assert p.quarantine["line_no"].to_list() == [9]
    assert set(p.tables["slurm_config"]["snapshot_time"]) == {at(2024, 1, 15, 9, 0)}


def test_cli_ingest_reservations_config_and_ping(tmp_path):
    db = tmp_path / "s.duckdb"
    runner = CliRunner()
    for kind, path in (
        ("reservations", FIX / S / "reservations.txt"),
        ("config", FIX / "slurm-22.05/config_final.txt"),
        ("ping", FIX / "slurm-22.05/ping_final.txt"),
    ):
        res = runner.invoke(main, ["--db", str(db), "ingest", kind, str(path)])
        assert res.exit_code == 0, res.output
    res = runner.invoke(
        main,
        [
            "--db",
            str(db),
            "query",
            "--format",
            "csv",
            "SELECT (SELECT node_count FROM reservations) AS n, "
            "(SELECT value FROM slurm_config WHERE key = 'ClusterName') AS c, "
            "(SELECT count(*) FROM controller_pings WHERE up) AS up",
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[1] == "102,slurmbed,1"


@pytest.mark.parametrize(
    "module", [config_parser, reservations, ping], ids=["config", "reservations", "ping"]
)
@given(
    data=st.one_of(
        st.binary(max_size=300), st.lists(_ALPHABET, max_size=40).map(lambda xs: "".join(xs).encode())
    )
)
def test_never_raises_and_every_line_kept_or_quarantined(module, data):
    _accounted(module, data)
