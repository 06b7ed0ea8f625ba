#!/usr/bin/env python3
"""A private Slurm 22.05 cluster on one machine, for the live integration tests.

    python3 tests/slurmbed/cluster.py start|stop|status|env|wipe|stop-dbd|start-dbd|stop-ctld|start-ctld|restart-ctld|start-rest|stop-rest
        [--force]

Everything lives under one directory ($SLURMBED_DIR, default /tmp/slurmscope-slurmbed): configs, logs,
pidfiles, spool and state, a MariaDB datadir on 127.0.0.1:17500 with its own socket, a munge daemon with
its own key and socket, and fake GPU character devices. Nothing system-wide is touched except that the
test users are created with useradd when missing. `start` is idempotent (a running daemon is left alone),
`stop` ends only the processes named in this directory's pidfiles. Commands that change the bed refuse
while a test session holds its lock (tests/integration/conftest.py), unless given --force.

Why this shape: an AI cluster's accounting (cons_tres, GPUs as typed GRES, fair share with a strong
weight, QOS preemption, billing weights on the GPU partition) is what the collectors and pipelines must
read correctly; several slurmd daemons on one host give a multi-node cluster without containers.
Runs as root; stdlib only so that it works outside the project's virtualenv.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

BED = Path(os.environ.get("SLURMBED_DIR", "/tmp/slurmscope-slurmbed"))
CLUSTER = "slurmbed"
CTLD_PORT = 17000
NODE_PORTS = {"gpu01": 17001, "gpu02": 17002, "gpu03": 17003, "gpu04": 17004, "cpu01": 17005}
GPU_NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]
DBD_PORT = 17010
MYSQL_PORT = 17500
DB_PASS = "slurmbed-db"
NODE_CPUS = 16
NODE_MEM_MB = 64000

# account -> (parent, fairshare)
ACCOUNTS = {
    "research": ("root", 60),
    "pretraining": ("research", 40),
    "vision": ("research", 20),
    "infra": ("root", 25),
    "students": ("root", 15),
}
# user -> (default account, other accounts)
USERS = {
    "sbalice": ("pretraining", []),
    "sbbob": ("vision", ["pretraining"]),
    "sbcarol": ("infra", []),
    "sbdave": ("students", []),
}
PACKAGES = ["slurm-wlm", "slurmdbd", "slurm-client", "mariadb-server", "munge"]
BINARIES = [
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "munged",
    "mariadbd",
    "mariadb-install-db",
    "sacctmgr",
    "sbatch",
]

P = {
    "etc": BED / "etc",
    "log": BED / "log",
    "run": BED / "run",
    "state": BED / "state",
    "spool": BED / "spool",
    "munge": BED / "munge",
    "mysql": BED / "mysql",
    "dev": BED / "dev",
    "work": BED / "work",
}
SLURM_CONF = P["etc"] / "slurm.conf"
MUNGE_SOCKET = P["munge"] / "munge.socket"
MYSQL_SOCKET = P["mysql"] / "mysqld.sock"


def env() -> dict[str, str]:
    """Environment for any Slurm client talking to this bed."""
    e = dict(os.environ)
    e["SLURM_CONF"] = str(SLURM_CONF)
    e["TZ"] = "UTC"
    e.pop("SLURM_TIME_FORMAT", None)
    return e


def log(msg: str) -> None:
    print(f"slurmbed: {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, check=check, timeout=timeout, env=kw.pop("env", env()), capture_output=True, text=True, **kw
    )


def missing_requirements() -> list[str]:
    """What keeps the bed from starting here (empty list = can start)."""
    why = []
    if os.geteuid() != 0:
        why.append("not running as root")
    for b in BINARIES:
        if shutil.which(b) is None and not Path("/usr/sbin", b).exists():
            why.append(f"{b} not installed (Debian packages {' '.join(PACKAGES)})")
    return why


def _pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    # A recycled pid belongs to someone else: it is ours only if its command line names this bed
    # (munged, mariadbd, slurmctld, slurmd) or, for slurmdbd (which takes no config argument), its
    # environment carries this bed's SLURM_CONF.
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    mine = str(BED).encode()
    if mine in cmd or f"SLURM_CONF={SLURM_CONF}".encode() in environ:
        return pid
    return None


def _pidfiles() -> dict[str, Path]:
    d = {
        "munged": P["munge"] / "munged.pid",
        "mariadbd": P["mysql"] / "mariadbd.pid",
        "slurmdbd": P["run"] / "slurmdbd.pid",
        "slurmctld": P["run"] / "slurmctld.pid",
    }
    for n in NODE_PORTS:
        d[f"slurmd-{n}"] = P["run"] / f"slurmd-{n}.pid"
    return d


def _wait(pred, what: str, timeout: float = 60, interval: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise RuntimeError(f"timed out waiting for {what}; logs in {P['log']}")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def write_configs() -> bool:
    """Write the configs; True when slurm.conf or gres.conf changed (a running slurmctld must reconfigure)."""
    for d in P.values():
        d.mkdir(parents=True, exist_ok=True)
    os.chmod(BED, 0o755)
    for d in ("etc", "log", "run", "spool", "dev", "work"):
        os.chmod(P[d], 0o755)
    os.chmod(P["munge"], 0o755)
    os.chmod(P["state"], 0o700)
    for n in NODE_PORTS:
        (P["spool"] / n).mkdir(exist_ok=True)
    (P["spool"] / "ctld").mkdir(exist_ok=True)
    # Fake GPUs: slurmd only needs character devices it can stat (a missing file makes the node INVAL).
    for i in range(8):
        dev = P["dev"] / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))
    host = socket.gethostname().split(".")[0]
    gpu_weights = "CPU=0.25,Mem=0.0G,GRES/gpu=2.0"
    slurm_conf = f"""# generated by tests/slurmbed/cluster.py; do not edit
