"""Fair-share computed by slurmscope against Slurm's own `sshare` on the live Slurm 22.05 test bed.

The jobs come from what `slurmscope collect` stored (sacct parser, billing column included), collected once
more after the reference was taken, as the next scheduled collect would: the outage job ran while slurmdbd
was down, and the collect that first sees it again may store it COMPLETED without its End yet; the
reference is `sshare -a -l -P` once a PriorityCalcPeriod has passed after the last job ended (after the
`fairshare` phase), and the decay settings are read from `scontrol show config` of the same cluster.
Expected values are Slurm's, never ours.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from slurmscope.collectors import slurm_config as config_collector
from slurmscope.collectors import sshare as sshare_collector
from slurmscope.pipelines import fairshare as fs
from slurmscope.pipelines.fairshare.rows import sshare_agreement
from slurmscope.pipelines.fairshare.schema import inputs
from slurmscope.pipelines.runner import EPOCH, Window, pipeline_params

from slurmscope.config import load_config

pytestmark = pytest.mark.slurm


def _settled(shares: pl.DataFrame) -> bool:
    """True once a PriorityCalcPeriod has run since the last usage change: sshare's own EffectvUsage equals
    its RawUsage over the parent's (RawUsage is printed truncated: allow 2 units over the parent's)."""
    parents = shares.filter(pl.col("user") == "").select(
        pl.col("account").alias("parent"), pl.col("raw_usage").alias("parent_raw")
    )
    rows = (
        shares.filter(pl.col("account") != "root")
        .with_columns(
            parent=pl.when(pl.col("user") != "").then(pl.col("account")).otherwise(pl.col("parent"))
        )
        .join(parents, on="parent")
        .filter(pl.col("parent_raw") > 0)
    )
    off = (pl.col("effectv_usage") - pl.col("raw_usage") / pl.col("parent_raw")).abs()
    return rows.filter(off > 2.0 / pl.col("parent_raw") + 1e-4).height == 0


def test_sshare_raw_and_effective_usage_and_fair_tree_factor(slurmbed, fairshare):
    bed = slurmbed
    utc = ZoneInfo("UTC")
    cluster = bed.cluster.CLUSTER
    # sshare adds usage when a job ends but recomputes EffectvUsage and FairShare only every
    # PriorityCalcPeriod (60 s on the bed): wait for Slurm's own numbers to agree with each other.
    deadline = time.monotonic() + 150
    while True:
        at = datetime.now(UTC)
        shares = sshare_collector.parse(
            bed.slurm("sshare", "-a", "-l", "-P").encode(), cluster=cluster, snapshot_time=at, tz=utc
        )
        if _settled(shares.tables["shares"]) or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert shares.quarantine.height == 0
    config = config_collector.parse(
        bed.slurm("scontrol", "show", "config").encode(), cluster=cluster, snapshot_time=at, tz=utc
    )
    # Every job had ended before `at` (the fixture waited for that), so this collect adds no usage after
    # the reference; it only completes records accounting had not finished receiving.
    recollect = bed.collect("sacct")
    assert recollect.returncode == 0, recollect.stderr
    cols = [
        "cluster",
        "account",
        "user",
        "submit_time",
        "start_time",
        "end_time",
        "billing",
        "cpus",
        "gpus",
        "state",
    ]
    rows = bed.query(
        f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM jobs WHERE cluster = ?", [cluster]
    )
    jobs = pl.DataFrame(rows, schema=inputs({})["jobs"].collect_schema(), orient="row").lazy()
    frames = {
        "jobs": jobs,
        "shares": shares.tables["shares"].lazy(),
        "slurm_config": config.tables["slurm_config"].lazy(),
    }
    mart = fs.compute(frames, pipeline_params(load_config(env={}), Window(EPOCH, at, True)))["mart_fairshare"]
    agree = sshare_agreement(mart).collect()
    assert agree.height == shares.tables["shares"].height
    assert agree.filter(pl.col("sshare_raw_usage") > 0).height >= 5, (
        "the workload charged several associations"
    )
    bad = agree.filter(~(pl.col("raw_ok") & pl.col("effectv_ok") & pl.col("fairshare_ok")))
    with pl.Config(tbl_rows=50, tbl_cols=20, tbl_width_chars=250):
        assert bad.height == 0, str(
            agree.select(
                "account",
                "user",
                "raw_usage",
                "sshare_raw_usage",
                "effectv_usage",
                "sshare_effectv_usage",
                "fairshare",
                "sshare_fairshare",
                "raw_ok",
                "effectv_ok",
                "fairshare_ok",
            )
        )
