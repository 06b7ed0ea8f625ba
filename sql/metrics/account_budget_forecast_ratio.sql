-- slurmscope_account_budget_forecast_ratio (gauge): mart_budget_period (the period holding now)
CREATE OR REPLACE MACRO metric_account_budget_forecast_ratio(cluster_name, now) AS TABLE
    SELECT cluster, account, budget, forecast / amount AS value
    FROM mart_budget_period
    WHERE cluster = cluster_name AND as_of <= now AND amount > 0 AND forecast IS NOT NULL
      AND period_start <= CAST(now AS DATE) AND CAST(now AS DATE) < period_end;
