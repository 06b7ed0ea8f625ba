"""sinfo: one row per node per partition per snapshot, with state flags, CPUs, memory, GRES and drain reason.

The live command is node-oriented (`--Node`) with `--Format` fields ended by the unit separator 0x1F,
which no node name, state, GRES string or partition can contain; `Reason` (the only free text) is last,
so a 0x1F typed into a drain reason cannot shift the other columns.

A node is its NodeName (`NodeList`, `%N`), never its host name (`NodeHost`, `%n`): slurm.conf lets nodes
share a NodeHostname (several slurmd per host with `--enable-multiple-slurmd`, aliased and cloud nodes;
"By default, the NodeHostname will be identical in value to NodeName", slurm.conf(5), Slurm 22.05,
https://slurm.schedmd.com/archive/slurm-22.05.8/slurm.conf.html#OPT_NodeHostname), and keying by it stored
six nodes of one host as one node (issue 14). The host name is kept in its own column, `node_host`. Recorded captures from other tools
use many `-o`/`-O` strings; `ingest sinfo --format` names one and the same parser reads it (see
docs/collectors.md for the supported and declined ones).

Slurm's JSON of the nodes (22.05's `sinfo --json`, `scontrol show nodes --json`, slurmrestd `/nodes`) is
recognised by its leading `{` and read as a stream: each node gives the values the live `--Node --Format`
line prints for it, typed by the same rules (`json_values`, docs/collectors.md "JSON and slurmrestd").

`sinfo -N` prints a node once for every partition it belongs to, so capacity must count distinct nodes:
`capacity()` does that, and docs/collectors.md says so for anyone querying node_states directly.
"""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from typing import IO
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors import slurm_json
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import gpu_count, parse_mem_mb, parse_slurm_time, split_lines
from slurmscope.collectors.slurm_format import (
    LineFormat,
    fast_path,
    is_blank,
    is_header,
    out_of_range,
    parse_format,
    split_line,
)
from slurmscope.collectors.slurm_human import Layout, Table, find_table, parse_date_line, split_row

from slurmscope.config import Config
from slurmscope.hostlist import expand_hostlist
from slurmscope.slurm_states import NULL_WORDS, parse_node_state

KIND = "sinfo"
TABLES = {
    "node_states": TableSpec("node_states", ("cluster", "snapshot_time", "node", "partition")),
    # Only from recorded aggregated captures (no node names); see sql/0002_node_groups.sql.
    "node_groups": TableSpec("node_groups", ("cluster", "snapshot_time", "group_no")),
}

US = "\x1f"
LIVE_FIELDS = (
    "NodeList",
    "NodeHost",
    "Partition",
    "StateComplete",
    "CPUsState",
    "Memory",
    "AllocMem",
    "Gres",
    "GresUsed",
    "Features",
    "UserLong",
    "Timestamp",
)
# Size left empty after ':' = no padding, no truncation; the suffix after it is the separator.
LIVE_FORMAT = ",".join(f"{f}:{US}" for f in LIVE_FIELDS) + ",Reason:"
# The live format before migration 0017 (NodeHost, no NodeList): still read, as a host-only format.
PREVIOUS_LIVE_FORMAT = ",".join(f"{f}:{US}" for f in LIVE_FIELDS[1:]) + ",Reason:"

NODE_STATES_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "node": pl.String,
    "partition": pl.String,
    "state": pl.String,
    "state_flags": pl.String,
    "state_raw": pl.String,
    "reason": pl.String,
    "reason_user": pl.String,
    "reason_time": pl.Datetime("us", "UTC"),
    "cpus_alloc": pl.Int32,
    "cpus_idle": pl.Int32,
    "cpus_other": pl.Int32,
    "cpus_total": pl.Int32,
    "memory_mb": pl.Int64,
    "alloc_memory_mb": pl.Int64,
    "gres": pl.String,
    "gres_used": pl.String,
    "gpus_total": pl.Int32,
    "gpus_used": pl.Int32,
    "gpu_type": pl.String,
    "features": pl.String,
    "node_host": pl.String,
}

