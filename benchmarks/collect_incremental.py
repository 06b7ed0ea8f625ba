"""Incremental collection at scale (issue 9): one day of sacct output into a database that already holds a
long job history, against the same day into an empty database. Goal: ratio <= 2.

    .venv/bin/python -m benchmarks.collect_incremental --history 1000000,3000000,10000000

The history is generated inside DuckDB (INSERT ... SELECT FROM range(): jobs with one batch step each, spread
over the days before the collected day), so building it costs seconds, not a simulation. The day is
generated in the live sacct format (`collectors.sacct.LIVE_FIELDS`, unit separator, job + .batch + .extern
lines, as `collect` fetches it) and loaded through `slurmscope.collectors.ingest.ingest_files`, the same
parse + upsert + attempt recompute the scheduled collector runs. A share of the day's jobs (`--updates`)
are the history's last jobs, RUNNING in the history and now COMPLETED: the overlap window every incremental
collection re-reads, so the upsert path really replaces rows in the big table.

Each measurement loads into a fresh copy of the database (the empty one migrated, the history one copied
from the built file), so every repetition sees the same state. The ratio of minimums is the less noisy
figure on a shared machine.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmscope.collectors.ingest import ingest_files
from slurmscope.collectors.sacct import LIVE_FIELDS

from benchmarks.harness import parser, peak_rss_mib, run
from slurmscope.config import load_config
from slurmscope.db import connect

CLUSTER = "bench"
DAY = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())  # the collected day starts here
JOBS_PER_DAY = 30_000  # the 10,000-GPU simulated cluster submits ~31,400 jobs a day


def iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def hms(s: int) -> str:
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def history_submit(i: int, n: int) -> int:
    """Submit time of history job i (1..n): evenly spread over the n / JOBS_PER_DAY days before DAY."""
    span = max(1, n // JOBS_PER_DAY) * 86400
    return DAY - span + (i * span) // (n + 1)


def day_output(n_history: int, jobs: int, updates: int) -> bytes:
    """One day in the live format: `updates` history jobs finishing, then `jobs` new ones, each with steps."""
    names = LIVE_FIELDS.split(",")
    out = ["\x1f".join(names)]

    def emit(i: int, submit: int, start: int, end: int, gpus: int) -> None:
        elapsed = end - start
        job = {
            "JobID": str(i),
            "JobIDRaw": str(i),
            "Cluster": CLUSTER,
            "Partition": "gpu",
            "QOS": "normal",
            "Account": f"acct{i % 20}",
            "User": f"u{i % 50}",
            "UID": str(1000 + i % 50),
            "Submit": iso(submit),
            "Eligible": iso(submit),
            "Start": iso(start),
            "End": iso(end),
            "Elapsed": hms(elapsed),
            "Timelimit": "1-00:00:00",
            "State": "COMPLETED",
            "ExitCode": "0:0",
            "NNodes": "1",
            "NCPUS": str(8 * gpus),
            "ReqMem": f"{64 * gpus}G",
            "AllocTRES": f"billing={8 * gpus},cpu={8 * gpus},gres/gpu:h100={gpus},gres/gpu={gpus},"
            f"mem={64 * gpus}G,node=1",
            "NodeList": f"gpu{i % 1250:04d}",
            "Flags": "SchedMain",
            "Priority": str(10000 + i % 977),
            "Reason": "None",
            "JobName": f"train-{i % 997}",
        }
        out.append("\x1f".join(job.get(k, "") for k in names))
        for step in ("batch", "extern"):
            s = dict(
                job,
                JobID=f"{i}.{step}",
                JobIDRaw=f"{i}.{step}",
                Partition="",
                QOS="",
                User="",
                UID="",
                Timelimit="",
                ReqMem="",
                Flags="",
                Priority="",
                Reason="",
                JobName=step,
                AllocTRES=f"cpu={8 * gpus},gres/gpu:h100={gpus},gres/gpu={gpus},mem={64 * gpus}G,node=1",
            )
            out.append("\x1f".join(s.get(k, "") for k in names))

    for i in range(n_history - updates + 1, n_history + 1):
        sub = history_submit(i, n_history)
        emit(i, sub, sub + 60, DAY + 600 + i % 3600, 1 + i % 8)
    for k in range(jobs):
        i = n_history + 1 + k
        sub = DAY + (k * 86400) // jobs
        emit(i, sub, sub + 30 + k % 600, sub + 630 + k % 7200, 1 + k % 8)
    return ("\n".join(out) + "\n").encode()


HISTORY_JOBS = """
INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, attempt, name, "user", uid, account, "partition",
                  qos, state, state_raw, reason, exit_code, signal, eligible_time, start_time, end_time,
                  elapsed_seconds, timelimit_seconds, nodes, cpus, gpus, gpu_type, mig_slices, req_mem_bytes,
                  alloc_tres, billing, node_list, sched_by, flags, restarts, priority, source)
