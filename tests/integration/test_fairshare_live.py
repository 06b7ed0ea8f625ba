"""Fair-share computed by slurmscope against Slurm's own `sshare` on the live Slurm 22.05 test bed.

The jobs come from what `slurmscope collect` stored during the run (sacct parser, billing column included);
the reference is `sshare -a -l -P` taken one PriorityCalcPeriod after the last job ended, and the decay
settings are read from `scontrol show config` of the same cluster. Expected values are Slurm's, never ours.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from slurmscope.collectors import config as config_collector
from slurmscope.collectors import sshare as sshare_collector
from slurmscope.pipelines import fairshare as fs

pytestmark = pytest.mark.slurm


def test_sshare_raw_and_effective_usage_and_fair_tree_factor(slurmbed, fairshare):
    bed = slurmbed
    at = datetime.fromtimestamp(fairshare.captured_at, UTC)
    utc = ZoneInfo("UTC")
    cluster = bed.cluster.CLUSTER
    shares = sshare_collector.parse(fairshare.sshare_text.encode(), cluster=cluster, snapshot_time=at, tz=utc)
    config = config_collector.parse(bed.slurm("scontrol", "show", "config").encode(), cluster=cluster,
                                    snapshot_time=at, tz=utc)
    assert shares.quarantine.height == 0
    cols = ["cluster", "account", "user", "submit_time", "start_time", "end_time", "billing", "cpus", "gpus"]
    rows = bed.query(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM jobs WHERE cluster = ?",
                     [cluster])
    jobs = pl.DataFrame(rows, schema=fs._frames({})["jobs"].collect_schema(), orient="row").lazy()
    frames = {"jobs": jobs, "shares": shares.tables["shares"].lazy(),
              "slurm_config": config.tables["slurm_config"].lazy()}
    mart = fs.compute(frames, {"now": at, "tz": "UTC", "config": {}})["mart_fairshare"]
    agree = fs.sshare_agreement(mart).collect()
    assert agree.height == shares.tables["shares"].height
    assert agree.filter(pl.col("sshare_raw_usage") > 0).height >= 5, "the workload charged several associations"
    bad = agree.filter(~(pl.col("raw_ok") & pl.col("effectv_ok") & pl.col("fairshare_ok")))
    assert bad.height == 0, bad.select("account", "user", "raw_usage", "sshare_raw_usage", "effectv_usage",
                                       "sshare_effectv_usage", "fairshare", "sshare_fairshare")