NODE_GROUPS_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "group_no": pl.Int32,
    "partition": pl.String,
    "node_count": pl.Int32,
    "state": pl.String,
    "state_flags": pl.String,
    "state_raw": pl.String,
    "gres": pl.String,
    "gres_used": pl.String,
    "gpus_per_node": pl.Int32,
    "gpus_used_per_node": pl.Int32,
    "gpu_type": pl.String,
    "features": pl.String,
    "source": pl.String,
}


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live sinfo call (documented in docs/collectors.md)."""
    return [
        cfg.slurm_command("sinfo"),
        *cfg.slurm_cluster_args(),
        "--Node",
        "--noheader",
        f"--Format={LIVE_FORMAT}",
    ]


# ------------------------------------------------------------------------------------ node values

_STATE_WORD = re.compile(r"^[A-Za-z_]+$")
_DIGITS = re.compile(r"^[0-9]+$")  # not str.isdigit(): it accepts '²', which int() refuses


def parse_cpus_state(s: str | None) -> tuple[int | None, int | None, int | None, int | None]:
    """`A/I/O/T` (allocated/idle/other/total) CPU counts; Nones when absent or malformed."""
    if not s:
        return None, None, None, None
    parts = s.strip().split("/")
    if len(parts) != 4 or not all(_DIGITS.match(p) for p in parts):
        return None, None, None, None
    a, i, o, t = (int(p) for p in parts)
    return a, i, o, t


def _gres_gpus(s: str | None) -> tuple[int | None, str | None]:
    if s is None:
        return None, None
    s = s.strip()
    if s in NULL_WORDS:
        return 0, None
    gpus, gtype, _mig = gpu_count(s)
    return gpus, gtype


def _mem(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        v = parse_mem_mb(s)
    except ValueError:
        return None
    return None if v is None else int(v)


def _null(s: str | None) -> str | None:
    if s is None:
        return None
    s = s.strip()
    return None if s in NULL_WORDS else s


def _user(s: str | None) -> str | None:
    """`root(0)` -> `root`; sinfo prints `Unknown` when no one set a reason."""
    s = _null(s)
    if s is None:
        return None
    return re.sub(r"\(\d+\)$", "", s) or None


# sinfo -o letters and -O names that the node_states row uses; anything else is split and ignored.
LETTERS = {
    "n": "node_host",
    "N": "nodelist",
    "P": "partition",
    "R": "partition",
    "T": "state",
    "t": "state",
    "C": "cpus_state",
    "c": "cpus",
    "m": "memory",
    "e": "free_mem",
    "f": "features",
    "b": "features_act",
    "G": "gres",
    "E": "reason",
    "H": "reason_time",
    "u": "reason_user",
    "U": "reason_user",
    "D": "node_count",
}
LONG_NAMES = {
    "nodehost": "node_host",
    "nodelist": "nodelist",
    "partition": "partition",
    "partitionname": "partition",
    "statelong": "state",
    "statecompact": "state",
    "statecomplete": "state",
    "cpusstate": "cpus_state",
    "cpus": "cpus",
    "memory": "memory",
    "allocmem": "alloc_mem",
    "freemem": "free_mem",
    "gres": "gres",
    "gresused": "gres_used",
    "features": "features",
    "featuresact": "features_act",
    "reason": "reason",
    "user": "reason_user",
    "userlong": "reason_user",
    "timestamp": "reason_time",
    "nodes": "node_count",
}
FREE_TEXT = frozenset({"reason"})


def line_format(fmt: str | None, delimiter: str | None = None) -> LineFormat:
    """The LineFormat of `fmt` (None = the live format). Raises ValueError when it has no node column."""
    lf = parse_format(fmt or LIVE_FORMAT, LETTERS, LONG_NAMES, FREE_TEXT)
    if delimiter:
        lf = lf.with_delimiter(delimiter)
    names = set(lf.names)
    if not names & {"node_host", "nodelist", "node_count"}:
        raise ValueError(
            f"sinfo format {fmt!r} has neither node names (NodeList, %N) nor host names (NodeHost, %n) nor "
            "a node count (Nodes, %D): its lines cannot be tied to nodes (see docs/collectors.md, declined "
            "formats)"
        )
    if not names & {"node_host", "nodelist"} and not names & {"state", "gres", "gres_used"}:
        raise ValueError(
            f"sinfo format {fmt!r} has no node names and neither state nor GRES columns: nothing to store "
            "(see docs/collectors.md, declined formats)"
        )
    return lf


def _names(text: str) -> list[str]:
    """expand_hostlist, without its parser for the common case of one plain name (a line of `--Node`)."""
    plain = text.strip()
    if plain and not any(c in plain for c in "[],") and plain not in NULL_WORDS and plain != "None assigned":
        return [plain]
    return expand_hostlist(text)


def _one_host(text: str | None) -> str | None:
    """The host name a line prints (NodeHost, `%n`) when it names exactly one host, else None."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        hosts = _names(text)
    except ValueError:
        return None
    return hosts[0] if len(hosts) == 1 else None


