-- Raw tables: every record a source gave, keyed by its natural key, upserted, never duplicated.
-- Times are TIMESTAMPTZ in UTC. Every table carries `cluster` so several clusters share one database.

-- One row per job allocation attempt (sacct --duplicates); steps live in job_steps.
CREATE TABLE jobs (
    cluster            VARCHAR NOT NULL,
    job_id             VARCHAR NOT NULL,      -- as Slurm prints it: 123, 123_4, 123_[5-9%2], 123+0
    job_id_raw         BIGINT NOT NULL,
    submit_time        TIMESTAMPTZ NOT NULL,
    attempt            INTEGER,               -- rank by submit_time among stored rows of job_id_raw
    array_job_id       BIGINT,
    array_task_id      VARCHAR,               -- '4', or the pending range '[5-9%2]'
    het_job_id         BIGINT,
    het_job_offset     INTEGER,
    name               VARCHAR,
    "user"             VARCHAR,
    uid                BIGINT,
    account            VARCHAR,
    "partition"        VARCHAR,
    qos                VARCHAR,
    state              VARCHAR,               -- normalised: 'CANCELLED by 0' -> 'CANCELLED'
    state_raw          VARCHAR,
    reason             VARCHAR,
    exit_code          INTEGER,
    signal             INTEGER,
    eligible_time      TIMESTAMPTZ,
    start_time         TIMESTAMPTZ,
    end_time           TIMESTAMPTZ,
    elapsed_seconds    BIGINT,
    timelimit_seconds  BIGINT,               -- NULL = UNLIMITED / Partition_Limit
    nodes              INTEGER,
    cpus               INTEGER,
    gpus               INTEGER,              -- untyped gres/gpu count; MIG slices excluded
    gpu_type           VARCHAR,
    mig_slices         INTEGER,
    req_mem_bytes      BIGINT,
    alloc_tres         VARCHAR,
    billing            DOUBLE,               -- billing TRES of AllocTRES, when present
    node_list          VARCHAR,              -- compressed hostlist as printed
    sched_by           VARCHAR,              -- 'main' | 'backfill' | 'submit' | NULL
    flags              VARCHAR,
    restarts           INTEGER,
    priority           BIGINT,
    source             VARCHAR,              -- file name or 'live'
    ingested_at        TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (cluster, job_id_raw, submit_time)
);

CREATE TABLE job_steps (
    cluster            VARCHAR NOT NULL,
    job_id_raw         BIGINT NOT NULL,
    job_submit_time    TIMESTAMPTZ NOT NULL, -- submit time of the allocation attempt the step belongs to
    step_id            VARCHAR NOT NULL,     -- 'batch', 'extern', 'interactive', '0', '0+1'
    job_id             VARCHAR NOT NULL,     -- as printed, e.g. '123_4.batch'
    name               VARCHAR,
    state              VARCHAR,
    state_raw          VARCHAR,
    exit_code          INTEGER,
    signal             INTEGER,
    start_time         TIMESTAMPTZ,
    end_time           TIMESTAMPTZ,
    elapsed_seconds    BIGINT,
    nodes              INTEGER,
    cpus               INTEGER,
    gpus               INTEGER,
    alloc_tres         VARCHAR,
    node_list          VARCHAR,
    source             VARCHAR,
    ingested_at        TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (cluster, job_id_raw, job_submit_time, step_id)
);

-- sinfo snapshots: one row per node per partition per snapshot (sinfo -N repeats nodes per partition).
CREATE TABLE node_states (
    cluster            VARCHAR NOT NULL,
    snapshot_time      TIMESTAMPTZ NOT NULL,
    node               VARCHAR NOT NULL,
    "partition"        VARCHAR NOT NULL,     -- without the default-partition '*'
    state              VARCHAR,              -- base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    state_flags        VARCHAR,              -- '+'-joined flags: DRAIN, NOT_RESPONDING (*), POWERED_DOWN (~), ...
    state_raw          VARCHAR,
    reason             VARCHAR,
    reason_user        VARCHAR,
    reason_time        TIMESTAMPTZ,
    cpus_alloc         INTEGER,
    cpus_idle          INTEGER,
    cpus_other         INTEGER,
    cpus_total         INTEGER,
    memory_mb          BIGINT,
    alloc_memory_mb    BIGINT,
    gres               VARCHAR,
    gres_used          VARCHAR,
    gpus_total         INTEGER,
    gpus_used          INTEGER,
    gpu_type           VARCHAR,
    features           VARCHAR,
    PRIMARY KEY (cluster, snapshot_time, node, "partition")
);

