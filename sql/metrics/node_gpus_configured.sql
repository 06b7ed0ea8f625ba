-- slurmscope_node_gpus_configured (gauge): node_states (latest sinfo)
CREATE OR REPLACE MACRO metric_node_gpus_configured(cluster_name, now) AS TABLE
    SELECT cluster, node, coalesce(max(gpu_type), '') AS gpu_model, max(gpus_total) AS value
    FROM node_states
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM node_states
        WHERE cluster = cluster_name AND snapshot_time <= now) AND gpus_total IS NOT NULL
    GROUP BY cluster, node;
