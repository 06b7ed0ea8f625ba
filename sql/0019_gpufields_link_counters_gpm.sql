-- Per-counter GPU health and GPM profiling fields (spool format version 3, docs/nvml.md; rules in
-- docs/pipelines.md#health, efficiency in docs/pipelines.md#gpu-efficiency).
--
-- Every new gpu_samples column rolls up by sum (the *_delta, violation_*_seconds and gpm_samples counts), by
-- max (the *_total counters, pcie_link_*, remapped_*, retired_pages_*: latest values of counters that only grow
-- or of link settings), or as a mean weighted by gpm_samples (the GPM *_mean percentages); activity_source is
-- 'gpm' when gpm_samples > 0, else 'gpu_util' when util_gpu_mean is set.
ALTER TABLE gpu_samples ADD COLUMN nvlink_crc_flit_delta BIGINT;      -- sum over links of the minute's rise
ALTER TABLE gpu_samples ADD COLUMN nvlink_crc_data_delta BIGINT;
ALTER TABLE gpu_samples ADD COLUMN nvlink_replay_delta BIGINT;
ALTER TABLE gpu_samples ADD COLUMN nvlink_recovery_delta BIGINT;
ALTER TABLE gpu_samples ADD COLUMN nvlink_crc_flit_total BIGINT;      -- sum over links of NVML's counters
ALTER TABLE gpu_samples ADD COLUMN nvlink_crc_data_total BIGINT;
ALTER TABLE gpu_samples ADD COLUMN nvlink_replay_total BIGINT;
ALTER TABLE gpu_samples ADD COLUMN nvlink_recovery_total BIGINT;
ALTER TABLE gpu_samples ADD COLUMN pcie_link_gen INTEGER;             -- current PCIe generation and width
ALTER TABLE gpu_samples ADD COLUMN pcie_link_width INTEGER;
ALTER TABLE gpu_samples ADD COLUMN remapped_correctable BIGINT;       -- rows remapped for correctable errors
ALTER TABLE gpu_samples ADD COLUMN remapped_uncorrectable BIGINT;     -- rows remapped for uncorrectable errors
ALTER TABLE gpu_samples ADD COLUMN retired_pages_sbe BIGINT;          -- pages retired for multiple single-bit errors
ALTER TABLE gpu_samples ADD COLUMN retired_pages_dbe BIGINT;          -- pages retired for a double-bit error
ALTER TABLE gpu_samples ADD COLUMN retired_pages_pending BOOLEAN;     -- a retirement waits for a reset/reboot
ALTER TABLE gpu_samples ADD COLUMN violation_power_seconds DOUBLE;    -- NVML violation time per policy
ALTER TABLE gpu_samples ADD COLUMN violation_thermal_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN violation_sync_boost_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN violation_board_limit_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN violation_low_util_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN violation_reliability_seconds DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN gpm_samples INTEGER;               -- readings with GPM values
ALTER TABLE gpu_samples ADD COLUMN sm_active_mean DOUBLE;             -- percent, GPM
ALTER TABLE gpu_samples ADD COLUMN sm_occupancy_mean DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN tensor_active_mean DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN dram_active_mean DOUBLE;
ALTER TABLE gpu_samples ADD COLUMN activity_source VARCHAR;           -- 'gpm' | 'gpu_util' | NULL

-- Minutes stored before this migration had no GPM: their activity is GPU_UTIL where it was read.
UPDATE gpu_samples SET activity_source = 'gpu_util' WHERE util_gpu_mean IS NOT NULL;

-- NVLink errors per link, only for (GPU, minute, link) whose counters rose: a healthy fleet writes no rows, a
-- bad link one row a minute (benchmarks/nvlink_storage.py measures the choice against a row per link and minute).
CREATE TABLE gpu_nvlink_errors (
    cluster              VARCHAR NOT NULL,
    node                 VARCHAR NOT NULL,
    gpu_uuid             VARCHAR NOT NULL,
    minute               TIMESTAMPTZ NOT NULL,
    link                 INTEGER NOT NULL,
    crc_flit_delta       BIGINT,
    crc_data_delta       BIGINT,
    replay_delta         BIGINT,
    recovery_delta       BIGINT,
    PRIMARY KEY (cluster, node, gpu_uuid, minute, link)
);

-- Efficiency by SM activity where GPM measured it (pipelines/efficiency.py, pipelines/cost.py).
ALTER TABLE mart_job_efficiency ADD COLUMN sm_active_mean DOUBLE;        -- percent, over GPM-sampled minutes
ALTER TABLE mart_job_efficiency ADD COLUMN useful_gpu_seconds DOUBLE;    -- held x activity over sampled minutes
ALTER TABLE mart_job_efficiency ADD COLUMN gpm_gpu_seconds DOUBLE;       -- sampled seconds measured by GPM
ALTER TABLE mart_job_efficiency ADD COLUMN activity_source VARCHAR;      -- 'gpm' | 'gpu_util' | 'mixed' | NULL
ALTER TABLE mart_cost_efficiency_daily ADD COLUMN gpm_gpu_seconds DOUBLE;
ALTER TABLE mart_cost_efficiency_daily ADD COLUMN activity_source VARCHAR;
