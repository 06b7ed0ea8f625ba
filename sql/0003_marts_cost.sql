-- Cost marts (pipelines/cost.py). Days and months are cut in billing.timezone; docs/pipelines.md#cost.
-- Money that finance reconciles (capacity, monthly) is DECIMAL cents, rounded by largest remainder.

-- Allocation per day: GPU-seconds of every attempt's [start, end or now) overlapping the billing day.
CREATE TABLE mart_cost_daily (
    cluster               VARCHAR NOT NULL,
    day                   DATE NOT NULL,          -- billing-zone calendar day
    account               VARCHAR NOT NULL,
    "user"                VARCHAR NOT NULL,
    "partition"           VARCHAR NOT NULL,
    qos                   VARCHAR NOT NULL,
    gpu_model             VARCHAR NOT NULL,       -- '' when AllocTRES named no type
    gpu_seconds           DOUBLE NOT NULL,
    cost_usd              DOUBLE NOT NULL,        -- unrounded; monthly rows are the rounded invoice
    failed_gpu_seconds    DOUBLE NOT NULL,        -- attempts that ended FAILED/NODE_FAIL/TIMEOUT/OOM/BOOT_FAIL/DEADLINE/REQUEUED/PREEMPTED
    failed_cost_usd       DOUBLE NOT NULL,
    requeued_gpu_seconds  DOUBLE NOT NULL,        -- attempts followed by a later attempt of the same job
    requeued_cost_usd     DOUBLE NOT NULL,
    running_gpu_seconds   DOUBLE NOT NULL         -- part accrued by attempts still running at `now`
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, day, account, "user", "partition", qos, gpu_model

-- Capacity per day from sinfo node-state intervals: allocated + idle + down + reserved = capacity.
CREATE TABLE mart_capacity_daily (
    cluster                VARCHAR NOT NULL,
    day                    DATE NOT NULL,
    "partition"            VARCHAR NOT NULL,      -- a node in several partitions: names joined by ','
    gpu_model              VARCHAR NOT NULL,
    capacity_gpu_seconds   DOUBLE NOT NULL,
    allocated_gpu_seconds  DOUBLE NOT NULL,
    idle_gpu_seconds       DOUBLE NOT NULL,
    down_gpu_seconds       DOUBLE NOT NULL,       -- DOWN, DRAIN(ED), FAIL, NOT_RESPONDING, ... minus allocated
    reserved_gpu_seconds   DOUBLE NOT NULL,       -- RESERVED / MAINT, minus allocated
    capacity_cost_usd      DECIMAL(18,2) NOT NULL,
    allocated_cost_usd     DECIMAL(18,2) NOT NULL,
    idle_cost_usd          DECIMAL(18,2) NOT NULL,
    down_cost_usd          DECIMAL(18,2) NOT NULL,
    reserved_cost_usd      DECIMAL(18,2) NOT NULL
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, day, "partition", gpu_model

-- Monthly invoice per account and user; every version is kept, readers take max(version) per month.
CREATE TABLE mart_cost_monthly (
    cluster               VARCHAR NOT NULL,
    month                 DATE NOT NULL,          -- first day of the billing-zone month
    account               VARCHAR NOT NULL,
    "user"                VARCHAR NOT NULL,
    gpu_hours             DOUBLE NOT NULL,
    cost_usd              DECIMAL(18,2) NOT NULL, -- largest remainder: rows sum to the rounded month total
    share                 DOUBLE NOT NULL,        -- of the month's GPU-hours in this cluster
    version               INTEGER NOT NULL,       -- 1 for the first issue; a re-issue of a closed month adds 1
    frozen                BOOLEAN NOT NULL,       -- closed month: never rewritten, only re-issued
    issued_at             TIMESTAMPTZ NOT NULL    -- the run's `now` when this version was computed
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, month, account, "user", version

-- Monotone counters for the exporter: GPU-seconds and cost up to `now`, running jobs included.
-- A recomputation that comes out lower never lowers the counter; the difference goes to *_correction.
CREATE TABLE mart_usage_counters (
    cluster                   VARCHAR NOT NULL,
    account                   VARCHAR NOT NULL,
    "partition"               VARCHAR NOT NULL,
    gpu_model                 VARCHAR NOT NULL,
    gpu_seconds_total         DOUBLE NOT NULL,
    cost_usd_total            DOUBLE NOT NULL,
    gpu_seconds_correction    DOUBLE NOT NULL,    -- recomputed minus reported, <= 0
    cost_usd_correction       DOUBLE NOT NULL,
    updated_at                TIMESTAMPTZ NOT NULL
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, account, "partition", gpu_model

-- When each pipeline last ran: the default start of the next incremental window.
CREATE TABLE pipeline_runs (
    cluster               VARCHAR NOT NULL,
    pipeline              VARCHAR NOT NULL,
    run_at                TIMESTAMPTZ NOT NULL,   -- the run's `now`
    window_start          TIMESTAMPTZ,
    window_end            TIMESTAMPTZ,
    rows                  BIGINT,
    status                VARCHAR NOT NULL,       -- 'ok' | 'error'
    error                 VARCHAR,
    duration_seconds      DOUBLE,
    PRIMARY KEY (cluster, pipeline, run_at)
);
