"""`slurmscope doctor`: each check on hand-made answers, then on real things (the fake Slurm commands of
tests/fakes, a real DuckDB file, the real agent over TLS with basic auth, the CLI).

The live Prometheus checks are in tests/integration/test_doctor_live.py.
"""

from __future__ import annotations

import json
import os
import urllib.error
from collections import namedtuple
from email.utils import formatdate
from pathlib import Path

import pytest
from click.testing import CliRunner
from slurmscope.agent.http import start_http
from slurmscope.dashboards.build import build_all

from slurmscope import doctor
from slurmscope.cli import main
from slurmscope.config import load_config
from slurmscope.db import connect, migrations
from slurmscope.doctor import FAIL, PASS, SKIP, WARN, Ran, Response
from tests.agent.test_agent import Env
from tests.dbhold import held
from tests.paths import FAKES, ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "slurm-22.05"
PING = (FIXTURES / "ping_final.txt").read_bytes()  # captured on the bed: "Slurmctld(primary) at vm is UP"
CONFIG = (FIXTURES / "config_final.txt").read_bytes()  # captured `scontrol show config`


def cfg(**sections):
    return load_config(env={}).with_overrides(**sections)


def by_name(results):
    return {r.check: r for r in results}


class Answers:
    """A runner answering by command name (the basename of argv[0]) and recording each call."""

    def __init__(self, **answers: Ran) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], float, bytes | None]] = []

    def __call__(self, argv, timeout, stdin):
        self.calls.append((list(argv), timeout, stdin))
        key = Path(argv[0]).name + ("_" + argv[1] if Path(argv[0]).name == "scontrol" else "")
        return self.answers[key]


OK = Ran(0, b"", b"")


# --- Slurm commands ---------------------------------------------------------------------------------


def test_answering_commands_pass_and_run_with_the_configured_paths_and_timeout():
    run = Answers(sinfo=OK, sacct=OK, scontrol_ping=Ran(0, PING))
    c = cfg(slurm={"bin_dir": "/", "timeout_seconds": 7.0})
    results = by_name(doctor.check_slurm_commands(c, run))
    assert [r.status for r in results.values()] == [PASS, PASS, PASS]
    assert results["slurm.scontrol_ping"].detail == "slurmctld UP: vm"
    assert [call[0][0] for call in run.calls] == ["/sinfo", "/sacct", "/scontrol"]
    assert {call[1] for call in run.calls} == {7.0}


def test_a_down_backup_warns_and_no_controller_up_fails():
    two = b"Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup) at ctl2 is DOWN\n"
    r = by_name(doctor.check_slurm_commands(cfg(), Answers(sinfo=OK, sacct=OK, scontrol_ping=Ran(0, two))))
    assert (
        r["slurm.scontrol_ping"].status == WARN and "DOWN: ctl2 (backup)" in r["slurm.scontrol_ping"].detail
    )
    # scontrol ping exits 1 when a controller is DOWN: its answer is still read
    down = Ran(1, b"Slurmctld(primary) at ctl1 is DOWN\n")
    r = by_name(doctor.check_slurm_commands(cfg(), Answers(sinfo=OK, sacct=OK, scontrol_ping=down)))
    assert r["slurm.scontrol_ping"].status == FAIL
    assert r["slurm.scontrol_ping"].fix.startswith("start slurmctld")


