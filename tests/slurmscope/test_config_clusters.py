"""`[[clusters]]`: several clusters in one file, each with its own Slurm access; every key checked with the
file, the full key and what was expected; the single `[cluster]` keeps working."""

from __future__ import annotations

import pytest

from slurmscope.config import PER_CLUSTER_SECTIONS, ConfigError, load_config

TWO = """\
[cluster]
timezone = "Europe/Berlin"

[slurm]
timeout_seconds = 30
bin_dir = "/opt/slurm/bin"

[billing.rates]
default = 2.0

[[clusters]]
name = "alpha"
[clusters.slurm]
conf = "/etc/slurm-alpha/slurm.conf"

[[clusters]]
name = "beta"
timezone = "America/Chicago"
[clusters.slurm]
cluster_flag = true
timeout_seconds = 90
[clusters.nvml]
agents = ["http://beta-gpu-001:9401"]
[clusters.billing.rates]
h100 = 3.5
[clusters.budgets]
ml = { usd_per_month = 1000 }
"""


def _load(tmp_path, text: str, env=None):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return load_config(p, env=env or {})


def test_every_cluster_gets_the_top_level_keys_with_its_own_on_top(tmp_path):
    cfg = _load(tmp_path, TWO)
    assert cfg.clusters == ("alpha", "beta") and cfg.listed
    assert cfg.cluster == "alpha"  # the first listed is the default of --cluster
    alpha, beta = cfg.for_cluster("alpha"), cfg.for_cluster("beta")
    assert (alpha.cluster, str(alpha.timezone)) == ("alpha", "Europe/Berlin")
    assert (beta.cluster, str(beta.timezone)) == ("beta", "America/Chicago")
    assert alpha.get("slurm", "conf") == "/etc/slurm-alpha/slurm.conf" and beta.get("slurm", "conf") == ""
    assert alpha.get("slurm", "timeout_seconds") == 30 and beta.get("slurm", "timeout_seconds") == 90
    assert alpha.slurm_command("sinfo") == beta.slurm_command("sinfo") == "/opt/slurm/bin/sinfo"
    assert alpha.get("nvml", "agents") == [] and beta.get("nvml", "agents") == ["http://beta-gpu-001:9401"]
    # a price book or budget table of an entry replaces the top-level one for that cluster, as in the file
    assert alpha.get("billing", "rates") == {"default": 2.0} and beta.get("billing", "rates") == {"h100": 3.5}
    assert alpha.raw["budgets"] == {} and beta.raw["budgets"] == {"ml": {"period": "month", "usd": 1000.0}}
    assert alpha.clusters == ("alpha",) and beta.clusters == ("beta",)  # a cluster's config serves it alone


def test_slurm_access_per_cluster_its_own_slurm_conf_or_dash_m(tmp_path):
    cfg = _load(tmp_path, TWO)
    alpha, beta = cfg.for_cluster("alpha"), cfg.for_cluster("beta")
    assert alpha.slurm_cluster_args() == [] and beta.slurm_cluster_args() == ["-M", "beta"]
    assert alpha.slurm_environment({"PATH": "/bin"}) == {
        "PATH": "/bin",
        "SLURM_CONF": "/etc/slurm-alpha/slurm.conf",
    }
    assert (
        beta.slurm_environment({"PATH": "/bin"}) is None
    )  # inherit: slurmdbd knows where beta's controller is


def test_the_single_cluster_table_still_works(tmp_path):
    cfg = _load(tmp_path, '[cluster]\nname = "frontier"\n[slurm]\nconf = "/etc/slurm/slurm.conf"\n')
    assert cfg.clusters == ("frontier",) and not cfg.listed
    assert cfg.for_cluster("frontier").get("slurm", "conf") == "/etc/slurm/slurm.conf"
    # a name the file does not list keeps the top-level settings under that name (ingest --cluster x)
    other = cfg.for_cluster("x")
    assert (other.cluster, other.clusters, other.get("slurm", "conf")) == (
        "x",
        ("x",),
        "/etc/slurm/slurm.conf",
    )


