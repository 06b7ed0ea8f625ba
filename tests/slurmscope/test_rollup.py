"""Hourly rollups equal the minutes they replace: one rule per column, hand-made minutes and a property."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slurmscope.collectors import nvml

from slurmscope import rollup
from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.retention import Step, roll_up, run_retention
from slurmscope.rollup import RULES, Agg

H0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
NOW = datetime(2026, 4, 1, tzinfo=UTC)
DAY = Step("gpu_samples", "c", datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC))


@pytest.fixture(scope="module")
def mem():
    c = connect(":memory:")
    yield c
    c.close()


@pytest.fixture
def db(mem):
    for table in (
        "gpu_samples",
        "gpu_samples_hourly",
        "gpu_nvlink_errors",
        "retention_state",
        "retention_runs",
    ):
        mem.execute(f"DELETE FROM {table}")
    return mem


def _insert(con, rows: list[dict]) -> None:
    for r in rows:
        r = {"node": "n1", "gpu_uuid": "GPU-a", **r}
        cols = ["cluster", *r]
        con.execute(
            f"INSERT INTO gpu_samples ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            ["c", *r.values()],
        )


def _hourly(con) -> list[dict]:
    cur = con.execute("SELECT * FROM gpu_samples_hourly ORDER BY node, gpu_uuid, hour")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


# ---- one rule per column ---------------------------------------------------------------------------------


def test_every_gpu_samples_column_has_a_rollup_rule(mem):
    """A column added to gpu_samples (GPM activity, violation times, per-link NVLink, ...) without a line in
    rollup.RULES fails here: retention would otherwise drop it from every hour it rolls up."""
    columns = list(rollup.column_types(mem, "gpu_samples"))
    unruled = [c for c in columns if c not in (*rollup.KEYS, "minute") and c not in RULES]
    assert unruled == []
    assert [c for c in RULES if c not in columns] == []


def test_the_hourly_table_has_every_ruled_column_with_its_minute_type(mem):
    minute = rollup.column_types(mem, "gpu_samples")
    hourly = rollup.column_types(mem, "gpu_samples_hourly")
    assert list(hourly) == [*rollup.HOURLY_KEYS, *rollup.HOURLY_EXTRA, *[c for c in minute if c in RULES]]
    assert {c: hourly[c] for c in RULES} == {c: minute[c] for c in RULES}
    assert hourly["hour"] == minute["minute"] == "TIMESTAMP WITH TIME ZONE"


def test_the_loaders_minute_merge_follows_the_same_rules():
    """Two partial records of one minute (collectors/nvml.py) and the minutes of one hour combine alike, but
    for the counters that only grow and the link settings of spool version 3 (nvml.LATEST_V3): the loader
    keeps the later of two chunks of a minute, the rollup the highest of an hour's minutes (for a counter that
    only grows, the same reading: its last), and a retirement pending in any minute is pending for the hour."""
    expected = {
        **dict.fromkeys(nvml._WMEAN, Agg.MEAN),
        **dict.fromkeys(nvml.GPM_COLUMNS, Agg.MEAN),
        **dict.fromkeys(nvml._MAX, Agg.MAX),
        **dict.fromkeys(nvml._ADD, Agg.SUM),
        **dict.fromkeys(nvml._LATEST, Agg.LAST),
        **dict.fromkeys(nvml.LATEST_V3, Agg.MAX),
        "retired_pages_pending": Agg.BOOL_OR,
        "samples": Agg.SUM,
        "throttle_reasons": Agg.BIT_OR,
        "activity_source": Agg.SOURCE,
    }
    assert expected == RULES
    # the GPM means are weighted by the readings that had GPM values, as merge_samples weights them
    assert {c: rollup.weight_of(c) for c in RULES if RULES[c] is Agg.MEAN} == {
        **dict.fromkeys(nvml._WMEAN, "samples"),
        **dict.fromkeys(nvml.GPM_COLUMNS, "gpm_samples"),
    }


# ---- hand-made minutes -----------------------------------------------------------------------------------


def test_hand_made_minutes_roll_up_to_the_hand_computed_hour(db):
    m = lambda k: H0 + timedelta(minutes=k)  # noqa: E731
    _insert(
        db,
        [
            # minute 10:05, 6 readings; 10:20, 3 readings (an agent restart); 10:59, 6 readings; 11:00 alone
            dict(
                minute=m(5),
                samples=6,
                util_gpu_mean=50.0,
                util_gpu_max=70.0,
                power_mean_watts=300.0,
                energy_joules=18000.0,
                throttle_seconds=10.0,
                throttle_reasons=8,
                ecc_corrected_delta=2,
                ecc_corrected_total=10,
                remapped_pending=False,
                temp_gpu_max_celsius=70.0,
                model="H100",
            ),
            dict(
                minute=m(20),
                samples=3,
                util_gpu_mean=80.0,
                util_gpu_max=95.0,
                power_mean_watts=None,
                energy_joules=9000.0,
                throttle_seconds=0.0,
                throttle_reasons=4,
                ecc_corrected_delta=0,
                ecc_corrected_total=12,
                remapped_pending=True,
                temp_gpu_max_celsius=88.5,
                model="H100",
            ),
            dict(
                minute=m(59),
                samples=6,
                util_gpu_mean=60.0,
                util_gpu_max=None,
                power_mean_watts=500.0,
                energy_joules=30000.0,
                throttle_seconds=5.5,
                throttle_reasons=None,
                ecc_corrected_delta=1,
                ecc_corrected_total=None,
                remapped_pending=None,
                temp_gpu_max_celsius=71.0,
                model="H100",
            ),
            dict(minute=m(60), samples=6, util_gpu_mean=10.0, energy_joules=100.0, model="H100"),
        ],
    )
    (done,) = roll_up(db, DAY, NOW)
    assert (done.rows_removed, done.rows_written) == (4, 2)
    ten, eleven = _hourly(db)
    assert ten["hour"] == H0 and eleven["hour"] == H0 + timedelta(hours=1)
    assert ten["minutes"] == 3
    assert ten["minute_mask"] == (1 << 5) | (1 << 20) | (1 << 59)
    assert ten["samples"] == 15  # 6 + 3 + 6
    # utilisation mean over the readings: (50*6 + 80*3 + 60*6) / (6 + 3 + 6) = 900 / 15 = 60
    assert ten["util_gpu_mean"] == 60.0
    # power over the readings that had one: (300*6 + 500*6) / 12 = 400
    assert ten["power_mean_watts"] == 400.0
    assert ten["util_gpu_max"] == 95.0 and ten["temp_gpu_max_celsius"] == 88.5
    assert ten["energy_joules"] == 57000.0  # 18000 + 9000 + 30000
    assert ten["throttle_seconds"] == 15.5
    assert ten["throttle_reasons"] == 12  # 8 | 4
    assert ten["ecc_corrected_delta"] == 3
    assert ten["ecc_corrected_total"] == 12  # the last minute that read it (10:20; 10:59 had none)
    assert ten["remapped_pending"] is True
    assert eleven["minutes"] == 1 and eleven["minute_mask"] == 1 and eleven["util_gpu_mean"] == 10.0
    assert db.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 0
    assert db.execute("SELECT boundary FROM retention_state").fetchall() == [(DAY.end,)]


def test_per_link_nvlink_rows_go_with_the_minutes_their_gpu_sums_stay_in_the_rollup(db):
    """Retention bounds gpu_nvlink_errors too: a rolled-up hour's per-link rows are deleted (an hour with
    link rows only as well), counted in retention_runs; the GPU's sum over its links is in the hourly row."""

    def link(minute: datetime, n: int, flit: int) -> None:
        db.execute(
            "INSERT INTO gpu_nvlink_errors (cluster, node, gpu_uuid, minute, link, crc_flit_delta)"
            " VALUES ('c', 'n1', 'GPU-a', ?, ?, ?)",
            [minute, n, flit],
        )

    _insert(db, [dict(minute=H0 + timedelta(minutes=5), samples=6, nvlink_crc_flit_delta=7)])
    link(H0 + timedelta(minutes=5), 0, 3)
    link(H0 + timedelta(minutes=5), 3, 4)
    link(datetime(2026, 3, 3, 8, 30, tzinfo=UTC), 1, 2)  # its minute's sample was never loaded
    kept = datetime(2026, 3, 30, 8, 0, tzinfo=UTC)  # after the cut (7 days before NOW)
    link(kept, 2, 1)
    cfg = load_config(None, env={}).with_overrides(cluster={"name": "c"}, retention={"gpu_minutes_days": 7})
    run_retention(db, cfg, now=NOW)
    assert db.execute("SELECT minute, link FROM gpu_nvlink_errors").fetchall() == [(kept, 2)]
    assert (
        db.execute(
            "SELECT sum(rows_removed) FROM retention_runs WHERE table_name = 'gpu_nvlink_errors'"
        ).fetchone()[0]
        == 3
    )
    (ten,) = _hourly(db)
    assert ten["hour"] == H0 and ten["nvlink_crc_flit_delta"] == 7  # = 3 + 4, the two links removed