def test_slurm_bin_dir_that_does_not_exist_fails_once_with_the_fix(tmp_path):
    c = cfg(slurm={"bin_dir": str(tmp_path / "nope")})
    [r] = doctor.check_slurm_commands(c, doctor.run_subprocess)
    assert (r.check, r.status) == ("slurm.bin_dir", FAIL)
    assert str(tmp_path / "nope") in r.detail and "slurm.bin_dir" in r.fix
    conf, error = doctor.slurm_config(c, doctor.run_subprocess)
    assert conf == {} and error
    assert doctor.check_accounting(c, conf, error).status == FAIL


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """tests/fakes/sacct under the names the checks run; it prints FAKE_SACCT_OUTPUT whatever its args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sinfo", "sacct", "scontrol"):
        (bin_dir / name).symlink_to(FAKES / "sacct")
    out = tmp_path / "out.txt"
    monkeypatch.setenv("FAKE_SACCT_OUTPUT", str(out))
    monkeypatch.setenv("FAKE_SACCT_LOG", str(tmp_path / "calls.jsonl"))
    return bin_dir, out


def test_fake_slurm_commands_answering(fake_bin, tmp_path):
    bin_dir, out = fake_bin
    out.write_bytes(PING)
    results = by_name(
        doctor.check_slurm_commands(cfg(slurm={"bin_dir": str(bin_dir)}), doctor.run_subprocess)
    )
    assert {k: r.status for k, r in results.items()} == {
        "slurm.sinfo": PASS,
        "slurm.sacct": PASS,
        "slurm.scontrol_ping": PASS,
    }
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert {c["tz"] for c in calls} == {"UTC"}
    assert calls[-1]["argv"] == ["ping"]


def test_fake_slurm_commands_failing_and_hanging(fake_bin, monkeypatch):
    bin_dir, out = fake_bin
    monkeypatch.setenv("FAKE_SACCT_MODE", "fail")
    r = by_name(doctor.check_slurm_commands(cfg(slurm={"bin_dir": str(bin_dir)}), doctor.run_subprocess))
    assert r["slurm.sacct"].status == FAIL
    assert "Problem talking to the database" in r["slurm.sacct"].detail
    assert "slurmdbd" in r["slurm.sacct"].fix
    monkeypatch.setenv("FAKE_SACCT_MODE", "hang")
    c = cfg(slurm={"bin_dir": str(bin_dir), "timeout_seconds": 0.5})
    r = by_name(doctor.check_slurm_commands(c, doctor.run_subprocess))
    assert r["slurm.sinfo"].status == FAIL and "timed out after 0.5 s" in r["slurm.sinfo"].detail
    assert "slurm.timeout_seconds" in r["slurm.sinfo"].fix


def test_accounting_from_the_captured_scontrol_show_config(fake_bin):
    bin_dir, out = fake_bin
    out.write_bytes(CONFIG)
    c = cfg(slurm={"bin_dir": str(bin_dir)})
    conf, error = doctor.slurm_config(c, doctor.run_subprocess)
    assert error is None and conf["ClusterName"] == "slurmbed"
    r = doctor.check_accounting(c, conf, error)
    assert (r.status, r.detail) == (PASS, "AccountingStorageType = accounting_storage/slurmdbd")
    off = doctor.check_accounting(c, {"AccountingStorageType": "accounting_storage/none"}, None)
    assert off.status == FAIL and "accounting_storage/slurmdbd" in off.fix


# --- munge -------------------------------------------------------------------------------------------


def test_munge_round_trip_feeds_the_credential_to_unmunge():
    run = Answers(munge=Ran(0, b"MUNGE:cred:"), unmunge=Ran(0, b"STATUS: Success (0)\n"))
    assert doctor.check_munge(cfg(), run, {"AuthType": "auth/munge"}).status == PASS
    assert run.calls[1][0] == ["unmunge"] and run.calls[1][2] == b"MUNGE:cred:"
    conf, _ = doctor.slurm_config(cfg(), Answers(scontrol_show=Ran(0, CONFIG)))
    doctor.check_munge(cfg(), run, conf)  # the bed's munged listens where AuthInfo says
    bed_socket = ["--socket", "/tmp/slurmscope-slurmbed/munge/munge.socket"]
    assert [c[0] for c in run.calls[2:]] == [["munge", "-n", *bed_socket], ["unmunge", *bed_socket]]


def test_munge_failures_name_their_fix():
    missing = Answers(munge=Ran(None, error="cannot run munge: No such file or directory"))
    assert "install munge" in doctor.check_munge(cfg(), missing, {}).fix
    no_daemon = Answers(munge=Ran(6, b"", b'munge: Error: Failed to access "/run/munge/munge.socket.2"'))
    assert "start munged" in doctor.check_munge(cfg(), no_daemon, {}).fix
    expired = Answers(munge=Ran(0, b"c"), unmunge=Ran(15, b"", b"unmunge: Error: Expired credential"))
    r = doctor.check_munge(cfg(), expired, {})
    assert r.status == FAIL and "clock" in r.fix
    bad_key = Answers(munge=Ran(0, b"c"), unmunge=Ran(1, b"", b"unmunge: Error: Invalid credential"))
    assert "munge.key" in doctor.check_munge(cfg(), bad_key, {}).fix
    assert doctor.check_munge(cfg(), Answers(), {"AuthType": "auth/jwt"}).status == SKIP


def test_slurmrestd_is_checked_only_when_it_is_the_source():
    assert doctor.check_rest(cfg(), lambda *a: pytest.fail("no request")).status == SKIP
    rest = cfg(slurm={"source": "rest", "rest_socket": "/run/slurmrestd.sock", "rest_api_version": "v0.0.41"})
    seen = []
    answer = b'{"pings": [{"hostname": "ctl", "pinged": "UP"}], "errors": []}'
    r = doctor.check_rest(rest, lambda c, path: seen.append(path) or answer)
    assert (r.status, seen) == (PASS, ["/slurm/v0.0.41/ping"]) and "/run/slurmrestd.sock" in r.detail


def test_slurmrestd_refusing_the_token_fails_with_its_words():
    rest = cfg(slurm={"source": "rest", "rest_url": "http://ctl:6820", "rest_token_file": "/t"})

    def refused(c, path):
        raise OSError(f"slurmrestd {path}: HTTP 401 Unauthorized: Authentication failure")

    r = doctor.check_rest(rest, refused)
    assert r.status == FAIL and "401" in r.detail and "rest_token_file" in r.fix
    assert doctor.check_rest(rest, lambda c, p: b"<html>proxy</html>").status == FAIL


def test_an_answer_that_is_not_a_ping_fails():
    run = Answers(sinfo=OK, sacct=OK, scontrol_ping=Ran(0, b"slurm_load_ctl_conf: nonsense\n"))
    r = by_name(doctor.check_slurm_commands(cfg(), run))["slurm.scontrol_ping"]
    assert r.status == FAIL and "no 'Slurmctld(...) at HOST is UP' line" in r.detail


# --- database and disk -------------------------------------------------------------------------------


def test_missing_database_fails_and_is_not_created(tmp_path):
    path = tmp_path / "typo.duckdb"
    r = doctor.check_database(str(path))
    assert r.status == FAIL and "does not exist" in r.detail and "serve" in r.fix
    assert not path.exists()


def test_database_migration_state(tmp_path):
    path = tmp_path / "db.duckdb"
    connect(path).close()
    last = migrations()[-1]
    r = doctor.check_database(str(path))
    assert (r.status, r.detail) == (PASS, f"{path} writable, at migration {last.version:04d}")
    old = tmp_path / "old.duckdb"
    connect(old, migrate_schema=False).close()
    con = connect(old, migrate_schema=False)
    from slurmscope.db import migrate

    migrate(con, upto=last.version - 1)
    con.close()
    r = doctor.check_database(str(old))
    assert r.status == FAIL and r.detail.endswith(f"lacks migrations {last.name}")
    con = connect(path)
    con.execute("INSERT INTO schema_migrations (version, name) VALUES (9999, '9999_future.sql')")
    con.close()
    r = doctor.check_database(str(path))
    assert r.status == FAIL and "[9999]" in r.detail


def test_database_held_by_a_running_writer_passes_on_permissions(tmp_path):
    """serve holds DuckDB's file lock during a job: doctor must neither wait for it nor call it broken."""
    path = tmp_path / "db.duckdb"
    connect(path).close()
    with held(path):
        r = doctor.check_database(str(path))
        assert (r.status, r.detail) == (
            PASS,
            f"{path} is writable and held by a running writer (serve); migration state not read",
        )


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_read_only_database_fails(tmp_path):
    path = tmp_path / "db.duckdb"
    connect(path).close()
    path.chmod(0o444)
    assert doctor.check_database(str(path)).status == FAIL


