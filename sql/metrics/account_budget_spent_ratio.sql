-- slurmscope_account_budget_spent_ratio (gauge): mart_budget_monthly (month of now)
CREATE OR REPLACE MACRO metric_account_budget_spent_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, 'usd' AS budget, spent_usd / budget_usd AS value
    FROM mart_budget_monthly
    WHERE cluster = cluster_name AND month = date_trunc('month', CAST(now AS DATE)) AND as_of <= now
      AND budget_usd > 0
    UNION ALL
    SELECT cluster, account, 'gpu_hours' AS budget, spent_gpu_hours / budget_gpu_hours AS value
    FROM mart_budget_monthly
    WHERE cluster = cluster_name AND month = date_trunc('month', CAST(now AS DATE)) AND as_of <= now
      AND budget_gpu_hours > 0;