def test_read_back_as_minutes_an_hour_keeps_its_minutes_and_its_sums(db):
    m = lambda k: H0 + timedelta(minutes=k)  # noqa: E731
    _insert(
        db,
        [
            dict(minute=m(1), samples=6, energy_joules=100.0, ecc_corrected_delta=5, util_gpu_mean=10.0),
            dict(minute=m(2), samples=5, energy_joules=200.0, ecc_corrected_delta=0, util_gpu_mean=20.0),
            dict(minute=m(40), samples=6, energy_joules=300.0, ecc_corrected_delta=2, util_gpu_mean=30.0),
        ],
    )
    roll_up(db, DAY, NOW)
    rows = db.execute(
        "SELECT minute, samples, energy_joules, ecc_corrected_delta, util_gpu_mean"
        " FROM gpu_minutes('c', TIMESTAMPTZ '2026-03-02 00:00:00+00', TIMESTAMPTZ '2026-03-03 00:00:00+00')"
        " ORDER BY minute"
    ).fetchall()
    # the three sampled minutes come back; 17 readings and 600 J spread evenly; 7 ECC errors as whole units,
    # the first 7 mod 3 = 1 minute taking the extra one (3, 2, 2); the mean (10*6 + 20*5 + 30*6) / 17 = 20
    assert [r[0] for r in rows] == [m(1), m(2), m(40)]
    assert [r[1] for r in rows] == [6, 6, 5]
    assert [r[2] for r in rows] == [200.0] * 3
    assert [r[3] for r in rows] == [3, 2, 2]
    assert [r[4] for r in rows] == [20.0] * 3


