-- slurmscope_gpu_ecc_errors_total (counter): gpu_samples (latest minute per GPU)
CREATE OR REPLACE MACRO metric_gpu_ecc_errors_total(cluster_name, now) AS TABLE
    WITH g AS (SELECT * FROM gpu_latest(cluster_name, now))
    SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
           'corrected' AS type, 'central' AS source, ecc_corrected_total AS value FROM g
    WHERE ecc_corrected_total IS NOT NULL
    UNION ALL
    SELECT cluster, node, CAST(gpu_index AS VARCHAR), coalesce(model, ''), 'uncorrected', 'central',
           ecc_uncorrected_total FROM g WHERE ecc_uncorrected_total IS NOT NULL;
