"""`slurmscope job JOBID`: what one job did with what it held, per attempt, in the manner of Princeton's jobstats.

Why it reads raw rows and not a mart: the GPU mart (mart_job_efficiency) keeps one row per attempt, and the
question here is per GPU ("2 of 8 GPUs idle"). So the command reads only this job's rows (its attempts,
steps, GPU mapping intervals and the samples of those GPUs) and applies the pipelines' own functions to them:
the GPU-to-attempt attribution and minute join of pipelines/efficiency.py, and seff's arithmetic of
pipelines/cpu_mem_efficiency.py. The figures are therefore the marts' figures, and the command works
before the pipelines have run. It opens the database read-only, like `query` and `report`.

The verdict follows jobstats' notes (https://github.com/PrincetonUniversity/jobstats, config.py at commit
dfc9aa0, 2026-06-13): a GPU is idle when its mean utilisation is below drift.idle_util_percent (the
idle rule of mart_idle_gpus_daily; jobstats counts a GPU unused at 0 %), GPU utilisation is low below
GPU_UTIL_RED = 15 %, CPU efficiency below CPU_UTIL_RED = 65 %, CPU memory used below MIN_MEMORY_USAGE
= 70 % of the request.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import duckdb
import polars as pl

from slurmscope.config import Config
from slurmscope.pipelines.common import (
    MIG_INVENTORY_COLUMNS,
    MIG_INVENTORY_SQL,
    UTC_DT,
    attribute_intervals,
    exploded_mig,
    with_columns_of,
    with_slice_fractions,
)
from slurmscope.pipelines.cpu_mem_efficiency import efficiency_rows
from slurmscope.pipelines.efficiency import GPU_JOBS_SCHEMA, gpu_minutes, mig_efficiency

GPU_UTIL_LOW_PERCENT = 15.0
CPU_EFFICIENCY_LOW = 0.65
MEMORY_EFFICIENCY_LOW = 0.70


class JobNotFound(LookupError):
    """No attempt of the job in the database for the cluster; the message names both."""


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> pl.DataFrame:
    return con.sql(sql, params=params).pl()


def _utc(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(
        pl.col(c).dt.convert_time_zone("UTC") for c, t in df.schema.items() if isinstance(t, pl.Datetime)
    )


def job_report(con: duckdb.DuckDBPyConnection, cfg: Config, job_id: str, now: datetime) -> dict[str, Any]:
    """Every attempt of `job_id` (as Slurm prints it, or its JobIDRaw) with its CPU, memory and GPU figures."""
    cluster = cfg.cluster
    jobs = _utc(
        _frame(
            con,
            """SELECT * FROM jobs WHERE cluster = ? AND (job_id = ? OR (CAST(job_id_raw AS VARCHAR) = ?
                   AND NOT EXISTS (SELECT 1 FROM jobs WHERE cluster = ? AND job_id = ?)))
               ORDER BY submit_time""",
            [cluster, job_id, job_id, cluster, job_id],
        )
    )
    if jobs.height == 0:
        raise JobNotFound(f"job {job_id} not found in cluster {cluster}")
    raw = int(jobs["job_id_raw"][0])
    steps = _utc(
        _frame(
            con,
            "SELECT * FROM job_steps WHERE cluster = ? AND job_id_raw = ? ORDER BY job_submit_time, step_id",
            [cluster, raw],
        )
    )
    tz = cfg.get("billing", "timezone")
    seff = efficiency_rows(jobs.lazy(), steps.lazy(), tz, now).collect()
    gpus = _gpu_rows(con, cfg, jobs, raw, now)
    slices = _mig_rows(con, cfg, jobs, raw, now)
    # SM activity is shown only where the node agents read GPM for this job's GPUs (activity_source 'gpm');
    # elsewhere NVML's GPU_UTIL is all there is and the report says so.
    sm = "sm_active_mean" if gpus.height and gpus["sm_active_mean"].is_not_null().any() else None
    attempts = []
    for job in jobs.iter_rows(named=True):
        eff = seff.filter(pl.col("submit_time") == job["submit_time"])
        eff_row = eff.row(0, named=True) if eff.height else None
        mine = gpus.filter(pl.col("submit_time") == job["submit_time"]).sort("node", "gpu_index", "gpu_uuid")
        attempt = {
            "attempt": job["attempt"],
            "job_id": job["job_id"],
            "state": job["state"],
            "submit_time": job["submit_time"],
            "start_time": job["start_time"],
            "end_time": job["end_time"],
            "elapsed_seconds": job["elapsed_seconds"],
            "nodes": job["nodes"],
            "node_list": job["node_list"],
            "cpus": job["cpus"],
            "gpus_allocated": job["gpus"],
            "mig_slices_allocated": job["mig_slices"],
            "gpu_type": job["gpu_type"],
            "cpu": _cpu(eff_row),
            "memory": _memory(eff_row),
            "utilisation_source": sm or "util_gpu_mean",
            "gpus": [_gpu(g, sm is not None) for g in mine.iter_rows(named=True)],
            "mig_slices": [
                _slice(m)
                for m in slices.filter(pl.col("submit_time") == job["submit_time"])
                .sort("node", "mig_instance")
                .iter_rows(named=True)
            ],
        }
        attempt["verdict"] = verdict(attempt, float(cfg.get("drift", "idle_util_percent")))
        attempts.append(attempt)
    first = jobs.row(0, named=True)
    return {
        "cluster": cluster,
        "job_id": job_id,
        "job_id_raw": raw,
        "name": first["name"],
        "user": first["user"],
        "account": first["account"],
        "partition": first["partition"],
        "sm_activity": sm is not None,
        "attempts": attempts,
    }


def _gpu_rows(
    con: duckdb.DuckDBPyConnection, cfg: Config, jobs: pl.DataFrame, raw: int, now: datetime
) -> pl.DataFrame:
    """Per attempt and GPU: utilisation, SM activity, memory, power and energy over the minutes it held it
    (read through gpu_minutes: minutes older than retention's boundary come back from their hourly rollups)."""
    cluster = cfg.cluster
    mapping = _utc(
        _frame(
            con,
            """SELECT cluster, node, gpu_uuid, job_id, interval_start, interval_end FROM gpu_jobs
               WHERE cluster = ? AND coalesce(mig_instance, '') = ''
                 AND TRY_CAST(regexp_extract(job_id, '^([0-9]+)', 1) AS BIGINT) = ?""",
            [cluster, raw],
        )
    )
    samples = _utc(
        _frame(
            con,
            """WITH g AS (SELECT DISTINCT node, gpu_uuid, min(interval_start) OVER w AS lo,
                             max(coalesce(interval_end, ?)) OVER w AS hi
                      FROM gpu_jobs WHERE cluster = ? AND coalesce(mig_instance, '') = ''
                        AND TRY_CAST(regexp_extract(job_id, '^([0-9]+)', 1) AS BIGINT) = ?
                      WINDOW w AS (PARTITION BY node, gpu_uuid))
                SELECT s.cluster, s.node, s.gpu_uuid, s.minute, s.gpu_index, s.util_gpu_mean, s.util_gpu_max,
                       s.mem_used_max_bytes, s.mem_total_bytes, s.power_mean_watts, s.energy_joules,
                       s.sm_active_mean, s.activity_source,
                       CASE WHEN s.activity_source = 'gpm' THEN s.sm_active_mean END AS sm_active
                FROM gpu_minutes(?, (SELECT min(lo) FROM g) - INTERVAL 1 MINUTE, (SELECT max(hi) FROM g)) s
                JOIN g ON s.node = g.node AND s.gpu_uuid = g.gpu_uuid
                WHERE s.minute >= g.lo - INTERVAL 1 MINUTE AND s.minute < g.hi""",
            [now, cluster, raw, cluster],
        )
    )
    gj = with_columns_of(
        mapping.lazy(),
        {
            "cluster": pl.String,
            "node": pl.String,
            "gpu_uuid": pl.String,
            "job_id": pl.String,
            "interval_start": UTC_DT,
            "interval_end": UTC_DT,
        },
    )
    intervals = attribute_intervals(gj, jobs.lazy(), now)
    minutes = gpu_minutes(intervals, samples.lazy(), float(cfg.get("drift", "idle_util_percent")))
    sampled = pl.col("held").filter(pl.col("sampled"))

    def weighted(col: str) -> pl.Expr:
        ok = pl.col("sampled") & pl.col(col).is_not_null()
        held = pl.col("held").filter(ok).sum()
        return pl.when(held > 0).then((pl.col(col) * pl.col("held")).filter(ok).sum() / held)

    return (
        minutes.filter(pl.col("submit_time").is_not_null())
        .group_by("submit_time", "node", "gpu_uuid")
        .agg(
            pl.col("gpu_index").drop_nulls().first(),
            pl.col("held").sum().alias("held_seconds"),
            sampled.sum().alias("sampled_seconds"),
            weighted("util_gpu_mean").alias("util_mean"),
            pl.col("util_gpu_max").max().alias("util_max"),
            weighted("sm_active").alias("sm_active_mean"),
            pl.col("mem_used_max_bytes").max().alias("mem_used_max_bytes"),
            pl.col("mem_total_bytes").max().alias("mem_total_bytes"),
            weighted("power_mean_watts").alias("power_mean_watts"),
            pl.col("energy").sum().alias("energy_joules"),
            pl.col("energy").count().alias("_energy_n"),
        )
        .with_columns(energy_joules=pl.when(pl.col("_energy_n") > 0).then(pl.col("energy_joules")))
        .collect()
    )


def _mig_rows(
    con: duckdb.DuckDBPyConnection, cfg: Config, jobs: pl.DataFrame, raw: int, now: datetime
) -> pl.DataFrame:
    """Per attempt and MIG instance it held: the rows of mart_mig_efficiency, computed by the efficiency
    pipeline's own functions from this job's rows (the slice's share of its GPU from the agents' inventory or
    the sacct record, GPU-seconds, and samples of the instance itself where any exist)."""
    cluster = cfg.cluster
    mapping = _utc(
        _frame(
            con,
            """SELECT cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance FROM gpu_jobs
               WHERE cluster = ? AND coalesce(mig_instance, '') <> ''
                 AND TRY_CAST(regexp_extract(job_id, '^([0-9]+)', 1) AS BIGINT) = ?""",
            [cluster, raw],
        )
    )
    if mapping.height == 0:
        return pl.DataFrame(schema={"submit_time": UTC_DT, "node": pl.String, "mig_instance": pl.String})
    # samples of the instances themselves over the span held; gpu_minutes keeps the minutes of each interval
    samples = _utc(
        _frame(
            con,
            """SELECT cluster, node, gpu_uuid, minute, util_gpu_mean, util_gpu_max, mem_used_max_bytes,
                      energy_joules, sm_active_mean, activity_source
               FROM gpu_minutes(?, ?::TIMESTAMPTZ - INTERVAL 1 MINUTE, ?::TIMESTAMPTZ)
               WHERE list_contains(?, gpu_uuid)""",
            [
                cluster,
                mapping["interval_start"].min(),
                mapping["interval_end"].fill_null(now).max(),
                mapping["mig_instance"].unique().to_list(),
            ],
        )
    )
    inventory = con.sql(MIG_INVENTORY_SQL, params={"cluster": cluster}).pl().lazy()
    js = jobs.lazy().with_columns(
        pl.when(pl.col("mig_slices") > 0).then(pl.col("alloc_tres")).alias("mig_tres")
    )
    sacct_units = (
        exploded_mig(js, "mig_tres", cfg.get("billing", "mig_models"))
        .group_by("job_id_raw", "submit_time")
        .agg(pl.col("mig_units").sum())
    )
    intervals = with_slice_fractions(
        attribute_intervals(with_columns_of(mapping.lazy(), GPU_JOBS_SCHEMA), jobs.lazy(), now),
        with_columns_of(inventory, dict(MIG_INVENTORY_COLUMNS)),
        sacct_units,
    )
    minutes = gpu_minutes(intervals, samples.lazy(), float(cfg.get("drift", "idle_util_percent")))
    return mig_efficiency(minutes).collect()


def _slice(m: dict) -> dict[str, Any]:
    return {
        "node": m["node"],
        "gpu_uuid": m["gpu_uuid"],
        "mig_instance": m["mig_instance"],
        "gpu_model": m["gpu_model"],
        "mig_profile": m["mig_profile"],
        "gpu_fraction": m["gpu_fraction"],
        "fraction_source": m["fraction_source"],
        "held_seconds": m["held_seconds"],
        "gpu_seconds": m["gpu_seconds"],
        "activity": m["activity"],
        "util_mean_percent": m["util_mean"],
    }


def _cpu(e: dict | None) -> dict[str, Any]:
    if e is None:
        return {"efficiency": None}
    return {
        "used_seconds": e["cpu_used_seconds"],
        "core_walltime_seconds": e["core_walltime_seconds"],
        "efficiency": e["cpu_efficiency"],
    }


def _memory(e: dict | None) -> dict[str, Any]:
    if e is None:
        return {"efficiency": None}
    return {
        "used_bytes": e["mem_used_bytes"],
        "tasks": e["mem_tasks"],
        "requested_bytes": e["req_mem_bytes"],
        "request_rule": e["req_mem_rule"],
        "efficiency": e["memory_efficiency"],
    }


def _gpu(g: dict, has_sm: bool) -> dict[str, Any]:
    return {
        "node": g["node"],
        "gpu_index": g["gpu_index"],
        "gpu_uuid": g["gpu_uuid"],
        "held_seconds": g["held_seconds"],
        "sampled_seconds": g["sampled_seconds"],
        "util_mean_percent": g["util_mean"],
        "util_max_percent": g["util_max"],
        "sm_active_mean_percent": g["sm_active_mean"] if has_sm else None,
        "mem_used_max_bytes": g["mem_used_max_bytes"],
        "mem_total_bytes": g["mem_total_bytes"],
        "power_mean_watts": g["power_mean_watts"],
        "energy_joules": g["energy_joules"],
    }


def verdict(attempt: dict[str, Any], idle_percent: float) -> str:
    """One line: what jobstats would flag (module docstring), or that nothing is."""
    notes = []
    gpus = [g for g in attempt["gpus"] if g["sampled_seconds"]]
    if attempt["state"] == "PENDING":
        return "pending: nothing ran yet"
    if gpus:
        idle = [g for g in gpus if (g["util_mean_percent"] or 0.0) < idle_percent]
        if idle:
            notes.append(f"{len(idle)} of {len(attempt['gpus'])} GPUs idle")
        busy = [g["util_mean_percent"] for g in gpus if g not in idle]
        mean = sum(busy) / len(busy) if busy else None
        if mean is not None and mean < GPU_UTIL_LOW_PERCENT:
            notes.append(f"GPU utilisation {mean:.0f} % on the used GPUs: low")
    cpu = attempt["cpu"]["efficiency"]
    if cpu is not None and cpu < CPU_EFFICIENCY_LOW:
        notes.append(f"CPU efficiency {cpu * 100:.0f} %: over-allocated CPUs")
    mem = attempt["memory"]["efficiency"]
    if mem is not None and mem < MEMORY_EFFICIENCY_LOW:
        notes.append(f"memory efficiency {mem * 100:.0f} %: more memory requested than used")
    return "; ".join(notes) if notes else "no problem found"


# ------------------------------------------------------------------------------------------- formats


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    d, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{d}-{text}" if d else text


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**30:.2f} GiB"


