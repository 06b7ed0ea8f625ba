-- slurmscope_allocated_gpu_seconds_total (counter): mart_idle_gpus_daily (days <= today)
CREATE OR REPLACE MACRO metric_allocated_gpu_seconds_total(cluster_name, now) AS TABLE
    SELECT cluster, coalesce(account, '') AS account, k.kind,
           sum(CASE k.kind WHEN 'sampled' THEN sampled_gpu_hours ELSE idle_gpu_hours END) * 3600 AS value
    FROM mart_idle_gpus_daily, (VALUES ('sampled'), ('idle')) k(kind)
    WHERE cluster = cluster_name AND day <= CAST(now AS DATE) GROUP BY ALL;