def _rows_for(
    values: dict[str, str], snapshot_time: datetime, cluster: str, tz: ZoneInfo
) -> tuple[list[dict], str | None]:
    host = _one_host(values.get("node_host"))
    if "nodelist" in values:
        try:
            nodes = _names(values["nodelist"])
        except ValueError as exc:
            return [], str(exc)
    else:
        # No node names: the host stands in (HOST_ONLY_WARNING); a line for several nodes is never one.
        node = (values.get("node_host") or "").strip()
        nodes = [node] if node else []
        count = (values.get("node_count") or "").strip()
        if nodes and _DIGITS.match(count) and int(count) > 1:
            return [], f"one line for {count} nodes under the host name {node!r}: {CAPTURE_NODE_NAMES}"
    if not nodes:
        return [], "empty node name"
    partition = (values.get("partition") or "").strip()
    if partition in NULL_WORDS:
        partition = ""
    partition = partition.rstrip("*")
    state_raw = _null(values.get("state"))
    state, flags = parse_node_state(state_raw)
    if state is not None and not _STATE_WORD.match(state):
        return [], f"not a node state: {state_raw!r}"
    a, i, o, t = parse_cpus_state(values.get("cpus_state"))
    if values.get("cpus_state") is not None and t is None and values["cpus_state"].strip() not in NULL_WORDS:
        return [], f"not an A/I/O/T CPU count: {values['cpus_state']!r}"
    if len(nodes) > 1:
        # A line naming several nodes is a group (per partition and state, without --Node): its %C,
        # AllocMem and GresUsed are the group's totals, never one node's. Copying them to each node
        # multiplied a cluster's CPUs (issue 14); the per-node values are unknown, so NULL.
        a = i = o = t = None
        values = {k: v for k, v in values.items() if k not in ("alloc_mem", "gres_used", "free_mem")}
    if t is None and _DIGITS.match(values.get("cpus", "").strip()):
        t = int(values["cpus"].strip())
    try:
        reason_time = parse_slurm_time(values.get("reason_time"), tz)
    except ValueError as exc:
        return [], str(exc)
    gres = _null(values.get("gres")) if "gres" in values else None
    gres_used = _null(values.get("gres_used")) if "gres_used" in values else None
    gpus_total, gtype = _gres_gpus(values.get("gres"))
    gpus_used, utype = _gres_gpus(values.get("gres_used"))
    reason = _null(values.get("reason"))
    row = {
        "cluster": cluster,
        "snapshot_time": snapshot_time,
        "partition": partition,
        "state": state,
        "state_flags": flags,
        "state_raw": state_raw,
        "reason": reason,
        "reason_user": _user(values.get("reason_user")),
        "reason_time": reason_time,
        "cpus_alloc": a,
        "cpus_idle": i,
        "cpus_other": o,
        "cpus_total": t,
        "memory_mb": _mem(values.get("memory")),
        "alloc_memory_mb": _mem(values.get("alloc_mem")),
        "gres": gres if "gres" in values else None,
        "gres_used": gres_used,
        "gpus_total": gpus_total,
        "gpus_used": gpus_used,
        "gpu_type": gtype or utype,
        "features": _null(values.get("features")),
        "node_host": host,
    }
    problem = out_of_range(row, NODE_STATES_SCHEMA)
    if problem:
        return [], problem
    return [dict(row, node=n) for n in nodes], None


def _group_row(
    values: dict[str, str], group_no: int, snapshot_time: datetime, cluster: str, source: str
) -> tuple[dict | None, str | None]:
    count = (values.get("node_count") or "").strip()
    if not _DIGITS.match(count):
        return None, f"node count is not a number: {count!r}"
    partition = _null(values.get("partition")) or ""
    state_raw = _null(values.get("state"))
    state, flags = parse_node_state(state_raw)
    if state is not None and not _STATE_WORD.match(state):
        return None, f"not a node state: {state_raw!r}"
    gpn, gtype = _gres_gpus(values.get("gres"))
    used, utype = _gres_gpus(values.get("gres_used"))
    row = {
        "cluster": cluster,
        "snapshot_time": snapshot_time,
        "group_no": group_no,
        "partition": partition.rstrip("*"),
        "node_count": int(count),
        "state": state,
        "state_flags": flags,
        "state_raw": state_raw,
        "gres": _null(values.get("gres")),
        "gres_used": _null(values.get("gres_used")),
        "gpus_per_node": gpn,
        "gpus_used_per_node": used,
        "gpu_type": gtype or utype,
        "features": _null(values.get("features")) or _null(values.get("features_act")),
        "source": source or None,
    }
    problem = out_of_range(row, NODE_GROUPS_SCHEMA)
    return (None, problem) if problem else (row, None)


# Slurm's own layouts, read without --format (collectors/slurm_human.py; titles as Slurm 22.05 prints them,
# tests/fixtures/slurm-22.05/human). Left-justified columns named; the others are right-justified.
HUMAN_LAYOUTS = (
    Layout(
        "sinfo",
        ("PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"),
        frozenset({"PARTITION", "NODELIST"}),
    ),
    Layout(
        "sinfo -l",
        (
            "PARTITION",
            "AVAIL",
            "TIMELIMIT",
            "JOB_SIZE",
            "ROOT",
            "OVERSUBS",
            "GROUPS",
            "NODES",
            "STATE",
            "NODELIST",
        ),
        frozenset({"PARTITION", "NODELIST"}),
    ),
    Layout("sinfo -N", ("NODELIST", "NODES", "PARTITION", "STATE"), frozenset({"NODELIST", "STATE"})),
    Layout(
        "sinfo -N -l",
        (
            "NODELIST",
            "NODES",
            "PARTITION",
            "STATE",
            "CPUS",
            "S:C:T",
            "MEMORY",
            "TMP_DISK",
            "WEIGHT",
            "AVAIL_FE",
            "REASON",
        ),
        frozenset({"NODELIST", "CPUS", "REASON"}),
    ),
)
HUMAN_FIELDS = {
    "PARTITION": "partition",
    "NODELIST": "nodelist",
    "STATE": "state",
    "CPUS": "cpus",
    "MEMORY": "memory",
    "AVAIL_FE": "features",
    "REASON": "reason",
}
CAPTURE_INSTEAD = "`sinfo -N -l` or the live format (docs/collectors.md)"
HUMAN_REFUSED = {
    ("PARTITION", "AVAIL", "TIMELIMIT", "NODES(A/I/O/T)", "NODELIST"): (
        "`sinfo -s` output: node counts per partition, not node states; capture " + CAPTURE_INSTEAD
    ),
    ("REASON", "USER", "TIMESTAMP", "NODELIST"): (
        "`sinfo -R` output: only the nodes that have a reason, without CPUs or partitions; capture "
        + CAPTURE_INSTEAD
    ),
}
_HUMAN_IDS = frozenset({"NODELIST", "HOSTNAMES"})


