-- slurmscope_cost_usd_total (counter): mart_usage_counters
CREATE OR REPLACE MACRO metric_cost_usd_total(cluster_name, now) AS TABLE
    SELECT cluster, account, "partition", gpu_model, cost_usd_total AS value
    FROM mart_usage_counters
    WHERE cluster = cluster_name AND updated_at <= now;
