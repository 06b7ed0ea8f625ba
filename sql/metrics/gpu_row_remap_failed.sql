-- slurmscope_gpu_row_remap_failed (gauge): gpu_samples (latest minute per GPU, at most 15 min old)
CREATE OR REPLACE MACRO metric_gpu_row_remap_failed(cluster_name, now) AS TABLE
    SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
        'central' AS source, CASE WHEN remapped_failed THEN 1 ELSE 0 END AS value
    FROM gpu_latest(cluster_name, now);
