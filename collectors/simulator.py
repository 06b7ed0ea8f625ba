"""A simulated AI training cluster that writes what Slurm would print, plus the truth behind it.

Why a simulator: a newcomer has no Slurm and no GPU, and every pipeline needs a bed where the right
answer is known. The simulator is event-driven and deterministic by seed (one `random.Random`, ties in
the event heap broken by a sequence number, no iteration over string-hashed sets), so the same seed gives
byte-identical files. It schedules like Slurm does (multifactor priority with Fair Tree fair-share, a
main pass in priority order that stops a partition at its first blocked job, and a backfill pass that
reserves nodes for the blocked jobs it tests and only starts a lower-priority job where it cannot delay
those reservations), injects faults (XID classes, node failures with NODE_FAIL and automatic requeue
from the last checkpoint, drains with reasons, user errors, timeouts, OOM, cancels, one degrading GPU),
and writes:

- ``sacct.txt``: ``sacct --allusers --duplicates --parsable2`` with header (the live field list of
  docs/collectors.md, default ``|`` delimiter), one line per allocation attempt, plus ``.extern`` and
  ``.batch``/``.0`` steps;
- ``snapshots/<kind>/<epoch>.txt`` for sinfo, squeue, sshare and sdiag in the live formats (the epoch in
  the file name is the snapshot time; sdiag also prints it inside), and one reservations snapshot;
- ``events.txt``: ``sacctmgr --parsable2 show event`` output (node DOWN/DRAIN history);
- ``events.jsonl``: the ground truth (every submit, start, end, fault, requeue, drain, resume, backfill
  reservation), one JSON object per line, for tests to reconcile against;
- ``summary.json``: the summary dict that `simulate` returns.

Times are printed in UTC as ``YYYY-MM-DDTHH:MM:SS``; ingest them with ``--timezone UTC``.
Per-GPU telemetry (NVML spool) is a separate step, see ``write_telemetry``.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import random
import shutil
import time as _time
from bisect import bisect_left, insort
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

US = "\x1f"
SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "Cluster",
    "Partition",
    "QOS",
    "Account",
    "User",
    "UID",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "State",
    "ExitCode",
    "NNodes",
    "NCPUS",
    "ReqMem",
    "AllocTRES",
    "NodeList",
    "Flags",
    "Priority",
    "Reason",
    "JobName",
)
SSHARE_HEADER = (
    "Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS|"
    "GrpTRESMins|TRESRunMins"
)
EVENTS_HEADER = "Cluster|Cluster Nodes|NodeName|TimeStart|TimeEnd|State|Reason|User"
DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class SimConfig:
    """Knobs of one simulation; the defaults are the calibrated cluster documented in docs/simulator.md."""

    gpus: int = 512
    days: float = 30.0
    seed: int = 42
    cluster: str = "simcluster"
    start: int = int(DEFAULT_START.timestamp())
    snapshot_interval_s: int = 3600  # sinfo/squeue/sshare/sdiag cadence
    steps: bool = True  # write .extern/.batch steps into sacct.txt
    bf_interval_s: int = 30  # SchedulerParameters bf_interval
    bf_window_s: int = 3 * 86400  # bf_window (covers the longest time limit)
    bf_max_job_test: int = 100  # jobs the backfill pass tests per partition and cycle
    bf_max_reservations: int = 8  # blocked jobs per partition that get a reservation per cycle
    priority_calc_period_s: int = 300  # PriorityCalcPeriod
    decay_half_life_s: int = 7 * 86400  # PriorityDecayHalfLife
    load: float = 1.0  # multiplies every arrival rate
    fault_rate: float = 2.0  # node-level faults per 1000 GPU-days
    checkpoint_hours: float = 2.0  # pretraining checkpoint interval K
    write_events_jsonl: bool = True
    write_snapshots: bool = True
    telemetry_nodes: int = 4  # GPU nodes with simulated NVML telemetry (spool format v1)
    telemetry_days: float = 1.0  # per-minute telemetry for the last N days of the period


# --------------------------------------------------------------------------------------------- helpers


class _Clock:
    """Lookup tables for time formatting, which the writer calls millions of times."""

    def __init__(self) -> None:
        self.days: dict[int, str] = {}
        self.hms: list[str] = []

    def table(self) -> list[str]:
        if not self.hms:
            self.hms = [f"T{h:02d}:{m:02d}:{s:02d}" for h in range(24) for m in range(60) for s in range(60)]
        return self.hms


_CLOCK = _Clock()


def ts(t: int) -> str:
    """UTC `YYYY-MM-DDTHH:MM:SS`."""
    d, s = divmod(t, 86400)
    day = _CLOCK.days.get(d)
    if day is None:
        day = _CLOCK.days[d] = datetime.fromtimestamp(d * 86400, UTC).strftime("%Y-%m-%d")
    return day + (_CLOCK.hms or _CLOCK.table())[s]


def duration(sec: int) -> str:
    """Slurm's elapsed/time-limit form: `[D-]HH:MM:SS`."""
    d, s = divmod(int(sec), 86400)
    hms = (_CLOCK.hms or _CLOCK.table())[s][1:]
    return f"{d}-{hms}" if d else hms


def limit_str(sec: int) -> str:
    """squeue's %l form: `M:SS` under an hour, `H:MM:SS` under a day, else `D-HH:MM:SS`."""
    d, s = divmod(int(sec), 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{m}:{s:02d}"


def ctime(t: int) -> str:
    return _time.strftime("%a %b %d %H:%M:%S %Y", _time.gmtime(t))


def ranges(idx: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in sorted(idx):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def hostlist(nodes: list[Node]) -> str:
    """Slurm's compressed hostlist (`h100-[001-004,007],a100-002`), grouped by prefix in first-seen order."""
    if not nodes:
        return "None assigned"
    groups: dict[str, list[Node]] = {}
    for n in nodes:
        groups.setdefault(n.prefix, []).append(n)
    parts = []
    for prefix, ns in groups.items():
        width = ns[0].width
        if len(ns) == 1:
            parts.append(ns[0].name)
            continue
        rs = ranges([n.num for n in ns])
        body = ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}" for a, b in rs)
        parts.append(f"{prefix}[{body}]")
    return ",".join(parts)


def idx_list(idx: list[int]) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges(idx))


def _j(v: object) -> str:
    if isinstance(v, str):
        return '"' + v + '"'  # simulator strings never contain quotes or backslashes
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ",".join(_j(x) for x in v) + "]"
    return str(v)


# ------------------------------------------------------------------------------------------ model


class Node:
    __slots__ = (
        "idx",
        "name",
        "prefix",
        "num",
        "width",
        "part",
        "cap",
        "free",
        "cpus",
        "cpus_per_unit",
        "mem_mb",
        "mem_per_unit",
        "gpu_type",
        "owners",
        "jobs",
        "down",
        "drain",
        "reason",
        "reason_time",
        "reason_user",
        "resv",
        "bf_resv",
        "features",
        "gpu_uuids",
    )

    def __init__(
        self,
        idx: int,
        prefix: str,
        num: int,
        width: int,
        part: Partition,
        cap: int,
        cpus: int,
        mem_mb: int,
        gpu_type: str | None,
        features: str,
    ) -> None:
        self.idx, self.prefix, self.num, self.width, self.part = idx, prefix, num, width, part
        self.name = f"{prefix}{num:0{width}d}"
        self.cap = self.free = cap  # units: GPUs on GPU nodes, CPUs on CPU nodes
        self.cpus = cpus
        self.cpus_per_unit = cpus // cap
        self.mem_mb = mem_mb
        self.mem_per_unit = mem_mb // cap
        self.gpu_type = gpu_type
        self.owners: list[Job | None] = [None] * cap if gpu_type else []
        self.jobs: list[Job] = []
        self.down = False
        self.drain = False
        self.reason = ""
        self.reason_time = 0
        self.reason_user = ""
        self.resv: Reservation | None = None
        self.bf_resv = 0  # backfill reservation start on this node (0 = none)
        self.features = features
        self.gpu_uuids: list[str] = []

    def usable(self) -> bool:
        return not self.down and not self.drain


class Partition:
    __slots__ = (
        "name",
        "nodes",
        "gpu_type",
        "queue",
        "running",
        "heaps",
        "dirty",
        "bf_dirty",
        "is_gpu",
        "default",
        "cap",
        "idle",
        "free_units",
        "version",
        "blocked",
    )

    def __init__(self, name: str, gpu_type: str | None, default: bool) -> None:
        self.name = name
        self.gpu_type = gpu_type
        self.is_gpu = gpu_type is not None
        self.default = default
        self.nodes: list[Node] = []
        self.queue: list[tuple] = []  # (-priority, job_id, job), sorted: highest priority first
        self.running: list[tuple] = []  # (expected_end, job_id, job), sorted
        self.heaps: list[list[int]] = []  # GPU partitions: per free-unit count, heap of node idx
        self.dirty = True
        self.bf_dirty = True
        self.cap = 0
        self.idle = 0  # nodes with nothing allocated (an upper bound on what whole-node jobs get)
        self.free_units = 0  # free units over all nodes (upper bound for smaller jobs)
        self.version = 0  # bumped whenever resources are released
        self.blocked = None  # (version, job) of the last main pass that stopped at a blocked job

    def touch(self) -> None:
        self.dirty = self.bf_dirty = True


@dataclass
class Reservation:
    name: str
    partition: str
    nodes: list
    start: int
    end: int
    account: str


class Job:
    __slots__ = (
        "raw",
        "jid",
        "array_id",
        "task",
        "name",
        "user",
        "uid",
        "account",
        "part",
        "qos",
        "cls",
        "submit",
        "eligible",
        "start",
        "end",
        "limit",
        "nnodes",
        "units",
        "whole",
        "state",
        "exit",
        "nodes",
        "gpu_idx",
        "sched_by",
        "priority",
        "work",
        "progress",
        "target",
        "outcome",
        "ckpt",
        "attempt",
        "requeue",
        "interactive",
        "resv",
        "token",
        "array_rec",
        "cont_of",
        "patience",
        "first_submit",
        "cause",
        "tele",
    )

    def __init__(self) -> None:
        self.array_id = 0
        self.task = -1
        self.start = 0
        self.end = 0
        self.state = "PENDING"
        self.exit = "0:0"
        self.nodes: list[Node] = []
        self.gpu_idx: list[list[int]] = []
        self.sched_by = ""
        self.priority = 0
        self.progress = 0
        self.attempt = 1
        self.requeue = True
        self.interactive = False
        self.resv: Reservation | None = None
        self.token = 0
        self.array_rec = None
        self.cont_of = 0
        self.patience = 0
        self.cause = ""
        self.tele: list[int] = []


class ArrayRec:
    """A pending job array: one queue entry until its tasks split off, as Slurm keeps it."""

    __slots__ = (
        "raw",
        "name",
        "user",
        "uid",
        "account",
        "part",
        "qos",
        "cls",
        "submit",
        "limit",
        "units",
        "next_task",
        "ntasks",
        "priority",
        "task_ids",
        "params",
    )

    def __init__(self) -> None:
        self.next_task = 0


# ------------------------------------------------------------------------------------------ workload

