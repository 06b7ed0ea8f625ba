-- slurmscope_job_wait_started_jobs (gauge): mart_wait_times (latest day <= now)
CREATE OR REPLACE MACRO metric_job_wait_started_jobs(cluster_name, now) AS TABLE
    SELECT cluster, "partition", account, gpu_class, gpu_model, jobs AS value FROM mart_wait_times
                     WHERE cluster = cluster_name AND day = (SELECT max(day) FROM mart_wait_times
                         WHERE cluster = cluster_name
                                                         AND day <= CAST(now AS DATE));
