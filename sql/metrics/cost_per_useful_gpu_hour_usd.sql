-- slurmscope_cost_per_useful_gpu_hour_usd (gauge): mart_cost_efficiency_daily (month of now, days <= today)
CREATE OR REPLACE MACRO metric_cost_per_useful_gpu_hour_usd(cluster_name, now) AS TABLE
    SELECT cluster, account, sum(sampled_cost_usd) / (sum(useful_gpu_seconds) / 3600) AS value
                     FROM mart_cost_efficiency_daily
                     WHERE cluster = cluster_name AND day <= CAST(now AS DATE)
                       AND day >= date_trunc('month', CAST(now AS DATE)) GROUP BY ALL
                     HAVING sum(useful_gpu_seconds) > 0;
