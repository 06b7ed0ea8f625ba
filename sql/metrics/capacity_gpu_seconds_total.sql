-- slurmscope_capacity_gpu_seconds_total (counter): mart_capacity_daily (days <= today)
CREATE OR REPLACE MACRO metric_capacity_gpu_seconds_total(cluster_name, now) AS TABLE
    SELECT cluster, "partition", gpu_model, s.state,
           sum(CASE s.state WHEN 'allocated' THEN allocated_gpu_seconds WHEN 'idle' THEN idle_gpu_seconds
                            WHEN 'down' THEN down_gpu_seconds ELSE reserved_gpu_seconds END) AS value
    FROM mart_capacity_daily, (VALUES ('allocated'), ('idle'), ('down'), ('reserved')) s(state)
    WHERE cluster = cluster_name AND day <= CAST(now AS DATE) GROUP BY ALL;
