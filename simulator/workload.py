"""What the users submit: job arrivals per workload class, their shapes, outcomes and continuations.

Every class is a Poisson process (rates in calibration.CLASSES); a job's outcome and how far into its
work it ends are drawn at submit, so the scheduler only decides when and where it runs. The draws come
from the run's one generator in event order, which is what makes a seed reproduce a run byte for byte.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from .calibration import CLASSES, OUTCOMES
from .model import K_ARRIVAL, K_SUBMIT, ArrayRec, Job, Partition
from .writers import ground_truth

if TYPE_CHECKING:
    from .engine import Sim


def lognorm(rng: random.Random, median: float, sigma: float, lo: float, hi: float) -> int:
    return int(min(hi, max(lo, median * math.exp(rng.gauss(0.0, sigma)))))


def rate(sim: Sim, cls: str) -> float:
    """Arrivals per second of a workload class."""
    # Pretraining runs scale in size with the partition, so their rate does not grow with it (but a
    # cluster under 512 GPUs sees proportionally fewer of them).
    scale = min(1.0, sim.cluster.gpu_total / 512.0) if cls == "pretrain" else sim.cluster.gpu_total / 1000.0
    return CLASSES[cls][0] * scale * sim.cfg.load / 86400.0


def schedule_arrivals(sim: Sim) -> None:
    for cls in CLASSES:
        per_s = rate(sim, cls)
        if per_s > 0:
            sim.push(sim.t0 + int(sim.rng.expovariate(per_s)), K_ARRIVAL, cls)


def arrival(sim: Sim, cls: str) -> Job | ArrayRec:
    """The next submission of `cls` (a job, or a job array for evals); the following one is scheduled."""
    t = sim.now
    sim.push(t + 1 + int(sim.rng.expovariate(rate(sim, cls))), K_ARRIVAL, cls)
    part = pick_part(sim, cls)
    if cls == "eval":
        return submit_array(sim, part, t)
    j = new_job(sim, cls, part, t)
    j.raw = sim.next_raw
    sim.next_raw += 1
    j.jid = str(j.raw)
    register(sim, j)
    return j


def register(sim: Sim, j: Job) -> None:
    sim.counters["submitted"] += 1
    sim.day_counters["submitted"] += 1
    ground_truth.submit(sim, j)


def outcome(sim: Sim, cls: str) -> str:
    r = sim.rng.random()
    c, f, x, _o = OUTCOMES[cls]
    if r < c:
        return "COMPLETED"
    if r < c + f:
        return "FAILED"
    if r < c + f + x:
        return "CANCELLED"
    return "OUT_OF_MEMORY"


def pick_part(sim: Sim, cls: str) -> Partition:
    mix = CLASSES[cls][1]
    r = sim.rng.random()
    acc = 0.0
    for name, w in mix.items():
        acc += w
        if r < acc:
            return sim.cluster.parts[name]
    return sim.cluster.parts[next(iter(mix))]


def new_job(sim: Sim, cls: str, part: Partition, t: int) -> Job:
    j = Job()
    j.cls = cls
    j.part = part
    j.qos = CLASSES[cls][2]
    user = sim.rng.choice(sim.accounts.class_users[cls])
    j.user = user
    j.account, j.uid = sim.accounts.users[user]
    j.submit = j.eligible = j.first_submit = t
    nodes_in_part = len(part.nodes)
    rng = sim.rng
    if cls == "pretrain":
        j.nnodes = max(1, min(nodes_in_part // 2, round(nodes_in_part * rng.uniform(0.05, 0.35))))
        j.units = 8
        j.whole = True
        j.limit = 72 * 3600
        j.work = lognorm(sim.rng, 24 * 3600, 0.8, 1800, 240 * 3600)
        j.ckpt = int(sim.cfg.checkpoint_hours * 3600)
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
        j.work = lognorm(sim.rng, 3 * 3600, 1.0, 300, 60 * 3600)
        j.ckpt = 3600 if rng.random() < 0.5 else 0
        j.name = f"ft-{rng.choice(('sft', 'dpo', 'lora', 'rlhf'))}"
    elif cls == "interactive":
        j.nnodes, j.units, j.whole = 1, 8, True
        j.limit = 4 * 3600
        j.work = lognorm(sim.rng, 2400, 1.0, 60, 6 * 3600)
        j.ckpt = 0
        j.interactive = True
        j.requeue = False
        j.name = "bash"
    elif cls == "dev":
        r = rng.random()
        units = 1 if r < 0.5 else 2 if r < 0.65 else 4 if r < 0.8 else 8
        j.nnodes, j.units, j.whole = 1, units, units == 8
        j.limit = 2 * 3600
        j.work = lognorm(sim.rng, 150, 1.6, 5, 4 * 3600)
        j.ckpt = 0
        j.name = rng.choice(("train.sh", "debug", "smoke-test", "profile", "nccl-test"))
    else:  # cpu
        j.nnodes, j.units, j.whole = 1, rng.choice((1, 2, 4, 8, 16, 32)), False
        j.limit = 12 * 3600
        j.work = lognorm(sim.rng, 300, 1.5, 5, 16 * 3600)
        j.ckpt = 0
        j.name = rng.choice(("tokenize", "dedup", "shard", "filter", "pack"))
    plan(sim, j)
    return j


def plan(sim: Sim, j: Job) -> None:
    j.outcome = outcome(sim, j.cls)
    if j.outcome == "COMPLETED":
        j.target = j.work
    elif j.outcome == "OUT_OF_MEMORY":
        j.target = max(1, int(j.work * sim.rng.random() * 0.2))
    elif j.outcome == "FAILED" and j.cls in ("dev", "eval", "cpu"):
        j.target = max(1, int(j.work * sim.rng.random() * 0.3))
    else:
        j.target = max(1, int(j.work * sim.rng.random()))
    if sim.rng.random() < 0.02:
        j.patience = lognorm(sim.rng, 1800, 1.0, 60, 86400)


def submit_array(sim: Sim, part: Partition, t: int) -> ArrayRec:
    rng = sim.rng
    a = ArrayRec()
    a.cls = "eval"
    a.part = part
    a.qos = CLASSES["eval"][2]
    a.user = rng.choice(sim.accounts.class_users["eval"])
    a.account, a.uid = sim.accounts.users[a.user]
    a.submit = t
    a.limit = 3600
    a.units = 1
    a.ntasks = max(2, min(400, int(rng.expovariate(1 / 100.0)) + 2))
    a.name = f"eval-{rng.choice(('mmlu', 'gsm8k', 'humaneval', 'arc', 'hellaswag'))}"
    a.raw = sim.next_raw
    # Slurm: split-off tasks get new ids, the last task keeps the array's own id.
    a.task_ids = [sim.next_raw + 1 + i for i in range(a.ntasks - 1)] + [sim.next_raw]
    sim.next_raw += a.ntasks
    a.params = [(lognorm(sim.rng, 360, 0.9, 20, 3 * 3600)) for _ in range(a.ntasks)]
    a.priority = 0
    sim.counters["submitted"] += a.ntasks
    sim.day_counters["submitted"] += a.ntasks
    ground_truth.log(
        sim,
        t,
        "submit_array",
        job_id_raw=a.raw,
        tasks=a.ntasks,
        user=a.user,
        account=a.account,
        partition=part.name,
        qos=a.qos,
    )
    return a


def array_task(sim: Sim, a: ArrayRec) -> Job:
    """The next task of a pending array splits off as a job of its own (when it is about to start)."""
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
    plan(sim, j)
    j.patience = 0
    ground_truth.submit(sim, j)
    return j


def resubmit(sim: Sim, j: Job) -> None:
    """A pretraining run hit its time limit: the user submits a continuation from its last checkpoint."""
    t = sim.now + sim.rng.randint(60, 1800)
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
    c.raw = sim.next_raw
    sim.next_raw += 1
    c.jid = str(c.raw)
    c.submit = c.eligible = c.first_submit = t
    sim.push(t, K_SUBMIT, c)


def submit_hero(sim: Sim) -> None:
    """The run the advance reservation is for, submitted a day before it starts."""
    r = sim.cluster.resv
    j = Job()
    j.cls = "pretrain"
    j.part = sim.cluster.parts[r.partition]
    j.qos = "high"
    j.user = sim.accounts.acct_users[r.account][0]
    j.account, j.uid = sim.accounts.users[j.user]
    j.submit = j.eligible = j.first_submit = max(sim.t0, r.start - 86400)
    j.nnodes, j.units, j.whole = len(r.nodes), 8, True
    j.limit = r.end - r.start
    j.work = int(j.limit * 0.9)
    j.ckpt = int(sim.cfg.checkpoint_hours * 3600)
    j.name = "pt-hero-405b"
    j.outcome, j.target = "COMPLETED", j.work
    j.resv = r
    j.raw = sim.next_raw
    sim.next_raw += 1
    j.jid = str(j.raw)
    sim.push(j.submit, K_SUBMIT, j)
