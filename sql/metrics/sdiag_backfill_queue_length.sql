-- slurmscope_sdiag_backfill_queue_length (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_backfill_queue_length(cluster_name, now) AS TABLE
    SELECT cluster, bf_last_queue_length AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND bf_last_queue_length IS NOT NULL;
