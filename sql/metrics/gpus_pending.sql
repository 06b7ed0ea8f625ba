-- slurmscope_gpus_pending (gauge): pending_jobs (latest squeue)
CREATE OR REPLACE MACRO metric_gpus_pending(cluster_name, now) AS TABLE
    SELECT cluster, coalesce("partition", '') AS "partition", coalesce(account, '') AS account,
        coalesce(qos, '') AS qos, sum(coalesce(gpus, 0)) AS value
    FROM pending_jobs
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM pending_jobs
        WHERE cluster = cluster_name AND snapshot_time <= now) AND state = 'PENDING'
    GROUP BY ALL;
