-- An auditable monthly report (slurmscope/report.py, docs/report.md): the rates applied, the reconciliation of
-- sinfo's allocation with sacct's charges, energy cost "not configured", "started by" GPU-hours inside the
-- month. pipelines/cost.py and pipelines/backfill.py, docs/pipelines.md#cost and #backfill-efficiency.

-- The $/GPU-hour the cost pipeline applied per billing day to each (partition, GPU model) of the capacity rows
-- (partition sets) and the usage rows, the price-book key it came from (billing.rates: "partition:<name>",
-- a lower-case GPU model, or "default") and, for an amortised entry, its inputs (NULL for a plain rate).
CREATE TABLE mart_cost_rates_daily (
    cluster                VARCHAR NOT NULL,
    day                    DATE NOT NULL,
    "partition"            VARCHAR NOT NULL,
    gpu_model              VARCHAR NOT NULL,
    rate_per_gpu_hour      DOUBLE NOT NULL,
    price_key              VARCHAR NOT NULL,
    kind                   VARCHAR NOT NULL,   -- 'rate' | 'amortised'
    purchase_usd           DOUBLE,
    lifetime_years         DOUBLE,
    power_kw               DOUBLE,
    usd_per_kwh            DOUBLE,
    pue                    DOUBLE,
    overhead_usd_per_year  DOUBLE,
    gpus_per_unit          DOUBLE
);
-- unique key (kept by the runner's delete-then-insert): cluster, day, "partition", gpu_model

-- Per billing day: GPU-seconds allocated in sinfo snapshots (= mart_capacity_daily.allocated_gpu_seconds)
-- against GPU-seconds charged from sacct (= mart_cost_daily.gpu_seconds), with the difference in causes:
-- allocated - charged = unrecorded - unseen + sampling - gap (exact, integer microseconds underneath).
CREATE TABLE mart_cost_reconciliation_daily (
    cluster                  VARCHAR NOT NULL,
    day                      DATE NOT NULL,
    allocated_gpu_seconds    DOUBLE NOT NULL,
    charged_gpu_seconds      DOUBLE NOT NULL,
    unrecorded_gpu_seconds   DOUBLE NOT NULL,  -- sinfo allocated, no sacct attempt on the node at the snapshot
    unseen_gpu_seconds       DOUBLE NOT NULL,  -- sacct attempts on the node beyond what sinfo showed allocated
    sampling_gpu_seconds     DOUBLE NOT NULL,  -- attempts starting or ending between two snapshots (signed)
    gap_gpu_seconds          DOUBLE NOT NULL   -- charged while no snapshot covered the node
);
-- unique key (kept by the runner's delete-then-insert): cluster, day

-- The same per billing month, with the invoice and the dollars: difference_gpu_seconds = allocated - charged;
-- after_invoice_gpu_seconds = charged - invoiced (sacct changes after a frozen invoice was issued);
-- difference_cost_usd = capacity - invoiced - unallocated = allocated - usage + blocked (cents).
CREATE TABLE mart_cost_reconciliation_monthly (
    cluster                    VARCHAR NOT NULL,
    month                      DATE NOT NULL,
    allocated_gpu_seconds      DOUBLE NOT NULL,
    charged_gpu_seconds        DOUBLE NOT NULL,
    difference_gpu_seconds     DOUBLE NOT NULL,
    unrecorded_gpu_seconds     DOUBLE NOT NULL,
    unseen_gpu_seconds         DOUBLE NOT NULL,
    sampling_gpu_seconds       DOUBLE NOT NULL,
    gap_gpu_seconds            DOUBLE NOT NULL,
    invoiced_gpu_seconds       DOUBLE NOT NULL,  -- latest version of mart_cost_monthly
    after_invoice_gpu_seconds  DOUBLE NOT NULL,
    capacity_cost_usd          DECIMAL(18,2) NOT NULL,
    allocated_cost_usd         DECIMAL(18,2) NOT NULL,  -- sinfo's allocated GPUs priced (mart_capacity_daily)
    invoiced_cost_usd          DECIMAL(18,2) NOT NULL,
    usage_cost_usd             DECIMAL(18,2) NOT NULL,  -- invoiced less spread unallocated capacity
    unallocated_cost_usd       DECIMAL(18,2) NOT NULL,  -- mart_cost_unallocated_monthly idle + down + reserved
    blocked_cost_usd           DECIMAL(18,2) NOT NULL,  -- idle dollars already paid through billing TRES
    difference_cost_usd        DECIMAL(18,2) NOT NULL
);
-- unique key (kept by the runner's delete-then-insert): cluster, month

-- Waste by the billing day GPU attempts ended (final once the day is over), per account: attempts ended, and
-- of them those that failed (mart_cost_daily's failed states) and those requeued, with their whole GPU-seconds
-- and dollars at their rate (billed GPU-equivalents with billing.charge_by = "billing_tres").
CREATE TABLE mart_cost_waste_daily (
    cluster                VARCHAR NOT NULL,
    day                    DATE NOT NULL,
    account                VARCHAR NOT NULL,
    attempts               BIGINT NOT NULL,
    failed_attempts        BIGINT NOT NULL,
    failed_gpu_seconds     DOUBLE NOT NULL,
    failed_cost_usd        DOUBLE NOT NULL,
    requeued_attempts      BIGINT NOT NULL,
    requeued_gpu_seconds   DOUBLE NOT NULL,
    requeued_cost_usd      DOUBLE NOT NULL
);
-- unique key (kept by the runner's delete-then-insert): cluster, day, account

-- No electricity price (billing.energy_usd_per_kwh = 0, the default) gives NULL, "not configured", not $0.
ALTER TABLE mart_cost_efficiency_daily ALTER COLUMN energy_cost_usd DROP NOT NULL;
UPDATE mart_cost_efficiency_daily SET energy_cost_usd = NULL WHERE energy_cost_usd = 0 AND energy_kwh > 0;

-- mart_backfill_daily.gpu_hours is now the GPU-hours held on the row's day (it was each attempt's whole
-- GPU-hours on its start day), and the new cost marts are empty for past days: forgetting the two pipelines'
-- last runs makes the next `pipelines run` rebuild them whole (a frozen invoice is carried over unchanged).
DELETE FROM pipeline_runs WHERE pipeline IN ('backfill', 'cost');
