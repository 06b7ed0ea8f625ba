-- slurmscope_jobs_ended_gpu_seconds_total (counter): jobs (sacct, end_time <= now)
CREATE OR REPLACE MACRO metric_jobs_ended_gpu_seconds_total(cluster_name, now) AS TABLE
    SELECT cluster, coalesce("partition", '') AS "partition", coalesce(account, '') AS account, state,
        sum(coalesce(elapsed_seconds, 0) * coalesce(gpus, 0)) AS value
    FROM jobs
    WHERE cluster = cluster_name AND end_time <= now AND list_contains(slurm_job_terminal_states(), state)
    GROUP BY ALL;
