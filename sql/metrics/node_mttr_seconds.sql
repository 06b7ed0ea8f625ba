-- slurmscope_node_mttr_seconds (gauge): mart_node_reliability
CREATE OR REPLACE MACRO metric_node_mttr_seconds(cluster_name, now) AS TABLE
    SELECT cluster, node, mttr_seconds AS value
    FROM mart_node_reliability
    WHERE cluster = cluster_name;
