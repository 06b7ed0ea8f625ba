"""Slurm's job and node states as Slurm prints them, and the named sets of them that slurmscope tests against.

Sources: the JOB STATE CODES of sacct(1) and squeue(1), the NODE STATE CODES of sinfo(1)
(https://slurm.schedmd.com/sacct.html#SECTION_JOB-STATE-CODES,
https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES,
https://slurm.schedmd.com/sinfo.html#SECTION_NODE-STATE-CODES) and `enum job_states` in slurm.h.

A job has one base state (PENDING, RUNNING, SUSPENDED, or one of the finished states) that sacct may follow
with detail (`CANCELLED by 1234`); squeue also shows flag states (COMPLETING, REQUEUE_HOLD, ...). A node has
one base state and any number of flags: sinfo prints them as `+`-joined words (`IDLE+DRAIN`,
`MIXED+CLOUD+POWERED_DOWN`) or as one-character suffixes (`idle~`, `down*`), in long (`%T`) or compact
(`%t`: `drng`, `mix`) spelling. `parse_node_state` reads every notation into (base state, flags).

The node sets below are not one classification: the cost split, the health verdict, the metric labels and
the reliability incidents each ask a different question and so draw the line in a different place. Job
failures have one classification (user or system, the job failure taxonomy below), shared by the marts,
the report and the alerts. Each set
says which question it answers; callers compare states upper-cased, as Slurm prints them. Every set is a
tuple, so SQL and PromQL built from it (`sql_list`, `"|".join(...)`) come out in one stable order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NULL_WORDS = frozenset({"", "Unknown", "None", "(null)", "N/A", "n/a", "NONE", "none", "(None)", "INVALID"})
"""Words Slurm prints where a value is absent. `Unknown` (time not reached yet), `None` (never, e.g. a job
cancelled while pending has Start=None), `(null)` (unset string), `N/A` and `NONE` (squeue, sinfo)."""

# ------------------------------------------------------------------------------------------ job states

JOB_STATE_CODES = {
    "BF": "BOOT_FAIL",
    "CA": "CANCELLED",
    "CD": "COMPLETED",
    "CF": "CONFIGURING",
    "CG": "COMPLETING",
    "DL": "DEADLINE",
    "F": "FAILED",
    "NF": "NODE_FAIL",
    "OOM": "OUT_OF_MEMORY",
    "PD": "PENDING",
    "PR": "PREEMPTED",
    "R": "RUNNING",
    "RD": "RESV_DEL_HOLD",
    "RF": "REQUEUE_FED",
    "RH": "REQUEUE_HOLD",
    "RQ": "REQUEUED",
    "RS": "RESIZING",
    "RV": "REVOKED",
    "SI": "SIGNALING",
    "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT",
    "ST": "STOPPED",
    "S": "SUSPENDED",
    "TO": "TIMEOUT",
}
"""squeue's compact codes (`%t`, StateCompact) and the long names squeue and sacct print (`%T`, State).
sacct's list is the part accounting records: BF CA CD DL F NF OOM PD PR R RQ RS RV S TO."""

JOB_STATE_WORD = r"^([A-Z_]+)"
"""The state word at the start of a State value (regular expression, group 1), for scalar and Polars use."""


def normalise_job_state(text: str) -> str | None:
    """The state word of a sacct State value: `CANCELLED by 1234` -> CANCELLED, a truncated `CANCELLED+`
    -> CANCELLED, `RUNNING` -> RUNNING; None when the value does not start with a state word.

    sacct appends who cancelled a job (and `+` when the column is too narrow): the `jobs.state` column keeps
    the bare state so that every set below matches it; `state_raw` keeps what sacct printed.
    """
    m = re.match(JOB_STATE_WORD, text.strip())
    return m.group(1) if m else None


JOB_FINISHED_STATES = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)
"""Slurm's finished base states (slurm.h: every state after JOB_SUSPENDED, IS_JOB_FINISHED). The terminal
states of the jobs-ended metrics: each gets a series from 0, so their order is the order of those series.
REQUEUED, REVOKED and SPECIAL_EXIT are flags on a finished base state, not states of their own, and so
are not counted as ended there."""

JOB_ENDED_STATES = (*JOB_FINISHED_STATES, "REQUEUED", "REVOKED", "SPECIAL_EXIT")
"""States of an accounting record that no longer runs: the finished base states plus the flag states sacct
prints for a record that ended (requeued, revoked by a sibling cluster, held in special exit). Fair share
uses it: slurmctld charged such a record for the last time at its end (priority_p_job_end), so without an
End in accounting it has nothing left to accrue up to `now`."""

