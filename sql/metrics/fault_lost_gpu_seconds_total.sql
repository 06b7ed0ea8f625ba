-- slurmscope_fault_lost_gpu_seconds_total (counter): mart_fault_impact (fault_time <= now)
CREATE OR REPLACE MACRO metric_fault_lost_gpu_seconds_total(cluster_name, now) AS TABLE
    SELECT cluster, coalesce("partition", '') AS "partition", fault_kind, sum(gpu_hours_lost) * 3600 AS value
    FROM mart_fault_impact
    WHERE cluster = cluster_name AND fault_time <= now
    GROUP BY ALL;