# Arrival rates per 1000 GPUs per day (pretraining: per day for the whole cluster, its size scales with
# the partition instead), tuned so that 10,000 GPUs x 30 days is about a million jobs (array tasks
# counted) and the GPU job mix lands near the published traces (docs/simulator.md).
CLASSES = {
    #            rate   partition mix          qos
    "pretrain": (3.0, {"h100": 0.8, "a100": 0.2}, "high"),
    "finetune": (200.0, {"h100": 0.5, "a100": 0.5}, "normal"),
    "eval": (8.0, {"h100": 0.3, "a100": 0.7}, "low"),  # arrays, ~100 tasks on average
    "interactive": (50.0, {"h100": 0.5, "a100": 0.5}, "debug"),
    "dev": (1000.0, {"h100": 0.5, "a100": 0.5}, "normal"),
    "cpu": (1250.0, {"cpu": 1.0}, "normal"),
}
OUTCOMES = {
    #              COMPLETED FAILED CANCELLED OUT_OF_MEMORY
    "pretrain": (0.30, 0.15, 0.55, 0.0),
    "finetune": (0.62, 0.18, 0.15, 0.05),
    "eval": (0.80, 0.15, 0.02, 0.03),
    "interactive": (0.45, 0.05, 0.50, 0.0),
    "dev": (0.42, 0.46, 0.09, 0.03),
    "cpu": (0.85, 0.10, 0.04, 0.01),
}
ACCOUNTS = {
    # parent, raw shares, users, workload classes it submits
    "research": ("root", 50, 0, ()),
    "pretrain": ("research", 40, 5, ("pretrain", "dev", "interactive", "eval")),
    "multimodal": ("research", 20, 6, ("pretrain", "finetune", "dev", "interactive", "eval")),
    "alignment": ("research", 20, 8, ("finetune", "eval", "dev", "interactive")),
    "product": ("root", 30, 0, ()),
    "finetune": ("product", 30, 8, ("finetune", "dev", "interactive", "eval")),
    "evals": ("product", 20, 6, ("eval", "dev", "interactive")),
    "data": ("root", 20, 0, ()),
    "data-eng": ("data", 10, 6, ("cpu", "dev")),
}
QOS = {"high": 1000, "normal": 100, "debug": 500, "low": 0}
NAMES = (
    "ada",
    "bo",
    "chen",
    "dana",
    "eli",
    "fatima",
    "gus",
    "hana",
    "ivan",
    "jun",
    "kira",
    "leo",
    "mei",
    "nils",
    "omar",
    "pia",
    "quinn",
    "ravi",
    "sara",
    "tomas",
    "uma",
    "vik",
    "wen",
    "xena",
    "yuki",
    "zoe",
    "arjun",
    "bea",
    "carlos",
    "dmitri",
    "emma",
    "farid",
    "gita",
    "hugo",
    "ines",
    "jonas",
    "kai",
    "lena",
    "marco",
    "nora",
    "oskar",
)
W_AGE, W_FS, W_SIZE, W_PART, W_QOS, MAX_AGE = 1000, 10000, 1000, 1000, 10000, 7 * 86400
# Node faults by class: (weight, xid, effect, text). down = a health check marks the node DOWN, its jobs
# end NODE_FAIL and batch jobs are requeued; gpu_fail = the job on that GPU crashes (FAILED) and the node
# is drained for a GPU reset once idle; node_fail = every job on the node crashes (FAILED) and the node
# is drained; maint = an admin drains the node for maintenance.
FAULTS = (
    (0.25, 79, "down", "GPU fell off the bus"),
    (0.20, 0, "down", "Not responding"),
    (0.15, 48, "gpu_fail", "double-bit ECC error"),
    (0.20, 94, "gpu_fail", "contained ECC error, row remap pending"),
    (0.10, 95, "node_fail", "uncontained ECC error"),
    (0.10, -1, "maint", "kernel upgrade"),
)