JOB_NOT_ENDED_STATES = ("RUNNING", "PENDING", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESIZING")
"""States of a record whose allocation attempt has not ended, even when accounting already has an End for
it (a requeued job held or forwarded, a job being resized): the reliability outcomes leave them out."""

JOB_NODE_FAULT_STATES = ("NODE_FAIL", "FAILED", "REQUEUED", "BOOT_FAIL")
"""Attempt end states a node fault can cause: the node died under it, the program crashed on a broken GPU,
Slurm requeued it off a failing node, or the node never booted. Reliability links only these attempts to a
fault (an OUT_OF_MEMORY or TIMEOUT is the job's own doing)."""

# --------------------------------------------------------------------------------- job failure taxonomy
#
# One split of ended attempts, used by the reliability marts, the cost marts' failed GPU-seconds, the report's
# failure table and the failure-rate alert (docs/pipelines.md#job-failures). States from sacct's JOB STATE
# CODES (https://slurm.schedmd.com/sacct.html#SECTION_JOB-STATE-CODES, 22.05):
#   user   - the job's own doing: non-zero exit (FAILED), OUT_OF_MEMORY, its time limit (TIMEOUT) or deadline
#            (DEADLINE), a cancel by anyone but root (CANCELLED by <uid>, the owner or a coordinator), a
#            special exit the job asked for (SPECIAL_EXIT);
#   system - the infrastructure's or the operators': NODE_FAIL, BOOT_FAIL, PREEMPTED, REQUEUED (Slurm or an
#            admin took the allocation back), CANCELLED by root (uid 0), and a FAILED attempt linked to a node
#            incident on one of its nodes at its end (pipelines/reliability.py: the program died because its
#            node or GPU did);
#   none   - not a failure: COMPLETED, REVOKED (a sibling cluster of a federation ran the job).

JOB_FAILURE_CLASSES = ("user", "system")
"""The two failure classes, in the order their series and table rows appear."""

JOB_USER_FAILURE_STATES = ("FAILED", "OUT_OF_MEMORY", "TIMEOUT", "DEADLINE", "CANCELLED", "SPECIAL_EXIT")
"""Ended states that are the job's own failure (CANCELLED only when not cancelled by root)."""

JOB_SYSTEM_FAILURE_STATES = ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "REQUEUED")
"""Ended states that are a failure of the infrastructure or an operator's decision, whoever's job it was."""

JOB_FAILURE_STATES = (*JOB_USER_FAILURE_STATES, *JOB_SYSTEM_FAILURE_STATES)
"""Every ended state that is a failure of either class: the cost marts' failed GPU-seconds."""

JOB_INCIDENT_LINKED_STATES = ("FAILED",)
"""User-class states a node incident on the attempt's nodes at its end turns into a system failure: a
program that exits non-zero because its GPU fell off the bus is not the user's failure. OUT_OF_MEMORY,
TIMEOUT and a user's cancel stay the user's whatever the node did."""

JOB_CANCELLED_BY_ROOT = "CANCELLED by 0"
"""sacct's raw State of an attempt root cancelled (`jobs.state_raw`, blanks stripped): an operator's cancel,
a system failure. Any other `CANCELLED by <uid>` is the owner's or a coordinator's."""


def job_failure_class(
    state: str | None, state_raw: str | None = None, *, started: bool = True, incident: bool = False
) -> str:
    """`user`, `system` or `none` for an ended attempt (the rules above; `started`: it has a Start, `incident`:
    a node incident was linked to it). An attempt that never started failed only if a system state ended it
    (a job cancelled while pending lost nothing). The reference for the Polars form in
    pipelines/reliability.py, built from the same sets."""
    if state in JOB_SYSTEM_FAILURE_STATES:
        return "system"
    if not started:
        return "none"
    if state == "CANCELLED" and state_raw is not None and state_raw.strip(" ") == JOB_CANCELLED_BY_ROOT:
        return "system"
    if state in JOB_INCIDENT_LINKED_STATES and incident:
        return "system"
    if state in JOB_USER_FAILURE_STATES:
        return "user"
    return "none"


# --------------------------------------------------------------------------------- pending reasons

