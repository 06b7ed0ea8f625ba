"""sacct ingest speed and memory against DuckDB's own CSV reader on the same bytes, clean and messy.

    .venv/bin/python -m benchmarks.ingest --rows 1000000 [--delimiter '|'] [--repeat 3] [--slurm2sql]

Generates two deterministic `sacct --parsable2` files in the live field list (collectors.sacct.LIVE_FIELDS,
37 fields): jobs with their `.batch` and `.extern` steps and some `srun` steps `.0`, each step with its usage
(TotalCPU, UserCPU, SystemCPU, MaxRSS, AveRSS in bytes as `--noconvert` prints them, TRESUsageInTot/Max with
cpu, energy, fs/disk, mem, pages, vmem and, on GPU jobs, gres/gpumem and gres/gpuutil), 10 % array tasks,
2 % requeued attempts each with its own steps, typed and untyped GPU TRES, a few comments:

  clean   no bad line
  messy   the same jobs, 0.1 % of job names holding the delimiter (the live list has three free-text fields,
          so those lines are quarantined by the per-line path)

and runs, interleaved in each repeat, each step in a fresh process (its own peak RSS):

  duckdb_read_csv  CREATE TABLE AS SELECT * FROM read_csv(path, all_varchar=true, quote='', escape='',
                   header=true, delim=<the file's>) into a fresh file database: the reference, a reader that
                   neither types nor recovers lines. On the messy file plain read_csv refuses the extra columns;
                   the record says so and the reference is then the fastest relaxation that reads it
                   (`strict_mode=false`, then `ignore_errors=true`), each timed and kept in the record
  ingest           slurmscope.collectors.ingest.ingest_files into a fresh file database (read in slices,
                   parse, upsert into the keyed jobs/job_steps tables, attempt recompute, run record; one
                   transaction)
  parse            (--parse) slurmscope.collectors.sacct.parse of the whole file, no database

With --slurm2sql, the same jobs are also written with the field list and `;|;` delimiter that slurm2sql
(PyPI, Aalto's sacct-to-SQLite importer) asks sacct for, and both slurm2sql (its own `slurm2sql()` with
`raw_sacct`, INSERT OR REPLACE as for an update) and slurmscope ingest that file.

Keeps the lowest wall and the lowest CPU seconds of --repeat runs per step and file, and the highest peak
RSS; and, per file, each repeat's ingest against the reference run just before it (`x_duckdb_wall_pairs`,
their medians `x_duckdb_wall_median` and `x_duckdb_cpu_median`): on a shared machine whose speed drifts
between repeats, the ratio of two minimums can pair a fast moment with a slow one. Goal (issue 14 item
10): ingest <= 2x duckdb_read_csv on both files, peak RSS <= 1 GiB for 1M lines.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmscope.collectors.sacct import LIVE_FIELDS

from benchmarks.harness import in_child, parser, peak_rss_mib, run, timer

LIVE = LIVE_FIELDS.split(",")
S2S_DELIM = ";|;"
T0 = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp())


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _hms(s: int) -> str:
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _cpu(us: int) -> str:
    """A CPU time as sacct prints it (src/sacct/print.c `_elapsed_time`): MM:SS.mmm below an hour."""
    s, us = divmod(us, 1_000_000)
    if s >= 3600:
        return _hms(s)
    return f"{s // 60:02d}:{s % 60:02d}.{us // 1000:03d}"


def _usage(rnd: random.Random, cpu_s: int, rss: int, gpus: int, gpu_util: int) -> str:
    """TRESUsageIn* as sacct --noconvert prints it: names in order, cpu as a time, the rest in base units."""
    gres = f"gres/gpumem={rnd.randint(1, 80) * 2**30},gres/gpuutil={gpu_util}," if gpus else ""
    return (
        f"cpu={_hms(cpu_s)},energy=0,fs/disk={rnd.randint(0, 2**34)},{gres}mem={rss},"
        f"pages={rnd.randint(0, 40)},vmem={rss + rnd.randint(2**20, 2**30)}"
    )


def records(rows: int, delim: str, messy: bool, seed: int = 1, requeue: bool = True):
    """About `rows` sacct records (dicts by field name): each job's allocation line, then its steps."""
    rnd = random.Random(seed)
    parts = ["gpu", "cpu", "debug"]
    accounts = [f"acct{i}" for i in range(40)]
    states = (
        ["COMPLETED"] * 70 + ["FAILED"] * 12 + ["CANCELLED by 1001"] * 8 + ["TIMEOUT"] * 5 + ["RUNNING"] * 5
    )
    n = 0
    job = 1000
    while n < rows:
        job += 1
        submit = T0 + job * 3
        wait = rnd.randint(0, 7200)
        elapsed = rnd.randint(10, 86400)
        gpus = rnd.choice([0, 0, 1, 2, 4, 8])
        nodes = 1 if gpus < 8 else rnd.choice([1, 2, 4])
        cpus = max(gpus, 1) * 8 * nodes
        mem_mb = cpus * 4000
        gres = f"gres/gpu:h100={gpus * nodes},gres/gpu={gpus * nodes}," if gpus else ""
        tres = f"billing={cpus},cpu={cpus},{gres}mem={mem_mb}M,node={nodes}"
        req_tres = f"billing={cpus},cpu={cpus},{'gres/gpu=' + str(gpus * nodes) + ',' if gpus else ''}mem={mem_mb}M,node={nodes}"
        name = f"job{job % 5000}"
        if messy and rnd.random() < 0.001:
            name = f"bad{delim}name{delim}x"
        comment = rnd.choice(["", "", "", "", "", "", "", "", "", "nightly eval", "ckpt=/scratch/run7"])
        state = rnd.choice(states)
        array = rnd.random() < 0.1
        job_id = f"{job}_{job % 7}" if array else str(job)
        nl = f"gpu[{job % 100:03d}-{job % 100 + nodes - 1:03d}]" if nodes > 1 else f"gpu{job % 100:03d}"
        attempts = 2 if requeue and rnd.random() < 0.02 else 1
        for a in range(attempts):
            shift = a * 100000
            st = "REQUEUED" if a < attempts - 1 else state
            start = submit + wait + shift
            end = "Unknown" if st == "RUNNING" else _iso(start + elapsed)
            util = rnd.randint(0, 100 * max(gpus, 1))
            batch_cpu = rnd.randint(0, elapsed * cpus) * 1_000_000 + rnd.randint(0, 999_999)
            srun = rnd.random() < 0.3
            srun_cpu = rnd.randint(0, elapsed * cpus) * 1_000_000 + rnd.randint(0, 999_999) if srun else 0
            total = batch_cpu + srun_cpu + 5_000
            rec = {
                "JobID": job_id,
                "JobIDRaw": str(job),
                "Cluster": "bench",
                "Partition": rnd.choice(parts),
                "QOS": "normal",
                "Account": rnd.choice(accounts),
                "User": f"user{job % 300}",
                "UID": str(1000 + job % 300),
                "Submit": _iso(submit + shift),
                "Eligible": _iso(submit + shift),
                "Start": _iso(start),
                "End": end,
                "Elapsed": _hms(elapsed),
                "Timelimit": "2-00:00:00",
                "State": st,
                "ExitCode": "0:0" if st == "COMPLETED" else "1:0",
                "NNodes": str(nodes),
                "NCPUS": str(cpus),
                "ReqMem": f"{mem_mb}M",
                "AllocTRES": tres,
                "NodeList": nl,
                "Flags": rnd.choice(["SchedMain", "SchedBackfill"]),
                "Priority": str(rnd.randint(1000, 200000)),
                "Reason": "None",
                "TotalCPU": _cpu(total),
                "UserCPU": _cpu(total * 9 // 10),
                "SystemCPU": _cpu(total - total * 9 // 10),
                "ReqTRES": req_tres,
                "ConsumedEnergyRaw": "0",
                "Comment": comment,
                "JobName": name,
            }
            yield rec
            n += 1
            step_base = {
                "Cluster": "bench",
                "Account": rec["Account"],
                "Submit": rec["Start"],
                "Eligible": rec["Start"],
                "Start": rec["Start"],
                "End": end,
                "Elapsed": rec["Elapsed"],
                "State": "CANCELLED" if st in ("REQUEUED", "TIMEOUT") else st,
                "ExitCode": rec["ExitCode"],
                "ConsumedEnergyRaw": "0",
            }
            steps = [("batch", batch_cpu, 1, 1, f"cpu={cpus // nodes},{gres}mem={mem_mb // nodes}M,node=1")]
            steps.append(("extern", 1000 + rnd.randint(0, 5000), nodes, nodes, tres.split(",", 1)[1]))
            if srun:
                steps.append(("0", srun_cpu, nodes, nodes * max(gpus, 1), tres.split(",", 1)[1]))
            for step, cpu_us, nn, tasks, alloc in steps:
                g = gpus if step != "extern" else 0
                rss = (
                    rnd.randint(2**20, mem_mb * 2**20 // nodes)
                    if step != "extern"
                    else rnd.randint(2**19, 2**21)
                )
                yield {
                    **step_base,
                    "JobID": f"{job_id}.{step}",
                    "JobIDRaw": f"{job}.{step}",
                    "NNodes": str(nn),
                    "NCPUS": str(cpus if step != "batch" else cpus // nodes),
                    "AllocTRES": alloc,
                    "NodeList": nl
                    if nn > 1
                    else nl.split("[")[0] + (f"{job % 100:03d}" if "[" in nl else ""),
                    "NTasks": str(tasks),
                    "TotalCPU": _cpu(cpu_us),
                    "UserCPU": _cpu(cpu_us * 9 // 10),
                    "SystemCPU": _cpu(cpu_us - cpu_us * 9 // 10),
                    "MaxRSS": str(rss),
                    "AveRSS": str(rss * 3 // 4),
                    "TRESUsageInTot": _usage(rnd, cpu_us // 1_000_000, rss * tasks, g, util),
                    "TRESUsageInMax": _usage(rnd, cpu_us // 1_000_000 // tasks, rss, g, min(util, 100)),
                    "JobName": {"batch": "batch", "extern": "extern"}.get(step, "python3"),
                }
                n += 1


def slurm2sql_fields() -> list[str]:
    """The field list slurm2sql asks sacct for (its COLUMNS not starting with `_`, then its extras)."""
    import slurm2sql

    return [c for c in list(slurm2sql.COLUMNS) + slurm2sql.COLUMNS_EXTRA if not c.startswith("_")]


def _slurm2sql_extra(r: dict[str, str]) -> dict[str, str]:
    """Values for the fields slurm2sql asks for beyond the live list, consistent with the record."""
    step = "." in r["JobID"]
    out = {
        "Group": "" if step else "users",
        "SubmitLine": "" if step else "sbatch train.sh",
        "ReqNodes": r["NNodes"],
        "AllocNodes": r["NNodes"],
        "ReqCPUS": r["NCPUS"],
        "AllocCPUS": r["NCPUS"],
        "CPUTime": r["Elapsed"],
    }
    if step:
        out.update(
            MinCPU=r["TotalCPU"],
            MinCPUNode=r["NodeList"].split("[")[0],
            MinCPUTask="0",
            MaxRSSNode=r["NodeList"].split("[")[0],
            MaxRSSTask="0",
            MaxPages="0",
            MaxVMSize=r["MaxRSS"],
            AveDiskRead="1024",
            AveDiskWrite="2048",
            MaxDiskRead="1024",
            MaxDiskWrite="2048",
            TRESUsageInAve=r["TRESUsageInMax"],
            TRESUsageOutTot="energy=0,fs/disk=2048",
        )
    return out


def generate(path: Path, rows: int, delim: str, kind: str, seed: int = 1) -> int:
    """Write about `rows` lines (header + jobs + steps) of `kind` clean/messy/slurm2sql; returns data lines."""
    if kind == "slurm2sql":
        fields, delim = slurm2sql_fields(), S2S_DELIM
    else:
        fields = LIVE
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(delim.join(fields) + "\n")
        buf = []
        # slurm2sql's sacct call has no --duplicates: one line per job id, so no requeued attempts there
        for r in records(rows, delim, messy=kind == "messy", seed=seed, requeue=kind != "slurm2sql"):
            if kind == "slurm2sql":
                r = {**r, **_slurm2sql_extra(r)}
            buf.append(delim.join([r.get(f, "") for f in fields]))
            n += 1
            if len(buf) >= 10000:
                fh.write("\n".join(buf) + "\n")
                buf = []
        if buf:
            fh.write("\n".join(buf) + "\n")
    return n


BASELINE = "CREATE TABLE t AS SELECT * FROM read_csv(?, delim=?, header=true, all_varchar=true, quote='', escape=''{})"
# Relaxations of DuckDB's reader tried in order on a file plain read_csv refuses: the first that reads it is
# the reference (the least handicap); the old benchmark's null_padding + ignore_errors is timed for the record.
RELAXED = ("", ", strict_mode=false", ", ignore_errors=true", ", null_padding=true, ignore_errors=true")


def child(args: argparse.Namespace) -> dict[str, Any]:
    db = Path(args.db)
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    out: dict[str, Any] = {}
    with timer() as t:
        if args.child == "duckdb_read_csv":
            import duckdb

            con = duckdb.connect(str(db))
            try:
                con.execute(BASELINE.format(args.options or ""), [args.file, args.delimiter])
                out["rows"] = con.execute("SELECT count(*) FROM t").fetchone()[0]
            except duckdb.Error as exc:
                out["refused"] = str(exc).splitlines()[0][:300]
            con.close()
        elif args.child == "parse":
            from zoneinfo import ZoneInfo

            from slurmscope.collectors.sacct import parse

            data = Path(args.file).read_bytes()
            parsed = parse(data, cluster="bench", tz=ZoneInfo("UTC"), delimiter=args.delimiter)
            out |= {"rows": parsed.rows, "quarantined": parsed.quarantine.height}
        elif args.child == "slurm2sql":
            import logging
            import sqlite3

            import slurm2sql

            logging.getLogger("slurm2sql").setLevel(logging.CRITICAL)  # it logs every refused line
            con = sqlite3.connect(str(db))
            with open(args.file, encoding="utf-8", errors="replace") as fh:
                errors = slurm2sql.slurm2sql(con, raw_sacct=fh, update=True)
            out |= {"rows": con.execute("SELECT count(*) FROM slurm").fetchone()[0], "quarantined": errors}
            con.close()
        else:
            from slurmscope.collectors.ingest import ingest_files

            from slurmscope.config import load_config
            from slurmscope.db import connect

            con = connect(db)
            res = ingest_files(
                con, load_config(None, env={}), "sacct", [Path(args.file)], delimiter=args.delimiter
            )
            out |= {"rows": res[0].rows, "quarantined": res[0].quarantined, "status": res[0].status}
            con.close()
    return {**t, **out, "peak_rss_mib": peak_rss_mib()}


def _step(kind: str, file: Path, delim: str, db: Path, options: str = "") -> dict[str, Any]:
    argv = ["--child", kind, "--file", str(file), "--delimiter", delim, "--db", str(db)]
    if options:
        argv += ["--options", options]
    r = in_child("benchmarks.ingest", *argv)
    if "error" in r:
        raise SystemExit(f"{kind} on {file.name}: {r['error']}")
    db.unlink(missing_ok=True)
    return r


def _keep(best: dict[str, Any], key: str, r: dict[str, Any]) -> None:
    """Lowest wall and lowest CPU seconds over the repeats (each its own figure), highest peak RSS."""
    old = best.get(key)
    if old is None:
        best[key] = {**r, "runs": 1}
        return
    old["runs"] += 1
    old["wall_s"] = min(old["wall_s"], r["wall_s"])
    old["cpu_s"] = min(old["cpu_s"], r["cpu_s"])
    old["peak_rss_mib"] = max(old["peak_rss_mib"], r["peak_rss_mib"])


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.child:
        return child(args)
    kinds = ["clean", "messy"] + (["slurm2sql"] if args.slurm2sql else [])
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        files: dict[str, Path] = {}
        meta: dict[str, Any] = {}
        for kind in kinds:
            cached = (
                args.workdir / f"sacct_{kind}_{args.rows}_{args.delimiter.encode().hex()}.txt"
                if args.keep
                else None
            )
            files[kind] = cached or work / f"sacct_{kind}.txt"
            if cached is None or not cached.exists():
                lines = generate(files[kind], args.rows, args.delimiter, kind)
            else:
                lines = sum(1 for _ in open(cached, "rb")) - 1
            meta[kind] = {"lines": lines, "file_mib": round(files[kind].stat().st_size / 2**20, 1)}
            print(f"{kind}: {lines} data lines, {meta[kind]['file_mib']} MiB", file=sys.stderr)
        delim = {k: (S2S_DELIM if k == "slurm2sql" else args.delimiter) for k in kinds}
        # the reference's options per file: the first relaxation DuckDB accepts (tried once, each recorded)
        reference: dict[str, str] = {}
        refusals: dict[str, dict[str, Any]] = {}
        for kind in kinds:
            for opt in RELAXED:
                r = _step("duckdb_read_csv", files[kind], delim[kind], work / "probe.duckdb", opt)
                refusals.setdefault(kind, {})[opt or "plain"] = r.get("refused") or {
                    "rows": r["rows"],
                    "wall_s": r["wall_s"],
                    "cpu_s": r["cpu_s"],
                }
                if "refused" not in r:
                    reference[kind] = opt
                    break
            if kind == "messy" and reference.get(kind) != RELAXED[-1]:
                r = _step("duckdb_read_csv", files[kind], delim[kind], work / "probe.duckdb", RELAXED[-1])
                refusals[kind]["null_padding=true, ignore_errors=true (the old reference)"] = {
                    "rows": r.get("rows"),
                    "wall_s": r["wall_s"],
                    "cpu_s": r["cpu_s"],
                }
        best: dict[str, dict[str, Any]] = {}
        pairs: dict[str, list[tuple[float, float]]] = {}
        steps = ["duckdb_read_csv", "ingest"] + (["parse"] if args.parse else [])
        for _ in range(args.repeat):
            for kind in kinds:
                this: dict[str, dict[str, Any]] = {}
                for step in steps + (["slurm2sql"] if kind == "slurm2sql" else []):
                    if step == "parse" and kind == "slurm2sql":
                        continue
                    opt = reference[kind] if step == "duckdb_read_csv" else ""
                    r = _step(step, files[kind], delim[kind], work / f"{step}.duckdb", opt)
                    _keep(best, f"{kind}/{step}", r)
                    this[step] = r
                ref, ours = this["duckdb_read_csv"], this["ingest"]
                pairs.setdefault(kind, []).append(
                    (ours["wall_s"] / ref["wall_s"], ours["cpu_s"] / ref["cpu_s"])
                )
    for key, r in best.items():
        kind = key.split("/")[0]
        base = best[f"{kind}/duckdb_read_csv"]
        r["x_duckdb_wall"] = round(r["wall_s"] / base["wall_s"], 2)
        r["x_duckdb_cpu"] = round(r["cpu_s"] / base["cpu_s"], 2)
        if key.endswith("/ingest"):
            # each repeat's ingest against the reference run just before it: the machine's speed drifts by
            # more than the goal's margin between repeats, less within a pair
            walls, cpus = zip(*pairs[kind], strict=True)
            r["x_duckdb_wall_pairs"] = [round(x, 2) for x in walls]
            r["x_duckdb_wall_median"] = round(statistics.median(walls), 2)
            r["x_duckdb_cpu_median"] = round(statistics.median(cpus), 2)
    if args.slurm2sql:
        s2s, ours = best["slurm2sql/slurm2sql"], best["slurm2sql/ingest"]
        meta["slurm2sql"]["x_slurmscope_wall"] = round(s2s["wall_s"] / ours["wall_s"], 1)
        meta["slurm2sql"]["x_slurmscope_cpu"] = round(s2s["cpu_s"] / ours["cpu_s"], 1)
    return {
        "files": meta,
        "reference_options": {k: v.strip(", ") or "plain" for k, v in reference.items()},
        "reference_probe": refusals,
        "repeats": args.repeat,
        "steps": best,
    }


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--delimiter", default="|")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parse", action="store_true", help="also time sacct.parse of the whole file alone")
    ap.add_argument("--slurm2sql", action="store_true", help="also run slurm2sql (pip install slurm2sql)")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument(
        "--keep", action="store_true", help="keep the generated files in --workdir and reuse them"
    )
    ap.add_argument(
        "--child", choices=("duckdb_read_csv", "parse", "ingest", "slurm2sql"), help=argparse.SUPPRESS
    )
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    ap.add_argument("--options", help=argparse.SUPPRESS)
    run("ingest", ap, body)


if __name__ == "__main__":
    main()
