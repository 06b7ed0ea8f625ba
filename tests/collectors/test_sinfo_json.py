"""Slurm's JSON of the nodes gives the node_states rows of the live sinfo text (real captures, ground truth).

The Slurm 22.05 captures in tests/fixtures/slurm-22.05/json-state/ were taken on the test bed by
tests/slurmbed/capture_state_json.py: the live `sinfo --Node --Format=...` line, `sinfo --json` and
slurmrestd's `/slurm/v0.0.38/nodes`, with the text taken again after them and found unchanged, so all three
show one state. The later versions are real slurmrestd responses of other clusters; their expected values
are read off the JSON by hand in the comments.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from slurmscope.collectors import sinfo, slurm_json
from slurmscope.collectors.ingest import IngestError, ingest_files
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.hostlist import expand_hostlist
from tests.paths import FIXTURES

STATE = FIXTURES / "slurm-22.05" / "json-state"
HUMAN = FIXTURES / "slurm-22.05" / "human"
WEB = FIXTURES / "rackslab__Slurm-web" / "slurmrestd"
T0 = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)
KEY = ["node", "partition"]


def parse(path: Path) -> sinfo.Parsed:
    return sinfo.parse(path.read_bytes(), cluster="c", snapshot_time=T0, tz=UTC)


def one(df: pl.DataFrame, node: str, partition: str) -> dict:
    rows = df.filter((pl.col("node") == node) & (pl.col("partition") == partition)).to_dicts()
    assert len(rows) == 1, (node, partition, rows)
    return rows[0]


@pytest.mark.parametrize("tag", ["a", "b"])
def test_json_and_rest_give_the_text_rows_of_the_same_moment(tag: str) -> None:
    text = parse(STATE / f"sinfo_text_{tag}.txt")
    cli_json = parse(STATE / f"sinfo_json_{tag}.json")
    rest = parse(STATE / f"rest_nodes_{tag}.json")
    assert text.quarantine.height == cli_json.quarantine.height == rest.quarantine.height == 0
    a = text.tables["node_states"].sort(KEY)
    assert a.height == 9  # gpu01-04 in gpu and debug, cpu01 in cpu
    # every column equal, none named as differing: the JSON carries all the live line prints
    for other in (cli_json, rest):
        b = other.tables["node_states"].sort(KEY)
        assert b.schema == a.schema
        assert [c for c in a.columns if not a[c].equals(b[c])] == []


@pytest.mark.parametrize("tag", ["a", "b"])
def test_each_node_lists_the_partitions_of_the_partition_table(tag: str) -> None:
    """Why slurmrestd's /nodes alone feeds node_states: the (node, partition) pairs of its rows are those of
    `/slurm/v0.0.38/partitions` (captured with it), node list by node list."""
    rows = parse(STATE / f"rest_nodes_{tag}.json").tables["node_states"]
    table = json.loads((STATE / f"rest_partitions_{tag}.json").read_bytes())["partitions"]
    pairs = {(node, p["name"]) for p in table for node in expand_hostlist(p["nodes"])}
    assert set(zip(rows["node"], rows["partition"], strict=True)) == pairs


def test_values_are_the_state_the_bed_was_put_in() -> None:
    """tests/fixtures/slurm-22.05/json-state/state_record.json: what capture_state_json.py set up."""
    record = json.loads((STATE / "state_record.json").read_text())["a"]["nodes"]
    df = parse(STATE / "rest_nodes_a.json").tables["node_states"]
    down = one(df, "gpu01", "gpu")
    assert (down["state"], down["reason"], down["reason_user"]) == ("DOWN", record["gpu01"]["reason"], "root")
    assert (down["cpus_alloc"], down["cpus_idle"], down["cpus_other"]) == (0, 0, 16)  # DOWN: idle is other
    drain = one(df, "gpu02", "debug")
    # 4 of 16 CPUs used while draining: 22.05's sinfo prints allocated+drain (it never shows MIXED for a
    # draining node) though slurmrestd's JSON says mixed; the row says what sinfo says
    assert (drain["state"], drain["state_flags"], drain["state_raw"]) == (
        "ALLOCATED",
        "DRAIN",
        "allocated+drain",
    )
    assert (drain["cpus_alloc"], drain["cpus_idle"], drain["cpus_other"]) == (4, 0, 12)
    assert (drain["reason"], drain["gpus_used"], drain["gpus_total"]) == (record["gpu02"]["reason"], 2, 8)
    assert one(df, "gpu03", "gpu")["state"] == "ALLOCATED"
    assert one(df, "cpu01", "cpu")["state"] == "MIXED"
    assert (one(df, "gpu04", "gpu")["state"], one(df, "gpu04", "gpu")["gpus_used"]) == ("MIXED", 2)


def test_the_human_capture_of_another_moment_matches_scontrol() -> None:
    """human_sinfo_json.txt (2026-12-03) beside `scontrol show node -o` of the same moment."""
    df = parse(HUMAN / "human_sinfo_json.txt").tables["node_states"]
    scontrol = {}
    for line in (HUMAN / "human_scontrol_nodes.txt").read_text().splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        scontrol[kv["NodeName"]] = kv
    assert sorted(set(df["node"])) == sorted(scontrol)
    for node, kv in scontrol.items():
        for row in df.filter(pl.col("node") == node).to_dicts():
            assert row["cpus_alloc"] == int(kv["CPUAlloc"]) and row["cpus_total"] == int(kv["CPUTot"])
            assert row["memory_mb"] == int(kv["RealMemory"]) and row["alloc_memory_mb"] == int(kv["AllocMem"])
            assert row["partition"] in kv["Partitions"].split(",")
    assert one(df, "gpu01", "gpu")["reason"] == "Xid 79: GPU has fallen off the bus"


# Later versions, by hand from each response (cpus A/I/O/T: allocated `alloc_cpus`, the rest other on a
# DRAIN or DOWN node and idle otherwise; memory `real_memory`, `alloc_memory`; an empty `gres_used` is 0
# GPUs used, as the text's `(null)` is).
LATER = [
    # 24.05.3, v0.0.41: state [MIXED, DRAIN], cpus 64, alloc 1; reason set by root at 1762858462
    (
        "24.05/0.0.41/slurm-node-draining.json",
        ("cn1", "normal"),
        ("MIXED", "DRAIN", "mixed+drain", 1, 0, 63, 64, 131072, 512, 0, 0, "ECC memory error", "root"),
        1762858462,
    ),
    # 24.05.3, v0.0.41: [ALLOCATED], gres gpu:h100:4, used gpu:h100:4(IDX:0-3)
    (
        "24.05/0.0.41/slurm-node-with-gpus-model-allocated.json",
        ("gpu1", "normal"),
        ("ALLOCATED", None, "allocated", 0, 32, 0, 32, 524288, 0, 4, 4, None, None),
        None,
    ),
    # 24.11.5, v0.0.42: cn3 [DOWN] "CPU dead" by slurm at 1763370725
    (
        "24.11/0.0.42/slurm-nodes.json",
        ("cn3", "standard"),
        ("DOWN", None, "down", 0, 0, 64, 64, 131072, 0, 0, 0, "CPU dead", "slurm"),
        1763370725,
    ),
    # 24.11.5, v0.0.42: ia1 [IDLE, COMPLETING], gres gpu:h100:2,gpu:h200:4 (6 GPUs), none used
    (
        "24.11/0.0.42/slurm-nodes.json",
        ("ia1", "ia"),
        ("IDLE", "COMPLETING", "idle+completing", 0, 32, 0, 32, 524288, 0, 6, 0, None, None),
        None,
    ),
    # 25.05.4, v0.0.43: cn3 [IDLE, DRAIN] "ECC memory error" by slurm at 1763370757
    (
        "25.05/0.0.43/slurm-nodes.json",
        ("cn3", "normal"),
        ("IDLE", "DRAIN", "idle+drain", 0, 0, 64, 64, 131072, 0, 0, 0, "ECC memory error", "slurm"),
        1763370757,
    ),
    # 25.11.0, v0.0.44: cn1 [MIXED, DRAIN], 13 of 64 CPUs, 6656 MB allocated
    (
        "25.11/0.0.44/slurm-node-draining.json",
        ("cn1", "normal"),
        ("MIXED", "DRAIN", "mixed+drain", 13, 0, 51, 64, 131072, 6656, 0, 0, "ECC memory error", "root"),
        1762783719,
    ),
    # 25.11.0, v0.0.44: cn4 [MIXED], 46 of 64; gpu3 an untyped gpu:4
    (
        "25.11/0.0.44/slurm-nodes.json",
        ("cn4", "normal"),
        ("MIXED", None, "mixed", 46, 18, 0, 64, 131072, 23552, 0, 0, None, None),
        None,
    ),
    (
        "25.11/0.0.44/slurm-nodes.json",
        ("gpu3", "gpu"),
        ("IDLE", None, "idle", 0, 32, 0, 32, 524288, 0, 4, 0, None, None),
        None,
    ),
]
COLUMNS = (
    "state",
    "state_flags",
    "state_raw",
    "cpus_alloc",
    "cpus_idle",
    "cpus_other",
    "cpus_total",
    "memory_mb",
    "alloc_memory_mb",
    "gpus_total",
    "gpus_used",
    "reason",
    "reason_user",
)


@pytest.mark.parametrize(("path", "key", "want", "reason_at"), LATER)
def test_slurmrestd_nodes_of_later_versions(
    path: str, key: tuple, want: tuple, reason_at: int | None
) -> None:
    p = parse(WEB / path)
    assert p.quarantine.height == 0
    row = one(p.tables["node_states"], *key)
    assert tuple(row[c] for c in COLUMNS) == want
    assert row["reason_time"] == (datetime.fromtimestamp(reason_at, UTC) if reason_at else None)


def test_v0_0_40_nodes_with_mig_and_no_partition() -> None:
    """lcrownover's 23.11.1 response (v0.0.40): 12 nodes, two in no partition (sinfo lists none of them),
    the others in 1 to 3 partitions: 2+2+3+3+3+2+2+2+2+1 = 22 rows; MIG slices are not GPUs."""
    p = parse(FIXTURES / "lcrownover__prometheus-slurm-exporter" / "V0040OpenapiNodesResp.json")
    df = p.tables["node_states"]
    assert p.quarantine.height == 0 and df.height == 22
    assert df.filter(pl.col("node").str.starts_with("dtn")).height == 0
    mig = one(df, "n0161", "interactivegpu")  # gres gpu:1g.10gb:21(S:1)
    assert (mig["gres"], mig["gpus_total"]) == ("gpu:1g.10gb:21(S:1)", 0)
    a100 = one(df, "n0160", "gpu")  # gpu:nvidia_a100_80gb_pcie:1(S:1), used (IDX:0)
    assert (a100["gpus_total"], a100["gpus_used"], a100["gpu_type"]) == (1, 1, "nvidia_a100_80gb_pcie")
    assert a100["features"] == "amd,milan,7413,a100,gpu-80gb,no-mig"  # a list from v0.0.40 on
    big = one(df, "n1000", "kerngpu")  # [MIXED], 96 of 112
    assert (big["state"], big["cpus_alloc"], big["cpus_idle"], big["cpus_total"]) == ("MIXED", 96, 16, 112)


def test_v0_0_38_of_another_cluster() -> None:
    """Telegraf's real 22.05.9 response: naboo145 idle with DRAIN (all 36 CPUs other), naboo147 allocated."""
    df = parse(FIXTURES / "influxdata__telegraf" / "slurm_rest" / "nodes.json").tables["node_states"]
    drained = one(df, "naboo145", "atlas")
    assert (drained["state"], drained["state_flags"], drained["cpus_other"]) == ("IDLE", "DRAIN", 36)
    busy = one(df, "naboo147", "atlas")
    assert (busy["state"], busy["cpus_alloc"], busy["alloc_memory_mb"]) == ("ALLOCATED", 36, 56000)


