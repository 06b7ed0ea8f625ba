"""The Slurm state vocabulary: parsing and normalisation as Slurm prints states, the named sets, and the
SQL that lists states (generated here, or checked here where it lives in a .sql file)."""

from __future__ import annotations

import re

import pytest

from slurmscope import slurm_states as ss
from slurmscope.slurm_states import normalise_job_state, parse_node_state, sql_list
from tests.paths import ROOT

SQL_DIR = ROOT / "sql"
JOB_SETS = {n: v for n, v in vars(ss).items() if n.startswith("JOB_") and n.endswith("_STATES")}
NODE_SETS = {n: v for n, v in vars(ss).items() if n.startswith("NODE_") and n.endswith(("_STATES", "_FLAGS"))}


@pytest.mark.parametrize(
    ("raw", "state", "flags"),
    [
        ("idle", "IDLE", None),
        ("MIXED+DRAIN", "MIXED", "DRAIN"),
        ("mixed+drain", "MIXED", "DRAIN"),
        ("IDLE+CLOUD+POWERED_DOWN", "IDLE", "CLOUD+POWERED_DOWN"),
        ("idle~", "IDLE", "POWERED_DOWN"),
        ("down*", "DOWN", "NOT_RESPONDING"),
        ("idle#", "IDLE", "POWERING_UP"),
        ("idle!", "IDLE", "POWER_DOWN"),
        ("idle%", "IDLE", "POWERING_DOWN"),
        ("allocated$", "ALLOCATED", "MAINTENANCE"),
        ("mixed@", "MIXED", "REBOOT_REQUESTED"),
        ("idle^", "IDLE", "REBOOT_ISSUED"),
        ("mixed-", "MIXED", "PLANNED"),
        ("drained*", "DRAINED", "NOT_RESPONDING+DRAIN"),
        ("draining@", "DRAINING", "REBOOT_REQUESTED+DRAIN"),
        ("drng", "DRAINING", "DRAIN"),
        ("mix", "MIXED", None),
        ("alloc", "ALLOCATED", None),
        ("down*+drain", "DOWN", "NOT_RESPONDING+DRAIN"),
        ("IDLE*+DRAIN+MAINTENANCE", "IDLE", "NOT_RESPONDING+DRAIN+MAINTENANCE"),
        ("MIXED+CLOUD+POWERED_DOWN", "MIXED", "CLOUD+POWERED_DOWN"),
        ("mix+maint", "MIXED", "MAINTENANCE"),
        ("N/A", None, None),
        ("", None, None),
    ],
)
def test_node_state_and_flags_in_every_notation(raw, state, flags):
    assert parse_node_state(raw) == (state, flags)


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("CANCELLED by 0", "CANCELLED"),
        ("CANCELLED by 1234", "CANCELLED"),
        ("CANCELLED+", "CANCELLED"),
        ("RUNNING", "RUNNING"),
        (" NODE_FAIL ", "NODE_FAIL"),
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY"),
        ("cancelled", None),
        ("42", None),
    ],
)
def test_job_state_normalisation(raw, state):
    assert normalise_job_state(raw) == state


def test_every_job_set_holds_only_states_slurm_prints():
    known = set(ss.JOB_STATE_CODES.values())
    for name, states in JOB_SETS.items():
        assert isinstance(states, tuple) and len(set(states)) == len(states), name
        assert set(states) <= known, (name, set(states) - known)


def test_job_sets_nest_as_documented():
    user, system = set(ss.JOB_USER_FAILURE_STATES), set(ss.JOB_SYSTEM_FAILURE_STATES)
    assert not user & system and set(ss.JOB_FAILURE_STATES) == user | system
    assert set(ss.JOB_FAILURE_STATES) < set(ss.JOB_ENDED_STATES)
    # what is not a failure of either class: completed, or run by a sibling cluster
    assert set(ss.JOB_ENDED_STATES) - set(ss.JOB_FAILURE_STATES) == {"COMPLETED", "REVOKED"}
    assert set(ss.JOB_INCIDENT_LINKED_STATES) <= user & set(ss.JOB_NODE_FAULT_STATES)
    assert set(ss.JOB_NODE_FAULT_STATES) < set(ss.JOB_ENDED_STATES)
    assert set(ss.JOB_FINISHED_STATES) < set(ss.JOB_ENDED_STATES)
    assert not set(ss.JOB_ENDED_STATES) & set(ss.JOB_NOT_ENDED_STATES)


def test_node_sets_are_upper_case_words_without_repeats():
    for name, words in NODE_SETS.items():
        assert isinstance(words, tuple) and len(set(words)) == len(words), name
        assert all(re.fullmatch(r"[A-Z_]+", w) for w in words), name


def test_every_suffix_flag_is_parsed_back():
    for symbol, flag in ss.NODE_STATE_SUFFIXES.items():
        assert parse_node_state(f"idle{symbol}") == ("IDLE", flag)


