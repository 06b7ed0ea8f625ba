"""CPU and memory efficiency per job attempt, with the arithmetic of Slurm's own `seff`.

Users and support staff already read `seff JOBID`; a second definition of "CPU efficiency" would give them
two numbers for one job. So every figure here is seff's, computed from the sacct fields seff reads
through the Perl API. Source: Slurm 22.05.8, contribs/seff/seff (seff 2.1, Princeton University Research
Computing; https://github.com/SchedMD/slurm/blob/slurm-22-05-8-1/contribs/seff/seff):

- CPU used: the sum over ALL steps of the attempt (batch, extern, numbered; no state filter) of the whole
  seconds of TotalCPU (user + system), plus the sum of their sub-second parts rounded half up
  (`$tot_cpu_sec + int(($tot_cpu_usec / 1000000) + 0.5)`).
- Cores: the allocated CPUs (NCPUS, `alloc_cpus`), 1 when 0 or unknown; nodes likewise (NNodes).
- CPU efficiency = CPU used / (Elapsed x cores), 0 when that product is 0.
- Memory used: the step with the largest per-task peak (MaxRSS, `tres_usage_in_max` mem; the first in
  Slurm's step order wins a tie, as seff's strict `<`), times that step's NTasks ("estimated maximum"
  when it is not 1).
- Memory requested: seff 22.05 takes `req_mem`, the per-CPU or per-node amount, times the allocated CPUs
  or nodes. sacct before 21.08 prints it as ReqMem with a `c` / `n` suffix (so: amount x NCPUS or x NNodes,
  `req_mem_bytes`); from 21.08 on ReqMem is the request's total (Slurm NEWS, 21.08.0rc1: "Changed ReqMem
  field in sacct to match memory from ReqTRES") and neither sacct nor the v0.0.38 JSON says per what. The
  memory slurmctld allocated (AllocTRES mem) is that same product, summed per node by select/cons_tres,
  so it stands in for seff's figure; checked against seff itself on the test bed
  (tests/fixtures/slurm-22.05/seff/), and what seff itself divides by from Slurm 23.02 on (SchedMD commit
  9e87bcd, bug 15569).
- Memory efficiency = memory used / memory requested, 0 when the request is 0.

Where sacct gives less than the Perl API: TotalCPU keeps milliseconds below an hour and none above, so a
sum of sub-seconds near .5 may round the other way, and a step past an hour may read up to a second low.
Where slurmscope has nothing to read (no step lines, no MaxRSS) the figure is NULL, where seff prints 0.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl
from slurmscope.pipelines.calendar import UTC_DT, local_day
from slurmscope.pipelines.common import with_columns_of
from slurmscope.pipelines.params import Params

NAME = "cpu_mem_efficiency"
MART_TABLES: dict[str, str | None] = {"mart_job_cpu_mem_efficiency": "window_end"}
# a row is one attempt and its own steps, so a full rebuild may run as consecutive windows
# (pipelines.full_slice_days): one window over a 10M-attempt cluster held 3.2 GiB more than the slices
SLICEABLE = True

INPUTS: dict[str, str] = {
    # Attempts that started and were running at or after the window start, and their steps.
    "jobs": """
        SELECT cluster, job_id, job_id_raw, attempt, submit_time, account, "user", "partition", state,
               start_time, end_time, elapsed_seconds, nodes, cpus, req_mem_bytes, req_mem_scope, alloc_mem_bytes
        FROM jobs
        WHERE cluster = $cluster AND start_time IS NOT NULL AND start_time < $end
          AND (end_time IS NULL OR end_time >= $start)""",
    "job_steps": """
        SELECT s.cluster, s.job_id_raw, s.job_submit_time, s.step_id, s.ntasks, s.total_cpu_seconds,
               s.max_rss_bytes
        FROM job_steps s JOIN jobs j
          ON s.cluster = j.cluster AND s.job_id_raw = j.job_id_raw AND s.job_submit_time = j.submit_time
        WHERE j.cluster = $cluster AND j.start_time IS NOT NULL AND j.start_time < $end
          AND (j.end_time IS NULL OR j.end_time >= $start)""",
}

SCHEMA = {
    "job_id": pl.String,
    "job_id_raw": pl.Int64,
    "attempt": pl.Int32,
    "submit_time": UTC_DT,
    "account": pl.String,
    "user": pl.String,
    "partition": pl.String,
    "state": pl.String,
    "start_time": UTC_DT,
    "end_time": UTC_DT,
    "end_day": pl.Date,
    "nodes": pl.Int32,
    "cpus": pl.Int32,
    "elapsed_seconds": pl.Int64,
    "steps": pl.Int32,
    "cpu_used_seconds": pl.Int64,
    "core_walltime_seconds": pl.Int64,
    "cpu_efficiency": pl.Float64,
    "mem_used_bytes": pl.Int64,
    "mem_tasks": pl.Int32,
    "req_mem_bytes": pl.Int64,
    "req_mem_rule": pl.String,
    "memory_efficiency": pl.Float64,
    "window_end": UTC_DT,
}
# Slurm's ids of the named steps (slurm.h, SLURM_INTERACTIVE_STEP .. SLURM_EXTERN_CONT): slurmdbd returns
# steps in its step table's key order, so numbered steps come first, then interactive, batch, extern.
STEP_ORDER = {"interactive": 0xFFFFFFFA, "batch": 0xFFFFFFFB, "extern": 0xFFFFFFFC}


def step_order(step_id: pl.Expr) -> pl.Expr:
    """The position of a step in seff's loop: its numeric id (then het component), named steps by their id."""
    parts = step_id.str.split_exact("+", 1)
    num = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    het = parts.struct.field("field_1").cast(pl.Int64, strict=False).fill_null(0)
    named = step_id.replace_strict(list(STEP_ORDER), list(STEP_ORDER.values()), default=2**40)
    return pl.coalesce(num, named.cast(pl.Int64)) * 1024 + het