def test_node_is_its_name_and_the_host_name_is_kept_beside_it() -> None:
    """Several slurmd per host share one host name; a node is its NodeName (JSON `name`)."""
    doc = json.loads((STATE / "rest_nodes_a.json").read_bytes())
    for node in doc["nodes"]:
        node["hostname"] = "vm"
    rows = sinfo.parse(json.dumps(doc).encode(), cluster="c", snapshot_time=T0, tz=UTC).tables["node_states"]
    assert sorted(set(rows["node"])) == ["cpu01", "gpu01", "gpu02", "gpu03", "gpu04"]
    assert {v[sinfo.NODE_HOST] for n in doc["nodes"] for v in sinfo.json_values(n)} == {"vm"}


def test_flags_are_put_in_the_order_sinfo_prints_them() -> None:
    """The data parser lists RESERVED before DRAIN; StateComplete prints DRAIN first (node_state_flags[])."""
    node = json.loads((WEB / "25.11/0.0.44/slurm-node-draining.json").read_bytes())["nodes"][0]
    node["state"] = ["IDLE", "RESERVED", "NOT_RESPONDING", "DRAIN"]
    [values] = sinfo.json_values(node)
    assert values["state"] == "idle+drain+reserved+not_responding"


def _with(path: Path, **changes) -> bytes:
    doc = json.loads(path.read_bytes())
    doc.update(changes)
    return json.dumps(doc).encode()


