-- Generated from slurmscope/slurm_states.py by `python -m slurmscope.slurm_states`; do not edit.
-- Slurm state sets the metric queries share (scalar macros, inlined where they are called).

-- Nodes that cannot run work: sinfo base states and flags (NODE_METRIC_UNAVAILABLE_*).
CREATE OR REPLACE MACRO slurm_node_unavailable(state, state_flags) AS
    (coalesce(state_flags, '') SIMILAR TO '.*(DRAIN|NOT_RESPONDING|FAIL|MAINT).*'
     OR upper(coalesce(state, '')) IN ('DOWN','DRAINED','DRAINING','DRAIN','FAIL','FAILING','MAINT','UNKNOWN','FUTURE','INVAL'));

-- The display state used as the `state` label of node metrics (NODE_METRIC_DOWN_*, NODE_METRIC_OTHER_STATES).
CREATE OR REPLACE MACRO slurm_node_state(state, state_flags) AS
    CASE WHEN upper(coalesce(state, '')) IN ('DOWN','FAIL','FAILING')
              OR coalesce(state_flags, '') LIKE '%NOT_RESPONDING%' THEN 'down'
         WHEN coalesce(state_flags, '') LIKE '%DRAIN%' OR upper(coalesce(state, '')) LIKE 'DRAIN%' THEN 'drain'
         WHEN upper(coalesce(state, '')) IN ('MAINT','UNKNOWN','FUTURE','INVAL') THEN 'other'
         ELSE lower(coalesce(state, 'unknown')) END;

-- Job states after which an attempt no longer runs (JOB_FINISHED_STATES).
CREATE OR REPLACE MACRO slurm_job_terminal_states() AS
    ['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY', 'PREEMPTED', 'BOOT_FAIL', 'DEADLINE'];

-- States of a record whose attempt has not ended (JOB_NOT_ENDED_STATES).
CREATE OR REPLACE MACRO slurm_job_not_ended_states() AS
    ['RUNNING', 'PENDING', 'REQUEUE_HOLD', 'REQUEUE_FED', 'SUSPENDED', 'RESIZING'];

-- Failure class of an ended attempt from its record alone: job_failure_class without the node-incident link
-- (the reliability pipeline links incidents; mart_fault_impact holds the links): 'user', 'system' or 'none'.
CREATE OR REPLACE MACRO slurm_job_failure_class(state, state_raw, start_time) AS
    CASE WHEN state IN ('NODE_FAIL','BOOT_FAIL','PREEMPTED','REQUEUED') THEN 'system'
         WHEN start_time IS NULL THEN 'none'
         WHEN state = 'CANCELLED' AND trim(coalesce(state_raw, '')) = 'CANCELLED by 0' THEN 'system'
         WHEN state IN ('FAILED','OUT_OF_MEMORY','TIMEOUT','DEADLINE','CANCELLED','SPECIAL_EXIT') THEN 'user'
         ELSE 'none' END;

-- States a node incident linked to the attempt turns from a user into a system failure
-- (JOB_INCIDENT_LINKED_STATES).
CREATE OR REPLACE MACRO slurm_job_incident_linked_states() AS
    ['FAILED'];

-- Pending reasons of a job waiting only for the scheduler (JOB_PENDING_SCHEDULER_REASONS).
CREATE OR REPLACE MACRO slurm_pending_scheduler_reasons() AS
    ['Priority', 'Resources'];
