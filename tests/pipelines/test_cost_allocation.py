"""Allocation models of the cost pipeline (billing.charge_by, idle_cost, bill_down, powered-off nodes), each
on a tiny hand-made cluster with the expected dollars worked out in the comments (docs/pipelines.md#cost
carries the same examples)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from slurmscope.pipelines.runner import run_pipelines

from slurmscope.config import ConfigError, load_config

T0 = datetime(2026, 2, 3, tzinfo=UTC)
HOUR = timedelta(hours=1)
# Slurm's documented MAX_TRES example shape: a node of 8 GPUs, 64 CPUs and 512 GB weighted so that each
# resource alone, taken whole, bills the node (GRES/gpu 2 x 8 = CPU 0.25 x 64 = Mem 2/64 per GB x 512 = 16).
WEIGHTS = "CPU=0.25,Mem=0.03125G,GRES/gpu=2.0"


def node(con, name, state, used, total, *, gpu_type="h100", partition="gpu", flags="", t=T0):
    con.execute(
        'INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags,'
        " gpus_total, gpus_used, gpu_type) VALUES ('default', ?, ?, ?, ?, ?, ?, ?, ?)",
        [t, name, partition, state, flags, total, used, gpu_type],
    )


def job(
    con,
    job_id,
    gpus,
    *,
    account="a",
    user="x",
    gpu_type="h100",
    partition="gpu",
    billing=None,
    start=T0,
    hours=1.0,
):
    end = start + hours * HOUR
    con.execute(
        'INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, account, "user", "partition", qos, state,'
        " start_time, end_time, gpus, gpu_type, billing)"
        " VALUES ('default', ?, ?, ?, ?, ?, ?, 'normal', 'COMPLETED', ?, ?, ?, ?, ?)",
        [str(job_id), job_id, start, account, user, partition, start, end, gpus, gpu_type, billing],
    )


def cfg(**billing):
    return load_config(env={}).with_overrides(billing={"rates": {"h100": 2.0, "a100": 1.0}, **billing})


def run(con, c, now=T0 + HOUR):
    run_pipelines(con, c, now=now, only=["cost"], full=True)


def invoice(con):
    return con.execute(
        'SELECT account, "user", cost_usd, spread_cost_usd FROM mart_cost_monthly ORDER BY account, "user"'
    ).fetchall()


def kept(con):
    return con.execute(
        'SELECT "partition", gpu_model, idle_cost_usd, down_cost_usd, reserved_cost_usd, blocked_cost_usd'
        ' FROM mart_cost_unallocated_monthly ORDER BY "partition", gpu_model'
    ).fetchall()


def reconciles(con) -> tuple[Decimal, Decimal]:
    """(invoices + unallocated line, capacity cost) of the whole history."""
    charged = con.execute("SELECT coalesce(sum(cost_usd), 0) FROM mart_cost_monthly").fetchone()[0]
    line = con.execute(
        "SELECT coalesce(sum(idle_cost_usd + down_cost_usd + reserved_cost_usd), 0) FROM mart_cost_unallocated_monthly"
    ).fetchone()[0]
    capacity = con.execute("SELECT sum(capacity_cost_usd) FROM mart_capacity_daily").fetchone()[0]
    return charged + line, capacity


# --- idle shared within partition and GPU model ------------------------------------------------------------


def two_models(con):
    """One hour, partition gpu: n1 has 2 H100 ($2/GPU-h), x holds 1; n2 has 2 A100 ($1/GPU-h), y holds 1.
    Capacity $6: H100 allocated $2 + idle $2, A100 allocated $1 + idle $1."""
    node(con, "n1", "MIXED", 1, 2)
    node(con, "n2", "MIXED", 1, 2, gpu_type="a100")
    job(con, 1, 1, user="x")
    job(con, 2, 1, account="b", user="y", gpu_type="a100")


def test_spread_keeps_each_gpu_models_idle_with_its_own_users(con):
    two_models(con)
    run(con, cfg(idle_cost="spread"))
    # x carries the idle H100 ($2), y the idle A100 ($1); pooled by GPU-seconds (before) each would carry $1.50.
    assert invoice(con) == [
        ("a", "x", Decimal("4.00"), Decimal("2.00")),
        ("b", "y", Decimal("2.00"), Decimal("1.00")),
    ]
    assert kept(con) == [
        ("gpu", "a100", 0, 0, 0, 0),
        ("gpu", "h100", 0, 0, 0, 0),
    ]
    assert reconciles(con) == (Decimal("6.00"), Decimal("6.00"))


def test_separate_keeps_idle_as_the_unallocated_line(con):
    two_models(con)
    run(con, cfg())  # the default, idle_cost = "separate"
    assert invoice(con) == [
        ("a", "x", Decimal("2.00"), Decimal("0.00")),
        ("b", "y", Decimal("1.00"), Decimal("0.00")),
    ]
    assert kept(con) == [("gpu", "a100", Decimal("1.00"), 0, 0, 0), ("gpu", "h100", Decimal("2.00"), 0, 0, 0)]
    assert reconciles(con) == (Decimal("6.00"), Decimal("6.00"))


def test_a_scope_nobody_used_that_month_stays_unallocated(con):
    node(con, "n1", "MIXED", 1, 2)
    node(con, "n2", "IDLE", 0, 2, gpu_type="a100")
    job(con, 1, 1, user="x")
    run(con, cfg(idle_cost="spread"))
    # x pays the H100 hour and the idle H100 ($4); nobody ran on A100s, so their $2 is not x's.
    assert invoice(con) == [("a", "x", Decimal("4.00"), Decimal("2.00"))]
    assert kept(con) == [("gpu", "a100", Decimal("2.00"), 0, 0, 0), ("gpu", "h100", 0, 0, 0, 0)]
    assert reconciles(con) == (Decimal("6.00"), Decimal("6.00"))


# --- down and reserved capacity ---------------------------------------------------------------------------


def with_down_and_reserved(con):
    """One hour, H100 at $2: n1 (2 GPUs) x holds 1, 1 idle; n3 (2 GPUs) DOWN; n4 (2 GPUs) RESERVED, unused.
    Capacity $12 = allocated $2 + idle $2 + down $4 + reserved $4."""
    node(con, "n1", "MIXED", 1, 2)
    node(con, "n3", "DOWN", 0, 2)
    node(con, "n4", "RESERVED", 0, 2)
    job(con, 1, 1, user="x")


def test_down_capacity_is_not_billed_to_users_unless_configured(con):
    with_down_and_reserved(con)
    run(con, cfg(idle_cost="spread"))
    # x: usage $2 + idle $2 + reserved $4 = $8; the failed node's $4 stays in the unallocated line.
    assert invoice(con) == [("a", "x", Decimal("8.00"), Decimal("6.00"))]
    assert kept(con) == [("gpu", "h100", 0, Decimal("4.00"), 0, 0)]
    assert reconciles(con) == (Decimal("12.00"), Decimal("12.00"))

    run(con, cfg(idle_cost="spread", bill_down=True))
    assert invoice(con) == [("a", "x", Decimal("12.00"), Decimal("10.00"))]
    assert kept(con) == [("gpu", "h100", 0, 0, 0, 0)]
    assert reconciles(con) == (Decimal("12.00"), Decimal("12.00"))


def test_powered_down_and_cloud_nodes_are_not_idle_capacity(con):
    node(con, "n1", "MIXED", 1, 2)
    node(con, "c1", "IDLE", 0, 4, flags="CLOUD+POWERED_DOWN")  # idle~ : not provisioned
    node(con, "c2", "IDLE", 0, 4, flags="POWERING_DOWN")  # idle% : being switched off
    node(con, "c3", "IDLE", 0, 2, flags="POWER_DOWN")  # idle! : still on until asked to power off: idle
    job(con, 1, 1, user="x")
    run(con, cfg(idle_cost="spread"))
    row = con.execute(
        "SELECT capacity_gpu_seconds, allocated_gpu_seconds, idle_gpu_seconds, powered_down_gpu_seconds,"
        " capacity_cost_usd, idle_cost_usd FROM mart_capacity_daily"
    ).fetchone()
    # capacity = n1's 2 + c3's 2 GPUs x 3600 s; the 8 powered-off GPUs are apart and cost nothing.
    assert row == (4 * 3600.0, 3600.0, 3 * 3600.0, 8 * 3600.0, Decimal("8.00"), Decimal("6.00"))
    assert invoice(con) == [("a", "x", Decimal("8.00"), Decimal("6.00"))]
    assert reconciles(con) == (Decimal("8.00"), Decimal("8.00"))


# --- charged by billing TRES ------------------------------------------------------------------------------


def test_billing_tres_charges_a_one_gpu_job_for_the_node_it_blocked(con):
    # n1: 8 H100 at $2, one hour. x asks 1 GPU and all 64 CPUs: with PriorityFlags=MAX_TRES Slurm bills
    # max(0.25 x 64 CPUs, 0.03125 x 16 GB, 2.0 x 1 GPU) = 16 (sacct AllocTRES billing=16). 16 / 2.0 (GRES/gpu
    # weight) = 8 GPU-equivalents: 8 GPU-h x $2 = $16, the whole node, though sinfo shows 7 GPUs free.
    node(con, "n1", "MIXED", 1, 8)
    job(con, 1, 1, user="x", billing=16.0)
    by_gpu = cfg(tres_billing_weights={"gpu": WEIGHTS})
    run(con, by_gpu)
    assert invoice(con) == [("a", "x", Decimal("2.00"), Decimal("0.00"))]  # charge_by = "gpu": one GPU
    assert kept(con) == [("gpu", "h100", Decimal("14.00"), 0, 0, 0)]

    run(con, by_gpu.with_overrides(billing={"charge_by": "billing_tres"}))
    assert invoice(con) == [("a", "x", Decimal("16.00"), Decimal("0.00"))]
    # The 7 "idle" GPUs were paid for through billing TRES: nothing is left unallocated.
    assert kept(con) == [("gpu", "h100", 0, 0, 0, Decimal("14.00"))]
    daily = con.execute("SELECT gpu_seconds, billed_gpu_seconds, cost_usd FROM mart_cost_daily").fetchone()
    assert daily == (3600.0, 8 * 3600.0, pytest.approx(16.0))
    assert reconciles(con) == (Decimal("16.00"), Decimal("16.00"))


def test_billing_tres_spreads_the_idle_left_by_cost(con):
    # n1: 8 H100 at $2 for one hour. x: 1 GPU, 32 CPUs -> billing max(8, ., 2) = 8 -> 4 GPU-equivalents, $8.
    # y: 2 GPUs -> billing 4 -> 2 equivalents, $4. sinfo: 3 GPUs used, 5 free = $10, of which x's blocked
    # 3 GPUs ($6) are paid already: $4 left, spread by cost 8 : 4 -> x $2.6667, y $1.3333 (by GPU-seconds it
    # would be 1 : 2). Spread cents 266.67 + 133.33 -> 267 + 133 (the spare cent to the larger remainder).
    node(con, "n1", "MIXED", 3, 8)
    job(con, 1, 1, user="x", billing=8.0)
    job(con, 2, 2, user="y", billing=4.0)
    run(con, cfg(idle_cost="spread", charge_by="billing_tres", tres_billing_weights={"gpu": WEIGHTS}))
    assert invoice(con) == [
        ("a", "x", Decimal("10.67"), Decimal("2.67")),
        ("a", "y", Decimal("5.33"), Decimal("1.33")),
    ]
    assert kept(con) == [("gpu", "h100", 0, 0, 0, Decimal("6.00"))]
    assert reconciles(con) == (Decimal("16.00"), Decimal("16.00"))


def test_billing_tres_falls_back_to_gpus_without_a_billing_tres_or_weights(con):
    # No billing in AllocTRES (older accounting), or a partition with no TRESBillingWeights entry (Slurm then
    # bills CPUs, which say nothing about GPUs): charged by GPU, $2 and $1.
    node(con, "n1", "MIXED", 1, 2)
    node(con, "n2", "MIXED", 1, 2, gpu_type="a100", partition="other")
    job(con, 1, 1, user="x")
    job(con, 2, 1, user="y", gpu_type="a100", partition="other", billing=64.0)
    run(con, cfg(charge_by="billing_tres", tres_billing_weights={"gpu": WEIGHTS}))
    assert invoice(con) == [
        ("a", "x", Decimal("2.00"), Decimal("0.00")),
        ("a", "y", Decimal("1.00"), Decimal("0.00")),
    ]


def test_typed_gpu_weight_wins_over_the_plain_one(con):
    # GRES/gpu:h100=4 for H100 jobs: billing 16 / 4 = 4 equivalents = $8.
    node(con, "n1", "MIXED", 1, 8)
    job(con, 1, 1, user="x", billing=16.0)
    run(
        con,
        cfg(charge_by="billing_tres", tres_billing_weights={"gpu": "CPU=0.25,GRES/gpu=2,GRES/gpu:h100=4"}),
    )
    assert invoice(con) == [("a", "x", Decimal("8.00"), Decimal("0.00"))]


# --- every model reconciles to the cent -------------------------------------------------------------------


@pytest.mark.parametrize("idle_cost", ["separate", "spread"])
@pytest.mark.parametrize("charge_by", ["gpu", "billing_tres"])
@pytest.mark.parametrize("bill_down", [False, True])
def test_invoices_plus_unallocated_line_equal_capacity_to_the_cent(con, idle_cost, charge_by, bill_down):
    # Two days, $3/GPU-h H100 and $1.5 A100; a node in two partitions; three users a third of an hour each
    # (thirds of cents to round); a DOWN, a RESERVED and a powered-off node; an A100 scope used on day 1 only;
    # a reservation for two accounts over part of the reserved node's time.
    c = load_config(env={}).with_overrides(
        billing={
            "rates": {"h100": 3.0, "a100": 1.5},
            "idle_cost": idle_cost,
            "charge_by": charge_by,
            "bill_down": bill_down,
            "tres_billing_weights": {"gpu": WEIGHTS},
        }
    )
    for day in (0, 1):
        t = T0 + timedelta(days=day)
        node(con, "n1", "MIXED", 1, 4, t=t)
        node(con, "n2", "MIXED" if day == 0 else "IDLE", 1 if day == 0 else 0, 2, gpu_type="a100", t=t)
        node(con, "n3", "DOWN", 0, 2, t=t)
        node(con, "n4", "RESERVED", 0, 2, partition="gpu,debug", t=t)
        node(con, "c1", "IDLE", 0, 2, flags="CLOUD+POWERED_DOWN", t=t)
        for i, user in enumerate(("x", "y", "z")):
            s = t + timedelta(minutes=20 * i)
            job(con, 10 * day + i + 1, 1, user=user, account="ab"[i % 2], start=s, hours=1 / 3, billing=4.0)
        if day == 0:
            job(con, 99, 1, user="w", account="c", gpu_type="a100", billing=2.0)
    reservation(con, "train", "n4", "b,c", start=T0 + HOUR / 3, end=T0 + timedelta(days=1, minutes=10))
    run(con, c, now=T0 + timedelta(days=1, hours=1))
    total, capacity = reconciles(con)
    # Capacity per day: H100 gpu 4 GPUs + n3 2 = 6 x $3 = $18, gpu,debug 2 x $3 = $6, A100 2 x $1.5 = $3.
    assert capacity == Decimal("54.00")
    assert total == capacity


def test_new_billing_keys_are_validated(tmp_path):
    path = tmp_path / "s.toml"
    for text, key in [
        ('[billing]\ncharge_by = "tres"\n', "billing.charge_by"),
        ('[billing]\nbill_down = "yes"\n', "billing.bill_down"),
        ('[billing.tres_billing_weights]\ngpu = "CPU=0.25,Mem=1G"\n', "billing.tres_billing_weights.gpu"),
        ('[billing.tres_billing_weights]\ngpu = "CPU=lots"\n', "billing.tres_billing_weights.gpu"),
        ("[billing.tres_billing_weights]\ngpu = 2\n", "billing.tres_billing_weights.gpu"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(path, env={})
    path.write_text(
        f'[billing]\ncharge_by = "billing_tres"\n[billing.tres_billing_weights]\ngpu = "{WEIGHTS}"\n'
    )
    assert load_config(path, env={}).raw["billing"]["tres_billing_weights"] == {"gpu": WEIGHTS}


# --- reserved idle charged to the reservation's accounts --------------------------------------------------


def reservation(con, name, nodes, accounts, start=T0, end=T0 + HOUR / 2):
    con.execute(
        "INSERT INTO reservations (cluster, name, start_time, end_time, node_list, node_count, accounts, seen_at)"
        " VALUES ('default', ?, ?, ?, ?, 1, ?, ?)",
        [name, start, end, nodes, accounts, start],
    )


def test_reserved_idle_goes_to_the_reservations_accounts(con):
    # n1 2 H100 at $2, x (account a) holds 1 for an hour; n4 2 H100 RESERVED for the hour ($4). Reservation
    # "train" holds n4 for its first half hour for accounts b and c: 2 GPUs x 0.5 h x $2 = $2, $1 each
    # (invoice rows with user ""). The other $2 of reserved and n1's idle $2 go to the scope's users: x.
    node(con, "n1", "MIXED", 1, 2)
    node(con, "n4", "RESERVED", 0, 2)
    job(con, 1, 1, user="x")
    reservation(con, "train", "n[4]", "b,c")
    reservation(
        con, "others", "n4", "-a", start=T0 + HOUR / 2, end=T0 + HOUR
    )  # everyone but a: nobody to bill
    run(con, cfg(idle_cost="spread"))
    assert invoice(con) == [
        ("a", "x", Decimal("6.00"), Decimal("4.00")),
        ("b", "", Decimal("1.00"), Decimal("1.00")),
        ("c", "", Decimal("1.00"), Decimal("1.00")),
    ]
    got = con.execute(
        'SELECT "partition", gpu_model, reservation, account, cost_usd FROM mart_cost_reservation_daily ORDER BY ALL'
    ).fetchall()
    assert got == [
        ("gpu", "h100", "train", "b", Decimal("1.00")),
        ("gpu", "h100", "train", "c", Decimal("1.00")),
    ]
    assert reconciles(con) == (Decimal("8.00"), Decimal("8.00"))

    run(con, cfg())  # separate: nobody is charged unallocated capacity, reservations included
    assert con.execute("SELECT count(*) FROM mart_cost_reservation_daily").fetchone()[0] == 0
    assert kept(con) == [("gpu", "h100", Decimal("2.00"), 0, Decimal("4.00"), 0)]


def test_a_reservation_nobody_in_its_scope_used_still_pays_and_the_rest_stays_unallocated(con):
    # Only n4 (2 H100, RESERVED, 1 h = $4); "train" for account b over the whole hour: b pays $4, nothing kept.
    # A down node beside it stays unallocated ($4).
    node(con, "n4", "RESERVED", 0, 2)
    node(con, "n3", "DOWN", 0, 2)
    reservation(con, "train", "n4", "b", end=T0 + 2 * HOUR)
    run(con, cfg(idle_cost="spread"))
    assert invoice(con) == [("b", "", Decimal("4.00"), Decimal("4.00"))]
    assert kept(con) == [("gpu", "h100", 0, Decimal("4.00"), 0, 0)]
    assert reconciles(con) == (Decimal("8.00"), Decimal("8.00"))


def test_an_incremental_run_gives_the_invoice_and_line_of_a_full_rebuild(con):
    # Days before the window come from the marts (usage by scope, pools, reservation charges): rebuilding
    # from the second day must not change a cent.
    c = cfg(idle_cost="spread", charge_by="billing_tres", tres_billing_weights={"gpu": WEIGHTS})
    for day in (0, 1):
        t = T0 + timedelta(days=day)
        node(con, "n1", "MIXED", 1, 4, t=t)
        node(con, "n2", "IDLE", 0, 2, gpu_type="a100", t=t)
        node(con, "n4", "RESERVED", 0, 2, t=t)
        job(con, day + 1, 1, user="xy"[day], start=t + timedelta(minutes=10), hours=0.5, billing=6.0)
    job(con, 9, 1, user="w", account="c", gpu_type="a100", start=T0 + timedelta(days=1), hours=0.25)
    reservation(con, "train", "n4", "b", start=T0 + HOUR / 2, end=T0 + timedelta(days=1, minutes=30))
    now = T0 + timedelta(days=1, hours=1)
    run(con, c, now=now)
    full, line = invoice(con), kept(con)
    run_pipelines(con, c, now=now, only=["cost"], since="2026-02-04")
    assert invoice(con) == full
    assert kept(con) == line
    assert ("b", "") in {r[:2] for r in full}  # the reservation's charge, from the mart on the second run


def test_report_shows_the_unallocated_line_and_powered_off_hours(con):
    from datetime import date

    from slurmscope.report import collect_data, render_html
    from tests.htmltables import row

    two_models(con)
    node(con, "c1", "IDLE", 0, 4, flags="CLOUD+POWERED_DOWN")
    run(con, cfg())
    d = collect_data(con, "default", date(2026, 2, 1))
    html = render_html(d, d.users)
    # Charged $3 (x $2, y $1); idle H100 $2 + A100 $1 charged to nobody; 4 powered-off GPUs for an hour.
    assert row(html, "Charged to accounts (USD)", "totals")[1] == "3.00"
    assert row(html, "Unallocated, charged to nobody (USD)", "totals")[1] == "3.00"
    assert row(html, "GPU-hours powered off (not capacity)", "totals")[1] == "4.0"
