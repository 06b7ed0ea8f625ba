-- Reliability marts (pipelines/reliability.py); docs/pipelines.md#reliability.

-- Ended attempts by the billing-zone day of their end and terminal state.
CREATE TABLE mart_job_outcomes_daily (
    cluster       VARCHAR NOT NULL,
    day           DATE NOT NULL,
    "partition"   VARCHAR NOT NULL,
    account       VARCHAR NOT NULL,
    state         VARCHAR NOT NULL,       -- COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, CANCELLED, ...
    jobs          BIGINT NOT NULL,        -- attempts (a requeued job counts once per attempt)
    gpu_hours     DOUBLE NOT NULL         -- elapsed x GPUs of those attempts
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, day, "partition", account, state

-- Requeues by the day the requeued attempt ended.
CREATE TABLE mart_requeues_daily (
    cluster            VARCHAR NOT NULL,
    day                DATE NOT NULL,
    "partition"        VARCHAR NOT NULL,
    account            VARCHAR NOT NULL,
    attempts_ended     BIGINT NOT NULL,   -- attempts that ended this day
    requeues           BIGINT NOT NULL,   -- of those, attempts followed by a later attempt of the same job
    requeued_jobs      BIGINT NOT NULL,   -- distinct jobs among `requeues`
    requeue_rate       DOUBLE,            -- requeues / attempts_ended
    requeued_gpu_hours DOUBLE NOT NULL    -- GPU-hours of the requeued attempts
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, day, "partition", account

-- Per node over all history: failures (DOWN/DRAIN/FAIL events), MTBF and MTTR.
CREATE TABLE mart_node_reliability (
    cluster              VARCHAR NOT NULL,
    node                 VARCHAR NOT NULL,
    "partition"          VARCHAR NOT NULL,   -- last partition(s) seen in sinfo, ',' joined; '' unknown
    observed_seconds     DOUBLE NOT NULL,    -- first sighting to now
    failures             BIGINT NOT NULL,
    down_seconds         DOUBLE NOT NULL,
    mtbf_seconds         DOUBLE,             -- (observed - down) / failures; NULL without failures
    mttr_seconds         DOUBLE              -- mean duration of ended failures
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, node

-- Node fault -> attempts that died on that node -> GPU-hours lost -> did the job come back.
CREATE TABLE mart_fault_impact (
    cluster                   VARCHAR NOT NULL,
    fault_time                TIMESTAMPTZ NOT NULL,
    node                      VARCHAR NOT NULL,
    fault_source              VARCHAR NOT NULL,  -- 'node_event' | 'gpu_event'
    fault_kind                VARCHAR NOT NULL,  -- node state (DOWN, DRAIN) or 'xid:79', 'ecc', ...
    job_id_raw                BIGINT NOT NULL,
    submit_time               TIMESTAMPTZ NOT NULL, -- of the failed attempt
    attempt                   INTEGER,
    job_state                 VARCHAR,
    account                   VARCHAR,
    "partition"               VARCHAR,
    gpu_hours_lost            DOUBLE NOT NULL,   -- elapsed x GPUs of the failed attempt
    came_back                 BOOLEAN NOT NULL,  -- a later attempt of the job started
    completed_later           BOOLEAN NOT NULL,  -- a later attempt COMPLETED
    resumed_from_checkpoint   BOOLEAN            -- TRUE: completed in less time than was lost; NULL: cannot tell
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, fault_time, node, fault_source, fault_kind, job_id_raw, submit_time

-- Training goodput per partition and job size N nodes, from measured node failure rates.
CREATE TABLE mart_goodput (
    cluster                       VARCHAR NOT NULL,
    "partition"                   VARCHAR NOT NULL,
    nodes                         INTEGER NOT NULL,
    node_mtbf_seconds             DOUBLE,   -- partition: node up-seconds / failures
    mtbi_seconds                  DOUBLE,   -- node_mtbf / N
    checkpoint_cost_seconds       DOUBLE NOT NULL,
    young_daly_interval_seconds   DOUBLE,   -- sqrt(2 C MTBI)
    expected_lost_share           DOUBLE,   -- C/tau + tau/(2 MTBI) at tau = Young-Daly, capped at 1
    measured_lost_share           DOUBLE,   -- GPU-hours of fault-killed attempts / all GPU-hours, jobs of N nodes
    jobs                          BIGINT NOT NULL
);
-- unique key (kept by the runner's delete-then-insert; no index, for bulk-insert speed): cluster, "partition", nodes