def test_a_minute_that_arrives_after_its_hour_was_rolled_up_is_merged_once(db):
    m = lambda k: H0 + timedelta(minutes=k)  # noqa: E731
    _insert(
        db, [dict(minute=m(1), samples=6, energy_joules=100.0, util_gpu_mean=10.0, ecc_corrected_total=1)]
    )
    roll_up(db, DAY, NOW)
    # a late minute (an agent back after days) and the other half of minute 1 (same minute, 3 more readings)
    _insert(
        db,
        [
            dict(minute=m(30), samples=6, energy_joules=50.0, util_gpu_mean=40.0, ecc_corrected_total=4),
            dict(minute=m(1), samples=3, energy_joules=25.0, util_gpu_mean=70.0),
        ],
    )
    window = ("c", datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC))
    # until retention runs again, readers take the hour as rolled up (the late rows are below the boundary)
    assert db.execute("SELECT count(*) FROM gpu_minutes(?, ?, ?)", list(window)).fetchone()[0] == 1
    roll_up(db, DAY, NOW)
    (hour,) = _hourly(db)
    assert (hour["minutes"], hour["minute_mask"], hour["samples"]) == (2, (1 << 1) | (1 << 30), 15)
    assert hour["energy_joules"] == 175.0
    # (10*6 + 40*6 + 70*3) / 15 = 510 / 15 = 34
    assert hour["util_gpu_mean"] == pytest.approx(34.0)
    assert hour["ecc_corrected_total"] == 4  # minute 30's, the latest that read it
    assert db.execute("SELECT count(*) FROM gpu_minutes(?, ?, ?)", list(window)).fetchone()[0] == 2


