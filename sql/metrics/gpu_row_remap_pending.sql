-- slurmscope_gpu_row_remap_pending (gauge): gpu_samples (latest minute per GPU, at most 15 min old)
CREATE OR REPLACE MACRO metric_gpu_row_remap_pending(cluster_name, now) AS TABLE
    SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
        'central' AS source, CASE WHEN remapped_pending THEN 1 ELSE 0 END AS value
    FROM gpu_latest(cluster_name, now);
