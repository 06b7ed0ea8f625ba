-- slurmscope_job_outcomes_node_incident_total (counter): jobs (end_time <= now) linked in mart_fault_impact
CREATE OR REPLACE MACRO metric_job_outcomes_node_incident_total(cluster_name, now) AS TABLE
    WITH pa AS (SELECT DISTINCT coalesce("partition", '') AS p, coalesce(account, '') AS a FROM jobs
                WHERE cluster = cluster_name AND submit_time <= now),
    linked AS (SELECT coalesce(j."partition", '') AS p, coalesce(j.account, '') AS a, count(*) AS n
               FROM mart_fault_impact f JOIN jobs j ON j.cluster = f.cluster AND j.job_id_raw = f.job_id_raw
                   AND j.submit_time = f.submit_time
               WHERE f.cluster = cluster_name AND f.fault_time <= now AND j.end_time <= now
                   AND list_contains(slurm_job_incident_linked_states(), j.state)
                   AND slurm_job_failure_class(j.state, j.state_raw, j.start_time) = 'user'
               GROUP BY ALL)
    SELECT cluster_name AS cluster, pa.p AS "partition", pa.a AS account, coalesce(linked.n, 0) AS value
    FROM pa LEFT JOIN linked ON linked.p = pa.p AND linked.a = pa.a;
