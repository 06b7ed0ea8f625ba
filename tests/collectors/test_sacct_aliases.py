"""sacct alias and duplicate columns, and `--format ALL` (issue 14 item 1, aliases only).

Ground truth: real `sacct --format=ALL` (with and without header) and an alias-heavy field list captured
on the Slurm 22.05 test bed in one set-up state (tests/fixtures/slurm-22.05/human/README.md): job 1 runs
on 1 node with 4 CPUs, job 2 with 16, job 3 with 12; job 5 (`-N 4 --exclusive`) is pending, so Slurm
prints NNodes 4 and AllocNodes 0 for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slurmscope.collectors.ingest import IngestError, ingest_files
from slurmscope.collectors.sacct import ALL_FIELDS

from slurmscope.config import load_config
from slurmscope.db import connect

HUMAN = Path(__file__).parents[1] / "fixtures" / "slurm-22.05" / "human"
# job id -> (state, nodes, cpus, name), from human_record.json and the sbatch options it lists
EXPECTED = {
    "1": ("RUNNING", 1, 4, "pretrain llm"),
    "2": ("RUNNING", 1, 16, "eval-sweep"),
    "3": ("RUNNING", 1, 12, "cpu long run"),
    "4": ("PENDING", 1, 1, "needs-gpu01"),
    "5": ("PENDING", 4, 4, "four node job"),
}  # 6 (held) and 7 (begin later) are not eligible: a -S/-E window hides them (docs/ingest.md)


def load(tmp_path: Path, path: Path, **kw):
    con = connect(tmp_path / "s.duckdb")
    res = ingest_files(con, load_config(env={}), "sacct", [path], **kw)
    jobs = {
        r[0]: r[1:]
        for r in con.execute("SELECT job_id, state, nodes, cpus, name FROM jobs ORDER BY job_id").fetchall()
    }
    return res[0], jobs, con


def test_format_all_with_header_loads_every_job(tmp_path):
    res, jobs, con = load(tmp_path, HUMAN / "human_sacct_all.txt")
    assert res.quarantined == 0 and res.status == "ok"
    assert jobs == EXPECTED
    steps = con.execute("SELECT job_id_raw, step_id FROM job_steps ORDER BY ALL").fetchall()
    assert steps == [(1, "batch"), (2, "batch"), (3, "batch")]


def test_format_all_headerless_is_the_2205_list(tmp_path):
    res, jobs, _ = load(tmp_path, HUMAN / "human_sacct_all_noheader.txt", fmt="ALL")
    assert res.quarantined == 0 and jobs == EXPECTED
    header = (HUMAN / "human_sacct_all.txt").read_text().split("\n")[0].split("|")
    assert list(ALL_FIELDS["22.05"]) == header


def test_format_all_of_another_release_is_refused_saying_so(tmp_path):
    live = Path(__file__).parents[1] / "fixtures" / "slurm-22.05" / "sacct_final.txt"  # 25 fields
    with pytest.raises(IngestError, match="22.05's list of 109 fields, but the first line has 25"):
        load(tmp_path, live, fmt="ALL", delimiter="\x1f")
    with pytest.raises(IngestError, match="only Slurm 22.05's ALL list is known"):
        load(tmp_path, live, fmt="ALL:23.02", delimiter="\x1f")


def test_alias_pairs_and_repeated_fields_read_once(tmp_path):
    # JobID,JobIDRaw,Submit,State,NCPUS,AllocCPUS,NNodes,AllocNodes,ReqCPUS,TRESUsageOutTot x2,JobName
    res, jobs, _ = load(tmp_path, HUMAN / "human_sacct_aliases.txt")
    assert res.quarantined == 0 and jobs == EXPECTED


def _drop_column(src: Path, dst: Path, name: str) -> Path:
    lines = src.read_text().splitlines()
    i = lines[0].split("|").index(name)
    dst.write_text("".join("|".join(p for k, p in enumerate(ln.split("|")) if k != i) + "\n" for ln in lines))
    return dst


def test_allocnodes_alone_is_null_for_a_job_never_allocated(tmp_path):
    f = _drop_column(HUMAN / "human_sacct_aliases.txt", tmp_path / "no_nnodes.txt", "NNodes")
    _res, jobs, _ = load(tmp_path, f)
    assert jobs["1"][1] == 1 and jobs["5"][1] is None  # AllocNodes 0 = not allocated, not "0 nodes"
    assert jobs["5"][2] == 4  # NCPUS still there


def test_alloccpus_alone_stands_in_for_ncpus(tmp_path):
    f = _drop_column(HUMAN / "human_sacct_aliases.txt", tmp_path / "no_ncpus.txt", "NCPUS")
    _res, jobs, _ = load(tmp_path, f)
    assert {k: v[2] for k, v in jobs.items()} == {k: v[2] for k, v in EXPECTED.items()}


def test_a_repeated_free_text_field_still_counts_as_free_text(tmp_path):
    f = tmp_path / "two_names.txt"
    f.write_text("JobID|Submit|JobName|JobName\n10|2026-12-03T10:00:00|a|b|c\n")
    res, jobs, con = load(tmp_path, f)
    assert jobs == {}
    [(reason,)] = con.execute("SELECT reason FROM quarantine").fetchall()
    assert "cannot tell which holds the delimiter" in reason
