-- slurmscope_sdiag_backfill_mean_cycle_seconds (gauge): sched_stats (latest sdiag)
CREATE OR REPLACE MACRO metric_sdiag_backfill_mean_cycle_seconds(cluster_name, now) AS TABLE
    SELECT cluster, bf_mean_cycle_us / 1e6 AS value
    FROM sched_stats
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM sched_stats
        WHERE cluster = cluster_name AND snapshot_time <= now) AND bf_mean_cycle_us IS NOT NULL;
