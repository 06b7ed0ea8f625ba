"""The run: its state and the one event loop that drives workload, scheduler and faults in time order.

Determinism by seed: one `random.Random`, ties in the event heap broken by a sequence number, and no
iteration over string-hashed sets, so the same seed gives byte-identical files. Between events the loop
also runs the periodic work Slurm does (backfill every bf_interval, priorities every PriorityCalcPeriod,
the daily sdiag reset) and takes the snapshots.
"""

from __future__ import annotations

import heapq
import os
import random
import shutil
from pathlib import Path
from typing import TextIO

from . import faults, scheduler, workload
from .calibration import CLASSES
from .model import (
    K_ARRIVAL,
    K_ELIGIBLE,
    K_END,
    K_FAULT,
    K_PATIENCE,
    K_RESUME,
    K_RESV,
    K_SUBMIT,
    Accounts,
    ArrayRec,
    Cluster,
    Job,
    SimConfig,
)
from .priority import FairShare
from .writers import node_events, nvml_spool, reservations, sacct, sdiag, sinfo, squeue, sshare
from .writers.sacct import SACCT_FIELDS

SNAPSHOT_KINDS = ("sinfo", "squeue", "sshare", "sdiag")
END_CODES = {
    # state: (exit code, cause in events.jsonl)
    "COMPLETED": ("0:0", "done"),
    "FAILED": ("1:0", "user_error"),
    "CANCELLED": ("0:15", "user_cancel"),
    "OUT_OF_MEMORY": ("0:125", "oom"),
    "TIMEOUT": ("0:0", "time_limit"),
}


class Sim:
    """Everything one run changes as it goes: the clock and event heap, the cluster and its queues, the
    fair-share state, the counters sdiag prints, and the output not yet streamed to disk."""

    sacct_fh: TextIO
    ev_fh: TextIO

    def __init__(self, cfg: SimConfig, out_dir: Path) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        self.rng = random.Random(cfg.seed)
        self.t0 = cfg.start
        self.t_end = cfg.start + int(cfg.days * 86400)
        self.now = self.t0
        self.heap: list[tuple] = []
        self.seq = 0
        self.next_raw = 1000
        self.cluster = Cluster(cfg)
        self.accounts = Accounts(CLASSES)
        self.fairshare = FairShare(self.accounts, self.cluster.total_nodes)
        self.scratch = scheduler.Scratch()
        self.pending_arrays: list[ArrayRec] = []
        self.waiting_resv: list[Job] = []  # jobs for the advance reservation, waiting for it to start
        self.begin_wait: list[Job] = []  # requeued attempts before their BeginTime
        self.drain_repair: dict[int, int] = {}  # node idx -> repair seconds once it is drained
        self.degrading: tuple = ()
        self.gpu_iv: list[list] = []  # [node idx, gpu index, job, start, end|None] on telemetry nodes
        self.tele_events: list[tuple] = []  # (node idx, time, xid, gpu index) on telemetry nodes
        self.node_events: list[list] = []  # [node, start, end|None, state, reason, user]
        self.records: list[str] = []  # sacct lines not yet flushed to sacct.txt
        self.state_counts: dict[str, int] = {}
        self.ev: list[str] = []  # events.jsonl lines not yet flushed
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
        self.snapshots = dict.fromkeys(SNAPSHOT_KINDS, 0)

    def push(self, t: int, kind: int, obj: object, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, token))


