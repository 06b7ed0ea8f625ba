"""billing.mig_models: the GPU model of MIG GRES types that name none, validated at load."""

from __future__ import annotations

import pytest

from slurmscope.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[billing.mig_models]\na100 = "a100"\n', "key 'billing.mig_models.a100' is not a MIG GRES type"),
        (
            '[billing.mig_models]\n"1g.10gb" = 7\n',
            """key 'billing.mig_models."1g.10gb"' expects a GPU model name""",
        ),
        ('[billing.mig_models]\n"1g.10gb" = " "\n', "expects a GPU model name"),
        ('[billing]\nmig_models = "a100"\n', "key 'billing.mig_models' expects a table"),
    ],
)
def test_bad_entries_fail_at_load_with_the_key(tmp_path, text, message):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p, env={})
    assert str(err.value).startswith(f"{p}: ") and message in str(err.value)


def test_types_are_kept_in_lower_case(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text('[billing.mig_models]\n"1G.10GB" = "a100"\n"nvidia_a100_3g.40gb" = "a100_80g"\n')
    assert load_config(p, env={}).get("billing", "mig_models") == {
        "1g.10gb": "a100",
        "nvidia_a100_3g.40gb": "a100_80g",
    }
    assert load_config(env={}).get("billing", "mig_models") == {}
