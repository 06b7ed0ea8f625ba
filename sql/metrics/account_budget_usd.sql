-- slurmscope_account_budget_usd (gauge): mart_budget_period (the period holding now)
CREATE OR REPLACE MACRO metric_account_budget_usd(cluster_name, now) AS TABLE
    SELECT cluster, account, amount AS value
    FROM mart_budget_period
    WHERE cluster = cluster_name AND as_of <= now AND budget = 'usd'
      AND period_start <= CAST(now AS DATE) AND CAST(now AS DATE) < period_end;
