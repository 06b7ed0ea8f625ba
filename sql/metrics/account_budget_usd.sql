-- slurmscope_account_budget_usd (gauge): mart_budget_monthly (month of now)
CREATE OR REPLACE MACRO metric_account_budget_usd(cluster_name, now) AS TABLE
    SELECT cluster, account, budget_usd AS value
    FROM mart_budget_monthly
    WHERE cluster = cluster_name AND month = date_trunc('month', CAST(now AS DATE)) AND as_of <= now
      AND budget_usd IS NOT NULL;
