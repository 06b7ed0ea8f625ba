"""`scontrol show partition` parser: the real 22.05 captures (one-line and multi-line), junk quarantined, CLI."""

from __future__ import annotations

from click.testing import CliRunner
from slurmscope.collectors import partitions

from slurmscope.cli import main
from slurmscope.config import load_config
from tests.collectors.scontrol_support import FIX, T0, run

B = FIX / "slurm-22.05-budgets"


def settings(parsed) -> dict[tuple[str, str], str | None]:
    df = parsed.tables["slurm_partitions"]
    return {(r["partition"], r["key"]): r["value"] for r in df.to_dicts()}


def test_command_line_is_the_captured_one():
    assert partitions.command(load_config(None)) == ["scontrol", "show", "partition", "--oneliner"]
    assert (B / "partitions_budgets.argv").read_text().splitlines() == partitions.command(load_config(None))


def test_real_22_05_partitions_one_line_and_multi_line_agree():
    """The bed's slurm.conf sets TRESBillingWeights on gpu only (tests/slurmbed/cluster.py); every other
    `Key=value` token of the three lines is a row, values with `=` kept whole, `(null)` as NULL."""
    text = (B / "partitions_budgets.txt").read_text()
    one = run(partitions, text)
    multi = run(partitions, (B / "partitions_multiline_budgets.txt").read_bytes())
    assert one.quarantine.height == 0 and multi.quarantine.height == 0
    kv = settings(one)
    assert kv == settings(multi)
    assert len(kv) == sum(len(line.split()) - 1 for line in text.splitlines())
    assert kv[("gpu", "TRESBillingWeights")] == "CPU=0.25,Mem=0.0G,GRES/gpu=2.0"
    assert ("debug", "TRESBillingWeights") not in kv and ("cpu", "TRESBillingWeights") not in kv
    assert kv[("gpu", "TRES")] == "cpu=64,mem=250G,node=4,billing=80,gres/gpu=32,gres/gpu:h100=32"
    assert kv[("cpu", "Nodes")] == "cpu01"
    assert kv[("gpu", "JobDefaults")] is None
    assert set(one.tables["slurm_partitions"]["snapshot_time"]) == {T0}


def test_junk_and_orphan_settings_are_quarantined_and_the_empty_list_is_nothing():
    text = (
        "No partitions in the system\n"
        "   State=UP\n"  # before any record
        "PartitionName=a State=UP\n"
        "this is not a setting\n"
        "   Nodes=n1\n"  # under the junk line, not a's
        "PartitionName=b\n"
        "   TRESBillingWeights=CPU=1.0\n"
    )
    p = run(partitions, text)
    assert p.quarantine["line_no"].to_list() == [2, 4, 5]
    assert settings(p) == {("a", "State"): "UP", ("b", "TRESBillingWeights"): "CPU=1.0"}


def test_cli_ingests_a_recorded_file(tmp_path):
    db = str(tmp_path / "s.duckdb")
    res = CliRunner().invoke(
        main,
        [
            "--db",
            db,
            "ingest",
            "partitions",
            str(B / "partitions_budgets.txt"),
            "--at",
            "2026-12-04T15:55:32Z",
        ],
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        main,
        [
            "--db",
            db,
            "query",
            "--format",
            "csv",
            "SELECT \"partition\", value FROM slurm_partitions WHERE key = 'TRESBillingWeights'",
        ],
    )
    assert res.output.splitlines() == ["partition,value", 'gpu,"CPU=0.25,Mem=0.0G,GRES/gpu=2.0"']
