"""scontrol show config / show reservation / ping parsers: real captures, hand-made cases, CLI, properties."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from slurmscope.collectors import ping, reservations
from slurmscope.collectors import slurm_config as config_parser
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.cli import main
from slurmscope.config import load_config
from tests.paths import FIXTURES

FIX = FIXTURES
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
S = "SckyzO__slurm_exporter"


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def run(module, data: bytes | str, tz: str = "UTC", snapshot: datetime = T0):
    if isinstance(data, str):
        data = data.encode()
    return module.parse(data, cluster="c", snapshot_time=snapshot, tz=ZoneInfo(tz))


def test_command_lines():
    cfg = load_config(None)
    assert config_parser.command(cfg) == ["scontrol", "show", "config"]
    assert reservations.command(cfg) == ["scontrol", "show", "reservation", "--oneliner"]
    assert ping.command(cfg) == ["scontrol", "ping"]


# ------------------------------------------------------------------------------------------ config


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


# ------------------------------------------------------------------------------------ reservations

RESERVATION_CAPTURES = [
    (f"{S}/reservations.txt", 1),
    (f"{S}/reservations_empty.txt", 0),
    (f"{S}/reservations_relative_time.txt", 1),
    (f"{S}/slurm-24.11.7/reservations.txt", 0),
    (f"{S}/slurm-26.05.2/reservations.txt", 0),
    ("slurm-22.05/reservations_mid.txt", None),
    ("slurm-22.05/reservations_final.txt", None),
]


@pytest.mark.parametrize(("path", "rows"), RESERVATION_CAPTURES, ids=[c[0] for c in RESERVATION_CAPTURES])
def test_reservation_captures_parse_without_quarantine(path, rows):
    data = (FIX / path).read_bytes()
    p = run(reservations, data)
    assert p.quarantine.height == 0
    if rows is None:  # test-bed captures: one record per --oneliner line
        rows = data.count(b"ReservationName=")
    assert p.tables["reservations"].height == rows


def test_multi_line_reservation_values():
    r = (
        run(reservations, (FIX / S / "reservations.txt").read_bytes())
        .tables["reservations"]
        .row(0, named=True)
    )
    assert r["name"] == "pre-reservation-maintenance"
    assert (r["start_time"], r["end_time"]) == (at(2025, 8, 26, 7, 0), at(2025, 8, 29, 20, 0))
    assert (r["node_list"], r["node_count"], r["gpus"]) == ("node[001-102]", 102, 0)
    assert (r["users"], r["accounts"], r["flags"], r["state"], r["tres"]) == (
        "user01",
        None,
        "SPEC_NODES,ALL_NODES",
        "INACTIVE",
        "cpu=25152",
    )


def test_same_day_clock_times_take_the_snapshot_date_in_the_zone():
    snap = at(2024, 3, 9, 23, 30)  # 2024-03-10 00:30 in Europe/Berlin
    r = (
        run(
            reservations,
            (FIX / S / "reservations_relative_time.txt").read_bytes(),
            tz="Europe/Berlin",
            snapshot=snap,
        )
        .tables["reservations"]
        .row(0, named=True)
    )
    assert (r["start_time"], r["end_time"]) == (at(2024, 3, 10, 13, 24, 22), at(2024, 3, 10, 15, 24, 22))
    assert (r["name"], r["node_count"], r["flags"], r["state"]) == (
        "maint-158",
        4,
        "MAINT,SPEC_NODES",
        "ACTIVE",
    )


def test_oneliner_with_gpus_and_bad_records():
    text = (
        "ReservationName=gpu-maint StartTime=2024-05-02T08:00:00 EndTime=2024-05-02T12:00:00 "
        "Duration=04:00:00 Nodes=gpu[01-02] NodeCnt=2 CoreCnt=128 Features=(null) PartitionName=gpu "
        "Flags=MAINT,IGNORE_JOBS TRES=cpu=128,gres/gpu:h100=16,gres/gpu=16 Users=root Groups=(null) "
        "Accounts=ml,infra Licenses=(null) State=INACTIVE BurstBuffer=(null) MaxStartDelay=(null)\n"
        "ReservationName=broken StartTime=someday EndTime=2024-05-02T12:00:00\n"
        "stray text\n"
    )
    p = run(reservations, text)
    df = p.tables["reservations"]
    assert df.height == 1
    r = df.row(0, named=True)
    assert (r["gpus"], r["accounts"], r["node_list"], r["seen_at"]) == (16, "ml,infra", "gpu[01-02]", T0)
    assert p.quarantine["line_no"].to_list() == [2, 3]


# ------------------------------------------------------------------------------------------ ping


def test_ping_real_and_backup_down():
    p = run(ping, (FIX / "slurm-22.05/ping_final.txt").read_bytes())
    assert p.quarantine.height == 0
    assert p.tables["controller_pings"].select("host", "role", "up").rows() == [("vm", "primary", True)]
    p = run(ping, "Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is DOWN\nhello\n")
    assert p.tables["controller_pings"].select("host", "role", "up").rows() == [
        ("ctl1", "primary", True),
        ("ctl2", "backup", False),
    ]
    assert p.quarantine["line_no"].to_list() == [3]


# ------------------------------------------------------------------------------------------ CLI


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


# ------------------------------------------------------------------------------------------ properties

_ALPHABET = st.sampled_from(
    list(" =\n\t:()abcXYZ0123456789")
    + [
        "ReservationName=r",
        " StartTime=2024-01-01T00:00:00",
        "Slurmctld(primary) at h is UP",
        "Key = value",
        "Cgroup Support Configuration:",
        "No reservations in the system",
    ]
)


def _accounted(module, data: bytes) -> None:
    """No exception; every non-blank line is quarantined or accounted for by a kept record."""
    p = run(module, data)
    lines = data.split(b"\n")
    texts = [line.decode("utf-8", "replace") for line in lines]
    nonblank = {i for i, t in enumerate(texts, start=1) if not is_blank(t)}
    q = set(p.quarantine["line_no"].to_list())
    assert q <= nonblank
    for i in sorted(nonblank - q):
        alone = run(module, lines[i - 1])
        height = next(iter(alone.tables.values())).height
        if module is ping:
            assert height == 1  # a controller line
        elif module is config_parser:
            assert height == 1 or alone.quarantine.height == 0  # a setting, a section title or the header
        else:
            starts = [
                j
                for j in range(1, i + 1)
                if j not in q and texts[j - 1].strip().startswith("ReservationName=")
            ]
            assert starts or texts[i - 1].strip().startswith("No reservations in the system")


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


def test_reservation_count_too_large_is_quarantined():
    p = run(reservations, "ReservationName=r StartTime=2024-05-02T08:00:00 NodeCnt=99999999999\n")
    assert p.tables["reservations"].height == 0
    assert "node_count out of range" in p.quarantine["reason"][0]


def test_real_22_05_reservation_values_match_the_raw_line():
    for tag in ("mid", "final"):
        text = (FIX / f"slurm-22.05/reservations_{tag}.txt").read_text()
        df = run(reservations, text).tables["reservations"]
        for line in text.splitlines():
            if not line.startswith("ReservationName="):
                continue
            kv = dict(tok.split("=", 1) for tok in line.split())
            row = df.filter(df["name"] == kv["ReservationName"]).row(0, named=True)
            assert row["start_time"] == datetime.fromisoformat(kv["StartTime"]).replace(tzinfo=UTC)
            assert row["end_time"] == datetime.fromisoformat(kv["EndTime"]).replace(tzinfo=UTC)
            assert (row["node_list"], row["node_count"], row["flags"], row["state"]) == (
                kv["Nodes"],
                int(kv["NodeCnt"]),
                kv["Flags"],
                kv["State"],
            )
            assert row["tres"] == line.split(" TRES=")[1].split()[0]
