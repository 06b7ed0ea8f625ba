"""Fair-share: Slurm's decayed usage, NormShares, EffectvUsage and FairShare factor per association.

sshare only shows the present, and only from the day it was first collected. Recomputing Slurm's numbers
from the job history extends fair-share back in time, answers "why is my priority low" for any past day,
and, where sshare snapshots exist, checks that our reading of the accounting matches what Slurm used: both
are emitted side by side (source 'computed' and 'sshare') at the same as_of instants.

The formulas follow Slurm's priority/multifactor plugin (https://slurm.schedmd.com/priority_multifactor.html),
Fair Tree (https://slurm.schedmd.com/fair_tree.html) and the classic algorithm
(https://slurm.schedmd.com/classic_fair_share.html); docs/pipelines.md lists every formula.
"""

from __future__ import annotations

import polars as pl
from slurmscope.pipelines.fairshare.days import day_tables, history_days
from slurmscope.pipelines.fairshare.decay import cluster_settings, settings
from slurmscope.pipelines.fairshare.drift import drift_rows
from slurmscope.pipelines.fairshare.rows import computed_rows, sshare_rows
from slurmscope.pipelines.fairshare.schema import DRIFT_SCHEMA, FAIRSHARE_SCHEMA, inputs, reuse
from slurmscope.pipelines.params import Params

NAME = "fairshare"
MART_TABLES: dict[str, str | None] = {
    "mart_fairshare": "as_of",
    "mart_fairshare_drift": "day",
    # The pipeline's own state: day-level charge per association. Decayed usage depends on the whole
    # history (back to the last reset); keeping its day sums lets an incremental run read only the attempts
    # that overlap its window and carry the stored days forward (docs/pipelines.md, "Incremental runs").
    "mart_fairshare_daily": "day",
    # Its attempt counts per association, start day and submit day: drift's demand counts an attempt on its
    # submit day once it has started, so keyed by start day the stored rows stay complete like the charges.
    "mart_fairshare_submits": "day",
}
INPUTS: dict[str, str] = {
    # Attempts charged inside the window: those still running or ending after its start. A full run's
    # start is 1970, so it reads every attempt. Late records are inside the window because the runner
    # starts it at the earliest attempt ingested since the last run. The state only matters without an End
    # (charged_until); leaving it out elsewhere keeps a 10M-row read smaller.
    "jobs": """
        SELECT cluster, account, "user", submit_time, start_time, end_time, billing, cpus, gpus,
               CASE WHEN end_time IS NULL THEN state END AS state
        FROM jobs WHERE cluster = $cluster AND start_time IS NOT NULL
          AND (end_time IS NULL OR end_time > $start OR start_time >= $start)""",
    # The stored days before the window (none in a full run); the days from the window on are recomputed.
    "fairshare_daily": """
        SELECT cluster, day, account, "user", charge, raw
        FROM mart_fairshare_daily WHERE cluster = $cluster AND day < $start_date""",
    # The stored attempt counts of attempts started before the window (none in a full run).
    "fairshare_submits": """
        SELECT cluster, day, submit_day, account, "user", submitted
        FROM mart_fairshare_submits WHERE cluster = $cluster AND day < $start_date""",
    # Only the last sshare snapshot of each day is used (as tree and as the compared record); before the
    # window only the tree in force at its start (the last snapshot before it) matters.
    "shares": """
        SELECT cluster, snapshot_time, account, "user", parent, raw_shares, norm_shares, raw_usage,
               effectv_usage, level_fs, fairshare
        FROM shares WHERE cluster = $cluster
          AND snapshot_time >= coalesce((SELECT max(snapshot_time) FROM shares
                                         WHERE cluster = $cluster AND snapshot_time < $start),
                                        '-infinity'::TIMESTAMPTZ)
        QUALIFY snapshot_time = max(snapshot_time)
            OVER (PARTITION BY CAST(timezone($tz, snapshot_time) AS DATE))""",
    "slurm_config": """
        SELECT cluster, snapshot_time, key, value FROM slurm_config
        WHERE cluster = $cluster
          AND key IN ('PriorityDecayHalfLife', 'PriorityUsageResetPeriod', 'PriorityFlags')""",
}

WIDEN_SQL = """
    SELECT CASE WHEN EXISTS (SELECT 1 FROM mart_fairshare_daily WHERE cluster = $cluster)
                 AND EXISTS (SELECT 1 FROM mart_fairshare_submits WHERE cluster = $cluster)
                THEN (SELECT CAST(timezone($tz, max(run_at)) AS DATE) FROM pipeline_runs
                      WHERE cluster = $cluster AND pipeline = 'fairshare' AND status = 'ok')
                ELSE DATE '1970-01-01' END"""
"""The stored days are complete before the day of the last good run (that day was charged up to its `now`):
an incremental window (`--since` included) starts at that day at the latest. Without stored days (a
database migrated from before mart_fairshare_daily) it starts in 1970, i.e. recomputes everything."""


def compute(frames: dict[str, pl.LazyFrame], params: Params) -> dict[str, pl.LazyFrame]:
    """mart_fairshare (computed and sshare rows per association and as_of), mart_fairshare_drift, and the
    day table mart_fairshare_daily the next incremental run starts from.

    With `since` and the stored `fairshare_daily` / `fairshare_submits` rows of the days before the window,
    as the runner reads them, `jobs` need only hold the attempts charged or started from the window's first
    day on; otherwise `jobs` is the whole history.
    """
    s = settings(params)
    f = inputs(frames)
    stored = frames.get("fairshare_daily") is not None and frames.get("fairshare_submits") is not None
    cs = reuse(cluster_settings(f, s))
    used, submits, own_days = day_tables(f, cs, s, stored)
    days = reuse(history_days(used, submits))
    computed = computed_rows(f, cs, own_days, days, s)
    fairshare = pl.concat(
        [computed.select(list(FAIRSHARE_SCHEMA)), sshare_rows(f, s).select(list(FAIRSHARE_SCHEMA))]
    ).cast(FAIRSHARE_SCHEMA)
    drift = drift_rows(f, days, s).select(list(DRIFT_SCHEMA)).cast(DRIFT_SCHEMA)
    return {
        "mart_fairshare": fairshare,
        "mart_fairshare_drift": drift,
        "mart_fairshare_daily": used.filter(pl.col("raw") > 0),
        "mart_fairshare_submits": submits.filter(pl.col("day").is_not_null()),
    }
