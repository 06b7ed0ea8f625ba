"""`scontrol show reservation` parser: real captures, multi-line values, zones, GPUs and bad records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from slurmscope.collectors import reservations

from tests.collectors.scontrol_support import FIX, T0, S, at, run

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
