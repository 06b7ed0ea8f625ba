-- slurmscope_job_requeues_total (counter): jobs (sacct, attempt > 1, submit_time <= now)
CREATE OR REPLACE MACRO metric_job_requeues_total(cluster_name, now) AS TABLE
    SELECT cluster_name AS cluster, coalesce("partition", '') AS "partition", coalesce(account,
        '') AS account,
                            count(*) FILTER (WHERE attempt > 1) AS value
                     FROM jobs WHERE cluster = cluster_name AND submit_time <= now GROUP BY ALL;
