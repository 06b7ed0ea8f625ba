-- slurmscope_node_unavailable_since_timestamp_seconds (gauge): node_states (latest sinfo)
CREATE OR REPLACE MACRO metric_node_unavailable_since_timestamp_seconds(cluster_name, now) AS TABLE
    SELECT cluster, node, slurm_node_state(state, state_flags) AS state, max(epoch(reason_time)) AS value
    FROM node_states
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM node_states
        WHERE cluster = cluster_name AND snapshot_time <= now) AND reason_time IS NOT NULL
        AND slurm_node_state(state, state_flags) IN ('drain', 'down')
    GROUP BY ALL;
