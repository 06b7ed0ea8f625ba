-- slurmscope_node_state_info (info): node_states (latest sinfo)
CREATE OR REPLACE MACRO metric_node_state_info(cluster_name, now) AS TABLE
    SELECT cluster, node, "partition", slurm_node_state(state, state_flags) AS state, coalesce(state_raw,
        '') AS state_raw, coalesce(reason, '') AS reason, 1 AS value
    FROM node_states
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM node_states
        WHERE cluster = cluster_name AND snapshot_time <= now);
