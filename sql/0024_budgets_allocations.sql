-- Budgets per period, Slurm's allocations and partitions' billing weights (issue 16, items 3 and 4).

-- scontrol show partition --oneliner (collectors/partitions.py): each partition's settings as key/value rows
-- per snapshot. TRESBillingWeights is a partition setting (slurm.conf(5)) that `scontrol show config` never
-- prints; billing.charge_by = "billing_tres" reads it from here when billing.tres_billing_weights is not set.
CREATE TABLE slurm_partitions (
    cluster            VARCHAR NOT NULL,
    snapshot_time      TIMESTAMPTZ NOT NULL,
    "partition"        VARCHAR NOT NULL,
    key                VARCHAR NOT NULL,
    value              VARCHAR,
    PRIMARY KEY (cluster, snapshot_time, "partition", key)
);

-- sshare's GrpTRESRaw: the decayed TRES-minutes of the association and its children that Slurm compares
-- with GrpTRESMins (sshare prints usage_tres_raw / 60, truncated, as acct_policy.c compares it). NULL in
-- snapshots taken before this migration (the live command did not ask for it).
ALTER TABLE shares ADD COLUMN grp_tres_raw VARCHAR;

-- Budgets by period and Slurm's allocations (pipelines/budgets.py, docs/pipelines.md#budgets), rewritten by
-- each cost run: one row per account, budget and period.
--   source 'config': budgets.<account> (period month, quarter, year or {start, end} months); every period
--     from the account's first invoiced month to the current one; used = spent = its invoice rows (latest
--     version) of the period's months, in usd or gpu_hours.
--   source 'slurm': each GrpTRESMins entry of an account association in the last sshare snapshot, for the
--     current PriorityUsageResetPeriod (NULL bounds when Slurm's usage never resets); amount = the limit in
--     TRES-hours; used = sshare's GrpTRESRaw / 60 (what Slurm compares with the limit: decayed, times the
--     QOS UsageFactor); spent = the subtree's GPU-hours since the reset from mart_cost_daily (gres/gpu only).
CREATE TABLE mart_budget_period (
    cluster               VARCHAR NOT NULL,
    account               VARCHAR NOT NULL,
    budget                VARCHAR NOT NULL,   -- 'usd' | 'gpu_hours' | 'GrpTRESMins:<tres>' (the metrics' label)
    source                VARCHAR NOT NULL,   -- 'config' | 'slurm'
    unit                  VARCHAR NOT NULL,   -- 'usd' | 'gpu_hours' | 'tres_hours' (billing- or cpu-hours, ...)
    period_start          DATE,               -- first day (billing zone); NULL: Slurm's usage never resets
    period_end            DATE,               -- first day after the period
    amount                DOUBLE NOT NULL,    -- the budget or the GrpTRESMins limit / 60, in unit
    used                  DOUBLE,             -- what the budget is consumed by (see above); NULL: not collected
    spent                 DOUBLE,             -- slurmscope's undecayed count over the period; NULL: not countable
    forecast              DOUBLE,             -- used / elapsed_ratio at the period's end; NULL early or decaying
    elapsed_ratio         DOUBLE,             -- share of the period passed at as_of (0-1)
    usage_as_of           TIMESTAMPTZ,        -- the sshare snapshot behind `used` (slurm), else as_of
    as_of                 TIMESTAMPTZ NOT NULL
);
-- unique key (kept by the runner's delete-then-insert): cluster, account, budget, period_start
