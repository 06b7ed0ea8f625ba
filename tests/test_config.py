from __future__ import annotations

import pytest

from slurmscope.config import ConfigError, load_config


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={})
    assert cfg.cluster == "default"
    assert cfg.db_path == "slurmscope.duckdb"
    assert cfg.source == "built-in defaults"


def test_file_and_environment_overrides(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[cluster]\nname = "frontier"\ntimezone = "Europe/Berlin"\n[slurm]\ntimeout_seconds = 5\n')
    cfg = load_config(p, env={"SLURMSCOPE_SLURM_TIMEOUT_SECONDS": "9", "SLURMSCOPE_CLUSTER_NAME": "x"})
    assert cfg.cluster == "x"
    assert cfg.get("slurm", "timeout_seconds") == 9.0
    assert str(cfg.timezone) == "Europe/Berlin"


@pytest.mark.parametrize(
    ("text", "key", "expect"),
    [
        ('[cluster]\ntimezone = "Mars/Olympus"\n', "cluster.timezone", "IANA time zone"),
        ('[slurm]\ntimeout_seconds = "soon"\n', "slurm.timeout_seconds", "expects a number"),
        ("[collect]\nsacct_overlap_seconds = -5\n", "collect.sacct_overlap_seconds", ">= 0"),
        ('[cluster]\nnmae = "x"\n', "cluster.nmae", "unknown key"),
        ('[exporter]\nuser_labels = "maybe"\n', "exporter.user_labels", "true or false"),
    ],
)
def test_invalid_file_names_file_key_and_expectation(tmp_path, text, key, expect):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p, env={})
    msg = str(err.value)
    assert str(p) in msg and key in msg and expect in msg


def test_unknown_environment_override_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="SLURMSCOPE_NOPE_X"):
        load_config(env={"SLURMSCOPE_NOPE_X": "1"})


def test_not_toml_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[cluster\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p, env={})
