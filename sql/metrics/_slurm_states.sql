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