Usage = namedtuple("Usage", "total used free")
GIB = 1 << 30


def test_disk_space_thresholds(tmp_path):
    db = str(tmp_path / "db.duckdb")
    assert doctor.check_disk(db, lambda _: Usage(100 * GIB, 99.5 * GIB, GIB // 2)).status == FAIL
    assert doctor.check_disk(db, lambda _: Usage(100 * GIB, 95 * GIB, 5 * GIB)).status == WARN
    r = doctor.check_disk(db, lambda _: Usage(100 * GIB, 50 * GIB, 50 * GIB))
    assert (r.status, r.detail) == (PASS, f"{tmp_path}: 50.0 GiB free of 100.0 GiB")
    seen = []
    doctor.check_disk(str(tmp_path / "a" / "b" / "db.duckdb"), lambda p: seen.append(p) or Usage(1, 0, 1))
    assert seen == [str(tmp_path)]  # the nearest folder that exists


# --- agents and clocks -------------------------------------------------------------------------------


def test_agents_on_hand_made_answers(tmp_path):
    (tmp_path / "pw").write_text("s3cret\n")
    calls = []

    def http(url, *, headers=None, ca_file=None, timeout=0):
        calls.append((url, headers, ca_file))
        if "gpu1" in url:
            return Response(200)
        if "gpu2" in url:
            return Response(401)
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    agents = ["https://gpu1:9401", "https://gpu2:9401/", "http://gpu3:9401"]
    c = cfg(nvml={"agents": agents, "agent_username": "prom", "agent_password_file": str(tmp_path / "pw")})
    r = doctor.check_agents(c, http)
    assert [x.status for x in r] == [PASS, FAIL, FAIL]
    assert "match nvml.agent_password_file" in r[1].fix and "start slurmscope-agent" in r[2].fix
    assert calls[1][0] == "https://gpu2:9401/spool"
    assert calls[0][1] == {"Authorization": "Basic cHJvbTpzM2NyZXQ="}  # base64("prom:s3cret")
    assert doctor.check_agents(cfg(), http)[0].status == SKIP


def test_clock_skew_from_the_date_header():
    now = 1_800_000_000.0

    def at(agent_time):
        return lambda url, **kw: Response(200, {"date": formatdate(agent_time, usegmt=True)})

    c = cfg(nvml={"agents": ["http://gpu1:9401"]})
    [r] = doctor.check_clock(c, at(now + 60), lambda: now)
    assert (r.status, r.detail) == (FAIL, "agent clock ahead by 60 s")
    [r] = doctor.check_clock(c, at(now - 10), lambda: now)
    assert (r.status, r.detail) == (FAIL, "agent clock behind by 9 s")  # Date drops the fraction: up to 1 s
    [r] = doctor.check_clock(c, at(now + 5), lambda: now)
    assert r.status == PASS
    [r] = doctor.check_clock(c, lambda url, **kw: Response(200, {}), lambda: now)
    assert r.status == SKIP
    [r] = doctor.check_clock(c, lambda url, **kw: Response(200, {"date": "yesterday"}), lambda: now)
    assert (r.status, r.detail) == (SKIP, "no usable Date header: 'yesterday'")


def test_real_agent_over_tls_with_basic_auth(tmp_path, tls_web_config):
    """The agent's own server: credentials and CA decide, as they do for `collect nvml`."""
    (tmp_path / "password").write_text("s3cret\n")
    env = Env(tmp_path, [{"model": "h100", "state": "load", "count": 1}], cluster="c1", rotate=3600)
    server = start_http(env.agent, "127.0.0.1", 0, tls_web_config)
    url = f"https://localhost:{server.server_address[1]}"
    try:
        [r] = doctor.check_agents(cfg(nvml={"agents": [url]}), doctor.http_get)
        assert r.status == FAIL and "CERTIFICATE_VERIFY_FAILED" in r.detail and "agent_ca_file" in r.fix
        ca = {"agents": [url], "agent_ca_file": str(tmp_path / "cert.pem")}
        [r] = doctor.check_agents(cfg(nvml=ca), doctor.http_get)
        assert (r.status, r.detail) == (FAIL, f"{url}/spool: HTTP 401") and "agent_username" in r.fix
        auth = {**ca, "agent_username": "prom", "agent_password_file": str(tmp_path / "password")}
        [r] = doctor.check_agents(cfg(nvml=auth), doctor.http_get)
        assert r.status == PASS
        [r] = doctor.check_clock(cfg(nvml=auth), doctor.http_get, doctor.time.time)
        assert r.status == PASS
    finally:
        server.shutdown()
        server.server_close()


# --- exporter, Prometheus (hand-made answers), Grafana -----------------------------------------------


def test_exporter_bound_to_loopback():
    r = doctor.check_exporter_address(cfg(), "http://prom.example:9090")
    assert r.status == WARN and "0.0.0.0" in r.fix and "http://prom.example:9090" in r.detail
    assert doctor.check_exporter_address(cfg(), None).status == WARN
    assert doctor.check_exporter_address(cfg(), "http://127.0.0.1:9090").status == PASS
    assert doctor.check_exporter_address(cfg(exporter={"address": "0.0.0.0"}), None).status == PASS
    assert doctor.check_exporter_address(cfg(exporter={"address": "::1"}), "http://[::2]:9090").status == WARN


def _rules_api(names):
    body = {
        "status": "success",
        "data": {"groups": [{"rules": [{"name": n, "health": "ok"} for n in names]}]},
    }
    return lambda url, **kw: Response(200, {}, json.dumps(body).encode())


def test_prometheus_rules_names_the_missing_ones():
    records, alerts = doctor.shipped_rule_names()
    assert "SlurmscopeExporterDown" in alerts and records
    assert doctor.check_prometheus_rules("http://p:9090", _rules_api(records | alerts)).status == PASS
    gone_record, gone_alert = sorted(records)[0], sorted(alerts)[0]
    r = doctor.check_prometheus_rules(
        "http://p:9090", _rules_api((records | alerts) - {gone_record, gone_alert})
    )
    assert r.status == FAIL
    assert r.detail == f"not loaded: recording rules {gone_record}; alerts {gone_alert}"
    r = doctor.check_prometheus_rules("http://p:9090", _rules_api(["unrelated:rule"]))
    assert r.status == FAIL and r.detail.startswith(
        f"none of slurmscope.rules.yaml is loaded ({len(records)} recording rules, {len(alerts)} alerts"
    )
    broken = _rules_api(records | alerts)
    body = json.loads(broken("u").body)
    body["data"]["groups"][0]["rules"][0].update(health="err", lastError="many-to-many matching not allowed")
    r = doctor.check_prometheus_rules(
        "http://p:9090", lambda url, **kw: Response(200, {}, json.dumps(body).encode())
    )
    assert r.status == FAIL and "many-to-many matching not allowed" in r.detail
    assert doctor.check_prometheus_rules(None, _rules_api([])).status == SKIP


def test_prometheus_targets_on_hand_made_answers():
    def api(*targets):
        body = {"status": "success", "data": {"activeTargets": list(targets)}}
        return lambda url, **kw: Response(200, {}, json.dumps(body).encode())

    exp = {"labels": {"job": "slurmscope"}, "health": "up", "scrapeUrl": "http://h:9400/metrics"}
    agent = {"labels": {"job": "slurmscope-agent"}, "health": "down", "scrapeUrl": "http://g:9401/metrics"}
    agent["lastError"] = "connection refused"
    assert doctor.check_prometheus_targets(cfg(), "http://p", api(exp)).status == PASS
    r = doctor.check_prometheus_targets(cfg(), "http://p", api(exp, agent))
    assert r.status == FAIL and r.detail == "1 of 2 down: http://g:9401/metrics (connection refused)"
    r = doctor.check_prometheus_targets(cfg(nvml={"agents": ["http://g:9401"]}), "http://p", api(exp))
    assert r.status == FAIL and "slurmscope-agent" in r.detail
    assert doctor.check_prometheus_targets(cfg(), "http://p", api()).status == FAIL


def test_grafana_provisioning_files(tmp_path):
    build = tmp_path / "build"
    build_all(build)
    prov, dash = tmp_path / "provisioning", tmp_path / "dashboards"
    c = cfg(grafana={"provisioning_dir": str(prov)})
    r = doctor.check_grafana(c)
    assert r.status == FAIL and "datasources/slurmscope.yaml" in r.detail
    for sub in ("datasources", "dashboards"):
        (prov / sub).mkdir(parents=True)
        text = (build / "provisioning" / sub / "slurmscope.yaml").read_text()
        (prov / sub / "slurmscope.yaml").write_text(
            text.replace("/var/lib/grafana/dashboards/slurmscope", str(dash))
        )
    dash.mkdir()
    for f in sorted((build / "dashboards").iterdir()):
        (dash / f.name).write_text(f.read_text())
    assert doctor.check_grafana(c).status == PASS
    (dash / "cost.json").write_text("{}")
    assert doctor.check_grafana(c).status == WARN
    (dash / "cost.json").unlink()
    r = doctor.check_grafana(c)
    assert (r.status, r.detail) == (FAIL, f"{dash}: missing cost.json")
    assert doctor.check_grafana(cfg()).status == SKIP


# --- the command -------------------------------------------------------------------------------------


def test_cli_json_exit_status_and_no_database_created(tmp_path):
    conf = tmp_path / "slurmscope.toml"
    conf.write_text(f'[slurm]\nbin_dir = "{tmp_path / "nope"}"\n')
    db = tmp_path / "missing.duckdb"
    res = CliRunner().invoke(main, ["--config", str(conf), "--db", str(db), "doctor", "--format", "json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    checks = by_name([doctor.Result(**c) for c in out["checks"]])
    assert out["ok"] is False
    assert checks["slurm.bin_dir"].status == FAIL and str(conf) in checks["slurm.bin_dir"].fix
    assert checks["database"].status == FAIL and not db.exists()
    res = CliRunner().invoke(main, ["--config", str(conf), "--db", str(db), "doctor"])
    assert res.exit_code == 1
    assert res.stdout.splitlines()[0].startswith("FAIL  slurm.bin_dir")
    assert "fix: set slurm.bin_dir in " in res.stdout
