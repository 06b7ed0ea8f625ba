-- slurmscope_node_health_info (info): mart_node_health (run in force at now)
-- The verdict in force at `now`: the run with the latest `since` <= now per node, if still valid.
CREATE OR REPLACE MACRO metric_node_health_info(cluster_name, now) AS TABLE
    WITH cur AS (
        SELECT * FROM (
            SELECT * FROM mart_node_health WHERE cluster = cluster_name AND since <= now
            QUALIFY row_number() OVER (PARTITION BY node ORDER BY since DESC) = 1
        ) WHERE valid_until > now
    )
    SELECT cluster_name AS cluster, node, status, reason, 1 AS value FROM cur ORDER BY node;
