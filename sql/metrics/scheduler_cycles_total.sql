-- slurmscope_scheduler_cycles_total (counter): mart_sched_deltas (snapshots <= now)
CREATE OR REPLACE MACRO metric_scheduler_cycles_total(cluster_name, now) AS TABLE
    SELECT cluster, s.scheduler,
           sum(coalesce(CASE s.scheduler WHEN 'main' THEN main_cycles ELSE bf_cycles END, 0)) AS value
    FROM mart_sched_deltas, (VALUES ('main'), ('backfill')) s(scheduler)
    WHERE cluster = cluster_name AND snapshot_time <= now GROUP BY ALL;
