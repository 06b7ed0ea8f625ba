-- slurmscope_pipeline_last_success_timestamp_seconds (gauge): pipeline_runs
CREATE OR REPLACE MACRO metric_pipeline_last_success_timestamp_seconds(cluster_name, now) AS TABLE
    SELECT cluster, pipeline, max(epoch(run_at)) AS value
    FROM pipeline_runs
    WHERE cluster = cluster_name AND status = 'ok' AND run_at <= now
    GROUP BY ALL;
