-- slurmscope_sdiag_backfill_last_depth (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_backfill_last_depth(cluster_name, now) AS TABLE
    SELECT cluster, bf_last_depth AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND bf_last_depth IS NOT NULL;
