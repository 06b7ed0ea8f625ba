-- slurmscope_nodes (gauge): node_states (latest sinfo)
CREATE OR REPLACE MACRO metric_nodes(cluster_name, now) AS TABLE
    SELECT cluster, "partition", slurm_node_state(state, state_flags) AS state, count(*) AS value
    FROM node_states
    WHERE cluster = cluster_name AND snapshot_time = (SELECT max(snapshot_time) FROM node_states
        WHERE cluster = cluster_name AND snapshot_time <= now)
    GROUP BY ALL;
