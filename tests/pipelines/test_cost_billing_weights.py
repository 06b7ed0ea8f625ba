"""charge_by = "billing_tres" with Slurm's own TRESBillingWeights (scontrol show partition), on the test bed's
real capture: the jobs' billing TRES from sacct over the weights the partitions collector stored, and the
config's billing.tres_billing_weights winning when set. Charges worked out by hand in the comments."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from slurmscope.collectors.ingest import ingest_files
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config
from tests.paths import FIXTURES

B = FIXTURES / "slurm-22.05-budgets"
CAPTURED = "2026-12-04T15:55:32Z"
NOW = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)

# sacct_budgets.txt: six jobs, each 91 s (15:51:51-15:53:22), AllocTRES billing= as Slurm computed it:
#   1 gpu   pretraining 8 GPUs billing=20    2 gpu   vision 2 GPUs billing=5    3 gpu pretraining 4 GPUs billing=10
#   4 gpu   infra       1 GPU  billing=2     5 debug pretraining 2 GPUs billing=2  6 cpu (no GPU: not charged)
# The gpu partition's captured weights are CPU=0.25,Mem=0.0G,GRES/gpu=2.0; debug and cpu have none.


def charged(con) -> dict[str, tuple[float, float, float]]:
    rows = con.execute(
        "SELECT account, sum(gpu_seconds), sum(billed_gpu_seconds), sum(cost_usd) FROM mart_cost_daily"
        " GROUP BY account ORDER BY account"
    ).fetchall()
    return {a: (g, b, round(c, 6)) for a, g, b, c in rows}


def load(con, cfg, partitions_at: str = CAPTURED) -> None:
    ingest_files(con, cfg, "sacct", [B / "sacct_budgets.txt"])
    ingest_files(con, cfg, "partitions", [B / "partitions_budgets.txt"], at=partitions_at)


def config(**billing):
    base = {"rates": {"h100": 3.6}, "charge_by": "billing_tres"}  # $3.60/GPU-h: $0.001 per GPU-second
    return load_config(env={}).with_overrides(cluster={"name": "slurmbed"}, billing={**base, **billing})


def test_collected_weights_turn_billing_into_gpu_equivalents(con):
    cfg = config()
    load(con, cfg)
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    # gpu: billing / GRES/gpu weight 2.0 -> job 1 10, job 2 2.5, job 3 5, job 4 1 GPU-equivalents (each >= its
    # GPUs); debug has no weights -> job 5 pays its 2 GPUs.
    # pretraining (10 + 5 + 2) x 91 = 1547 billed GPU-s of (8 + 4 + 2) x 91 = 1274 GPU-s -> $1.547
    # vision 2.5 x 91 = 227.5 of 182 -> $0.2275; infra 1 x 91 = 91 of 91 -> $0.091
    assert charged(con) == {
        "infra": (91.0, 91.0, 0.091),
        "pretraining": (1274.0, 1547.0, 1.547),
        "vision": (182.0, 227.5, 0.2275),
    }


def test_the_config_s_weights_win_as_a_whole(con):
    cfg = config(
        tres_billing_weights={"gpu": "CPU=0.25,Mem=0.0G,GRES/gpu=4.0", "debug": "CPU=1.0,GRES/gpu=0.5"}
    )
    load(con, cfg)
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    # gpu at 4.0: job 1 20/4 = 5 < 8 GPUs -> 8; job 2 1.25 -> 2; job 3 2.5 -> 4; job 4 0.5 -> 1.
    # debug at 0.5 (the config's, Slurm has none): job 5 2/0.5 = 4 GPU-equivalents.
    # pretraining (8 + 4 + 4) x 91 = 1456; vision 2 x 91 = 182; infra 91.
    assert charged(con) == {
        "infra": (91.0, 91.0, 0.091),
        "pretraining": (1274.0, 1456.0, 1.456),
        "vision": (182.0, 182.0, 0.182),
    }


@pytest.mark.parametrize(
    ("charge_by", "partitions_at"),
    [("gpu", CAPTURED), ("billing_tres", "2026-12-04T16:30:00Z")],
    ids=["charged-by-gpu", "weights-collected-after-now"],
)
def test_gpus_are_charged_without_usable_weights(con, charge_by, partitions_at):
    cfg = config(charge_by=charge_by)
    load(con, cfg, partitions_at)
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    assert charged(con) == {
        "infra": (91.0, 91.0, 0.091),
        "pretraining": (1274.0, 1274.0, 1.274),
        "vision": (182.0, 182.0, 0.182),
    }
