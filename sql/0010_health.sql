-- Health verdict marts (pipelines/health.py); rules in docs/pipelines.md#health.
-- One row per unbroken run of an unchanged verdict: evaluated at every sinfo snapshot, a new row starts when
-- status or reasons (nodes: or Slurm's reason text) change, or when the entity was not seen for more than
-- pipelines.node_snapshot_max_gap_seconds; an incremental run continues the stored run that crosses its window
-- start (the marts are windowed on valid_until). The verdict in force at an instant T is the row with the
-- latest `since` <= T, if its valid_until > T.

CREATE TABLE mart_node_health (
    cluster          VARCHAR NOT NULL,
    since            TIMESTAMPTZ NOT NULL,   -- first sinfo snapshot of the run
    last_seen        TIMESTAMPTZ NOT NULL,   -- last sinfo snapshot of the run
    valid_until      TIMESTAMPTZ NOT NULL,   -- last_seen + pipelines.node_snapshot_max_gap_seconds
    node             VARCHAR NOT NULL,
    status           VARCHAR NOT NULL,       -- 'ok' | 'degraded' | 'failing'
    reason           VARCHAR NOT NULL,       -- first reason that holds ('' when ok): gpu_failing, gpu_missing,
                                             -- xid_critical, slurm_down, gpu_degraded, slurm_drain, slurm_unavailable
    reasons          VARCHAR NOT NULL,       -- every reason that holds, ',' joined, in that order
    slurm_state      VARCHAR,                -- sinfo base state and flags at `since`, e.g. 'IDLE+DRAIN'
    slurm_reason     VARCHAR,                -- sinfo reason text at `since`
    gpus_configured  INTEGER,                -- GRES gpu count (sinfo)
    gpus_visible     INTEGER,                -- GPUs in the latest NVML inventory of the node
    gpus_failing     INTEGER,                -- GPUs of the node whose verdict is failing
    gpus_degraded    INTEGER
);
-- unique key (kept by the runner's delete-then-insert): cluster, node, since

CREATE TABLE mart_gpu_health (
    cluster          VARCHAR NOT NULL,
    since            TIMESTAMPTZ NOT NULL,
    last_seen        TIMESTAMPTZ NOT NULL,
    valid_until      TIMESTAMPTZ NOT NULL,
    node             VARCHAR NOT NULL,
    gpu_uuid         VARCHAR NOT NULL,
    gpu_index        INTEGER,
    gpu_model        VARCHAR,
    status           VARCHAR NOT NULL,       -- 'ok' | 'degraded' | 'failing'
    reason           VARCHAR NOT NULL,       -- fallen_off_bus, row_remap_failed, uncorrectable_ecc, xid_critical,
                                             -- overheating, row_remap_pending, xid_other, throttling, hot,
                                             -- telemetry_stale; '' when ok
    reasons          VARCHAR NOT NULL,
    detail           VARCHAR                 -- e.g. 'XID 79 at 2026-11-30T11:55:00Z; 91.5 C', at `since`
);
-- unique key (kept by the runner's delete-then-insert): cluster, node, gpu_uuid, since
