-- slurmscope_gpu_seconds_correction_seconds (gauge): mart_usage_counters
CREATE OR REPLACE MACRO metric_gpu_seconds_correction_seconds(cluster_name, now) AS TABLE
    SELECT cluster, account, "partition", gpu_model, gpu_seconds_correction AS value
    FROM mart_usage_counters
    WHERE cluster = cluster_name AND updated_at <= now;
