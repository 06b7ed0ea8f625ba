"""Config `budgets` with periods: accepted forms normalised to {period, usd, gpu_hours}, and every mistake
refused at load naming the file and the full key."""

from __future__ import annotations

import pytest

from slurmscope.config import ConfigError, load_config


def budgets(tmp_path, text: str):
    path = tmp_path / "slurmscope.toml"
    path.write_text(text)
    return load_config(path, env={}).raw["budgets"]


def test_periods_and_amounts_are_normalised(tmp_path):
    text = """
[budgets]
a = { usd_per_month = 5000 }
b = { period = "quarter", usd = 15000, gpu_hours = 6000 }
c = { period = { start = "2025-09", end = "2026-08" }, gpu_hours = 100000 }
d = { period = "month", gpu_hours = 20 }
"""
    assert budgets(tmp_path, text) == {
        "a": {"period": "month", "usd": 5000.0},
        "b": {"period": "quarter", "usd": 15000.0, "gpu_hours": 6000.0},
        "c": {"period": {"start": "2025-09", "end": "2026-08"}, "gpu_hours": 100000.0},
        "d": {"period": "month", "gpu_hours": 20.0},
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[budgets.a]\nperiod = "week"\nusd = 5\n',
            r"key 'budgets\.a\.period' expects 'month', 'quarter', 'year'",
        ),
        (
            '[budgets.a]\nperiod = "quarter"\nusd_per_month = 5\n',
            r"key 'budgets\.a\.usd_per_month' is a monthly amount but the period is 'quarter': use usd",
        ),
        (
            "[budgets.a]\nusd = 5\nusd_per_month = 5\n",
            r"keys 'budgets\.a\.usd_per_month' and 'budgets\.a\.usd'",
        ),
        ('[budgets.a]\nperiod = "year"\n', r"key 'budgets\.a' needs an amount"),
        (
            '[budgets.a]\nusd = 5\nperiod = { start = "2026-05", end = "2026-04" }\n',
            r"key 'budgets\.a\.period': start 2026-05 is after end 2026-04",
        ),
        (
            '[budgets.a]\nusd = 5\nperiod = { start = "2026-13", end = "2027-01" }\n',
            r"key 'budgets\.a\.period\.start' expects a month 'YYYY-MM', got '2026-13'",
        ),
        (
            '[budgets.a]\nusd = 5\nperiod = { start = "2026-01" }\n',
            r"key 'budgets\.a\.period' needs start and end",
        ),
        (
            '[budgets.a]\nusd = 5\nperiod = { start = "2026-01", end = "2026-02", ends = "x" }\n',
            r"unknown key 'budgets\.a\.period\.ends'; did you mean end\?",
        ),
        ("[budgets.a]\ngpu_hours = -1\n", r"key 'budgets\.a\.gpu_hours' expects a number > 0"),
        ('[budgets.a]\nusd = "lots"\n', r"key 'budgets\.a\.usd' expects a number > 0, got 'lots'"),
    ],
)
def test_mistakes_fail_at_load_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        budgets(tmp_path, text)
