-- slurmscope_gpu_throttle_ratio (gauge): gpu_samples (latest minute per GPU, at most 15 min old)
CREATE OR REPLACE MACRO metric_gpu_throttle_ratio(cluster_name, now) AS TABLE
    SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
        'central' AS source, least(coalesce(throttle_seconds, 0) / 60.0, 1.0) AS value
    FROM gpu_latest(cluster_name, now);
