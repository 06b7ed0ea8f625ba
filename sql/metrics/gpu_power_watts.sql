-- slurmscope_gpu_power_watts (gauge): gpu_samples (latest minute per GPU, at most 15 min old)
CREATE OR REPLACE MACRO metric_gpu_power_watts(cluster_name, now) AS TABLE
    SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
        'central' AS source, power_mean_watts AS value
    FROM gpu_latest(cluster_name, now);
