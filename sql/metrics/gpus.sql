-- slurmscope_gpus (gauge): node_states (latest sinfo)
CREATE OR REPLACE MACRO metric_gpus(cluster_name, now) AS TABLE
    WITH n AS (
        SELECT cluster, "partition", coalesce(gpu_type, '') AS gpu_model, coalesce(gpus_total, 0) AS total,
               least(coalesce(gpus_used, 0), coalesce(gpus_total, 0)) AS used,
               slurm_node_unavailable(state, state_flags) AS unavailable
        FROM node_states WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time)
            FROM node_states WHERE cluster = cluster_name AND snapshot_time <= now)
            AND coalesce(gpus_total, 0) > 0
    )
    SELECT cluster, "partition", gpu_model, s.state,
           sum(CASE s.state WHEN 'allocated' THEN used
                            WHEN 'down' THEN CASE WHEN unavailable THEN total - used ELSE 0 END
                            ELSE CASE WHEN unavailable THEN 0 ELSE total - used END END) AS value
    FROM n, (VALUES ('allocated'), ('idle'), ('down')) s(state) GROUP BY ALL;
