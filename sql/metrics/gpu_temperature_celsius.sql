-- slurmscope_gpu_temperature_celsius (gauge): gpu_samples (latest minute per GPU, at most 15 min old)
CREATE OR REPLACE MACRO metric_gpu_temperature_celsius(cluster_name, now) AS TABLE
    SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
        'central' AS source, temp_gpu_max_celsius AS value
    FROM gpu_latest(cluster_name, now);
