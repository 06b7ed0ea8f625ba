-- slurmscope_node_gpus_visible (gauge): gpu_inventory (latest per node)
CREATE OR REPLACE MACRO metric_node_gpus_visible(cluster_name, now) AS TABLE
    WITH l AS (SELECT node, max(seen_at) AS t FROM gpu_inventory
        WHERE cluster = cluster_name AND seen_at <= now GROUP BY node)
    SELECT i.cluster, i.node, count(DISTINCT i.gpu_uuid) AS value
    FROM gpu_inventory i
    JOIN l ON i.node = l.node AND i.seen_at = l.t
    WHERE i.cluster = cluster_name
    GROUP BY ALL;
