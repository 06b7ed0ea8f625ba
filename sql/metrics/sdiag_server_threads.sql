-- slurmscope_sdiag_server_threads (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_server_threads(cluster_name, now) AS TABLE
    SELECT cluster, server_thread_count AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND server_thread_count IS NOT NULL;
