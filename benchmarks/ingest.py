"""sacct ingest speed and memory against DuckDB's own CSV reader on the same generated file.

    .venv/bin/python -m benchmarks.ingest --rows 1000000 [--delimiter '|'] [--repeat 2]

Generates a deterministic sacct --parsable2 file in the live format (header, jobs with their batch steps,
array tasks, requeued attempts, typed+untyped GPU TRES, and 0.1 % job names containing the delimiter so
the per-line recovery path is exercised), then runs each step in a fresh process (its own peak RSS):

  duckdb_read_csv  CREATE TABLE AS SELECT * FROM read_csv(all_varchar, no quoting) into a fresh database:
                   the fair reference, a reader that neither types nor recovers lines
  parse            slurmscope.collectors.sacct.parse (split + typed conversion, no database)
  ingest           slurmscope.collectors.ingest.ingest_files into a fresh database (parse, upsert into the
                   keyed jobs/job_steps tables, attempt recompute, run record; one transaction)

and keeps the best of --repeat wall times per step (with that run's CPU seconds) and the highest peak
RSS. Goal (issue 2): ingest <= 2x duckdb_read_csv, peak RSS <= 2 GiB.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness import in_child, parser, peak_rss_mib, run, timer

FIELDS = (
    "JobID,JobIDRaw,Cluster,Partition,QOS,Account,User,UID,Submit,Eligible,Start,End,Elapsed,Timelimit,"
    "State,ExitCode,NNodes,NCPUS,ReqMem,AllocTRES,NodeList,Flags,Priority,Reason,JobName"
).split(",")


def _hms(s: int) -> str:
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def generate(path: Path, rows: int, delim: str, seed: int = 1) -> int:
    """Write about `rows` lines (jobs + steps) to `path`; returns the number of data lines written."""
    rnd = random.Random(seed)
    t0 = datetime(2024, 1, 1)
    fmt = "%Y-%m-%dT%H:%M:%S"
    parts = ["gpu", "cpu", "debug"]
    accounts = [f"acct{i}" for i in range(40)]
    states = (
        ["COMPLETED"] * 70 + ["FAILED"] * 12 + ["CANCELLED by 1001"] * 8 + ["TIMEOUT"] * 5 + ["RUNNING"] * 5
    )
    n = 0
    job = 1000
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(delim.join(FIELDS) + "\n")
        while n < rows:
            job += 1
            submit = t0 + timedelta(seconds=job * 3)
            start = submit + timedelta(seconds=rnd.randint(0, 7200))
            elapsed = rnd.randint(10, 86400)
            end = start + timedelta(seconds=elapsed)
            gpus = rnd.choice([0, 0, 1, 2, 4, 8])
            nodes = 1 if gpus < 8 else rnd.choice([1, 2, 4])
            cpus = max(gpus, 1) * 8 * nodes
            tres = f"billing={cpus},cpu={cpus},mem={cpus * 4000}M,node={nodes}"
            if gpus:
                tres = (
                    f"billing={cpus},cpu={cpus},gres/gpu:h100={gpus * nodes},gres/gpu={gpus * nodes},"
                    f"mem={cpus * 4000}M,node={nodes}"
                )
            name = f"job{job % 5000}" if rnd.random() > 0.001 else f"bad{delim}name{delim}x"
            state = rnd.choice(states)
            array = rnd.random() < 0.1
            job_id = f"{job}_{job % 7}" if array else str(job)
            nl = f"gpu[{job % 100:03d}-{job % 100 + nodes - 1:03d}]" if nodes > 1 else f"gpu{job % 100:03d}"
            attempts = 2 if rnd.random() < 0.02 else 1
            for a in range(attempts):
                sub = submit + timedelta(seconds=a * 100000)
                st = "REQUEUED" if a < attempts - 1 else state
                endt = "Unknown" if st == "RUNNING" else (end + timedelta(seconds=a * 100000)).strftime(fmt)
                rec = [
                    job_id,
                    str(job),
                    "bench",
                    rnd.choice(parts),
                    "normal",
                    rnd.choice(accounts),
                    f"user{job % 300}",
                    str(1000 + job % 300),
                    sub.strftime(fmt),
                    sub.strftime(fmt),
                    (start + timedelta(seconds=a * 100000)).strftime(fmt),
                    endt,
                    _hms(elapsed),
                    "2-00:00:00",
                    st,
                    "0:0" if st == "COMPLETED" else "1:0",
                    str(nodes),
                    str(cpus),
                    f"{cpus * 4000}M",
                    tres,
                    nl,
                    rnd.choice(["SchedMain", "SchedBackfill"]),
                    str(rnd.randint(1000, 200000)),
                    "None",
                    name,
                ]
                fh.write(delim.join(rec) + "\n")
                n += 1
                if rnd.random() < 0.43:
                    step = [
                        f"{job_id}.batch",
                        f"{job}.batch",
                        "bench",
                        "",
                        "",
                        rec[5],
                        "",
                        "",
                        rec[10],
                        rec[10],
                        rec[10],
                        endt,
                        _hms(elapsed),
                        "",
                        st,
                        rec[15],
                        "1",
                        str(cpus),
                        "",
                        tres,
                        nl,
                        "",
                        "",
                        "",
                        "batch",
                    ]
                    fh.write(delim.join(step) + "\n")
                    n += 1
    return n


def child(args: argparse.Namespace) -> dict[str, Any]:
    db = Path(args.db)
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    with timer() as t:
        if args.child == "duckdb_read_csv":
            import duckdb

            con = duckdb.connect(str(db))
            con.execute(
                "CREATE TABLE t AS SELECT * FROM read_csv(?, delim=?, header=true, all_varchar=true, "
                "quote='', escape='', null_padding=true, ignore_errors=true)",
                [args.file, args.delimiter],
            )
            rows = con.execute("SELECT count(*) FROM t").fetchone()[0]
            con.close()
        elif args.child == "parse":
            from zoneinfo import ZoneInfo

            from slurmscope.collectors.sacct import parse

            data = Path(args.file).read_bytes()
            rows = parse(data, cluster="bench", tz=ZoneInfo("UTC"), delimiter=args.delimiter).rows
        else:
            from slurmscope.collectors.ingest import ingest_files

            from slurmscope.config import load_config
            from slurmscope.db import connect

            con = connect(db)
            res = ingest_files(
                con, load_config(None, env={}), "sacct", [Path(args.file)], delimiter=args.delimiter
            )
            rows = res[0].rows
            con.close()
    return {**t, "rows": rows, "peak_rss_mib": peak_rss_mib()}


STEPS = ("duckdb_read_csv", "parse", "ingest")


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.child:
        return child(args)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        file = work / "sacct.txt"
        lines = generate(file, args.rows, args.delimiter)
        size = file.stat().st_size / 2**20
        print(f"generated {lines} data lines, {size:.0f} MiB, delimiter {args.delimiter!r}", file=sys.stderr)
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):
            for kind in STEPS:
                r = in_child(
                    "benchmarks.ingest",
                    *("--child", kind, "--file", str(file), "--delimiter", args.delimiter),
                    *("--db", str(work / f"{kind}.duckdb")),
                )
                if "error" in r:
                    raise SystemExit(f"{kind}: {r['error']}")
                old = best.get(kind)
                if old is None or r["wall_s"] < old["wall_s"]:
                    best[kind] = {**r, "peak_rss_mib": max(r["peak_rss_mib"], (old or r)["peak_rss_mib"])}
    base = best["duckdb_read_csv"]
    for r in best.values():
        r["x_duckdb_wall"] = round(r["wall_s"] / base["wall_s"], 2)
        r["x_duckdb_cpu"] = round(r["cpu_s"] / base["cpu_s"], 2)
    return {"lines": lines, "file_mib": round(size), "best_of": args.repeat, "steps": best}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--delimiter", default="|")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--child", choices=STEPS, help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    run("ingest", ap, body)


if __name__ == "__main__":
    main()
