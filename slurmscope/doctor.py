"""`slurmscope doctor`: is this installation able to work, and if not, what is the one thing to change?

A deployment fails in places no single command shows: a Slurm client that cannot reach slurmctld, munge
not running, accounting switched off, an agent whose clock drifted, a database from another version, a
full disk, an exporter bound to loopback while Prometheus runs elsewhere, rules Prometheus never loaded.
Each check here answers one of those with pass, warn, fail or skip and, when not pass, the fix in one line.

Every check takes what it reads as arguments (the config, a command runner, an HTTP getter, a clock), so
tests drive them with hand-made answers; `run_checks` wires the real ones. Nothing here writes: a
missing database is reported, never created.
"""

from __future__ import annotations

import email.utils
import functools
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slurmscope.collectors import slurmrestd
from slurmscope.config import Config

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"

SKEW_LIMIT_SECONDS = 5.0
"""Largest head-to-agent clock difference accepted. Spool minutes and GPU-to-job rows are matched to
Slurm's job start and end times to the minute (docs/nvml.md); an HTTP Date header has one-second
resolution, so 5 s leaves room for it and the round trip while still catching an unsynchronised clock
long before it breaks authentication: a munge credential lives 300 s (MUNGE_DEFAULT_TTL, munge_defs.h)
unless `munge --ttl` says otherwise (munge(1)), and the Slurm daemons of every node authenticate with it."""

MIN_FREE_BYTES = 1 << 30
"""Free space below which the database folder fails: DuckDB's write-ahead log and a checkpoint after a
full pipeline rebuild need room of the order of the marts rewritten, and a full disk stops every writer."""
MIN_FREE_RATIO = 0.10
"""Below this share of the filesystem free (but above MIN_FREE_BYTES) the disk check warns."""

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
EXPORTER_JOB = "slurmscope"  # the scrape job names SlurmscopeExporterDown / SlurmscopeAgentDown select
AGENT_JOB = "slurmscope-agent"


@dataclass(frozen=True)
class Result:
    """One check's verdict; `fix` is the one line to act on, empty when there is nothing to do."""

    check: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Ran:
    """What a command did: `error` is set (and returncode None) when it could not start or timed out."""

    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def why(self) -> str:
        if self.error:
            return self.error
        text = (self.stderr or self.stdout).decode("utf-8", "replace").strip()
        return f"exit status {self.returncode}" + (f": {text.splitlines()[0]}" if text else "")


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""


Runner = Callable[[Sequence[str], float, bytes | None], Ran]
Http = Callable[..., Response]  # http(url, *, headers=None, ca_file=None, timeout=...) -> Response; OSError
Clock = Callable[[], float]