def human_table(lines: list) -> tuple[Table | None, str | None]:
    """The recognised human layout of the non-blank `lines`, or why a title line is refused."""
    return find_table(lines, HUMAN_LAYOUTS, _HUMAN_IDS, HUMAN_REFUSED, CAPTURE_INSTEAD)


def snapshot_from(data: bytes, tz: ZoneInfo) -> datetime | None:
    """The snapshot time printed in the output itself: the date line of `sinfo -l` / `sinfo -N -l`."""
    lines = [line for line in split_lines(data[:4096]) if not is_blank(line[1])]
    table, _ = human_table(lines)
    return parse_date_line(table.date, tz) if table is not None else None


def check_input(data: bytes, fmt: str | None, delimiter: str | None) -> str | None:
    """Why `ingest` cannot read this input as asked (an unusable --format, a declined layout), or None."""
    if fmt is None and delimiter is None and slurm_json.is_json(data):
        return json_problem(data)
    if fmt is None and delimiter is None:
        _table, problem = human_table([line for line in split_lines(data) if not is_blank(line[1])])
        if problem:
            return problem
    try:
        line_format(fmt, delimiter)
    except ValueError as exc:
        return str(exc)
    return None


def _human_rows(lines: list, table: Table, cluster: str, snapshot_time: datetime, tz: ZoneInfo) -> Parsed:
    """node_states rows of a human layout: one per node of each line's NODELIST.

    A grouped line (`sinfo`, `sinfo -l`: nodes of one partition in one state) gives each node that state,
    which is exact; those layouts print no per-node counts to copy. A partition name that fills a
    right-justified column may be cut, so its line is quarantined; a reason cut at its column's width
    (`sinfo -N -l` prints 20 characters) is stored as printed with "…" appended.
    """
    rows: list[dict] = []
    bad: list[dict] = []
    for line_no, text, raw in lines:
        if line_no <= table.header_no:
            continue
        values, cut, reason = split_row(text, table)
        new: list[dict] = []
        if values is not None:
            part = values.get("PARTITION")
            if part is not None and "PARTITION" in cut:
                reason = f"partition {part!r} fills its column: {table.layout.command!r} may have cut it"
            else:
                v = {HUMAN_FIELDS[t]: x for t, x in values.items() if t in HUMAN_FIELDS}
                if v.get("reason") and "REASON" in cut:
                    v["reason"] += "…"
                new, reason = _rows_for(v, snapshot_time, cluster, tz)
                count = values.get("NODES", "")
                if reason is None and "NODES" in values and count != str(len(new)):
                    new, reason = [], f"NODES says {count} but NODELIST names {len(new)}"
        if reason is None:
            rows.extend(new)
            continue
        bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"sinfo: {reason}"})
    df = (
        pl.DataFrame(rows, schema=NODE_STATES_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=NODE_STATES_SCHEMA)
    )
    df = df.unique(subset=["node", "partition"], keep="last", maintain_order=True)
    return Parsed(tables={"node_states": df}, quarantine=quarantine_frame(bad))


_CONTROL = r"[\x1c-\x1f]"  # separators Python's str.strip() removes and Polars' strip_chars() keeps


def _per_value(df: pl.DataFrame, col: str, fn) -> tuple[dict, set]:
    """fn applied once per distinct value of a column: ({value: result}, {values where fn raised})."""
    out: dict = {}
    bad: set = set()
    for v in df[col].unique().to_list():
        try:
            out[v] = fn(v)
        except ValueError:
            bad.add(v)
    return out, bad


def _fits32(*values: int | None) -> bool:
    return all(v is None or -(2**31) <= v < 2**31 for v in values)