def test_declined_and_foreign_documents_are_refused_by_name(tmp_path: Path) -> None:
    con = connect(str(tmp_path / "db.duckdb"))
    cfg = load_config(env={})
    old = FIXTURES / "rivosinc__prometheus-slurm-exporter" / "sinfo_out.json"  # real 21.08.5, openapi/v0.0.37
    with pytest.raises(IngestError, match=r"v0\.0\.37 is not read"):
        ingest_files(con, cfg, "sinfo", [old])
    grouped = tmp_path / "sinfo_2302.json"  # 23.02+ `sinfo --json`: partition groups, not nodes
    grouped.write_bytes(b'{"sinfo": [], "meta": {"plugin": {"data_parser": "data_parser/v0.0.41"}}}')
    with pytest.raises(IngestError, match="partition and state groups"):
        ingest_files(con, cfg, "sinfo", [grouped])
    p = sinfo.parse(_with(STATE / "rest_nodes_a.json", meta={}), cluster="c", snapshot_time=T0, tz=UTC)
    assert p.rows == 0 and "names no data parser version" in p.quarantine["reason"][0]
    assert con.execute("SELECT count(*) FROM node_states").fetchone()[0] == 0


def test_a_malformed_node_is_quarantined_alone() -> None:
    doc = json.loads((STATE / "rest_nodes_a.json").read_bytes())
    doc["nodes"].insert(2, {"name": "", "partitions": ["gpu"]})
    p = sinfo.parse(json.dumps(doc).encode(), cluster="c", snapshot_time=T0, tz=UTC)
    assert p.tables["node_states"].height == 9
    assert p.quarantine["line_no"].to_list() == [3]  # its place in the array
    assert "node without a name" in p.quarantine["reason"][0]