def test_gpm_minutes_and_gpu_util_minutes_of_one_hour_are_rows_of_their_own(db):
    """An agent that read GPM for part of an hour (GPM unsupported for a while, or switched on): the GPM
    minutes and the GPU_UTIL minutes are two rows, so useful GPU-hours and GPM-measured seconds keep their
    minutes; the new counters roll up by their rules."""
    m = lambda k: H0 + timedelta(minutes=k)  # noqa: E731
    common = dict(samples=6, util_gpu_mean=90.0, pcie_link_width=16)
    _insert(
        db,
        [
            dict(
                minute=m(1),
                **common,
                gpm_samples=6,
                sm_active_mean=40.0,
                tensor_active_mean=10.0,
                activity_source="gpm",
                nvlink_crc_flit_total=100,
                pcie_link_gen=5,
                retired_pages_sbe=2,
                retired_pages_pending=False,
                violation_power_seconds=12.5,
            ),
            dict(
                minute=m(2),
                **common,
                gpm_samples=3,  # half the readings had GPM values
                sm_active_mean=70.0,
                tensor_active_mean=None,
                activity_source="gpm",
                nvlink_crc_flit_total=104,
                pcie_link_gen=4,  # trained down
                retired_pages_sbe=3,
                retired_pages_pending=True,
                violation_power_seconds=0.5,
            ),
            dict(
                minute=m(3),
                **common,
                gpm_samples=0,
                activity_source="gpu_util",
                nvlink_crc_flit_total=None,
                pcie_link_gen=4,
                retired_pages_sbe=3,
                retired_pages_pending=False,
                violation_power_seconds=7.0,
            ),
            dict(minute=m(4), samples=6, activity_source=None),  # read, but neither value
        ],
    )
    roll_up(db, DAY, NOW)
    rows = {h["activity_source"]: h for h in _hourly(db)}
    assert set(rows) == {"gpm", "gpu_util", None}
    gpm, util = rows["gpm"], rows["gpu_util"]
    assert (gpm["minute_mask"], util["minute_mask"], rows[None]["minute_mask"]) == (0b110, 0b1000, 0b10000)
    assert gpm["gpm_samples"] == 9 and gpm["samples"] == 12
    # SM activity over the GPM readings: (40*6 + 70*3) / (6 + 3) = 450 / 9 = 50; tensor: minute 1's alone
    assert gpm["sm_active_mean"] == 50.0 and gpm["tensor_active_mean"] == 10.0
    assert gpm["nvlink_crc_flit_total"] == 104 and gpm["pcie_link_gen"] == 5 and gpm["retired_pages_sbe"] == 3
    assert gpm["retired_pages_pending"] is True and gpm["violation_power_seconds"] == 13.0
    assert util["sm_active_mean"] is None and util["gpm_samples"] == 0 and util["util_gpu_mean"] == 90.0
    # read back as minutes: the same minutes with the same sources, and the GPM readings' sum kept
    back = db.execute(
        "SELECT minute, activity_source, gpm_samples FROM gpu_minutes('c', ?, ?) ORDER BY minute",
        [DAY.start, DAY.end],
    ).fetchall()
    assert [(r[0], r[1]) for r in back] == [(m(1), "gpm"), (m(2), "gpm"), (m(3), "gpu_util"), (m(4), None)]
    assert [r[2] for r in back[:2]] == [5, 4]  # 9 readings over 2 minutes, whole units: 5 + 4


def test_a_minute_that_counted_errors_is_a_row_of_its_own(db):
    """Health judges NVLink and PCIe errors minute by minute against DCGM's limits: spread over the hour,
    12 replays in one minute would read as 4 in each of three."""
    m = lambda k: H0 + timedelta(minutes=k)  # noqa: E731
    _insert(
        db,
        [
            dict(minute=m(10), samples=6, nvlink_replay_delta=0, pcie_replay_delta=0, pcie_link_gen=4),
            dict(minute=m(11), samples=6, nvlink_replay_delta=12, pcie_replay_delta=0, pcie_link_gen=3),
            dict(minute=m(12), samples=6, nvlink_replay_delta=0, pcie_replay_delta=None, pcie_link_gen=4),
        ],
    )
    roll_up(db, DAY, NOW)
    assert sorted((h["minute_mask"], h["nvlink_replay_delta"], h["pcie_link_gen"]) for h in _hourly(db)) == [
        (1 << 11, 12, 3),
        ((1 << 10) | (1 << 12), 0, 4),
    ]
    back = db.execute(
        "SELECT minute, nvlink_replay_delta, pcie_link_gen FROM gpu_minutes('c', ?, ?) ORDER BY minute",
        [DAY.start, DAY.end],
    ).fetchall()
    assert back == [(m(10), 0, 4), (m(11), 12, 3), (m(12), 0, 4)]


