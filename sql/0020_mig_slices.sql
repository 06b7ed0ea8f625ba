-- MIG slices as fractions of a GPU (slurmscope/mig.py, docs/pipelines.md#mig): capacity, charges and
-- efficiency count a slice as its compute slices / its GPU's compute slices (a 3g slice of an A100 = 3/7),
-- under the GPU model it slices. Before this migration slices were left out of every mart.

-- Of capacity_gpu_seconds, the GPU-seconds of MIG slices (sinfo Gres/GresUsed of MIG nodes, by fraction).
ALTER TABLE mart_capacity_daily ADD COLUMN mig_gpu_seconds DOUBLE DEFAULT 0;

-- Of gpu_seconds, the GPU-seconds of MIG slices (sacct AllocTRES gres/gpu:<profile>, by fraction).
ALTER TABLE mart_cost_daily ADD COLUMN mig_gpu_seconds DOUBLE DEFAULT 0;

-- Held GPU-seconds of MIG slices (gpu_jobs rows with a mig_instance, by fraction); those with a sample of
-- the MIG instance itself are in sampled_gpu_seconds too (NVML gives none today: mart_mig_efficiency).
ALTER TABLE mart_cost_efficiency_daily ADD COLUMN mig_gpu_seconds DOUBLE DEFAULT 0;

-- gpu_seconds now counts a MIG slice held for a second as its fraction of a GPU; gpus stays whole GPUs.
ALTER TABLE mart_job_efficiency ADD COLUMN mig_gpus DOUBLE;         -- GPUs the attempt's MIG slices add up to
ALTER TABLE mart_job_efficiency ADD COLUMN mig_activity VARCHAR;    -- 'unavailable' | 'partial' | 'sampled' | NULL (no slice)

-- One row per job attempt and MIG instance it held (gpu_jobs.mig_instance), with the slice's fraction of its
-- GPU as its GPU count. Rebuilt like mart_job_efficiency (alloc_end from the window start, running ones).
CREATE TABLE mart_mig_efficiency (
    cluster              VARCHAR NOT NULL,
    job_id               VARCHAR,
    job_id_raw           BIGINT NOT NULL,
    attempt              INTEGER,
    submit_time          TIMESTAMPTZ NOT NULL,
    account              VARCHAR,
    "user"               VARCHAR,
    node                 VARCHAR NOT NULL,
    gpu_uuid             VARCHAR NOT NULL,     -- the GPU the slice belongs to
    mig_instance         VARCHAR NOT NULL,     -- MIG device UUID
    gpu_model            VARCHAR,              -- the GPU's NVML name (gpu_inventory), e.g. 'NVIDIA H100 80GB HBM3'
    mig_profile          VARCHAR,              -- from the MIG device's NVML name, e.g. '1g.10gb'; NULL if not named
    gpu_fraction         DOUBLE,               -- compute slices of the profile / of the GPU (NVIDIA MIG user guide)
    fraction_source      VARCHAR NOT NULL,     -- 'nvml' (the device's profile) | 'sacct' (the attempt's slices) | 'unknown'
    held_seconds         DOUBLE NOT NULL,      -- seconds the attempt held the instance (mapping intervals)
    gpu_seconds          DOUBLE,               -- held_seconds x gpu_fraction (NULL when the fraction is unknown)
    sampled_gpu_seconds  DOUBLE NOT NULL,      -- of which a per-instance NVML sample exists
    idle_gpu_seconds     DOUBLE NOT NULL,      -- of which the sample's mean utilisation < drift.idle_util_percent
    util_mean            DOUBLE,               -- percent, over sampled minutes; NULL when none
    activity             VARCHAR NOT NULL,     -- 'unavailable' (no per-instance sample) | 'partial' | 'sampled'
    alloc_start          TIMESTAMPTZ,
    alloc_end            TIMESTAMPTZ NOT NULL
);
-- unique key (kept by the runner's delete-then-insert): cluster, job_id_raw, submit_time, mig_instance
