-- slurmscope_node_incidents (gauge): mart_node_incidents
CREATE OR REPLACE MACRO metric_node_incidents(cluster_name, now) AS TABLE
    SELECT cluster, node, cause, count(*) AS value
    FROM mart_node_incidents
    WHERE cluster = cluster_name
    GROUP BY ALL;
