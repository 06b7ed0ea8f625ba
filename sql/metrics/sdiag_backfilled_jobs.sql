-- slurmscope_sdiag_backfilled_jobs (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_backfilled_jobs(cluster_name, now) AS TABLE
    SELECT cluster, bf_backfilled_jobs AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND bf_backfilled_jobs IS NOT NULL;
