-- slurmscope_node_health_status (gauge): mart_node_health (run in force at now)
-- The verdict in force at `now`: the run with the latest `since` <= now per node, if still valid.
CREATE OR REPLACE MACRO metric_node_health_status(cluster_name, now) AS TABLE
    WITH cur AS (
        SELECT * FROM (
            SELECT * FROM mart_node_health WHERE cluster = cluster_name AND since <= now
            QUALIFY row_number() OVER (PARTITION BY node ORDER BY since DESC) = 1
        ) WHERE valid_until > now
    )
    SELECT cluster_name AS cluster, node, s.status, CASE WHEN cur.status = s.status THEN 1 ELSE 0 END AS value
    FROM cur, (VALUES ('ok'), ('degraded'), ('failing')) s(status) ORDER BY node, s.status;
