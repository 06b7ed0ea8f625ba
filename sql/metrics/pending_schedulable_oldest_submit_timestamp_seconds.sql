-- slurmscope_pending_schedulable_oldest_submit_timestamp_seconds (gauge): pending_jobs (latest squeue)
CREATE OR REPLACE MACRO metric_pending_schedulable_oldest_submit_timestamp_seconds(cluster_name, now) AS TABLE
    SELECT cluster, coalesce("partition", '') AS "partition", coalesce(account, '') AS account,
        min(epoch(submit_time)) AS value
    FROM pending_jobs
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM pending_jobs
        WHERE cluster = cluster_name AND snapshot_time <= now) AND state = 'PENDING'
        AND submit_time IS NOT NULL AND list_contains(slurm_pending_scheduler_reasons(), reason)
    GROUP BY ALL;
