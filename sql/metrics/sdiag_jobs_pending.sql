-- slurmscope_sdiag_jobs_pending (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_jobs_pending(cluster_name, now) AS TABLE
    SELECT cluster, jobs_pending AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND jobs_pending IS NOT NULL;