def test_json_cut_short_quarantines_every_line() -> None:
    data = (STATE / "sinfo_json_a.json").read_bytes()[:3000]
    p = sinfo.parse(data, cluster="c", snapshot_time=T0, tz=UTC)
    assert p.rows == 0
    assert p.quarantine.height == len([ln for ln in data.split(b"\n") if ln.strip()])
    assert p.quarantine["reason"][0].startswith("sinfo: not Slurm JSON")


def test_ingest_streams_json_and_loads_the_text_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(env={})
    text_db, json_db = connect(str(tmp_path / "t.duckdb")), connect(str(tmp_path / "j.duckdb"))
    at = "2026-12-04T14:54:50Z"
    ingest_files(text_db, cfg, "sinfo", [STATE / "sinfo_text_a.txt"], timezone="UTC", at=at)

    def whole(*args, **kwargs):
        raise AssertionError("a JSON file is streamed, never read whole")

    monkeypatch.setattr(sinfo, "parse", whole)
    monkeypatch.setattr(slurm_json, "BLOCK", 4096)
    [res] = ingest_files(json_db, cfg, "sinfo", [STATE / "sinfo_json_a.json"], at=at)
    assert (res.rows, res.quarantined, res.status) == (9, 0, "ok")
    q = "SELECT * FROM node_states ORDER BY node, partition"
    assert text_db.execute(q).fetchall() == json_db.execute(q).fetchall()


@given(st.binary(max_size=400))
def test_broken_json_never_raises_and_every_line_is_quarantined(tail: bytes) -> None:
    data = b'{"meta": ' + tail
    p = sinfo.parse(data, cluster="c", snapshot_time=T0, tz=UTC)
    lines = [i for i, ln in enumerate(data.split(b"\n"), 1) if not is_blank(ln.decode("utf-8", "replace"))]
    assert p.rows > 0 or sorted(p.quarantine["line_no"].to_list()) == lines
