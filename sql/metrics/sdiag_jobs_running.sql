-- slurmscope_sdiag_jobs_running (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_jobs_running(cluster_name, now) AS TABLE
    SELECT cluster, jobs_running AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND jobs_running IS NOT NULL;
