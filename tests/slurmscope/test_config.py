from __future__ import annotations

import re

import pytest

from slurmscope.config import ConfigError, load_config
from tests.paths import ROOT


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the price book: a typo, a wrong type, a missing rate field, a negative rate, a mixed entry
        (
            "[billing.rates]\nh100 = { purchase = 15000 }\n",
            "unknown key 'billing.rates.h100.purchase'; did you mean purchase_usd?",
        ),
        ('[billing.rates]\nh100 = "cheap"\n', "key 'billing.rates.h100' expects a $/GPU-hour number"),
        (
            "[billing.rates]\nh100 = { lifetime_years = 4 }\n",
            "key 'billing.rates.h100' needs rate (a $/GPU-hour) or purchase_usd",
        ),
        ("[billing.rates]\nh100 = -1\n", "key 'billing.rates.h100' expects a $/GPU-hour (a number >= 0)"),
        ("[billing.rates]\nh100 = { rate = 2, purchase_usd = 9 }\n", "gives both rate and purchase_usd"),
        (
            "[billing.rates]\nh100 = { purchase_usd = 30000, lifetime_years = 0 }\n",
            "key 'billing.rates.h100.lifetime_years' expects a number > 0, got 0",
        ),
        (
            '[billing.rates]\n"partition:gpu" = { rate = "x" }\n',
            """key 'billing.rates."partition:gpu".rate' expects a number >= 0, got 'x'""",
        ),
        ("[billing.rates]\nH100 = 1\nh100 = 2\n", "name the same GPU model"),
        ("[billing]\nrates = 2.0\n", "key 'billing.rates' expects a table"),
        (
            "[billing]\ndefault_rate_per_gpu_hour = 3\n",
            "unknown key 'billing.default_rate_per_gpu_hour'; it is now billing.rates.default",
        ),
        # ports and addresses
        ("[exporter]\nport = 99999\n", "key 'exporter.port' expects a TCP port (an integer from 1 to 65535)"),
        ("[exporter]\nport = true\n", "key 'exporter.port' expects a TCP port"),
        ("[exporter]\nport = 9400.5\n", "key 'exporter.port' expects a TCP port"),
        ("[nvml]\nport = 0\n", "key 'nvml.port' expects a TCP port"),
        (
            '[exporter]\naddress = "not a host!"\n',
            "key 'exporter.address' expects an IP address or host name",
        ),
        ('[nvml]\nagents = ["gpu-001:9401"]\n', "key 'nvml.agents[0]' expects an agent URL"),
        ('[nvml]\nagents = ["http://gpu-001:99999"]\n', "key 'nvml.agents[0]' expects an agent URL"),
        # list elements, ranges, choices, tables, near misses
        ('[billing]\nreissue_months = ["2026-13"]\n', "key 'billing.reissue_months[0]' expects a month"),
        ("[reliability]\njob_sizes = [1, 0]\n", "key 'reliability.job_sizes[1]' expects an integer >= 1"),
        (
            '[health.xid_actions]\n92 = "drain"\n',
            "key 'health.xid_actions.92' expects 'ignore', 'restart_app'",
        ),
        ('[health.xid_actions]\nx = "ignore"\n', "key 'health.xid_actions.x' is not an XID code"),
        ('[health.xid_actions]\n13 = "reset_gpu"\n', "NVIDIA attributes XID 13 to the application"),
        (
            "[health]\ncritical_xids = [79]\n",
            "unknown key 'health.critical_xids'; it is now health.xid_actions",
        ),
        (
            "[drift]\nbaseline_days = 60\n",
            "key 'drift.baseline_days' expects an integer from 1 to 59, got 60",
        ),
        ("[health]\nevent_window_seconds = 90000\n", "expects an integer from 0 to 86400"),
        ("[billing]\npue = 0.5\n", "key 'billing.pue' expects a number >= 1"),
        ('[slurm]\ntimeout_seconds = "5"\n', "key 'slurm.timeout_seconds' expects a number > 0, got '5'"),
        ("[slurm]\ntimeout_seconds = nan\n", "key 'slurm.timeout_seconds' expects a number > 0"),
        ("[collect]\nsacct_window_seconds = 3600.5\n", "expects an integer >= 1"),
        ('[fairshare]\nusage_reset_period = "fortnightly"\n', "'MONTHLY', 'QUARTERLY' or 'YEARLY'"),
        ('cluster = "x"\n', "key 'cluster' expects a table"),
        ("[biling]\nx = 1\n", "unknown key 'biling'; did you mean billing?"),
        ("[exporter]\nprot = 1\n", "unknown key 'exporter.prot'; did you mean port?"),
        ("[report]\nzzz = 1\n", "unknown key 'report.zzz'; known keys: pseudonymise_users"),
    ],
)
def test_every_nested_key_is_validated_with_its_full_dotted_name(tmp_path, text, message):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p, env={})
    assert str(err.value).startswith(f"{p}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_defaults_validate_and_keep_the_flat_demo_rate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={})
    assert cfg.get("billing", "rates") == {"default": 2.0}
    assert (cfg.get("exporter", "port"), cfg.get("nvml", "port")) == (9400, 9401)


def test_a_price_book_in_the_file_replaces_the_built_in_one(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(
        "[billing.rates]\nh100 = 2.5\n"
        '"partition:preempt" = { rate = 0.8 }\n'
        "a100 = { purchase_usd = 15000, lifetime_years = 4, power_kw = 0.4, usd_per_kwh = 0.12, pue = 1.3,"
        " overhead_usd_per_year = 500, gpus_per_unit = 1 }\n"
    )
    rates = load_config(p, env={}).get("billing", "rates")
    assert set(rates) == {"h100", "partition:preempt", "a100"}  # no built-in default left behind
    assert rates["h100"] == 2.5 and rates["partition:preempt"] == {"rate": 0.8}
    p.write_text("[billing.rates]\nh100 = 3\ndefault = 1\n")
    assert load_config(p, env={}).get("billing", "rates") == {"h100": 3.0, "default": 1.0}


def test_environment_values_are_parsed_and_validated_like_the_file():
    cfg = load_config(
        env={"SLURMSCOPE_RELIABILITY_JOB_SIZES": "1, 8", "SLURMSCOPE_EXPORTER_USER_LABELS": "yes"}
    )
    assert cfg.get("reliability", "job_sizes") == [1, 8] and cfg.get("exporter", "user_labels") is True
    with pytest.raises(ConfigError, match=r"environment SLURMSCOPE_EXPORTER_PORT: key 'exporter.port'"):
        load_config(env={"SLURMSCOPE_EXPORTER_PORT": "70000"})
    with pytest.raises(ConfigError, match="health.xid_actions is a table; set it in the config file"):
        load_config(env={"SLURMSCOPE_HEALTH_XID_ACTIONS": "92=reset_gpu"})
    with pytest.raises(ConfigError, match="billing.rates is a table; set it in the config file"):
        load_config(env={"SLURMSCOPE_BILLING_RATES": "1"})


DOCS = ROOT / "docs"


@pytest.mark.parametrize("doc", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_toml_examples_in_the_docs_load(tmp_path, doc):
    for i, block in enumerate(re.findall(r"```toml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)):
        p = tmp_path / f"example{i}.toml"
        p.write_text(block)
        load_config(p, env={})


def test_xid_actions_override_reads_codes_as_integers(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[health.xid_actions]\n92 = "reset_gpu"\n"62" = "ignore"\n')
    assert load_config(p, env={}).get("health", "xid_actions") == {92: "reset_gpu", 62: "ignore"}


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (
            "[retention]\ngpu_minutes_days = 3\n",
            "key 'retention.gpu_minutes_days' expects 0 (keep everything) or",
        ),
        ("[retention]\ngpu_minutes_days = 7.5\n", "an integer number of days >= 7"),
        ("[retention]\nsacct_lake_months = 2\n", "key 'retention.sacct_lake_months' expects 0 (keep"),
        ("[retention]\nrun_log_days = -1\n", "days >= 1"),
        ("[retention]\ninterval_seconds = 10\n", "key 'retention.interval_seconds' expects an integer >= 60"),
        ("[retention]\nsacct_lake_months = 6\n", "expects 0 while lake.export_dir is empty"),
        ("[retention]\nsnapshot_lake_months = 1\n", "key 'retention.snapshot_lake_months' expects 0 (keep"),
        (
            "[retention]\nsnapshot_lake_months = 3\n",
            "key 'retention.snapshot_lake_months' expects 0 while lake.export_dir is empty",
        ),
    ],
)
def test_retention_periods_are_0_or_at_least_their_minimum(tmp_path, text, expect):
    p = tmp_path / "r.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p, env={})
    assert str(p) in str(err.value) and expect in str(err.value)


def test_retention_defaults_and_a_lake_only_sacct_history(tmp_path):
    assert load_config(None, env={}).raw["retention"] == {
        "gpu_minutes_days": 35,
        "sacct_lake_months": 0,
        "snapshot_lake_months": 0,
        "run_log_days": 7,
        "interval_seconds": 3600,
    }
    p = tmp_path / "r.toml"
    p.write_text(
        '[retention]\nsacct_lake_months = 6\ngpu_minutes_days = 0\n[lake]\nexport_dir = "/srv/lake"\n'
    )
    cfg = load_config(p, env={"SLURMSCOPE_RETENTION_RUN_LOG_DAYS": "0"})
    assert cfg.raw["retention"]["sacct_lake_months"] == 6 and cfg.raw["retention"]["run_log_days"] == 0
