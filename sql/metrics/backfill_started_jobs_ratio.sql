-- slurmscope_backfill_started_jobs_ratio (gauge): mart_backfill_daily (latest day <= now)
CREATE OR REPLACE MACRO metric_backfill_started_jobs_ratio(cluster_name, now) AS TABLE
    SELECT cluster, "partition", coalesce(share, 0) AS value FROM mart_backfill_daily
                     WHERE cluster = cluster_name AND sched_by = 'backfill'
                       AND day = (SELECT max(day) FROM mart_backfill_daily WHERE cluster = cluster_name
                                  AND day <= CAST(now AS DATE));
