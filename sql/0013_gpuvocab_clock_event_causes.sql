-- Clock-event (throttle) seconds per cause (NVML nvmlClocksEventReasons; spool format version 2,
-- docs/nvml.md). throttle_seconds now counts hardware causes only (HW slowdown 0x8, HW thermal 0x40, HW power
-- brake 0x80); a GPU at its software power cap (0x4) or in software thermal slowdown (0x20) is reported per
-- cause and is not throttled. Rows stored before this migration counted all five causes in throttle_seconds:
-- they are split as the loader splits a version 1 spool record (slurmscope.spool.upgrade_v1_sample), exactly
-- where the minute's OR of reasons allows (one cause, or only hardware / only software causes), else null.
ALTER TABLE gpu_samples ADD COLUMN sw_power_cap_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN hw_slowdown_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN sw_thermal_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN hw_thermal_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN hw_power_brake_seconds DOUBLE;

UPDATE gpu_samples SET
    sw_power_cap_seconds = CASE WHEN throttle_reasons & 4 = 0 THEN 0
        WHEN throttle_reasons & 236 = 4 THEN throttle_seconds END,
    hw_slowdown_seconds = CASE WHEN throttle_reasons & 8 = 0 THEN 0
        WHEN throttle_reasons & 236 = 8 THEN throttle_seconds END,
    sw_thermal_seconds = CASE WHEN throttle_reasons & 32 = 0 THEN 0
        WHEN throttle_reasons & 236 = 32 THEN throttle_seconds END,
    hw_thermal_seconds = CASE WHEN throttle_reasons & 64 = 0 THEN 0
        WHEN throttle_reasons & 236 = 64 THEN throttle_seconds END,
    hw_power_brake_seconds = CASE WHEN throttle_reasons & 128 = 0 THEN 0
        WHEN throttle_reasons & 236 = 128 THEN throttle_seconds END,
    throttle_seconds = CASE WHEN throttle_reasons & 36 = 0 THEN throttle_seconds
        WHEN throttle_reasons & 200 = 0 THEN 0 END
WHERE throttle_seconds IS NOT NULL AND throttle_reasons IS NOT NULL;