-- squeue snapshots of pending (and running) jobs with their reasons.
CREATE TABLE pending_jobs (
    cluster            VARCHAR NOT NULL,
    snapshot_time      TIMESTAMPTZ NOT NULL,
    job_id             VARCHAR NOT NULL,
    job_id_raw         BIGINT,
    array_job_id       BIGINT,
    array_task_id      VARCHAR,
    name               VARCHAR,
    "user"             VARCHAR,
    account            VARCHAR,
    "partition"        VARCHAR,
    qos                VARCHAR,
    state              VARCHAR,
    reason             VARCHAR,
    priority           BIGINT,
    submit_time        TIMESTAMPTZ,
    start_time         TIMESTAMPTZ,          -- expected start for pending jobs
    nodes              INTEGER,
    cpus               INTEGER,
    gpus               INTEGER,
    tres_per_node      VARCHAR,
    timelimit_seconds  BIGINT,
    dependency         VARCHAR,
    PRIMARY KEY (cluster, snapshot_time, job_id)
);

-- sshare -a -l -P snapshots: the association tree with shares and usage as Slurm computed them.
CREATE TABLE shares (
    cluster            VARCHAR NOT NULL,
    snapshot_time      TIMESTAMPTZ NOT NULL,
    account            VARCHAR NOT NULL,
    "user"             VARCHAR NOT NULL,     -- '' for the account's own row
    parent             VARCHAR,
    depth              INTEGER,
    raw_shares         BIGINT,               -- NULL when 'parent'
    norm_shares        DOUBLE,
    raw_usage          DOUBLE,
    norm_usage         DOUBLE,
    effectv_usage      DOUBLE,
    fairshare          DOUBLE,
    level_fs           DOUBLE,
    grp_tres_mins      VARCHAR,
    tres_run_mins      VARCHAR,
    PRIMARY KEY (cluster, snapshot_time, account, "user")
);

-- sdiag snapshots: counters reset at midnight UTC and on restart; pipelines compute deltas.
CREATE TABLE sched_stats (
    cluster                         VARCHAR NOT NULL,
    snapshot_time                   TIMESTAMPTZ NOT NULL,
    data_since                      TIMESTAMPTZ,
    server_thread_count             INTEGER,
    agent_queue_size                INTEGER,
    jobs_submitted                  BIGINT,
    jobs_started                    BIGINT,
    jobs_completed                  BIGINT,
    jobs_canceled                   BIGINT,
    jobs_failed                     BIGINT,
    jobs_pending                    BIGINT,
    jobs_running                    BIGINT,
    main_last_cycle_us              BIGINT,
    main_max_cycle_us               BIGINT,
    main_total_cycles               BIGINT,
    main_mean_cycle_us              BIGINT,
    main_mean_depth                 BIGINT,
    main_cycles_per_minute          BIGINT,
    main_last_queue_length          BIGINT,
    bf_backfilled_jobs              BIGINT,   -- Total backfilled jobs (since last slurm start)
    bf_backfilled_jobs_since_reset  BIGINT,   -- Total backfilled jobs (since last stats cycle start)
    bf_backfilled_het_jobs          BIGINT,
    bf_total_cycles                 BIGINT,
    bf_last_cycle_us                BIGINT,
    bf_max_cycle_us                 BIGINT,
    bf_mean_cycle_us                BIGINT,
    bf_last_depth                   BIGINT,
    bf_last_depth_try               BIGINT,
    bf_depth_mean                   BIGINT,
    bf_depth_mean_try               BIGINT,
    bf_last_queue_length            BIGINT,
    bf_queue_length_mean            BIGINT,
    bf_table_size                   BIGINT,
    bf_table_size_mean              BIGINT,
    bf_last_cycle_when              TIMESTAMPTZ,
    raw_text                        VARCHAR,
    PRIMARY KEY (cluster, snapshot_time)
);