def _vector_node_rows(
    df: pl.DataFrame, cluster: str, snapshot_time: datetime, tz: ZoneInfo
) -> tuple[pl.DataFrame, list[int]]:
    """node_states rows of split lines, converting each distinct value once with the per-line rules.

    Returns the rows (with line_no) and the line numbers that need the per-line path (a value that
    fails a rule, or a control character on which the two strip() flavours disagree).
    """
    names = set(df.columns)
    odd = pl.any_horizontal([pl.col(c).str.contains(_CONTROL) for c in df.columns if c != "line_no"])
    slow = df.filter(odd)["line_no"].to_list()
    df = df.filter(~odd)

    def node(v: str) -> str:
        nodes = _names(v)
        if len(nodes) != 1:
            raise ValueError("not one node name")  # a hostlist (or none): the per-line path expands it
        return nodes[0]

    def partition(v: str | None) -> str:
        v = (v or "").strip()
        return ("" if v in NULL_WORDS else v).rstrip("*")

    def state(v: str | None) -> tuple:
        raw = _null(v)
        st, flags = parse_node_state(raw)
        if st is not None and not _STATE_WORD.match(st):
            raise ValueError("not a node state")
        return raw, st, flags

    def cpus_state(v: str | None) -> tuple:
        a, i, o, t = parse_cpus_state(v)
        if v is not None and t is None and v.strip() not in NULL_WORDS:
            raise ValueError("not an A/I/O/T CPU count")
        if not _fits32(a, i, o, t):
            raise ValueError("out of range")
        return a, i, o, t

    def cpus(v: str | None) -> int | None:
        n = int(v.strip()) if v is not None and _DIGITS.match(v.strip()) else None
        if not _fits32(n):
            raise ValueError("out of range")
        return n

    def gres(v: str | None) -> tuple:
        g, gtype = _gres_gpus(v)
        if not _fits32(g):
            raise ValueError("out of range")
        return _null(v), g, gtype

    def mem(v: str | None) -> int | None:
        m = _mem(v)
        if m is not None and not -(2**63) <= m < 2**63:
            raise ValueError("out of range")
        return m

    rules = {
        "nodelist": node,
        "node_host": _one_host,
        "partition": partition,
        "state": state,
        "cpus_state": cpus_state,
        "cpus": cpus,
        "memory": mem,
        "alloc_mem": mem,
        "gres": gres,
        "gres_used": gres,
        "reason": _null,
        "reason_user": _user,
        "features": _null,
        "reason_time": lambda v: parse_slurm_time(v, tz),
    }
    maps: dict[str, dict] = {}
    bad_rows = pl.lit(False)
    for col, fn in rules.items():
        if col in names:
            maps[col], bad = _per_value(df, col, fn)
            if bad:
                bad_rows = bad_rows | pl.col(col).is_in(list(bad))
    slow += df.filter(bad_rows)["line_no"].to_list()
    df = df.filter(~bad_rows)

    def get(col: str, pick=lambda r: r, dtype=pl.String, default=None) -> pl.Expr:
        if col not in maps:
            return pl.lit(default, dtype)
        mapping = {k: pick(v) for k, v in maps[col].items()}
        return pl.col(col).replace_strict(mapping, default=None, return_dtype=dtype)

    total = get("cpus_state", lambda r: r[3], pl.Int64)
    if "cpus" in maps:
        total = pl.when(total.is_null()).then(get("cpus", dtype=pl.Int64)).otherwise(total)
    gres_present = "gres" in maps
    out = df.select(
        "line_no",
        cluster=pl.lit(cluster),
        snapshot_time=pl.lit(snapshot_time),
        node=get("nodelist"),
        partition=get("partition", default=""),
        state=get("state", lambda r: r[1]),
        state_flags=get("state", lambda r: r[2]),
        state_raw=get("state", lambda r: r[0]),
        reason=get("reason"),
        reason_user=get("reason_user"),
        reason_time=get("reason_time", dtype=pl.Datetime("us", "UTC")),
        cpus_alloc=get("cpus_state", lambda r: r[0], pl.Int64),
        cpus_idle=get("cpus_state", lambda r: r[1], pl.Int64),
        cpus_other=get("cpus_state", lambda r: r[2], pl.Int64),
        cpus_total=total,
        memory_mb=get("memory", dtype=pl.Int64),
        alloc_memory_mb=get("alloc_mem", dtype=pl.Int64),
        gres=get("gres", lambda r: r[0]) if gres_present else pl.lit(None, pl.String),
        gres_used=get("gres_used", lambda r: r[0]),
        gpus_total=get("gres", lambda r: r[1], pl.Int64),
        gpus_used=get("gres_used", lambda r: r[1], pl.Int64),
        gpu_type=pl.coalesce(get("gres", lambda r: r[2]), get("gres_used", lambda r: r[2])),
        features=get("features"),
        node_host=get("node_host"),
    )
    out = out.select("line_no", *[pl.col(c).cast(t) for c, t in NODE_STATES_SCHEMA.items()])
    return out, slow


def parse(
    data: bytes,
    *,
    cluster: str,
    snapshot_time: datetime,
    tz: ZoneInfo,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
) -> Parsed:
    """sinfo output -> node_states rows (node-oriented formats) or node_groups rows (aggregated ones).

    Lines that do not fit the format go to quarantine; a first line of column titles is skipped. Slurm's
    JSON of the nodes is read as `parse_stream` reads it.
    Raises ValueError only for a format string that cannot describe nodes (never for the data).
    """
    if fmt is None and delimiter is None and slurm_json.is_json(data[:4096]):
        out = parse_stream(io.BytesIO(data), cluster=cluster, snapshot_time=snapshot_time, tz=tz)
        if out.tables:
            return out
        return Parsed(tables={}, quarantine=slurm_json.every_line(data, out.quarantine["reason"][0]))
    return _parse(
        data,
        cluster=cluster,
        snapshot_time=snapshot_time,
        tz=tz,
        fmt=fmt,
        delimiter=delimiter,
        source=source,
        vectorise=True,
    )


