-- slurmscope_allocated_idle_cost_usd_total (counter): mart_cost_efficiency_daily (days <= today)
CREATE OR REPLACE MACRO metric_allocated_idle_cost_usd_total(cluster_name, now) AS TABLE
    SELECT cluster, account, sum(idle_cost_usd) AS value
    FROM mart_cost_efficiency_daily
    WHERE cluster = cluster_name AND day <= CAST(now AS DATE)
    GROUP BY ALL;
