"""Slurm's human formats read by their header lines (issue 14 item 4), on real 22.05 captures.

Ground truth: the state tests/slurmbed/capture_human.py set up on the test bed
(tests/fixtures/slurm-22.05/human/README.md, human_record.json): gpu01 DOWN (reason "Xid 79: GPU has
fallen off the bus"), gpu02 DRAINING ("ECC errors, replace DIMM B2"), gpu03 allocated, gpu04 idle, cpu01
mixed; gpu[01-04] in partitions gpu and debug, cpu01 in cpu; 16 CPUs and 64000 MB each; jobs 1-3
running, 4-7 pending with the reasons the README lists. Values are checked against those, not against
another parser's reading.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from slurmscope.collectors import sinfo, squeue
from slurmscope.collectors.ingest import IngestError, ingest_files

from slurmscope.config import load_config
from slurmscope.db import connect

HUMAN = Path(__file__).parents[1] / "fixtures" / "slurm-22.05" / "human"
RECORD = json.loads((HUMAN / "human_record.json").read_text())
AT = datetime(2026, 12, 3, 17, 29, 57, tzinfo=UTC)  # the date line of the -l captures
STATES = {"gpu01": "DOWN", "gpu02": "DRAINING", "gpu03": "ALLOCATED", "gpu04": "IDLE", "cpu01": "MIXED"}
PARTITIONS = {(n, p) for n in ("gpu01", "gpu02", "gpu03", "gpu04") for p in ("gpu", "debug")} | {
    ("cpu01", "cpu")
}


def parse(module, name: str, fmt: str | None = None):
    return module.parse((HUMAN / name).read_bytes(), cluster="c", snapshot_time=AT, tz=UTC, fmt=fmt)


@pytest.mark.parametrize(
    "name", ["human_sinfo.txt", "human_sinfo_l.txt", "human_sinfo_N.txt", "human_sinfo_N_l.txt"]
)
def test_sinfo_layouts_give_one_row_per_node_and_partition(name):
    p = parse(sinfo, name)
    assert p.quarantine.height == 0
    df = p.tables["node_states"]
    assert set(zip(df["node"], df["partition"], strict=True)) == PARTITIONS  # no phantom NODELIST node
    assert dict(zip(df["node"], df["state"], strict=True)) == STATES
    assert all(STATES[n].lower() == r["state"] for n, r in RECORD["nodes"].items())  # as set up
    assert df.filter(df["node"] == "gpu02")["state_flags"].to_list() == ["DRAIN", "DRAIN"]


def test_sinfo_N_l_carries_cpus_memory_features_and_the_cut_reason():
    df = parse(sinfo, "human_sinfo_N_l.txt").tables["node_states"]
    assert set(df["cpus_total"]) == {16} and set(df["memory_mb"]) == {64000}
    by_node = {r["node"]: r for r in df.iter_rows(named=True)}
    assert by_node["gpu01"]["features"] == "h100,ib" and by_node["cpu01"]["features"] == "cpu"
    # sinfo -N -l prints 20 characters of the reason: stored as printed, marked as cut
    for n in ("gpu01", "gpu02"):
        assert by_node[n]["reason"] == RECORD["nodes"][n]["reason"][:20].rstrip() + "…"
    assert by_node["gpu04"]["reason"] is None  # "none"


def test_grouped_lines_give_each_node_the_state_but_never_the_group_totals():
    # CONSTRUCTED from human_sinfo_partition_summary.txt: the gpu04 line widened to a 2-node group, as
    # `sinfo -o '%P|%a|%D|%T|%C|%N'` prints when two nodes share partition and state.
    text = (HUMAN / "human_sinfo_partition_summary.txt").read_text()
    text = text.replace("gpu*|up|1|idle|0/16/0/16|gpu04", "gpu*|up|2|idle|0/32/0/32|gpu[04-05]")
    p = sinfo.parse(text.encode(), cluster="c", snapshot_time=AT, tz=UTC, fmt="%P|%a|%D|%T|%C|%N")
    df = p.tables["node_states"].filter(p.tables["node_states"]["partition"] == "gpu")
    rows = {r["node"]: r for r in df.iter_rows(named=True)}
    assert rows["gpu04"]["state"] == rows["gpu05"]["state"] == "IDLE"
    assert rows["gpu04"]["cpus_total"] is None and rows["gpu05"]["cpus_total"] is None
    assert rows["gpu03"]["cpus_total"] == 16 and rows["gpu03"]["cpus_alloc"] == 16  # one-node lines exact


@pytest.mark.parametrize("name", ["human_squeue.txt", "human_squeue_l.txt"])
def test_squeue_layouts_keep_reasons_with_spaces(name):
    p = parse(squeue, name)
    assert p.quarantine.height == 0
    rows = {r["job_id"]: r for r in p.tables["pending_jobs"].iter_rows(named=True)}
    jobs = RECORD["jobs"]
    assert set(rows) == {j["job_id"] for j in jobs.values()}
    for j in jobs.values():
        r = rows[j["job_id"]]
        assert r["state"] == j["state"] and r["user"] == j["user"]
    assert rows[jobs["four_nodes"]["job_id"]]["reason"] == (
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    )
    assert rows[jobs["four_nodes"]["job_id"]]["nodes"] == 4
    assert rows[jobs["on_down_node"]["job_id"]]["reason"] == "ReqNodeNotAvail, UnavailableNodes:gpu01"
    assert rows[jobs["held"]["job_id"]]["reason"] == "JobHeldUser"
    assert rows[jobs["cpu_long"]["job_id"]]["partition"] == "cpu" and rows["1"]["reason"] is None
    # NAME is cut to 8 characters: "held" is whole, "cpu long run" (printed "cpu long") is not stored
    assert rows[jobs["held"]["job_id"]]["name"] == "held"
    assert rows[jobs["cpu_long"]["job_id"]]["name"] is None


def test_squeue_l_time_limits():
    rows = {
        r["job_id"]: r
        for r in parse(squeue, "human_squeue_l.txt").tables["pending_jobs"].iter_rows(named=True)
    }
    assert [rows[str(i)]["timelimit_seconds"] for i in range(1, 8)] == [1800, 1800, 1800, 600, 600, 60, 60]


def test_phantom_node_is_gone_end_to_end(tmp_path):
    con = connect(tmp_path / "s.duckdb")
    [res] = ingest_files(con, load_config(env={}), "sinfo", [HUMAN / "human_sinfo_N_l.txt"])
    assert (res.rows, res.quarantined, res.status) == (9, 0, "ok")
    assert con.execute("SELECT count(*) FROM node_states WHERE node = 'NODELIST'").fetchone()[0] == 0


@pytest.mark.parametrize(
    "module, text, words",
    [
        (
            sinfo,
            "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\ngpu*  up 2:00:00 1/3/0/4 gpu[01-04]\n",
            "sinfo -s",
        ),
        (
            sinfo,
            "REASON               USER      TIMESTAMP           NODELIST\nbad root 2026-12-03T17:29:44 gpu01\n",
            "sinfo -R",
        ),
        (sinfo, "HOSTNAMES STATE\ngpu01 idle\n", "sinfo -N -l"),
        (squeue, "JOBID PARTITION NAME USER ST START_TIME NODES SCHEDNODES NODELIST(REASON)\n", "squeue -l"),
    ],
)
def test_other_title_lines_are_refused_naming_what_to_capture(tmp_path, module, text, words):
    f = tmp_path / "x.txt"
    f.write_text(text)
    with pytest.raises(IngestError, match=words):
        ingest_files(connect(tmp_path / "s.duckdb"), load_config(env={}), module.KIND, [f])


def test_per_partition_totals_without_nodes_are_refused(tmp_path):
    # treydock's real OSC capture `sinfo -a -h -o %R,%C` (tests/fixtures/PROVENANCE.md): CPU totals per
    # partition, no node names: never copied onto nodes, refused naming why
    f = (
        Path(__file__).parents[1]
        / "fixtures"
        / "treydock__prometheus-slurm-exporter"
        / "sinfo_partition_cpus.txt"
    )
    with pytest.raises(IngestError, match="neither node names"):
        ingest_files(connect(tmp_path / "s.duckdb"), load_config(env={}), "sinfo", [f], fmt="%R,%C")