def run_subprocess(
    argv: Sequence[str], timeout: float, stdin: bytes | None = None, *, slurm_conf: str = ""
) -> Ran:
    """An argument list, TZ=UTC (and the cluster's `slurm.conf` as SLURM_CONF), killed with its process
    group past the timeout, as the collectors run."""
    env = dict(os.environ)
    env["TZ"] = "UTC"
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return Ran(None, error=f"cannot run {argv[0]}: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return Ran(None, error=f"{argv[0]} timed out after {timeout:g} s")
    return Ran(proc.returncode, out, err)


def http_get(
    url: str, *, headers: Mapping[str, str] | None = None, ca_file: str | None = None, timeout: float = 10.0
) -> Response:
    """GET with the central collector's trust settings; an HTTP error status is a Response, not an error."""
    from slurmscope.webconfig import client_context

    req = urllib.request.Request(url, headers=dict(headers or {}))
    ctx = client_context(ca_file) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310 - configured URLs
            return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as exc:
        return Response(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


# ----------------------------------------------------------------------------------------------------
# Slurm
# ----------------------------------------------------------------------------------------------------


def _file(cfg: Config) -> str:
    return "the config file (--config)" if cfg.source == "built-in defaults" else cfg.source


def _bin_dir_problem(cfg: Config) -> Result | None:
    bin_dir = cfg.get("slurm", "bin_dir")
    if bin_dir and not Path(bin_dir).is_dir():
        return Result(
            "slurm.bin_dir",
            FAIL,
            f"slurm.bin_dir {bin_dir} is not a directory",
            f"set slurm.bin_dir in {_file(cfg)} to the folder holding sinfo (`dirname $(command -v sinfo)`), "
            'or to "" to use PATH',
        )
    return None


def _command_fix(cfg: Config, name: str, ran: Ran) -> str:
    if ran.error and ran.error.startswith("cannot run"):
        return (
            f"install the Slurm client commands, or set slurm.bin_dir (or slurm.{name}) in {_file(cfg)} "
            "to where they are"
        )
    if ran.error:
        return f"slurmctld/slurmdbd answer slowly: check them, or raise slurm.timeout_seconds in {_file(cfg)}"
    if name == "sacct":
        return "check slurmdbd (systemctl status slurmdbd) and AccountingStorageHost in slurm.conf"
    return "check slurmctld (systemctl status slurmctld) and that slurm.conf on this host names it"


SLURM_PROBES: dict[str, Callable[[Config], list[str]]] = {
    "sinfo": lambda cfg: [cfg.slurm_command("sinfo"), *cfg.slurm_cluster_args(), "--noheader", "--format=%P"],
    "sacct": lambda cfg: [
        cfg.slurm_command("sacct"),
        *cfg.slurm_cluster_args(),
        "--noheader",
        "--allocations",
        "--parsable2",
        "--format=JobIDRaw",
        "--starttime=now",
        "--endtime=now",
    ],
}
"""Cheap calls that still need the daemon behind the command: slurmctld for sinfo, slurmdbd for sacct."""

PING_LINE = re.compile(r"Slurmctld\((\w+)\) at (\S+) is (UP|DOWN)", re.IGNORECASE)


def check_slurm_commands(cfg: Config, run: Runner) -> list[Result]:
    """sinfo, sacct and scontrol ping, each as the live collectors run it (slurm.* paths and timeout)."""
    bad_dir = _bin_dir_problem(cfg)
    if bad_dir:
        return [bad_dir]
    timeout = float(cfg.get("slurm", "timeout_seconds"))
    results = []
    for name, argv in SLURM_PROBES.items():
        cmd = argv(cfg)
        ran = run(cmd, timeout, None)
        if ran.ok:
            results.append(Result(f"slurm.{name}", PASS, f"{cmd[0]} answers"))
        else:
            results.append(
                Result(f"slurm.{name}", FAIL, f"{cmd[0]}: {ran.why()}", _command_fix(cfg, name, ran))
            )
    if cfg.get("slurm", "cluster_flag") and not cfg.get("slurm", "conf"):
        why = (
            f"cluster {cfg.cluster} is reached by -M, which scontrol ping ignores"
            " (it pings the controllers of the local slurm.conf)"
        )
        results.append(Result("slurm.scontrol_ping", SKIP, why))
        return results
    cmd = [cfg.slurm_command("scontrol"), "ping"]
    ran = run(cmd, timeout, None)
    pings = PING_LINE.findall(ran.stdout.decode("utf-8", "replace"))
    down = [f"{host} ({role})" for role, host, state in pings if state.upper() == "DOWN"]
    up = [host for _, host, state in pings if state.upper() == "UP"]
    if ran.error or not pings:
        text = ran.stdout.decode("utf-8", "replace").strip()
        why = f"no 'Slurmctld(...) at HOST is UP' line in {text[:200]!r}" if ran.ok else ran.why()
        results.append(
            Result("slurm.scontrol_ping", FAIL, f"{cmd[0]} ping: {why}", _command_fix(cfg, "scontrol", ran))
        )
    elif not up:
        results.append(
            Result(
                "slurm.scontrol_ping",
                FAIL,
                "no slurmctld is UP: " + ", ".join(down),
                "start slurmctld on the controller (systemctl start slurmctld)",
            )
        )
    elif down:
        results.append(
            Result(
                "slurm.scontrol_ping",
                WARN,
                f"UP: {', '.join(up)}; DOWN: {', '.join(down)}",
                "bring the DOWN controller back: failover is lost until then",
            )
        )
    else:
        results.append(Result("slurm.scontrol_ping", PASS, "slurmctld UP: " + ", ".join(up)))
    return results


def slurm_config(cfg: Config, run: Runner) -> tuple[dict[str, str], str | None]:
    """`scontrol show config` as key -> value, or the reason it could not be read."""
    if _bin_dir_problem(cfg):
        return {}, "slurm.bin_dir is not a directory"
    ran = run(
        [cfg.slurm_command("scontrol"), *cfg.slurm_cluster_args(), "show", "config"],
        float(cfg.get("slurm", "timeout_seconds")),
        None,
    )
    if not ran.ok:
        return {}, f"scontrol show config: {ran.why()}"
    values = {}
    for line in ran.stdout.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            values[key.strip()] = value.strip()
    return values, None


def check_accounting(cfg: Config, slurm_conf: dict[str, str], error: str | None) -> Result:
    """sacct, the sacct collector and everything billed need slurmdbd accounting (AccountingStorageType)."""
    if error:
        return Result("slurm.accounting", FAIL, error, "make `scontrol show config` work first (see slurm.*)")
    kind = slurm_conf.get("AccountingStorageType", "")
    if kind.endswith("/slurmdbd"):
        return Result("slurm.accounting", PASS, f"AccountingStorageType = {kind}")
    return Result(
        "slurm.accounting",
        FAIL,
        f"AccountingStorageType = {kind or '(not set)'}: sacct has no job history to read",
        "set AccountingStorageType=accounting_storage/slurmdbd in slurm.conf, run slurmdbd, restart slurmctld",
    )


def check_rest(cfg: Config, get: Callable[[Config, str], bytes] = slurmrestd.get) -> Result:
    """slurmrestd as the Slurm source: one authenticated `ping` through the REST collectors' own client.

    The ping goes over the configured socket or URL with the configured token, at the configured API
    version, so a wrong socket path, an expired JWT or a plugin slurmrestd was not started with fails here
    and not at the next collect.
    """
    if cfg.get("slurm", "source") != "rest":
        return Result(
            "slurm.rest",
            SKIP,
            "slurm.source is 'cli': Slurm is read with its commands (sacct, sinfo, squeue, sdiag)",
        )
    version = cfg.get("slurm", "rest_api_version")
    where = cfg.get("slurm", "rest_socket") or cfg.get("slurm", "rest_url") or "(no socket or URL)"
    try:
        body = get(cfg, f"/slurm/{version}/ping")
    except OSError as exc:
        return Result(
            "slurm.rest",
            FAIL,
            f"{where}: {exc}",
            f"start slurmrestd serving {version} (slurm.rest_api_version), or fix slurm.rest_socket, "
            "slurm.rest_url or slurm.rest_token_file",
        )
    try:
        pings = json.loads(body).get("pings")
    except (ValueError, AttributeError):
        pings = None
    if not isinstance(pings, list):
        return Result(
            "slurm.rest",
            FAIL,
            f"{where}: /slurm/{version}/ping is not a ping answer",
            "point slurm.rest_* at slurmrestd",
        )
    return Result("slurm.rest", PASS, f"{where} answers {version} ping ({len(pings)} controller(s))")


def check_munge(cfg: Config, run: Runner, slurm_conf: dict[str, str]) -> Result:
    """`munge -n | unmunge`: a credential made and decoded on this host, as every Slurm RPC needs."""
    auth = slurm_conf.get("AuthType", "")
    if auth and not auth.endswith("/munge"):
        return Result("munge", SKIP, f"AuthType = {auth}: Slurm does not use munge here")
    timeout = float(cfg.get("slurm", "timeout_seconds"))
    # AuthInfo=socket=PATH,... (slurm.conf(5)): a site's munged on another socket than the default
    socket = re.search(r"(?:^|,)socket=([^,]+)", slurm_conf.get("AuthInfo", ""))
    where = ["--socket", socket.group(1)] if socket else []
    made = run(["munge", "-n", *where], timeout, None)
    if not made.ok:
        if made.error and made.error.startswith("cannot run"):
            return Result(
                "munge", FAIL, made.why(), "install munge (apt install munge) with the cluster's key"
            )
        return Result(
            "munge",
            FAIL,
            f"munge -n: {made.why()}",
            "start munged (systemctl start munge); its socket must be readable by this user",
        )
    decoded = run(["unmunge", *where], timeout, made.stdout)
    if not decoded.ok:
        why = decoded.why()
        fix = "copy the cluster's /etc/munge/munge.key here (owner munge, mode 0400) and restart munged"
        if re.search(r"expired|rewound", why, re.IGNORECASE):
            fix = "synchronise this host's clock (chrony/NTP): munge credentials are time-limited"
        return Result("munge", FAIL, f"unmunge: {why}", fix)
    return Result("munge", PASS, "munge -n | unmunge: Success")


# ----------------------------------------------------------------------------------------------------
# Database and disk
# ----------------------------------------------------------------------------------------------------


def check_database(db_path: str) -> Result:
    """Exists, writable by this user, and at the schema version this slurmscope ships (never created here)."""
    from slurmscope.db import applied_versions, connect, migrations

    path = Path(db_path)
    if db_path == ":memory:":
        return Result("database", SKIP, "in-memory database")
    if not path.exists():
        return Result(
            "database",
            FAIL,
            f"database {path} does not exist",
            "start `slurmscope serve` (or run `slurmscope collect --once`) with this --db to create it",
        )
    folder = path.resolve().parent
    if not os.access(path, os.W_OK) or not os.access(folder, os.W_OK | os.X_OK):
        return Result(
            "database",
            FAIL,
            f"{path} or its folder {folder} is not writable by this user (DuckDB writes a .wal beside it)",
            f"chown the folder and file to the service user (e.g. chown -R slurmscope: {folder})",
        )
    shipped = {m.version: m.name for m in migrations()}
    try:
        con = connect(path, read_only=True)
    except Exception as exc:  # duckdb.IOException: lock held by a writer, or not a DuckDB file
        if "lock" in str(exc).lower():
            return Result(
                "database",
                PASS,
                f"{path} is writable and held by a running writer (serve); migration state not read",
            )
        return Result(
            "database", FAIL, f"cannot open {path}: {str(exc).splitlines()[0]}", "restore it from backup"
        )
    try:
        applied = set(applied_versions(con))
    finally:
        con.close()
    pending = sorted(set(shipped) - applied)
    unknown = sorted(applied - set(shipped))
    if unknown:
        return Result(
            "database",
            FAIL,
            f"{path} has migrations this slurmscope does not ship: {unknown}",
            "run the slurmscope version that wrote it (a newer one), or restore a backup",
        )
    if pending:
        return Result(
            "database",
            FAIL,
            f"{path} lacks migrations " + ", ".join(shipped[v] for v in pending),
            "restart `slurmscope serve` (every writer migrates at open), or run `slurmscope collect --once`",
        )
    return Result("database", PASS, f"{path} writable, at migration {max(shipped):04d}")


def check_disk(db_path: str, usage: Callable[[str], Any] = shutil.disk_usage) -> Result:
    """Free space where the database lives: a full disk stops every collector and pipeline at once."""
    folder = Path(db_path).resolve().parent if db_path != ":memory:" else Path.cwd()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    du = usage(str(folder))
    free_gib = du.free / (1 << 30)
    shown = f"{folder}: {free_gib:.1f} GiB free of {du.total / (1 << 30):.1f} GiB"
    if du.free < MIN_FREE_BYTES:
        return Result(
            "disk", FAIL, shown, f"free space under {folder} (at least 1 GiB), or move database.path"
        )
    if du.total and du.free / du.total < MIN_FREE_RATIO:
        return Result("disk", WARN, shown, f"less than 10 % free: grow the filesystem under {folder}")
    return Result("disk", PASS, shown)


# ----------------------------------------------------------------------------------------------------
# Agents
# ----------------------------------------------------------------------------------------------------


def _agent_auth(cfg: Config) -> tuple[dict[str, str], str | None]:
    from slurmscope.collectors.nvml import AgentClient

    client = AgentClient.from_config(cfg)  # ValueError, OSError (password file)
    return ({"Authorization": client.authorization} if client.authorization else {}), client.ca_file


def check_agents(cfg: Config, http: Http) -> list[Result]:
    """Each nvml.agents URL's /spool with the credentials and CA the central collector uses."""
    urls = cfg.get("nvml", "agents")
    if not urls:
        return [Result("agents", SKIP, "no nvml.agents configured")]
    try:
        headers, ca_file = _agent_auth(cfg)
    except (OSError, ValueError) as exc:
        return [
            Result(
                "agents",
                FAIL,
                f"agent credentials: {exc}",
                f"set nvml.agent_username and a readable nvml.agent_password_file in {_file(cfg)}",
            )
        ]
    timeout = float(cfg.get("slurm", "timeout_seconds"))
    results = []
    for url in urls:
        name = f"agent {url}"
        target = url.rstrip("/") + "/spool"
        try:
            resp = http(target, headers=headers, ca_file=ca_file, timeout=timeout)
        except OSError as exc:
            reason = str(getattr(exc, "reason", exc))
            if "CERTIFICATE" in reason.upper() or "SSL" in reason.upper():
                fix = "set nvml.agent_ca_file to the CA that signed the agent's certificate"
            else:
                fix = "start slurmscope-agent on that node and open its port to this host"
            results.append(Result(name, FAIL, f"{target}: {reason}", fix))
            continue
        if resp.status == 401:
            fix = (
                "set nvml.agent_username / nvml.agent_password_file to a user of the agent's web config"
                if not headers
                else "the agent refuses these credentials: match nvml.agent_password_file to its web config"
            )
            results.append(Result(name, FAIL, f"{target}: HTTP 401", fix))
        elif resp.status != 200:
            results.append(Result(name, FAIL, f"{target}: HTTP {resp.status}", "check the agent's log"))
        else:
            results.append(Result(name, PASS, f"{target}: HTTP 200"))
    return results


def check_clock(cfg: Config, http: Http, clock: Clock) -> list[Result]:
    """Head-to-agent skew from each agent's HTTP Date header (/healthz needs no credentials)."""
    urls = cfg.get("nvml", "agents")
    if not urls:
        return [Result("clock", SKIP, "no nvml.agents configured")]
    try:
        _, ca_file = _agent_auth(cfg)
    except (OSError, ValueError):
        ca_file = cfg.get("nvml", "agent_ca_file") or None
    timeout = float(cfg.get("slurm", "timeout_seconds"))
    results = []
    for url in urls:
        name = f"clock {url}"
        before = clock()
        try:
            resp = http(url.rstrip("/") + "/healthz", ca_file=ca_file, timeout=timeout)
        except OSError as exc:
            results.append(Result(name, SKIP, f"agent unreachable: {getattr(exc, 'reason', exc)}"))
            continue
        after = clock()
        try:
            agent_time = email.utils.parsedate_to_datetime(resp.headers["date"]).timestamp()
        except (KeyError, TypeError, ValueError):
            results.append(Result(name, SKIP, f"no usable Date header: {resp.headers.get('date')!r}"))
            continue
        # Date is truncated to the second: the agent's clock read somewhere in [agent_time, agent_time + 1)
        low, high = agent_time - after, agent_time + 1 - before
        skew = 0.0 if low <= 0 <= high else (low if low > 0 else high)
        if abs(skew) > SKEW_LIMIT_SECONDS:
            results.append(
                Result(
                    name,
                    FAIL,
                    f"agent clock {'ahead' if skew > 0 else 'behind'} by {abs(skew):.0f} s",
                    "run chrony/NTP on the head node and every GPU node against the same servers",
                )
            )
        else:
            results.append(Result(name, PASS, f"skew within {max(abs(skew), 1.0):.0f} s"))
    return results


# ----------------------------------------------------------------------------------------------------
# Exporter, Prometheus, Grafana
# ----------------------------------------------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exporter_address(cfg: Config, prometheus: str | None) -> Result:
    """A loopback bind is reachable only by a Prometheus on this same host."""
    address = cfg.get("exporter", "address")
    if not _is_loopback(address):
        return Result("exporter.address", PASS, f"serve binds {address}:{cfg.get('exporter', 'port')}")
    prom_host = urlsplit(prometheus).hostname if prometheus else None
    if prom_host and _is_loopback(prom_host):
        return Result("exporter.address", PASS, f"serve binds {address}; Prometheus is on this host")
    where = f"Prometheus at {prometheus}" if prometheus else "a Prometheus on another host"
    return Result(
        "exporter.address",
        WARN,
        f"serve binds {address} (loopback): {where} cannot scrape it",
        f'set exporter.address = "0.0.0.0" (or this host\'s address) in {_file(cfg)}, '
        "with exporter.web_config_file for TLS/basic auth",
    )


def shipped_rule_names() -> tuple[set[str], set[str]]:
    """(recording rule names, alert names) of the rule file this version ships (alerts/slurmscope.rules.yaml)."""
    import yaml

    text = resources.files("slurmscope.alerts").joinpath("slurmscope.rules.yaml").read_text(encoding="utf-8")
    records, alerts = set(), set()
    for group in yaml.safe_load(text)["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                records.add(rule["record"])
            else:
                alerts.add(rule["alert"])
    return records, alerts


def config_rules(cfg: Config) -> dict[str, Any]:
    """The rule file `slurmscope alerts build` writes with this config (thresholds, XID actions)."""
    import yaml

    from slurmscope.alerts.build import config_thresholds, render_rules

    return yaml.safe_load(
        render_rules(
            cfg.get("alerts", "runbook_base_url"), cfg.get("health", "xid_actions"), config_thresholds(cfg)
        )
    )


def _prom_api(http: Http, base: str, path: str) -> Any:
    import json

    resp = http(base.rstrip("/") + "/api/v1/" + path, timeout=30.0)
    if resp.status != 200:
        raise OSError(f"HTTP {resp.status} from {path}")
    body = json.loads(resp.body)
    if body.get("status") != "success":
        raise OSError(f"{path}: {body.get('error', body)}")
    return body["data"]


def _names(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])")


def _numbers(expr: str) -> list[float]:
    """The numeric literals of a PromQL expression (thresholds, factors), strings, ranges and offsets left
    out: Prometheus prints a loaded rule's query re-formatted, but its numbers are the rule file's."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\boffset\s+[0-9a-z]+", "", text)
    return sorted(float(n) for n in _NUMBER.findall(text))


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration))


def rules_off_config(loaded: Mapping[str, Mapping[str, Any]], expected: Mapping[str, Any]) -> list[str]:
    """Alerts whose loaded `for` or thresholds are not those of `expected` (the rule file this config
    renders: `alerts build` with alerts.thresholds and health.*), each with what differs."""
    out = []
    for group in expected["groups"]:
        for rule in group["rules"]:
            got = loaded.get(rule.get("alert", ""))
            if not got or "query" not in got:
                continue
            diffs = []
            if "duration" in got and float(got["duration"]) != _seconds(rule["for"]):
                diffs.append(f"for {float(got['duration']):g} s, the config says {rule['for']}")
            have, want = _numbers(got["query"]), _numbers(rule["expr"])
            if have != want:
                shown = sorted(set(have) ^ set(want)) or have
                diffs.append("thresholds " + ", ".join(f"{n:g}" for n in shown) + " differ")
            if diffs:
                out.append(f"{rule['alert']} ({'; '.join(diffs)})")
    return out


def check_prometheus_rules(
    prometheus: str | None, http: Http, expected: Mapping[str, Any] | None = None
) -> Result:
    """Every recording and alerting rule slurmscope ships is loaded, none fails to evaluate, and (given the
    config's render, `expected`) the loaded alerts fire at the config's thresholds and `for`."""
    if not prometheus:
        return Result("prometheus.rules", SKIP, "no --prometheus URL given")
    try:
        data = _prom_api(http, prometheus, "rules")
    except (OSError, ValueError) as exc:
        return Result("prometheus.rules", FAIL, f"{prometheus}: {exc}", "check the --prometheus URL")
    loaded: dict[str, dict] = {}
    for group in data.get("groups", []):
        for rule in group.get("rules", []):
            loaded[rule.get("name", "")] = rule
    records, alerts = shipped_rule_names()
    missing = sorted((records | alerts) - set(loaded))
    fix = (
        "run `slurmscope alerts build --out /etc/prometheus/slurmscope`, list it under rule_files "
        "(docs/deployment.md) and reload Prometheus"
    )
    if len(missing) == len(records | alerts):
        return Result(
            "prometheus.rules",
            FAIL,
            f"none of slurmscope.rules.yaml is loaded ({len(records)} recording rules, {len(alerts)} alerts, "
            f"e.g. {sorted(records)[0]}, {sorted(alerts)[0]})",
            fix,
        )
    if missing:  # a partial load (an old rule file, a group that failed to parse): every name matters
        kinds = []
        if set(missing) & records:
            kinds.append("recording rules " + ", ".join(sorted(set(missing) & records)))
        if set(missing) & alerts:
            kinds.append("alerts " + ", ".join(sorted(set(missing) & alerts)))
        return Result("prometheus.rules", FAIL, "not loaded: " + "; ".join(kinds), fix)
    broken = sorted(n for n in records | alerts if loaded[n].get("health") == "err")
    if broken:
        error = loaded[broken[0]].get("lastError", "")
        return Result(
            "prometheus.rules",
            FAIL,
            f"failing to evaluate: {_names(broken)} ({error})",
            "see the rule's lastError in Prometheus' /rules page; check the slurmscope version matches",
        )
    off = rules_off_config(loaded, expected) if expected is not None else []
    if off:
        return Result(
            "prometheus.rules",
            WARN,
            f"loaded, but not at this config's thresholds: {_names(off, 4)}",
            "run `slurmscope alerts build --out /etc/prometheus/slurmscope` with this config and reload Prometheus",
        )
    return Result("prometheus.rules", PASS, f"{len(records)} recording rules and {len(alerts)} alerts loaded")


def check_prometheus_targets(cfg: Config, prometheus: str | None, http: Http) -> Result:
    """The exporter (and the agents, where configured) are scraped and up."""
    if not prometheus:
        return Result("prometheus.targets", SKIP, "no --prometheus URL given")
    try:
        data = _prom_api(http, prometheus, "targets?state=active")
    except (OSError, ValueError) as exc:
        return Result("prometheus.targets", FAIL, f"{prometheus}: {exc}", "check the --prometheus URL")
    targets = data.get("activeTargets", [])
    ours = [t for t in targets if t.get("labels", {}).get("job") in (EXPORTER_JOB, AGENT_JOB)]
    jobs = {t["labels"]["job"] for t in ours}
    fix_jobs = (
        "add the scrape jobs of docs/deployment.md (job names slurmscope and slurmscope-agent) and reload"
    )
    if EXPORTER_JOB not in jobs:
        return Result("prometheus.targets", FAIL, f"no target of job {EXPORTER_JOB!r}", fix_jobs)
    if cfg.get("nvml", "agents") and AGENT_JOB not in jobs:
        return Result("prometheus.targets", FAIL, f"no target of job {AGENT_JOB!r}", fix_jobs)
    down = [t for t in ours if t.get("health") != "up"]
    if down:
        first = down[0]
        return Result(
            "prometheus.targets",
            FAIL,
            f"{len(down)} of {len(ours)} down: "
            + _names([t.get("scrapeUrl", "?") for t in down])
            + f" ({first.get('lastError') or first.get('health')})",
            "check the target's process, exporter.address / firewall, and the job's scheme and credentials",
        )
    return Result("prometheus.targets", PASS, f"{len(ours)} targets up ({', '.join(sorted(jobs))})")


def check_grafana(cfg: Config) -> Result:
    """The provisioning files and dashboards `dashboards build` writes, where Grafana reads them."""
    import yaml

    from slurmscope.dashboards.build import generate

    root = cfg.get("grafana", "provisioning_dir")
    if not root:
        return Result("grafana", SKIP, "grafana.provisioning_dir not set")
    files = generate()
    fix = f"run `slurmscope dashboards build --out DIR` and copy its files as docs/dashboards.md says (under {root})"
    missing = [
        str(Path(root) / rel.removeprefix("provisioning/"))
        for rel in files
        if rel.startswith("provisioning/") and not (Path(root) / rel.removeprefix("provisioning/")).is_file()
    ]
    if missing:
        return Result("grafana", FAIL, "missing " + _names(missing), fix)
    provider = Path(root) / "dashboards" / "slurmscope.yaml"
    try:
        spec = yaml.safe_load(provider.read_text(encoding="utf-8"))
        path = Path(next(p for p in spec["providers"] if p.get("name") == "slurmscope")["options"]["path"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration) as exc:
        return Result("grafana", FAIL, f"{provider}: no slurmscope provider path ({exc})", fix)
    wanted = {
        rel.removeprefix("dashboards/"): text for rel, text in files.items() if rel.startswith("dashboards/")
    }
    absent = sorted(name for name in wanted if not (path / name).is_file())
    if absent:
        return Result("grafana", FAIL, f"{path}: missing " + _names(absent), fix)
    stale = sorted(name for name, text in wanted.items() if (path / name).read_text(encoding="utf-8") != text)
    if stale:
        return Result("grafana", WARN, f"{path}: from another version: " + _names(stale), fix)
    return Result("grafana", PASS, f"provisioning under {root}, {len(wanted)} dashboards in {path}")


# ----------------------------------------------------------------------------------------------------


def run_checks(
    cfg: Config,
    db_path: str,
    *,
    prometheus: str | None = None,
    run: Runner = run_subprocess,
    http: Http = http_get,
    clock: Clock = time.time,
) -> list[Result]:
    """Every check, in the order an operator would fix them, for the cluster of `cfg` (`--cluster`)."""
    if run is run_subprocess and cfg.get("slurm", "conf"):
        run = functools.partial(run_subprocess, slurm_conf=cfg.get("slurm", "conf"))
    results = check_slurm_commands(cfg, run)
    slurm_conf, conf_error = slurm_config(cfg, run)
    results.append(check_rest(cfg))
    results.append(check_munge(cfg, run, slurm_conf))
    results.append(check_accounting(cfg, slurm_conf, conf_error))
    results.append(check_database(db_path))
    results.append(check_disk(db_path))
    results += check_agents(cfg, http)
    results += check_clock(cfg, http, clock)
    results.append(check_exporter_address(cfg, prometheus))
    results.append(check_prometheus_rules(prometheus, http, config_rules(cfg) if prometheus else None))
    results.append(check_prometheus_targets(cfg, prometheus, http))
    results.append(check_grafana(cfg))
    return results


def failed(results: Sequence[Result]) -> bool:
    return any(r.status == FAIL for r in results)


def as_json(results: Sequence[Result]) -> dict[str, Any]:
    return {"ok": not failed(results), "checks": [asdict(r) for r in results]}


def as_text(results: Sequence[Result]) -> str:
    width = max(len(r.check) for r in results)
    lines = []
    for r in results:
        lines.append(f"{r.status.upper():4}  {r.check.ljust(width)}  {r.detail}")
        if r.fix and r.status in (FAIL, WARN):
            lines.append(f"{'':4}  {'':{width}}  fix: {r.fix}")
    counts = {s: sum(r.status == s for r in results) for s in (PASS, WARN, FAIL, SKIP)}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines) + "\n"
