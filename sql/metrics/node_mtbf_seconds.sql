-- slurmscope_node_mtbf_seconds (gauge): mart_node_reliability
CREATE OR REPLACE MACRO metric_node_mtbf_seconds(cluster_name, now) AS TABLE
    SELECT cluster, node, mtbf_seconds AS value
    FROM mart_node_reliability
    WHERE cluster = cluster_name;