ClusterName={CLUSTER}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={MUNGE_SOCKET},cred_expire=30
CredType=cred/munge
StateSaveLocation={P["state"]}
SlurmdSpoolDir={P["spool"]}/%n
SlurmctldPidFile={P["run"]}/slurmctld.pid
SlurmdPidFile={P["run"]}/slurmd-%n.pid
SlurmctldLogFile={P["log"]}/slurmctld.log
SlurmdLogFile={P["log"]}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
DebugFlags=Priority
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
MailProg=/bin/true
MpiDefault=none
ReturnToService=1
SlurmdTimeout=300
SlurmctldTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=600
MessageTimeout=20
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,bf_resolution=10,bf_continue,sched_interval=3,sched_min_interval=200000
PriorityType=priority/multifactor
PriorityWeightFairshare=100000
PriorityWeightAge=100
PriorityWeightQOS=10000
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityDecayHalfLife=7-0
PriorityCalcPeriod=1
PriorityMaxAge=7-0
PreemptType=preempt/qos
PreemptMode=CANCEL
JobRequeue=1
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={DBD_PORT}
AccountingStoragePass={MUNGE_SOCKET}
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu,gres/gpu:h100
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
NodeName=gpu[01-04] NodeHostname={host} NodeAddr=127.0.0.1 Port=17001-17004 CPUs={NODE_CPUS} Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory={NODE_MEM_MB} Gres=gpu:h100:8 Features=h100,ib State=UNKNOWN
NodeName=cpu01 NodeHostname={host} NodeAddr=127.0.0.1 Port=17005 CPUs={NODE_CPUS} Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory={NODE_MEM_MB} Features=cpu State=UNKNOWN
PartitionName=gpu Nodes=gpu[01-04] Default=YES MaxTime=2:00:00 DefaultTime=10:00 State=UP TRESBillingWeights="{gpu_weights}"
PartitionName=debug Nodes=gpu[01-04] MaxTime=30:00 DefaultTime=5:00 State=UP
PartitionName=cpu Nodes=cpu01 MaxTime=4:00:00 DefaultTime=10:00 State=UP
"""
    changed = False
    gres_conf = f"NodeName=gpu[01-04] Name=gpu Type=h100 File={P['dev']}/nvidia[0-7]\n"
    dbd_conf = f"""# generated by tests/slurmbed/cluster.py
