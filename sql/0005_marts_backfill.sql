-- Backfill and scheduling marts (pipelines/backfill.py); docs/pipelines.md#backfill-efficiency.

-- Attempts by the billing-zone day they started and what started them (sacct Flags).
CREATE TABLE mart_backfill_daily (
    cluster          VARCHAR NOT NULL,
    day              DATE NOT NULL,
    "partition"      VARCHAR NOT NULL,
    sched_by         VARCHAR NOT NULL,  -- 'main' | 'backfill' | 'submit' | 'unknown'
    jobs             BIGINT NOT NULL,
    gpu_hours        DOUBLE NOT NULL,   -- elapsed (or up to now) x GPUs of those attempts
    share            DOUBLE,            -- of the day's and partition's jobs
    gpu_hours_share  DOUBLE             -- of the day's and partition's GPU-hours
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, day, "partition", sched_by

-- sdiag deltas between consecutive snapshots; counters reset at midnight UTC and on restart.
CREATE TABLE mart_sched_deltas (
    cluster                  VARCHAR NOT NULL,
    snapshot_time            TIMESTAMPTZ NOT NULL,
    prev_snapshot_time       TIMESTAMPTZ,
    reset                    BOOLEAN NOT NULL,  -- counters restarted between the two snapshots
    interval_seconds         DOUBLE,
    jobs_submitted           BIGINT,
    jobs_started             BIGINT,
    jobs_completed           BIGINT,
    jobs_canceled            BIGINT,
    jobs_failed              BIGINT,
    main_cycles              BIGINT,
    bf_cycles                BIGINT,
    bf_backfilled_jobs       BIGINT,
    bf_mean_cycle_us         BIGINT,            -- as sdiag printed it at snapshot_time
    bf_max_cycle_us          BIGINT,
    bf_last_cycle_us         BIGINT,
    bf_depth_mean            BIGINT,
    bf_last_depth            BIGINT,
    main_mean_cycle_us       BIGINT,
    main_max_cycle_us        BIGINT,
    jobs_pending             BIGINT,
    jobs_running             BIGINT
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, snapshot_time

-- Occupancy per time bucket (pipelines.occupancy_bucket_seconds, default 900).
CREATE TABLE mart_occupancy (
    cluster                      VARCHAR NOT NULL,
    bucket_start                 TIMESTAMPTZ NOT NULL,
    "partition"                  VARCHAR NOT NULL,
    gpu_model                    VARCHAR NOT NULL,
    available_gpus               DOUBLE,            -- mean GPUs on usable nodes (sinfo); NULL without snapshots
    allocated_gpus               DOUBLE NOT NULL,   -- mean GPUs held by job attempts
    idle_gpu_seconds             DOUBLE,            -- available - allocated, integrated over the bucket
    pending_gpu_jobs             BIGINT NOT NULL,   -- GPU attempts pending at some point in the bucket
    min_pending_gpus             INTEGER,           -- smallest GPU request among them
    hole_gpu_seconds             DOUBLE,            -- idle GPU-seconds while a pending GPU job would have fit
    backfill_gpu_seconds         DOUBLE NOT NULL,   -- GPU-seconds held by backfill-started attempts
    hole_filled_share            DOUBLE             -- backfill / (backfill + hole) in buckets with holes or backfill
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, bucket_start, "partition", gpu_model

-- Wait (start - eligible, else submit) by billing-zone day of start.
CREATE TABLE mart_wait_times (
    cluster        VARCHAR NOT NULL,
    day            DATE NOT NULL,
    "partition"    VARCHAR NOT NULL,
    account        VARCHAR NOT NULL,
    gpu_class      VARCHAR NOT NULL,   -- '0', '1', '2-4', '5-8', '9-16', '17+' GPUs
    gpu_model      VARCHAR NOT NULL,
    jobs           BIGINT NOT NULL,
    p50_seconds    DOUBLE,
    p90_seconds    DOUBLE,
    p99_seconds    DOUBLE,
    mean_seconds   DOUBLE,
    max_seconds    DOUBLE
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, day, "partition", account, gpu_class, gpu_model
