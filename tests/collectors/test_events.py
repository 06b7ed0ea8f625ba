"""sacctmgr show event parser: node DOWN/DRAIN history (real 22.05 capture and a constructed one), CLI."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from slurmscope.collectors import events
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.cli import main
from slurmscope.config import load_config
from tests.paths import FIXTURES

FIX = FIXTURES
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def parse(data: bytes | str, tz: str = "UTC", fmt: str | None = None):
    if isinstance(data, str):
        data = data.encode()
    return events.parse(data, cluster="here", snapshot_time=T0, tz=ZoneInfo(tz), fmt=fmt)


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def ev(df: pl.DataFrame, node: str, start: datetime) -> dict:
    rows = df.filter((pl.col("node") == node) & (pl.col("time_start") == start)).to_dicts()
    assert len(rows) == 1, (node, start)
    return rows[0]


def test_live_command_line():
    argv = events.command(load_config(None), start=at(2024, 5, 1, 0, 0), end=at(2024, 5, 2, 0, 0))
    assert argv == [
        "sacctmgr",
        "--parsable2",
        "show",
        "event",
        "Start=2024-05-01T00:00:00",
        "End=2024-05-02T00:00:00",
        "format=Cluster,ClusterNodes,NodeName,TimeStart,TimeEnd,State,Reason,User",
    ]


def _iso(s: str) -> datetime | None:
    return None if s == "Unknown" else datetime.fromisoformat(s).replace(tzinfo=UTC)


def test_real_slurm_22_05_capture():
    for tag, n in (("mid", 2), ("final", 3)):
        p = parse((FIX / f"slurm-22.05/events_{tag}.txt").read_bytes())
        assert p.quarantine.height == 0
        assert p.tables["node_events"].height == n
    df = p.tables["node_events"]
    raw = {
        (f[2], f[5]): f
        for f in (
            line.split("|") for line in (FIX / "slurm-22.05/events_final.txt").read_text().splitlines()[1:]
        )
    }
    cl = ev(df, "", _iso(raw[("", "")][3]))
    assert (cl["cluster"], cl["event_type"], cl["reason"], cl["time_end"], cl["state"]) == (
        "slurmbed",
        "cluster",
        "Cluster Registered TRES",
        None,
        None,
    )
    f = raw[("gpu04", "DOWN")]
    down = ev(df, "gpu04", _iso(f[3]))
    assert (down["state"], down["reason"], down["reason_user"], down["event_type"]) == (
        "DOWN",
        "slurmbed: simulated node failure",
        "root",
        "node",
    )
    assert down["time_end"] == _iso(f[4]) and down["time_end"] > down["time_start"]
    drain = ev(df, "gpu03", _iso(raw[("gpu03", "DRAIN")][3]))
    assert (drain["state"], drain["time_end"], drain["reason"]) == (
        "DRAIN",
        None,
        "slurmbed: ECC errors on GPU 3",
    )


def test_constructed_capture_with_separator_in_reason_and_hostlist():
    p = parse((FIX / "constructed/sacctmgr_show_event.txt").read_bytes())
    assert p.quarantine.height == 0
    df = p.tables["node_events"]
    assert df.height == 6  # 5 lines, the hostlist gpu[011-012] gives two rows
    xid = ev(df, "gpu007", at(2024, 4, 12, 22, 0, 0))
    assert (xid["reason"], xid["reason_user"], xid["time_end"]) == (
        "xid 79 | GPU fell off the bus",
        "root",
        at(2024, 4, 13, 9, 0, 0),
    )
    assert ev(df, "gpu007", at(2024, 4, 20, 6, 30))["state"] == "IDLE+DRAIN"
    assert ev(df, "gpu003", at(2024, 4, 10, 8, 15))["reason_user"] == "slurm"
    assert {r["node"] for r in df.filter(pl.col("state") == "MAINT").to_dicts()} == {"gpu011", "gpu012"}
    assert set(df["cluster"]) == {"gpucl"}  # the Cluster column wins over --cluster


def test_headerless_with_format_and_local_times():
    p = parse(
        "n1|2024-01-15T10:00:00|Unknown|DOWN|power\n",
        tz="Europe/Berlin",
        fmt="NodeName,TimeStart,TimeEnd,State,Reason",
    )
    row = p.tables["node_events"].row(0, named=True)
    assert (row["cluster"], row["node"], row["time_start"]) == ("here", "n1", at(2024, 1, 15, 9, 0))


def test_bad_lines_are_quarantined():
    text = (
        "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n"
        "c|n1|yesterday|Unknown|DOWN|x|root(0)\nc|n2|2024-01-01T00:00:00\n"
        "c|n3|Unknown|Unknown|DOWN|x|root(0)\n"
    )
    p = parse(text)
    assert p.quarantine["line_no"].to_list() == [2, 3, 4]
    assert p.tables["node_events"].height == 0


def test_cli_ingest_then_query(tmp_path):
    db = tmp_path / "e.duckdb"
    runner = CliRunner()
    res = runner.invoke(
        main, ["--db", str(db), "ingest", "events", str(FIX / "constructed/sacctmgr_show_event.txt")]
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
            "SELECT node, sum(epoch(time_end) - epoch(time_start)) AS s FROM node_events "
            "WHERE time_end IS NOT NULL AND node <> '' GROUP BY node ORDER BY node",
        ],
    )
    assert res.exit_code == 0, res.output
    # gpu003 down 3h30m30s; gpu007 drained 11h; gpu011/gpu012 4h maintenance
    assert res.output.strip().splitlines()[1:] == [
        "gpu003,12630.0",
        "gpu007,39600.0",
        "gpu011,14400.0",
        "gpu012,14400.0",
    ]


_ALPHABET = st.sampled_from(
    list("|\n0123456789-:T abcn")
    + ["Unknown", "2024-01-01T00:00:00", "root(0)", "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"]
)


@given(
    st.one_of(st.binary(max_size=300), st.lists(_ALPHABET, max_size=60).map(lambda xs: "".join(xs).encode()))
)
def test_never_raises_and_every_line_kept_or_quarantined(data):
    _check_total(data)


def _check_total(data: bytes) -> None:
    p = parse(data)
    lines = data.split(b"\n")
    q = set(p.quarantine["line_no"].to_list())
    assert q <= set(range(1, len(lines) + 1))
    header = b""
    for i, line in enumerate(lines, start=1):
        if is_blank(line.decode("utf-8", "replace")) or i in q:
            continue
        again = parse(header + line)
        if again.tables["node_events"].height == 0:
            assert again.quarantine.height == 0 and not header, line  # only the one header line
            header = line + b"\n"
        else:
            assert again.quarantine.height == 0