def test_an_unlisted_name_under_clusters_keeps_the_top_level_sections(tmp_path):
    other = _load(tmp_path, TWO).for_cluster("gamma")
    assert (other.cluster, other.clusters, other.get("slurm", "conf")) == ("gamma", ("gamma",), "")
    assert str(other.timezone) == "Europe/Berlin"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "clusters = []\n",
            "key 'clusters' expects an array of tables [[clusters]], each with a name, got []",
        ),
        ('clusters = "a,b"\n', "key 'clusters' expects an array of tables"),
        ('[[clusters]]\ntimezone = "UTC"\n', "key 'clusters[0]' needs name = \"<cluster>\""),
        ('[[clusters]]\nname = ""\n', "key 'clusters[0].name' expects a cluster name"),
        ('[[clusters]]\nname = "all"\n', "key 'clusters[0].name' expects a cluster name"),
        ('[[clusters]]\nname = "a/b"\n', "key 'clusters[0].name' expects a cluster name"),
        ("[[clusters]]\nname = 7\n", "key 'clusters[0].name' expects a cluster name"),
        (
            '[[clusters]]\nname = "a"\n[[clusters]]\nname = "A"\n',
            "keys 'clusters[0].name' and 'clusters[1].name' name the same cluster 'A'",
        ),
        ('[[clusters]]\nname = "a"\nslurm_conf = "/x"\n', "unknown key 'clusters[0].slurm_conf'"),
        ('[[clusters]]\nname = "a"\nexporter = { port = 1 }\n', "unknown key 'clusters[0].exporter'"),
        (
            '[[clusters]]\nname = "a"\n[[clusters]]\nname = "b"\ntimezone = "Mars/Base"\n',
            "key 'clusters[1].timezone' expects an IANA time zone",
        ),
        (
            '[[clusters]]\nname = "a"\n[clusters.slurm]\ncluster_flag = "yes"\n',
            "key 'clusters[0].slurm.cluster_flag' expects true or false, got 'yes'",
        ),
        (
            '[[clusters]]\nname = "a"\n[clusters.slurm]\ntimout_seconds = 5\n',
            "unknown key 'clusters[0].slurm.timout_seconds'; did you mean timeout_seconds?",
        ),
        (
            '[[clusters]]\nname = "a"\n[clusters.billing.rates]\nh100 = -1\n',
            "key 'clusters[0].billing.rates.h100' expects a $/GPU-hour",
        ),
        (
            '[[clusters]]\nname = "a"\nbudgets = { ml = 5 }\n',
            "key 'clusters[0].budgets.ml' expects a table",
        ),
        ('[[clusters]]\nname = "a"\nslurm = 3\n', "key 'clusters[0].slurm' expects a table, got 3"),
        ("clusters = [3]\n", "key 'clusters[0]' expects a table with name"),
        (
            '[cluster]\nname = "x"\n[[clusters]]\nname = "a"\n',
            "key 'cluster.name' and [[clusters]] both name clusters",
        ),
        ('[cluster]\nname = "all"\n', "key 'cluster.name' expects a cluster name"),
        ("[slurm]\ncluster_flag = 1\n", "key 'slurm.cluster_flag' expects true or false, got 1"),
        ("[slurm]\nconf = 1\n", "key 'slurm.conf' expects a string, got 1"),
    ],
)
def test_every_cluster_key_is_checked_with_file_key_and_expectation(tmp_path, text, message):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(p, env={})
    assert str(err.value).startswith(f"{p}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_the_environment_cannot_name_a_cluster_when_the_file_lists_them(tmp_path):
    with pytest.raises(
        ConfigError, match="SLURMSCOPE_CLUSTER_NAME: .* lists \\[\\[clusters\\]\\]; choose one with --cluster"
    ):
        _load(tmp_path, TWO, env={"SLURMSCOPE_CLUSTER_NAME": "x"})
    # environment keys set the top level; an entry's own key still wins for its cluster
    cfg = _load(tmp_path, TWO, env={"SLURMSCOPE_SLURM_TIMEOUT_SECONDS": "12"})
    assert cfg.for_cluster("alpha").get("slurm", "timeout_seconds") == 12
    assert cfg.for_cluster("beta").get("slurm", "timeout_seconds") == 90


@pytest.mark.parametrize("section", PER_CLUSTER_SECTIONS)
def test_each_per_cluster_section_overrides_only_its_cluster(tmp_path, section):
    from slurmscope.config import SCHEMA, Table

    spec = SCHEMA.fields[section]
    if isinstance(spec, Table):
        key, value = {
            "slurm": ("sinfo", "/opt/beta/sinfo"),
            "collect": ("sacct_window_seconds", 600),
            "nvml": ("spool_paths", ["/shared/beta-spool"]),
            "fairshare": ("algorithm", "classic"),
            "billing": ("timezone", "Asia/Tokyo"),
        }[section]
        text = (
            f'[[clusters]]\nname = "a"\n[[clusters]]\nname = "b"\n[clusters.{section}]\n{key} = {value!r}\n'
        )
        text = text.replace("'", '"')
        cfg = _load(tmp_path, text)
        assert cfg.for_cluster("b").raw[section][key] == value
        assert cfg.for_cluster("a").raw[section][key] == spec.fields[key].default
    else:
        cfg = _load(
            tmp_path,
            f'[[clusters]]\nname = "a"\n[[clusters]]\nname = "b"\n[clusters.{section}]\nml = {{ gpu_hours_per_month = 10 }}\n',
        )
        # the monthly shorthand reads as a budget of period "month"
        assert cfg.for_cluster("b").raw[section] == {"ml": {"period": "month", "gpu_hours": 10.0}}
        assert cfg.for_cluster("a").raw[section] == spec.default