def _parse(
    data: bytes,
    *,
    cluster: str,
    snapshot_time: datetime,
    tz: ZoneInfo,
    fmt: str | None,
    delimiter: str | None,
    source: str,
    vectorise: bool,
) -> Parsed:
    """Node-per-line formats with one repeated separator (the live one) are split and typed per column
    and distinct value; hostlists, aggregated formats and odd lines take the per-line path."""
    lines = [line for line in split_lines(data) if not is_blank(line[1])]
    if fmt is None and delimiter is None:
        table, _problem = human_table(lines)
        if table is not None:
            return _human_rows(lines, table, cluster, snapshot_time, tz)
    if fmt is None and delimiter is None:
        fmt = _live_or_previous(lines)
    lf = line_format(fmt, delimiter)
    per_node = bool(set(lf.names) & {"node_host", "nodelist"})
    host_only = per_node and "nodelist" not in lf.names
    id_cols = ("node_host", "nodelist") if per_node else ("node_count",)
    if lines:
        values, _reason = split_line(lines[0][1], lf)
        if values is not None and is_header(values, id_cols):
            lines = lines[1:]
    frames: list[pl.DataFrame] = []
    slow = lines
    shared: dict[int, str] = {}
    if host_only:
        slow, shared = _shared_hosts(lines, lf)
    if vectorise and per_node and not host_only:
        frames, slow = fast_path(
            lines, lf, lambda split: _vector_node_rows(split, cluster, snapshot_time, tz)
        )
    rows: list[dict] = []
    groups: list[dict] = []
    bad: list[dict] = []
    for line_no, text, raw in slow:
        values, reason = split_line(text, lf)
        if values is not None:
            if per_node:
                new, reason = _rows_for(values, snapshot_time, cluster, tz)
                if reason is None:
                    rows.extend({"line_no": line_no, **r} for r in new)
                    continue
            else:
                group, reason = _group_row(values, line_no, snapshot_time, cluster, source)
                if group is not None:
                    groups.append(group)
                    continue
        bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"sinfo: {reason}"})
    warnings: list[str] = []
    if host_only and lines:
        warnings.append(HOST_ONLY_WARNING)
        for line_no, text, raw in lines:
            if line_no in shared:
                bad.append(
                    {
                        "line_no": line_no,
                        "raw_text": text,
                        "raw_bytes": raw,
                        "reason": f"sinfo: {shared[line_no]}",
                    }
                )
        bad.sort(key=lambda b: b["line_no"])
    tables: dict[str, pl.DataFrame] = {}
    if per_node:
        schema = {"line_no": pl.Int64, **NODE_STATES_SCHEMA}
        frames.append(
            pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
        )
        tables["node_states"] = (
            pl.concat(frames)
            .sort("line_no", maintain_order=True)
            .unique(subset=["node", "partition"], keep="last", maintain_order=True)  # a repeated line wins
            .drop("line_no")
        )
    else:
        tables["node_groups"] = (
            pl.DataFrame(groups, schema=NODE_GROUPS_SCHEMA, orient="row")
            if groups
            else pl.DataFrame(schema=NODE_GROUPS_SCHEMA)
        )
    return Parsed(tables=tables, quarantine=quarantine_frame(bad), warnings=warnings)


def _live_or_previous(lines: list) -> str:
    """The live format, or the one before 0017 when most lines have its field count (captures recorded
    with the command line documented before, simulator output of an older version)."""
    count = len(LIVE_FIELDS)  # separators in a line of the live format; the previous one has one fewer
    sample = [line[1].count(US) for line in lines[:200]]
    previous = sum(n == count - 1 for n in sample)
    return PREVIOUS_LIVE_FORMAT if previous > sum(n == count for n in sample) else LIVE_FORMAT


CAPTURE_NODE_NAMES = (
    "nodes that share a host name cannot be told apart without node names; capture with %N (-o) or NodeList "
    "(-O), e.g. the live format (docs/collectors.md)"
)
HOST_ONLY_WARNING = (
    "node names taken from host names: the format has %n/NodeHost but no %N/NodeList, which is right only where "
    "every node has its own host name (slurm.conf NodeHostname); lines that show one host for several nodes "
    "are quarantined, never merged; capture %N/NodeList to be sure"
)


# Values of the node itself, the same on each of its partitions' lines (the others describe the partition).
NODE_VALUES = frozenset(
    {
        "state",
        "cpus_state",
        "cpus",
        "memory",
        "alloc_mem",
        "free_mem",
        "gres",
        "gres_used",
        "features",
        "features_act",
        "reason",
        "reason_user",
        "reason_time",
    }
)


