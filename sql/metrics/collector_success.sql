-- slurmscope_collector_success (gauge): collector_runs (last run per collector)
CREATE OR REPLACE MACRO metric_collector_success(cluster_name, now) AS TABLE
    SELECT cluster, collector, CASE WHEN status = 'ok' THEN 1 ELSE 0 END AS value
    FROM collector_runs
    WHERE cluster = cluster_name AND started_at <= now
    QUALIFY row_number() OVER (PARTITION BY collector ORDER BY started_at DESC, run_id DESC) = 1;