def run(cfg: SimConfig, out_dir: Path) -> Sim:
    """Simulate the whole period, streaming sacct.txt, events.jsonl and snapshots into `out_dir`."""
    out_dir = Path(out_dir)
    sim = Sim(cfg, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # A rerun into the same directory must not leave an older run's snapshots or spool files behind
    # (they would be ingested with this run's data): these two folders belong to the simulator.
    for owned in ("snapshots", "spool"):
        if (out_dir / owned).is_dir():
            shutil.rmtree(out_dir / owned)
    for kind in (*SNAPSHOT_KINDS, "reservations"):
        if cfg.write_snapshots:
            (out_dir / "snapshots" / kind).mkdir(parents=True, exist_ok=True)
    sim.sacct_fh = open(out_dir / "sacct.txt", "w", encoding="utf-8")  # noqa: SIM115 - closed in write()
    sim.sacct_fh.write("|".join(SACCT_FIELDS) + "\n")
    sim.ev_fh = open(
        out_dir / "events.jsonl" if cfg.write_events_jsonl else "/dev/null",
        "w",  # noqa: SIM115
        encoding="utf-8",
    )
    try:
        _loop(sim)
    except BaseException:
        sim.sacct_fh.close()
        sim.ev_fh.close()
        raise
    return sim


def _loop(sim: Sim) -> None:
    cfg = sim.cfg
    workload.schedule_arrivals(sim)
    faults.schedule_faults(sim)
    scheduler.schedule_reservation(sim)
    workload.submit_hero(sim)
    sim.fairshare.fair_tree()
    next_bf = sim.t0 + cfg.bf_interval_s
    next_prio = sim.t0 + cfg.priority_calc_period_s
    next_snap = sim.t0 + cfg.snapshot_interval_s if cfg.write_snapshots else sim.t_end + 1
    next_midnight = sim.t0 - sim.t0 % 86400 + 86400
    heap = sim.heap
    parts = list(sim.cluster.parts.values())
    t_end = sim.t_end
    pop = heapq.heappop
    while True:
        t_ev = heap[0][0] if heap else t_end + 1
        t = min(t_ev, next_bf, next_prio, next_snap, next_midnight)
        if t > t_end:
            break
        sim.now = t
        if t_ev == t:
            while heap and heap[0][0] == t:
                _t, _s, kind, obj, token = pop(heap)
                _dispatch(sim, kind, obj, token)
            for p in parts:
                if p.dirty:
                    if p.queue:
                        scheduler.main_pass(sim, p)
                    p.dirty = False
            if sim.waiting_resv:
                scheduler.resv_pass(sim)
        if t == next_midnight:
            sim.stats_since = t
            sim.day_counters = dict.fromkeys(sim.day_counters, 0)
            sim.counters["bf_since"] = 0
            next_midnight += 86400
            flush(sim)
        if t == next_prio:
            scheduler.recalc(sim)
            next_prio += cfg.priority_calc_period_s
        if t == next_bf:
            for p in parts:
                if p.bf_dirty:
                    if p.queue:
                        scheduler.backfill(sim, p)
                    p.bf_dirty = False
            next_bf += cfg.bf_interval_s
        if t == next_snap:
            snapshot(sim, t)
            next_snap += cfg.snapshot_interval_s
            flush(sim)
    sim.now = t_end


def _dispatch(sim: Sim, kind: int, obj: object, token: int) -> None:
    if kind == K_END:
        if obj.token == token and obj.state == "RUNNING":
            _on_end(sim, obj)
    elif kind == K_ARRIVAL:
        sub = workload.arrival(sim, obj)
        if isinstance(sub, ArrayRec):
            scheduler.queue_array(sim, sub)
        else:
            scheduler.enqueue(sim, sub, at_submit=True)
    elif kind == K_SUBMIT:
        workload.register(sim, obj)
        if obj.resv is not None:
            obj.priority = sim.fairshare.prio(obj.account, obj.user, obj.qos, obj.nnodes, obj.submit, sim.now)
            sim.waiting_resv.append(obj)
        else:
            scheduler.enqueue(sim, obj, at_submit=True)
    elif kind == K_FAULT:
        faults.fault(sim)
    elif kind == K_RESUME:
        if obj.down or obj.drain:
            faults.resume(sim, obj)
    elif kind == K_PATIENCE:
        j = obj
        if j.state == "PENDING" and j.attempt == token and j.resv is None:
            scheduler.queue_remove(j.part, j)
            j.start = 0
            scheduler.finish(sim, j, f"CANCELLED by {j.uid}", "0:0", "user_cancel_pending")
    elif kind == K_RESV:
        scheduler.resv_event(sim, obj)
    elif kind == K_ELIGIBLE:
        scheduler.eligible(sim, obj, token)


def _on_end(sim: Sim, j: Job) -> None:
    """A running job reached the end drawn for it at start: its outcome, or TIMEOUT at its limit."""
    state = j.cause
    exit_code, cause = END_CODES[state]
    if state == "FAILED":
        cause = faults.application_xid(sim, j, cause)
    state_txt = f"CANCELLED by {j.uid}" if state == "CANCELLED" else state
    scheduler.finish(sim, j, state_txt, exit_code, cause)
    if state == "TIMEOUT" and j.cls == "pretrain" and j.work - j.progress > 600:
        workload.resubmit(sim, j)


def flush(sim: Sim, force: bool = False) -> None:
    """Stream finished records and events to disk so memory stays flat at a million jobs."""
    if sim.records and (force or len(sim.records) > 20000):
        sim.sacct_fh.write("\n".join(sim.records) + "\n")
        sim.records.clear()
    if sim.ev and (force or len(sim.ev) > 50000):
        sim.ev_fh.write("\n".join(sim.ev) + "\n")
        sim.ev.clear()


def snapshot(sim: Sim, t: int) -> None:
    for kind, text in (
        ("sinfo", sinfo.sinfo(sim)),
        ("squeue", squeue.squeue(sim, t)),
        ("sshare", sshare.sshare(sim)),
        ("sdiag", sdiag.sdiag(sim, t)),
    ):
        path = sim.out_dir / "snapshots" / kind / f"{t}.txt"
        path.write_text(text, encoding="utf-8")
        os.utime(path, (t, t))  # mtime = snapshot time, which `slurmscope ingest` uses
        sim.snapshots[kind] += 1


def write(sim: Sim) -> list[str]:
    """Close the streamed files and write the end-of-period ones; the files written, as summary.json
    lists them."""
    out_dir = sim.out_dir
    sacct.final_records(sim)
    flush(sim, force=True)
    sim.sacct_fh.close()
    sim.ev_fh.close()
    files = ["sacct.txt"]
    if sim.cfg.write_events_jsonl:
        files.append("events.jsonl")
    (out_dir / "events.txt").write_text(node_events.events_text(sim), encoding="utf-8")
    files.append("events.txt")
    if sim.cfg.write_snapshots:
        for kind, n in sim.snapshots.items():
            files.append(f"snapshots/{kind}/<epoch>.txt ({n} files)")
        path = out_dir / "snapshots" / "reservations" / f"{sim.t0}.txt"
        path.write_text(reservations.reservations_text(sim), encoding="utf-8")
        os.utime(path, (sim.t0, sim.t0))
        files.append("snapshots/reservations/<epoch>.txt (1 file)")
    if sim.cfg.telemetry_nodes > 0:
        tele = nvml_spool.write_telemetry(sim)
        if tele:
            files.append(f"spool/<node>/<node>_<opened>Z.jsonl ({len(tele)} files, NVML spool v1)")
    return files
