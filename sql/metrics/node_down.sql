-- slurmscope_node_down (gauge): node_states (latest sinfo)
CREATE OR REPLACE MACRO metric_node_down(cluster_name, now) AS TABLE
    SELECT cluster, node, max(CASE WHEN slurm_node_state(state,
        state_flags) = 'down' THEN 1 ELSE 0 END) AS value
    FROM node_states
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM node_states
        WHERE cluster = cluster_name AND snapshot_time <= now)
    GROUP BY ALL;