def _shared_hosts(lines: list, lf: LineFormat) -> tuple[list, dict[int, str]]:
    """The lines of a host-only format (no node names) that can be one node each, and why the others cannot.

    `sinfo -N` prints a node once per partition, and without `-N` sinfo groups the nodes that share a host
    (Slurm 22.05 src/sinfo/sinfo.c `_match_node_data`): one host on two lines of one partition is two nodes,
    and so are lines of one host whose node values differ (a node has one state whatever the partition).
    Those lines are quarantined with the reason, all of them: keeping any would store several nodes as
    one (issue 14). Identical lines of one host without a partition column stay one row: a node in several
    partitions prints the same line for each, and HOST_ONLY_WARNING says what cannot be told apart.
    """
    groups: dict[str, list[tuple[int, dict]]] = {}
    for line_no, text, _raw in lines:
        values, _reason = split_line(text, lf)
        host = (values or {}).get("node_host", "").strip()
        if host:
            groups.setdefault(host, []).append((line_no, values))
    shared: dict[int, str] = {}
    for host, group in groups.items():
        if len(group) < 2:
            continue
        why = None
        if "partition" in lf.names:
            parts = [(v.get("partition") or "").strip().rstrip("*") for _, v in group]
            twice = sorted({p for p in parts if parts.count(p) > 1})
            if twice:
                why = f"host name {host!r} is printed on {parts.count(twice[0])} lines of partition {twice[0]!r}"
        nodes = {
            tuple(sorted((k, v.strip()) for k, v in vals.items() if k in NODE_VALUES)) for _, vals in group
        }
        if why is None and len(nodes) > 1:
            why = f"host name {host!r} is printed with different node values on {len(group)} lines"
        if why is not None:
            shared.update((line_no, f"{why}: {CAPTURE_NODE_NAMES}") for line_no, _ in group)
    return [line for line in lines if line[0] not in shared], shared


# ------------------------------------------------------------------------------------------- JSON

# The node state flags in the order StateComplete prints them (`node_state_flags[]` in Slurm's
# src/common/slurm_protocol_defs.c: 22.05.8, plus BLOCKED and EXTERNAL of 25.11.0); the data parser lists
# them in another order (src/plugins/data_parser/v0.0.41/parsers.c, NODE_STATES), so a JSON state is put
# in this one to give the text's `state_raw` and `state_flags`. Flags missing here keep their JSON order.
NODE_FLAG_ORDER = (
    "BLOCKED",
    "CLOUD",
    "COMPLETING",
    "DRAIN",
    "DYNAMIC_FUTURE",
    "DYNAMIC_NORM",
    "EXTERNAL",
    "INVALID_REG",
    "FAIL",
    "MAINTENANCE",
    "POWER_DOWN",
    "POWER_UP",
    "PERFCTRS",
    "POWERED_DOWN",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
    "RESERVED",
    "RESUME",
    "NOT_RESPONDING",
    "PLANNED",
    "POWERING_UP",
    "POWERING_DOWN",
)
NODE_BASE_STATES = frozenset({"DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN", "INVALID"})
JSON_CAPTURE = "`scontrol show nodes --json`, slurmrestd /slurm/<version>/nodes, or the live text format"
# JSON's `name` is the node (NodeName, what %N/NodeList prints) and `hostname` its host (node_states.node_host).
NODE_HOST = "node_host"


def _json_state(node: dict) -> tuple[str, list[str]]:
    """(base state, flags) of a JSON node: v0.0.38 `state` + `state_flags`, v0.0.40+ one `state` list."""
    st = node.get("state")
    if isinstance(st, str):
        base, flags = st.upper(), [f for f in node.get("state_flags") or [] if isinstance(f, str)]
    else:
        words = [w.upper() for w in st or [] if isinstance(w, str)]
        base = next((w for w in words if w in NODE_BASE_STATES), "UNKNOWN")
        flags = [w for w in words if w != base]
    known = [f for f in NODE_FLAG_ORDER if f in flags]
    return base, known + [f for f in flags if f not in NODE_FLAG_ORDER]


def _json_text(v) -> str:
    if isinstance(v, list):  # v0.0.40+ features
        return ",".join(str(x) for x in v)
    return "" if v is None else str(v)


def json_values(node: dict) -> list[dict[str, str]]:
    """The values `sinfo --Node --Format=<live>` prints for one JSON node, one dict per partition.

    - StateComplete is the base state and each flag, `+`-joined in lower case (Slurm's
      node_state_string_complete). The openapi/v0.0.3x plugins (Slurm 20.11 to 23.02, `state` a string)
      come from a slurmctld query with SHOW_MIXED, which turns a partly allocated node MIXED even while it
      drains; sinfo of those releases skipped that for draining nodes (src/sinfo/sinfo.c `_query_server`,
      22.05.8: "don't worry about mixed since the whole node is being drained"), so `mixed` + DRAIN is
      printed `allocated+drain` there. sinfo uses SHOW_MIXED itself from 23.11 (SchedMD commit 2fc502e0dc,
      "Prune redundant logic and use SHOW_MIXED"), which is what v0.0.40+ documents show.
    - CPUsState `A/I/O/T`: total is `cpus`, allocated `alloc_cpus`; the rest is other on a DRAIN or DOWN
      node and idle otherwise (src/sinfo/sinfo.c `_update_sinfo`, the same rule in 22.05.8 and 25.11.0).
    - Memory `real_memory`, AllocMem `alloc_memory`, Gres/GresUsed as printed, Features the configured
      `features` (a list from v0.0.40), UserLong `reason_set_by_user`, Timestamp `reason_changed_at`.
    - A node in no partition prints no line (sinfo lists the nodes of partitions).
    """
    name = node.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("node without a name")
    base, flags = _json_state(node)
    if isinstance(node.get("state"), str) and base == "MIXED" and "DRAIN" in flags:
        base = "ALLOCATED"
    state = "+".join([base.lower(), *(f.lower() for f in flags)])
    total = slurm_json.num(node.get("cpus"))
    alloc = slurm_json.num(node.get("alloc_cpus")) or 0
    if total is None:
        cpus_state = ""
    else:
        rest = int(total) - int(alloc)
        other = "DRAIN" in flags or base == "DOWN"
        cpus_state = f"{int(alloc)}/{0 if other else rest}/{rest if other else 0}/{int(total)}"
    mem, alloc_mem = slurm_json.num(node.get("real_memory")), slurm_json.num(node.get("alloc_memory"))
    values = {
        "nodelist": name,
        NODE_HOST: _json_text(node.get("hostname")),
        "state": state,
        "cpus_state": cpus_state,
        "memory": "" if mem is None else str(int(mem)),
        "alloc_mem": "" if alloc_mem is None else str(int(alloc_mem)),
        "gres": _json_text(node.get("gres")),
        "gres_used": _json_text(node.get("gres_used")),
        "features": _json_text(node.get("features")),
        "reason_user": _json_text(node.get("reason_set_by_user")) or "Unknown",
        "reason_time": slurm_json.epoch_text(node.get("reason_changed_at")),
        "reason": _json_text(node.get("reason")),
    }
    parts = [p for p in node.get("partitions") or [] if isinstance(p, str) and p]
    return [dict(values, partition=p) for p in parts]