def _pct(v: float | None, scale: float = 1.0) -> str:
    return "-" if v is None else f"{v * scale:.1f} %"


def _time(t: datetime | None) -> str:
    return "-" if t is None else t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def render_text(report: dict[str, Any]) -> str:
    out = [
        f"Job {report['job_id']} ({report['name'] or '-'}) on cluster {report['cluster']}: user {report['user']},"
        f" account {report['account']}, partition {report['partition']}"
    ]
    for a in report["attempts"]:
        held = (
            f"{a['mig_slices_allocated']} MIG slice(s)"
            if a["mig_slices_allocated"] and not a["gpus_allocated"]
            else f"{a['gpus_allocated'] or 0} GPUs"
        )
        gres = held + (f" ({a['gpu_type']})" if a["gpu_type"] else "")
        out.append("")
        out.append(
            f"Attempt {a['attempt']} ({a['job_id']}): {a['state']}, {_time(a['start_time'])} to"
            f" {_time(a['end_time'])} UTC, {_hms(a['elapsed_seconds'])}; {a['nodes']} node(s) {a['node_list'] or '-'},"
            f" {a['cpus']} CPUs, {gres}"
        )
        cpu, mem = a["cpu"], a["memory"]
        if cpu["efficiency"] is None:
            out.append("  CPU:    no step usage recorded")
        else:
            out.append(
                f"  CPU:    {_pct(cpu['efficiency'], 100)} of {_hms(cpu['core_walltime_seconds'])} core-walltime"
                f" ({_hms(cpu['used_seconds'])} used, as seff computes it)"
            )
        if mem["efficiency"] is None:
            out.append("  Memory: no peak recorded (seff would print 0.00 MB)")
        else:
            est = " (estimated maximum)" if mem["tasks"] != 1 else ""
            out.append(
                f"  Memory: {_gib(mem['used_bytes'])} used{est} of {_gib(mem['requested_bytes'])} requested:"
                f" {_pct(mem['efficiency'], 100)}"
            )
        if a["gpus"]:
            sm = report["sm_activity"]
            out.append(
                "  GPU  node          util mean  util max"
                + ("  SM active" if sm else "")
                + "  memory used / total     power mean  energy"
            )
            for g in a["gpus"]:
                mem_text = f"{_gib(g['mem_used_max_bytes'])} / {_gib(g['mem_total_bytes'])}"
                power = "-" if g["power_mean_watts"] is None else f"{g['power_mean_watts']:.0f} W"
                energy = "-" if g["energy_joules"] is None else f"{g['energy_joules'] / 1e6:.3f} MJ"
                out.append(
                    f"  {g['gpu_index'] if g['gpu_index'] is not None else '?':<4} {g['node']:<13}"
                    f" {_pct(g['util_mean_percent']):>9}  {_pct(g['util_max_percent']):>8}"
                    + (f"  {_pct(g['sm_active_mean_percent']):>9}" if sm else "")
                    + f"  {mem_text:<22}  {power:>10}  {energy}"
                )
            if not sm:
                out.append(
                    "  SM activity: not read (no GPM readings from the node agents); utilisation is NVML GPU_UTIL"
                )
        elif a["gpus_allocated"] and not a["mig_slices"]:
            out.append(
                f"  GPUs: {a['gpus_allocated']} allocated, none mapped by the node agents (no samples)"
            )
        if a["mig_slices"]:
            out.append(
                "  MIG slice  node          instance                  profile    share of GPU   GPU-time  activity"
            )
            for m in a["mig_slices"]:
                share = (
                    "-" if m["gpu_fraction"] is None else f"{m['gpu_fraction']:.3f} ({m['fraction_source']})"
                )
                gpu_time = _hms(m["gpu_seconds"]) if m["gpu_seconds"] is not None else "-"
                activity = m["activity"] + (
                    f" {_pct(m['util_mean_percent'])}" if m["util_mean_percent"] is not None else ""
                )
                out.append(
                    f"  {'':<10} {m['node']:<13} {m['mig_instance']:<25} {m['mig_profile'] or '-':<10}"
                    f" {share:<14} {gpu_time:>8}  {activity}"
                )
            if all(m["activity"] == "unavailable" for m in a["mig_slices"]):
                out.append("  MIG activity: NVML reports no utilisation per MIG device; none is inferred")
        out.append(f"  Verdict: {a['verdict']}")
    return "\n".join(out) + "\n"


def render_json(report: dict[str, Any]) -> str:
    def default(v: Any) -> Any:
        if isinstance(v, datetime):
            return v.astimezone(UTC).isoformat()
        raise TypeError(type(v).__name__)

    return json.dumps(report, default=default, indent=1) + "\n"