JOB_PENDING_SCHEDULER_REASONS = ("Priority", "Resources")
"""Pending reasons of a job that waits only for the scheduler (squeue JOB REASON CODES,
https://slurm.schedmd.com/squeue.html#SECTION_JOB-REASON-CODES, 22.05): `Priority` (higher-priority jobs
come first) and `Resources` (it is next but the resources are busy). A job held (JobHeldUser/Admin), waiting
on a dependency, a begin time, a reservation or a QOS/association limit (QOSMax*, AssocGrp*, ...) waits for
something fair share cannot change: starvation is judged on these two reasons only."""

# ----------------------------------------------------------------------------------------- node states

NODE_STATE_SUFFIXES = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
"""sinfo's one-character state suffixes and the flag each stands for (`*` not responding, `~` powered off,
`#` powering up or being configured, `!` pending power down, `%` powering down, `$` in a maintenance
reservation, `@` pending reboot, `^` reboot issued, `-` planned by the backfill scheduler)."""

NODE_STATE_ABBREVIATIONS = {
    "alloc": "ALLOCATED",
    "mix": "MIXED",
    "comp": "COMPLETING",
    "drng": "DRAINING",
    "drain": "DRAINED",
    "resv": "RESERVED",
    "plnd": "PLANNED",
    "unk": "UNKNOWN",
    "futr": "FUTURE",
    "failg": "FAILING",
    "npc": "PERFCTRS",
    "pow_dn": "POWER_DOWN",
    "pow_up": "POWERING_UP",
    "boot": "REBOOT",
    "drained": "DRAINED",
    "draining": "DRAINING",
}
"""Compact (`%t`, StateCompact) spellings of base states whose long name is not the word upper-cased
(`idle`, `down`, `fail`, `maint`, `inval` are)."""

NODE_FLAG_ABBREVIATIONS = {
    "drng": "DRAIN",
    "drain": "DRAIN",
    "maint": "MAINTENANCE",
    "resv": "RESERVED",
    "comp": "COMPLETING",
}
"""Compact spellings of the flags that follow a `+` in StateComplete (`idle+drain`, `mix+maint`)."""


def parse_node_state(raw: str | None) -> tuple[str | None, str | None]:
    """(base state, '+'-joined flags) of a sinfo state: `drained*`, `mixed+drain`, `MIXED+DRAIN`, `idle~`.

    Suffix symbols become named flags; DRAINED/DRAINING also carry the DRAIN flag so that one test
    (`'DRAIN' in flags`) finds drained nodes in every notation. Unrecognised words are kept upper-cased.
    """
    if raw is None:
        return None, None
    s = raw.strip()
    if not s or s in NULL_WORDS:
        return None, None
    flags: list[str] = []
    state: str | None = None
    for i, part in enumerate(s.split("+")):
        part = part.strip()
        word = part.rstrip("".join(NODE_STATE_SUFFIXES))
        for ch in part[len(word) :]:
            flags.append(NODE_STATE_SUFFIXES[ch])
        if not word:
            continue
        low = word.lower()
        if i == 0:
            state = NODE_STATE_ABBREVIATIONS.get(low, word.upper())
            if state in ("DRAINED", "DRAINING"):
                flags.append("DRAIN")
        else:
            flags.append(NODE_FLAG_ABBREVIATIONS.get(low, word.upper()))
    seen: list[str] = []
    for f in flags:
        if f not in seen:
            seen.append(f)
    return state, ("+".join(seen) if seen else None)


# Capacity (cost and drift marts): which GPUs of a node are down, reserved or idle. States and flags are
# matched as substrings of the upper-cased, '+'-joined flags.

NODE_GPUS_DOWN_STATES = (
    "DOWN",
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAIL",
    "FAILING",
    "NOT_RESPONDING",
    "NO_RESPOND",
    "UNKNOWN",
    "INVAL",
    "FUTURE",
    "REBOOT_ISSUED",
    "REBOOT_REQUESTED",
)
"""Base states whose unallocated GPUs the capacity split counts as down, not idle: the node cannot start
work (down, failing, draining, not responding, invalid, not yet in service) or is about to reboot, so an
operator, not a user, has to act before they can be used."""

NODE_GPUS_DOWN_FLAGS = ("DRAIN", "NOT_RESPONDING", "FAIL", "REBOOT", "INVALID")
"""Flag substrings with the same effect (REBOOT covers REBOOT_REQUESTED and REBOOT_ISSUED, FAIL covers
FAILING)."""

