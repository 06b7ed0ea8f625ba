"""sinfo parser: real captures in the formats they were recorded with, state flags, GRES, capacity, CLI."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from slurmscope.collectors import sinfo
from slurmscope.collectors.slurm_format import is_blank

from slurmscope.cli import main
from tests.paths import FIXTURES

FIX = FIXTURES
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
UTCZ = ZoneInfo("UTC")
US = "\x1f"
S = "SckyzO__slurm_exporter"
V = "vpenso__prometheus-slurm-exporter"
OSC = "OSC__ood_core"
TD = "treydock__prometheus-slurm-exporter"
NODE_DETAIL_8 = "NodeList: ,AllocMem: ,Memory: ,CPUsState: ,StateLong: ,Partition: ,Gres: ,GresUsed:"


def parse(data: bytes | str, fmt: str | None = None, **kw):
    if isinstance(data, str):
        data = data.encode()
    return sinfo.parse(data, cluster="c", snapshot_time=T0, tz=UTCZ, fmt=fmt, **kw)


def one(df: pl.DataFrame, **where) -> dict:
    rows = df.filter(*[pl.col(k) == v for k, v in where.items()]).to_dicts()
    assert len(rows) == 1, (where, rows)
    return rows[0]


# (file, format it was captured with, rows, {key: {column: value}}) -- values read off the raw text by hand.
NODE_CAPTURES = [
    (f"{V}/sinfo.txt", "%n,%T", 709, {("lxfoo0001", ""): {"state": "IDLE", "state_flags": None}}),
    (
        f"{V}/sinfo_mem.txt",
        "-O NodeList,AllocMem,Memory,CPUsState,StateLong",
        8,
        {
            ("a052", ""): {
                "alloc_memory_mb": 0,
                "memory_mb": 193000,
                "cpus_idle": 16,
                "cpus_total": 16,
                "state": "IDLE",
            },
            ("b001", ""): {"state": "DOWN", "state_raw": "down", "cpus_alloc": 32},
        },
    ),
    (
        f"{S}/node_detail.txt",
        "NodeList,AllocMem,Memory,CPUsState,StateLong,Partition",
        22,
        {
            ("a048", "gpu"): {"state": "MIXED", "alloc_memory_mb": 163840, "memory_mb": 193000},
            ("b001", "long"): {"state": "DOWN"},
            ("b003", "gpu"): {
                "cpus_alloc": 29,
                "cpus_idle": 3,
                "cpus_other": 0,
                "cpus_total": 32,
                "state": "IDLE",
            },
        },
    ),
    (
        f"{S}/node_detail_default_partition.txt",
        "NodeList: ,AllocMem: ,Memory: ,CPUsState: ,StateLong: ,Partition:",
        3,
        {
            ("a049", "gpu"): {"state": "IDLE", "cpus_idle": 16},
        },
    ),
    (
        f"{S}/node_detail_long_names.txt",
        "NodeList: ,AllocMem: ,Memory: ,CPUsState: ,StateLong: ,Partition:",
        5,
        {
            ("my-very-long-hostname-001", "short"): {"state": "IDLE", "memory_mb": 193000},
        },
    ),
    (
        f"{S}/slurm-25.05/node_detail_gres.txt",
        NODE_DETAIL_8,
        23,
        {
            ("a005", "gpu"): {
                "gpus_total": 4,
                "gpus_used": 2,
                "gpu_type": "model_a",
                "gres_used": "gpu:model_a:2(IDX:0,3)",
            },
            ("a002", "gpu"): {"state": "DRAINED", "state_flags": "NOT_RESPONDING+DRAIN", "gpus_used": 0},
            ("a004", "gpu4"): {"state": "MAINT"},
            ("c001", "cpu"): {"gpus_total": 0, "gres": None, "state": "ALLOCATED", "cpus_alloc": 192},
        },
    ),
    (
        f"{S}/slurm-25.11.2/node_detail_gres_multitype.txt",
        NODE_DETAIL_8,
        1,
        {
            ("g2", "gpu"): {"gpus_total": 4, "gpus_used": 1, "state": "MIXED", "memory_mb": 15867},
        },
    ),
    (
        f"{S}/slurm-24.11.7/node_detail.txt",
        NODE_DETAIL_8,
        25,
        {
            ("na1", "cpu"): {"state": "MIXED", "alloc_memory_mb": 8192, "cpus_alloc": 4},
            ("nb9", "gpu"): {"gpus_total": 4, "gpus_used": 0},
            ("nb5", "gpu"): {"gpu_type": "model_b"},
        },
    ),
    (f"{S}/slurm-26.05.2/node_detail.txt", NODE_DETAIL_8, 25, {}),
    (
        f"{S}/slurm-24.11.7/drain_reason.txt",
        "%N|%E|%H|%T",
        20,
        {
            ("na1", ""): {"reason": None, "reason_time": None, "state": "MIXED"},
        },
    ),
    (f"{S}/slurm-26.05.2/drain_reason.txt", "%N|%E|%H|%T", 20, {("na3", ""): {"state": "MIXED"}}),
    (
        f"{OSC}/sinfo_gres.txt",
        "nodehost:100,gres:512,gresused:512,statelong",
        298,
        {
            ("a0001", ""): {
                "gpus_total": 4,
                "gpus_used": 4,
                "gpu_type": "a100",
                "state": "MIXED",
                "state_flags": "PLANNED",
            },
        },
    ),
    (
        f"{OSC}/sinfo_gres_long_hostnames.txt",
        "nodehost:100,gres:512,gresused:512,statelong",
        3,
        {
            ("gpu-node-02.cluster.example.org", ""): {"gpus_total": 8, "gpus_used": 4, "gpu_type": "tesla"},
            ("gpu-node-03.cluster.example.org", ""): {
                "state": "DRAINED",
                "state_flags": "DRAIN",
                "gpus_used": 0,
            },
        },
    ),
    (
        f"{OSC}/owens_nodes.txt",
        r"\x1e%c\x1f%n\x1f%f",
        816,
        {
            ("o0004", ""): {
                "cpus_total": 28,
                "features": "c6320,cpu,eth-owens-rack02h1,ib-i1l1s01,ib-i1,1,1-c01",
            },
        },
    ),
    (
        f"{TD}/sinfo_gpus.txt",
        "nodehost,gres:20,gresused:20",
        16,
        {
            ("cpn-u24-07", ""): {"gpus_total": 2, "gpus_used": 2, "gpu_type": "V100"},
        },
    ),
    (
        "rivosinc__prometheus-slurm-exporter/sinfo_fallback.txt",
        '{"s": "%T", "mem": %m, "n": "%n", "l": "%O", "p": "%R", "fmem": "%e", "cstate": "%C", "w": %w}',
        8,
        {
            ("cs156", "hw"): {"state": "COMPLETING", "memory_mb": 770000, "cpus_alloc": 56, "cpus_total": 64},
            ("cs25", "hw-l"): {"state": "ALLOCATED"},
        },
    ),
]


@pytest.mark.parametrize(("path", "fmt", "rows", "checks"), NODE_CAPTURES, ids=[c[0] for c in NODE_CAPTURES])
def test_node_oriented_capture_parses_without_quarantine(path, fmt, rows, checks):
    p = parse((FIX / path).read_bytes(), fmt)
    assert p.quarantine.height == 0, p.quarantine.to_dicts()[:3]
    df = p.tables["node_states"]
    assert df.height == rows
    for (node, part), expected in checks.items():
        row = one(df, node=node, partition=part)
        for col, value in expected.items():
            assert row[col] == value, (node, part, col)


def test_vpenso_state_suffixes_counted_like_the_raw_text():
    df = parse((FIX / V / "sinfo.txt").read_bytes(), "%n,%T").tables["node_states"]
    flags = df["state_flags"].fill_null("")
    # raw text: 66 down*, 11 drained*, 1 fail* -> 78 NOT_RESPONDING; 7 drained + 11 drained* + 10 draining
    assert flags.str.contains("NOT_RESPONDING").sum() == 78
    assert flags.str.contains("DRAIN").sum() == 28
    assert df.filter(pl.col("state") == "FAIL")["state_flags"].to_list() == ["NOT_RESPONDING"]


def test_osc_states_with_reboot_and_planned_flags():
    df = parse(
        (FIX / OSC / "sinfo_gres.txt").read_bytes(), "nodehost:100,gres:512,gresused:512,statelong"
    ).tables["node_states"]
    draining = df.filter(pl.col("state_raw") == "draining@")
    assert draining.height == 2
    assert set(draining["state_flags"]) == {"REBOOT_REQUESTED+DRAIN"}
    assert (df["state_raw"] == "mixed-").sum() == 38


# Aggregated captures (no node names): node_groups, one row per printed line.
GROUP_CAPTURES = [
    (f"{S}/gpus_snapshot.txt", "Nodes: ,StateLong: ,Gres: ,GresUsed:", 12, 122),
    (f"{S}/gpus_snapshot_long_gres.txt", "Nodes: ,Gres:", 3, 6),
    (f"{S}/partitions_gpu_long_gres.txt", "Nodes: ,Partition: ,Gres: ,GresUsed:", 2, 3),
    (f"{S}/slurm-20.11.8/sinfo_gpus_total.txt", "Nodes: ,Gres:", 2, None),
    (f"{S}/slurm-20.11.8/sinfo_gpus_idle.txt", "Nodes: ,Gres: ,GresUsed:", 4, 123),
    (f"{S}/slurm-20.11.8/sinfo_gpus_allocated.txt", "Nodes:10 ,GresUsed:", 3, None),
    (f"{S}/slurm-21.08.5/sinfo_gpus_total.txt", "Nodes: ,Gres:", 1, None),
    (f"{S}/slurm-21.08.5/sinfo_gpus_idle.txt", "Nodes: ,Gres: ,GresUsed:", 1, 2),
    (f"{S}/slurm-21.08.5/sinfo_gpus_allocated.txt", "Nodes:10 ,GresUsed:", 0, 0),
    (f"{S}/slurm-23.11.10/sinfo_gpus_total.txt", "Nodes: ,Gres:", 2, None),
    (f"{S}/slurm-23.11.10/sinfo_gpus_allocated.txt", "Nodes:10 ,GresUsed:", 6, None),
    (f"{S}/slurm-23.11.10-2/sinfo_gpus_total.txt", "Nodes: ,Gres:", 4, 75),
    (f"{S}/slurm-23.11.10-2/sinfo_gpus_idle.txt", "Nodes: ,Gres: ,GresUsed:", 4, None),
    (f"{S}/slurm-23.11.10-2/sinfo_gpus_allocated.txt", "Nodes:10 ,GresUsed:", 2, None),
    (f"{S}/slurm-24.11.7/gpus_snapshot.txt", "Nodes: ,StateLong: ,Gres: ,GresUsed:", 5, 20),
    (f"{S}/slurm-24.11.7/nodes_global.txt", "%R|%D|%T|%b", 6, None),
    (f"{S}/slurm-24.11.7/partitions_gpu.txt", "Nodes: ,Partition: ,Gres: ,GresUsed:", 6, 25),
    (f"{S}/slurm-25.05/sinfo_gpus_total.txt", "Nodes: ,Gres:", 1, 1058),
    (f"{S}/slurm-25.05/sinfo_gpus_idle.txt", "Nodes: ,Gres: ,GresUsed:", 2, None),
    (f"{S}/slurm-25.05/sinfo_gpus_allocated.txt", "Nodes:10 ,GresUsed:", 2, None),
    (f"{S}/slurm-25.11.1-1/partitions_gpu.txt", "Nodes: ,Partition: ,Gres: ,GresUsed:", 13, None),
    (f"{S}/slurm-25.11.1-1/sinfo_gpus_total.txt", "Nodes: ,Gres:", 10, None),
    (f"{S}/slurm-25.11.1-1/sinfo_gpus_idle.txt", "Nodes: ,Gres: ,GresUsed:", 9, None),
    (f"{S}/slurm-25.11.1-1/sinfo_gpus_allocated.txt", "Nodes:10 ,GresUsed:", 7, None),
    (f"{S}/slurm-26.05.2/gpus_snapshot.txt", "Nodes: ,StateLong: ,Gres: ,GresUsed:", 5, 20),
    (f"{S}/slurm-26.05.2/nodes_global.txt", "%R|%D|%T|%b", 5, None),
    (f"{S}/slurm-26.05.2/partitions_gpu.txt", "Nodes: ,Partition: ,Gres: ,GresUsed:", 6, 25),
]


def _nonblank_lines(path: Path) -> int:
    return sum(1 for line in path.read_bytes().split(b"\n") if line.strip())


@pytest.mark.parametrize(("path", "fmt", "rows", "nodes"), GROUP_CAPTURES, ids=[c[0] for c in GROUP_CAPTURES])
def test_aggregated_capture_goes_to_node_groups(path, fmt, rows, nodes):
    p = parse((FIX / path).read_bytes(), fmt)
    assert p.quarantine.height == 0, p.quarantine.to_dicts()[:3]
    df = p.tables["node_groups"]
    assert df.height == rows == _nonblank_lines(FIX / path)
    if nodes is not None:
        assert df["node_count"].sum() == nodes


def test_aggregated_values_checked_by_hand():
    df = parse((FIX / S / "gpus_snapshot.txt").read_bytes(), "Nodes: ,StateLong: ,Gres: ,GresUsed:").tables[
        "node_groups"
    ]
    first = df.row(0, named=True)
    assert (first["node_count"], first["state"], first["state_flags"], first["gpus_per_node"]) == (
        4,
        "MIXED",
        "PLANNED",
        0,
    )
    ninth = df.row(8, named=True)  # "2 mixed gpu:model_a:4(S:0-3) gpu:model_a:3(IDX:0-2)"
    assert (ninth["node_count"], ninth["gpus_per_node"], ninth["gpus_used_per_node"]) == (2, 4, 3)
    long = (
        parse((FIX / S / "partitions_gpu_long_gres.txt").read_bytes(), "Nodes: ,Partition: ,Gres: ,GresUsed:")
        .tables["node_groups"]
        .row(0, named=True)
    )
    assert long["partition"] == "a_partition_with_a_very_long_name_above_thirty_chars"
    # gpu:nvidia_a100_80gb:8,mig:nvidia_a100_3g.40gb:7,gpu:nvidia_h100_80gb:4 -> 12 GPUs; MIG slices are not GPUs
    assert (long["gpus_per_node"], long["gpus_used_per_node"]) == (12, 5)
    mig = parse(
        (FIX / S / "slurm-25.11.1-1/partitions_gpu.txt").read_bytes(), "Nodes: ,Partition: ,Gres: ,GresUsed:"
    ).tables["node_groups"]
    row = one(mig, partition="debuga100")
    assert row["gpus_per_node"] == 0 and row["gpu_type"] == "nvidia_a100_1g.5gb"
    assert one(mig, partition="dgx2", gpus_used_per_node=13)["gpus_per_node"] == 16


DECLINED = [
    (f"{V}/sinfo_cpus.txt", "%C"),
    (f"{S}/cpus.txt", "%C"),
    (f"{S}/slurm-24.11.7/cpus.txt", "%C"),
    (f"{S}/slurm-26.05.2/cpus.txt", "%C"),
    (f"{S}/slurm-24.11.7/partitions_cpu.txt", "%R,%C"),
    (f"{S}/slurm-26.05.2/partitions_cpu.txt", "%R,%C"),
    (f"{S}/slurm-25.11.1-1/partitions_cpu.txt", "%R,%C"),
    (f"{TD}/partitions.txt", "%R"),
    (f"{TD}/sinfo_partition_cpus.txt", "%R,%C"),
    (f"{TD}/sinfo_partition_nodestates.txt", "%R,%T"),
    (f"{TD}/sinfo_partition_gpus.txt", "partitionname:50,gres:100,gresused:100"),
    (f"{OSC}/sinfo_fc.txt", "%F/%C"),
    (f"{OSC}/sinfo_fc_long_hostnames.txt", "%F/%C"),
]


@pytest.mark.parametrize(("path", "fmt"), DECLINED, ids=[c[0] for c in DECLINED])
def test_declined_formats_are_refused_with_a_reason(path, fmt):
    assert (FIX / path).exists()
    problem = sinfo.check_input((FIX / path).read_bytes(), fmt, None)
    assert problem and "docs/collectors.md" in problem
    with pytest.raises(ValueError):
        parse((FIX / path).read_bytes(), fmt)


# ------------------------------------------------------------------------------------- live format


def live_line(
    node="gpu01",
    host="h01",
    part="gpu*",
    state="mixed+drain",
    cpus="8/56/0/64",
    mem="512000",
    alloc="64000",
    gres="gpu:h100:8(S:0-1)",
    used="gpu:h100:3(IDX:0-2)",
    feat="h100,ib",
    user="root(0)",
    ts="2024-04-30T08:15:00",
    reason="bad GPU xid 79",
) -> str:
    return US.join([node, host, part, state, cpus, mem, alloc, gres, used, feat, user, ts, reason])


def test_live_command_line():
    from slurmscope.config import load_config

    argv = sinfo.command(load_config(None))
    assert argv[:3] == ["sinfo", "--Node", "--noheader"]
    assert argv[3] == (
        "--Format=NodeList:\x1f,NodeHost:\x1f,Partition:\x1f,StateComplete:\x1f,CPUsState:\x1f,Memory:\x1f,"
        "AllocMem:\x1f,Gres:\x1f,GresUsed:\x1f,Features:\x1f,UserLong:\x1f,Timestamp:\x1f,Reason:"
    )


def test_live_format_row():
    p = parse(
        live_line()
        + "\n"
        + live_line(
            part="debug",
            reason="none",
            user="Unknown",
            ts="Unknown",
            state="idle~",
            gres="(null)",
            used="(null)",
        )
        + "\n"
    )
    assert p.quarantine.height == 0
    df = p.tables["node_states"]
    r = one(df, partition="gpu")
    assert (r["state"], r["state_flags"], r["state_raw"]) == ("MIXED", "DRAIN", "mixed+drain")
    assert (r["cpus_alloc"], r["cpus_idle"], r["cpus_other"], r["cpus_total"]) == (8, 56, 0, 64)
    assert (r["memory_mb"], r["alloc_memory_mb"]) == (512000, 64000)
    assert (r["gpus_total"], r["gpus_used"], r["gpu_type"]) == (8, 3, "h100")
    assert (r["reason"], r["reason_user"]) == ("bad GPU xid 79", "root")
    assert r["reason_time"] == datetime(2024, 4, 30, 8, 15, tzinfo=UTC)
    d = one(df, partition="debug")
    assert (d["state"], d["state_flags"], d["reason"], d["reason_user"], d["reason_time"]) == (
        "IDLE",
        "POWERED_DOWN",
        None,
        None,
        None,
    )
    assert (d["gpus_total"], d["gpus_used"]) == (0, 0)


def test_separator_inside_a_drain_reason_stays_in_the_reason():
    df = parse(live_line(reason=f"ticket{US}123 | see log") + "\n").tables["node_states"]
    assert df["reason"].to_list() == [f"ticket{US}123 | see log"]


def test_reason_time_read_in_the_recorded_zone():
    df = sinfo.parse(
        live_line(ts="2024-01-15T10:00:00").encode(),
        cluster="c",
        snapshot_time=T0,
        tz=ZoneInfo("Europe/Berlin"),
    ).tables["node_states"]
    assert df["reason_time"].to_list() == [datetime(2024, 1, 15, 9, 0, tzinfo=UTC)]


def test_mig_gres_is_not_counted_as_gpus():
    df = parse(
        live_line(gres="gpu:1g.10gb:7,gpu:a100:1", used="gpu:1g.10gb:2(IDX:0-1),gpu:a100:0") + "\n"
    ).tables["node_states"]
    assert (df["gpus_total"][0], df["gpus_used"][0], df["gpu_type"][0]) == (1, 0, "a100")


def test_non_gpu_gres_ignored_and_short_lines_quarantined():
    data = (
        live_line(gres="gpu:v100:2(S:0-1),pfsdir:scratch:no_consume:0,mps:200")
        + "\n"
        + "gpu02"
        + US
        + "gpu\n"
        + "\n"
    )
    p = parse(data)
    assert p.tables["node_states"]["gpus_total"].to_list() == [2]
    assert p.quarantine["line_no"].to_list() == [2]
    assert "expected 13" in p.quarantine["reason"][0]


def test_hostlist_rows_expand_to_one_row_per_node():
    df = parse("gpu[01-03] gpu idle\n", "%N %P %T").tables["node_states"]
    assert df["node"].to_list() == ["gpu01", "gpu02", "gpu03"]


def test_header_line_is_skipped_not_quarantined():
    p = parse("HOSTNAMES STATE\nn1 idle\n", "%n %T")
    assert p.quarantine.height == 0 and p.tables["node_states"]["node"].to_list() == ["n1"]


def test_non_utf8_bytes_are_kept_in_quarantine():
    p = parse(b"n1" + US.encode() + b"\xff\xfe\n")
    assert p.quarantine.height == 1
    assert p.quarantine["raw_bytes"][0] == b"n1\x1f\xff\xfe"


# ------------------------------------------------------------------------------------- capacity


def test_capacity_counts_each_node_once_across_partitions():
    lines = [
        live_line(node="g1", part="gpu", gres="gpu:a100:4", used="gpu:a100:1"),
        live_line(node="g1", part="all", gres="gpu:a100:4", used="gpu:a100:1"),
        live_line(node="g1", part="long", gres="gpu:a100:4", used="gpu:a100:1"),
        live_line(node="g2", part="gpu", gres="gpu:a100:4", used="gpu:a100:4", cpus="64/0/0/64"),
        live_line(node="c1", part="all", gres="(null)", used="(null)", cpus="0/32/0/32"),
    ]
    df = parse("\n".join(lines) + "\n").tables["node_states"]
    assert df.height == 5
    assert df["gpus_total"].sum() == 16  # what a naive sum over rows would report
    cap = sinfo.capacity(df).row(0, named=True)
    assert (cap["nodes"], cap["gpus_total"], cap["gpus_used"], cap["cpus_total"]) == (3, 8, 5, 160)


def test_capacity_of_a_real_capture_matches_distinct_nodes():
    df = parse((FIX / S / "slurm-24.11.7/node_detail.txt").read_bytes(), NODE_DETAIL_8).tables["node_states"]
    assert df.height == 25
    cap = sinfo.capacity(df).row(0, named=True)
    # raw text: na1..na10 (CPU) and nb1..nb10 with 4 GPUs each; 32 CPUs per node
    assert (cap["nodes"], cap["gpus_total"], cap["cpus_total"]) == (20, 40, 640)


# ------------------------------------------------------------------------------------- CLI


def test_cli_ingest_then_query(tmp_path):
    db = tmp_path / "s.duckdb"
    src = tmp_path / "node_detail.txt"
    src.write_bytes((FIX / S / "slurm-25.05/node_detail_gres.txt").read_bytes())
    os.utime(
        src, (1_714_564_800, 1_714_564_800)
    )  # 2024-05-01T12:00:00Z: the snapshot time of a recorded file
    runner = CliRunner()
    res = runner.invoke(main, ["--db", str(db), "ingest", "sinfo", str(src), "--format", NODE_DETAIL_8])
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        main,
        [
            "--db",
            str(db),
            "query",
            "--format",
            "csv",
            "SELECT node, partition, gpus_total, gpus_used, snapshot_time FROM node_states "
            "WHERE node = 'a005' AND partition = 'gpu'",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "a005,gpu,4,2,2024-05-01 12:00:00" in res.output
    again = runner.invoke(main, ["--db", str(db), "ingest", "sinfo", str(src), "--format", NODE_DETAIL_8])
    assert again.exit_code == 0
    res = runner.invoke(
        main, ["--db", str(db), "query", "--format", "csv", "SELECT count(*) AS n FROM node_states"]
    )
    assert res.output.strip().splitlines()[-1] == "23"


def test_cli_refuses_a_format_without_nodes(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "--db",
            str(tmp_path / "s.duckdb"),
            "ingest",
            "sinfo",
            str(FIX / V / "sinfo_cpus.txt"),
            "--format",
            "%C",
        ],
    )
    assert res.exit_code != 0
    assert "docs/collectors.md" in res.output


# ------------------------------------------------------------------------------------- properties

_ALPHABET = st.sampled_from(
    list("abcgpu01239*~#!%$@^-+:,()/| \t=\x1f\x1e\x1c²")
    + ["idle", "mixed", "drain", "gpu:h100:8", "(null)", "\n"]
)


def _check_total(data: bytes, fmt: str | None) -> None:
    """Every non-blank line is quarantined, or yields a row by itself, or is the skipped first-line header."""
    p = parse(data, fmt)
    lines = data.split(b"\n")
    q = set(p.quarantine["line_no"].to_list())
    assert q <= set(range(1, len(lines) + 1))
    first = True
    for i, line in enumerate(lines, start=1):
        if is_blank(line.decode("utf-8", "replace")):
            continue
        if i not in q:
            alone = parse(line, fmt)
            table = alone.tables.get("node_states", alone.tables.get("node_groups"))
            assert table.height >= 1 or (first and alone.quarantine.height == 0), line
        first = False


_FORMATS = st.sampled_from([None, NODE_DETAIL_8, "Nodes: ,StateLong: ,Gres: ,GresUsed:", "%n,%T"])


@given(
    st.one_of(st.binary(max_size=300), st.lists(_ALPHABET, max_size=80).map(lambda xs: "".join(xs).encode())),
    _FORMATS,
)
def test_never_raises_and_every_line_kept_or_quarantined(data, fmt):
    _check_total(data, fmt)


def test_live_line_with_empty_fields():
    p = parse(live_line(feat="", used="", reason="") + "\n")
    assert p.quarantine.height == 0
    r = p.tables["node_states"].row(0, named=True)
    assert (r["features"], r["gres_used"], r["gpus_used"], r["reason"], r["gpus_total"]) == (
        None,
        None,
        0,
        None,
        8,
    )


def test_a_line_of_separators_only_is_quarantined():
    p = parse(US * 3 + "\n")
    assert p.quarantine["line_no"].to_list() == [1]


def test_real_slurm_22_05_sinfo(fixtures):
    final = parse((fixtures / "slurm-22.05/sinfo_final.txt").read_bytes())
    assert final.quarantine.height == 0
    p = parse((fixtures / "slurm-22.05/sinfo_mid.txt").read_bytes())
    assert p.quarantine.height == 0
    df = p.tables["node_states"]
    assert df.height == 9  # cpu01 once, gpu01-04 in gpu* and debug
    # the workload drains a node while a job runs (the run's own record says which, and why)
    record = json.loads((fixtures / "slurm-22.05/workload_record_sinfo.json").read_text())
    drained = record["drain_node"]
    r = one(df, node=drained, partition="gpu")
    # allocated+drain, 3 GPUs in use (IDX:0-1,4 in the capture), its reason and root as user
    assert (r["state"], r["state_flags"], r["state_raw"], r["gpus_used"]) == (
        "ALLOCATED",
        "DRAIN",
        "allocated+drain",
        3,
    )
    assert (r["reason"], r["reason_user"]) == (record["nodes"][drained]["reason"], "root")
    raw = next(
        line
        for line in (fixtures / "slurm-22.05/sinfo_mid.txt").read_text().splitlines()
        if line.startswith(f"{drained}{US}") and line.split(US)[2] == "gpu*"
    )
    fields = raw.split(US)
    assert (r["node_host"], r["cpus_other"]) == (fields[1], int(fields[4].split("/")[2]))
    assert r["reason_time"] == datetime.fromisoformat(fields[11]).replace(tzinfo=UTC)
    cap = sinfo.capacity(df).row(0, named=True)
    assert (cap["nodes"], cap["gpus_total"], cap["cpus_total"]) == (5, 32, 80)


def test_numbers_too_large_for_their_column_are_quarantined():
    p = parse(
        live_line(cpus="99999999999/0/0/99999999999")
        + "\n"
        + live_line(node="g2", gres="gpu:h100:3000000000")
        + "\n"
    )
    assert p.tables["node_states"].height == 0
    assert [r.split(":")[1].split()[0] for r in p.quarantine["reason"]] == ["cpus_alloc", "gpus_total"]


# ------------------------------------------------------------------------- vectorised == per-line path

_LIVE_VALUES = [
    ["gpu01", "gpu02", " gpu03 ", "", "n\x1c1", "(null)", "gpu[04-05]", "gpu[06"],
    ["vm", "gpu01", " vm ", "", "h[1-2]", "(null)", "vm[1"],
    ["gpu*", "debug", "", "(null)", "all"],
    ["mixed+drain", "idle~", "DOWN*", "drained*", "weird?", "", "allocated$", "mix"],
    ["8/56/0/64", "0/0/0/0", "N/A", "1/2/3", "²/0/0/1", "99999999999/0/0/1", ""],
    ["512000", "N/A", "1T", "x"],
    ["64000", "0", ""],
    ["gpu:h100:8(S:0-1)", "(null)", "gpu:1g.10gb:7,gpu:a100:1", "gpu:3000000000", "mps:200", ""],
    ["gpu:h100:3(IDX:0-2)", "gpu:0", "(null)", ""],
    ["h100,ib", "", "(null)"],
    ["root(0)", "Unknown", "alice(1001)"],
    ["2024-04-30T08:15:00", "Unknown", "2024-03-31T02:30:00", "bad", "1714557600"],
    ["bad GPU", "none", "", "x\x1fy"],
]


@st.composite
def _sinfo_lines(draw):
    lines = []
    for _ in range(draw(st.integers(2, 7))):
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.text(alphabet="gpu01\x1f|/ ", max_size=20)))
        else:
            lines.append(US.join(draw(st.sampled_from(v)) for v in _LIVE_VALUES))
    return ("\n".join(lines) + "\n").encode()


@settings(max_examples=150)  # each example runs both paths; the no-raise property runs the CI count
@given(_sinfo_lines(), st.sampled_from(["UTC", "Europe/Berlin"]))
def test_vectorised_path_equals_per_line_path(data, zone):
    from polars.testing import assert_frame_equal

    kw = dict(cluster="c", snapshot_time=T0, tz=ZoneInfo(zone), fmt=None, delimiter=None, source="")
    fast = sinfo._parse(data, vectorise=True, **kw)
    slow = sinfo._parse(data, vectorise=False, **kw)
    assert_frame_equal(fast.tables["node_states"], slow.tables["node_states"])
    assert_frame_equal(fast.quarantine.sort("line_no"), slow.quarantine.sort("line_no"))


# ------------------------------------------------------------------------------------- node identity
# A node is its NodeName (NodeList, %N); its host name (NodeHost, %n) is a column. slurm.conf lets nodes
# share a NodeHostname (docs/testbed.md: the bed runs five slurmd on one host, each printed with host `vm`).


def _both_paths(data: str, fmt: str | None = None):
    kw = dict(cluster="c", snapshot_time=T0, tz=UTCZ, fmt=fmt, delimiter=None, source="")
    return [sinfo._parse(data.encode(), vectorise=v, **kw) for v in (True, False)]


def test_nodes_that_share_a_host_are_one_row_each_with_the_host_kept():
    data = "".join(
        live_line(node=n, host="vm", part=p) + "\n" for n in ("gpu01", "gpu02") for p in ("gpu*", "debug")
    )
    for p in _both_paths(data):
        df = p.tables["node_states"].sort("node", "partition")
        assert df.select("node", "partition", "node_host").rows() == [
            ("gpu01", "debug", "vm"),
            ("gpu01", "gpu", "vm"),
            ("gpu02", "debug", "vm"),
            ("gpu02", "gpu", "vm"),
        ]
        assert (p.quarantine.height, p.warnings) == (0, [])


def test_a_recorded_format_with_both_names_keys_by_the_node_name():
    text = "NODELIST|HOSTNAMES|PARTITION|STATE\ngpu01|vm|gpu*|idle\ngpu02|vm|gpu*|down\ngpu[03-04]|vm|debug|idle\n"
    for p in _both_paths(text, "%N|%n|%P|%T"):
        df = p.tables["node_states"]
        assert df.select("node", "node_host", "state").rows() == [
            ("gpu01", "vm", "IDLE"),
            ("gpu02", "vm", "DOWN"),
            ("gpu03", "vm", "IDLE"),
            ("gpu04", "vm", "IDLE"),
        ]
        assert p.warnings == []


def test_host_only_format_stores_distinct_hosts_with_a_warning():
    p = parse("a01,idle\na02,down\n", "%n,%T")
    assert p.tables["node_states"].select("node", "node_host", "state").rows() == [
        ("a01", "a01", "IDLE"),
        ("a02", "a02", "DOWN"),
    ]
    assert p.warnings == [sinfo.HOST_ONLY_WARNING] and "%N/NodeList" in p.warnings[0]


def test_host_only_lines_that_show_one_host_twice_in_a_partition_are_quarantined_never_merged():
    # what `sinfo -N -o '%n|%P|%T'` prints on the bed: gpu01-02 of host vm in one partition, cpu01 alone in
    # another; the host stands for several nodes, so none of its lines is one node (h2 is)
    p = parse("vm|gpu*|idle\nvm|gpu*|down\nvm|cpu|idle\nh2|cpu|idle\n", "%n|%P|%T")
    assert p.tables["node_states"].select("node", "partition").rows() == [("h2", "cpu")]
    assert p.quarantine["line_no"].to_list() == [1, 2, 3]
    assert all(
        "printed on 2 lines of partition 'gpu'" in r and "%N (-o) or NodeList (-O)" in r
        for r in p.quarantine["reason"]
    )
    identical = parse("vm|gpu*|idle\nvm|gpu*|idle\n", "%n|%P|%T")  # two idle nodes look the same
    assert identical.tables["node_states"].height == 0 and identical.quarantine.height == 2


def test_host_only_line_for_several_nodes_is_quarantined():
    # without --Node, sinfo groups the nodes that share a host: `vm|gpu*|idle|4` is four nodes
    p = parse("vm|gpu*|idle|4\nvm|cpu|idle|1\n", "%n|%P|%T|%D")
    assert p.tables["node_states"].select("node", "partition").rows() == [("vm", "cpu")]
    assert p.quarantine["reason"].to_list() == [
        f"sinfo: one line for 4 nodes under the host name 'vm': {sinfo.CAPTURE_NODE_NAMES}"
    ]
    # one of them DOWN: a group of 3 and a line for 1 in the same partition; no line of that host is one node
    p = parse("vm|gpu*|idle|3\nvm|gpu*|down|1\nvm|cpu|idle|1\n", "%n|%P|%T|%D")
    assert p.tables["node_states"].height == 0 and p.quarantine["line_no"].to_list() == [1, 2, 3]


def test_host_only_lines_of_one_host_with_different_states_across_partitions_are_quarantined():
    p = parse("vm|gpu*|down\nvm|cpu|idle\nh2|gpu*|idle\nh2|cpu|idle\n", "%n|%P|%T")
    assert p.tables["node_states"].select("node", "partition").rows() == [("h2", "gpu"), ("h2", "cpu")]
    assert p.quarantine["line_no"].to_list() == [1, 2]
    assert "different node values on 2 lines" in p.quarantine["reason"][0]


def test_host_only_without_partition_keeps_repeated_identical_lines_as_one_and_refuses_differing_ones():
    same = parse("a01,idle\na01,idle\n", "%n,%T")  # one node in two partitions prints the same line
    assert same.tables["node_states"].height == 1 and same.quarantine.height == 0
    differ = parse("a01,idle\na01,down\n", "%n,%T")  # one node has one state: two nodes behind a01
    assert differ.tables["node_states"].height == 0
    assert differ.quarantine["line_no"].to_list() == [1, 2]


def test_the_previous_live_format_is_read_as_host_only():
    old = US.join(
        live_line(node="gpu01", host="x").split(US)[:1] + live_line().split(US)[2:]
    )  # NodeHost first, 12 fields
    p = parse(old + "\n" + old.replace("gpu01", "gpu02", 1) + "\n")
    assert p.tables["node_states"].select("node", "node_host").rows() == [
        ("gpu01", "gpu01"),
        ("gpu02", "gpu02"),
    ]
    assert p.warnings == [sinfo.HOST_ONLY_WARNING]


# Real captures of the shared-host bed (tests/integration/test_node_identity_live.py): five slurmd on host
# `vm`, gpu03 DOWN with reason "Xid 79: GPU has fallen off the bus". Each is read with the format its .argv
# file records.
HOSTS = "slurm-22.05/sinfo_hosts_{}"


def _capture(fixtures: Path, tag: str) -> tuple[bytes, str, list[str]]:
    base = fixtures / HOSTS.format(tag)
    argv = Path(f"{base}.argv").read_text().splitlines()
    data = Path(f"{base}.txt").read_bytes()
    return data, argv[-1], [line for line in data.decode().splitlines() if line.strip()]


@pytest.mark.parametrize("tag", ["live", "names"])
def test_real_shared_host_capture_gives_every_node_its_row(fixtures, tag):
    data, fmt, lines = _capture(fixtures, tag)
    p = parse(data, None if tag == "live" else fmt)
    sep = US if tag == "live" else "|"
    rows = [line.split(sep) for line in lines if not line.startswith("NODELIST")]
    assert {r[1] for r in rows} == {"vm"}  # the premise: one host name for all
    df = p.tables["node_states"]
    assert (p.quarantine.height, p.warnings) == (0, [])
    assert sorted(df.select("node", "partition", "node_host").rows()) == sorted(
        (r[0], r[2].rstrip("*"), r[1]) for r in rows
    )
    down = df.filter(pl.col("state") == "DOWN")
    assert sorted(down["node"].to_list()) == ["gpu03", "gpu03"]
    assert set(down["reason"]) == {"Xid 79: GPU has fallen off the bus"}
    if tag == "live":
        cap = sinfo.capacity(df).row(0, named=True)
        assert (cap["nodes"], cap["gpus_total"], cap["cpus_total"]) == (5, 32, 80)  # 4 x 8 H100, 5 x 16 CPUs


@pytest.mark.parametrize(("tag", "fmt"), [("previous", None), ("only", "argv"), ("groups", "argv")])
def test_real_host_only_captures_of_shared_hosts_are_quarantined_whole(fixtures, tag, fmt):
    """Keyed by host, these stored one node `vm` (issue 14); no line of them is one node."""
    data, argv_fmt, lines = _capture(fixtures, tag)
    p = parse(data, argv_fmt if fmt == "argv" else None)
    records = [line for line in lines if not line.startswith("HOSTNAMES")]
    assert p.tables["node_states"].height == 0
    assert p.quarantine.height == len(records)
    assert all("%N (-o) or NodeList (-O)" in r for r in p.quarantine["reason"])
    assert p.warnings == [sinfo.HOST_ONLY_WARNING]


def test_ingesting_the_previous_live_format_of_shared_hosts_fails_and_says_why(
    fixtures, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    src = fixtures / (HOSTS.format("previous") + ".txt")
    db = tmp_path / "p.duckdb"
    res = CliRunner().invoke(
        main, ["--db", str(db), "ingest", "sinfo", str(src), "--at", "2026-12-04T15:00:50Z"]
    )
    assert res.exit_code == 1
    assert "mostly garbage: 9 of 9 lines quarantined" in res.output
    assert f"warning: {sinfo.HOST_ONLY_WARNING}" in res.output
