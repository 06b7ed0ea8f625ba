"""Rolling upgrade: spool files of format version 1 (agents not yet upgraded) and rows stored before
migration 0013 keep their documented meaning under the per-cause clock-event columns.

Version 1 `throttle_seconds` counted all five causes (SW power cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW
thermal 0x40, HW power brake 0x80) and `throttle_reasons` is the OR of the reasons seen in the minute
(docs/nvml.md). The expected splits are worked out by hand from those two fields.
"""

from __future__ import annotations

import hashlib
import json

import duckdb
import pytest
from slurmscope.collectors.nvml import ingest_spool_files

from slurmscope.config import load_config
from slurmscope.db import migrate

# (reasons OR, v1 throttle_seconds) -> (throttle_seconds, sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake)
CASES = [
    (0x4, 60.0, (0.0, 60.0, 0.0, 0.0, 0.0, 0.0)),  # at the power cap all minute: not throttled
    (0x8, 30.0, (30.0, 0.0, 30.0, 0.0, 0.0, 0.0)),  # HW slowdown alone
    (0x48, 40.0, (40.0, 0.0, None, 0.0, None, 0.0)),  # two HW causes: all 40 s hardware, the split unknown
    (0x24, 20.0, (0.0, None, 0.0, None, 0.0, 0.0)),  # two SW causes: no hardware
    (0xC, 50.0, (None, None, None, 0.0, 0.0, 0.0)),  # power cap and HW slowdown: how much was HW is unknown
    (0x1, 0.0, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),  # idle
]
COLS = "throttle_seconds, sw_power_cap_seconds, hw_slowdown_seconds, sw_thermal_seconds, hw_thermal_seconds, hw_power_brake_seconds"


def _v1_file(path, records, version=1):
    lines = [
        json.dumps(
            {
                "type": "header",
                "format": "slurmscope-nvml-spool",
                "version": version,
                "node": "gpu01",
                "opened_at": "2027-01-15T08:00:00Z",
                "cluster": None,
            },
            sort_keys=True,
        )
    ] + [json.dumps(r, sort_keys=True) for r in records]
    body = ("\n".join(lines) + "\n").encode()
    footer = {"type": "footer", "records": len(records), "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(body + (json.dumps(footer, sort_keys=True) + "\n").encode())


def _sample(i, reasons, seconds):
    return {
        "type": "sample",
        "gpu_uuid": f"GPU-{i}",
        "gpu_index": i,
        "minute": "2027-01-15T08:00:00Z",
        "samples": 6,
        "throttle_seconds": seconds,
        "throttle_reasons": reasons,
    }


def test_a_version_1_file_loads_with_its_documented_meaning(tmp_path, con):
    f = tmp_path / "gpu01_20270115T080000Z.jsonl"
    _v1_file(f, [_sample(i, r, s) for i, (r, s, _) in enumerate(CASES)])
    ingest_spool_files(con, load_config(env={}), [f])
    got = con.execute(f"SELECT gpu_index, {COLS} FROM gpu_samples ORDER BY gpu_index").fetchall()
    assert [row[1:] for row in got] == [want for _, _, want in CASES]


def test_rows_stored_before_the_migration_are_split_the_same_way(tmp_path):
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    migrate(con, upto=12)
    for i, (r, s, _) in enumerate(CASES):
        con.execute(
            "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, gpu_index, throttle_seconds, throttle_reasons)"
            " VALUES ('c1', 'gpu01', ?, TIMESTAMPTZ '2027-01-15 08:00:00+00', ?, ?, ?)",
            [f"GPU-{i}", i, s, r],
        )
    migrate(con)
    got = con.execute(f"SELECT gpu_index, {COLS} FROM gpu_samples ORDER BY gpu_index").fetchall()
    assert [row[1:] for row in got] == [want for _, _, want in CASES]
    con.close()


@pytest.mark.parametrize("version", [0, 4, "2"])
def test_other_versions_are_still_rejected(tmp_path, version):
    from slurmscope.spool import read_spool_bytes

    f = tmp_path / "x.jsonl"
    _v1_file(f, [], version=version)
    assert read_spool_bytes(f.read_bytes()).problem == f"unsupported spool version {version!r}"
