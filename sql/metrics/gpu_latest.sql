-- The per-GPU families (gauges, and slurmscope_gpu_ecc_errors_total as a counter): gpu_samples, the latest
-- minute of each GPU at most 15 min old, scanned once per render; `family` names the family of each row.
-- Debug one family: SELECT * FROM metric_gpu_latest('c', now()) WHERE family = 'slurmscope_gpu_power_watts'
CREATE OR REPLACE MACRO metric_gpu_latest(cluster_name, now) AS TABLE
    WITH g AS MATERIALIZED (
        SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
            'central' AS source, util_gpu_mean, temp_gpu_max_celsius, power_mean_watts, throttle_seconds,
            remapped_pending, remapped_failed, ecc_corrected_total, ecc_uncorrected_total
        FROM gpu_latest(cluster_name, now)
    )
    SELECT 'slurmscope_gpu_utilization_ratio' AS family, cluster, node, gpu, gpu_model, source,
        NULL::VARCHAR AS type, util_gpu_mean / 100.0 AS value FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_temperature_celsius', cluster, node, gpu, gpu_model, source, NULL,
        temp_gpu_max_celsius FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_power_watts', cluster, node, gpu, gpu_model, source, NULL, power_mean_watts FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_throttle_ratio', cluster, node, gpu, gpu_model, source, NULL,
        least(coalesce(throttle_seconds, 0) / 60.0, 1.0) FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_row_remap_pending', cluster, node, gpu, gpu_model, source, NULL,
        CASE WHEN remapped_pending THEN 1 ELSE 0 END FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_row_remap_failed', cluster, node, gpu, gpu_model, source, NULL,
        CASE WHEN remapped_failed THEN 1 ELSE 0 END FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_ecc_errors_total', cluster, node, gpu, gpu_model, source, 'corrected',
        ecc_corrected_total FROM g WHERE ecc_corrected_total IS NOT NULL
    UNION ALL
    SELECT 'slurmscope_gpu_ecc_errors_total', cluster, node, gpu, gpu_model, source, 'uncorrected',
        ecc_uncorrected_total FROM g WHERE ecc_uncorrected_total IS NOT NULL;
