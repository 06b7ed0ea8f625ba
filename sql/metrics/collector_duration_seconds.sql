-- slurmscope_collector_duration_seconds (gauge): collector_runs (last run per collector)
CREATE OR REPLACE MACRO metric_collector_duration_seconds(cluster_name, now) AS TABLE
    SELECT cluster, collector, duration_seconds AS value
    FROM collector_runs
    WHERE cluster = cluster_name AND started_at <= now AND duration_seconds IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY collector ORDER BY started_at DESC, run_id DESC) = 1;
