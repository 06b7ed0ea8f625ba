-- GPU efficiency marts (pipelines/efficiency.py): NVML samples joined to jobs through gpu_jobs intervals.

-- One row per job attempt that held at least one whole GPU mapped by the prolog/cgroup mapping.
-- Rebuilt for attempts whose GPU holding ended at or after the window start (alloc_end), and running ones.
CREATE TABLE mart_job_efficiency (
    cluster              VARCHAR NOT NULL,
    job_id               VARCHAR,              -- as Slurm prints it (123_4)
    job_id_raw           BIGINT NOT NULL,
    attempt              INTEGER,
    submit_time          TIMESTAMPTZ NOT NULL, -- with job_id_raw: the attempt (jobs' natural key)
    account              VARCHAR,
    "user"               VARCHAR,
    gpus                 INTEGER,              -- distinct GPUs seen in the mapping
    util_mean            DOUBLE,               -- percent, weighted by seconds held, over sampled minutes
    util_max             DOUBLE,               -- percent, highest per-minute max of any of its GPUs
    mem_peak_bytes       BIGINT,               -- highest GPU memory used on any of its GPUs
    energy_joules        DOUBLE,               -- NVML energy counter deltas, pro-rated to the seconds held
    gpu_seconds          DOUBLE NOT NULL,      -- seconds held x GPUs, from the mapping intervals
    sampled_gpu_seconds  DOUBLE NOT NULL,      -- of which NVML sampled the GPU
    idle_gpu_seconds     DOUBLE NOT NULL,      -- of which the minute's mean utilisation < drift.idle_util_percent (5)
    zero_util            BOOLEAN NOT NULL,     -- sampled, and no minute's max utilisation reached that threshold
    alloc_start          TIMESTAMPTZ,          -- first mapping interval start
    alloc_end            TIMESTAMPTZ NOT NULL  -- last mapping interval end (now while running)
);
-- unique key (kept by the runner's delete-then-insert): cluster, job_id_raw, submit_time

-- Per local day (billing.timezone), account and user: GPU-hours held and GPU-hours held idle.
CREATE TABLE mart_idle_gpus_daily (
    cluster              VARCHAR NOT NULL,
    day                  DATE NOT NULL,
    account              VARCHAR,
    "user"               VARCHAR,
    allocated_gpu_hours  DOUBLE NOT NULL,
    sampled_gpu_hours    DOUBLE NOT NULL,
    idle_gpu_hours       DOUBLE NOT NULL,
    idle_share           DOUBLE,               -- idle / sampled
    zero_util_jobs       BIGINT NOT NULL       -- attempts with zero_util whose holding ended this day
);
