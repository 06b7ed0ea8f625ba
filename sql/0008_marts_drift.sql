-- Drift mart (pipelines/drift.py): one row per signal, entity and as_of, with the score and the threshold the
-- alerts use. Rebuilt for as_of at or after the window start. Day-level signals are as of the local day end
-- (billing.timezone), the current day's as of the run's now; fleet skew rows are as of now only.
CREATE TABLE mart_drift (
    cluster      VARCHAR NOT NULL,
    as_of        TIMESTAMPTZ NOT NULL,
    signal       VARCHAR NOT NULL,   -- gpu_temperature_vs_fleet, gpu_power_vs_fleet, gpu_sm_clock_vs_fleet,
                                     -- node_xid_events, node_ecc_corrected, node_ecc_uncorrected,
                                     -- account_gpu_hours, account_cost_usd, partition_failure_rate,
                                     -- partition_wait_p50_seconds, driver_version_skew, cuda_version_skew,
                                     -- gpu_count_nvml_vs_gres
    entity_type  VARCHAR NOT NULL,   -- gpu | node | account | partition
    entity       VARCHAR NOT NULL,   -- GPU UUID, node, account or partition name
    node         VARCHAR,            -- for gpu and node entities
    value        DOUBLE,             -- the entity's value (units in docs/pipelines.md#drift)
    baseline     DOUBLE,             -- what it is compared with (fleet median, trailing median, GRES count)
    score        DOUBLE,             -- larger is worse; robust z for the z-score methods
    threshold    DOUBLE,             -- from config drift.*; breached = score > threshold
    breached     BOOLEAN NOT NULL,
    method       VARCHAR NOT NULL,   -- robust_z_fleet_same_util | robust_z_own_history | robust_z_trailing
                                     -- | fleet_mode | difference
    detail       VARCHAR             -- human-readable comparison for alert descriptions
);
-- unique key (kept by the runner's delete-then-insert): cluster, as_of, signal, entity
