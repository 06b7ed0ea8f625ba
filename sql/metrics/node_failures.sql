-- slurmscope_node_failures (gauge): mart_node_reliability
CREATE OR REPLACE MACRO metric_node_failures(cluster_name, now) AS TABLE
    SELECT cluster, node, failures AS value
    FROM mart_node_reliability
    WHERE cluster = cluster_name;
