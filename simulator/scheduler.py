"""Slurm's scheduling of the simulated cluster: queues, node placement, the main and backfill passes, requeue.

The main pass runs after every batch of events, per partition in priority order, and stops a partition
at its first job that cannot start. The backfill pass (every bf_interval) reserves nodes for the blocked
jobs it tests, from the running jobs' expected ends, and starts a lower-priority job only where it cannot
delay those reservations. Pending job arrays are one queue entry until their tasks split off.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import TYPE_CHECKING

from . import workload
from .model import (
    BIG,
    K_ELIGIBLE,
    K_END,
    K_PATIENCE,
    K_RESUME,
    K_RESV,
    USERS_SYS,
    ArrayRec,
    Job,
    Node,
    Partition,
    gpus,
)
from .slurmtext import hostlist, ts
from .writers import ground_truth, sacct

if TYPE_CHECKING:
    from .engine import Sim

REQUEUE_DELAY = 121  # a requeued attempt's Eligible = Submit + ~121 s on Slurm 22.05 (test bed)


class _Probe:
    """Shape of one pending array task, used to look for room without creating the task."""

    __slots__ = ("part", "units", "limit", "whole", "nnodes", "resv", "raw", "priority")

    def __init__(self) -> None:
        self.resv = None


_PROBE = _Probe()


class Scratch:
    """What one pass remembers between its node searches, reset when it ends."""

    def __init__(self) -> None:
        self.stash: dict[int, Node] = {}  # free nodes barred for the current job, set aside
        self.stash_barrier = 0
        self.bf_fail: set | None = None  # job shapes that found no nodes in this backfill pass
        self.resv_base: dict[int, int] | None = None
        self.resv_fail: set = set()  # shapes that got no reservation in this backfill pass


def recalc(sim: Sim) -> None:
    """PriorityCalcPeriod: decay usage, charge running allocations, recompute every pending priority."""
    sim.fairshare.decay(sim.cfg.priority_calc_period_s, sim.cfg.decay_half_life_s)
    sim.fairshare.fair_tree()
    now = sim.now
    for p in sim.cluster.parts.values():
        if not p.queue:
            continue
        q = []
        for _np, jid, j in p.queue:
            if isinstance(j, ArrayRec):
                j.priority = sim.fairshare.prio(j.account, j.user, j.qos, 1, j.submit, now)
            else:
                j.priority = sim.fairshare.prio(j.account, j.user, j.qos, j.nnodes, j.submit, now)
            q.append((-j.priority, jid, j))
        q.sort(key=_qkey)  # (priority, id) pairs are unique: the job itself is never compared
        p.queue = q
        p.touch()


def queue_insert(p: Partition, prio: int, jid: int, j: object) -> None:
    insort(p.queue, (-prio, jid, j))  # (priority, id) is unique: jobs are never compared


def queue_remove(p: Partition, j: object) -> None:
    key = (-j.priority, j.raw)
    i = bisect_left(p.queue, key)
    while p.queue[i][2] is not j:
        i += 1
    del p.queue[i]


def queue_array(sim: Sim, a: ArrayRec) -> None:
    """A new job array joins its partition's queue as one entry."""
    sim.pending_arrays.append(a)
    a.priority = sim.fairshare.prio(a.account, a.user, a.qos, 1, a.submit, a.submit)
    queue_insert(a.part, a.priority, a.raw, a)
    a.part.touch()


def schedule_reservation(sim: Sim) -> None:
    r = sim.cluster.resv
    for n in r.nodes:
        n.resv = r
    sim.push(r.start, K_RESV, "start")
    sim.push(r.end, K_RESV, "end")
    ground_truth.log(
        sim,
        sim.t0,
        "reservation",
        name=r.name,
        start=ts(r.start),
        end=ts(r.end),
        nodes=hostlist(r.nodes),
        account=r.account,
    )


