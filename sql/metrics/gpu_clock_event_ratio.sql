-- slurmscope_gpu_clock_event_ratio (gauge): gpu_samples (latest minute per GPU, at most 15 min old)
CREATE OR REPLACE MACRO metric_gpu_clock_event_ratio(cluster_name, now) AS TABLE
    SELECT cluster, node, gpu, gpu_model, reason, 'central' AS source, least(seconds / 60.0, 1.0) AS value
    FROM (
        SELECT cluster, node, CAST(gpu_index AS VARCHAR) AS gpu, coalesce(model, '') AS gpu_model,
            sw_power_cap_seconds, hw_slowdown_seconds, sw_thermal_seconds, hw_thermal_seconds,
            hw_power_brake_seconds
        FROM gpu_latest(cluster_name, now)
    ) UNPIVOT (seconds FOR reason IN (
        sw_power_cap_seconds AS 'sw_power_cap', hw_slowdown_seconds AS 'hw_slowdown',
        sw_thermal_seconds AS 'sw_thermal', hw_thermal_seconds AS 'hw_thermal',
        hw_power_brake_seconds AS 'hw_power_brake'));
