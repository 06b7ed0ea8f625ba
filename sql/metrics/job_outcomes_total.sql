-- slurmscope_job_outcomes_total (counter): jobs (sacct, end_time <= now)
CREATE OR REPLACE MACRO metric_job_outcomes_total(cluster_name, now) AS TABLE
    WITH pa AS (SELECT DISTINCT coalesce("partition", '') AS p, coalesce(account, '') AS a FROM jobs
                WHERE cluster = cluster_name AND submit_time <= now),
    ended AS (SELECT coalesce("partition", '') AS p, coalesce(account, '') AS a,
                     slurm_job_failure_class(state, state_raw, start_time) AS failure, count(*) AS n
              FROM jobs WHERE cluster = cluster_name AND end_time <= now
                  AND NOT list_contains(slurm_job_not_ended_states(), coalesce(state, 'UNKNOWN'))
              GROUP BY ALL),
    classes AS (SELECT unnest(['none', 'user', 'system']) AS failure)
    SELECT cluster_name AS cluster, pa.p AS "partition", pa.a AS account, classes.failure,
           coalesce(ended.n, 0) AS value
    FROM pa CROSS JOIN classes LEFT JOIN ended ON ended.p = pa.p AND ended.a = pa.a
        AND ended.failure = classes.failure;