def node_ok(sim: Sim, n: Node, j: Job, exp_end: int) -> bool:
    if n.down or n.drain:
        return False
    r = n.resv
    if r is not None and sim.now < r.end:
        if j.resv is r:
            pass
        elif exp_end > r.start:
            return False
    elif j.resv is not None:
        return False
    if n.bf_resv and exp_end > n.bf_resv:
        return False
    return True


def find(sim: Sim, j: Job) -> list[Node] | None:
    """Nodes for `j` now, or None. Whole-node jobs take the lowest-numbered idle nodes; smaller GPU jobs
    go best-fit (the fullest node that still fits) so whole nodes stay free for multi-node jobs."""
    p = j.part
    exp_end = sim.now + j.limit
    if j.resv is None:
        if p.idle < j.nnodes if j.whole else p.free_units < j.units:
            return None
        memo = sim.scratch.bf_fail
        if memo is not None:
            key = (j.units, j.whole, j.nnodes, j.limit)
            if key in memo:
                return None
            got = _find2(sim, j, p, exp_end)
            if got is None:
                memo.add(key)
            return got
        return _find2(sim, j, p, exp_end)
    if j.resv is not None:
        cand = [n for n in j.resv.nodes if n.free == n.cap and not n.down and not n.drain]
        return cand[: j.nnodes] if len(cand) >= j.nnodes else None
    return None


