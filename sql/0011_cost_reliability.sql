-- Cost: unallocated capacity spread over accounts (billing.idle_cost = "spread"), usage-weighted cost and
-- energy from NVML; reliability: job outcomes by node, and by ISO week. docs/pipelines.md#cost, #reliability.

-- This row's share of the day's unallocated capacity cost (idle + down + reserved, mart_capacity_daily) in
-- proportion to its GPU-seconds among the day's usage; 0 when billing.idle_cost = "separate".
ALTER TABLE mart_cost_daily ADD COLUMN spread_cost_usd DOUBLE DEFAULT 0;

-- Part of cost_usd that is spread unallocated capacity; cost_usd - spread_cost_usd is the row's own usage.
-- Rows issued before this migration (or with idle_cost = "separate") carry 0.
ALTER TABLE mart_cost_monthly ADD COLUMN spread_cost_usd DECIMAL(18,2) DEFAULT 0;

-- Usage-weighted cost per billing-zone day and account: what the charged GPUs did, from NVML samples joined
-- through gpu_jobs (whole GPUs). Telemetry may cover only some nodes: sampled_* is the covered part.
CREATE TABLE mart_cost_efficiency_daily (
    cluster                   VARCHAR NOT NULL,
    day                       DATE NOT NULL,
    account                   VARCHAR NOT NULL,
    gpu_seconds               DOUBLE NOT NULL,  -- charged (sacct) GPU-seconds, = sum of mart_cost_daily
    cost_usd                  DOUBLE NOT NULL,  -- their allocation cost, = sum of mart_cost_daily
    sampled_gpu_seconds       DOUBLE NOT NULL,  -- held GPU-seconds (gpu_jobs) with an NVML sample
    sampled_cost_usd          DOUBLE NOT NULL,  -- their cost at the attempt's rate
    idle_gpu_seconds          DOUBLE NOT NULL,  -- allocated but idle: sampled, minute mean util < drift.idle_util_percent
    idle_cost_usd             DOUBLE NOT NULL,
    useful_gpu_seconds        DOUBLE NOT NULL,  -- sum of held seconds x util_gpu_mean / 100 over sampled minutes
    useful_share              DOUBLE,           -- useful / sampled; NULL when nothing was sampled
    cost_per_useful_gpu_hour  DOUBLE,           -- sampled_cost_usd / (useful_gpu_seconds / 3600)
    energy_joules             DOUBLE NOT NULL,  -- NVML energy counter (else mean power x 60) pro-rated to held seconds
    energy_kwh                DOUBLE NOT NULL,
    energy_cost_usd           DOUBLE NOT NULL   -- energy_kwh x billing.pue x billing.energy_usd_per_kwh
);
-- unique key (kept by the runner's delete-then-insert): cluster, day, account

-- Ended attempts by node, day of their end and terminal state. A multi-node attempt counts once on each node
-- of its NodeList and brings each node an equal share of its GPU-hours (sacct gives no per-node GPU count),
-- so gpu_hours add up to mart_job_outcomes_daily over nodes while jobs count per node.
CREATE TABLE mart_job_outcomes_node_daily (
    cluster       VARCHAR NOT NULL,
    day           DATE NOT NULL,
    node          VARCHAR NOT NULL,
    state         VARCHAR NOT NULL,
    jobs          BIGINT NOT NULL,        -- attempts that ran on the node
    gpu_hours     DOUBLE NOT NULL         -- elapsed x GPUs / nodes of those attempts
);
-- unique key (kept by the runner's delete-then-insert): cluster, day, node, state
-- The weekly outcomes over these days are views: sql/views/mart_job_outcomes_*weekly.sql.