AuthType=auth/munge
AuthInfo=socket={MUNGE_SOCKET}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={DBD_PORT}
SlurmUser=root
DebugLevel=info
LogFile={P["log"]}/slurmdbd.log
PidFile={P["run"]}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={MYSQL_PORT}
StorageUser=slurm
StoragePass={DB_PASS}
StorageLoc=slurm_acct_db
"""
    cgroup_conf = "CgroupPlugin=autodetect\nIgnoreSystemd=yes\n"
    for name, text, mode in (
        ("slurm.conf", slurm_conf, 0o644),
        ("gres.conf", gres_conf, 0o644),
        ("slurmdbd.conf", dbd_conf, 0o600),
        ("cgroup.conf", cgroup_conf, 0o644),
    ):
        f = P["etc"] / name
        if not f.exists() or f.read_text() != text:
            f.write_text(text)
            changed |= name in ("slurm.conf", "gres.conf")
        os.chmod(f, mode)
    return changed


def ensure_users() -> None:
    for user, (acct, _) in USERS.items():
        if run(["id", "-u", user], check=False).returncode != 0:
            run(
                ["useradd", "--no-create-home", "--shell", "/bin/bash", "--comment", f"slurmbed {acct}", user]
            )
        work = P["work"] / user
        work.mkdir(exist_ok=True)
        shutil.chown(work, user, user)


def start_munge() -> None:
    pidf = _pidfiles()["munged"]
    if _pid_alive(pidf):
        return
    key = P["munge"] / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    run(
        [
            "munged",
            "--force",
            f"--socket={MUNGE_SOCKET}",
            f"--key-file={key}",
            f"--pid-file={pidf}",
            f"--log-file={P['log']}/munged.log",
            f"--seed-file={P['munge']}/munged.seed",
        ]
    )
    _wait(lambda: MUNGE_SOCKET.exists() and _pid_alive(pidf), "munged")


def start_mariadb() -> None:
    pidf = _pidfiles()["mariadbd"]
    if _pid_alive(pidf):
        return
    data = P["mysql"] / "data"
    fresh = not (data / "mysql").exists()
    if fresh:
        run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            timeout=180,
        )
    logf = open(P["log"] / "mariadbd.out", "ab")
    subprocess.Popen(
        [
            "mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={MYSQL_SOCKET}",
            f"--port={MYSQL_PORT}",
            "--bind-address=127.0.0.1",
            f"--pid-file={pidf}",
            f"--log-error={P['log']}/mariadbd.log",
            "--user=root",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=48M",
            "--innodb-lock-wait-timeout=900",
            "--max-connections=100",
            "--skip-name-resolve",
        ],
        stdin=subprocess.DEVNULL,
        stdout=logf,
        stderr=logf,
        start_new_session=True,
    )
    _wait(lambda: MYSQL_SOCKET.exists() and _port_open(MYSQL_PORT) and _pid_alive(pidf), "mariadbd", 120)
    sql = (
        f"CREATE DATABASE IF NOT EXISTS slurm_acct_db; "
        f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}'; "
        f"CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '{DB_PASS}'; "
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; "
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
    )
    run(["mariadb", "--no-defaults", f"--socket={MYSQL_SOCKET}", "-uroot", "-e", sql])


def _daemon(argv: list[str], pidf: Path, what: str, timeout: float = 60) -> None:
    if _pid_alive(pidf):
        return
    pidf.unlink(missing_ok=True)
    r = run(argv, check=False, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed to start ({r.returncode}): {r.stderr.strip()}; see {P['log']}")
    _wait(lambda: _pid_alive(pidf), what, timeout)


def start_slurmdbd() -> None:
    _daemon(["slurmdbd"], _pidfiles()["slurmdbd"], "slurmdbd")
    _wait(lambda: _port_open(DBD_PORT), "slurmdbd port", 60)


def sacctmgr(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["sacctmgr", "-i", *args], check=check)


def _exists(entity: str, name: str, *cond: str) -> bool:
    r = run(["sacctmgr", "-n", "-P", "show", entity, name, *cond], check=False)
    return r.returncode == 0 and bool(r.stdout.strip())


def setup_accounting() -> None:
    """Cluster, accounts, users and QOS (before slurmctld so it registers a known cluster)."""
    if not _exists("cluster", CLUSTER):
        sacctmgr("add", "cluster", CLUSTER)
    for q in ("high", "low"):
        if not _exists("qos", q):
            sacctmgr("add", "qos", q)
    sacctmgr("modify", "qos", "where", "name=low", "set", "Priority=0")
    sacctmgr("modify", "qos", "where", "name=high", "set", "Priority=100", "Preempt=low", check=False)
    sacctmgr("modify", "qos", "where", "name=normal", "set", "Priority=10", check=False)
    for acct, (parent, share) in ACCOUNTS.items():
        if not _exists("account", acct):
            sacctmgr(
                "add",
                "account",
                acct,
                f"Cluster={CLUSTER}",
                f"Parent={parent}",
                f"Fairshare={share}",
                f"Description={acct}",
                "Organization=slurmbed",
            )
    for user, (default, others) in USERS.items():
        for acct in [default, *others]:
            r = run(
                ["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", f"account={acct}", "format=user"],
                check=False,
            )
            if not r.stdout.strip():
                sacctmgr(
                    "add",
                    "user",
                    user,
                    f"Account={acct}",
                    f"DefaultAccount={default}",
                    f"Cluster={CLUSTER}",
                    "Fairshare=1",
                    "QOS=normal,high,low",
                    "DefaultQOS=normal",
                )


def start_slurmctld() -> None:
    _daemon(["slurmctld", "-f", str(SLURM_CONF)], _pidfiles()["slurmctld"], "slurmctld")
    _wait(lambda: run(["scontrol", "ping"], check=False).stdout.find("UP") >= 0, "slurmctld ping", 60)


def start_slurmds() -> None:
    for n in NODE_PORTS:
        _daemon(["slurmd", "-f", str(SLURM_CONF), "-N", n], _pidfiles()[f"slurmd-{n}"], f"slurmd {n}")

    def all_up() -> bool:
        r = run(["sinfo", "--Node", "--noheader", "-o", "%N %T"], check=False)
        states = dict(line.split()[:2] for line in r.stdout.splitlines() if line.strip())
        return len(states) == len(NODE_PORTS) and all(
            not any(s.startswith(b) for b in ("unk", "down", "inval", "not_resp")) for s in states.values()
        )

    _wait(all_up, "all slurmd nodes to register", 90, 1)


def qos_gpu_limits() -> None:
    """GPU limits on QOS only after slurmctld has registered gres/gpu as a TRES."""
    sacctmgr("modify", "qos", "where", "name=low", "set", "MaxTRESPerUser=gres/gpu=16", check=False)
    sacctmgr("modify", "qos", "where", "name=high", "set", "MaxTRESPerUser=gres/gpu=32", check=False)


def start() -> None:
    why = missing_requirements()
    if why:
        raise SystemExit("slurmbed cannot start: " + "; ".join(why))
    t0 = time.monotonic()
    changed = write_configs()
    if changed and _pid_alive(_pidfiles()["slurmctld"]):
        run(["scontrol", "reconfigure"], check=False)
    ensure_users()
    start_munge()
    start_mariadb()
    start_slurmdbd()
    setup_accounting()
    start_slurmctld()
    start_slurmds()
    qos_gpu_limits()
    log(f"up in {time.monotonic() - t0:.1f} s; export SLURM_CONF={SLURM_CONF}")


def stop() -> None:
    stop_slurmrestd()
    order = [f"slurmd-{n}" for n in NODE_PORTS] + ["slurmctld", "slurmdbd", "mariadbd", "munged"]
    pf = _pidfiles()
    for name in order:
        pid = _pid_alive(pf[name])
        if pid is None:
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _pid_alive(pf[name]) == pid:
            time.sleep(0.2)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log(f"stopped {name} ({pid})")


def stop_one(name: str) -> None:
    """Stop one daemon (e.g. slurmdbd for the fault tests)."""
    pid = _pid_alive(_pidfiles()[name])
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(150):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


REST_SOCKET = P["run"] / "rest" / "slurmrestd.socket"
REST_USER = "sbalice"  # slurmrestd refuses to run as root; rest_auth/local lets root's socket peers in


def _rest_pidfile() -> Path:
    return P["run"] / "slurmrestd.pid"


def start_slurmrestd() -> Path:
    """slurmrestd 22.05 on a local unix socket (rest_auth/local), openapi v0.0.38; returns the socket.

    Not part of `start`: only the REST tests need it (and the Debian package `slurmrestd`). It has no
    pidfile option, so the pid is written here; its command line names this bed's slurm.conf.
    """
    if _pid_alive(_rest_pidfile()):
        return REST_SOCKET
    exe = shutil.which("slurmrestd") or "/usr/sbin/slurmrestd"
    d = REST_SOCKET.parent
    d.mkdir(parents=True, exist_ok=True)
    REST_SOCKET.unlink(missing_ok=True)
    import pwd  # noqa: PLC0415 - Unix only, like the rest of the bed

    pw = pwd.getpwnam(REST_USER)
    os.chown(d, pw.pw_uid, pw.pw_gid)
    log_f = open(P["log"] / "slurmrestd.log", "ab")  # noqa: SIM115 - the daemon keeps it
    proc = subprocess.Popen(
        [exe, "-f", str(SLURM_CONF), "-a", "rest_auth/local", "-u", REST_USER, f"unix:{REST_SOCKET}"],
        env=env(),
        stdout=log_f,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _rest_pidfile().write_text(f"{proc.pid}\n")
    _wait(REST_SOCKET.exists, "slurmrestd socket", 30)
    return REST_SOCKET


def stop_slurmrestd() -> None:
    pid = _pid_alive(_rest_pidfile())
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
    _rest_pidfile().unlink(missing_ok=True)


def restart_slurmctld() -> None:
    """Stop slurmctld (it saves its state) and start it again: running jobs survive, sdiag counters reset."""
    stop_one("slurmctld")
    start_slurmctld()


def acquire_lock(wait: float):
    """Exclusive use of the bed across processes (several engineers' test sessions share one machine).

    Returns the open lock file (keep it open; closing it releases the lock), or None when another
    process still holds it after `wait` seconds. One lock for every bed directory, because the ports are
    fixed; it sits outside the bed so that `wipe` keeps it.
    """
    path = Path("/tmp/slurmscope-slurmbed.lock")
    fh = open(path, "a")  # noqa: SIM115 - the caller owns the handle
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fh
        except BlockingIOError:
            if time.monotonic() >= deadline:
                fh.close()
                return None
            time.sleep(2)


def status() -> dict[str, int | None]:
    return {name: _pid_alive(pf) for name, pf in _pidfiles().items()}


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "status"
    if (
        cmd
        in (
            "start",
            "stop",
            "wipe",
            "stop-dbd",
            "start-dbd",
            "stop-ctld",
            "start-ctld",
            "restart-ctld",
            "start-rest",
            "stop-rest",
        )
        and "--force" not in argv
    ):
        held = acquire_lock(0)
        if held is None:
            print(
                "slurmbed: a test session is using the bed (lock held); add --force to override",
                file=sys.stderr,
            )
            return 4
    if cmd == "start":
        start()
    elif cmd == "stop":
        stop()
    elif cmd == "status":
        st = status()
        for name, pid in st.items():
            print(f"{name:16} {'running pid ' + str(pid) if pid else 'stopped'}")
        return 0 if all(st.values()) else 3
    elif cmd == "env":
        print(f"export SLURM_CONF={SLURM_CONF}")
    elif cmd == "stop-dbd":
        stop_one("slurmdbd")
    elif cmd == "start-dbd":
        start_slurmdbd()
    elif cmd == "stop-ctld":
        stop_one("slurmctld")
    elif cmd == "start-ctld":
        start_slurmctld()
    elif cmd == "restart-ctld":
        restart_slurmctld()
    elif cmd == "start-rest":
        print(start_slurmrestd())
    elif cmd == "stop-rest":
        stop_slurmrestd()
    elif cmd == "wipe":
        stop()
        shutil.rmtree(BED, ignore_errors=True)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