NODE_GPUS_RESERVED_STATES = ("RESERVED", "MAINT", "MAINTENANCE")
"""Base states whose unallocated GPUs the capacity split counts as reserved: held for a reservation or
maintenance, usable only by whom it names (down wins over reserved)."""

NODE_GPUS_RESERVED_FLAGS = ("RESERVED", "MAINT")
"""Flag substrings with the same effect (MAINT covers MAINTENANCE)."""

NODE_GPUS_POWERED_DOWN_FLAGS = ("POWERED_DOWN", "POWERING_DOWN")
"""Flags of a node that power saving has switched off or is switching off (sinfo `~` and `%`; a CLOUD node
in this state is not even provisioned): its free GPUs are not idle capacity anyone could be billed for, so
the cost split takes them out of capacity (down and reserved win over it: those need an operator). Not
POWER_DOWN (`!`, still on until its jobs end) nor POWERING_UP (`#`, booting for a job). The backfill holes
still count them, since Slurm powers such a node up to start a job (https://slurm.schedmd.com/power_save.html)."""

# Health verdict (mart_node_health): down beats drain beats unavailable. Flags are matched as whole words
# of the '+'-joined flags, so POWERED_DOWN is not DOWN.

NODE_HEALTH_DOWN_STATES = ("DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND", "INVAL")
"""Base states that make a node failing: Slurm has taken it out (DOWN, FAIL, FAILING), cannot reach it, or
found its configuration invalid."""

NODE_HEALTH_DOWN_FLAGS = ("NOT_RESPONDING", "FAIL")
"""Flags that make a node failing whatever its base state (`idle*` is a node slurmctld cannot reach)."""

NODE_HEALTH_DRAIN_STATES = ("DRAIN", "DRAINED", "DRAINING")
"""Base states of a node an admin or a health check drained: degraded, it still finishes its jobs."""

NODE_HEALTH_DRAIN_FLAGS = ("DRAIN",)
"""The flag of a drained node (parse_node_state adds it to DRAINED and DRAINING too)."""

NODE_HEALTH_UNAVAILABLE_STATES = (
    "MAINT",
    "MAINTENANCE",
    "UNKNOWN",
    "FUTURE",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
)
"""Base states of a node that is not broken but not in service: in maintenance, not yet seen by slurmctld
(UNKNOWN), configured for the future, or about to reboot."""

NODE_HEALTH_UNAVAILABLE_FLAGS = ("MAINT", "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED")
"""Flags with the same meaning (a `$` or `@`/`^` suffix, a `+maint`)."""

# Node metrics (the exporter's `state` label and the unavailable GPUs).

NODE_METRIC_DOWN_STATES = ("DOWN", "FAIL", "FAILING")
"""Base states labelled `down` by the node metrics (with the NOT_RESPONDING flag, NODE_METRIC_DOWN_FLAGS):
the states slurmscope_node_down and its alert mean by DOWN."""

NODE_METRIC_DOWN_FLAGS = ("NOT_RESPONDING",)
"""Flag substrings labelled `down` by the node metrics whatever the base state."""

NODE_METRIC_OTHER_STATES = ("MAINT", "UNKNOWN", "FUTURE", "INVAL")
"""Base states labelled `other` (neither usable nor down or drained) by the node metrics; every other
state is labelled by its own name in lower case."""

NODE_METRIC_UNAVAILABLE_STATES = (
    "DOWN",
    "DRAINED",
    "DRAINING",
    "DRAIN",
    "FAIL",
    "FAILING",
    "MAINT",
    "UNKNOWN",
    "FUTURE",
    "INVAL",
)
"""Base states whose free GPUs slurmscope_gpus reports as `down` rather than `idle`: no job can start on
the node until someone acts."""

NODE_METRIC_UNAVAILABLE_FLAGS = ("DRAIN", "NOT_RESPONDING", "FAIL", "MAINT")
"""Flag substrings with the same effect (FAIL covers FAILING, MAINT covers MAINTENANCE)."""


def sql_list(states: Iterable[str]) -> str:
    """The states as a quoted SQL list for `state IN ...`: `('FAILED','NODE_FAIL')`.

    Only for the constant sets of this module (their words have no quote to escape).
    """
    words = list(states)
    if any(not re.fullmatch(r"[A-Z_]+", w) for w in words):
        raise ValueError(f"not Slurm state words: {words!r}")
    return "(" + ",".join(f"'{w}'" for w in words) + ")"


