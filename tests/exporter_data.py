"""A small hand-made cluster history for the exporter, dashboard and Prometheus tests.

Three days ending at END, cluster c1, four 8-GPU H100 nodes in partition gpu, accounts a and b. Every
fault below is placed by hand so that the tests know, without running slurmscope, which alerts it must
raise (EXPECTED_ALERTS) and what the exporter must report at END:

- g01 MIXED (5 GPUs used), drained three times in the last six hours (flapping), one uncorrectable ECC
  error 5 minutes before END; g02 ALLOCATED (8 used), XID 79 5 minutes before END, NVML sees 7 of its 8
  GPUs in the last inventory, GPU 5 with a failed row remap and GPU 3 throttled half the time in the last
  hour; g03 DOWN + NOT_RESPONDING for the last 2 hours; g04 drained for 30 hours.
- jobs: 4 COMPLETED (account a) and 1 FAILED (account b) per hour; in the last hour 12 more FAILED,
  3 NODE_FAIL and 40 requeued attempts.
- squeue: 3 pending jobs of account a (8 GPUs each, submitted 1 h before END) and one of account b
  submitted 20 h before END; 2 running jobs.
- sdiag every 15 min; the backfill cycle stops 40 minutes before END.
- sshare: a has shares 0.6 and effective usage 0.8; b has shares 0.4 and effective usage 0.1.
- GPU utilisation 80 % until 2 h before END, then 20 %.
- collectors: sacct last succeeded 2 h before END, sshare failing for the last 30 min, others fine.
- drift (mart_drift, from 2 h before END): GPU g02-gpu3 temperature vs fleet and node g01 uncorrectable
  ECC breached; the partition failure-rate trend scored but not breached.
- marts: usage counters, wait times (p90 600 s, 3000 s on the last day), occupancy, backfill, sdiag
  deltas, fault impact, node reliability, goodput, capacity, cost efficiency (useful share 0.7, 20 kWh a
  day per account), as the pipelines would write them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb

END = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
START = END - timedelta(days=3)
CLUSTER = "c1"

# Alerts this history must raise at END (their conditions hold at END), and those it must not.
EXPECTED_ALERTS = {
    "SlurmNodeDown",
    "SlurmNodeDrainedTooLong",
    "SlurmNodeFlapping",
    "GpuXidRebootNode",
    "GpuEccUncorrectable",
    "GpuRowRemapFailed",
    "GpuFallenOffBus",
    "GpuThrottlingSustained",
    "GpuCountMismatch",
    "SlurmJobFailureRateHigh",
    "SlurmRequeueSpike",
    "SlurmNodeFaultJobKills",
    "SlurmWaitTimeP90Drift",
    "SlurmFairShareStarvation",
    "SlurmBackfillStalled",
    "GpuUtilizationDrift",
    "SlurmscopeCollectorStale",
    "SlurmscopeCollectorFailing",
    "GpuFleetDrift",
    "NodeErrorRateDrift",
}
# Of those, the ones whose condition held at the history's 10-minute samples for longer than their `for:`
# before END (the others started within the last 10 minutes: XID 79 and the ECC error 5 minutes before END,
# the missing GPU in the last inventory).
EXPECTED_FIRING = EXPECTED_ALERTS - {
    "GpuXidRebootNode",
    "GpuEccUncorrectable",
    "GpuFallenOffBus",
    "GpuCountMismatch",
}
QUIET_ALERTS = {
    "GpuNvlinkErrors",
    "GpuResetPending",
    "SlurmControllerUnreachable",
    "SlurmAccountBudgetSpent",
    "SlurmAccountBudgetForecastOver",
    "SlurmscopeMetricsStale",
    "SlurmTrendDrift",
}


def _exec(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    params = {"end": END, "start": START, "cluster": CLUSTER}
    con.execute(sql, {k: v for k, v in params.items() if f"${k}" in sql})


def build(con: duckdb.DuckDBPyConnection, *, with_marts: bool = True) -> None:
    """Insert the history into a migrated database."""
    # sinfo every 15 minutes.
    _exec(
        con,
        """
        INSERT INTO node_states (cluster, snapshot_time, node, "partition", state, state_flags, state_raw, reason,
                                 reason_time, gpus_total, gpus_used, gpu_type, cpus_total)
        SELECT $cluster, t, n.node, 'gpu',
               CASE WHEN n.node = 'g03' AND t >= $end - INTERVAL 2 HOUR THEN 'DOWN'
                    WHEN n.node = 'g04' AND t >= $end - INTERVAL 30 HOUR THEN 'IDLE'
                    ELSE n.state END,
               CASE WHEN n.node = 'g03' AND t >= $end - INTERVAL 2 HOUR THEN 'NOT_RESPONDING'
                    WHEN n.node = 'g04' AND t >= $end - INTERVAL 30 HOUR THEN 'DRAIN' ELSE '' END,
               CASE WHEN n.node = 'g03' AND t >= $end - INTERVAL 2 HOUR THEN 'down*'
                    WHEN n.node = 'g04' AND t >= $end - INTERVAL 30 HOUR THEN 'drained' ELSE lower(n.state) END,
               CASE WHEN n.node = 'g03' AND t >= $end - INTERVAL 2 HOUR THEN 'Not responding'
                    WHEN n.node = 'g04' AND t >= $end - INTERVAL 30 HOUR THEN 'xid 79 RMA' END,
               CASE WHEN n.node = 'g03' AND t >= $end - INTERVAL 2 HOUR THEN $end - INTERVAL 2 HOUR
                    WHEN n.node = 'g04' AND t >= $end - INTERVAL 30 HOUR THEN $end - INTERVAL 30 HOUR END,
               8,
               CASE WHEN n.node = 'g03' AND t >= $end - INTERVAL 2 HOUR THEN 0
                    WHEN n.node = 'g04' AND t >= $end - INTERVAL 30 HOUR THEN 0 ELSE n.used END,
               'h100', 64
        FROM generate_series($start, $end, INTERVAL 15 MINUTE) g(t),
             (VALUES ('g01', 'MIXED', 5), ('g02', 'ALLOCATED', 8), ('g03', 'IDLE', 0), ('g04', 'IDLE', 0)) n(node, state, used)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO node_events (cluster, node, time_start, time_end, state, reason, event_type) VALUES
        ($cluster, 'g01', $end - INTERVAL 5 HOUR, $end - INTERVAL 290 MINUTE, 'DRAIN', 'ecc', 'node'),
        ($cluster, 'g01', $end - INTERVAL 4 HOUR, $end - INTERVAL 230 MINUTE, 'DRAIN', 'ecc', 'node'),
        ($cluster, 'g01', $end - INTERVAL 3 HOUR, $end - INTERVAL 170 MINUTE, 'DRAIN', 'ecc', 'node'),
        ($cluster, 'g03', $end - INTERVAL 2 HOUR, NULL, 'DOWN', 'Not responding', 'node'),
        ($cluster, 'g04', $end - INTERVAL 30 HOUR, NULL, 'DRAIN', 'xid 79 RMA', 'node')
    """,
    )
    # squeue every 15 minutes: the pending jobs exist once submitted.
    _exec(
        con,
        """
        INSERT INTO pending_jobs (cluster, snapshot_time, job_id, job_id_raw, account, "partition", qos, state,
                                  reason, submit_time, gpus)
        SELECT $cluster, t, j.id, CAST(j.id AS BIGINT), j.account, 'gpu', j.qos, j.state, j.reason, j.submit, j.gpus
        FROM generate_series($start, $end, INTERVAL 15 MINUTE) g(t),
             (VALUES ('9001', 'a', 'normal', 'PENDING', 'Priority', $end - INTERVAL 1 HOUR, 8),
                     ('9002', 'a', 'normal', 'PENDING', 'Priority', $end - INTERVAL 1 HOUR, 8),
                     ('9003', 'a', 'high', 'PENDING', 'Resources', $end - INTERVAL 1 HOUR, 8),
                     ('9004', 'b', 'normal', 'PENDING', 'Priority', $end - INTERVAL 20 HOUR, 4),
                     ('9005', 'b', 'normal', 'PENDING', 'JobHeldUser', $end - INTERVAL 30 HOUR, 2),
                     ('8001', 'a', 'normal', 'RUNNING', 'None', $start - INTERVAL 1 HOUR, 5),
                     ('8002', 'b', 'normal', 'RUNNING', 'None', $start - INTERVAL 1 HOUR, 8))
               j(id, account, qos, state, reason, submit, gpus)
        WHERE j.submit <= t
    """,
    )
    # sacct: 4 COMPLETED (a) and 1 FAILED (b) per hour; the last hour adds 12 FAILED, 3 NODE_FAIL, 25 requeues.
    _exec(
        con,
        """
        INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, attempt, account, "partition", state,
                          start_time, end_time, elapsed_seconds, gpus, gpu_type)
        SELECT $cluster, CAST(id AS VARCHAR), id, e - INTERVAL 2 HOUR, 1, account, 'gpu', state,
               e - INTERVAL 1 HOUR, e, 3600, 1, 'h100'
        FROM (SELECT row_number() OVER () AS id, * FROM (
              SELECT $start + h * INTERVAL 1 HOUR + k * INTERVAL 10 MINUTE AS e,
                     CASE WHEN k < 4 THEN 'a' ELSE 'b' END AS account,
                     CASE WHEN k < 4 THEN 'COMPLETED' ELSE 'FAILED' END AS state
              FROM range(0, 72) r(h), range(0, 5) s(k)
              UNION ALL SELECT $end - INTERVAL 50 MINUTE + k * INTERVAL 3 MINUTE, 'b', 'FAILED' FROM range(0, 12) s(k)
              UNION ALL SELECT $end - INTERVAL 40 MINUTE + k * INTERVAL 5 MINUTE, 'a', 'NODE_FAIL' FROM range(0, 3) s(k)))
    """,
    )
    _exec(
        con,
        """
        INSERT INTO jobs (cluster, job_id, job_id_raw, submit_time, attempt, account, "partition", state, gpus)
        SELECT $cluster, CAST(50000 + k AS VARCHAR), 50000 + k, $end - INTERVAL 55 MINUTE + k * INTERVAL 80 SECOND,
               2, 'a', 'gpu', 'PENDING', 1
        FROM range(0, 40) s(k)
    """,
    )
    # sdiag every 15 minutes; backfill stops cycling 40 minutes before END.
    _exec(
        con,
        """
        INSERT INTO sched_stats (cluster, snapshot_time, server_thread_count, agent_queue_size, jobs_pending,
                                 jobs_running, main_last_cycle_us, main_mean_cycle_us, bf_last_cycle_us,
                                 bf_mean_cycle_us, bf_last_depth, bf_last_queue_length, bf_backfilled_jobs,
                                 bf_last_cycle_when)
        SELECT $cluster, t, 3, 0, 4, 2, 1500, 1200, 250000, 200000, 40, 4, 100,
               CASE WHEN t < $end - INTERVAL 40 MINUTE THEN t - INTERVAL 30 SECOND
                    ELSE $end - INTERVAL 40 MINUTE END
        FROM generate_series($start, $end, INTERVAL 15 MINUTE) g(t)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO shares (cluster, snapshot_time, account, "user", parent, raw_shares, norm_shares, raw_usage,
                            norm_usage, effectv_usage, fairshare, level_fs)
        SELECT $cluster, t, s.account, s.usr, 'root', 1, s.shares, 1000, s.eff, s.eff, s.fs, s.shares / s.eff
        FROM generate_series($start, $end, INTERVAL 15 MINUTE) g(t),
             (VALUES ('a', '', 0.6, 0.8, NULL), ('b', '', 0.4, 0.1, NULL), ('a', 'alice', 1.0, 0.8, 0.3))
               s(account, usr, shares, eff, fs)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO controller_pings (cluster, snapshot_time, host, role, up)
        SELECT $cluster, t, 'ctl1', 'primary', true FROM generate_series($start, $end, INTERVAL 15 MINUTE) g(t)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO collector_runs (cluster, collector, started_at, finished_at, rows, status, error, duration_seconds)
        SELECT $cluster, c.name, t, t + INTERVAL 2 SECOND, 10,
               CASE WHEN c.name = 'sshare' AND t > $end - INTERVAL 30 MINUTE THEN 'error' ELSE 'ok' END,
               CASE WHEN c.name = 'sshare' AND t > $end - INTERVAL 30 MINUTE THEN 'sshare: timeout' END, 2.0
        FROM generate_series($start, $end - INTERVAL 1 MINUTE, INTERVAL 5 MINUTE) g(t),
             (VALUES ('sinfo'), ('squeue'), ('sshare'), ('sdiag'), ('sacct')) c(name)
        WHERE NOT (c.name = 'sacct' AND t > $end - INTERVAL 2 HOUR - INTERVAL 2 SECOND)
    """,
    )
    # NVML: per GPU per minute for g01 and g02 (the nodes that run jobs).
    _exec(
        con,
        """
        INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, gpu_index, model, samples, util_gpu_mean,
                                 temp_gpu_max_celsius, power_mean_watts, throttle_seconds, ecc_corrected_total,
                                 ecc_uncorrected_total, remapped_pending, remapped_failed)
        SELECT $cluster, n.node, n.node || '-gpu' || i, t, i, 'h100', 6,
               CASE WHEN t >= $end - INTERVAL 2 HOUR THEN 20.0 ELSE 80.0 END,
               CASE WHEN n.node = 'g02' AND i = 3 AND t > $end - INTERVAL 1 HOUR THEN 88.0 ELSE 65.0 END,
               500.0,
               CASE WHEN n.node = 'g02' AND i = 3 AND t > $end - INTERVAL 1 HOUR THEN 30.0 ELSE 0.0 END,
               0,
               CASE WHEN n.node = 'g01' AND i = 0 AND t >= $end - INTERVAL 5 MINUTE THEN 1 ELSE 0 END,
               false,
               n.node = 'g02' AND i = 5 AND t >= $end - INTERVAL 1 HOUR
        FROM generate_series($start, $end, INTERVAL 1 MINUTE) g(t), (VALUES ('g01'), ('g02')) n(node), range(0, 8) r(i)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, gpu_index, model)
        SELECT $cluster, n.node, n.node || '-gpu' || i, t, i, 'h100'
        FROM generate_series($start, $end - INTERVAL 1 MINUTE, INTERVAL 1 HOUR) g(t), (VALUES ('g01'), ('g02')) n(node),
             range(0, 8) r(i)
        UNION ALL
        SELECT $cluster, n.node, n.node || '-gpu' || i, $end - INTERVAL 1 MINUTE, i, 'h100'
        FROM (VALUES ('g01'), ('g02')) n(node), range(0, 8) r(i) WHERE NOT (n.node = 'g02' AND i = 7)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO gpu_events (cluster, node, gpu_uuid, event_time, event_type, xid, source) VALUES
        ($cluster, 'g02', 'g02-gpu7', $end - INTERVAL 5 MINUTE, 'xid', 79, 'kmsg'),
        ($cluster, 'g01', 'g01-gpu2', $end - INTERVAL 10 HOUR, 'xid', 13, 'kmsg')
    """,
    )
    if with_marts:
        build_marts(con)


def build_marts(con: duckdb.DuckDBPyConnection) -> None:
    """Mart rows as the pipelines would write them at END."""
    _exec(
        con,
        """
        INSERT INTO mart_usage_counters VALUES
        ($cluster, 'a', 'gpu', 'h100', 360000, 200, -3600, -2, $end - INTERVAL 10 MINUTE),
        ($cluster, 'b', 'gpu', 'h100', 180000, 100, 0, 0, $end - INTERVAL 10 MINUTE)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_wait_times
        SELECT $cluster, CAST(d AS DATE), 'gpu', 'a', '5-8', 'h100', 20,
               300, CASE WHEN CAST(d AS DATE) = CAST($end AS DATE) THEN 3000 ELSE 600 END, 4000, 500, 5000
        FROM generate_series($start, $end, INTERVAL 1 DAY) g(d)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_occupancy
        SELECT $cluster, b, 'gpu', 'h100', 24, 13, 11 * 900, 8 * 900, 2, 4, 3 * 900, 3.0 / 11
        FROM generate_series($start, $end - INTERVAL 15 MINUTE, INTERVAL 15 MINUTE) g(b)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_backfill_daily
        SELECT $cluster, CAST(d AS DATE), 'gpu', s.sched_by, s.jobs, s.jobs * 1.0, s.jobs / 100.0, s.jobs / 100.0
        FROM generate_series($start, $end, INTERVAL 1 DAY) g(d), (VALUES ('main', 70), ('backfill', 30)) s(sched_by, jobs)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_sched_deltas (cluster, snapshot_time, prev_snapshot_time, reset, interval_seconds,
            jobs_submitted, jobs_started, jobs_completed, jobs_canceled, jobs_failed, main_cycles, bf_cycles,
            bf_backfilled_jobs)
        SELECT $cluster, t, t - INTERVAL 15 MINUTE, false, 900, 5, 5, 4, 0, 1, 15,
               CASE WHEN t <= $end - INTERVAL 40 MINUTE THEN 30 ELSE 0 END, 1
        FROM generate_series($start + INTERVAL 15 MINUTE, $end, INTERVAL 15 MINUTE) g(t)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_fault_impact (cluster, fault_time, node, fault_source, fault_kind, job_id_raw, submit_time,
            attempt, job_state, account, "partition", gpu_hours_lost, came_back, completed_later)
        SELECT $cluster, $end - INTERVAL 40 MINUTE + k * INTERVAL 5 MINUTE, 'g03', 'node_event', 'DOWN', 70000 + k,
               $end - INTERVAL 3 HOUR, 1, 'NODE_FAIL', 'a', 'gpu', 8.0, true, false
        FROM range(0, 3) s(k)
        -- the first of the 12 late FAILED attempts of b (job 361) died as its node went down: a system failure
        UNION ALL SELECT $cluster, $end - INTERVAL 51 MINUTE, 'g02', 'node_event', 'DOWN', 361,
               $end - INTERVAL 170 MINUTE, 1, 'FAILED', 'b', 'gpu', 1.0, false, false
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_node_reliability VALUES
        ($cluster, 'g01', 'gpu', 259200, 3, 1800, 85800, 600, 4, 2),
        ($cluster, 'g03', 'gpu', 259200, 1, 7200, 252000, NULL, 1, 0),
        ($cluster, 'g04', 'gpu', 259200, 1, 108000, 151200, NULL, 1, 1)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_goodput VALUES
        ($cluster, 'gpu', 1, 160000, 160000, 300, 9798, 0.061, 0.02, 200, 600, 1, 0.939, 0.98),
        ($cluster, 'gpu', 4, 160000, 40000, 300, 4899, 0.122, 0.08, 20, 600, 2, 0.878, 0.92)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_node_incidents VALUES
        ($cluster, 'g01', $end - INTERVAL 2 DAY, $end - INTERVAL 47 HOUR, 3600, 'hardware', true, 1, 0, 1,
         'DOWN,xid:79', 'xid 79', 'root', '79'),
        ($cluster, 'g01', $end - INTERVAL 1 DAY, $end - INTERVAL 23 HOUR, 3600, 'maintenance', false, 1, 0, 0,
         'DRAIN', 'kernel upgrade', 'root', NULL),
        ($cluster, 'g04', $end - INTERVAL 30 HOUR, NULL, 108000, 'hardware', true, 1, 8, 0,
         'DRAIN', 'xid 79 RMA', 'root', NULL)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_capacity_daily (cluster, day, "partition", gpu_model, capacity_gpu_seconds,
            allocated_gpu_seconds, idle_gpu_seconds, down_gpu_seconds, reserved_gpu_seconds, capacity_cost_usd,
            allocated_cost_usd, idle_cost_usd, down_cost_usd, reserved_cost_usd, powered_down_gpu_seconds)
        SELECT $cluster, CAST(d AS DATE), 'gpu', 'h100', 32 * 86400, 13 * 86400, 11 * 86400, 8 * 86400, 0,
               1536, 624, 528, 384, 0, 0
        FROM generate_series($start, $end, INTERVAL 1 DAY) g(d)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_drift (cluster, as_of, signal, entity_type, entity, node, value, baseline, score, threshold,
                                breached, method, detail)
        SELECT $cluster, a, d.signal, d.etype, d.entity, d.node, d.v, d.b, d.score, 4.0, d.score > 4.0, d.method, ''
        FROM (VALUES ($end - INTERVAL 2 HOUR), ($end - INTERVAL 10 MINUTE)) t(a),
             (VALUES ('gpu_temperature_vs_fleet', 'gpu', 'g02-gpu3', 'g02', 88.0, 65.0, 6.5, 'robust_z_fleet_same_util'),
                     ('gpu_temperature_vs_fleet', 'gpu', 'g02-gpu2', 'g02', 65.0, 65.0, 0.0, 'robust_z_fleet_same_util'),
                     ('node_ecc_uncorrected', 'node', 'g01', 'g01', 1.0, 0.0, 9.0, 'robust_z_own_history'),
                     ('partition_failure_rate', 'partition', 'gpu', NULL, 0.3, 0.2, 1.0, 'robust_z_trailing'))
               d(signal, etype, entity, node, v, b, score, method)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_fairshare_drift
        SELECT $cluster, CAST(d AS DATE), f.account, f.u7, f.u30, f.target, f.u7 / f.target, f.state, NULL, NULL,
               f.starved, 0
        FROM generate_series($start, $end, INTERVAL 1 DAY) g(d),
             (VALUES ('a', 0.9, 0.85, 0.6, 'over_served', 0), ('b', 0.1, 0.15, 0.4, 'starved', 2))
               f(account, u7, u30, target, state, starved)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_idle_gpus_daily
        SELECT $cluster, CAST(d AS DATE), 'a', 'alice', 100, 90, 30, 30.0 / 90, 1
        FROM generate_series($start, $end, INTERVAL 1 DAY) g(d)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_job_efficiency (cluster, job_id, job_id_raw, attempt, submit_time, account, "user", gpus,
            util_mean, gpu_seconds, sampled_gpu_seconds, idle_gpu_seconds, zero_util, alloc_start, alloc_end)
        SELECT $cluster, CAST(60000 + k AS VARCHAR), 60000 + k, 1, $start, 'a', 'alice', 1, CASE WHEN k < 2 THEN 0 ELSE 70 END,
               3600, 3600, CASE WHEN k < 2 THEN 3600 ELSE 0 END, k < 2, $start + k * INTERVAL 1 HOUR,
               $start + (k + 1) * INTERVAL 1 HOUR
        FROM range(0, 5) s(k)
    """,
    )
    _exec(
        con,
        """
        INSERT INTO mart_cost_efficiency_daily (cluster, day, account, gpu_seconds, cost_usd, sampled_gpu_seconds,
            sampled_cost_usd, idle_gpu_seconds, idle_cost_usd, useful_gpu_seconds, useful_share,
            cost_per_useful_gpu_hour, energy_joules, energy_kwh, energy_cost_usd, gpm_gpu_seconds, activity_source)
        SELECT $cluster, CAST(d AS DATE), account, 86400, 48, 43200, 24, 3600, 2, 30240, 0.7, 24 / 8.4,
               7.2e7, 20, 0, 0, 'gpu_util'
        FROM generate_series($start, $end, INTERVAL 1 DAY) g(d), (VALUES ('a'), ('b')) a(account)
    """,
    )
    # Budgets of November (the period holding END): a's $1,000 with $300 used (30 %, forecast 60 %) and b's
    # 500 GPU-hours with 100 used (20 %, forecast 40 %): the budget panels have data, the budget alerts
    # (80 % used, forecast over 100 %) stay quiet.
    _exec(
        con,
        """
        INSERT INTO mart_budget_period (cluster, account, budget, source, unit, period_start, period_end, amount,
            used, spent, forecast, elapsed_ratio, usage_as_of, as_of)
        VALUES ($cluster, 'a', 'usd', 'config', 'usd', DATE '2026-11-01', DATE '2026-12-01', 1000, 300, 300, 600,
                0.5, $start, $start),
               ($cluster, 'b', 'gpu_hours', 'config', 'gpu_hours', DATE '2026-11-01', DATE '2026-12-01', 500, 100,
                100, 200, 0.5, $start, $start)
    """,
    )
    # Health verdicts: not typed out by hand but computed by the health pipeline from the raw rows above (its
    # rules are unit-tested on their own in tests/pipelines/test_health.py).
    from slurmscope.pipelines.runner import run_pipelines

    from slurmscope.config import load_config

    cfg = load_config(env={}).with_overrides(cluster={"name": CLUSTER})
    written = run_pipelines(con, cfg, full=True, only=["health"], now=END)
    assert min(written.values()) > 0, written
