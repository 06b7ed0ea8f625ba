"""The reliability keys that decide incident causes and goodput: validated at load, with the key named."""

from __future__ import annotations

import re

import pytest

from slurmscope.config import ConfigError, load_config


def _load(tmp_path, text: str):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return load_config(p, env={})


def test_reason_patterns_and_costs_load_with_their_defaults(tmp_path):
    cfg = _load(
        tmp_path, '[reliability]\nrestart_cost_seconds = 120\nmaintenance_reasons = "planned|kernel"\n'
    )
    assert cfg.get("reliability", "restart_cost_seconds") == 120
    assert cfg.get("reliability", "maintenance_reasons") == "planned|kernel"
    assert cfg.get("reliability", "incident_merge_seconds") == 300
    for key in ("hardware_reasons", "failure_reasons"):
        re.compile(cfg.get("reliability", key))


@pytest.mark.parametrize(
    ("line", "key", "expected"),
    [
        ('hardware_reasons = "gpu("', "reliability.hardware_reasons", "regular expression"),
        # valid for Python, not for the Rust engine the pipeline matches with
        ('failure_reasons = "(?<=node )down"', "reliability.failure_reasons", "regular expression"),
        ("maintenance_reasons = 5", "reliability.maintenance_reasons", "regular expression"),
        ("incident_merge_seconds = -1", "reliability.incident_merge_seconds", ">= 0"),
        ('restart_cost_seconds = "10m"', "reliability.restart_cost_seconds", "number"),
    ],
)
def test_a_bad_value_fails_at_load_naming_the_key(tmp_path, line, key, expected):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f"[reliability]\n{line}\n")
    assert key in str(err.value) and expected in str(err.value), str(err.value)
