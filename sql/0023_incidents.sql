-- Reliability by incident, one job-failure taxonomy, goodput with restart overhead, GPU requests in every
-- form. docs/pipelines.md#reliability, #job-failures; docs/collectors.md (squeue).

-- squeue's four GPU request forms (collectors/squeue.py REQUEST_FORMS); `gpus` is their total as slurmctld
-- computes it. NULL in snapshots taken with the earlier live line, which printed tres-per-node only.
ALTER TABLE pending_jobs ADD COLUMN tasks INTEGER;
ALTER TABLE pending_jobs ADD COLUMN sockets_per_node INTEGER;
ALTER TABLE pending_jobs ADD COLUMN tres_per_job VARCHAR;
ALTER TABLE pending_jobs ADD COLUMN tres_per_task VARCHAR;
ALTER TABLE pending_jobs ADD COLUMN tres_per_socket VARCHAR;

-- Ended attempts by failure class (slurm_states.job_failure_class): 'user', 'system' or 'none'. Rows written
-- before this migration are classified from their state alone (a FAILED attempt linked to a node incident
-- becomes 'system' at the next `pipelines run --full`).
ALTER TABLE mart_job_outcomes_daily ADD COLUMN failure VARCHAR NOT NULL DEFAULT 'none';
UPDATE mart_job_outcomes_daily SET failure = CASE
    WHEN state IN ('NODE_FAIL', 'BOOT_FAIL', 'PREEMPTED', 'REQUEUED') THEN 'system'
    WHEN state IN ('FAILED', 'OUT_OF_MEMORY', 'TIMEOUT', 'DEADLINE', 'CANCELLED', 'SPECIAL_EXIT') THEN 'user'
    ELSE 'none' END;
-- unique key (kept by the runner's delete-then-insert): cluster, day, "partition", account, state, failure

-- A node's unavailability merged into incidents: node events, sinfo snapshots of the node DOWN/DRAINED and GPU
-- faults (hardware XIDs, GPU lost, uncorrectable ECC) that overlap or lie within
-- reliability.incident_merge_seconds of each other are one incident. Whole table, rebuilt by every run.
CREATE TABLE mart_node_incidents (
    cluster              VARCHAR NOT NULL,
    node                 VARCHAR NOT NULL,
    incident_start       TIMESTAMPTZ NOT NULL,
    incident_end         TIMESTAMPTZ,          -- NULL while ongoing; = start for a GPU fault alone
    unavailable_seconds  DOUBLE NOT NULL,      -- union of its DOWN/DRAIN records (overlaps once, bridged gaps not)
    cause                VARCHAR NOT NULL,     -- hardware | node_failure | maintenance | other
    failure              BOOLEAN NOT NULL,     -- cause is hardware or node_failure: counts in MTBF/MTTR
    node_events          BIGINT NOT NULL,      -- sacctmgr events merged into it
    snapshots            BIGINT NOT NULL,      -- sinfo snapshots merged into it
    gpu_faults           BIGINT NOT NULL,      -- GPU fault events merged into it
    states               VARCHAR,              -- distinct states (and 'xid:79', 'gpu_lost', ...) of its records
    reason               VARCHAR,              -- the reason of the record that decided the cause
    reason_user          VARCHAR,
    xids                 VARCHAR               -- distinct hardware XIDs, ',' joined
);
-- unique key (kept by the runner's delete-then-insert): cluster, node, incident_start

-- mart_node_reliability now counts incidents: failures = hardware + node-failure incidents; down_seconds =
-- merged unavailability of every cause.
ALTER TABLE mart_node_reliability ADD COLUMN incidents BIGINT NOT NULL DEFAULT 0;
ALTER TABLE mart_node_reliability ADD COLUMN hardware_failures BIGINT NOT NULL DEFAULT 0;

-- The incident a killed attempt's fault belongs to. NULL on rows written before this migration.
ALTER TABLE mart_fault_impact ADD COLUMN incident_start TIMESTAMPTZ;
ALTER TABLE mart_fault_impact ADD COLUMN cause VARCHAR;

-- Goodput (effective training time / allocated GPU time) with the restart cost R in both figures.
ALTER TABLE mart_goodput ADD COLUMN restart_cost_seconds DOUBLE;
ALTER TABLE mart_goodput ADD COLUMN interruptions BIGINT NOT NULL DEFAULT 0;   -- killed by failure incidents
ALTER TABLE mart_goodput ADD COLUMN expected_goodput DOUBLE;                    -- 1 - expected_lost_share
ALTER TABLE mart_goodput ADD COLUMN measured_goodput DOUBLE;                    -- 1 - measured_lost_share
