-- slurmscope_fault_killed_jobs_total (counter): mart_fault_impact (fault_time <= now)
CREATE OR REPLACE MACRO metric_fault_killed_jobs_total(cluster_name, now) AS TABLE
    SELECT cluster, coalesce("partition", '') AS "partition", fault_kind, count(*) AS value
    FROM mart_fault_impact
    WHERE cluster = cluster_name AND fault_time <= now
    GROUP BY ALL;
