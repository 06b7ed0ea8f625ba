-- sacct's usage fields (docs/ingest.md, "Usage fields") and CPU and memory efficiency per attempt as Slurm's
-- seff computes it (pipelines/cpu_mem_efficiency.py, docs/pipelines.md#cpu-and-memory-efficiency-seff).
-- Rows stored before this migration have NULL here until sacct gives them again (the live collection
-- re-reads its overlap; `ingest sacct` of a capture with these fields fills them).

-- Per step, as sacct prints them for the step line.
ALTER TABLE job_steps ADD COLUMN ntasks INTEGER;                 -- NTasks
ALTER TABLE job_steps ADD COLUMN total_cpu_seconds DOUBLE;       -- TotalCPU = UserCPU + SystemCPU (milliseconds kept)
ALTER TABLE job_steps ADD COLUMN user_cpu_seconds DOUBLE;        -- UserCPU
ALTER TABLE job_steps ADD COLUMN system_cpu_seconds DOUBLE;      -- SystemCPU
ALTER TABLE job_steps ADD COLUMN max_rss_bytes BIGINT;           -- MaxRSS: the largest RSS of any one task
ALTER TABLE job_steps ADD COLUMN ave_rss_bytes BIGINT;           -- AveRSS
ALTER TABLE job_steps ADD COLUMN consumed_energy_joules BIGINT;  -- ConsumedEnergyRaw
ALTER TABLE job_steps ADD COLUMN tres_usage_in_tot VARCHAR;      -- TRESUsageInTot as printed
ALTER TABLE job_steps ADD COLUMN tres_usage_in_max VARCHAR;      -- TRESUsageInMax as printed
ALTER TABLE job_steps ADD COLUMN mem_tot_bytes BIGINT;           -- TRESUsageInTot mem: sum of the tasks' peaks
ALTER TABLE job_steps ADD COLUMN gpu_util_tot_percent DOUBLE;    -- TRESUsageInTot gres/gpuutil (GPU accounting)
ALTER TABLE job_steps ADD COLUMN gpu_mem_tot_bytes BIGINT;       -- TRESUsageInTot gres/gpumem
ALTER TABLE job_steps ADD COLUMN gpu_util_max_percent DOUBLE;    -- TRESUsageInMax gres/gpuutil
ALTER TABLE job_steps ADD COLUMN gpu_mem_max_bytes BIGINT;       -- TRESUsageInMax gres/gpumem

-- Per attempt, as sacct prints them on the allocation line.
ALTER TABLE jobs ADD COLUMN total_cpu_seconds DOUBLE;            -- TotalCPU: sacct's sum over the finished steps
ALTER TABLE jobs ADD COLUMN user_cpu_seconds DOUBLE;
ALTER TABLE jobs ADD COLUMN system_cpu_seconds DOUBLE;
ALTER TABLE jobs ADD COLUMN consumed_energy_joules BIGINT;       -- ConsumedEnergyRaw (energy TRES of AllocTRES)
ALTER TABLE jobs ADD COLUMN req_mem_scope VARCHAR;               -- 'node' | 'cpu': ReqMem suffix n / c before 21.08; NULL after
ALTER TABLE jobs ADD COLUMN alloc_mem_bytes BIGINT;              -- mem of AllocTRES
ALTER TABLE jobs ADD COLUMN req_tres VARCHAR;                    -- ReqTRES as printed
ALTER TABLE jobs ADD COLUMN comment VARCHAR;                     -- Comment
ALTER TABLE jobs ADD COLUMN admin_comment VARCHAR;               -- AdminComment

-- One row per started attempt: seff's figures (Slurm 22.05.8 contribs/seff/seff).
CREATE TABLE mart_job_cpu_mem_efficiency (
    cluster                VARCHAR NOT NULL,
    job_id                 VARCHAR,              -- as Slurm prints it (123_4)
    job_id_raw             BIGINT NOT NULL,
    attempt                INTEGER,
    submit_time            TIMESTAMPTZ NOT NULL, -- with job_id_raw: the attempt (jobs' natural key)
    account                VARCHAR,
    "user"                 VARCHAR,
    "partition"            VARCHAR,
    state                  VARCHAR,
    start_time             TIMESTAMPTZ,
    end_time               TIMESTAMPTZ,          -- NULL while running
    end_day                DATE,                 -- end_time's day in billing.timezone; NULL while running
    nodes                  INTEGER NOT NULL,     -- seff's nnodes: NNodes, 1 when unknown or 0
    cpus                   INTEGER NOT NULL,     -- seff's ncpus: NCPUS (allocated), 1 when unknown or 0
    elapsed_seconds        BIGINT NOT NULL,      -- the attempt's Elapsed (seff's walltime)
    steps                  INTEGER NOT NULL,     -- step lines stored for the attempt
    cpu_used_seconds       BIGINT,               -- sum of the steps' TotalCPU, seconds + rounded sub-seconds; NULL: no step has TotalCPU
    core_walltime_seconds  BIGINT NOT NULL,      -- elapsed_seconds x cpus
    cpu_efficiency         DOUBLE,               -- cpu_used / core_walltime (0 when core_walltime is 0, as seff)
    mem_used_bytes         BIGINT,               -- MaxRSS of the step with the largest, x its NTasks; NULL: no step has MaxRSS
    mem_tasks              INTEGER,              -- that step's NTasks (seff: "estimated maximum" when not 1)
    req_mem_bytes          BIGINT,               -- seff's requested memory (see req_mem_rule)
    req_mem_rule           VARCHAR,              -- 'per_cpu' | 'per_node' (ReqMem c / n suffix) | 'alloc_tres' (21.08+) | 'req_mem'
    memory_efficiency      DOUBLE,               -- mem_used / req_mem (0 when req_mem is 0, as seff)
    window_end             TIMESTAMPTZ NOT NULL  -- end_time, or the run's now while running (the runner's window)
);
-- unique key (kept by the runner's delete-then-insert): cluster, job_id_raw, submit_time