def step_usage(steps: pl.LazyFrame) -> pl.LazyFrame:
    """Per attempt: seff's CPU seconds and its memory (the step with the largest MaxRSS x its NTasks)."""
    keys = ["cluster", "job_id_raw", "job_submit_time"]
    t = pl.col("total_cpu_seconds")
    whole = t.floor()
    millis = ((t - whole) * 1000).round(0)
    cpu = steps.group_by(keys).agg(
        pl.len().cast(pl.Int32).alias("steps"),
        pl.when(t.is_not_null().any())
        .then(whole.sum().cast(pl.Int64) + ((millis.sum().cast(pl.Int64) + 500) // 1000))
        .alias("cpu_used_seconds"),
    )
    first_largest = ["max_rss_bytes", "_order"]
    mem = (
        steps.filter(pl.col("max_rss_bytes").is_not_null())
        .with_columns(_order=step_order(pl.col("step_id")))
        .group_by(keys)
        .agg(
            pl.col("max_rss_bytes").max().alias("_peak"),
            pl.col("max_rss_bytes", "ntasks").sort_by(first_largest, descending=[True, False]).first(),
        )
        .select(
            *keys,
            # seff keeps 0 tasks when no step's peak exceeds 0 (`if ($mem < $lmem)` never holds)
            pl.when(pl.col("_peak") > 0)
            .then(pl.col("ntasks"))
            .otherwise(0)
            .cast(pl.Int32)
            .alias("mem_tasks"),
            (pl.col("max_rss_bytes") * pl.col("ntasks")).cast(pl.Int64).alias("mem_used_bytes"),
        )
    )
    return cpu.join(mem, on=keys, how="left")


def seff(jobs: pl.LazyFrame, steps: pl.LazyFrame, tz: str, now_lit: pl.Expr) -> pl.LazyFrame:
    """seff's figures for each started attempt of `jobs` (module docstring), with its `steps`."""
    usage = step_usage(steps).rename({"job_submit_time": "submit_time"})
    cores = pl.when(pl.col("cpus") > 0).then(pl.col("cpus")).otherwise(1).cast(pl.Int32)
    nodes = pl.when(pl.col("nodes") > 0).then(pl.col("nodes")).otherwise(1).cast(pl.Int32)
    scope = pl.col("req_mem_scope")
    req_mem = (
        pl.when(scope.is_in(["cpu", "node"]))
        .then(pl.col("req_mem_bytes"))
        .when(pl.col("alloc_mem_bytes").is_not_null())
        .then(pl.col("alloc_mem_bytes"))
        .otherwise(pl.col("req_mem_bytes"))
    )
    rule = (
        pl.when(scope == "cpu")
        .then(pl.lit("per_cpu"))
        .when(scope == "node")
        .then(pl.lit("per_node"))
        .when(pl.col("alloc_mem_bytes").is_not_null())
        .then(pl.lit("alloc_tres"))
        .when(pl.col("req_mem_bytes").is_not_null())
        .then(pl.lit("req_mem"))
    )
    out = (
        jobs.filter(pl.col("start_time").is_not_null())
        .join(usage, on=["cluster", "job_id_raw", "submit_time"], how="left")
        .with_columns(
            cpus=cores,
            nodes=nodes,
            elapsed_seconds=pl.col("elapsed_seconds").fill_null(0),
            steps=pl.col("steps").fill_null(0),
            req_mem_bytes=req_mem,
            req_mem_rule=rule,
            end_day=local_day(pl.col("end_time"), tz),
            window_end=pl.coalesce(pl.col("end_time"), now_lit),
        )
        .with_columns(core_walltime_seconds=pl.col("elapsed_seconds") * pl.col("cpus"))
    )
    return out.with_columns(
        cpu_efficiency=pl.when(pl.col("cpu_used_seconds").is_null())
        .then(None)
        .when(pl.col("core_walltime_seconds") > 0)
        .then(pl.col("cpu_used_seconds") / pl.col("core_walltime_seconds"))
        .otherwise(0.0),
        memory_efficiency=pl.when(pl.col("mem_used_bytes").is_null() | pl.col("req_mem_bytes").is_null())
        .then(None)
        .when(pl.col("req_mem_bytes") > 0)
        .then(pl.col("mem_used_bytes") / pl.col("req_mem_bytes"))
        .otherwise(0.0),
    )


def efficiency_rows(
    jobs: pl.LazyFrame | None, steps: pl.LazyFrame | None, tz: str, now: datetime
) -> pl.LazyFrame:
    """The mart's rows for the attempts of `jobs` (the INPUTS columns; missing ones read as NULL)."""
    jobs = with_columns_of(jobs, _job_input())
    steps = with_columns_of(steps, _step_input())
    return seff(jobs, steps, tz, pl.lit(now, dtype=UTC_DT)).select(list(SCHEMA)).cast(SCHEMA)


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    """mart_job_cpu_mem_efficiency: one row per started attempt running at or after the window start."""
    rows = efficiency_rows(frames.get("jobs"), frames.get("job_steps"), params.tz, params.now)
    return {"mart_job_cpu_mem_efficiency": rows}


def _job_input() -> dict[str, pl.DataType]:
    return {
        "cluster": pl.String,
        "job_id": pl.String,
        "job_id_raw": pl.Int64,
        "attempt": pl.Int32,
        "submit_time": UTC_DT,
        "account": pl.String,
        "user": pl.String,
        "partition": pl.String,
        "state": pl.String,
        "start_time": UTC_DT,
        "end_time": UTC_DT,
        "elapsed_seconds": pl.Int64,
        "nodes": pl.Int32,
        "cpus": pl.Int32,
        "req_mem_bytes": pl.Int64,
        "req_mem_scope": pl.String,
        "alloc_mem_bytes": pl.Int64,
    }


def _step_input() -> dict[str, pl.DataType]:
    return {
        "cluster": pl.String,
        "job_id_raw": pl.Int64,
        "job_submit_time": UTC_DT,
        "step_id": pl.String,
        "ntasks": pl.Int32,
        "total_cpu_seconds": pl.Float64,
        "max_rss_bytes": pl.Int64,
    }
