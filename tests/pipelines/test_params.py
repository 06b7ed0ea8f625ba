"""The run parameters: each typed section is its config section, so every default lives in config.DEFAULTS."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, date, datetime

from slurmscope.pipelines.params import SECTIONS, Params
from slurmscope.pipelines.runner import Window, pipeline_params

from slurmscope.config import DEFAULTS, load_config


def test_every_section_field_is_a_config_key_and_every_key_a_field():
    for name, cls in SECTIONS.items():
        assert {f.name for f in fields(cls)} == set(DEFAULTS[name]), name
    assert set(SECTIONS) <= {f.name for f in fields(Params)}


def test_built_from_the_config_and_the_window():
    cfg = load_config(env={}).with_overrides(
        billing={"timezone": "Europe/Berlin"}, drift={"baseline_days": 9}
    )
    start, now = datetime(2026, 3, 1, 23, tzinfo=UTC), datetime(2026, 3, 5, tzinfo=UTC)
    p = pipeline_params(cfg, Window(start, now, False))
    assert (p.tz, p.start_date, p.start_month, p.full) == (
        "Europe/Berlin",
        date(2026, 3, 2),
        date(2026, 3, 1),
        False,
    )
    assert p.drift.baseline_days == 9
    assert p.fairshare.decay_half_life_seconds == DEFAULTS["fairshare"]["decay_half_life_seconds"]
    assert p.sql() == {
        "cluster": "default",
        "now": now,
        "start": start,
        "end": now,
        "tz": "Europe/Berlin",
        "start_date": date(2026, 3, 2),
        "start_month": date(2026, 3, 1),
        "util_bin_percent": 10.0,
        # the 1 h event window (longer than 15 min sample age + 15 min throttle window) and 10 minutes
        "health_whole_us": 4_200_000_000,
    }
