-- slurmscope_cost_correction_usd (gauge): mart_usage_counters
CREATE OR REPLACE MACRO metric_cost_correction_usd(cluster_name, now) AS TABLE
    SELECT cluster, account, "partition", gpu_model, cost_usd_correction AS value
    FROM mart_usage_counters
    WHERE cluster = cluster_name AND updated_at <= now;
