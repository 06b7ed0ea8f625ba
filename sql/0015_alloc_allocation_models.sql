-- Allocation models (pipelines/cost.py, docs/pipelines.md#cost): billed GPU-equivalents
-- (billing.charge_by), powered-off GPUs outside capacity, and the unallocated line per month and scope.

-- GPU-seconds the row is charged for: = gpu_seconds with billing.charge_by = "gpu"; with "billing_tres", the
-- attempts' billing TRES / their partition's GRES/gpu weight (never less than their GPUs) x overlap.
-- cost_usd = billed_gpu_seconds / 3600 x rate. Rows written before this migration were charged by GPU.
ALTER TABLE mart_cost_daily ADD COLUMN billed_gpu_seconds DOUBLE;
UPDATE mart_cost_daily SET billed_gpu_seconds = gpu_seconds;

-- Free GPUs of powered-off nodes (POWERED_DOWN / POWERING_DOWN, slurm_states.NODE_GPUS_POWERED_DOWN_FLAGS):
-- not idle and not in capacity_gpu_seconds; shown so that capacity can be told from installed GPUs.
ALTER TABLE mart_capacity_daily ADD COLUMN powered_down_gpu_seconds DOUBLE DEFAULT 0;

-- Capacity dollars no invoice row carries, per billing month and scope (partition set x GPU model of
-- mart_capacity_daily): with idle_cost = "separate" all idle, down and reserved dollars; with "spread" the
-- down dollars (unless billing.bill_down) and the pools of a scope nobody used that month.
-- sum(mart_cost_monthly.cost_usd) + sum(idle + down + reserved here) = usage + unallocated capacity, to the cent.
CREATE TABLE mart_cost_unallocated_monthly (
    cluster               VARCHAR NOT NULL,
    month                 DATE NOT NULL,
    "partition"           VARCHAR NOT NULL,
    gpu_model             VARCHAR NOT NULL,
    idle_cost_usd         DECIMAL(18,2) NOT NULL,
    down_cost_usd         DECIMAL(18,2) NOT NULL,
    reserved_cost_usd     DECIMAL(18,2) NOT NULL,
    blocked_cost_usd      DECIMAL(18,2) NOT NULL  -- idle dollars already charged through billing TRES (not kept)
);
-- unique key (kept by the runner's delete-then-insert): cluster, month, "partition", gpu_model

-- Reserved GPUs of a reservation's nodes charged to the accounts it names (equal parts), per billing day and
-- scope, with idle_cost = "spread"; capped at mart_capacity_daily.reserved_cost_usd of the scope-day. These
-- dollars are invoice rows of the account with user '' and leave the scope's spread pool.
CREATE TABLE mart_cost_reservation_daily (
    cluster               VARCHAR NOT NULL,
    day                   DATE NOT NULL,
    "partition"           VARCHAR NOT NULL,
    gpu_model             VARCHAR NOT NULL,
    reservation           VARCHAR NOT NULL,
    account               VARCHAR NOT NULL,
    cost_usd              DECIMAL(18,2) NOT NULL
);
-- unique key (kept by the runner's delete-then-insert): cluster, day, "partition", gpu_model, reservation, account