-- sacctmgr show event: node DOWN/DRAIN history with reasons.
CREATE TABLE node_events (
    cluster            VARCHAR NOT NULL,
    node               VARCHAR NOT NULL,     -- '' for cluster-wide events
    time_start         TIMESTAMPTZ NOT NULL,
    time_end           TIMESTAMPTZ,          -- NULL while ongoing
    state              VARCHAR,
    reason             VARCHAR,
    reason_user        VARCHAR,
    event_type         VARCHAR,              -- 'node' | 'cluster'
    tres               VARCHAR,
    PRIMARY KEY (cluster, node, time_start)
);

CREATE TABLE reservations (
    cluster            VARCHAR NOT NULL,
    name               VARCHAR NOT NULL,
    start_time         TIMESTAMPTZ NOT NULL,
    end_time           TIMESTAMPTZ,
    node_list          VARCHAR,
    node_count         INTEGER,
    gpus               INTEGER,
    accounts           VARCHAR,
    users              VARCHAR,
    flags              VARCHAR,
    state              VARCHAR,
    tres               VARCHAR,
    seen_at            TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (cluster, name, start_time)
);

-- scontrol show config, as key/value pairs per snapshot (PriorityDecayHalfLife, TRESBillingWeights, ...).
CREATE TABLE slurm_config (
    cluster            VARCHAR NOT NULL,
    snapshot_time      TIMESTAMPTZ NOT NULL,
    key                VARCHAR NOT NULL,
    value              VARCHAR,
    PRIMARY KEY (cluster, snapshot_time, key)
);

-- scontrol ping: controller reachability.
CREATE TABLE controller_pings (
    cluster            VARCHAR NOT NULL,
    snapshot_time      TIMESTAMPTZ NOT NULL,
    host               VARCHAR NOT NULL,
    role               VARCHAR,              -- primary | backup
    up                 BOOLEAN,
    PRIMARY KEY (cluster, snapshot_time, host)
);

-- NVML: per-GPU per-minute aggregates from the node agents' spool.
CREATE TABLE gpu_samples (
    cluster              VARCHAR NOT NULL,
    node                 VARCHAR NOT NULL,
    gpu_uuid             VARCHAR NOT NULL,
    minute               TIMESTAMPTZ NOT NULL,
    gpu_index            INTEGER,
    gpu_minor            INTEGER,
    pci_bus_id           VARCHAR,
    model                VARCHAR,
    samples              INTEGER,
    util_gpu_mean        DOUBLE,             -- percent
    util_gpu_max         DOUBLE,
    util_mem_mean        DOUBLE,
    mem_used_max_bytes   BIGINT,
    mem_total_bytes      BIGINT,
    power_mean_watts     DOUBLE,
    power_max_watts      DOUBLE,
    energy_joules        DOUBLE,             -- delta of the total energy counter over the minute
    temp_gpu_max_celsius DOUBLE,
    temp_mem_max_celsius DOUBLE,
    sm_clock_mean_mhz    DOUBLE,
    mem_clock_mean_mhz   DOUBLE,
    throttle_seconds     DOUBLE,
    throttle_reasons     BIGINT,             -- OR of clock-event reason bits seen in the minute
    pcie_replay_delta    BIGINT,
    ecc_corrected_delta  BIGINT,
    ecc_uncorrected_delta BIGINT,
    ecc_corrected_total   BIGINT,
    ecc_uncorrected_total BIGINT,
    remapped_pending     BOOLEAN,
    remapped_failed      BOOLEAN,
    retired_pages        BIGINT,
    nvlink_errors_delta  BIGINT,
    null_fields          INTEGER,            -- fields NotSupported/NoPermission in the minute
    PRIMARY KEY (cluster, node, gpu_uuid, minute)
);

