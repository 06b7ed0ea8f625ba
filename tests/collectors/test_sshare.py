"""sshare parser: the account tree (depth, parent) from indentation, user rows, `parent` shares, CLI."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from slurmscope.collectors import sshare
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.cli import main
from tests.paths import FIXTURES

FIX = FIXTURES
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
S = "SckyzO__slurm_exporter"
SCKYZO_FMT = "Account,User,RawShares,NormShares,RawUsage,NormUsage,FairShare"


def parse(data: bytes | str, fmt: str | None = None, delimiter: str | None = None):
    if isinstance(data, str):
        data = data.encode()
    return sshare.parse(data, cluster="c", snapshot_time=T0, tz=ZoneInfo("UTC"), fmt=fmt, delimiter=delimiter)


def assoc(df: pl.DataFrame, account: str, user: str = "") -> dict:
    rows = df.filter((pl.col("account") == account) & (pl.col("user") == user)).to_dicts()
    assert len(rows) == 1, (account, user)
    return rows[0]


CAPTURES = [
    (
        f"{S}/fairshare.txt",
        SCKYZO_FMT,
        10,
        {
            ("root", ""): {
                "depth": 0,
                "parent": None,
                "raw_shares": None,
                "raw_usage": 500000.0,
                "fairshare": None,
            },
            ("root", "user1"): {
                "depth": 1,
                "parent": "root",
                "raw_shares": 1,
                "norm_shares": 0.1,
                "fairshare": 1.0,
            },
            ("root", "ci-bot"): {"raw_shares": None, "raw_usage": 25000.0, "fairshare": 0.5},
            ("account_a", ""): {
                "depth": 1,
                "parent": "root",
                "raw_shares": 1,
                "norm_usage": 0.2,
                "fairshare": 0.6,
            },
            ("account_a", "user3"): {
                "depth": 2,
                "parent": "account_a",
                "raw_shares": None,
                "norm_shares": 0.25,
            },
            ("account_b", ""): {"raw_shares": 1000, "fairshare": None},
            ("account_c", "user5"): {"depth": 2, "parent": "account_c", "fairshare": 0.75},
        },
    ),
    (
        f"{S}/slurm-24.11.7/fairshare.txt",
        SCKYZO_FMT,
        2,
        {
            ("user5", ""): {"depth": 0, "parent": None, "raw_usage": 0.0, "norm_usage": None},
            ("user5", "user5"): {"depth": 1, "parent": "user5", "raw_shares": 1, "fairshare": 1.0},
        },
    ),
    (f"{S}/slurm-26.05.2/fairshare.txt", SCKYZO_FMT, 2, {("user6", "user6"): {"norm_shares": 1.0}}),
    # the test bed's account tree (tests/fixtures/slurm-22.05/README.md); usage figures vary per recording
    (
        "slurm-22.05/sshare_final.txt",
        None,
        12,
        {
            ("root", ""): {
                "depth": 0,
                "parent": None,
                "raw_shares": None,
                "effectv_usage": 1.0,
                "level_fs": None,
            },
            ("root", "root"): {"depth": 1, "parent": "root", "raw_shares": 1, "level_fs": math.inf},
            ("research", ""): {"depth": 1, "parent": "root", "raw_shares": 60},
            ("pretraining", ""): {"depth": 2, "parent": "research", "raw_shares": 40},
            ("pretraining", "sbbob"): {"depth": 3, "parent": "pretraining", "raw_shares": 1},
            ("vision", ""): {"depth": 2, "parent": "research", "raw_shares": 20},
            ("vision", "sbbob"): {"depth": 3, "parent": "vision"},
            ("infra", ""): {"depth": 1, "parent": "root", "raw_shares": 25},
            ("students", ""): {"depth": 1, "parent": "root", "raw_shares": 15, "grp_tres_mins": None},
        },
    ),
]


@pytest.mark.parametrize(("path", "fmt", "rows", "checks"), CAPTURES, ids=[c[0] for c in CAPTURES])
def test_capture_parses_without_quarantine(path, fmt, rows, checks):
    p = parse((FIX / path).read_bytes(), fmt)
    assert p.quarantine.height == 0, p.quarantine.to_dicts()
    df = p.tables["shares"]
    assert df.height == rows
    for (account, user), expected in checks.items():
        row = assoc(df, account, user)
        for col, value in expected.items():
            assert row[col] == value, (account, user, col)


def test_real_22_05_usage_matches_the_raw_columns():
    lines = (FIX / "slurm-22.05/sshare_final.txt").read_text().splitlines()[1:]
    df = parse((FIX / "slurm-22.05/sshare_final.txt").read_bytes()).tables["shares"]
    for line in lines:
        f = line.split("|")
        row = assoc(df, f[0].strip(), f[1])
        assert row["raw_usage"] == float(f[4])
        assert row["norm_shares"] == float(f[3])
        assert row["fairshare"] == (float(f[7]) if f[7] else None)


def test_tres_run_mins_kept_as_text():
    raw = (FIX / "slurm-22.05/sshare_mid.txt").read_text().splitlines()[1]  # the root row
    df = parse((FIX / "slurm-22.05/sshare_mid.txt").read_bytes()).tables["shares"]
    assert assoc(df, "root")["tres_run_mins"] == raw.split("|")[10]
    assert "gres/gpu=" in raw.split("|")[10]


def test_live_command_line():
    from slurmscope.config import load_config

    fields = "Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS,GrpTRESMins,TRESRunMins,GrpTRESRaw"
    assert sshare.command(load_config(None)) == ["sshare", "--all", "--parsable2", f"--format={fields}"]
    # the real 22.05 capture of that command line: --long's columns, then GrpTRESRaw
    argv = (FIX / "slurm-22.05-budgets/sshare_budgets.argv").read_text().splitlines()
    assert argv == sshare.command(load_config(None))


def test_grp_tres_mins_and_raw_from_the_real_capture():
    """Account and user limits as sacctmgr set them (assoc_budgets.txt); GrpTRESRaw, the decayed TRES-minutes
    Slurm compares with them, agrees with the jobs: research's subtree ran 16 GPUs for 91 s (sacct_budgets.txt)
    = 24.27 GPU-minutes, printed truncated as 24; 37 billing units for 91 s = 56.1 billing-minutes -> 56."""
    df = parse((FIX / "slurm-22.05-budgets/sshare_budgets.txt").read_bytes()).tables["shares"]
    limits = {
        (a, u): lim
        for a, u, lim in (
            line.split("|")
            for line in (FIX / "slurm-22.05-budgets/assoc_budgets.txt").read_text().splitlines()
        )
    }
    assert {(r["account"], r["user"]): r["grp_tres_mins"] or "" for r in df.to_dicts()} == limits
    research = assoc(df, "research")
    assert research["grp_tres_mins"] == "billing=6000,gres/gpu=3000"
    assert "billing=56," in research["grp_tres_raw"] and "gres/gpu=24," in research["grp_tres_raw"]
    assert "gres/gpu=21," in assoc(df, "pretraining")["grp_tres_raw"]  # 14 GPUs x 91 s = 21.2 minutes


def test_header_wins_over_default_columns_and_other_delimiters():
    text = "User;Account;RawShares\nalice; ml;parent\n;ml;5\n"
    df = parse(text, delimiter=";").tables["shares"]
    assert assoc(df, "ml", "alice")["raw_shares"] is None
    assert assoc(df, "ml", "")["raw_shares"] == 5


def test_bad_lines_are_quarantined():
    p = parse("Account|User|RawShares|NormShares\nroot||x|0.5\n a|b\n b||1|0.5\n")
    assert p.quarantine["line_no"].to_list() == [2, 3]
    assert "not a number" in p.quarantine["reason"][0]
    assert "fields" in p.quarantine["reason"][1]
    assert p.tables["shares"].height == 1


def test_cli_ingest_then_query(tmp_path):
    db = tmp_path / "s.duckdb"
    runner = CliRunner()
    res = runner.invoke(
        main, ["--db", str(db), "ingest", "sshare", str(FIX / S / "fairshare.txt"), "--format", SCKYZO_FMT]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        main,
        [
            "--db",
            str(db),
            "query",
            "--format",
            "csv",
            'SELECT account, "user", parent, depth FROM shares WHERE raw_shares IS NULL '
            'ORDER BY account, "user"',
        ],
    )
    assert res.exit_code == 0, res.output
    assert res.output.strip().splitlines()[1:] == [
        "account_a,user3,account_a,2",
        "root,,,0",
        "root,ci-bot,root,1",
    ]


_ALPHABET = st.sampled_from(list(" |\n0123456789.-abc") + ["Account|User|RawShares", "parent", "inf", "root"])


@given(
    st.one_of(st.binary(max_size=300), st.lists(_ALPHABET, max_size=60).map(lambda xs: "".join(xs).encode()))
)
def test_never_raises_and_every_line_kept_or_quarantined(data):
    _check_total(data)


def _check_total(data: bytes) -> None:
    """Every non-blank line is quarantined, the header/a dashed rule, or a row (read after that header)."""
    p = parse(data)
    q = set(p.quarantine["line_no"].to_list())
    lines = data.split(b"\n")
    assert q <= set(range(1, len(lines) + 1))
    header = b""
    for i, line in enumerate(lines, start=1):
        if is_blank(line.decode("utf-8", "replace")) or i in q:
            continue
        again = parse(header + line)
        if again.tables["shares"].height == 0:
            assert again.quarantine.height == 0, line
            if not header and line.strip(b" -"):
                header = line + b"\n"
        else:
            assert again.tables["shares"].height == 1


def test_number_too_large_is_quarantined():
    p = parse("Account|User|RawShares\nroot||99999999999999999999\n a||1\n")
    assert p.quarantine["line_no"].to_list() == [2]
    assert "raw_shares out of range" in p.quarantine["reason"][0]
    assert p.tables["shares"]["account"].to_list() == ["a"]
