-- Budgets (config `budgets`, pipelines/cost.py budgets(), docs/pipelines.md#budgets): burn-down and
-- month-end forecast per billing month and budgeted account, from the latest invoice version.
CREATE TABLE mart_budget_monthly (
    cluster               VARCHAR NOT NULL,
    month                 DATE NOT NULL,          -- first day of the billing-zone month
    account               VARCHAR NOT NULL,
    budget_usd            DOUBLE,                 -- budgets.<account>.usd_per_month; NULL when not set
    budget_gpu_hours      DOUBLE,                 -- budgets.<account>.gpu_hours_per_month; NULL when not set
    spent_usd             DOUBLE NOT NULL,        -- sum of the month's invoice rows (running attempts up to as_of)
    spent_gpu_hours       DOUBLE NOT NULL,
    elapsed_ratio         DOUBLE NOT NULL,        -- share of the billing month passed at as_of (0-1)
    forecast_usd          DOUBLE,                 -- spent / elapsed_ratio; NULL in the month's first day
    forecast_gpu_hours    DOUBLE,
    as_of                 TIMESTAMPTZ NOT NULL    -- the run's now
);
-- unique key (kept by the runner's delete-then-insert): cluster, month, account
