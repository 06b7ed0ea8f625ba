"""docs/deployment.md works as written: its titled blocks run against the Slurm test bed and a real Prometheus.

The page's blocks are extracted, not copied, so an edit to the page is an edit to what is tested. Only what
a test must is changed: the paths go under a temporary prefix per simulated host (one head node, two GPU
nodes, one Prometheus host), ports are free ones, the cluster name is the bed's, SLURM_CONF points at the
bed, scrape intervals are seconds instead of minutes, the agents sample a fake NVML, and the TLS variant
gets a self-signed certificate and real bcrypt hashes. Each unit's ExecStart runs with its Environment= lines
in its WorkingDirectory, as systemd would start it (systemd itself is not needed).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
import yaml
from slurmscope.dashboards.build import MODULES

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deployment.md"
BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.M | re.S)
VENV = "/opt/slurmscope/.venv"
# Every absolute root the page names, moved under the prefix of the host it is on.
ROOTS = (
    "/opt/slurmscope",
    "/etc/slurmscope",
    "/var/lib/slurmscope",
    "/var/spool/slurmscope",
    "/run/slurmscope",
    "/var/backups",
    "/etc/prometheus",
    "/etc/grafana",
    "/var/lib/grafana",
    "/usr/local/lib/slurmscope",
)
HOSTS = ("headnode", "gpu01", "gpu02")
DOC_PORT = {"headnode": 9400, "gpu01": 9401, "gpu02": 9401}
SCRAPE_SECONDS = 2


def blocks() -> dict[str, str]:
    found = {title: body for _, title, body in BLOCK.findall(PAGE.read_text(encoding="utf-8"))}
    assert found, "docs/deployment.md has no titled blocks"
    return found


def localize(text: str, prefix: Path) -> str:
    """The page's text as it reads on a host whose root is `prefix` (the venv is this test's own)."""
    text = text.replace(VENV, sys.prefix)
    rx = re.compile("|".join(re.escape(r) for r in sorted(ROOTS, key=len, reverse=True)) + r"(?=[/\s\"']|$)")
    return rx.sub(lambda m: str(prefix) + m.group(0), text)


def unit(text: str) -> dict[str, list[str]]:
    """[Service] keys of a systemd unit, each with every value it was given."""
    section, out = "", {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def environment(values: list[str]) -> dict[str, str]:
    env = {}
    for value in values:
        for item in shlex.split(value):
            k, _, v = item.partition("=")
            env[k] = v
    return env


def toml_text(data: dict) -> str:
    """Tables of scalars and lists, which is all the page's config holds (json strings are TOML strings)."""
    lines = []
    for table, keys in data.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        lines.append("")
    return "\n".join(lines)


def merge(base: dict, extra: dict) -> dict:
    out = {k: dict(v) for k, v in base.items()}
    for table, keys in extra.items():
        out.setdefault(table, {}).update(keys)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_install_dirs(install: str, prefix: Path) -> None:
    """The `install -d` lines of the install block: the directories the units need must come from there."""
    for line in localize(install, prefix).splitlines():
        argv = shlex.split(line, comments=True)
        if argv[:2] == ["install", "-d"]:
            Path(argv[-1]).mkdir(parents=True, exist_ok=True)


@dataclass
class Deployment:
    prom_port: int
    prom_dir: Path
    head: Path
    procs: dict[str, subprocess.Popen]
    context: ssl.SSLContext | None
    auth: tuple[str, str] | None