def _find2(sim: Sim, j: Job, p: Partition, exp_end: int) -> list[Node] | None:
    """Search the free-node heaps. A node that is free but barred for this job (advance or backfill
    reservation, drain, down) is set aside in a stash for the rest of the pass instead of being
    popped again by every later search; the stash is checked directly and put back afterwards."""
    stash = sim.scratch.stash
    nodes = sim.cluster.nodes
    ok = node_ok
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
            if ok(sim, n, j, exp_end):
                return [n]
            pop(h)
            _stash_add(sim, n)
        if exp_end > sim.scratch.stash_barrier:
            return None
        best = None
        for n in stash.values():
            if (
                n.part is p
                and n.free >= units
                and ok(sim, n, j, exp_end)
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
            if ok(sim, n, j, exp_end):
                got.append(n)
                popped.append(idx)
            else:
                _stash_add(sim, n)
        for idx in popped:
            heapq.heappush(h, idx)
        if len(got) < need and exp_end <= sim.scratch.stash_barrier:
            for idx, n in stash.items():
                if idx not in seen and n.part is p and n.free == cap and ok(sim, n, j, exp_end):
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
            if ok(sim, n, j, exp_end):
                return [n]
            pop(h)
            _stash_add(sim, n)
    if exp_end > sim.scratch.stash_barrier:
        return None
    best = None
    for n in stash.values():
        if (
            n.part is p
            and n.free >= units
            and ok(sim, n, j, exp_end)
            and (best is None or (n.free, n.idx) < (best.free, best.idx))
        ):
            best = n
    return [best] if best else None


def _stash_add(sim: Sim, n: Node) -> None:
    """Set a barred node aside; remember the latest end time any stashed node could still accept."""
    sim.scratch.stash[n.idx] = n
    if n.down or n.drain:
        return
    bar = n.bf_resv or BIG
    r = n.resv
    if r is not None and sim.now < r.end:
        bar = min(bar, r.start)
    if bar > sim.scratch.stash_barrier:
        sim.scratch.stash_barrier = bar


def restore(sim: Sim) -> None:
    """Put the nodes set aside during a pass back into their heaps."""
    sim.scratch.stash_barrier = 0
    for n in sim.scratch.stash.values():
        p = n.part
        if p.is_gpu:
            heapq.heappush(p.heaps[n.free], n.idx)
        else:
            heapq.heappush(p.heaps[0], (-n.free, n.idx))
    sim.scratch.stash.clear()


def set_free(n: Node, free: int) -> None:
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


def start(sim: Sim, j: Job, nodes: list[Node], how: str) -> None:
    t = sim.now
    j.start = t
    j.nodes = nodes
    j.state = "RUNNING"
    j.sched_by = how
    j.token += 1
    j.gpu_idx = []
    base = sim.scratch.resv_base
    tele = sim.cluster.tele
    for n in nodes:
        set_free(n, n.free - j.units)
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
                    j.tele.append(len(sim.gpu_iv))
                    sim.gpu_iv.append([n.idx, g, j, t, None])
    remaining = j.target - j.progress
    if remaining > j.limit:
        dur, final = j.limit, "TIMEOUT"
    else:
        dur, final = max(1, remaining), j.outcome
    j.end = t + dur
    sim.push(t + dur, K_END, j, j.token)
    insort(j.part.running, (t + j.limit, j.raw, j))
    j.cause = final
    rate = j.nnodes * j.units if j.part.is_gpu else j.nnodes * j.units * 0.1
    sim.fairshare.run_rate[j.user] += rate
    sim.counters["started"] += 1
    sim.day_counters["started"] += 1
    if how == "backfill":
        sim.counters["bf_total"] += 1
        sim.counters["bf_since"] += 1
    ground_truth.start(sim, j, t, how)


def release(sim: Sim, j: Job) -> None:
    if j.tele:
        for i in j.tele:
            sim.gpu_iv[i][4] = sim.now
        j.tele = []
    for n in j.nodes:
        n.jobs.remove(j)
        if n.owners:
            for g in range(n.cap):
                if n.owners[g] is j:
                    n.owners[g] = None
        set_free(n, n.free + j.units)
        if n.drain and not n.jobs:
            node_drained(sim, n)
    p = j.part
    key = (j.start + j.limit, j.raw)
    i = bisect_left(p.running, key)
    while p.running[i][2] is not j:
        i += 1
    del p.running[i]
    rate = j.nnodes * j.units if j.part.is_gpu else j.nnodes * j.units * 0.1
    sim.fairshare.run_rate[j.user] -= rate
    p.touch()


def finish(sim: Sim, j: Job, state: str, exit_code: str, cause: str, end: int | None = None) -> None:
    """End the current attempt of `j` (running or pending) and write its accounting record."""
    t = sim.now if end is None else end
    ran = j.state == "RUNNING"
    if ran:
        release(sim, j)
        j.progress += t - j.start
    j.end = t
    j.state = state
    j.exit = exit_code
    sacct.record(sim, j)
    ground_truth.end(sim, j, t, ran, state, exit_code, cause)
    key = {"COMPLETED": "completed", "CANCELLED": "canceled"}.get(state, "failed")
    if state != "NODE_FAIL" or not j.requeue:
        sim.counters[key] += 1
        sim.day_counters[key] += 1


def requeue(sim: Sim, j: Job, cause: str) -> None:
    """NODE_FAIL with JobRequeue=1: a new attempt with a new submit time, from the last checkpoint."""
    t = sim.now
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
    ground_truth.log(
        sim,
        t,
        "requeue",
        job_id_raw=j.raw,
        job=j.jid,
        from_attempt=old_attempt,
        attempt=j.attempt,
        cause=cause,
        lost_seconds=lost,
        lost_gpu_seconds=lost * gpus(j),
        restart_from=saved,
        checkpoint_interval=j.ckpt,
        new_submit=ts(t),
    )
    j.priority = sim.fairshare.prio(j.account, j.user, j.qos, j.nnodes, j.submit, t)
    sim.begin_wait.append(j)
    sim.push(j.eligible, K_ELIGIBLE, j, j.attempt)


def eligible(sim: Sim, j: Job, attempt: int) -> None:
    """A requeued attempt's BeginTime has come: it joins the queue."""
    if j.attempt != attempt or j not in sim.begin_wait:
        return
    sim.begin_wait.remove(j)
    j.priority = sim.fairshare.prio(j.account, j.user, j.qos, j.nnodes, j.submit, sim.now)
    if j.resv is not None:
        sim.waiting_resv.append(j)
        return
    queue_insert(j.part, j.priority, j.raw, j)
    j.part.touch()


def enqueue(sim: Sim, j: Job, at_submit: bool) -> None:
    p = j.part
    j.priority = sim.fairshare.prio(j.account, j.user, j.qos, j.nnodes, j.submit, sim.now)
    if j.patience:
        sim.push(sim.now + j.patience, K_PATIENCE, j, j.attempt)
    if at_submit and not p.queue and j.resv is None:
        nodes = find(sim, j)
        restore(sim)
        if nodes:
            start(sim, j, nodes, "submit")
            return
    queue_insert(p, j.priority, j.raw, j)
    p.touch()


def main_pass(sim: Sim, p: Partition) -> None:
    """Priority order; the first job that cannot start blocks the rest of the partition."""
    q = p.queue
    if p.blocked is not None and p.blocked[0] == p.version and p.blocked[1] is q[0][2]:
        return  # same blocked job at the top and nothing released since: the pass would stop there
    sim.counters["main_cycles"] += 1
    depth = 0
    while q:
        _np, _jid, j = q[0]
        depth += 1
        if isinstance(j, ArrayRec):
            while j.next_task < j.ntasks:
                probe = _PROBE
                probe.part, probe.units, probe.limit, probe.whole, probe.nnodes = p, 1, j.limit, False, 1
                nodes = find(sim, probe)
                if not nodes:
                    break
                task = workload.array_task(sim, j)
                start(sim, task, nodes, "main")
            if j.next_task >= j.ntasks:
                q.pop(0)
                sim.pending_arrays.remove(j)
                continue
            break
        nodes = find(sim, j)
        if nodes is None:
            break
        q.pop(0)
        start(sim, j, nodes, "main")
    p.blocked = (p.version, q[0][2]) if q else None
    restore(sim)
    us = 40 + 15 * depth
    c = sim.counters
    c["main_last_us"] = us
    c["main_max_us"] = max(c["main_max_us"], us)
    c["main_us_sum"] += us
    c["main_depth_sum"] += depth


def backfill(sim: Sim, p: Partition) -> None:
    """Reserve nodes for blocked jobs in priority order and start later jobs only where they fit now
    without touching those reservations before their expected end (start + time limit)."""
    now = sim.now
    for n in p.nodes:
        n.bf_resv = 0
    horizon = now + sim.cfg.bf_window_s
    reserved: list[tuple[int, int, list[Node]]] = []
    sim.scratch.bf_fail = set()
    sim.scratch.resv_fail = set()
    sim.scratch.resv_base = None
    max_resv = sim.cfg.bf_max_reservations
    tested = 0
    started = 0
    q = p.queue
    i = 0
    avail = sum(n.free for n in p.nodes if not n.down and not n.drain)
    while i < len(q) and tested < sim.cfg.bf_max_job_test:
        if avail <= 0 and len(reserved) >= max_resv:
            break  # nothing can start now and no further reservation will be made
        _np, _jid, j = q[i]
        tested += 1
        if isinstance(j, ArrayRec):
            probe = _PROBE
            probe.part, probe.units, probe.limit, probe.whole, probe.nnodes = p, 1, j.limit, False, 1
            while j.next_task < j.ntasks:
                nodes = find(sim, probe)
                if not nodes:
                    break
                task = workload.array_task(sim, j)
                start(sim, task, nodes, "backfill")
                avail -= 1
                started += 1
                _log_bf(sim, task, reserved)
            if j.next_task >= j.ntasks:
                del q[i]
                sim.pending_arrays.remove(j)
                continue
            _reserve(sim, p, j, probe, reserved, horizon)
            i += 1
            continue
        if j.resv is not None:
            i += 1
            continue
        nodes = find(sim, j)
        if nodes:
            del q[i]
            start(sim, j, nodes, "backfill")
            avail -= j.units * j.nnodes
            started += 1
            _log_bf(sim, j, reserved)
            continue
        _reserve(sim, p, j, j, reserved, horizon)
        i += 1
    for n in p.nodes:
        n.bf_resv = 0
    sim.scratch.bf_fail = None
    sim.scratch.resv_base = None
    restore(sim)
    c = sim.counters
    c["bf_cycles"] += 1
    c["bf_last"] = now
    c["bf_last_depth"] = tested
    c["bf_depth_sum"] += tested
    c["bf_qlen_sum"] += len(q) + started
    us = 200 + 60 * tested + 5 * len(p.running)
    c["bf_last_us"] = us
    c["bf_max_us"] = max(c["bf_max_us"], us)
    c["bf_us_sum"] += us


def _log_bf(sim: Sim, j: Job, reserved: list) -> None:
    if not sim.cfg.write_events_jsonl:
        return
    # The reservations made for higher-priority jobs this cycle that share a node with j.
    mine = {n.idx for n in j.nodes}
    conflicts = [[rj, ts(rt)] for rt, rj, rn in reserved if mine.intersection(n.idx for n in rn)]
    ground_truth.log(
        sim,
        sim.now,
        "backfill_start",
        job_id_raw=j.raw,
        expected_end=ts(sim.now + j.limit),
        nodes=hostlist(j.nodes),
        shares_nodes_with=conflicts,
    )


def _reserve(sim: Sim, p: Partition, j: object, shape: object, reserved: list, horizon: int) -> None:
    """Earliest time `shape` fits on nodes not yet reserved, from the expected ends of running jobs."""
    if len(reserved) >= sim.cfg.bf_max_reservations:
        return
    units, whole, need = shape.units, shape.whole, shape.nnodes
    key = (units, whole, need)
    if key in sim.scratch.resv_fail:
        return
    now = sim.now
    if sim.scratch.resv_base is None:
        sim.scratch.resv_base = {
            n.idx: n.free
            for n in p.nodes
            if not n.down and not n.drain and (n.resv is None or now >= n.resv.end)
        }
    free = sim.scratch.resv_base.copy()
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
        sim.scratch.resv_fail.add(key)
        return
    rn = [sim.cluster.nodes[i] for i in got]
    for n in rn:
        n.bf_resv = at
        sim.scratch.resv_base.pop(n.idx, None)
    raw = j.raw
    reserved.append((at, raw, rn))
    ground_truth.log(
        sim,
        sim.now,
        "bf_reservation",
        job_id_raw=raw,
        reserved_start=ts(at),
        nodes=hostlist(rn),
        priority=j.priority,
    )


def node_drained(sim: Sim, n: Node) -> None:
    """The node's last job ended: it is DRAINED now (the time sacctmgr's DRAIN event starts), and the
    repair the fault planned for it starts."""
    rep = sim.drain_repair.pop(n.idx, None)
    if rep is not None:
        sim.node_events.append([n.name, sim.now, None, "DRAIN", n.reason, USERS_SYS[n.reason_user]])
        ground_truth.log(sim, sim.now, "drained", node=n.name, reason=n.reason)
        sim.push(sim.now + rep, K_RESUME, n)


def resv_event(sim: Sim, what: str) -> None:
    """The advance reservation starts or ends; at its end its nodes are open to every job."""
    r = sim.cluster.resv
    if what == "start":
        ground_truth.log(sim, sim.now, "reservation_start", name=r.name)
        # The hero run was submitted a day before; it waits for the reservation.
        return
    ground_truth.log(sim, sim.now, "reservation_end", name=r.name)
    for n in r.nodes:
        n.resv = None
    sim.cluster.parts[r.partition].version += 1
    sim.cluster.parts[r.partition].touch()


def resv_pass(sim: Sim) -> None:
    """Jobs for the advance reservation start once it has begun and enough of its nodes are free."""
    keep = []
    for j in sim.waiting_resv:
        if sim.now >= j.resv.start:
            nodes = find(sim, j)
            if nodes:
                start(sim, j, nodes, "main")
                continue
        keep.append(j)
    restore(sim)
    sim.waiting_resv = keep


def _qkey(e: tuple) -> tuple:
    return (e[0], e[1])
