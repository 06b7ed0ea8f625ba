-- slurmscope_jobs_running (gauge): pending_jobs (latest squeue)
CREATE OR REPLACE MACRO metric_jobs_running(cluster_name, now) AS TABLE
    SELECT cluster, coalesce("partition", '') AS "partition", coalesce(account, '') AS account,
        count(*) AS value
    FROM pending_jobs
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM pending_jobs
        WHERE cluster = cluster_name AND snapshot_time <= now) AND state = 'RUNNING'
    GROUP BY ALL;