def _api(d: Deployment, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{d.prom_port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def _wait(what: str, check, timeout: float, d: Deployment):
    """Poll check() -> (done, value) until done; a process of the deployment that exits fails at once."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        done, value = check()
        if done:
            return value
        for name, p in d.procs.items():
            if p.poll() is not None:
                pytest.fail(f"{name} exited {p.returncode} while waiting for {what}: {value}\n{_logs(d)}")
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}: {value}\n{_logs(d)}")


def _logs(d: Deployment) -> str:
    out = []
    for f in sorted(d.head.parent.glob("*.log")):
        out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-3000:])
    return "\n".join(out)


def _cert(tmp: Path) -> tuple[Path, Path]:
    key, crt = tmp / "slurmscope.key", tmp / "slurmscope.crt"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=slurmscope-test", "-keyout", str(key), "-out", str(crt),
            "-addext", "subjectAltName=DNS:headnode,DNS:gpu01,DNS:gpu02,IP:127.0.0.1",
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return crt, key


def deploy(slurmbed, tmp: Path, *, tls: bool) -> Deployment:
    page = blocks()
    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or promtool is None:
        pytest.skip("Debian's prometheus/promtool not installed")
    prefixes = {h: tmp / h for h in (*HOSTS, "prometheus")}
    ports = {h: free_port() for h in HOSTS}
    hostmap = {f"{h}:{DOC_PORT[h]}": f"127.0.0.1:{ports[h]}" for h in HOSTS}

    def retarget(s: str) -> str:
        for old, new in hostmap.items():
            s = s.replace(old, new)
        return s

    passwords = {"prometheus": "prom-secret", "slurmscope": "agent-secret"}
    if tls:
        import bcrypt

        crt, key = _cert(tmp)
        hashes = {
            u: bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=4)).decode() for u, p in passwords.items()
        }

    procs: dict[str, subprocess.Popen] = {}
    d = Deployment(0, prefixes["prometheus"], prefixes["headnode"], procs, None, None)
    base_env = {**slurmbed.env(), "PYTHONUNBUFFERED": "1"}
    for name in ("gpu01", "gpu02", "headnode"):  # agents first: serve's first nvml pull then finds them
        prefix = prefixes[name]
        run_install_dirs(page["install"], prefix)
        config = tomllib.loads(localize(page["/etc/slurmscope/slurmscope.toml"], prefix))
        if tls:
            extra = tomllib.loads(
                localize(page["/etc/slurmscope/slurmscope.toml (TLS and basic auth)"], prefix)
            )
            config = merge(config, extra)
            web = yaml.safe_load(localize(page["/etc/slurmscope/web-config.yml"], prefix))
            assert set(web["basic_auth_users"]) == set(passwords)
            web["basic_auth_users"] = hashes
            etc = Path(config["exporter"]["web_config_file"]).parent
            (etc / "web-config.yml").write_text(yaml.safe_dump(web))
            for field, f in (("cert_file", crt), ("key_file", key)):
                shutil.copy(f, etc / web["tls_server_config"][field])
            shutil.copy(crt, config["nvml"]["agent_ca_file"])
            Path(config["nvml"]["agent_password_file"]).write_text(
                passwords[config["nvml"]["agent_username"]]
            )
        config["cluster"]["name"] = slurmbed.cluster.CLUSTER
        assert (
            config["exporter"]["port"] == DOC_PORT["headnode"] and config["nvml"]["port"] == DOC_PORT["gpu01"]
        )
        config["exporter"]["port"] = ports["headnode"]
        config["nvml"]["port"] = ports[name] if name != "headnode" else DOC_PORT["gpu01"]
        config["nvml"]["agents"] = [retarget(u) for u in config["nvml"]["agents"]]
        assert all("127.0.0.1" in u for u in config["nvml"]["agents"]), config["nvml"]["agents"]
        path = Path(localize("/etc/slurmscope/slurmscope.toml", prefix))
        path.write_text(toml_text(config))
        title = "/etc/systemd/system/" + (
            "slurmscope.service" if name == "headnode" else "slurmscope-agent.service"
        )
        service = unit(localize(page[title], prefix))
        env = {**base_env, **environment(service.get("Environment", []))}
        assert env["SLURMSCOPE_CONFIG"] == str(path)
        argv = shlex.split(service["ExecStart"][0])
        if name != "headnode":
            spec = prefix / "fake-nvml.json"
            spec.write_text(
                json.dumps(
                    {
                        "node": name,
                        "kmsg_path": str(prefix / "no-kmsg"),
                        "gpus": [{"model": "h100", "state": "load", "count": 2}],
                    }
                )
            )
            argv += ["--fake", str(spec)]
        cwd = service.get("WorkingDirectory", [str(prefix)])[0]
        assert Path(cwd).is_dir(), f"{title}: WorkingDirectory {cwd} is not made by the install block"
        log = open(tmp / f"{name}.log", "w")  # noqa: SIM115
        procs[name] = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)

    if tls:
        d.context = ssl.create_default_context(cafile=str(crt))
        d.auth = ("prometheus", passwords["prometheus"])

    # Prometheus host: the documented rule build, then the documented prometheus.yml.
    pp = prefixes["prometheus"]
    rules_dir = Path(localize("/etc/prometheus/slurmscope", pp))
    subprocess.run(
        [str(Path(sys.prefix) / "bin" / "slurmscope"), "alerts", "build", "--out", str(rules_dir)],
        check=True, capture_output=True, timeout=120, env=base_env,
    )  # fmt: skip
    title = "/etc/prometheus/prometheus.yml" + (" (TLS and basic auth)" if tls else "")
    prom_cfg = yaml.safe_load(localize(page[title], pp))
    for job in prom_cfg["scrape_configs"]:
        job["scrape_interval"] = job["scrape_timeout"] = f"{SCRAPE_SECONDS}s"
        for sc in job["static_configs"]:
            sc["targets"] = [retarget(t) for t in sc["targets"]]
            assert all(t.startswith("127.0.0.1:") for t in sc["targets"]), sc
        if tls:
            shutil.copy(crt, job["tls_config"]["ca_file"])
            Path(job["basic_auth"]["password_file"]).write_text(passwords[job["basic_auth"]["username"]])
    prom_cfg.setdefault("global", {})["evaluation_interval"] = "5s"
    conf = Path(localize("/etc/prometheus/prometheus.yml", pp))
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(yaml.safe_dump(prom_cfg))
    check = subprocess.run(
        [promtool, "check", "config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    d.prom_port = free_port()
    procs["prometheus"] = subprocess.Popen(
        [
            prom,
            f"--config.file={conf}",
            f"--storage.tsdb.path={pp / 'data'}",
            f"--web.listen-address=127.0.0.1:{d.prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "w"),  # noqa: SIM115
    )
    return d


def stop(d: Deployment) -> dict[str, int | None]:
    for p in d.procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes = {}
    for name, p in d.procs.items():
        try:
            codes[name] = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            codes[name] = None
    return codes


def _targets_up(d: Deployment) -> tuple[bool, list | str]:
    try:
        active = _api(d, "targets")["activeTargets"]
    except OSError as exc:  # Prometheus still starting
        return False, str(exc)
    ok = len(active) == 3 and all(t["health"] == "up" for t in active)
    return ok, active if ok else [(t["scrapeUrl"], t["health"], t["lastError"]) for t in active]


def _values(d: Deployment, query: str, want: dict[str, float]):
    def check() -> tuple[bool, dict[str, float]]:
        got = {
            r["metric"].get("node") or r["metric"].get("collector", ""): float(r["value"][1])
            for r in _api(d, "query", query=query)["result"]
        }
        return got == want, got

    return check


def _prove(d: Deployment, tls: bool) -> None:
    active = _wait("every target up", lambda: _targets_up(d), 90, d)
    jobs = sorted((t["labels"]["job"], t["scrapeUrl"].split(":")[0]) for t in active)
    scheme = "https" if tls else "http"
    assert jobs == [("slurmscope", scheme)] + [("slurmscope-agent", scheme)] * 2
    assert _api(d, "rules")["groups"], "the rule_files glob matched none of what `alerts build` wrote"
    # serve ran sacct against the bed and pulled both agents' spools at the documented URLs.
    want = {"sacct": 1.0, "nvml": 1.0}
    _wait("sacct and nvml collector success", _values(d, _SUCCESS, want), 90, d)
    want = {"gpu01": 1.0, "gpu02": 1.0}
    _wait("the agents' NVML up", _values(d, 'slurmscope_agent_nvml_up{job="slurmscope-agent"}', want), 30, d)
    if tls:  # without credentials every endpoint refuses: the variant is not open by accident
        for t in active:
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(t["scrapeUrl"], timeout=10, context=d.context)
            assert e.value.code == 401, t["scrapeUrl"]


_SUCCESS = 'slurmscope_collector_success{job="slurmscope", collector=~"sacct|nvml"}'


@pytest.mark.slurm
@pytest.mark.prometheus
def test_documented_deployment_scrapes_every_target_and_backs_up(slurmbed, tmp_path):
    d = deploy(slurmbed, tmp_path, tls=False)
    try:
        _prove(d, tls=False)
        # The backup block, next to the running serve: the copy opens and holds serve's sacct runs.
        backup = localize(blocks()["backup"], d.head)
        Path(localize("/var/backups", d.head)).mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["bash", "-e", "-c", backup], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        copy = Path(localize("/var/backups/slurmscope.duckdb", d.head))
        con = duckdb.connect(str(copy), read_only=True)
        try:
            runs = con.execute(
                "SELECT count(*) FROM collector_runs WHERE collector = 'sacct' AND status = 'ok'"
            ).fetchone()[0]
        finally:
            con.close()
        assert runs >= 1
    finally:
        codes = stop(d)
    assert codes["headnode"] == 0, f"serve did not stop cleanly on SIGTERM: {codes}\n{_logs(d)}"


@pytest.mark.slurm
@pytest.mark.prometheus
def test_documented_tls_and_basic_auth_variant_scrapes_every_target(slurmbed, tmp_path):
    d = deploy(slurmbed, tmp_path, tls=True)
    try:
        _prove(d, tls=True)
    finally:
        stop(d)


def test_grafana_block_puts_the_dashboards_where_the_provider_reads_them(tmp_path):
    script = localize(blocks()["Grafana provisioning"], tmp_path)
    prov = tmp_path / "etc/grafana/provisioning"
    for sub in ("datasources", "dashboards"):  # Grafana's package makes these
        (prov / sub).mkdir(parents=True)
    r = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (prov / "datasources/slurmscope.yaml").is_file()
    provider = yaml.safe_load((prov / "dashboards/slurmscope.yaml").read_text())
    (path,) = [p["options"]["path"] for p in provider["providers"] if p["name"] == "slurmscope"]
    # The provider's path is not rewritten: it must be the one the page copies the JSON files into.
    assert path == "/var/lib/grafana/dashboards/slurmscope"
    there = {p.name for p in Path(localize(path, tmp_path)).glob("*.json")}
    assert there == {f"{m.SLUG}.json" for m in MODULES}


def test_prolog_and_epilog_block_installs_scripts_that_map_a_job(tmp_path):
    """The page's install lines, run as written on a GPU node whose /opt/slurmscope is this source tree; the
    installed prolog maps a job's GPU by minor number to its PCI bus id and the epilog closes the mapping."""
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt/slurmscope").symlink_to(
        ROOT
    )  # `cp -a ./slurmscope /opt/slurmscope` of the install block
    script = localize(blocks()["prolog and epilog"], tmp_path)
    r = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    conf = next(
        b
        for _, t, b in re.findall(r"^```(\w*)( title=\"[^\"]+\")?\n(.*?)^```$", PAGE.read_text(), re.M | re.S)
        if b.startswith("Prolog=")
    )
    installed = {k: Path(localize(v, tmp_path)) for k, _, v in (line.partition("=") for line in conf.split())}
    gpus = tmp_path / "proc-gpus"
    (gpus / "0000:27:00.0").mkdir(parents=True)
    (gpus / "0000:27:00.0" / "information").write_text("Model: \t\t NVIDIA H100\nDevice Minor: \t 3\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_GPUS": "3",
        "SLURMSCOPE_MAPPING_DIR": str(tmp_path / "map"),
        "SLURMSCOPE_NVIDIA_PROC": str(gpus),
    }
    subprocess.run([str(installed["Prolog"])], env=env, check=True, timeout=30)
    mapping = (tmp_path / "map/job_4242").read_text()
    assert "devices=3\n" in mapping and "pci_bus_ids=0000:27:00.0\n" in mapping, mapping
    subprocess.run([str(installed["Epilog"])], env=env, check=True, timeout=30)
    assert "end_time=" in (tmp_path / "map/job_4242.done").read_text()
