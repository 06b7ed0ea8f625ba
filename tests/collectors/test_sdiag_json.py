"""Slurm's JSON of the scheduler statistics gives the sched_stats row of sdiag's text (real captures).

22.05's sdiag has no --json; its slurmrestd `/slurm/v0.0.38/diag` was captured with the text around it
(tests/slurmbed/capture_state_json.py: text, REST, text, kept only when the two texts give the same
counters). The other versions are real `sdiag --json` and slurmrestd responses of other clusters; the
expected numbers are worked out in the comments with sdiag's own arithmetic (src/sdiag/sdiag.c).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from slurmscope.collectors import sdiag
from slurmscope.collectors.ingest import IngestError, ingest_files

from slurmscope.config import load_config
from slurmscope.db import connect
from tests.paths import FIXTURES

STATE = FIXTURES / "slurm-22.05" / "json-state"
RIVOS = FIXTURES / "rivosinc__prometheus-slurm-exporter"
T0 = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)
# v0.0.38 has no `bf_last_depth` / `bf_last_depth_try` (src/plugins/openapi/v0.0.38/diag.c dumps neither),
# so the JSON row leaves them NULL; raw_text holds what was read (the text, or the JSON document).
NOT_IN_V0_0_38 = {"bf_last_depth", "bf_last_depth_try"}


def row(path: Path | bytes) -> dict:
    data = path if isinstance(path, bytes) else path.read_bytes()
    p = sdiag.parse(data, cluster="c", snapshot_time=T0, tz=UTC)
    assert p.quarantine.height == 0, p.quarantine.to_dicts()
    return p.tables["sched_stats"].row(0, named=True)


@pytest.mark.parametrize("tag", ["a", "b"])
def test_rest_diag_gives_the_text_row_of_the_same_moment(tag: str) -> None:
    text, rest = row(STATE / f"sdiag_text_{tag}.txt"), row(STATE / f"rest_diag_{tag}.json")
    differ = {c for c in text if c != "raw_text" and text[c] != rest[c]}
    assert differ == {c for c in NOT_IN_V0_0_38 if text[c] is not None}
    assert all(rest[c] is None for c in NOT_IN_V0_0_38)
    assert rest["snapshot_time"] == text["snapshot_time"]  # req_time is what `sdiag output at` prints
    assert rest["jobs_submitted"] == text["jobs_submitted"] > 0
    assert rest["main_cycles_per_minute"] is None  # 17 s of data: sdiag prints no rate under 60 s


def test_v0_0_38_of_another_cluster() -> None:
    """Telegraf's 22.05.9 response: req_time 1723103198 - req_time_start 1723075200 = 27998 s = 466 whole
    minutes; 960 cycles // 466 = 2 per minute."""
    r = row(FIXTURES / "influxdata__telegraf" / "slurm_rest" / "diag.json")
    assert r["snapshot_time"] == datetime.fromtimestamp(1723103198, UTC)
    assert r["data_since"] == datetime(2024, 8, 8, tzinfo=UTC)
    assert (r["main_total_cycles"], r["main_cycles_per_minute"], r["main_mean_cycle_us"]) == (960, 2, 137)
    assert (r["bf_total_cycles"], r["bf_max_cycle_us"], r["jobs_running"]) == (12, 811, 100)
    assert r["bf_last_cycle_when"] == datetime.fromtimestamp(1723102514, UTC)
    assert r["bf_table_size_mean"] == 1  # v0.0.38 prints the true table size mean


def test_v0_0_39_table_size_mean_is_unknown() -> None:
    """rivosinc's 23.02.4 `sdiag --json` (meta.plugins, v0.0.39): `bf_table_size_mean` 3371 is the queue
    length mean (242773 // 72 = 3371) under the wrong name, and the sum it needs is not printed: NULL.
    Cycles per minute: 1698885571 - 1698883200 = 2371 s, 39 whole minutes, 3818 // 39 = 97."""
    r = row(RIVOS / "sdiag.json")
    assert (r["bf_queue_length_mean"], r["bf_table_size"], r["bf_table_size_mean"]) == (3371, 65, None)
    assert (r["main_cycles_per_minute"], r["bf_last_depth"], r["bf_last_depth_try"]) == (97, 362, 72)
    assert r["bf_max_cycle_us"] is None  # not in the v0.0.39 document
    assert (r["jobs_pending"], r["jobs_running"]) == (13455, 4993)


def test_v0_0_40_without_backfill_cycles() -> None:
    """lcrownover's 23.11.1 response: bf_cycle_counter 0, so sdiag prints no backfill means (JSON: 0).
    Cycles per minute: 1726764981 - 1726704000 = 60981 s, 1016 minutes, 1065 // 1016 = 1."""
    r = row(FIXTURES / "lcrownover__prometheus-slurm-exporter" / "V0040OpenapiDiagResp.json")
    assert r["bf_total_cycles"] == 0
    assert [r[c] for c in ("bf_mean_cycle_us", "bf_depth_mean", "bf_queue_length_mean")] == [None] * 3
    assert (r["main_total_cycles"], r["main_cycles_per_minute"], r["jobs_pending"]) == (1065, 1, 25)


def test_v0_0_41_and_the_per_minute_rule() -> None:
    """rivosinc's 24.05.5 `sdiag --json` (v0.0.41): 1739832148 - 1739822537 = 9611 s, 160 minutes,
    162 // 160 = 1; `Last cycle when` 0 is sdiag's N/A."""
    r = row(RIVOS / "sdiag_2405.json")
    assert (r["main_cycles_per_minute"], r["bf_last_cycle_when"], r["bf_table_size_mean"]) == (1, None, None)
    doc = json.loads((RIVOS / "sdiag_2405.json").read_bytes())
    stats = doc["statistics"]
    stats["req_time_start"]["number"] = stats["req_time"]["number"] - 60
    # exactly 60 s: v0.0.41 prints a rate from 60 s on (parsers.c `>= 60`), sdiag only past it (`> 60`)
    assert row(json.dumps(doc).encode())["main_cycles_per_minute"] is None


def test_a_version_without_a_capture_is_refused_by_name(tmp_path: Path) -> None:
    doc = json.loads((RIVOS / "sdiag_2405.json").read_bytes())
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.42"
    f = tmp_path / "diag.json"
    f.write_text(json.dumps(doc, indent=1))
    with pytest.raises(IngestError, match=r"v0\.0\.42 is not read"):
        ingest_files(connect(str(tmp_path / "db.duckdb")), load_config(env={}), "sdiag", [f])
    p = sdiag.parse(f.read_bytes(), cluster="c", snapshot_time=T0, tz=UTC)
    assert p.rows == 0 and p.quarantine.height == len(f.read_text().splitlines())


def test_ingest_takes_the_snapshot_time_from_the_document(tmp_path: Path) -> None:
    con = connect(str(tmp_path / "db.duckdb"))
    [res] = ingest_files(con, load_config(env={}), "sdiag", [STATE / "rest_diag_a.json"])
    assert (res.rows, res.warnings) == (1, ())  # no "modification time" warning
    got = con.execute("SELECT snapshot_time, raw_text FROM sched_stats").fetchone()
    assert got[0] == datetime.fromtimestamp(1796396090, UTC)  # statistics.req_time
    assert got[1] == (STATE / "rest_diag_a.json").read_text()