class Simulator:
    """One run. State lives on the instance; `run()` then `write(out_dir)`."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.t0 = cfg.start
        self.t_end = cfg.start + int(cfg.days * 86400)
        self.now = self.t0
        self.heap: list[tuple] = []
        self.seq = 0
        self.next_raw = 1000
        self.records: list[str] = []  # sacct lines not yet flushed to sacct.txt
        self.state_counts: dict[str, int] = {}
        self.ev: list[str] = []  # events.jsonl lines
        self.node_events: list[list] = []  # [node, start, end|None, state, reason, user]
        self.counters = {
            "submitted": 0,
            "started": 0,
            "completed": 0,
            "canceled": 0,
            "failed": 0,
            "bf_total": 0,
            "bf_since": 0,
            "bf_cycles": 0,
            "main_cycles": 0,
            "bf_last": 0,
            "bf_last_depth": 0,
            "bf_max_us": 0,
            "main_max_us": 0,
            "main_last_us": 0,
            "bf_last_us": 0,
            "main_depth_sum": 0,
            "bf_depth_sum": 0,
            "main_us_sum": 0,
            "bf_us_sum": 0,
            "bf_qlen_sum": 0,
        }
        self.day_counters = dict.fromkeys(("submitted", "started", "completed", "canceled", "failed"), 0)
        self.stats_since = self.t0
        self.pending_arrays: list[ArrayRec] = []
        self._bf_fail: set | None = None
        self._stash: dict[int, Node] = {}
        self._stash_barrier = 0
        self._resv_base: dict[int, int] | None = None
        self._resv_fail: set = set()
        self._build_cluster()
        self._build_accounts()

    # ------------------------------------------------------------------ setup

    def _build_cluster(self) -> None:
        cfg = self.cfg
        gpu_nodes = max(2, math.ceil(cfg.gpus / 8))
        n_h100 = max(1, round(gpu_nodes * 0.6))
        n_a100 = max(1, gpu_nodes - n_h100)
        n_cpu = max(2, gpu_nodes // 32)
        self.parts: dict[str, Partition] = {}
        self.nodes: list[Node] = []
        specs = (
            ("h100", "h100", n_h100, 8, 112, 2_000_000, "h100,hbm80g,ib"),
            ("a100", "a100", n_a100, 8, 128, 1_000_000, "a100,hbm80g,ib"),
            ("cpu", None, n_cpu, 128, 128, 512_000, "cpu,avx512"),
        )
        for i, (pname, gtype, count, cap, cpus, mem, feat) in enumerate(specs):
            p = Partition(pname, gtype, default=(i == 0))
            width = max(3, len(str(count)))
            for k in range(1, count + 1):
                n = Node(len(self.nodes), f"{pname}-", k, width, p, cap, cpus, mem, gtype, feat)
                if gtype:
                    n.gpu_uuids = [self._uuid(n.name, g) for g in range(cap)]
                p.nodes.append(n)
                self.nodes.append(n)
            p.cap = count * cap
            p.idle = count
            p.free_units = count * cap
            if p.is_gpu:
                p.heaps = [[] for _ in range(cap + 1)]
                for n in p.nodes:
                    p.heaps[cap].append(n.idx)
            else:
                p.heaps = [[(-n.cap, n.idx) for n in p.nodes]]
                heapq.heapify(p.heaps[0])
            self.parts[pname] = p
        self.total_nodes = len(self.nodes)
        self.gpu_total = sum(p.cap for p in self.parts.values() if p.is_gpu)
        # One advance reservation for a large pretraining run: half the H100 nodes for 3 days from day 10.
        h = self.parts["h100"]
        size = max(1, min(64, len(h.nodes) // 2))
        rn = h.nodes[len(h.nodes) - size :]  # the last nodes, which the node search tries last
        rstart = self.t0 + int(min(10 * 86400, 0.3 * cfg.days * 86400))
        rstart -= rstart % 3600
        self.resv = Reservation("llm-hero-run", "h100", rn, rstart, rstart + 3 * 86400, "pretrain")
        # Telemetry: the degrading GPU's node (the last H100 node), then alternately H100 and A100 nodes.
        a = self.parts["a100"].nodes
        pick = [h.nodes[-1]]
        for i in range(max(len(h.nodes), len(a))):
            for ns in (h.nodes, a):
                if i < len(ns) and ns[i] not in pick:
                    pick.append(ns[i])
        self.tele = {n.idx for n in pick[: max(0, cfg.telemetry_nodes)]}
        self.gpu_iv: list[list] = []  # [node idx, gpu index, job, start, end|None]
        self.tele_events: list[tuple] = []

    def _uuid(self, node: str, gpu: int) -> str:
        h = random.Random(f"{self.cfg.seed}:{node}:{gpu}").getrandbits(128)
        x = f"{h:032x}"
        return f"GPU-{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"

    def _build_accounts(self) -> None:
        self.users: dict[str, tuple[str, int]] = {}  # user -> (account, uid)
        self.acct_users: dict[str, list[str]] = {}
        self.class_users: dict[str, list[str]] = {c: [] for c in CLASSES}
        k = 0
        for acct, (_parent, _shares, nusers, classes) in ACCOUNTS.items():
            us = []
            for _ in range(nusers):
                name = NAMES[k % len(NAMES)] + (str(k // len(NAMES)) if k >= len(NAMES) else "")
                self.users[name] = (acct, 10000 + k)
                us.append(name)
                k += 1
                for c in classes:
                    self.class_users[c].append(name)
            self.acct_users[acct] = us
        self._kids: dict[str, list[tuple[str, str, int]]] = {}
        for a, (parent, shares, _n, _c) in ACCOUNTS.items():
            self._kids.setdefault(parent, []).append(("a", a, shares))
        for a, us in self.acct_users.items():
            self._kids.setdefault(a, []).extend(("u", u, 1) for u in us)
        self._kid_shares = {a: sum(x[2] for x in kids) for a, kids in self._kids.items()}
        self._paths: dict[str, list[str]] = {}
        for u, (a, _uid) in self.users.items():
            path = []
            while a != "root":
                path.append(a)
                a = ACCOUNTS[a][0]
            self._paths[u] = path
        self.usage: dict[str, float] = dict.fromkeys(self.users, 0.0)  # decayed billing-seconds
        self.run_rate: dict[str, float] = dict.fromkeys(self.users, 0.0)  # billing units running now
        self.fs: dict[str, float] = dict.fromkeys(self.users, 1.0)
        self.level: dict[str, float] = {}

    # ------------------------------------------------------------------ event plumbing

    def push(self, t: int, kind: int, obj: object, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, token))

    def log(self, t: int, typ: str, **kw: object) -> None:
        if not self.cfg.write_events_jsonl:
            return
        body = ",".join(f'"{k}":{_j(v)}' for k, v in kw.items())
        self.ev.append(f'{{"t":"{ts(t)}","type":"{typ}",{body}}}')

    # ------------------------------------------------------------------ workload generation

    def _lognorm(self, median: float, sigma: float, lo: float, hi: float) -> int:
        return int(min(hi, max(lo, median * math.exp(self.rng.gauss(0.0, sigma)))))

    def _outcome(self, cls: str) -> str:
        r = self.rng.random()
        c, f, x, _o = OUTCOMES[cls]
        if r < c:
            return "COMPLETED"
        if r < c + f:
            return "FAILED"
        if r < c + f + x:
            return "CANCELLED"
        return "OUT_OF_MEMORY"

    def _pick_part(self, cls: str) -> Partition:
        mix = CLASSES[cls][1]
        r = self.rng.random()
        acc = 0.0
        for name, w in mix.items():
            acc += w
            if r < acc:
                return self.parts[name]
        return self.parts[next(iter(mix))]

    def _rate(self, cls: str) -> float:
        """Arrivals per second of a workload class."""
        # Pretraining runs scale in size with the partition, so their rate does not grow with it (but a
        # cluster under 512 GPUs sees proportionally fewer of them).
        scale = min(1.0, self.gpu_total / 512.0) if cls == "pretrain" else self.gpu_total / 1000.0
        return CLASSES[cls][0] * scale * self.cfg.load / 86400.0

    def _schedule_arrivals(self) -> None:
        for cls in CLASSES:
            per_s = self._rate(cls)
            if per_s > 0:
                self.push(self.t0 + int(self.rng.expovariate(per_s)), K_ARRIVAL, cls)
        # Node faults: a cluster-wide Poisson process over GPU nodes.
        per_s = self._fault_rate()
        if per_s > 0:
            self.push(self.t0 + int(self.rng.expovariate(per_s)), K_FAULT, None)
        # One slowly degrading GPU (telemetry ground truth; the scheduler never notices it).
        gn = self.parts["h100"].nodes[-1]
        self.degrading = (gn.name, 3, gn.gpu_uuids[3], self.t0 + 86400)
        self.log(
            self.t0 + 86400,
            "degradation_start",
            node=gn.name,
            gpu_index=3,
            gpu_uuid=gn.gpu_uuids[3],
            temp_rise_c_per_day=DEG_TEMP_PER_DAY,
            sm_clock_drop_mhz_per_day=DEG_CLOCK_PER_DAY,
        )
        # The reservation and its hero run.
        r = self.resv
        for n in r.nodes:
            n.resv = r
        self.push(r.start, K_RESV, "start")
        self.push(r.end, K_RESV, "end")
        self.log(
            self.t0,
            "reservation",
            name=r.name,
            start=ts(r.start),
            end=ts(r.end),
            nodes=hostlist(r.nodes),
            account=r.account,
        )

    def _new_job(self, cls: str, part: Partition, t: int) -> Job:
        j = Job()
        j.cls = cls
        j.part = part
        j.qos = CLASSES[cls][2]
        user = self.rng.choice(self.class_users[cls])
        j.user = user
        j.account, j.uid = self.users[user]
        j.submit = j.eligible = j.first_submit = t
        nodes_in_part = len(part.nodes)
        rng = self.rng
        if cls == "pretrain":
            j.nnodes = max(1, min(nodes_in_part // 2, round(nodes_in_part * rng.uniform(0.05, 0.35))))
            j.units = 8
            j.whole = True
            j.limit = 72 * 3600
            j.work = self._lognorm(24 * 3600, 0.8, 1800, 240 * 3600)
            j.ckpt = int(self.cfg.checkpoint_hours * 3600)
            j.name = f"pt-{rng.choice(('llama', 'moe', 'vit', 'dit'))}-{rng.choice((7, 13, 34, 70))}b"
        elif cls == "finetune":
            r = rng.random()
            if r < 0.15:
                j.nnodes, j.units, j.whole = 1, 4, False
            elif r < 0.75:
                j.nnodes, j.units, j.whole = 1, 8, True
            else:
                j.nnodes, j.units, j.whole = min(nodes_in_part, rng.choice((2, 2, 4))), 8, True
            j.limit = 24 * 3600
            j.work = self._lognorm(3 * 3600, 1.0, 300, 60 * 3600)
            j.ckpt = 3600 if rng.random() < 0.5 else 0
            j.name = f"ft-{rng.choice(('sft', 'dpo', 'lora', 'rlhf'))}"
        elif cls == "interactive":
            j.nnodes, j.units, j.whole = 1, 8, True
            j.limit = 4 * 3600
            j.work = self._lognorm(2400, 1.0, 60, 6 * 3600)
            j.ckpt = 0
            j.interactive = True
            j.requeue = False
            j.name = "bash"
        elif cls == "dev":
            r = rng.random()
            units = 1 if r < 0.5 else 2 if r < 0.65 else 4 if r < 0.8 else 8
            j.nnodes, j.units, j.whole = 1, units, units == 8
            j.limit = 2 * 3600
            j.work = self._lognorm(150, 1.6, 5, 4 * 3600)
            j.ckpt = 0
            j.name = rng.choice(("train.sh", "debug", "smoke-test", "profile", "nccl-test"))
        else:  # cpu
            j.nnodes, j.units, j.whole = 1, rng.choice((1, 2, 4, 8, 16, 32)), False
            j.limit = 12 * 3600
            j.work = self._lognorm(300, 1.5, 5, 16 * 3600)
            j.ckpt = 0
            j.name = rng.choice(("tokenize", "dedup", "shard", "filter", "pack"))
        self._plan(j)
        return j

    def _plan(self, j: Job) -> None:
        j.outcome = self._outcome(j.cls)
        if j.outcome == "COMPLETED":
            j.target = j.work
        elif j.outcome == "OUT_OF_MEMORY":
            j.target = max(1, int(j.work * self.rng.random() * 0.2))
        elif j.outcome == "FAILED" and j.cls in ("dev", "eval", "cpu"):
            j.target = max(1, int(j.work * self.rng.random() * 0.3))
        else:
            j.target = max(1, int(j.work * self.rng.random()))
        if self.rng.random() < 0.02:
            j.patience = self._lognorm(1800, 1.0, 60, 86400)

    def _register(self, j: Job) -> None:
        self.counters["submitted"] += 1
        self.day_counters["submitted"] += 1
        if self.cfg.write_events_jsonl:
            self.ev.append(
                f'{{"t":"{ts(j.submit)}","type":"submit","job_id_raw":{j.raw},"job":"{j.jid}","attempt":{j.attempt},'
                f'"cls":"{j.cls}","user":"{j.user}","account":"{j.account}","partition":"{j.part.name}",'
                f'"qos":"{j.qos}","nodes":{j.nnodes},"gpus":{self._gpus(j)},"cpus":{self._cpus(j)},'
                f'"timelimit":{j.limit},"work":{j.work},"cont_of":{j.cont_of}}}'
            )

    def _arrival(self, cls: str) -> None:
        t = self.now
        self.push(t + 1 + int(self.rng.expovariate(self._rate(cls))), K_ARRIVAL, cls)
        part = self._pick_part(cls)
        if cls == "eval":
            self._submit_array(part, t)
            return
        j = self._new_job(cls, part, t)
        j.raw = self.next_raw
        self.next_raw += 1
        j.jid = str(j.raw)
        self._register(j)
        self._enqueue(j, at_submit=True)

    def _submit_array(self, part: Partition, t: int) -> None:
        rng = self.rng
        a = ArrayRec()
        a.cls = "eval"
        a.part = part
        a.qos = CLASSES["eval"][2]
        a.user = rng.choice(self.class_users["eval"])
        a.account, a.uid = self.users[a.user]
        a.submit = t
        a.limit = 3600
        a.units = 1
        a.ntasks = max(2, min(400, int(rng.expovariate(1 / 100.0)) + 2))
        a.name = f"eval-{rng.choice(('mmlu', 'gsm8k', 'humaneval', 'arc', 'hellaswag'))}"
        a.raw = self.next_raw
        # Slurm: split-off tasks get new ids, the last task keeps the array's own id.
        a.task_ids = [self.next_raw + 1 + i for i in range(a.ntasks - 1)] + [self.next_raw]
        self.next_raw += a.ntasks
        a.params = [(self._lognorm(360, 0.9, 20, 3 * 3600)) for _ in range(a.ntasks)]
        a.priority = 0
        self.counters["submitted"] += a.ntasks
        self.day_counters["submitted"] += a.ntasks
        self.log(
            t,
            "submit_array",
            job_id_raw=a.raw,
            tasks=a.ntasks,
            user=a.user,
            account=a.account,
            partition=part.name,
            qos=a.qos,
        )
        self.pending_arrays.append(a)
        a.priority = self._prio(a.account, a.user, a.qos, 1, t, t)
        self._queue_insert(part, a.priority, a.raw, a)
        part.touch()

    def _array_task(self, a: ArrayRec) -> Job:
        i = a.next_task
        a.next_task += 1
        j = Job()
        j.cls, j.part, j.qos, j.user, j.account, j.uid = "eval", a.part, a.qos, a.user, a.account, a.uid
        j.submit = j.eligible = j.first_submit = a.submit
        j.nnodes, j.units, j.whole, j.limit, j.ckpt = 1, 1, False, a.limit, 0
        j.work = a.params[i]
        j.name = a.name
        j.raw = a.task_ids[i]
        j.array_id = a.raw
        j.task = i
        j.jid = f"{a.raw}_{i}"
        j.priority = a.priority
        self._plan(j)
        j.patience = 0
        if self.cfg.write_events_jsonl:
            self.ev.append(
                f'{{"t":"{ts(j.submit)}","type":"submit","job_id_raw":{j.raw},"job":"{j.jid}","attempt":1,'
                f'"cls":"eval","user":"{j.user}","account":"{j.account}","partition":"{j.part.name}",'
                f'"qos":"{j.qos}","nodes":1,"gpus":{self._gpus(j)},"cpus":{self._cpus(j)},'
                f'"timelimit":{j.limit},"work":{j.work},"cont_of":0,"array_job_id":{a.raw}}}'
            )
        return j

    # ------------------------------------------------------------------ priority (multifactor, Fair Tree)

    def _prio(self, account: str, user: str, qos: str, nnodes: int, submit: int, now: int) -> int:
        age = min(1.0, max(0, now - submit) / MAX_AGE)
        size = nnodes / self.total_nodes
        return int(W_AGE * age + W_FS * self.fs[user] + W_SIZE * size + W_PART + W_QOS * QOS[qos] / 1000)

    def _fair_tree(self) -> None:
        """Fair Tree: siblings ranked by LevelFS = shares/usage, depth first; a user's factor is its rank."""
        usage = self.usage
        acct_usage: dict[str, float] = dict.fromkeys(ACCOUNTS, 0.0)
        for u, path in self._paths.items():
            v = usage[u]
            for a in path:
                acct_usage[a] += v
        order: list[str] = []
        level: dict[str, float] = {}
        inf = float("inf")

        def visit(acct: str) -> None:
            kids = self._kids.get(acct)
            if not kids:
                return
            uses = [acct_usage[k] if t == "a" else usage[k] for t, k, _s in kids]
            tot_u = sum(uses)
            tot_s = self._kid_shares[acct]
            scored = []
            for (t, k, sh), u in zip(kids, uses, strict=True):
                lfs = (sh / tot_s) / (u / tot_u) if u > 0 else inf
                level[t + ":" + k] = lfs
                scored.append((-lfs, k, t))
            scored.sort()
            for _neg, k, t in scored:
                if t == "u":
                    order.append(k)
                else:
                    visit(k)

        visit("root")
        n = len(order)
        fs = self.fs
        for rank, u in enumerate(order):
            fs[u] = (n - rank) / n
        self.level = level
        self.acct_usage = acct_usage

    def _recalc(self) -> None:
        """PriorityCalcPeriod: decay usage, charge running allocations, recompute every pending priority."""
        dt = self.cfg.priority_calc_period_s
        decay = 0.5 ** (dt / self.cfg.decay_half_life_s)
        for u in self.usage:
            self.usage[u] = self.usage[u] * decay + self.run_rate[u] * dt
        self._fair_tree()
        now = self.now
        for p in self.parts.values():
            if not p.queue:
                continue
            q = []
            for _np, jid, j in p.queue:
                if isinstance(j, ArrayRec):
                    j.priority = self._prio(j.account, j.user, j.qos, 1, j.submit, now)
                else:
                    j.priority = self._prio(j.account, j.user, j.qos, j.nnodes, j.submit, now)
                q.append((-j.priority, jid, j))
            q.sort(key=_qkey)  # (priority, id) pairs are unique: the job itself is never compared
            p.queue = q
            p.touch()

    def _queue_insert(self, p: Partition, prio: int, jid: int, j: object) -> None:
        insort(p.queue, (-prio, jid, j))  # (priority, id) is unique: jobs are never compared

    def _queue_remove(self, p: Partition, j: object) -> None:
        key = (-j.priority, j.raw)
        i = bisect_left(p.queue, key)
        while p.queue[i][2] is not j:
            i += 1
        del p.queue[i]

    # ------------------------------------------------------------------ placement

    def _gpus(self, j: Job) -> int:
        return j.nnodes * j.units if j.part.is_gpu else 0

    def _cpus(self, j: Job) -> int:
        n0 = j.part.nodes[0]
        return j.nnodes * j.units * n0.cpus_per_unit

    def _node_ok(self, n: Node, j: Job, exp_end: int) -> bool:
        if n.down or n.drain:
            return False
        r = n.resv
        if r is not None and self.now < r.end:
            if j.resv is r:
                pass
            elif exp_end > r.start:
                return False
        elif j.resv is not None:
            return False
        if n.bf_resv and exp_end > n.bf_resv:
            return False
        return True

    def _find(self, j: Job) -> list[Node] | None:
        """Nodes for `j` now, or None. Whole-node jobs take the lowest-numbered idle nodes; smaller GPU jobs
        go best-fit (the fullest node that still fits) so whole nodes stay free for multi-node jobs."""
        p = j.part
        exp_end = self.now + j.limit
        if j.resv is None:
            if p.idle < j.nnodes if j.whole else p.free_units < j.units:
                return None
            memo = self._bf_fail
            if memo is not None:
                key = (j.units, j.whole, j.nnodes, j.limit)
                if key in memo:
                    return None
                got = self._find2(j, p, exp_end)
                if got is None:
                    memo.add(key)
                return got
            return self._find2(j, p, exp_end)
        if j.resv is not None:
            cand = [n for n in j.resv.nodes if n.free == n.cap and not n.down and not n.drain]
            return cand[: j.nnodes] if len(cand) >= j.nnodes else None
        return None

    def _find2(self, j: Job, p: Partition, exp_end: int) -> list[Node] | None:
        """Search the free-node heaps. A node that is free but barred for this job (advance or backfill
        reservation, drain, down) is set aside in a stash for the rest of the pass instead of being
        popped again by every later search; the stash is checked directly and put back afterwards."""
        stash = self._stash
        nodes = self.nodes
        ok = self._node_ok
        pop = heapq.heappop
        units = j.units
        if not p.is_gpu:
            h = p.heaps[0]
            while h:
                negf, idx = h[0]
                n = nodes[idx]
                if -negf != n.free:
                    pop(h)
                    continue
                if n.free < units:
                    break
                if ok(n, j, exp_end):
                    return [n]
                pop(h)
                self._stash_add(n)
            if exp_end > self._stash_barrier:
                return None
            best = None
            for n in stash.values():
                if (
                    n.part is p
                    and n.free >= units
                    and ok(n, j, exp_end)
                    and (best is None or n.free > best.free)
                ):
                    best = n
            return [best] if best else None
        if j.whole:
            need = j.nnodes
            cap = p.nodes[0].cap
            got: list[Node] = []
            h = p.heaps[cap]
            popped = []
            seen = set()
            while h and len(got) < need:
                idx = pop(h)
                n = nodes[idx]
                if n.free != cap or idx in seen:
                    continue
                seen.add(idx)
                if ok(n, j, exp_end):
                    got.append(n)
                    popped.append(idx)
                else:
                    self._stash_add(n)
            for idx in popped:
                heapq.heappush(h, idx)
            if len(got) < need and exp_end <= self._stash_barrier:
                for idx, n in stash.items():
                    if idx not in seen and n.part is p and n.free == cap and ok(n, j, exp_end):
                        seen.add(idx)
                        got.append(n)
                        if len(got) == need:
                            break
            return got if len(got) >= need else None
        cap = p.nodes[0].cap
        for k in range(units, cap + 1):
            h = p.heaps[k]
            while h:
                idx = h[0]
                n = nodes[idx]
                if n.free != k:
                    pop(h)
                    continue
                if ok(n, j, exp_end):
                    return [n]
                pop(h)
                self._stash_add(n)
        if exp_end > self._stash_barrier:
            return None
        best = None
        for n in stash.values():
            if (
                n.part is p
                and n.free >= units
                and ok(n, j, exp_end)
                and (best is None or (n.free, n.idx) < (best.free, best.idx))
            ):
                best = n
        return [best] if best else None

    def _stash_add(self, n: Node) -> None:
        """Set a barred node aside; remember the latest end time any stashed node could still accept."""
        self._stash[n.idx] = n
        if n.down or n.drain:
            return
        bar = n.bf_resv or BIG
        r = n.resv
        if r is not None and self.now < r.end:
            bar = min(bar, r.start)
        if bar > self._stash_barrier:
            self._stash_barrier = bar

    def _restore(self) -> None:
        """Put the nodes set aside during a pass back into their heaps."""
        self._stash_barrier = 0
        for n in self._stash.values():
            p = n.part
            if p.is_gpu:
                heapq.heappush(p.heaps[n.free], n.idx)
            else:
                heapq.heappush(p.heaps[0], (-n.free, n.idx))
        self._stash.clear()

    def _set_free(self, n: Node, free: int) -> None:
        p = n.part
        old = n.free
        if old == n.cap:
            p.idle -= 1
        if free == n.cap:
            p.idle += 1
        p.free_units += free - old
        if free > old:
            p.version += 1
        n.free = free
        if p.is_gpu:
            heapq.heappush(p.heaps[free], n.idx)
        else:
            heapq.heappush(p.heaps[0], (-free, n.idx))

    # ------------------------------------------------------------------ start / end

    def _start(self, j: Job, nodes: list[Node], how: str) -> None:
        t = self.now
        j.start = t
        j.nodes = nodes
        j.state = "RUNNING"
        j.sched_by = how
        j.token += 1
        j.gpu_idx = []
        base = self._resv_base
        tele = self.tele
        for n in nodes:
            self._set_free(n, n.free - j.units)
            n.jobs.append(j)
            if base is not None and n.idx in base:
                base[n.idx] = n.free
            if n.owners:
                got = []
                for g in range(n.cap):
                    if n.owners[g] is None:
                        n.owners[g] = j
                        got.append(g)
                        if len(got) == j.units:
                            break
                j.gpu_idx.append(got)
                if n.idx in tele:
                    for g in got:
                        j.tele.append(len(self.gpu_iv))
                        self.gpu_iv.append([n.idx, g, j, t, None])
        remaining = j.target - j.progress
        if remaining > j.limit:
            dur, final = j.limit, "TIMEOUT"
        else:
            dur, final = max(1, remaining), j.outcome
        j.end = t + dur
        self.push(t + dur, K_END, j, j.token)
        insort(j.part.running, (t + j.limit, j.raw, j))
        j.cause = final
        rate = j.nnodes * j.units if j.part.is_gpu else j.nnodes * j.units * 0.1
        self.run_rate[j.user] += rate
        self.counters["started"] += 1
        self.day_counters["started"] += 1
        if how == "backfill":
            self.counters["bf_total"] += 1
            self.counters["bf_since"] += 1
        if self.cfg.write_events_jsonl:
            gi = ",".join(f'"{idx_list(g)}"' for g in j.gpu_idx)
            self.ev.append(
                f'{{"t":"{ts(t)}","type":"start","job_id_raw":{j.raw},"job":"{j.jid}","attempt":{j.attempt},'
                f'"sched_by":"{how}","nodes":"{hostlist(nodes)}","expected_end":"{ts(t + j.limit)}",'
                f'"priority":{j.priority},"gpu_idx":[{gi}]}}'
            )

    def _release(self, j: Job) -> None:
        if j.tele:
            for i in j.tele:
                self.gpu_iv[i][4] = self.now
            j.tele = []
        for n in j.nodes:
            n.jobs.remove(j)
            if n.owners:
                for g in range(n.cap):
                    if n.owners[g] is j:
                        n.owners[g] = None
            self._set_free(n, n.free + j.units)
            if n.drain and not n.jobs:
                self._maybe_drained(n)
        p = j.part
        key = (j.start + j.limit, j.raw)
        i = bisect_left(p.running, key)
        while p.running[i][2] is not j:
            i += 1
        del p.running[i]
        rate = j.nnodes * j.units if j.part.is_gpu else j.nnodes * j.units * 0.1
        self.run_rate[j.user] -= rate
        p.touch()

    def _finish(self, j: Job, state: str, exit_code: str, cause: str, end: int | None = None) -> None:
        """End the current attempt of `j` (running or pending) and write its accounting record."""
        t = self.now if end is None else end
        ran = j.state == "RUNNING"
        if ran:
            self._release(j)
            j.progress += t - j.start
        j.end = t
        j.state = state
        j.exit = exit_code
        self._record(j)
        gsec = (t - j.start) * self._gpus(j) if ran else 0
        if self.cfg.write_events_jsonl:
            sb = f'"{j.sched_by}"' if j.sched_by else "null"
            self.ev.append(
                f'{{"t":"{ts(t)}","type":"end","job_id_raw":{j.raw},"job":"{j.jid}","attempt":{j.attempt},'
                f'"state":"{state}","cause":"{cause}","exit_code":"{exit_code}",'
                f'"elapsed":{(t - j.start) if ran else 0},"gpu_seconds":{gsec},"account":"{j.account}",'
                f'"sched_by":{sb}}}'
            )
        key = {"COMPLETED": "completed", "CANCELLED": "canceled"}.get(state, "failed")
        if state != "NODE_FAIL" or not j.requeue:
            self.counters[key] += 1
            self.day_counters[key] += 1

    def _on_end(self, j: Job) -> None:
        state = j.cause
        exit_code = {
            "COMPLETED": "0:0",
            "FAILED": "1:0",
            "CANCELLED": "0:15",
            "OUT_OF_MEMORY": "0:125",
            "TIMEOUT": "0:0",
        }[state]
        cause = {
            "COMPLETED": "done",
            "FAILED": "user_error",
            "CANCELLED": "user_cancel",
            "OUT_OF_MEMORY": "oom",
            "TIMEOUT": "time_limit",
        }[state]
        if state == "FAILED" and j.part.is_gpu and self.rng.random() < 0.25:
            # An application-caused GPU error: the driver logs XID 13 or 43 on one of the job's GPUs.
            xid = 13 if self.rng.random() < 0.6 else 43
            n = j.nodes[0]
            g = j.gpu_idx[0][0] if j.gpu_idx and j.gpu_idx[0] else 0
            cause = f"xid{xid}"
            self.log(
                self.now,
                "fault",
                xid=xid,
                node=n.name,
                gpu_index=g,
                gpu_uuid=n.gpu_uuids[g],
                effect="job_failed",
                job_id_raw=j.raw,
                cause="application",
            )
            if n.idx in self.tele:
                self.tele_events.append((n.idx, self.now, xid, g))
        if state == "CANCELLED":
            state_txt = f"CANCELLED by {j.uid}"
        else:
            state_txt = state
        self._finish(j, state_txt, exit_code, cause)
        if state == "TIMEOUT" and j.cls == "pretrain" and j.work - j.progress > 600:
            # The user resubmits the run; it resumes from its last checkpoint.
            self._continue(j)

    def _continue(self, j: Job) -> None:
        t = self.now + self.rng.randint(60, 1800)
        c = Job()
        for attr in (
            "cls",
            "part",
            "qos",
            "user",
            "uid",
            "account",
            "nnodes",
            "units",
            "whole",
            "limit",
            "work",
            "ckpt",
            "name",
            "outcome",
            "target",
            "requeue",
        ):
            setattr(c, attr, getattr(j, attr))
        saved = (j.progress // j.ckpt) * j.ckpt if j.ckpt else 0
        c.progress = saved
        c.cont_of = j.raw
        c.raw = self.next_raw
        self.next_raw += 1
        c.jid = str(c.raw)
        c.submit = c.eligible = c.first_submit = t
        self.push(t, K_SUBMIT, c)

    def _requeue(self, j: Job, cause: str) -> None:
        """NODE_FAIL with JobRequeue=1: a new attempt with a new submit time, from the last checkpoint."""
        t = self.now
        done = j.progress
        saved = (done // j.ckpt) * j.ckpt if j.ckpt else 0
        lost = done - saved
        j.progress = saved
        old_attempt = j.attempt
        j.attempt += 1
        j.submit = t
        j.eligible = t + REQUEUE_DELAY
        j.state = "PENDING"
        j.sched_by = ""
        j.start = 0
        j.nodes = []
        j.gpu_idx = []
        self.log(
            t,
            "requeue",
            job_id_raw=j.raw,
            job=j.jid,
            from_attempt=old_attempt,
            attempt=j.attempt,
            cause=cause,
            lost_seconds=lost,
            lost_gpu_seconds=lost * self._gpus(j),
            restart_from=saved,
            checkpoint_interval=j.ckpt,
            new_submit=ts(t),
        )
        j.priority = self._prio(j.account, j.user, j.qos, j.nnodes, j.submit, t)
        self._begin_wait.append(j)
        self.push(j.eligible, K_ELIGIBLE, j, j.attempt)

    def _eligible(self, j: Job, attempt: int) -> None:
        """A requeued attempt's BeginTime has come: it joins the queue."""
        if j.attempt != attempt or j not in self._begin_wait:
            return
        self._begin_wait.remove(j)
        j.priority = self._prio(j.account, j.user, j.qos, j.nnodes, j.submit, self.now)
        if j.resv is not None:
            self._waiting_resv.append(j)
            return
        self._queue_insert(j.part, j.priority, j.raw, j)
        j.part.touch()

    def _enqueue(self, j: Job, at_submit: bool) -> None:
        p = j.part
        j.priority = self._prio(j.account, j.user, j.qos, j.nnodes, j.submit, self.now)
        if j.patience:
            self.push(self.now + j.patience, K_PATIENCE, j, j.attempt)
        if at_submit and not p.queue and j.resv is None:
            nodes = self._find(j)
            self._restore()
            if nodes:
                self._start(j, nodes, "submit")
                return
        self._queue_insert(p, j.priority, j.raw, j)
        p.touch()

    # ------------------------------------------------------------------ scheduling passes

    def _main_pass(self, p: Partition) -> None:
        """Priority order; the first job that cannot start blocks the rest of the partition."""
        q = p.queue
        if p.blocked is not None and p.blocked[0] == p.version and p.blocked[1] is q[0][2]:
            return  # same blocked job at the top and nothing released since: the pass would stop there
        self.counters["main_cycles"] += 1
        depth = 0
        while q:
            _np, _jid, j = q[0]
            depth += 1
            if isinstance(j, ArrayRec):
                while j.next_task < j.ntasks:
                    probe = _PROBE
                    probe.part, probe.units, probe.limit, probe.whole, probe.nnodes = p, 1, j.limit, False, 1
                    nodes = self._find(probe)
                    if not nodes:
                        break
                    task = self._array_task(j)
                    self._start(task, nodes, "main")
                if j.next_task >= j.ntasks:
                    q.pop(0)
                    self.pending_arrays.remove(j)
                    continue
                break
            nodes = self._find(j)
            if nodes is None:
                break
            q.pop(0)
            self._start(j, nodes, "main")
        p.blocked = (p.version, q[0][2]) if q else None
        self._restore()
        us = 40 + 15 * depth
        c = self.counters
        c["main_last_us"] = us
        c["main_max_us"] = max(c["main_max_us"], us)
        c["main_us_sum"] += us
        c["main_depth_sum"] += depth

    def _backfill(self, p: Partition) -> None:
        """Reserve nodes for blocked jobs in priority order and start later jobs only where they fit now
        without touching those reservations before their expected end (start + time limit)."""
        now = self.now
        for n in p.nodes:
            n.bf_resv = 0
        horizon = now + self.cfg.bf_window_s
        reserved: list[tuple[int, int, list[Node]]] = []
        self._bf_fail = set()
        self._resv_fail = set()
        self._resv_base = None
        max_resv = self.cfg.bf_max_reservations
        tested = 0
        started = 0
        q = p.queue
        i = 0
        avail = sum(n.free for n in p.nodes if not n.down and not n.drain)
        while i < len(q) and tested < self.cfg.bf_max_job_test:
            if avail <= 0 and len(reserved) >= max_resv:
                break  # nothing can start now and no further reservation will be made
            _np, _jid, j = q[i]
            tested += 1
            if isinstance(j, ArrayRec):
                probe = _PROBE
                probe.part, probe.units, probe.limit, probe.whole, probe.nnodes = p, 1, j.limit, False, 1
                while j.next_task < j.ntasks:
                    nodes = self._find(probe)
                    if not nodes:
                        break
                    task = self._array_task(j)
                    self._start(task, nodes, "backfill")
                    avail -= 1
                    started += 1
                    self._log_bf(task, reserved)
                if j.next_task >= j.ntasks:
                    del q[i]
                    self.pending_arrays.remove(j)
                    continue
                self._reserve(p, j, probe, reserved, horizon)
                i += 1
                continue
            if j.resv is not None:
                i += 1
                continue
            nodes = self._find(j)
            if nodes:
                del q[i]
                self._start(j, nodes, "backfill")
                avail -= j.units * j.nnodes
                started += 1
                self._log_bf(j, reserved)
                continue
            self._reserve(p, j, j, reserved, horizon)
            i += 1
        for n in p.nodes:
            n.bf_resv = 0
        self._bf_fail = None
        self._resv_base = None
        self._restore()
        c = self.counters
        c["bf_cycles"] += 1
        c["bf_last"] = now
        c["bf_last_depth"] = tested
        c["bf_depth_sum"] += tested
        c["bf_qlen_sum"] += len(q) + started
        us = 200 + 60 * tested + 5 * len(p.running)
        c["bf_last_us"] = us
        c["bf_max_us"] = max(c["bf_max_us"], us)
        c["bf_us_sum"] += us

    def _log_bf(self, j: Job, reserved: list) -> None:
        if not self.cfg.write_events_jsonl:
            return
        # The reservations made for higher-priority jobs this cycle that share a node with j.
        mine = {n.idx for n in j.nodes}
        conflicts = [[rj, ts(rt)] for rt, rj, rn in reserved if mine.intersection(n.idx for n in rn)]
        self.log(
            self.now,
            "backfill_start",
            job_id_raw=j.raw,
            expected_end=ts(self.now + j.limit),
            nodes=hostlist(j.nodes),
            shares_nodes_with=conflicts,
        )

    def _reserve(self, p: Partition, j: object, shape: object, reserved: list, horizon: int) -> None:
        """Earliest time `shape` fits on nodes not yet reserved, from the expected ends of running jobs."""
        if len(reserved) >= self.cfg.bf_max_reservations:
            return
        units, whole, need = shape.units, shape.whole, shape.nnodes
        key = (units, whole, need)
        if key in self._resv_fail:
            return
        now = self.now
        if self._resv_base is None:
            self._resv_base = {
                n.idx: n.free
                for n in p.nodes
                if not n.down and not n.drain and (n.resv is None or now >= n.resv.end)
            }
        free = self._resv_base.copy()
        cap = p.nodes[0].cap
        at = now
        got: list[int] | None = None
        if whole:
            cnt = sum(1 for f in free.values() if f == cap)
            if cnt < need:
                for exp_end, _raw, rj in p.running:
                    if exp_end > horizon:
                        break
                    for n in rj.nodes:
                        f = free.get(n.idx)
                        if f is not None:
                            f += rj.units
                            free[n.idx] = f
                            if f == cap:
                                cnt += 1
                    if cnt >= need:
                        at = exp_end
                        break
            if cnt >= need:
                got = sorted(i for i, f in free.items() if f == cap)[:need]
        else:
            fit = [(f, i) for i, f in free.items() if f >= units]
            if fit:
                got = [min(fit)[1]]
            else:
                for exp_end, _raw, rj in p.running:
                    if exp_end > horizon:
                        break
                    for n in rj.nodes:
                        f = free.get(n.idx)
                        if f is not None:
                            f += rj.units
                            free[n.idx] = f
                            if f >= units and got is None:
                                got = [n.idx]
                    if got is not None:
                        at = exp_end
                        break
        if got is None:
            self._resv_fail.add(key)
            return
        rn = [self.nodes[i] for i in got]
        for n in rn:
            n.bf_resv = at
            self._resv_base.pop(n.idx, None)
        raw = j.raw
        reserved.append((at, raw, rn))
        self.log(
            self.now,
            "bf_reservation",
            job_id_raw=raw,
            reserved_start=ts(at),
            nodes=hostlist(rn),
            priority=j.priority,
        )

    # ------------------------------------------------------------------ faults, drains, reservation

    def _fault_rate(self) -> float:
        """Faults per second: fault_rate per 1000 GPU-days, but at least one a day so that small demo
        clusters still show failures, requeues and drains."""
        if self.cfg.fault_rate <= 0:
            return 0.0
        return max(self.cfg.fault_rate * self.gpu_total / 1000.0, 1.0) / 86400.0

    def _fault(self) -> None:
        per_s = self._fault_rate()
        self.push(self.now + 1 + int(self.rng.expovariate(per_s)), K_FAULT, None)
        gpu_nodes = [n for p in self.parts.values() if p.is_gpu for n in p.nodes]
        n = self.rng.choice(gpu_nodes)
        r = self.rng.random()
        acc = 0.0
        pick = FAULTS[-1]
        for f in FAULTS:
            acc += f[0]
            if r < acc:
                pick = f
                break
        _w, xid, effect, text = pick
        if n.down:
            return
        t = self.now
        g = self.rng.randrange(n.cap)
        if n.idx in self.tele and xid > 0:
            self.tele_events.append((n.idx, t, xid, g))
        if effect == "down":
            reason = f"XID {xid} {text} gpu={g}" if xid else text
            self.log(
                t,
                "fault",
                xid=xid or None,
                node=n.name,
                gpu_index=g if xid else None,
                gpu_uuid=n.gpu_uuids[g] if xid else None,
                effect="node_down",
                cause="hardware",
                jobs=[j.raw for j in n.jobs],
            )
            n.down = True
            self._set_reason(n, reason, "slurm" if not xid else "root", t)
            self.node_events.append(
                [n.name, t, None, "DOWN", reason, USERS_SYS["slurm" if not xid else "root"]]
            )
            self.log(t, "node_down", node=n.name, reason=reason)
            for j in list(n.jobs):
                self._finish(j, "NODE_FAIL", "0:0", "node_fail" if not xid else f"xid{xid}")
                if j.requeue:
                    self._requeue(j, "node_fail" if not xid else f"xid{xid}")
            self.push(t + self._lognorm(3 * 3600, 0.6, 1800, 24 * 3600), K_RESUME, n)
            n.part.touch()
            return
        if effect == "maint":
            reason = text
            self._drain(n, reason, "admin", t, repair=3600)
            return
        reason = f"XID {xid} {text} gpu={g}"
        victims = [n.owners[g]] if effect == "gpu_fail" else list(n.jobs)
        victims = [j for j in victims if j is not None]
        self.log(
            t,
            "fault",
            xid=xid,
            node=n.name,
            gpu_index=g,
            gpu_uuid=n.gpu_uuids[g],
            effect="jobs_failed_and_drain",
            cause="hardware",
            jobs=[j.raw for j in victims],
        )
        for j in victims:
            self._finish(j, "FAILED", "0:6" if effect == "node_fail" else "1:0", f"xid{xid}")
        self._drain(n, reason, "root", t, repair=self._lognorm(5400, 0.5, 900, 8 * 3600))

    def _set_reason(self, n: Node, reason: str, user: str, t: int) -> None:
        n.reason, n.reason_user, n.reason_time = reason, user, t

    def _drain(self, n: Node, reason: str, user: str, t: int, repair: int) -> None:
        if n.drain:
            return
        n.drain = True
        self._set_reason(n, reason, user, t)
        self.log(t, "drain", node=n.name, reason=reason, user=user, running_jobs=[j.raw for j in n.jobs])
        n.part.touch()
        self._drain_repair[n.idx] = repair
        if not n.jobs:
            self._maybe_drained(n)

    def _maybe_drained(self, n: Node) -> None:
        """The node's last job ended: it is DRAINED now (the time sacctmgr's DRAIN event starts)."""
        rep = self._drain_repair.pop(n.idx, None)
        if rep is not None:
            self.node_events.append([n.name, self.now, None, "DRAIN", n.reason, USERS_SYS[n.reason_user]])
            self.log(self.now, "drained", node=n.name, reason=n.reason)
            self.push(self.now + rep, K_RESUME, n)

    def _resume(self, n: Node) -> None:
        t = self.now
        for ev in self.node_events:
            if ev[0] == n.name and ev[2] is None:
                ev[2] = t
        was = "down" if n.down else "drain"
        n.down = False
        n.drain = False
        self._set_reason(n, "", "", 0)
        n.part.version += 1
        self.log(t, "resume", node=n.name, was=was)
        n.part.touch()

    def _resv_event(self, what: str) -> None:
        r = self.resv
        if what == "start":
            self.log(self.now, "reservation_start", name=r.name)
            # The hero run was submitted a day before; it waits for the reservation.
            return
        self.log(self.now, "reservation_end", name=r.name)
        for n in r.nodes:
            n.resv = None
        self.parts[r.partition].version += 1
        self.parts[r.partition].touch()

    def _submit_hero(self) -> None:
        r = self.resv
        j = Job()
        j.cls = "pretrain"
        j.part = self.parts[r.partition]
        j.qos = "high"
        j.user = self.acct_users[r.account][0]
        j.account, j.uid = self.users[j.user]
        j.submit = j.eligible = j.first_submit = max(self.t0, r.start - 86400)
        j.nnodes, j.units, j.whole = len(r.nodes), 8, True
        j.limit = r.end - r.start
        j.work = int(j.limit * 0.9)
        j.ckpt = int(self.cfg.checkpoint_hours * 3600)
        j.name = "pt-hero-405b"
        j.outcome, j.target = "COMPLETED", j.work
        j.resv = r
        j.raw = self.next_raw
        self.next_raw += 1
        j.jid = str(j.raw)
        self.push(j.submit, K_SUBMIT, j)

    # ------------------------------------------------------------------ main loop

    def run(self, out_dir: Path) -> None:
        """Simulate the whole period, streaming sacct.txt, events.jsonl and snapshots into `out_dir`."""
        self.out_dir = out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        # A rerun into the same directory must not leave an older run's snapshots or spool files behind
        # (they would be ingested with this run's data): these two folders belong to the simulator.
        for owned in ("snapshots", "spool"):
            if (out_dir / owned).is_dir():
                shutil.rmtree(out_dir / owned)
        for kind in ("sinfo", "squeue", "sshare", "sdiag", "reservations"):
            if self.cfg.write_snapshots:
                (out_dir / "snapshots" / kind).mkdir(parents=True, exist_ok=True)
        self._sacct_fh = open(out_dir / "sacct.txt", "w", encoding="utf-8")  # noqa: SIM115 - closed in write()
        self._sacct_fh.write("|".join(SACCT_FIELDS) + "\n")
        self._ev_fh = open(
            out_dir / "events.jsonl" if self.cfg.write_events_jsonl else "/dev/null",
            "w",  # noqa: SIM115
            encoding="utf-8",
        )
        try:
            self._loop()
        except BaseException:
            self._sacct_fh.close()
            self._ev_fh.close()
            raise

    def _loop(self) -> None:
        cfg = self.cfg
        self._waiting_resv: list[Job] = []
        self._begin_wait: list[Job] = []
        self._drain_repair: dict[int, int] = {}
        self._schedule_arrivals()
        self._submit_hero()
        self._fair_tree()
        self.snapshots: dict[str, int] = {"sinfo": 0, "squeue": 0, "sshare": 0, "sdiag": 0}
        next_bf = self.t0 + cfg.bf_interval_s
        next_prio = self.t0 + cfg.priority_calc_period_s
        next_snap = self.t0 + cfg.snapshot_interval_s if cfg.write_snapshots else self.t_end + 1
        next_midnight = self.t0 - self.t0 % 86400 + 86400
        heap = self.heap
        parts = list(self.parts.values())
        t_end = self.t_end
        pop = heapq.heappop
        while True:
            t_ev = heap[0][0] if heap else t_end + 1
            t = min(t_ev, next_bf, next_prio, next_snap, next_midnight)
            if t > t_end:
                break
            self.now = t
            if t_ev == t:
                while heap and heap[0][0] == t:
                    _t, _s, kind, obj, token = pop(heap)
                    self._dispatch(kind, obj, token)
                for p in parts:
                    if p.dirty:
                        if p.queue:
                            self._main_pass(p)
                        p.dirty = False
                if self._waiting_resv:
                    self._resv_pass()
            if t == next_midnight:
                self.stats_since = t
                self.day_counters = dict.fromkeys(self.day_counters, 0)
                self.counters["bf_since"] = 0
                next_midnight += 86400
                self._flush()
            if t == next_prio:
                self._recalc()
                next_prio += cfg.priority_calc_period_s
            if t == next_bf:
                for p in parts:
                    if p.bf_dirty:
                        if p.queue:
                            self._backfill(p)
                        p.bf_dirty = False
                next_bf += cfg.bf_interval_s
            if t == next_snap:
                self._snapshot(t)
                next_snap += cfg.snapshot_interval_s
                self._flush()
        self.now = t_end

    def _resv_pass(self) -> None:
        keep = []
        for j in self._waiting_resv:
            if self.now >= j.resv.start:
                nodes = self._find(j)
                if nodes:
                    self._start(j, nodes, "main")
                    continue
            keep.append(j)
        self._restore()
        self._waiting_resv = keep

    def _dispatch(self, kind: int, obj: object, token: int) -> None:
        if kind == K_END:
            if obj.token == token and obj.state == "RUNNING":
                self._on_end(obj)
        elif kind == K_ARRIVAL:
            self._arrival(obj)
        elif kind == K_SUBMIT:
            self._register(obj)
            if obj.resv is not None:
                obj.priority = self._prio(obj.account, obj.user, obj.qos, obj.nnodes, obj.submit, self.now)
                self._waiting_resv.append(obj)
            else:
                self._enqueue(obj, at_submit=True)
        elif kind == K_FAULT:
            self._fault()
        elif kind == K_RESUME:
            if obj.down or obj.drain:
                self._resume(obj)
        elif kind == K_PATIENCE:
            j = obj
            if j.state == "PENDING" and j.attempt == token and j.resv is None:
                self._queue_remove(j.part, j)
                j.start = 0
                self._finish(j, f"CANCELLED by {j.uid}", "0:0", "user_cancel_pending")
        elif kind == K_RESV:
            self._resv_event(obj)
        elif kind == K_ELIGIBLE:
            self._eligible(obj, token)

    # ------------------------------------------------------------------ output: sacct

    def _tres(self, j: Job) -> str:
        n0 = j.part.nodes[0]
        cpus = self._cpus(j)
        mem = j.nnodes * j.units * n0.mem_per_unit
        if j.part.is_gpu:
            g = j.nnodes * j.units
            return (
                f"billing={g * 10},cpu={cpus},gres/gpu:{j.part.gpu_type}={g},gres/gpu={g},mem={mem}M,"
                f"node={j.nnodes}"
            )
        return f"billing={cpus},cpu={cpus},mem={mem}M,node={j.nnodes}"

    def _record(self, j: Job, at_end: bool = False) -> None:
        """One allocation attempt as sacct prints it, plus its steps."""
        c = self.cfg.cluster
        ran = j.start > 0
        end = self.t_end if at_end else j.end
        state = j.state
        if j.state == "PENDING":
            start_s, end_s, elapsed = "Unknown", "Unknown", 0
        elif at_end:
            start_s, end_s, elapsed = ts(j.start), "Unknown", end - j.start
        elif ran:
            start_s, end_s, elapsed = ts(j.start), ts(end), end - j.start
        else:
            start_s, end_s, elapsed = "Unknown", ts(end), 0  # cancelled while pending
        n0 = j.part.nodes[0]
        reqmem = f"{j.units * n0.mem_per_unit}M"  # per node, as --mem gives it
        if ran:
            tres = self._tres(j)
            nodelist = hostlist(j.nodes)
            ncpus = self._cpus(j)
            flags = FLAGS[j.sched_by]
            reason = "None"
        else:
            tres, nodelist, ncpus, flags = "", "None assigned", self._cpus(j), "StartRecieved"
            reason = self._pending_reason(j) if j.state == "PENDING" else "None"
        el = duration(elapsed)
        line = "|".join(
            (
                j.jid,
                str(j.raw),
                c,
                j.part.name,
                j.qos,
                j.account,
                j.user,
                str(j.uid),
                ts(j.submit),
                ts(j.eligible),
                start_s,
                end_s,
                el,
                duration(j.limit),
                state,
                j.exit,
                str(j.nnodes),
                str(ncpus),
                reqmem,
                tres,
                nodelist,
                flags,
                str(j.priority),
                reason,
                j.name,
            )
        )
        if not (ran and self.cfg.steps):
            self.records.append(line)
        else:
            # Step lines: their Submit/Eligible are the allocation's start; both steps share one tail.
            first = j.nodes[0]
            per_node_cpus = j.units * first.cpus_per_unit
            mem = j.units * first.mem_per_unit
            if j.part.is_gpu:
                step_tres = (
                    f"cpu={per_node_cpus},gres/gpu:{j.part.gpu_type}={j.units},gres/gpu={j.units},"
                    f"mem={mem}M,node=1"
                )
            else:
                step_tres = f"cpu={per_node_cpus},mem={mem}M,node=1"
            if state == "RUNNING":
                step_state = ext_state = "RUNNING"
            else:
                step_state = (
                    "CANCELLED"
                    if state.startswith("CANCELLED") or state in ("TIMEOUT", "NODE_FAIL")
                    else state
                )
                ext_state = "COMPLETED" if state != "NODE_FAIL" else "CANCELLED"
            main_exit = j.exit if state not in ("TIMEOUT", "NODE_FAIL") else "0:15"
            times = f"{start_s}|{start_s}|{start_s}|{end_s}|{el}|"
            head = f"{c}|||{j.account}|||{times}"
            ext = (
                f"{j.jid}.extern|{j.raw}.extern|{head}|{ext_state}|0:0|{j.nnodes}|{ncpus}||"
                f"{tres.split(',', 1)[1]}|{nodelist}||||extern"
            )
            if j.interactive:
                main = (
                    f"{j.jid}.0|{j.raw}.0|{head}|{step_state}|{main_exit}|{j.nnodes}|{ncpus}||{step_tres}|"
                    f"{nodelist}||||bash"
                )
            else:
                main = (
                    f"{j.jid}.batch|{j.raw}.batch|{head}|{step_state}|{main_exit}|1|{per_node_cpus}||"
                    f"{step_tres}|{first.name}||||batch"
                )
            self.records.append(f"{line}\n{ext}\n{main}")
        if not at_end:
            st = "CANCELLED" if state.startswith("CANCELLED") else state
            self.state_counts[st] = self.state_counts.get(st, 0) + 1

    def _pending_reason(self, j: Job) -> str:
        if j in self._begin_wait:
            return "BeginTime"
        if j.resv is not None:
            return "Reservation"
        q = j.part.queue
        if q and q[0][2] is j:
            return "Resources"
        return "Priority"

    def _flush(self, force: bool = False) -> None:
        """Stream finished records and events to disk so memory stays flat at a million jobs."""
        if self.records and (force or len(self.records) > 20000):
            self._sacct_fh.write("\n".join(self.records) + "\n")
            self.records.clear()
        if self.ev and (force or len(self.ev) > 50000):
            self._ev_fh.write("\n".join(self.ev) + "\n")
            self.ev.clear()

    def _close_sacct(self) -> None:
        """Running and pending jobs at the end of the period, as a final sacct would print them."""
        for p in self.parts.values():
            for _e, _r, j in p.running:
                self._record(j, at_end=True)
            for _np, _jid, j in p.queue:
                if isinstance(j, ArrayRec):
                    self._record_pending_array(j)
                else:
                    self._record(j, at_end=True)
        for j in self._waiting_resv + self._begin_wait:
            self._record(j, at_end=True)
        self._flush(force=True)

    def _record_pending_array(self, a: ArrayRec) -> None:
        c = self.cfg.cluster
        rng_txt = f"[{a.next_task}-{a.ntasks - 1}]" if a.ntasks - 1 > a.next_task else f"[{a.next_task}]"
        q = a.part.queue
        reason = "Resources" if q and q[0][2] is a else "Priority"
        cpus = a.part.nodes[0].cpus_per_unit
        mem = a.part.nodes[0].mem_per_unit
        line = "|".join(
            (
                f"{a.raw}_{rng_txt}",
                str(a.raw),
                c,
                a.part.name,
                a.qos,
                a.account,
                a.user,
                str(a.uid),
                ts(a.submit),
                ts(a.submit),
                "Unknown",
                "Unknown",
                duration(0),
                duration(a.limit),
                "PENDING",
                "0:0",
                "1",
                str(cpus),
                f"{mem}M",
                "",
                "None assigned",
                "StartRecieved",
                str(a.priority),
                reason,
                a.name,
            )
        )
        self.records.append(line)

    # ------------------------------------------------------------------ output: snapshots

    def _snapshot(self, t: int) -> None:
        for kind, text in (
            ("sinfo", self._sinfo()),
            ("squeue", self._squeue(t)),
            ("sshare", self._sshare()),
            ("sdiag", self._sdiag(t)),
        ):
            path = self.out_dir / "snapshots" / kind / f"{t}.txt"
            path.write_text(text, encoding="utf-8")
            os.utime(path, (t, t))  # mtime = snapshot time, which `slurmscope ingest` uses
            self.snapshots[kind] += 1

    def _sinfo(self) -> str:
        out = []
        for p in self.parts.values():
            pname = p.name + ("*" if p.default else "")
            for n in p.nodes:
                used = n.cap - n.free
                if n.part.is_gpu:
                    cpus_alloc = used * n.cpus_per_unit
                else:
                    cpus_alloc = used
                mem_alloc = used * n.mem_per_unit
                if n.down:
                    base = "down"
                elif cpus_alloc == 0:
                    base = "reserved" if (n.resv and n.resv.start <= self.now < n.resv.end) else "idle"
                elif cpus_alloc >= n.cpus:
                    base = "allocated"
                else:
                    base = "mixed"
                flags = []
                if n.drain:
                    flags.append("drain")
                state = "+".join([base] + flags)
                cpus_other = (n.cpus - cpus_alloc) if (n.down or n.drain) else 0
                cpus_idle = n.cpus - cpus_alloc - cpus_other
                if n.gpu_type:
                    gres = f"gpu:{n.gpu_type}:{n.cap}"
                    idx = [g for g in range(n.cap) if n.owners[g] is not None]
                    gres_used = f"gpu:{n.gpu_type}:{len(idx)}(IDX:{idx_list(idx) if idx else 'N/A'})"
                else:
                    gres, gres_used = "(null)", "gpu:0"
                if n.reason:
                    ruser, rtime, reason = USERS_SYS[n.reason_user], ts(n.reason_time), n.reason
                else:
                    ruser, rtime, reason = "Unknown", "Unknown", "none"
                out.append(
                    US.join(
                        (
                            n.name,
                            pname,
                            state,
                            f"{cpus_alloc}/{cpus_idle}/{cpus_other}/{n.cpus}",
                            str(n.mem_mb),
                            str(mem_alloc),
                            gres,
                            gres_used,
                            n.features,
                            ruser,
                            rtime,
                            reason,
                        )
                    )
                )
        return "\n".join(out) + "\n"

    def _squeue(self, t: int) -> str:
        out = []
        for p in self.parts.values():
            for _e, _raw, j in p.running:
                out.append(self._squeue_line(j, "RUNNING", "None", ts(j.start)))
            for i, (_np, _jid, j) in enumerate(p.queue):
                reason = "Resources" if i == 0 else "Priority"
                if isinstance(j, ArrayRec):
                    for k in range(j.next_task, j.ntasks):
                        out.append(self._squeue_array_line(j, k, reason))
                        reason = "Priority"
                else:
                    out.append(self._squeue_line(j, "PENDING", reason, "N/A"))
        for j in self._waiting_resv:
            out.append(self._squeue_line(j, "PENDING", "Reservation", ts(j.resv.start)))
        for j in self._begin_wait:
            out.append(self._squeue_line(j, "PENDING", "BeginTime", ts(j.eligible)))
        return "\n".join(out) + ("\n" if out else "")

    def _squeue_line(self, j: Job, state: str, reason: str, start: str) -> str:
        gres = f"gres:gpu:{j.units}" if j.part.is_gpu else "N/A"
        arr = str(j.array_id) if j.array_id else str(j.raw)
        task = str(j.task) if j.array_id else "N/A"
        return US.join(
            (
                j.jid,
                str(j.raw),
                arr,
                task,
                j.user,
                j.account,
                j.part.name,
                j.qos,
                state,
                str(j.priority),
                ts(j.submit),
                start,
                str(j.nnodes),
                str(self._cpus(j)),
                gres,
                limit_str(j.limit),
                "(null)",
                reason,
                j.name,
            )
        )

    def _squeue_array_line(self, a: ArrayRec, k: int, reason: str) -> str:
        gres = f"gres:gpu:{a.units}" if a.part.is_gpu else "N/A"
        cpus = a.part.nodes[0].cpus_per_unit
        return US.join(
            (
                f"{a.raw}_{k}",
                str(a.raw),
                str(a.raw),
                str(k),
                a.user,
                a.account,
                a.part.name,
                a.qos,
                "PENDING",
                str(a.priority),
                ts(a.submit),
                "N/A",
                "1",
                str(cpus),
                gres,
                limit_str(a.limit),
                "(null)",
                reason,
                a.name,
            )
        )

    def _sshare(self) -> str:
        usage = self.usage
        acct_usage = getattr(self, "acct_usage", dict.fromkeys(ACCOUNTS, 0.0))
        total = sum(usage.values())
        lines = [SSHARE_HEADER, f"root|||0.000000|{int(total)}||1.000000||||{TRES0}"]
        children: dict[str, list[str]] = {}
        for a, (parent, _s, _n, _c) in ACCOUNTS.items():
            children.setdefault(parent, []).append(a)

        def visit(acct: str, depth: int) -> None:
            kids = children.get(acct, [])
            users = self.acct_users.get(acct, [])
            tot_s = sum(ACCOUNTS[k][1] for k in kids) + len(users) or 1
            sib_u = sum(acct_usage[k] for k in kids) + sum(usage[u] for u in users)
            pad = " " * depth
            for k in kids:
                u = acct_usage[k]
                eff = u / sib_u if sib_u else 0.0
                lfs = self.level.get("a:" + k, float("inf"))
                lines.append(
                    f"{pad}{k}||{ACCOUNTS[k][1]}|{ACCOUNTS[k][1] / tot_s:.6f}|{int(u)}|"
                    f"{(u / total if total else 0):.6f}|{eff:.6f}||{_lfs(lfs)}||{TRES0}"
                )
                visit(k, depth + 1)
            for u in users:
                v = usage[u]
                eff = v / sib_u if sib_u else 0.0
                lfs = self.level.get("u:" + u, float("inf"))
                lines.append(
                    f"{pad}{acct}|{u}|1|{1 / tot_s:.6f}|{int(v)}|{(v / total if total else 0):.6f}|"
                    f"{eff:.6f}|{self.fs[u]:.6f}|{_lfs(lfs)}||{TRES0}"
                )

        visit("root", 1)
        return "\n".join(lines) + "\n"

    def _sdiag(self, t: int) -> str:
        c = self.counters
        d = self.day_counters
        pending = sum(len(p.queue) for p in self.parts.values())
        running = sum(len(p.running) for p in self.parts.values())
        mc = max(1, c["main_cycles"])
        bc = c["bf_cycles"]
        mins = max(1, (t - self.t0) // 60)
        lines = [
            "*******************************************************",
            f"sdiag output at {ctime(t)} ({t})",
            f"Data since      {ctime(self.stats_since)} ({self.stats_since})",
            "*******************************************************",
            "Server thread count:  3",
            "Agent queue size:     0",
            "Agent count:          0",
            "Agent thread count:   0",
            "DBD Agent queue size: 0",
            "",
            f"Jobs submitted: {d['submitted']}",
            f"Jobs started:   {d['started']}",
            f"Jobs completed: {d['completed']}",
            f"Jobs canceled:  {d['canceled']}",
            f"Jobs failed:    {d['failed']}",
            "",
            f"Job states ts:  {ctime(t)} ({t})",
            f"Jobs pending:   {pending}",
            f"Jobs running:   {running}",
            "",
            "Main schedule statistics (microseconds):",
            f"\tLast cycle:   {c['main_last_us']}",
            f"\tMax cycle:    {c['main_max_us']}",
            f"\tTotal cycles: {c['main_cycles']}",
            f"\tMean cycle:   {c['main_us_sum'] // mc}",
            f"\tMean depth cycle:  {c['main_depth_sum'] // mc}",
            f"\tCycles per minute: {c['main_cycles'] // mins}",
            f"\tLast queue length: {pending}",
            "",
            "Main scheduler exit:",
            f"\tEnd of job queue: {c['main_cycles']}",
            "\tHit default_queue_depth: 0",
            "\tHit sched_max_job_start: 0",
            "\tBlocked on licenses: 0",
            "\tHit max_rpc_cnt: 0",
            "\tTimeout (max_sched_time): 0",
            "",
            "Backfilling stats",
            f"\tTotal backfilled jobs (since last slurm start): {c['bf_total']}",
            f"\tTotal backfilled jobs (since last stats cycle start): {c['bf_since']}",
            "\tTotal backfilled heterogeneous job components: 0",
            f"\tTotal cycles: {bc}",
            f"\tLast cycle when: {ctime(c['bf_last'])} ({c['bf_last']})" if bc else "\tLast cycle when: N/A",
            f"\tLast cycle: {c['bf_last_us'] if bc else 0}",
            f"\tMax cycle:  {c['bf_max_us']}",
        ]
        if bc:
            lines += [
                f"\tMean cycle: {c['bf_us_sum'] // bc}",
                f"\tLast depth cycle: {c['bf_last_depth']}",
                f"\tLast depth cycle (try sched): {c['bf_last_depth']}",
                f"\tDepth Mean: {c['bf_depth_sum'] // bc}",
                f"\tDepth Mean (try depth): {c['bf_depth_sum'] // bc}",
                f"\tLast queue length: {pending}",
                f"\tQueue length mean: {c['bf_qlen_sum'] // bc}",
                f"\tLast table size: {min(pending, self.cfg.bf_max_reservations)}",
                f"\tMean table size: {min(pending, self.cfg.bf_max_reservations)}",
            ]
        else:
            lines += [
                "\tLast depth cycle: 0",
                "\tLast depth cycle (try sched): 0",
                "\tLast queue length: 0",
                "\tLast table size: 0",
            ]
        lines += [
            "",
            "Backfill exit",
            f"\tEnd of job queue: {bc}",
            "\tHit bf_max_job_start: 0",
            "\tHit bf_max_job_test: 0",
            "\tSystem state changed: 0",
            "\tHit table size limit (bf_node_space_size): 0",
            "\tTimeout (bf_max_time): 0",
            "",
            "Latency for 1000 calls to gettimeofday(): 14 microseconds",
            "",
        ]
        return "\n".join(lines)

    def events_text(self) -> str:
        """sacctmgr --parsable2 show event for the whole simulated period (node DOWN/DRAIN history)."""
        out = [EVENTS_HEADER]
        for name, start, end, state, reason, user in sorted(self.node_events, key=lambda e: (e[1], e[0])):
            out.append(
                "|".join(
                    (
                        self.cfg.cluster,
                        "",
                        name,
                        ts(start),
                        ts(end) if end else "Unknown",
                        state,
                        reason,
                        user,
                    )
                )
            )
        return "\n".join(out) + "\n"

    def reservations_text(self) -> str:
        r = self.resv
        n = len(r.nodes)
        cores = sum(x.cpus for x in r.nodes)
        state = "ACTIVE" if r.start <= self.t0 < r.end else "INACTIVE"
        return (
            f"ReservationName={r.name} StartTime={ts(r.start)} EndTime={ts(r.end)} "
            f"Duration={duration(r.end - r.start)} Nodes={hostlist(r.nodes)} NodeCnt={n} CoreCnt={cores} "
            f"Features=(null) PartitionName={r.partition} Flags=SPEC_NODES TRES=cpu={cores} Users=(null) "
            f"Groups=(null) Accounts={r.account} Licenses=(null) State={state} BurstBuffer=(null) Watts=n/a "
            f"MaxStartDelay=(null)\n"
        )

    def write_telemetry(self) -> list[str]:
        """Per-GPU per-minute NVML aggregates for the telemetry nodes over the last `telemetry_days`, in the
        agent's spool format v1 (docs/nvml.md), one file per node per day, plus GPU-to-job intervals,
        inventory and the XID events those nodes saw. Utilisation follows the jobs on each GPU (a job is
        busy at 85-100% or, like ~30% of jobs in the Seren trace, nearly idle); the degrading GPU runs hotter
        and slower every day."""
        try:
            from slurmscope.spool import write_spool_file
        except ImportError:  # the NVML agent module is not in this checkout: no telemetry step
            return []
        cfg = self.cfg
        t1 = self.t_end
        t0 = max(self.t0, t1 - int(cfg.telemetry_days * 86400))
        t0 -= t0 % 60
        if not self.tele or t1 <= t0:
            return []
        deg_node, deg_gpu, _uuid, deg_start = self.degrading
        spool = self.out_dir / "spool"
        written = []
        ivs: dict[tuple[int, int], list[list]] = {}
        for iv in self.gpu_iv:
            ivs.setdefault((iv[0], iv[1]), []).append(iv)
        busy: dict[tuple[int, int], float] = {}

        def level(job: Job, attempt: int) -> float:
            key = (job.raw, attempt)
            if key not in busy:
                r = random.Random(f"{cfg.seed}:{job.raw}:{attempt}").random()
                busy[key] = r * 2.0 if r < 0.3 else 85.0 + 15.0 * (r - 0.3) / 0.7
            return busy[key]

        for idx in sorted(self.tele):
            n = self.nodes[idx]
            spec = GPU_SPECS[n.gpu_type]
            rng = random.Random(f"{cfg.seed}:{n.name}:telemetry")
            day = t0
            while day < t1:
                day_end = min(t1, day - day % 86400 + 86400)
                records: list[dict] = []
                for g in range(n.cap):
                    uuid = n.gpu_uuids[g]
                    bus = f"00000000:{0x18 + 0x10 * g:02X}:00.0"
                    records.append(
                        {
                            "type": "inventory",
                            "gpu_uuid": uuid,
                            "seen_at": _iso(day),
                            "gpu_index": g,
                            "gpu_minor": g,
                            "pci_bus_id": bus,
                            "model": spec["model"],
                            "serial": f"{1650000000000 + idx * 8 + g}",
                            "driver_version": "535.183.01",
                            "cuda_version": "12.2",
                            "mig_mode": False,
                        }
                    )
                    mine = sorted(
                        (
                            iv
                            for iv in ivs.get((idx, g), [])
                            if iv[3] < day_end and (iv[4] is None or iv[4] > day)
                        ),
                        key=lambda iv: iv[3],
                    )
                    for iv in mine:
                        records.append(
                            {
                                "type": "job",
                                "gpu_uuid": uuid,
                                "job_id": iv[2].jid,
                                "interval_start": _iso(iv[3]),
                                "interval_end": _iso(iv[4]) if iv[4] is not None else None,
                                "gpu_index": g,
                                "mig_instance": "",
                                "source": "prolog",
                            }
                        )
                    k = 0
                    degrading = n.name == deg_node and g == deg_gpu
                    for m in range(day, day_end, 60):
                        while k < len(mine) and (mine[k][4] or BIG) <= m:
                            k += 1
                        util = 0.0
                        if k < len(mine) and mine[k][3] < m + 60:
                            iv = mine[k]
                            lo, hi = max(m, iv[3]), min(m + 60, iv[4] or BIG)
                            util = level(iv[2], 1) * max(0, hi - lo) / 60.0
                        util = min(100.0, max(0.0, util + (rng.gauss(0, 1.5) if util > 5 else 0.0)))
                        frac = util / 100.0
                        temp = spec["t_idle"] + (spec["t_load"] - spec["t_idle"]) * frac + rng.gauss(0, 0.4)
                        clock = spec["sm_idle"] + (spec["sm_max"] - spec["sm_idle"]) * min(1.0, frac * 4)
                        reasons = 0 if util > 5 else 1  # GpuIdle
                        if degrading and m >= deg_start:
                            days_in = (m - deg_start) / 86400.0
                            temp += DEG_TEMP_PER_DAY * days_in
                            clock -= DEG_CLOCK_PER_DAY * days_in * min(1.0, frac * 4)
                            if temp > 83:
                                reasons |= 0x40  # HwThermalSlowdown
                        power = spec["p_idle"] + (spec["p_max"] - spec["p_idle"]) * frac * 0.9
                        records.append(
                            {
                                "type": "sample",
                                "gpu_uuid": uuid,
                                "minute": _iso(m),
                                "gpu_index": g,
                                "gpu_minor": g,
                                "pci_bus_id": bus,
                                "model": spec["model"],
                                "samples": 6,
                                "util_gpu_mean": round(util, 2),
                                "util_gpu_max": round(min(100.0, util * 1.05), 2),
                                "util_mem_mean": round(util * 0.45, 2),
                                "mem_used_max_bytes": int(spec["mem"] * (0.05 + 0.8 * frac)),
                                "mem_total_bytes": spec["mem"],
                                "power_mean_watts": round(power, 1),
                                "power_max_watts": round(power * 1.08, 1),
                                "energy_joules": round(power * 60, 1),
                                "temp_gpu_max_celsius": round(temp, 1),
                                "temp_mem_max_celsius": round(temp + 6, 1),
                                "sm_clock_mean_mhz": round(clock),
                                "mem_clock_mean_mhz": spec["mem_clock"],
                                "throttle_seconds": 60.0 if reasons & 0x40 else 0.0,
                                "throttle_reasons": reasons,
                                "pcie_replay_delta": 0,
                                "ecc_corrected_delta": 0,
                                "ecc_uncorrected_delta": 0,
                                "ecc_corrected_total": 0,
                                "ecc_uncorrected_total": 0,
                                "remapped_pending": False,
                                "remapped_failed": False,
                                "retired_pages": 0,
                                "nvlink_errors_delta": 0,
                                "null_fields": 0,
                            }
                        )
                for nidx, t, xid, g in self.tele_events:
                    if nidx == idx and day <= t < day_end:
                        records.append(
                            {
                                "type": "event",
                                "event_time": _iso(t),
                                "event_type": "xid",
                                "gpu_uuid": n.gpu_uuids[g],
                                "xid": xid,
                                "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0",
                                "source": "kmsg",
                                "detail": f"NVRM: Xid (PCI:0000:{0x18 + 0x10 * g:02X}:00): {xid}",
                            }
                        )
                path = write_spool_file(
                    spool / n.name, n.name, records, opened_at=float(day), cluster=cfg.cluster
                )
                written.append(str(path.relative_to(self.out_dir)))
                day = day_end
        return written

    def write(self) -> dict:
        """Close the streamed files and write the end-of-period ones (sacctmgr events, reservation)."""
        out_dir = self.out_dir
        self._close_sacct()
        self._sacct_fh.close()
        self._ev_fh.close()
        files = ["sacct.txt"]
        if self.cfg.write_events_jsonl:
            files.append("events.jsonl")
        (out_dir / "events.txt").write_text(self.events_text(), encoding="utf-8")
        files.append("events.txt")
        if self.cfg.write_snapshots:
            for kind, n in self.snapshots.items():
                files.append(f"snapshots/{kind}/<epoch>.txt ({n} files)")
            path = out_dir / "snapshots" / "reservations" / f"{self.t0}.txt"
            path.write_text(self.reservations_text(), encoding="utf-8")
            os.utime(path, (self.t0, self.t0))
            files.append("snapshots/reservations/<epoch>.txt (1 file)")
        if self.cfg.telemetry_nodes > 0:
            tele = self.write_telemetry()
            if tele:
                files.append(f"spool/<node>/<node>_<opened>Z.jsonl ({len(tele)} files, NVML spool v1)")
        return {"files": files}


DEG_TEMP_PER_DAY, DEG_CLOCK_PER_DAY = 0.6, 12.0  # the slowly degrading GPU
GPU_SPECS = {
    "h100": {
        "model": "NVIDIA H100 80GB HBM3",
        "mem": 85899345920,
        "p_idle": 70.0,
        "p_max": 700.0,
        "t_idle": 31.0,
        "t_load": 66.0,
        "sm_idle": 345.0,
        "sm_max": 1980.0,
        "mem_clock": 2619,
    },
    "a100": {
        "model": "NVIDIA A100-SXM4-80GB",
        "mem": 85899345920,
        "p_idle": 60.0,
        "p_max": 400.0,
        "t_idle": 30.0,
        "t_load": 62.0,
        "sm_idle": 210.0,
        "sm_max": 1410.0,
        "mem_clock": 1593,
    },
}


def _iso(t: int) -> str:
    return ts(int(t)) + "Z"


def _lfs(v: float) -> str:
    return "inf" if v == float("inf") else f"{v:.6f}"


def _qkey(e: tuple) -> tuple:
    return (e[0], e[1])


class _Probe:
    """Shape of one pending array task, used to look for room without creating the task."""

    __slots__ = ("part", "units", "limit", "whole", "nnodes", "resv", "raw", "priority")

    def __init__(self) -> None:
        self.resv = None


_PROBE = _Probe()
BIG = 1 << 62
# sacct Flags as Slurm 22.05 prints them (sic "Recieved", verified on the test bed).
USERS_SYS = {"root": "root(0)", "slurm": "slurm(64030)", "admin": "root(0)"}
TRES0 = "cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0"
FLAGS = {
    "main": "SchedMain,StartRecieved",
    "backfill": "SchedBackfill,StartRecieved",
    "submit": "SchedSubmit,StartRecieved",
}
K_END, K_ARRIVAL, K_SUBMIT, K_FAULT, K_RESUME, K_PATIENCE, K_RESV, K_ELIGIBLE = range(8)
REQUEUE_DELAY = 121  # a requeued attempt's Eligible = Submit + ~121 s on Slurm 22.05 (test bed)


def simulate(gpus: int, days: float, seed: int, out_dir: Path, **options: object) -> dict:
    """Simulate, write every output file into `out_dir`, and return a summary (also in summary.json)."""
    if gpus < 1 or days <= 0:
        raise ValueError(f"simulate needs --gpus >= 1 and --days > 0, got gpus={gpus} days={days}")
    cfg = SimConfig(gpus=gpus, days=days, seed=seed, **options)
    t0 = _time.perf_counter()
    out_dir = Path(out_dir)
    sim = Simulator(cfg)
    sim.run(out_dir)
    t1 = _time.perf_counter()
    written = sim.write()
    t2 = _time.perf_counter()
    states = sim.state_counts
    summary = {
        "cluster": cfg.cluster,
        "start": ts(sim.t0),
        "end": ts(sim.t_end),
        "gpus": sim.gpu_total,
        "nodes": {p.name: len(p.nodes) for p in sim.parts.values()},
        "jobs_submitted": sim.counters["submitted"],
        "attempts_finished": sum(states.values()),
        "finished_by_state": dict(sorted(states.items())),
        "running_at_end": sum(len(p.running) for p in sim.parts.values()),
        "pending_at_end": sum(len(p.queue) for p in sim.parts.values())
        + len(sim._waiting_resv)
        + len(sim._begin_wait),
        "backfilled": sim.counters["bf_total"],
        "snapshot_interval_s": cfg.snapshot_interval_s,
        "files": written["files"],
        "config": asdict(cfg),
        "timing_s": {"simulate": round(t1 - t0, 3), "write": round(t2 - t1, 3)},
    }
    stable = {k: v for k, v in summary.items() if k != "timing_s"}
    (out_dir / "summary.json").write_text(
        json.dumps(stable, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return summary


def calibration(sacct: str, gpus: int, seconds: float) -> dict:
    """The trace-summary figures (docs/simulator.md) computed from a sacct.txt: final attempts only."""
    rows = [ln.split("|") for ln in sacct.splitlines()[1:] if ln and "." not in ln.split("|", 1)[0]]
    gpu_jobs = []
    for r in rows:
        if r[14] in ("PENDING", "RUNNING") or r[10] == "Unknown":
            continue
        g = 0
        for kv in r[19].split(","):
            if kv.startswith("gres/gpu="):
                g = int(kv.split("=")[1])
        el = _secs(r[12])
        q = int(datetime.fromisoformat(r[10]).timestamp() - datetime.fromisoformat(r[8]).timestamp())
        st = "CANCELLED" if r[14].startswith("CANCELLED") else r[14]
        gpu_jobs.append((g, el, q, st))
    gj = [x for x in gpu_jobs if x[0] > 0]
    bucket = {"COMPLETED": "completed", "CANCELLED": "cancelled"}
    count = {"completed": 0, "cancelled": 0, "failed": 0}
    gtime = {"completed": 0, "cancelled": 0, "failed": 0}
    for g, el, _q, st in gj:
        b = bucket.get(st, "failed")
        count[b] += 1
        gtime[b] += g * el
    n = len(gj) or 1
    tot = sum(gtime.values()) or 1
    runs = sorted(x[1] for x in gj)
    queues = sorted(x[2] for x in gj)
    return {
        "gpu_jobs": len(gj),
        "cpu_jobs": len(gpu_jobs) - len(gj),
        "count_share": {k: round(v / n, 3) for k, v in count.items()},
        "gpu_time_share": {k: round(v / tot, 3) for k, v in gtime.items()},
        "avg_run_s": round(sum(runs) / n, 1),
        "median_run_s": runs[len(runs) // 2] if runs else 0,
        "avg_queue_s": round(sum(queues) / n, 1),
        "median_queue_s": queues[len(queues) // 2] if queues else 0,
        "avg_gpus": round(sum(x[0] for x in gj) / n, 2),
        "gpu_allocation_ratio": round(sum(x[0] * x[1] for x in gj) / (gpus * seconds), 3),
    }


def _secs(text: str) -> int:
    d, _, rest = text.rpartition("-")
    h, m, s = (int(x) for x in rest.split(":"))
    return (int(d) if d else 0) * 86400 + h * 3600 + m * 60 + s