SELECT $cluster, i::VARCHAR, i, to_timestamp(sub), 1, 'train-' || (i % 997), 'u' || (i % 50), 1000 + i % 50,
       'acct' || (i % 20), 'gpu', 'normal', st, st, 'None', 0, 0, to_timestamp(sub), to_timestamp(sub + 60),
       CASE WHEN st = 'RUNNING' THEN NULL ELSE to_timestamp(sub + 60 + i % 7200) END,
       i % 7200, 86400, 1, 8 * g, g, 'h100', 0, 64 * g * 1073741824,
       'billing=' || 8 * g || ',cpu=' || 8 * g || ',gres/gpu:h100=' || g || ',gres/gpu=' || g || ',mem=' || 64 * g
         || 'G,node=1', 8.0 * g, 'gpu' || lpad((i % 1250)::VARCHAR, 4, '0'), 'main', 'SchedMain', 0,
       10000 + i % 977, 'history'
FROM (SELECT i, $day - $span + (i * $span) // ($n + 1) AS sub, 1 + i % 8 AS g,
             CASE WHEN i > $n - $updates THEN 'RUNNING' ELSE 'COMPLETED' END AS st
      FROM range(1, $n + 1) t(i))
"""
HISTORY_STEPS = """
INSERT INTO job_steps (cluster, job_id_raw, job_submit_time, step_id, job_id, name, state, state_raw, exit_code,
                       signal, start_time, end_time, elapsed_seconds, nodes, cpus, gpus, alloc_tres, node_list,
                       source)
SELECT cluster, job_id_raw, submit_time, 'batch', job_id || '.batch', 'batch', state, state_raw, 0, 0,
       start_time, end_time, elapsed_seconds, 1, cpus, gpus, alloc_tres, node_list, 'history'
FROM jobs
"""


def build_history(path: Path, n: int, updates: int) -> dict:
    t0 = time.perf_counter()
    con = connect(path)
    try:
        span = max(1, n // JOBS_PER_DAY) * 86400
        con.execute(HISTORY_JOBS, {"cluster": CLUSTER, "day": DAY, "span": span, "n": n, "updates": updates})
        con.execute(HISTORY_STEPS)
        con.execute("CHECKPOINT")
        jobs = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
    finally:
        con.close()
    return {
        "jobs": jobs,
        "build_s": round(time.perf_counter() - t0, 1),
        "db_mb": round(path.stat().st_size / 2**20),
    }


def timed_ingest(db: Path, day: Path, cfg) -> tuple[float, float, int]:
    """(seconds to open + migrate-check, seconds of ingest_files, jobs in the table afterwards)."""
    t0 = time.perf_counter()
    con = connect(db)
    t1 = time.perf_counter()
    try:
        (res,) = ingest_files(con, cfg, "sacct", [day], timezone="UTC")
        t2 = time.perf_counter()
        assert res.quarantined == 0, res
        jobs = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
    finally:
        con.close()
    return t1 - t0, t2 - t1, jobs


def body(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_config(None, env={})
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-incr-"))
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    try:
        for n in [int(x) for x in args.history.split(",")]:
            day = work / f"sacct-day-{n}.txt"
            day.write_bytes(day_output(n, args.day_jobs, args.updates))
            base = work / f"history-{n}.duckdb"
            built = build_history(base, n, args.updates)
            empty_s, hist_s, hist_open = [], [], []
            for rep in range(args.reps):
                e = work / f"empty-{rep}.duckdb"
                _, secs, jobs = timed_ingest(e, day, cfg)
                assert jobs == args.day_jobs + args.updates, jobs
                empty_s.append(secs)
                e.unlink()
                h = work / f"hist-{rep}.duckdb"
                shutil.copyfile(base, h)
                opened, secs, jobs = timed_ingest(h, day, cfg)
                assert jobs == n + args.day_jobs, jobs  # the updates replaced rows, none doubled
                hist_s.append(secs)
                hist_open.append(opened)
                h.unlink()
            e_med, h_med = statistics.median(empty_s), statistics.median(hist_s)
            out[str(n)] = {
                "history": built,
                "day_lines": day.read_bytes().count(b"\n") - 1,
                "empty_s": [round(x, 2) for x in empty_s],
                "history_s": [round(x, 2) for x in hist_s],
                "history_open_s": [round(x, 2) for x in hist_open],
                "ratio_of_medians": round(h_med / e_med, 2),
                "ratio_of_minimums": round(min(hist_s) / min(empty_s), 2),
                "peak_rss_mib_so_far": peak_rss_mib(),
            }
            base.unlink()
            day.unlink()
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--history", default="1000000,3000000,10000000", help="history sizes (jobs), comma-separated"
    )
    ap.add_argument("--day-jobs", type=int, default=JOBS_PER_DAY)
    ap.add_argument("--updates", type=int, default=1500, help="history jobs the day's output finishes")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workdir", type=Path, help="where the databases go (default: a temp dir, removed)")
    run("collect_incremental", ap, body)


if __name__ == "__main__":
    main()
