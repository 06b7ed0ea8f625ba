-- slurmscope_job_wait_seconds (gauge): mart_wait_times (latest day <= now)
CREATE OR REPLACE MACRO metric_job_wait_seconds(cluster_name, now) AS TABLE
    WITH w AS (SELECT * FROM mart_wait_times WHERE cluster = cluster_name
               AND day = (SELECT max(day) FROM mart_wait_times WHERE cluster = cluster_name
                          AND day <= CAST(now AS DATE)))
    SELECT cluster, "partition", account, gpu_class, gpu_model, q.percentile,
           CASE q.percentile WHEN '50' THEN p50_seconds WHEN '90' THEN p90_seconds
                             ELSE p99_seconds END AS value
    FROM w, (VALUES ('50'), ('90'), ('99')) q(percentile);
