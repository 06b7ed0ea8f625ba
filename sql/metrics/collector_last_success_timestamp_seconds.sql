-- slurmscope_collector_last_success_timestamp_seconds (gauge): collector_runs
CREATE OR REPLACE MACRO metric_collector_last_success_timestamp_seconds(cluster_name, now) AS TABLE
    SELECT cluster, collector, max(epoch(coalesce(finished_at, started_at))) AS value
    FROM collector_runs
    WHERE cluster = cluster_name AND status = 'ok' AND coalesce(finished_at, started_at) <= now
    GROUP BY ALL;