def json_problem(head: bytes) -> str | None:
    """Why a JSON input cannot be read as nodes (a declined version, 23.02+ `sinfo --json`), or None."""
    if re.search(rb'"sinfo"\s*:\s*\[', head):
        return (
            "`sinfo --json` of Slurm 23.02 and later prints partition and state groups (member `sinfo`), "
            f"not nodes, and no real capture of it has been checked; capture {JSON_CAPTURE}"
        )
    return slurm_json.check_version(slurm_json.sniff_version(head), slurm_json.READ_NODES, JSON_CAPTURE)


def streams(head: bytes, fmt: str | None = None, delimiter: str | None = None) -> bool:
    """True for input that `parse_stream` reads from an open file instead of whole bytes: JSON, unless a
    --format says the file is text (a `-o` format may print lines that start with `{`)."""
    return fmt is None and delimiter is None and slurm_json.is_json(head)


def parse_stream(
    fh: IO[bytes],
    *,
    cluster: str,
    snapshot_time: datetime,
    tz: ZoneInfo | None = None,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
) -> Parsed:
    """Slurm's JSON of the nodes -> the node_states rows the live text of the same moment gives.

    Each node's values (`json_values`) are typed by the text path's `_rows_for`; times are epoch seconds,
    so `tz` does not apply. A declined version or input that is not a nodes document quarantines one
    line saying why; a malformed node is quarantined alone (line_no = its place in the array).
    """

    def convert(node: dict) -> list[dict]:
        rows = []
        for values in json_values(node):
            new, reason = _rows_for(values, snapshot_time, cluster, UTC)
            if reason is not None:
                raise ValueError(reason)
            rows += new
        return rows

    got = slurm_json.read_array(
        fh,
        "nodes",
        convert,
        NODE_STATES_SCHEMA,
        read=slurm_json.READ_NODES,
        capture=JSON_CAPTURE,
        what="sinfo",
    )
    problem = got.problem
    if problem is None and not got.found:
        problem = "Slurm JSON without a `nodes` array: not the nodes of sinfo or slurmrestd"
    if problem is not None:
        bad = [{"line_no": 1, "raw_text": "", "raw_bytes": None, "reason": f"sinfo: {problem}"}]
        return Parsed(tables={}, quarantine=quarantine_frame(bad))
    df = got.rows(NODE_STATES_SCHEMA).unique(subset=["node", "partition"], keep="last", maintain_order=True)
    return Parsed(tables={"node_states": df}, quarantine=quarantine_frame(got.bad))


def capacity(node_states: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Per snapshot: distinct nodes, and GPUs/CPUs counted once per node however many partitions list it.

    A node in three partitions appears three times in `sinfo -N`; summing gpus_total over rows would
    triple its GPUs. The first row per (snapshot, node) is used (all of a node's rows carry the same
    hardware counts).
    """
    lf = node_states.lazy() if isinstance(node_states, pl.DataFrame) else node_states
    per_node = lf.group_by(["cluster", "snapshot_time", "node"]).agg(
        pl.col("gpus_total").max(),
        pl.col("gpus_used").max(),
        pl.col("cpus_total").max(),
        pl.col("cpus_alloc").max(),
    )
    return (
        per_node.group_by(["cluster", "snapshot_time"])
        .agg(
            pl.len().alias("nodes"),
            pl.col("gpus_total").sum().alias("gpus_total"),
            pl.col("gpus_used").sum().alias("gpus_used"),
            pl.col("cpus_total").sum().alias("cpus_total"),
            pl.col("cpus_alloc").sum().alias("cpus_alloc"),
        )
        .sort(["cluster", "snapshot_time"])
        .collect()
    )
