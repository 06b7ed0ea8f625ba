-- The per-GPU families (gauges, and slurmscope_gpu_ecc_errors_total and slurmscope_gpu_nvlink_errors_total as
-- counters: NVML's own counters, as the agent last read them): gpu_samples, the latest minute of each GPU at most
-- 15 min old, scanned once per render; `family` names the family of each row.
-- Debug one family: SELECT * FROM metric_gpu_latest('c', now()) WHERE family = 'slurmscope_gpu_power_watts'
CREATE OR REPLACE MACRO metric_gpu_latest(cluster_name, now) AS TABLE
    WITH g AS MATERIALIZED (
        SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
            'central' AS source, util_gpu_mean, temp_gpu_max_celsius, power_mean_watts, throttle_seconds,
            remapped_pending, remapped_failed, ecc_corrected_total, ecc_uncorrected_total,
            retired_pages_pending, nvlink_crc_flit_total, nvlink_crc_data_total, nvlink_replay_total,
            nvlink_recovery_total
        FROM gpu_latest(cluster_name, now)
    )
    SELECT 'slurmscope_gpu_utilization_ratio' AS family, cluster, node, gpu, gpu_model, source,
        NULL::VARCHAR AS type, NULL::VARCHAR AS counter, util_gpu_mean / 100.0 AS value FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_temperature_celsius', cluster, node, gpu, gpu_model, source, NULL, NULL,
        temp_gpu_max_celsius FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_power_watts', cluster, node, gpu, gpu_model, source, NULL, NULL, power_mean_watts FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_throttle_ratio', cluster, node, gpu, gpu_model, source, NULL, NULL,
        least(coalesce(throttle_seconds, 0) / 60.0, 1.0) FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_row_remap_pending', cluster, node, gpu, gpu_model, source, NULL, NULL,
        CASE WHEN remapped_pending THEN 1 ELSE 0 END FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_row_remap_failed', cluster, node, gpu, gpu_model, source, NULL, NULL,
        CASE WHEN remapped_failed THEN 1 ELSE 0 END FROM g
    UNION ALL
    SELECT 'slurmscope_gpu_ecc_errors_total', cluster, node, gpu, gpu_model, source, 'corrected', NULL,
        ecc_corrected_total FROM g WHERE ecc_corrected_total IS NOT NULL
    UNION ALL
    SELECT 'slurmscope_gpu_ecc_errors_total', cluster, node, gpu, gpu_model, source, 'uncorrected', NULL,
        ecc_uncorrected_total FROM g WHERE ecc_uncorrected_total IS NOT NULL
    UNION ALL
    SELECT 'slurmscope_gpu_retired_pages_pending', cluster, node, gpu, gpu_model, source, NULL, NULL,
        CASE WHEN retired_pages_pending THEN 1 ELSE 0 END FROM g WHERE retired_pages_pending IS NOT NULL
    UNION ALL
    SELECT 'slurmscope_gpu_nvlink_errors_total', cluster, node, gpu, gpu_model, source, NULL, counter, value
    FROM g UNPIVOT (value FOR counter IN (
        nvlink_crc_flit_total AS 'crc_flit', nvlink_crc_data_total AS 'crc_data', nvlink_replay_total AS 'replay',
        nvlink_recovery_total AS 'recovery'));