def test_a_late_gpm_chunk_of_a_rolled_up_minute_makes_it_a_gpm_minute_once(db):
    """The loader's rule for two chunks of one minute (any GPM reading makes it a GPM minute) holds when the
    second chunk arrives after the first was rolled up."""
    m1 = H0 + timedelta(minutes=1)
    _insert(db, [dict(minute=m1, samples=3, util_gpu_mean=50.0, gpm_samples=0, activity_source="gpu_util")])
    roll_up(db, DAY, NOW)
    _insert(
        db,
        [
            dict(
                minute=m1,
                samples=3,
                util_gpu_mean=70.0,
                gpm_samples=3,
                sm_active_mean=30.0,
                activity_source="gpm",
                pcie_replay_delta=2,  # and it counted errors: a row of its own either way
            )
        ],
    )
    roll_up(db, DAY, NOW)
    (hour,) = _hourly(db)
    assert (hour["activity_source"], hour["minutes"], hour["samples"], hour["gpm_samples"]) == (
        "gpm",
        1,
        6,
        3,
    )
    assert hour["util_gpu_mean"] == 60.0 and hour["sm_active_mean"] == 30.0 and hour["pcie_replay_delta"] == 2


# ---- property: any minutes --------------------------------------------------------------------------------

MINUTE_TYPES = {
    c: t for c, t in rollup.column_types(connect(":memory:"), "gpu_samples").items() if c in RULES
}


def _value(kind: str):
    if kind in ("INTEGER", "BIGINT"):
        return st.one_of(st.none(), st.integers(0, 10_000))
    if kind == "DOUBLE":
        return st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False).map(lambda x: round(x, 3)))
    if kind == "BOOLEAN":
        return st.one_of(st.none(), st.booleans())
    return st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))


def _source(row: dict) -> str | None:
    """The loader's activity source of a minute (collectors/nvml.py activity_source)."""
    if (row["gpm_samples"] or 0) > 0:
        return "gpm"
    return "gpu_util" if row["util_gpu_mean"] is not None else None


@st.composite
def minutes(draw) -> list[dict]:
    rows = []
    for gpu in ("GPU-a", "GPU-b"):
        for k in sorted(draw(st.sets(st.integers(0, 179), min_size=1, max_size=25))):
            row = {c: draw(_value(t)) for c, t in MINUTE_TYPES.items()}
            row["samples"] = draw(st.integers(1, 6))
            for c in rollup.EVENT_COLUMNS:  # errors in a few minutes, as on a real fleet
                row[c] = draw(st.sampled_from([None, 0, 0, 0, 0, 3]))
            if (row["gpm_samples"] or 0) > 0 and row["sm_active_mean"] is None:
                row["sm_active_mean"] = 50.0  # the agent writes the GPM means with the readings that had them
            row["activity_source"] = _source(row)
            rows.append({"gpu_uuid": gpu, "minute": H0 + timedelta(minutes=k), **row})
    return rows


def _key(r: dict) -> tuple:
    """A minute's rollup row: GPU, hour, activity source, and the minute itself when it counted errors."""
    event = any((r[c] or 0) > 0 for c in rollup.EVENT_COLUMNS)
    return (
        r["gpu_uuid"],
        r["minute"].replace(minute=0),
        r["activity_source"],
        r["minute"] if event else None,
    )


