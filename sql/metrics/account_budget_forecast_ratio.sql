-- slurmscope_account_budget_forecast_ratio (gauge): mart_budget_monthly (month of now)
CREATE OR REPLACE MACRO metric_account_budget_forecast_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, 'usd' AS budget, forecast_usd / budget_usd AS value
    FROM mart_budget_monthly
    WHERE cluster = cluster_name AND month = date_trunc('month', CAST(now AS DATE)) AND as_of <= now
      AND budget_usd > 0 AND forecast_usd IS NOT NULL
    UNION ALL
    SELECT cluster, account, 'gpu_hours' AS budget, forecast_gpu_hours / budget_gpu_hours AS value
    FROM mart_budget_monthly
    WHERE cluster = cluster_name AND month = date_trunc('month', CAST(now AS DATE)) AND as_of <= now
      AND budget_gpu_hours > 0 AND forecast_gpu_hours IS NOT NULL;
