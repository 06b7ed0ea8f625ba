"""The cost pipeline's reconciliation of sinfo's allocation with sacct's charges, and the rates it applied,
on tiny hand-made clusters; the expected GPU-seconds and dollars are worked out in the comments
(docs/report.md#reconciliation carries the first example)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from slurmscope.pipelines.common import HOURS_PER_YEAR
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import load_config

T0 = datetime(2026, 2, 3, tzinfo=UTC)
H = timedelta(hours=1)


def node(con, name, t, used, total, *, state="MIXED", partition="gpu", gpu_type="h100"):
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags,'
        " gpus_total, gpus_used, gpu_type) VALUES ('default', ?, ?, ?, ?, '', ?, ?, ?)",
        [t, name, partition, state, total, used, gpu_type],
    )


def job(con, job_id, gpus, start, end, node_list, *, partition="gpu", gpu_type="h100", account="a"):
    con.execute(
        'INSERT OR REPLACE INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition",'
        " qos, state, start_time, end_time, gpus, gpu_type, node_list)"
        " VALUES ('default', ?, ?, ?, ?, 'u', ?, 'normal', ?, ?, ?, ?, ?, ?)",
        [
            str(job_id),
            job_id,
            start,
            account,
            partition,
            "RUNNING" if end is None else "COMPLETED",
            start,
            end,
            gpus,
            gpu_type,
            node_list,
        ],
    )


def cfg(**billing):
    return load_config(env={}).with_overrides(billing={"rates": {"h100": 2.0}, **billing})


DAILY = (
    "SELECT day, allocated_gpu_seconds, charged_gpu_seconds, unrecorded_gpu_seconds, unseen_gpu_seconds,"
    " sampling_gpu_seconds, gap_gpu_seconds FROM mart_cost_reconciliation_daily ORDER BY day"
)
MONTHLY = "SELECT * EXCLUDE (cluster) FROM mart_cost_reconciliation_monthly ORDER BY month"


def worked_example(con) -> None:
    """docs/report.md#reconciliation: n1 (4 H100) seen at 00:00, 01:00 and 02:00 with 2, 3 and 3 GPUs
    allocated; n2 (2 H100) seen once, at 00:00, with none; now 03:00, snapshots stand at most 1 h.
    j1 2 GPUs on n1 00:00-02:30; j2 1 GPU on n1 from 01:30, running; j3 1 GPU on n2 from 00:00, running;
    j4 1 GPU 00:00-01:00 with no NodeList."""
    for t, used in ((T0, 2), (T0 + H, 3), (T0 + 2 * H, 3)):
        node(con, "n1", t, used, 4)
    node(con, "n2", T0, 0, 2)
    job(con, 1, 2, T0, T0 + 2.5 * H, "n1")
    job(con, 2, 1, T0 + 1.5 * H, None, "n1")
    job(con, 3, 1, T0, None, "n2")
    job(con, 4, 1, T0, T0 + H, None)


def test_allocated_minus_charged_splits_into_named_causes(con):
    worked_example(con)
    run_pipelines(con, cfg(), now=T0 + 3 * H, only=["cost"], full=True)
    # Pieces (A = sinfo allocated, J = sacct GPUs at the snapshot, C = sacct GPU-seconds in the piece):
    #   n1 00-01: A 2, J 2 (j1), C 7200          -> allocated 7200
    #   n1 01-02: A 3, J 2, C 7200 + 1800 (j2)   -> allocated 10800, unrecorded 1 x 3600, sampling 7200 - 9000
    #   n1 02-03: A 3, J 3, C 3600 (j1 to 02:30) + 3600 (j2) -> allocated 10800, sampling 10800 - 7200
    #   n2 00-01: A 0, J 1 (j3), C 3600           -> unseen 1 x 3600
    # allocated 28800; charged: j1 2 x 2.5 h + j2 1.5 h + j3 3 h + j4 1 h = 18000 + 5400 + 10800 + 3600 = 37800;
    # covered 7200 + 9000 + 7200 + 3600 = 27000, so gap = 10800 (j3 after n2's snapshot lapsed, j4 on no node);
    # sampling -1800 + 3600 = 1800. Check: 28800 - 37800 = -9000 = 3600 - 3600 + 1800 - 10800.
    assert con.execute(DAILY).fetchall() == [
        (date(2026, 2, 3), 28800.0, 37800.0, 3600.0, 3600.0, 1800.0, 10800.0)
    ]
    allocated, charged = con.execute(
        "SELECT (SELECT sum(allocated_gpu_seconds) FROM mart_capacity_daily),"
        " (SELECT sum(gpu_seconds) FROM mart_cost_daily)"
    ).fetchone()
    assert (allocated, charged) == (28800.0, 37800.0)  # the same figures as the capacity and usage marts
    row = con.execute(MONTHLY).fetchone()
    # capacity: n1 4 x 3 h + n2 2 x 1 h = 14 GPU-h = $28, of which allocated 8 GPU-h = $16 and idle $12 (the
    # unallocated line, idle_cost = "separate"); invoiced 10.5 GPU-h = $21. 28 - 21 - 12 = -5 = 16 - 21 + 0.
    assert row == (
        date(2026, 2, 1),
        28800.0,
        37800.0,
        -9000.0,
        3600.0,
        3600.0,
        1800.0,
        10800.0,
        37800.0,
        0.0,
        Decimal("28.00"),
        Decimal("16.00"),
        Decimal("21.00"),
        Decimal("21.00"),
        Decimal("12.00"),
        Decimal("0.00"),
        Decimal("-5.00"),
    )


def test_a_snapshot_interval_across_midnight_is_sampled_again_at_midnight(con):
    # Berlin (UTC+1): n1 (2 GPUs) seen at 22:30 UTC on 2 Feb (23:30 local) with 1 allocated, standing 1 h:
    # 30 min on 2 Feb and 30 min on 3 Feb (local). j1 holds 1 GPU from 22:00 to 23:15 UTC (00:15 local).
    c = cfg(timezone="Europe/Berlin")
    node(con, "n1", T0 - 1.5 * H, 1, 2)
    job(con, 1, 1, T0 - 2 * H, T0 - 0.75 * H, "n1")
    run_pipelines(con, c, now=T0 + 3 * H, only=["cost"], full=True)
    # 2 Feb: piece 22:30-23:00 UTC, J 1 at 22:30, C 1800: they agree; j1's 22:00-22:30 is outside any
    #        snapshot: gap 1800. Charged 3600 on 2 Feb.
    # 3 Feb: piece 23:00-23:30 UTC sampled at its start (23:00 UTC): J 1, C 900 (j1 ends 23:15): sampling 900.
    assert con.execute(DAILY).fetchall() == [
        (date(2026, 2, 2), 1800.0, 3600.0, 0.0, 0.0, 0.0, 1800.0),
        (date(2026, 2, 3), 1800.0, 900.0, 0.0, 0.0, 900.0, 0.0),
    ]


def test_a_multi_node_attempt_is_spread_over_its_nodes(con):
    # 3 GPUs on n[1-2]: n1 takes 2, n2 takes 1 (Slurm records only the total). sinfo says 2 and 1: no cause.
    node(con, "n1", T0, 2, 4)
    node(con, "n2", T0, 1, 4)
    job(con, 1, 3, T0, T0 + H, "n[1-2]")
    run_pipelines(con, cfg(), now=T0 + H, only=["cost"], full=True)
    assert con.execute(DAILY).fetchall() == [(date(2026, 2, 3), 10800.0, 10800.0, 0.0, 0.0, 0.0, 0.0)]


def test_late_records_after_a_frozen_invoice_show_as_after_invoice(con):
    c = cfg(close_after_days=0)
    node(con, "n1", T0, 1, 1)
    job(con, 1, 1, T0, T0 + H, "n1")
    run_pipelines(con, c, now=datetime(2026, 3, 1, tzinfo=UTC), only=["cost"])  # February closed and frozen
    job(con, 2, 1, T0 + 2 * H, T0 + 4 * H, "n9")  # a late record for February, on a node sinfo never listed
    run_pipelines(con, c, now=datetime(2026, 3, 2, tzinfo=UTC), only=["cost"])
    row = con.execute(
        "SELECT charged_gpu_seconds, gap_gpu_seconds, invoiced_gpu_seconds, after_invoice_gpu_seconds,"
        " invoiced_cost_usd FROM mart_cost_reconciliation_monthly WHERE month = '2026-02-01'"
    ).fetchone()
    # charged now 1 h + 2 h; the frozen invoice still says 1 h ($2); the 2 h are after it, and in the gap.
    assert row == (10800.0, 7200.0, 3600.0, 7200.0, Decimal("2.00"))


@pytest.mark.parametrize(
    "billing",
    [
        {},
        {"idle_cost": "spread"},
        {"idle_cost": "spread", "charge_by": "billing_tres", "tres_billing_weights": {"gpu": "GRES/gpu=2.0"}},
    ],
)
def test_dollars_reconcile_for_every_allocation_model(con, billing):
    # n1 8 H100 for 1 h, sinfo 3 allocated; x holds 1 GPU billed as 4 (billing 8 / weight 2), y holds 2 GPUs.
    node(con, "n1", T0, 3, 8)
    job(con, 1, 1, T0, T0 + H, "n1", account="x")
    job(con, 2, 2, T0, T0 + H, "n1", account="y")
    con.execute("UPDATE jobs SET billing = CASE job_id_raw WHEN 1 THEN 8 ELSE 4 END")
    run_pipelines(con, cfg(**billing), now=T0 + H, only=["cost"], full=True)
    capacity, invoiced, unallocated, allocated, usage, blocked, difference = con.execute(
        "SELECT capacity_cost_usd, invoiced_cost_usd, unallocated_cost_usd, allocated_cost_usd, usage_cost_usd,"
        " blocked_cost_usd, difference_cost_usd FROM mart_cost_reconciliation_monthly"
    ).fetchone()
    # capacity 8 GPU-h x $2 = $16, sinfo's allocated 3 GPU-h = $6. By GPU: usage $6, idle line $10, difference
    # 0. Spread: the $10 idle goes to x and y, nothing left. billing_tres: x pays 4 GPU-h = $8, y $4, usage
    # $12; $6 of idle was blocked by x's billing, the other $4 spread: capacity 16 = invoiced 16 + line 0 +
    # (6 - 12 + 6).
    assert capacity == Decimal("16.00") and allocated == Decimal("6.00")
    assert difference == capacity - invoiced - unallocated == allocated - usage + blocked
    want = {
        (): (Decimal("6.00"), Decimal("10.00"), Decimal("0.00")),
        ("idle_cost",): (Decimal("16.00"), Decimal("0.00"), Decimal("0.00")),
        ("charge_by", "idle_cost", "tres_billing_weights"): (
            Decimal("16.00"),
            Decimal("0.00"),
            Decimal("6.00"),
        ),
    }[tuple(sorted(billing))]
    assert (invoiced, unallocated, blocked) == want


def test_rates_applied_name_their_price_book_entry_and_inputs(con):
    amortised = {
        "purchase_usd": 15000.0,
        "lifetime_years": 4.0,
        "power_kw": 0.4,
        "usd_per_kwh": 0.12,
        "overhead_usd_per_year": 500.0,
    }
    c = load_config(env={}).with_overrides(
        billing={"rates": {"H100": 2.5, "partition:debug": {"rate": 0.5}, "a100": amortised}}
    )
    node(con, "n1", T0, 1, 2)
    node(con, "n2", T0, 0, 2, gpu_type="a100")
    node(con, "n3", T0, 0, 1, partition="debug")
    job(con, 1, 1, T0, T0 + H, "n1")
    run_pipelines(con, c, now=T0 + H, only=["cost"], full=True)
    rows = con.execute(
        'SELECT "partition", gpu_model, rate_per_gpu_hour, price_key, kind, purchase_usd, lifetime_years,'
        " power_kw, usd_per_kwh, pue, overhead_usd_per_year, gpus_per_unit FROM mart_cost_rates_daily ORDER BY ALL"
    ).fetchall()
    # a100: 15000 / (4 x 8766 h) + 0.4 kW x $0.12 x PUE 1 (default) + 500 / 8766 h, 1 GPU per unit (default)
    #     = 0.427789 + 0.048 + 0.057039 = 0.532828 $/GPU-h
    a100 = 15000 / (4 * HOURS_PER_YEAR) + 0.4 * 0.12 + 500 / HOURS_PER_YEAR
    assert rows == [
        ("debug", "h100", 0.5, "partition:debug", "rate", None, None, None, None, None, None, None),
        ("gpu", "a100", pytest.approx(a100), "a100", "amortised", 15000.0, 4.0, 0.4, 0.12, 1.0, 500.0, 1.0),
        ("gpu", "h100", 2.5, "h100", "rate", None, None, None, None, None, None, None),
    ]
    assert round(a100, 6) == 0.532828