def test_sql_list():
    assert sql_list(("FAILED", "NODE_FAIL")) == "('FAILED','NODE_FAIL')"
    assert sql_list(ss.JOB_FINISHED_STATES)[1:-1].count("'") == 2 * len(ss.JOB_FINISHED_STATES)
    with pytest.raises(ValueError):
        sql_list(["x'); DROP TABLE jobs; --"])


# State lists written out in .sql files (migrations, views, metric queries): each must be one of the named
# sets, so that a copy cannot drift from the vocabulary. Lists of upper-case words after IN, e.g.
# `state IN ('FAILED', 'NODE_FAIL')`; comments are ignored.
_IN_LIST = re.compile(r"(?i:\bIN)\s*\(\s*('[A-Z_]+'(?:\s*,\s*'[A-Z_]+')*)\s*\)")
SQL_STATE_LISTS: dict[str, tuple[str, ...]] = {
    # the failure class of outcome rows written before the split (a migration is frozen: no macro call)
    "0023_incidents.sql:17": ss.JOB_SYSTEM_FAILURE_STATES,
    "0023_incidents.sql:18": ss.JOB_USER_FAILURE_STATES,
}
"""`path:line` of each state list in sql/ -> the vocabulary set it must equal."""


def _sql_state_lists() -> dict[str, tuple[str, ...]]:
    found = {}
    for path in sorted(SQL_DIR.rglob("*.sql")):
        if str(path.relative_to(SQL_DIR)) in GENERATED:
            continue
        for no, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("--", 1)[0]
            for m in _IN_LIST.finditer(code):
                words = tuple(w.strip().strip("'") for w in m.group(1).split(","))
                found[f"{path.relative_to(SQL_DIR)}:{no}"] = words
    return found


GENERATED = {"metrics/_slurm_states.sql"}
"""SQL files rendered from the vocabulary (and checked to be up to date below), not scanned for lists."""


def test_the_generated_state_macros_are_up_to_date():
    assert (SQL_DIR / "metrics" / "_slurm_states.sql").read_text() == ss.sql_macros()


def test_state_lists_in_sql_files_equal_the_vocabulary():
    found = _sql_state_lists()
    assert set(found) == set(SQL_STATE_LISTS), "list each state list of sql/ in SQL_STATE_LISTS"
    for where, words in found.items():
        assert set(words) == set(SQL_STATE_LISTS[where]), where


def test_the_sql_state_list_finder_finds_lists():
    sample = "SELECT 1 FROM jobs WHERE state IN ('FAILED', 'NODE_FAIL') -- AND state IN ('X')"
    code = sample.split("--", 1)[0]
    assert [m.group(1) for m in _IN_LIST.finditer(code)] == ["'FAILED', 'NODE_FAIL'"]


@pytest.mark.parametrize(
    ("state", "raw", "started", "incident", "want"),
    [
        # sacct(1) JOB STATE CODES, 22.05, and the split of docs/pipelines.md#job-failures
        ("COMPLETED", "COMPLETED", True, False, "none"),
        ("FAILED", "FAILED", True, False, "user"),  # non-zero exit code
        ("FAILED", "FAILED", True, True, "system"),  # ... because a node incident took the node down
        ("OUT_OF_MEMORY", "OUT_OF_MEMORY", True, True, "user"),
        ("TIMEOUT", "TIMEOUT", True, False, "user"),
        ("CANCELLED", "CANCELLED by 1234", True, False, "user"),
        ("CANCELLED", "CANCELLED by 0", True, False, "system"),
        ("CANCELLED", "CANCELLED by 1234", False, False, "none"),
        ("NODE_FAIL", "NODE_FAIL", True, False, "system"),
        ("BOOT_FAIL", "BOOT_FAIL", False, False, "system"),
        ("PREEMPTED", "PREEMPTED", True, False, "system"),
        ("REQUEUED", "REQUEUED", True, False, "system"),
        ("REVOKED", "REVOKED", True, False, "none"),
    ],
)
def test_job_failure_class(state, raw, started, incident, want):
    assert ss.job_failure_class(state, raw, started=started, incident=incident) == want


def test_the_sql_failure_class_is_the_reference_without_the_link(con):
    """The generated macro (sql/metrics/_slurm_states.sql) against job_failure_class, for every state, with
    and without a start, cancelled by root, by a user and with no canceller printed."""
    states = sorted(set(ss.JOB_STATE_CODES.values())) + [None]
    for state in states:
        for raw in ("CANCELLED by 0", " CANCELLED by 0 ", "CANCELLED by 17", "CANCELLED", None):
            for started in (True, False):
                got = con.execute(
                    "SELECT slurm_job_failure_class(?, ?, CASE WHEN ? THEN now() END)", [state, raw, started]
                ).fetchone()[0]
                assert got == ss.job_failure_class(state, raw, started=started), (state, raw, started)
