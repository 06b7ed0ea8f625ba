"""MIG slices in capacity and charges, on a hand-made cluster read through the real sacct and sinfo parsers:
every expected dollar is worked out in the comments (docs/pipelines.md#mig carries the same example).

One hour, partition gpu, A100 at $7/GPU-h (so a 1g slice, 1/7 of an A100, costs $1/h):
- node m1: one A100 in MIG mode cut into 3g.20gb + 2g.10gb + 2 x 1g.5gb = 3 + 2 + 1 + 1 = 7 slices = 1 GPU
  (NVIDIA MIG user guide, A100-SXM4-40GB profiles); job 1 (x) holds the 3g slice, job 2 (y) one 1g slice;
  the 2g and the other 1g are idle.
- node w1: 2 whole A100s; job 3 (x) holds one, the other is idle.
Capacity 3 GPU-h = $21: allocated 1 + 3/7 + 1/7 = 11/7 GPU-h = $11, idle 1 + 3/7 = 10/7 GPU-h = $10.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from slurmscope.collectors.ingest import ingest_files
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import ConfigError, load_config
from tests.paths import FIXTURES

NOW = datetime(2026, 2, 3, 1, tzinfo=UTC)
SACCT_HEADER = (
    "JobID|JobIDRaw|Cluster|Partition|QOS|Account|User|Submit|Eligible|Start|End|Elapsed|Timelimit|State|"
    "ExitCode|NNodes|NCPUS|ReqMem|AllocTRES|NodeList|JobName"
)
T = "2026-02-03T00:00:00"


def sacct_line(job: int, account: str, user: str, cpus: int, gpu: str, billing: float, node: str) -> str:
    # AllocTRES as Slurm prints it for a typed GRES: the typed entry and the untyped gres/gpu count
    tres = f"billing={billing:g},cpu={cpus},gres/gpu:{gpu}=1,gres/gpu=1,mem=16G,node=1"
    return (
        f"{job}|{job}|default|gpu|normal|{account}|{user}|{T}|{T}|{T}|2026-02-03T01:00:00|01:00:00|02:00:00|"
        f"COMPLETED|0:0|1|{cpus}|16G|{tres}|{node}|j{job}"
    )


SINFO_FORMAT = "NodeList:|,Partition:|,StateLong:|,Gres:|,GresUsed:"
SINFO = (
    "m1|gpu|mixed|gpu:a100_3g.20gb:1,gpu:a100_2g.10gb:1,gpu:a100_1g.5gb:2"
    "|gpu:a100_3g.20gb:1(IDX:0),gpu:a100_2g.10gb:0(IDX:N/A),gpu:a100_1g.5gb:1(IDX:2)\n"
    "w1|gpu|mixed|gpu:a100:2(S:0-1)|gpu:a100:1(IDX:0)\n"
)


def cluster(con, tmp_path: Path, billing=(9, 8, 11)) -> None:
    """The cluster of the module docstring. Billing TRES by default as Slurm computes it with
    TRESBillingWeights "CPU=0.5,GRES/gpu=7.0": job 1 4 CPUs x 0.5 + 1 gres/gpu x 7 = 9, job 2 1 + 7 = 8,
    job 3 4 + 7 = 11."""
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(
        "\n".join(
            [
                SACCT_HEADER,
                sacct_line(1, "a", "x", 4, "a100_3g.20gb", billing[0], "m1"),
                sacct_line(2, "b", "y", 2, "a100_1g.5gb", billing[1], "m1"),
                sacct_line(3, "a", "x", 8, "a100", billing[2], "w1"),
            ]
        )
        + "\n"
    )
    sinfo = tmp_path / "sinfo.txt"
    sinfo.write_text(SINFO)
    cfg = load_config(env={})
    ingest_files(con, cfg, "sacct", [sacct], timezone="UTC")
    ingest_files(con, cfg, "sinfo", [sinfo], fmt=SINFO_FORMAT, timezone="UTC", at=T)


def run(con, rate: float = 7.0, **billing) -> None:
    cfg = load_config(env={}).with_overrides(billing={"rates": {"a100": rate}, **billing})
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)


def rows(con, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def reconciles(con) -> tuple[Decimal, Decimal]:
    charged = con.execute("SELECT coalesce(sum(cost_usd), 0) FROM mart_cost_monthly").fetchone()[0]
    line = con.execute(
        "SELECT coalesce(sum(idle_cost_usd + down_cost_usd + reserved_cost_usd), 0) FROM mart_cost_unallocated_monthly"
    ).fetchone()[0]
    return charged + line, con.execute("SELECT sum(capacity_cost_usd) FROM mart_capacity_daily").fetchone()[0]


def test_the_parsers_count_slices_apart_from_gpus(con, tmp_path):
    cluster(con, tmp_path)
    assert rows(con, "SELECT job_id, gpus, gpu_type, mig_slices FROM jobs ORDER BY job_id") == [
        ("1", 0, "a100_3g.20gb", 1),
        ("2", 0, "a100_1g.5gb", 1),
        ("3", 1, "a100", 0),
    ]
    assert rows(con, "SELECT node, gpus_total, gpus_used FROM node_states ORDER BY node") == [
        ("m1", 0, 0),
        ("w1", 2, 1),
    ]


def test_capacity_and_charges_count_a_slice_as_its_fraction_of_the_gpu(con, tmp_path):
    cluster(con, tmp_path)
    run(con)
    # 3 GPU-h = 10800 GPU-s, of which m1's 7 slices 3600; allocated 11/7 h, idle 10/7 h; $21 = $11 + $10
    assert rows(
        con,
        'SELECT "partition", gpu_model, capacity_gpu_seconds, mig_gpu_seconds, allocated_gpu_seconds,'
        " idle_gpu_seconds, capacity_cost_usd, allocated_cost_usd, idle_cost_usd FROM mart_capacity_daily",
    ) == [
        (
            "gpu",
            "a100",
            pytest.approx(10800.0),
            pytest.approx(3600.0),
            pytest.approx(11 / 7 * 3600),
            pytest.approx(10 / 7 * 3600),
            Decimal("21.00"),
            Decimal("11.00"),
            Decimal("10.00"),
        )
    ]
    # x: 3/7 h of the 3g slice ($3) + 1 whole A100 h ($7); y: 1/7 h ($1). The slices are under model a100.
    assert rows(
        con,
        'SELECT account, "user", gpu_model, gpu_seconds, mig_gpu_seconds, cost_usd FROM mart_cost_daily ORDER BY 1',
    ) == [
        (
            "a",
            "x",
            "a100",
            pytest.approx(3600 + 3 / 7 * 3600),
            pytest.approx(3 / 7 * 3600),
            pytest.approx(10.0),
        ),
        ("b", "y", "a100", pytest.approx(1 / 7 * 3600), pytest.approx(1 / 7 * 3600), pytest.approx(1.0)),
    ]
    assert rows(con, 'SELECT account, "user", cost_usd FROM mart_cost_monthly ORDER BY 1') == [
        ("a", "x", Decimal("10.00")),
        ("b", "y", Decimal("1.00")),
    ]
    # the idle 2g + 1g slices ($3) and the idle whole A100 ($7) are the unallocated line
    assert rows(con, 'SELECT "partition", gpu_model, idle_cost_usd FROM mart_cost_unallocated_monthly') == [
        ("gpu", "a100", Decimal("10.00"))
    ]
    assert reconciles(con) == (Decimal("21.00"), Decimal("21.00"))


def test_spread_shares_the_idle_slices_by_cost_within_the_model(con, tmp_path):
    cluster(con, tmp_path)
    run(con, idle_cost="spread")
    # $10 idle by cost: x 10 x 10/11 = 9.0909, y 10 x 1/11 = 0.9091 -> 909.09 and 90.91 cents; the spare
    # cent to the larger remainder (y's .91): x $9.09, y $0.91.
    assert rows(
        con, 'SELECT account, "user", cost_usd, spread_cost_usd FROM mart_cost_monthly ORDER BY 1'
    ) == [
        ("a", "x", Decimal("19.09"), Decimal("9.09")),
        ("b", "y", Decimal("1.91"), Decimal("0.91")),
    ]
    assert reconciles(con) == (Decimal("21.00"), Decimal("21.00"))


@pytest.mark.parametrize("idle_cost", ["separate", "spread"])
def test_thirds_of_a_cent_reconcile_to_the_cent(con, tmp_path, idle_cost):
    cluster(con, tmp_path)
    run(con, rate=1.0, idle_cost=idle_cost)
    # $1/GPU-h: capacity $3.00; allocated 11/7 = 157.14 cents and idle 10/7 = 142.86 cents -> 157 + 143
    assert rows(con, "SELECT allocated_cost_usd, idle_cost_usd FROM mart_capacity_daily") == [
        (Decimal("1.57"), Decimal("1.43"))
    ]
    assert reconciles(con) == (Decimal("3.00"), Decimal("3.00"))


@pytest.mark.parametrize(
    "weights, billing",
    [
        # TRESBillingWeights without a MIG type: Slurm bills each slice as one gres/gpu (9 = 2 CPU + 7);
        # that 7 comes out and the slice's fraction goes in: (9 - 7) / 7 + 3/7 = 5/7 GPU; job 2 (8 - 7)/7 + 1/7
        ("CPU=0.5,GRES/gpu=7.0", (9, 8, 11)),
        # weights for the MIG types: Slurm's own billing, 4 x 0.5 + 3 = 5 and 2 x 0.5 + 1 = 2, over the
        # weight of a whole A100 (GRES/gpu:a100 = 7): 5/7 and 2/7 GPU, taken as they stand
        ("CPU=0.5,GRES/gpu:a100_3g.20gb=3.0,GRES/gpu:a100_1g.5gb=1.0,GRES/gpu:a100=7.0", (5, 2, 11)),
    ],
)
def test_billing_tres_follows_the_weights_of_the_mig_type(con, tmp_path, weights, billing):
    cluster(con, tmp_path, billing)
    run(con, charge_by="billing_tres", tres_billing_weights={"gpu": weights})
    # x: 5/7 + 11/7 GPU-h = $16, y: 2/7 = $2. Of it, CPUs beyond GPUs: x (5-3) + (11-7) = 6, y (2-1) = 1 =
    # $7 paid for capacity sinfo calls idle: blocked; the line keeps $10 - $7 = $3.
    assert rows(con, 'SELECT account, "user", cost_usd FROM mart_cost_monthly ORDER BY 1') == [
        ("a", "x", Decimal("16.00")),
        ("b", "y", Decimal("2.00")),
    ]
    assert rows(con, "SELECT idle_cost_usd, blocked_cost_usd FROM mart_cost_unallocated_monthly") == [
        (Decimal("3.00"), Decimal("7.00"))
    ]
    assert reconciles(con) == (Decimal("21.00"), Decimal("21.00"))


def test_a_profile_nvidia_lists_on_gpus_of_different_sizes_needs_its_model(con, tmp_path):
    # 1g.24gb is 1/7 of an H100 94GB and 1/4 of an RTX PRO 6000: counting it needs the GPU.
    sinfo = tmp_path / "sinfo.txt"
    sinfo.write_text("r1|gpu|mixed|gpu:1g.24gb:4|gpu:1g.24gb:1(IDX:0)\n")
    ingest_files(con, load_config(env={}), "sinfo", [sinfo], fmt=SINFO_FORMAT, timezone="UTC", at=T)
    cfg = load_config(env={}).with_overrides(billing={"rates": {"rtx_pro_6000": 4.0}})
    with pytest.raises(ConfigError, match=r'billing\.mig_models\."1g\.24gb"'):
        run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    cfg = cfg.with_overrides(
        billing={"rates": {"rtx_pro_6000": 4.0}, "mig_models": {"1g.24gb": "rtx_pro_6000"}}
    )
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    # 4 slices of 1/4 = 1 GPU-h at $4; one slice allocated = $1
    assert rows(con, "SELECT gpu_model, capacity_cost_usd, allocated_cost_usd FROM mart_capacity_daily") == [
        ("rtx_pro_6000", Decimal("4.00"), Decimal("1.00"))
    ]


def test_capacity_of_a_real_mig_cluster_capture(con, tmp_path):
    # slurmrestd v0.0.40 nodes of a real cluster (PROVENANCE.md): n0161-n0163 each gres gpu:1g.10gb:21 (three
    # A100s cut in 7, feature a100), used 1, 9 and 5 slices; n0161 in interactivegpu,preempt, the others in
    # gpu,gpulong,preempt. The type names no GPU: the site maps 1g.10gb to its A100 model.
    src = FIXTURES / "lcrownover__prometheus-slurm-exporter" / "V0040OpenapiNodesResp.json"
    ingest_files(con, load_config(env={}), "sinfo", [src], timezone="UTC", at=T)
    cfg = load_config(env={}).with_overrides(
        billing={"rates": {"default": 1.0, "a100": 7.0}, "mig_models": {"1g.10gb": "a100"}}
    )
    run_pipelines(con, cfg, now=NOW, only=["cost"], full=True)
    got = rows(
        con,
        'SELECT "partition", mig_gpu_seconds, allocated_gpu_seconds, capacity_cost_usd, allocated_cost_usd'
        " FROM mart_capacity_daily WHERE gpu_model = 'a100' ORDER BY 1",
    )
    # 21 slices = 3 GPUs per node for the hour; allocated 1/7, and 9/7 + 5/7 = 2 GPUs; $7 per GPU-h
    assert got == [
        (
            "gpu,gpulong,preempt",
            pytest.approx(6 * 3600),
            pytest.approx(2 * 3600),
            Decimal("42.00"),
            Decimal("14.00"),
        ),
        (
            "interactivegpu,preempt",
            pytest.approx(3 * 3600),
            pytest.approx(3600 / 7),
            Decimal("21.00"),
            Decimal("1.00"),
        ),
    ]


def test_cost_efficiency_counts_held_slices_by_fraction_at_their_models_rate(con, tmp_path):
    cluster(con, tmp_path)
    t0 = datetime(2026, 2, 3, tzinfo=UTC)
    # the agent's mapping and inventory on m1: job 1 on MIG-3g, job 2 on MIG-1g (GPU g0)
    for job, instance, name in (("1", "MIG-3g", "3g.20gb"), ("2", "MIG-1g", "1g.5gb")):
        con.execute(
            "INSERT INTO gpu_jobs (cluster, node, gpu_uuid, job_id, interval_start, interval_end, mig_instance,"
            " source) VALUES ('default', 'm1', 'g0', ?, ?, ?, ?, 'prolog')",
            [job, t0, NOW, instance],
        )
        con.execute(
            "INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, model, mig_mode)"
            " VALUES ('default', 'm1', ?, ?, ?, true)",
            [instance, t0, f"NVIDIA A100-SXM4-40GB MIG {name}"],
        )
    # samples of the 3g instance itself at 2 % for the hour (no NVML source writes these today)
    for i in range(60):
        con.execute(
            "INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, samples, util_gpu_mean)"
            " VALUES ('default', 'm1', 'MIG-3g', ?, 6, 2.0)",
            [datetime(2026, 2, 3, 0, i, tzinfo=UTC)],
        )
    run(con)
    got = rows(
        con,
        "SELECT account, mig_gpu_seconds, sampled_gpu_seconds, sampled_cost_usd, idle_cost_usd, useful_gpu_seconds"
        " FROM mart_cost_efficiency_daily ORDER BY account",
    )
    # a: the 3g slice, 3600 s x 3/7 = 1542.86 GPU-s held, all sampled and idle (2 % < 5 %) = 3/7 h x $7 = $3;
    # useful 1542.86 x 0.02. b: the 1g slice, 514.29 GPU-s held, unsampled.
    assert got == [
        ("a", pytest.approx(3600 * 3 / 7), pytest.approx(3600 * 3 / 7), pytest.approx(3.0), pytest.approx(3.0),
         pytest.approx(3600 * 3 / 7 * 0.02)),
        ("b", pytest.approx(3600 / 7), 0.0, 0.0, 0.0, 0.0),
    ]  # fmt: skip


def test_report_counts_the_slices_within_capacity(con, tmp_path):
    from datetime import date

    from slurmscope.report import collect_data, render_html

    cluster(con, tmp_path)
    run(con)
    d = collect_data(con, "default", date(2026, 2, 1))
    html = render_html(d, d.users)
    # 3 GPU-h of capacity, 1 of them m1's seven slices; $11 charged (x $10, y $1)
    assert 'GPU-hours available (capacity)</td><td class="n">3.0' in html
    assert 'of capacity, MIG slices (each its fraction of a GPU)</td><td class="n">1.0' in html
    assert 'Charged to accounts (USD)</td><td class="n">11.00' in html
    # the reconciliation: 11/7 = 1.57 GPU-h allocated by sinfo and charged by sacct, slices included
    recon = html[html.index('class="reconcile"') :]
    assert 'of capacity, MIG slices (each its fraction of a GPU)</td><td class="n">1.00' in recon
    assert 'allocated in sinfo snapshots</td><td class="n">1.57' in recon
    assert '− charged from sacct</td><td class="n">1.57' in recon
    assert '= difference</td><td class="n">0.00' in recon


def test_reconciliation_and_waste_count_slices_by_fraction(con, tmp_path):
    cluster(con, tmp_path)
    # job 4 (b, y) on m1 failed after its hour, holding a 2g and the other 1g slice: two MIG types of one A100
    # (2/7 + 1/7 = 3/7 GPU); sinfo's single snapshot showed them idle.
    tres = "billing=8,cpu=2,gres/gpu:a100_2g.10gb=1,gres/gpu:a100_1g.5gb=1,gres/gpu=2,mem=16G,node=1"
    failed = (
        f"4|4|default|gpu|normal|b|y|{T}|{T}|{T}|2026-02-03T01:00:00|01:00:00|02:00:00|FAILED|1:0|1|2|16G|{tres}"
        "|m1|j4"
    )
    sacct = tmp_path / "sacct4.txt"
    sacct.write_text(f"{SACCT_HEADER}\n{failed}\n")
    ingest_files(con, load_config(env={}), "sacct", [sacct], timezone="UTC")
    run(con)
    # sinfo allocated: w1 1 GPU-h + m1's 3g and 1g, 3/7 + 1/7 = 11/7 GPU-h. sacct charged: 11/7 + job 4's 3/7
    # = 14/7 = 2 GPU-h. At the snapshot m1 held 3/7 + 1/7 + 3/7 = 7/7 by sacct against 4/7 allocated by sinfo:
    # unseen 3/7 GPU-h; w1 1 against 1. Nothing unrecorded, no sampling (all attempts span the hour), no gap.
    h = 3600.0
    assert rows(
        con,
        "SELECT allocated_gpu_seconds, charged_gpu_seconds, unrecorded_gpu_seconds, unseen_gpu_seconds,"
        " sampling_gpu_seconds, gap_gpu_seconds FROM mart_cost_reconciliation_daily",
    ) == [(pytest.approx(11 / 7 * h), pytest.approx(2 * h), 0.0, pytest.approx(3 / 7 * h), 0.0, 0.0)]
    # the same per month: allocated - charged = -3/7 GPU-h = unrecorded - unseen + sampling - gap
    assert rows(
        con,
        "SELECT allocated_gpu_seconds, charged_gpu_seconds, difference_gpu_seconds FROM mart_cost_reconciliation_monthly",
    ) == [(pytest.approx(11 / 7 * h), pytest.approx(2 * h), pytest.approx(-3 / 7 * h))]
    # waste by account: a ended 2 attempts (job 1's slice, job 3's GPU); b 2 (job 2, and job 4 counted once
    # for its two MIG types), job 4 failed: 3/7 GPU-h at $7 = $3.
    assert rows(
        con,
        "SELECT account, attempts, failed_attempts, failed_gpu_seconds, failed_cost_usd, requeued_attempts"
        " FROM mart_cost_waste_daily ORDER BY 1",
    ) == [
        ("a", 2, 0, 0.0, 0.0, 0),
        ("b", 2, 1, pytest.approx(3 / 7 * h), pytest.approx(3.0), 0),
    ]