def sql_array(words: Iterable[str]) -> str:
    """The words as a quoted DuckDB list literal: `['Priority', 'Resources']`. Only for this module's
    constants: a word with a quote or a backslash is refused rather than escaped."""
    out = list(words)
    if any(re.search(r"['\\]", w) for w in out):
        raise ValueError(f"not plain words: {out!r}")
    return "[" + ", ".join(f"'{w}'" for w in out) + "]"


def sql_macros() -> str:
    """sql/metrics/_slurm_states.sql: the metric queries' state sets as DuckDB macros, rendered from this
    module so that SQL files never spell a state list of their own (tests/slurmscope/test_slurm_states.py checks the
    committed file; `python -m slurmscope.slurm_states > sql/metrics/_slurm_states.sql` regenerates it)."""
    unavailable_flags = "|".join(NODE_METRIC_UNAVAILABLE_FLAGS)
    down_flags = "".join(
        f"\n              OR coalesce(state_flags, '') LIKE '%{flag}%'" for flag in NODE_METRIC_DOWN_FLAGS
    )
    terminal = ", ".join(f"'{s}'" for s in JOB_FINISHED_STATES)
    return f"""-- Generated from slurmscope/slurm_states.py by `python -m slurmscope.slurm_states`; do not edit.
-- Slurm state sets the metric queries share (scalar macros, inlined where they are called).

-- Nodes that cannot run work: sinfo base states and flags (NODE_METRIC_UNAVAILABLE_*).
CREATE OR REPLACE MACRO slurm_node_unavailable(state, state_flags) AS
    (coalesce(state_flags, '') SIMILAR TO '.*({unavailable_flags}).*'
     OR upper(coalesce(state, '')) IN {sql_list(NODE_METRIC_UNAVAILABLE_STATES)});

-- The display state used as the `state` label of node metrics (NODE_METRIC_DOWN_*, NODE_METRIC_OTHER_STATES).
CREATE OR REPLACE MACRO slurm_node_state(state, state_flags) AS
    CASE WHEN upper(coalesce(state, '')) IN {sql_list(NODE_METRIC_DOWN_STATES)}{down_flags} THEN 'down'
         WHEN coalesce(state_flags, '') LIKE '%DRAIN%' OR upper(coalesce(state, '')) LIKE 'DRAIN%' THEN 'drain'
         WHEN upper(coalesce(state, '')) IN {sql_list(NODE_METRIC_OTHER_STATES)} THEN 'other'
         ELSE lower(coalesce(state, 'unknown')) END;

-- Job states after which an attempt no longer runs (JOB_FINISHED_STATES).
CREATE OR REPLACE MACRO slurm_job_terminal_states() AS
    [{terminal}];

-- States of a record whose attempt has not ended (JOB_NOT_ENDED_STATES).
CREATE OR REPLACE MACRO slurm_job_not_ended_states() AS
    {sql_array(JOB_NOT_ENDED_STATES)};

-- Failure class of an ended attempt from its record alone: job_failure_class without the node-incident link
-- (the reliability pipeline links incidents; mart_fault_impact holds the links): 'user', 'system' or 'none'.
CREATE OR REPLACE MACRO slurm_job_failure_class(state, state_raw, start_time) AS
    CASE WHEN state IN {sql_list(JOB_SYSTEM_FAILURE_STATES)} THEN 'system'
         WHEN start_time IS NULL THEN 'none'
         WHEN state = 'CANCELLED' AND trim(coalesce(state_raw, '')) = '{JOB_CANCELLED_BY_ROOT}' THEN 'system'
         WHEN state IN {sql_list(JOB_USER_FAILURE_STATES)} THEN 'user'
         ELSE 'none' END;

-- States a node incident linked to the attempt turns from a user into a system failure
-- (JOB_INCIDENT_LINKED_STATES).
CREATE OR REPLACE MACRO slurm_job_incident_linked_states() AS
    {sql_array(JOB_INCIDENT_LINKED_STATES)};

-- Pending reasons of a job waiting only for the scheduler (JOB_PENDING_SCHEDULER_REASONS).
CREATE OR REPLACE MACRO slurm_pending_scheduler_reasons() AS
    {sql_array(JOB_PENDING_SCHEDULER_REASONS)};
"""


if __name__ == "__main__":
    print(sql_macros(), end="")
