-- slurmscope_sdiag_backfill_last_cycle_timestamp_seconds (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_backfill_last_cycle_timestamp_seconds(cluster_name, now) AS TABLE
    SELECT cluster, epoch(bf_last_cycle_when) AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND epoch(bf_last_cycle_when) IS NOT NULL;