def _expected(rows: list[dict]) -> dict[tuple, dict]:
    """Each rule computed directly in Python."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(_key(r), []).append(r)
    out = {}
    for key, rs in groups.items():
        e = {"minutes": len(rs), "minute_mask": sum(1 << r["minute"].minute for r in rs)}
        for c, agg in RULES.items():
            weight = rollup.weight_of(c)
            vals = [(r[c], r[weight] or 0, r["minute"]) for r in rs if r[c] is not None]
            if agg is Agg.SOURCE:
                e[c] = key[2]
            elif not vals:
                e[c] = None
            elif agg is Agg.SUM:
                e[c] = sum(v for v, _, _ in vals)
            elif agg is Agg.MAX:
                e[c] = max(v for v, _, _ in vals)
            elif agg is Agg.BIT_OR:
                e[c] = 0
                for v, _, _ in vals:
                    e[c] |= v
            elif agg is Agg.BOOL_OR:
                e[c] = any(v for v, _, _ in vals)
            elif agg is Agg.LAST:
                e[c] = max(vals, key=lambda x: x[2])[0]
            elif sum(w for _, w, _ in vals) > 0:
                e[c] = sum(v * w for v, w, _ in vals) / sum(w for _, w, _ in vals)
            else:  # no reading weighs: the plain mean (a GPM value with gpm_samples 0)
                e[c] = sum(v for v, _, _ in vals) / len(vals)
        out[key] = e
    return out


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    return a == b


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=minutes())
def test_rollups_equal_the_minutes_they_replace(db, rows):
    for table in (
        "gpu_samples",
        "gpu_samples_hourly",
        "gpu_nvlink_errors",
        "retention_state",
        "retention_runs",
    ):
        db.execute(f"DELETE FROM {table}")
    _insert(db, rows)
    window = ["c", datetime(2026, 3, 2, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC)]
    sums = [c for c, a in RULES.items() if a is Agg.SUM and MINUTE_TYPES[c] in ("INTEGER", "BIGINT")]
    per_hour = (
        f"SELECT gpu_uuid, {rollup.hour_of('minute')} AS h, count(*), "
        + ", ".join(f"sum({c})" for c in sums)
        + " FROM gpu_minutes(?, ?, ?) GROUP BY ALL ORDER BY ALL"
    )
    before = db.execute(per_hour, window).fetchall()
    # each minute's source and error counts, and the GPM-weighted SM activity per hour and source
    per_minute = "SELECT gpu_uuid, minute, activity_source, " + ", ".join(
        f"coalesce({c}, 0)" for c in rollup.EVENT_COLUMNS
    )
    per_minute += " FROM gpu_minutes(?, ?, ?) ORDER BY ALL"
    gpm_weighted = (
        f"SELECT gpu_uuid, {rollup.hour_of('minute')} AS h, activity_source,"
        " sum(sm_active_mean * gpm_samples) FROM gpu_minutes(?, ?, ?) GROUP BY ALL ORDER BY ALL"
    )
    before_minutes = db.execute(per_minute, window).fetchall()
    before_gpm = db.execute(gpm_weighted, window).fetchall()
    roll_up(db, DAY, NOW)
    hourly = _hourly(db)
    got = {}
    for h in hourly:
        event = h["hour"] + timedelta(minutes=h["minute_mask"].bit_length() - 1)
        event_row = any((h[c] or 0) > 0 for c in rollup.EVENT_COLUMNS)
        got[(h["gpu_uuid"], h["hour"], h["activity_source"], event if event_row else None)] = h
    assert len(got) == len(hourly)
    want = _expected(rows)
    assert got.keys() == want.keys()
    for key, e in want.items():
        bad = {c: (got[key][c], v) for c, v in e.items() if not _close(got[key][c], v)}
        assert bad == {}, key
    # read back as minutes: the same minutes with their sources and error counts, every integer sum per
    # hour exactly, and the GPM readings' SM activity (mean x readings) per hour and source
    assert db.execute(per_minute, window).fetchall() == before_minutes
    assert db.execute(per_hour, window).fetchall() == before
    after_gpm = db.execute(gpm_weighted, window).fetchall()
    assert [r[:3] for r in after_gpm] == [r[:3] for r in before_gpm]
    assert all(_close(a[3], b[3]) for a, b in zip(after_gpm, before_gpm, strict=True) if b[3] is not None)


def test_the_configuration_page_lists_every_rule():
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    names = {
        "sum": Agg.SUM,
        "max": Agg.MAX,
        "mean weighted by `samples`": Agg.MEAN,
        "mean weighted by `gpm_samples`": Agg.MEAN,
        "bitwise or": Agg.BIT_OR,
        "boolean or": Agg.BOOL_OR,
        "last non-null": Agg.LAST,
        "activity source": Agg.SOURCE,
    }
    documented, weights = {}, {}
    for rule, agg in names.items():
        (row,) = [line for line in doc.splitlines() if line.startswith(f"| {rule} | ")]
        cols = re.findall(r"`(\w+)`", row.split(" | ")[1])
        documented.update(dict.fromkeys(cols, agg))
        if agg is Agg.MEAN:
            weights.update(dict.fromkeys(cols, re.findall(r"`(\w+)`", rule)[0]))
    assert documented == RULES
    assert weights == {c: rollup.weight_of(c) for c in RULES if RULES[c] is Agg.MEAN}
