-- slurmscope_jobs_ended_total (counter): jobs (sacct, end_time <= now)
CREATE OR REPLACE MACRO metric_jobs_ended_total(cluster_name, now) AS TABLE
    WITH pa AS (SELECT DISTINCT coalesce("partition", '') AS p, coalesce(account, '') AS a FROM jobs
                WHERE cluster = cluster_name AND submit_time <= now),
    ended AS (SELECT coalesce("partition", '') AS p, coalesce(account, '') AS a, state, count(*) AS n
              FROM jobs WHERE cluster = cluster_name AND end_time <= now
                  AND list_contains(slurm_job_terminal_states(), state)
              GROUP BY ALL),
    states AS (SELECT unnest(slurm_job_terminal_states()) AS state)
    SELECT cluster_name AS cluster, pa.p AS "partition", pa.a AS account, states.state,
           coalesce(ended.n, 0) AS value
    FROM pa CROSS JOIN states LEFT JOIN ended ON ended.p = pa.p AND ended.a = pa.a
        AND ended.state = states.state;
