-- slurmscope_scheduler_jobs_total (counter): mart_sched_deltas (snapshots <= now)
CREATE OR REPLACE MACRO metric_scheduler_jobs_total(cluster_name, now) AS TABLE
    SELECT cluster, e.event,
           sum(coalesce(CASE e.event WHEN 'submitted' THEN jobs_submitted WHEN 'started' THEN jobs_started
                        WHEN 'completed' THEN jobs_completed WHEN 'canceled' THEN jobs_canceled
                        WHEN 'failed' THEN jobs_failed ELSE bf_backfilled_jobs END, 0)) AS value
    FROM mart_sched_deltas,
         (VALUES ('submitted'), ('started'), ('completed'), ('canceled'), ('failed'), ('backfilled')) e(event)
    WHERE cluster = cluster_name AND snapshot_time <= now GROUP BY ALL;
