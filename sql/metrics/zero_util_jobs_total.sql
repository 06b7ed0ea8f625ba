-- slurmscope_zero_util_jobs_total (counter): mart_job_efficiency (alloc_end <= now)
CREATE OR REPLACE MACRO metric_zero_util_jobs_total(cluster_name, now) AS TABLE
    SELECT cluster, coalesce(account, '') AS account, count(*) FILTER (WHERE zero_util) AS value
                     FROM mart_job_efficiency WHERE cluster = cluster_name AND alloc_end <= now GROUP BY ALL;
