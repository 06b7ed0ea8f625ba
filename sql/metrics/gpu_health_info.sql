-- slurmscope_gpu_health_info (info): mart_gpu_health (run in force at now)
-- The verdict in force at `now` per GPU (latest `since` <= now, if still valid), then per GPU index: a GPU
-- swapped for a new one keeps its index, and the newer UUID wins.
CREATE OR REPLACE MACRO metric_gpu_health_info(cluster_name, now) AS TABLE
    WITH cur AS (
        SELECT node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(gpu_model, '') AS gpu_model, status, reason
        FROM (
            SELECT * FROM (
                SELECT * FROM mart_gpu_health WHERE cluster = cluster_name AND since <= now
                QUALIFY row_number() OVER (PARTITION BY node, gpu_uuid ORDER BY since DESC) = 1
            ) WHERE valid_until > now
        ) WHERE gpu_index IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY node, gpu_index ORDER BY since DESC) = 1
    )
    SELECT cluster_name AS cluster, node, gpu, gpu_model, status, reason, 'central' AS source, 1 AS value
    FROM cur ORDER BY node, gpu;