-- NVML and kernel XID events, GPU lost, ECC, health transitions.
CREATE TABLE gpu_events (
    cluster            VARCHAR NOT NULL,
    node               VARCHAR NOT NULL,
    gpu_uuid           VARCHAR NOT NULL,     -- '' when the event names no GPU
    event_time         TIMESTAMPTZ NOT NULL,
    event_type         VARCHAR NOT NULL,     -- 'xid' | 'gpu_lost' | 'ecc' | 'nvml_error' | ...
    xid                INTEGER,
    pci_bus_id         VARCHAR,
    source             VARCHAR,              -- 'nvml' | 'kmsg'
    detail             VARCHAR,
    PRIMARY KEY (cluster, node, gpu_uuid, event_time, event_type)
);

-- GPU -> job attribution intervals (from the prolog/epilog mapping, cross-checked with cgroups).
CREATE TABLE gpu_jobs (
    cluster            VARCHAR NOT NULL,
    node               VARCHAR NOT NULL,
    gpu_uuid           VARCHAR NOT NULL,
    job_id             VARCHAR NOT NULL,
    interval_start     TIMESTAMPTZ NOT NULL,
    interval_end       TIMESTAMPTZ,
    gpu_index          INTEGER,
    mig_instance       VARCHAR,              -- '' for a whole GPU
    source             VARCHAR,              -- 'prolog' | 'cgroup'
    PRIMARY KEY (cluster, node, gpu_uuid, job_id, interval_start)
);

-- GPU inventory per node as NVML sees it (for GRES vs NVML mismatch, version skew).
CREATE TABLE gpu_inventory (
    cluster            VARCHAR NOT NULL,
    node               VARCHAR NOT NULL,
    gpu_uuid           VARCHAR NOT NULL,
    seen_at            TIMESTAMPTZ NOT NULL,
    gpu_index          INTEGER,
    gpu_minor          INTEGER,
    pci_bus_id         VARCHAR,
    model              VARCHAR,
    serial             VARCHAR,
    driver_version     VARCHAR,
    cuda_version       VARCHAR,
    mig_mode           BOOLEAN,
    PRIMARY KEY (cluster, node, gpu_uuid, seen_at)
);

-- Spool files already loaded (a file seen twice is loaded once).
CREATE TABLE spool_files (
    cluster            VARCHAR NOT NULL,
    node               VARCHAR NOT NULL,
    file_name          VARCHAR NOT NULL,
    sha256             VARCHAR NOT NULL,
    rows               BIGINT,
    loaded_at          TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (cluster, node, file_name)
);

CREATE SEQUENCE collector_run_id;

CREATE TABLE collector_runs (
    run_id             BIGINT PRIMARY KEY DEFAULT nextval('collector_run_id'),
    cluster            VARCHAR NOT NULL,
    collector          VARCHAR NOT NULL,
    started_at         TIMESTAMPTZ NOT NULL,
    finished_at        TIMESTAMPTZ,
    window_start       TIMESTAMPTZ,
    window_end         TIMESTAMPTZ,
    rows               BIGINT,
    quarantined        BIGINT,
    status             VARCHAR NOT NULL,     -- 'ok' | 'error' | 'timeout'
    error              VARCHAR,
    duration_seconds   DOUBLE,
    source             VARCHAR
);

-- Where each incremental collector resumes; advanced only by a successful run.
CREATE TABLE watermarks (
    cluster            VARCHAR NOT NULL,
    collector          VARCHAR NOT NULL,
    position           TIMESTAMPTZ NOT NULL,
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (cluster, collector)
);

CREATE TABLE quarantine (
    cluster            VARCHAR NOT NULL,
    source             VARCHAR NOT NULL,     -- collector kind and file, e.g. 'sacct:pozidriv.log'
    line_no            BIGINT NOT NULL,
    raw_text           VARCHAR NOT NULL,
    raw_bytes          BLOB,                 -- original bytes when the line was not valid UTF-8
    reason             VARCHAR NOT NULL,
    content_sha256     VARCHAR NOT NULL,     -- of the whole input, so re-ingest is a no-op
    ingested_at        TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (cluster, source, content_sha256, line_no)
);
