"""The simulated cluster's data: the run's knobs, nodes, partitions, jobs, accounts and event kinds.

Nodes, partitions and jobs are slotted classes rather than dataclasses: the scheduler touches their
fields millions of times a run.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime

DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)
BIG = 1 << 62
# Kinds of events in the heap (ties are broken by sequence number, never by kind).
K_END, K_ARRIVAL, K_SUBMIT, K_FAULT, K_RESUME, K_PATIENCE, K_RESV, K_ELIGIBLE = range(8)
# Users that set node reasons, as sinfo and sacctmgr print them.
USERS_SYS = {"root": "root(0)", "slurm": "slurm(64030)", "admin": "root(0)"}


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


def gpus(j: Job) -> int:
    return j.nnodes * j.units if j.part.is_gpu else 0


def cpus(j: Job) -> int:
    n0 = j.part.nodes[0]
    return j.nnodes * j.units * n0.cpus_per_unit


def gpu_uuid(seed: int, node: str, gpu: int) -> str:
    """A stable UUID per (seed, node, GPU), from its own generator so that it draws nothing from the run's."""
    h = random.Random(f"{seed}:{node}:{gpu}").getrandbits(128)
    x = f"{h:032x}"
    return f"GPU-{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


class Cluster:
    """Nodes and partitions sized from `gpus`, the advance reservation, and the nodes that get telemetry."""

    def __init__(self, cfg: SimConfig) -> None:
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
        for i, (pname, gtype, count, cap, ncpus, mem, feat) in enumerate(specs):
            p = Partition(pname, gtype, default=(i == 0))
            width = max(3, len(str(count)))
            for k in range(1, count + 1):
                n = Node(len(self.nodes), f"{pname}-", k, width, p, cap, ncpus, mem, gtype, feat)
                if gtype:
                    n.gpu_uuids = [gpu_uuid(cfg.seed, n.name, g) for g in range(cap)]
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
        rstart = cfg.start + int(min(10 * 86400, 0.3 * cfg.days * 86400))
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


class Accounts:
    """The account tree's users (names and uids handed out in order) and which workload classes each submits."""

    def __init__(self, classes: dict) -> None:
        self.users: dict[str, tuple[str, int]] = {}  # user -> (account, uid)
        self.acct_users: dict[str, list[str]] = {}
        self.class_users: dict[str, list[str]] = {c: [] for c in classes}
        k = 0
        for acct, (_parent, _shares, nusers, acct_classes) in ACCOUNTS.items():
            us = []
            for _ in range(nusers):
                name = NAMES[k % len(NAMES)] + (str(k // len(NAMES)) if k >= len(NAMES) else "")
                self.users[name] = (acct, 10000 + k)
                us.append(name)
                k += 1
                for c in acct_classes:
                    self.class_users[c].append(name)
            self.acct_users[acct] = us
