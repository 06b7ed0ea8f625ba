"""Fuzz every parser with hypothesis: at least 10^5 inputs per parser, each one accounted for.

    nice -n 10 .venv/bin/python -m tests.fuzz.fuzz_parsers [--inputs 100000] [--only sacct,sinfo]
        [--json results.json]

Two kinds of hypothesis example, mixed:

* whole inputs (arbitrary bytes, Slurm-shaped token soup, soup under a sacct header): parse() must return
  (no exception escapes) and, when any non-blank data line exists, keep or quarantine something. One
  example = one input.
* line batches: a fixed prefix (the parser's header or section line, where it has one) and 1-40 generated
  lines, Slurm-shaped (the parser's field count and separator, realistic or junk values) or junk. The batch
  is parsed once, and then every line is parsed again alone (prefix + that line). Per line:
  - a quarantine entry names it at most once, with a reason and its text (and bytes when not UTF-8);
  - alone, it gives a quarantine entry, or rows, or neither; neither is allowed only for lines the parser
    documents as consumed (`consumed_ok`: a dashed rule, a counter kept in sdiag's raw_text, ...), any
    other such line is a silent drop and a failure;
  - in the batch it has exactly the outcome it has alone: the same quarantine reason, or exactly the same
    rows (compared column by column, by natural key). So its outcome does not depend on its neighbours.
  Lines whose outcome legitimately depends on other lines are counted as dependent, not as inputs:
  two lines giving the same natural key (the parser collapses them), a line after a context line (a
  config section header, an sdiag section title: `context`), a sacct step whose job line is in the batch.
  Columns documented as derived from other lines (sshare's parent, sdiag's raw_text) are not compared.
  Every row in the batch must come from some line's rows alone (nothing from nowhere).
  A verified independent line counts as one input.

Failures are recorded (first few with the input) and the run goes on. Not part of CI, which runs the
~2,000-example property tests in each parser's test file.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

SNAP = datetime(2026, 11, 1, tzinfo=timezone.utc)
US = "\x1f"
SACCT_HEADER = "JobID|JobIDRaw|Partition|Account|User|Submit|Start|End|Elapsed|State|ExitCode|NCPUS|AllocTRES|NodeList|JobName"
TOKENS = [
    "|",
    "||",
    "\n",
    "\r\n",
    "gpu[001-004,010]",
    "Unknown",
    "None",
    "(null)",
    "CANCELLED by 0",
    "2026-03-08T02:30:00",
    "1-00:00:00",
    "UNLIMITED",
    "gres/gpu:h100=8,gres/gpu=8",
    "123_[5-9%2]",
    "123+0",
    "mixed+drain*",
    "\x1f",
    "\x00",
    "\xff",
    "-1",
    "99999999999999999999",
    "NODE_FAIL",
    "Partition_Limit",
    "billing=16",
    "  ",
    "parent",
    "\u2603",
]
LINE_TOKENS = [t for t in TOKENS if "\n" not in t] + ["\r", "\x1c", "\x0c", "=", ":", " = ", "(", ")"]
REAL = [
    "0",
    "1",
    "8",
    "42",
    "123",
    "4294967295",
    "9223372036854775807",
    "-5",
    "1.5",
    "inf",
    "nan",
    "",
    "2026-03-08T02:30:00",
    "2026-11-01T23:59:59",
    "1970-01-01T00:00:00",
    "2100-01-01T00:00:00",
    "2026-03-29T02:30:00",
    "Unknown",
    "None",
    "N/A",
    "00:05:00",
    "1-00:00:00",
    "10:00",
    "INVALID",
    "RUNNING",
    "PENDING",
    "COMPLETED",
    "CANCELLED by 0",
    "FAILED",
    "NODE_FAIL",
    "idle",
    "mix",
    "alloc",
    "drain*",
    "mixed+drain",
    "down~",
    "gpu001",
    "gpu[001-004,010]",
    "gpu[001-1000000]",
    "n[1-2]",
    "gres/gpu:h100=8,gres/gpu=8",
    "gpu:h100:4(IDX:0-3)",
    "gpu:4",
    "billing=16,cpu=8,gres/gpu=2",
    "123_[5-9%2]",
    "123_7",
    "123+0",
    "123.batch",
    "123.0",
    "0:0",
    "1:0",
    "0:15",
    "32/0/0/32",
    "alice",
    "alice(1000)",
    "(Priority)",
    "(Resources)",
    "normal",
    "gpu",
    "batch",
]
BLANK = b" \t\r\n\x0b\x0c"


def junk(rnd: random.Random) -> bytes:
    """One field value or fragment, never containing a newline: a realistic value, a Slurm token,
    random text across the Unicode planes (control characters included), or random bytes."""
    k = rnd.random()
    if k < 0.3:
        return rnd.choice(REAL).encode()
    if k < 0.55:
        return rnd.choice(LINE_TOKENS).encode("utf-8", "surrogatepass")
    if k < 0.85:
        out = []
        for _ in range(rnd.randint(0, 10)):
            r = rnd.random()
            c = (
                rnd.randint(0x20, 0x7E)
                if r < 0.5
                else rnd.randint(0, 0x1F)
                if r < 0.65
                else rnd.randint(0x80, 0x7FF)
                if r < 0.8
                else rnd.randint(0x800, 0xFFFF)
                if r < 0.9
                else rnd.randint(0x10000, 0x10FFFF)
            )
            out.append(" " if c == 10 else chr(c))
        return "".join(out).encode("utf-8", "surrogatepass")
    return bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 6))).replace(b"\n", b"")


def shaped_line(delim: str, n: int):
    """About `n` junk fields joined by `delim` (mostly exactly n: the parser's own shape)."""
    sep = delim.encode()

    def gen(rnd: random.Random) -> bytes:
        count = n if rnd.random() < 0.75 else rnd.choice([max(n - 1, 1), n + 1])
        return sep.join(junk(rnd) for _ in range(count))

    return gen


TIMES = [
    "2026-03-08T02:30:00",
    "2026-11-01T23:59:59",
    "1970-01-01T00:00:00",
    "2100-01-01T00:00:00",
    "2026-03-29T02:30:00",
    "2026-10-25T01:30:00",
    "Unknown",
    "None",
    "",
    "N/A",
    "2026-02-30T00:00:00",
]
POOLS = {
    "id": ["123", "124", "7", "123_7", "123_[5-9%2]", "123+0", "123+1", "123.batch", "123.0", "0", ""],
    "task": ["7", "[5-9%2]", "", "N/A"],
    "rawid": ["123", "124", "125", "7", "0", "", "N/A", "123.batch", "123.0"],
    "time": TIMES,
    "dur": [
        "00:05:00",
        "1-00:00:00",
        "10:00",
        "5",
        "UNLIMITED",
        "Partition_Limit",
        "INVALID",
        "-00:01:00",
        "",
        "9999999999999999:00:00",
        "99999999999999999999",
    ],
    "state": [
        "RUNNING",
        "PENDING",
        "COMPLETED",
        "CANCELLED by 0",
        "FAILED",
        "NODE_FAIL",
        "idle",
        "mix",
        "alloc",
        "drain*",
        "mixed+drain",
        "down~",
        "PD",
        "R",
        "Allocated",
        "",
    ],
    "cpus_state": ["32/0/0/32", "0/64/0/64", "1/2/3", ""],
    "int": ["0", "1", "8", "64", "2147483648", "4294967295", "9223372036854775807", "-5", "", "N/A", "1.5"],
    "float": ["0.5", "1.000000", "0.000000", "inf", "nan", "", "1e308", "-0.1"],
    "tres": [
        "gres/gpu:h100=8,gres/gpu=8",
        "gpu:h100:4(IDX:0-3)",
        "gpu:4",
        "billing=16,cpu=8,gres/gpu=2",
        "(null)",
        "",
        "gres/gpu=99999999999",
        "gpu:a100:2(S:0-1)",
    ],
    "node": ["gpu001", "gpu[001-004,010]", "n[1-2]", "gpu[0001-2000]", "", "None assigned"],
    "exit": ["0:0", "1:0", "0:15", ""],
    "word": [
        "alice",
        "alice(1000)",
        "(Priority)",
        "(Resources)",
        "normal",
        "gpu",
        "batch",
        "root",
        "a|b",
        "",
        "(null)",
        "Not responding",
        "train job",
    ],
}


def pool_for(name: str) -> list[str]:
    """Realistic values (good and bad) for a column, chosen by its name."""
    n = name.lower()
    if n == "cpus_state":
        return POOLS["cpus_state"]
    if n == "array_task_id":
        return POOLS["task"]
    if n in ("jobidraw", "job_id_raw", "array_job_id"):
        return POOLS["rawid"]
    if "jobid" in n or n == "job_id":
        return POOLS["id"]
    if "time" in n or n in ("submit", "start", "end"):
        return POOLS["time"]
    if n in ("elapsed", "timelimit"):
        return POOLS["dur"]
    if "state" in n:
        return POOLS["state"]
    if "exit" in n:
        return POOLS["exit"]
    if "tres" in n or "gres" in n:
        return POOLS["tres"]
    if "node" in n and n != "nodes":
        return POOLS["node"]
    if n in ("ncpus", "cpus", "nodes", "priority", "memory", "alloc_mem", "rawshares", "node_count"):
        return POOLS["int"]
    if "usage" in n or "share" in n or "levelfs" in n:
        return POOLS["float"]
    return POOLS["word"]


def column_line(delim: str, names: list[str]):
    """A line in the parser's own shape: each column a realistic value for it (good or bad), and in half
    the lines one column replaced by junk."""
    sep, pools = delim.encode(), [[v.encode() for v in pool_for(n)] for n in names]

    def gen(rnd: random.Random) -> bytes:
        parts = [rnd.choice(p) for p in pools]
        if rnd.random() < 0.5:
            parts[rnd.randrange(len(parts))] = junk(rnd)
        return sep.join(parts)

    return gen


def soup_line(rnd: random.Random) -> bytes:
    return b"".join(junk(rnd) for _ in range(rnd.randint(0, 12)))


def kv_line(labels: list[str], sep: str):
    """`label<sep>value`, the label mostly a real one."""
    seps = sep.encode()

    def gen(rnd: random.Random) -> bytes:
        label = rnd.choice(labels).encode() if rnd.random() < 0.7 else junk(rnd)
        return label + seps + junk(rnd)

    return gen


slurmish = st.lists(st.sampled_from(TOKENS) | st.text(max_size=12), max_size=40).map(
    lambda t: "".join(t).encode("utf-8", "surrogatepass")
)


@dataclass
class Spec:
    prefix: bytes = b""
    lines: tuple = (soup_line,)  # line generators (Random -> bytes), picked uniformly
    context: object = None  # line text -> True when it changes how later lines are read
    consumed_ok: object = None  # (text, solo Parsed) -> True when a line may give neither row nor quarantine
    ignore: frozenset = frozenset()  # columns derived from other lines, not compared
    units: object = None  # Parsed -> {key: row}; default: every table's rows by natural key
    context_reaches_back: bool = False  # a context line also changes the record it continues (above it)
    record_start: object = (
        None  # line text -> True for the first line of a record (with context_reaches_back)
    )
    solo_sample: int | None = None  # re-parse only this many lines per batch alone (None: every line)
    raw_key: object = None  # line text -> the fields its natural key comes from (with solo_sample)


def _sdiag_units(parsed) -> dict:
    out = {}
    df = parsed.tables.get("sched_stats")
    for row in df.iter_rows(named=True) if df is not None else ():
        for col, value in row.items():
            if col not in ("cluster", "snapshot_time", "raw_text") and value is not None:
                out[("sched_stats", col)] = (_norm(value),)
    return out


def parsers() -> dict:
    """kind -> module of every registered collector that parses Slurm text (not the NVML spool).

    Imported on call, not at import: fuzz_atheris.py imports this file before it instruments the parsers.
    """
    from slurmscope.collectors.registry import COLLECTORS

    return {c.kind: c.module for c in COLLECTORS if c.ingestable and not c.spool}


def specs() -> dict[str, Spec]:
    from slurmscope.collectors import events, reservations, sdiag, sinfo, squeue, sshare
    from slurmscope.collectors import slurm_config as config

    sinfo_names = sinfo.line_format(None).names
    squeue_names = squeue.line_format(None).names
    sdiag_labels = [*sdiag._HEADER_FIELDS, *sdiag._MAIN_FIELDS, *sdiag._BF_FIELDS, "last cycle when"]
    roles = [
        b"Slurmctld(primary)",
        b"Slurmctld(backup)",
        b"Slurmctld(backup1)",
        b"Slurmctld(primary[2])",
        b"slurmctld(Primary)",
        b"Slurmctld()",
        b"Slurmdbd(primary)",
    ]
    states = [b"UP", b"DOWN", b"up", b"Down", b"UNKNOWN", b"UP junk", b""]

    def ping_line(rnd: random.Random) -> bytes:
        return rnd.choice(roles) + b" at " + junk(rnd) + b" is " + rnd.choice(states)

    res_keys = [
        k.encode()
        for k in (
            "StartTime",
            "EndTime",
            "Duration",
            "Nodes",
            "NodeCnt",
            "CoreCnt",
            "Features",
            "PartitionName",
            "Flags",
            "TRES",
            "Users",
            "Groups",
            "Accounts",
            "Licenses",
            "State",
            "BurstBuffer",
            "Watts",
            "MaxStartDelay",
        )
    ]

    def res_line(rnd: random.Random) -> bytes:
        pairs = [
            (rnd.choice(res_keys) if rnd.random() < 0.85 else junk(rnd)) + b"=" + junk(rnd)
            for _ in range(rnd.randint(0, 10))
        ]
        return b"ReservationName=" + junk(rnd) + b"".join(b" " + p for p in pairs)

    part_keys = [
        k.encode()
        for k in (
            "AllowAccounts",
            "Default",
            "Nodes",
            "MaxTime",
            "State",
            "TRES",
            "TRESBillingWeights",
            "QoS",
        )
    ]

    def part_line(rnd: random.Random) -> bytes:
        pairs = [
            (rnd.choice(part_keys) if rnd.random() < 0.85 else junk(rnd)) + b"=" + junk(rnd)
            for _ in range(rnd.randint(0, 8))
        ]
        lead = b"PartitionName=" + junk(rnd) if rnd.random() < 0.6 else b"  "
        return lead + b"".join(b" " + p for p in pairs)

    sacct_cols, sshare_cols, events_cols = (
        SACCT_HEADER.split("|"),
        list(sshare.LONG_FIELDS),
        list(events.FIELDS),
    )
    return {
        # one sacct parse costs ~17 ms whatever its size (some 70 vectorised steps), so a line alone is
        # re-parsed for 3 lines per batch; the others are checked by the batch's row count
        "sacct": Spec(
            prefix=(SACCT_HEADER + "\n").encode(),
            solo_sample=3,
            raw_key=lambda text: tuple(f.strip() for f in text.split("|")[:2]),
            # attempt/restarts: the rank among lines of the same job id (documented in sacct.py)
            ignore=frozenset({"attempt", "restarts"}),
            lines=(
                column_line("|", sacct_cols),
                column_line("|", sacct_cols),
                shaped_line("|", 15),
                soup_line,
            ),
        ),
        "sinfo": Spec(
            prefix=(US.join(n.upper() for n in sinfo_names) + "\n").encode(),
            lines=(
                column_line(US, sinfo_names),
                column_line(US, sinfo_names),
                shaped_line(US, len(sinfo_names)),
                soup_line,
            ),
        ),
        "squeue": Spec(
            prefix=(US.join(n.upper() for n in squeue_names) + "\n").encode(),
            lines=(
                column_line(US, squeue_names),
                column_line(US, squeue_names),
                shaped_line(US, len(squeue_names)),
                soup_line,
            ),
        ),
        "sshare": Spec(
            prefix=("|".join(sshare_cols) + "\n").encode(),
            lines=(
                column_line("|", sshare_cols),
                column_line("|", sshare_cols),
                shaped_line("|", len(sshare_cols)),
                soup_line,
            ),
            consumed_ok=lambda text, solo: set(text.strip(" \t\r\n\f\v")) <= {"-", " "},
            ignore=frozenset({"parent"}),
        ),
        "sdiag": Spec(
            prefix=b"Main schedule statistics (microseconds):\n",
            lines=(kv_line(sdiag_labels, ": "), kv_line(sdiag_labels, ":"), soup_line),
            context=lambda text: any(text.strip().lower().startswith(p) for p, _ in sdiag._SECTIONS),
            # by design every sdiag line is kept in raw_text; counters without a column are not rows
            consumed_ok=lambda text, solo: text in solo.tables["sched_stats"]["raw_text"][0],
            units=_sdiag_units,
        ),
        "events": Spec(
            prefix=("|".join(events_cols) + "\n").encode(),
            lines=(
                column_line("|", events_cols),
                column_line("|", events_cols),
                shaped_line("|", len(events_cols)),
                soup_line,
            ),
        ),
        "config": Spec(
            lines=(
                kv_line(["SlurmctldPort", "ClusterName", "MaxJobCount", "Sub Key"], " = "),
                kv_line(["Foo", "Bar"], "="),
                soup_line,
            ),
            context=lambda text: (
                bool(config._AS_OF.match(text.strip()))
                or bool(config._SECTION.match(text.strip()) and "=" not in text)
            ),
            # a section title or the "as of" line is read as context for the lines after it
            consumed_ok=lambda text, solo: consumed_whole("config", text.encode("utf-8", "surrogatepass")),
        ),
        "reservations": Spec(
            lines=(res_line, res_line, soup_line),
            # a line with '=' outside ReservationName= continues the record above it
            context=lambda text: not text.strip().startswith("ReservationName=") and "=" in text,
            context_reaches_back=True,
            record_start=lambda text: text.strip().startswith("ReservationName="),
            consumed_ok=lambda text, solo: bool(reservations._EMPTY.match(text.strip())),
        ),
        "ping": Spec(lines=(ping_line, ping_line, soup_line)),
        "partitions": Spec(
            lines=(part_line, part_line, soup_line),
            # an indented line continues the PartitionName record above it (scontrol's multi-line form)
            context=lambda text: not text.strip().startswith("PartitionName=") and "=" in text,
            context_reaches_back=True,
            record_start=lambda text: text.strip().startswith("PartitionName="),
            consumed_ok=lambda text, solo: consumed_whole(
                "partitions", text.encode("utf-8", "surrogatepass")
            ),
        ),
    }


def _norm(v):
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def units_of(module, spec: Spec, parsed) -> dict:
    """{(table, natural key): row tuple} of a parse result; a key seen twice maps to None (a collision)."""
    if spec.units is not None:
        return spec.units(parsed)
    out: dict = {}
    for name, df in parsed.tables.items():
        key_cols = module.TABLES[name].key if name in module.TABLES else tuple(df.columns)
        cols = [c for c in df.columns if c not in spec.ignore]
        for row in df.iter_rows(named=True):
            k = (name, tuple(_norm(row[c]) for c in key_cols))
            out[k] = None if k in out else tuple(_norm(row[c]) for c in cols)
    return out


def quarantine_of(parsed) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in parsed.quarantine.iter_rows(named=True):
        out.setdefault(r["line_no"], []).append(r)
    return out


def _decoded(raw: bytes) -> tuple[str, bytes | None]:
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), raw


@dataclass
class Tally:
    whole_inputs: int = 0
    batches: int = 0
    lines: int = 0
    independent: int = 0
    kept: int = 0
    quarantined: int = 0
    consumed: int = 0
    dependent: Counter = field(default_factory=Counter)
    failures: int = 0
    failure_samples: list = field(default_factory=list)

    @property
    def inputs(self) -> int:
        return self.whole_inputs + self.independent

    def fail(self, what: str, data: bytes) -> None:
        self.failures += 1
        if len(self.failure_samples) < 10:
            self.failure_samples.append({"what": what, "input": data[:400].decode("latin-1")})


def call(module, data: bytes):
    return module.parse(data, cluster="c", snapshot_time=SNAP, tz=timezone.utc, source="fuzz")


HEADER_STARTS = ("jobid", "account", "cluster")
_TITLES = re.compile(r"^[A-Z][A-Z0-9_:()/ %\x1f-]*$")


def consumed_whole(kind: str, raw: bytes) -> bool:
    """A line the parser reads as context and documents as giving no row (a column-title header, a config
    section title or "as of" line, sshare's dashed rule, sdiag's rule of stars, "No reservations in the
    system"), by the parser's own test where it has one. An input of only such lines may give nothing."""
    from slurmscope.collectors import events, partitions, reservations, sshare
    from slurmscope.collectors import slurm_config as config

    text = raw.decode("utf-8", errors="replace").removesuffix("\r")
    s = text.strip(" \t\r\n\f\v")
    if kind in ("sacct", "sshare", "events") and s.lower().startswith(HEADER_STARTS):
        return True
    if kind == "events":
        names = events._names(text.split("|"))
        return "time_start" in names and ("node" in names or "state" in names)
    if kind == "sshare":
        titles = [f.strip() for f in text.split("|")]
        return set(s) <= {"-", " "} or (
            all(t.isalpha() for t in titles) and "account" in sshare._names(titles)
        )
    if kind == "config":
        return bool(config._AS_OF.match(s) or (config._SECTION.match(s) and "=" not in s))
    if kind == "reservations":
        return bool(reservations._EMPTY.match(s))
    if kind == "partitions":  # the empty list, or a record's first line whose settings follow it
        return bool(partitions._EMPTY.match(s)) or (len(s.split()) == 1 and s.startswith("PartitionName="))
    if kind == "sdiag":
        return set(s) == {"*"}
    if kind in ("sinfo", "squeue"):
        return bool(_TITLES.match(s))
    return False


def check_whole(kind: str, module, data: bytes, tally: Tally) -> None:
    tally.whole_inputs += 1
    try:
        parsed = call(module, data)
    except Exception as exc:  # noqa: BLE001 - the finding itself
        tally.fail(f"raised {type(exc).__name__}: {exc}", data)
        return
    nonblank = [ln for ln in data.split(b"\n") if ln.strip(BLANK) and not consumed_whole(kind, ln)]
    if nonblank and parsed.rows + parsed.quarantine.height == 0:
        tally.fail("non-blank input gave neither rows nor quarantine", data)


def check_batch(kind: str, module, spec: Spec, lines: list[bytes], tally: Tally) -> None:
    tally.batches += 1
    data = spec.prefix + b"\n".join(lines) + b"\n"
    first = spec.prefix.count(b"\n") + 1
    try:
        batch = call(module, data)
    except Exception as exc:  # noqa: BLE001
        tally.fail(f"batch raised {type(exc).__name__}: {exc}", data)
        return
    bq = quarantine_of(batch)
    bunits = units_of(module, spec, batch)
    for no, entries in bq.items():
        i = no - first
        if not 0 <= i < len(lines) or len(entries) != 1 or not entries[0]["reason"]:
            tally.fail(f"bad quarantine entry for line {no}: {entries}", data)
            return
        text, raw = _decoded(lines[i].removesuffix(b"\r"))
        if entries[0]["raw_text"] != text or entries[0]["raw_bytes"] != raw:
            tally.fail(f"quarantine of line {no} does not hold its text/bytes", data)
            return
    solo: list = []
    owners: dict = {}
    after_context = False
    nonblank = [i for i, line in enumerate(lines) if line.strip(BLANK)]
    sampled = (
        set(nonblank)
        if spec.solo_sample is None
        else set(random.Random(zlib.crc32(data)).sample(nonblank, min(spec.solo_sample, len(nonblank))))
    )
    for i, line in enumerate(lines):
        text, _raw = _decoded(line.removesuffix(b"\r"))
        if not line.strip(BLANK):
            solo.append(None)  # blank: no record, not an input
            continue
        tally.lines += 1
        if i not in sampled:
            solo.append("unverified")
            continue
        try:
            alone = call(module, spec.prefix + line + b"\n")
        except Exception as exc:  # noqa: BLE001
            tally.fail(f"line alone raised {type(exc).__name__}: {exc}", spec.prefix + line)
            solo.append(None)
            continue
        q = quarantine_of(alone).get(first, [])
        u = units_of(module, spec, alone)
        if not q and not u and not (spec.consumed_ok and spec.consumed_ok(text, alone)):
            tally.fail("line alone gave neither rows nor quarantine (silently dropped)", spec.prefix + line)
        is_context = bool(spec.context and spec.context(text))
        if is_context and spec.context_reaches_back:
            # the record it continues: the nearest record start above (junk lines between do not end it)
            prev = next(
                (
                    j
                    for j in range(i - 1, -1, -1)
                    if solo[j] is not None and spec.record_start(_decoded(lines[j])[0])
                ),
                None,
            )
            if prev is not None and solo[prev] != "unverified":
                solo[prev] = (*solo[prev][:2], True)
        solo.append((q[0]["reason"] if q else None, u, after_context or is_context))
        after_context = after_context or is_context
        for k in u:
            owners.setdefault(k, []).append(i)
    collided = {k for k, who in owners.items() if len(who) > 1}
    any_dependent = after_context
    if spec.solo_sample is not None:
        unverified_counts(spec, lines, solo, first, bq, batch, tally, data)
    for i, outcome in enumerate(solo):
        if outcome is None or outcome == "unverified":
            continue
        reason, u, ctx = outcome
        b_reason = bq[first + i][0]["reason"] if first + i in bq else None
        if ctx:
            tally.dependent["after a context line"] += 1
            continue
        if any(k in collided for k in u):
            tally.dependent["same natural key as another line"] += 1
            continue
        if kind == "sacct" and reason and reason.startswith("step without its job") and b_reason is None:
            tally.dependent["sacct step joined to its job line"] += 1
            any_dependent = True
            continue
        if reason != b_reason:
            tally.fail(f"line {first + i}: alone {reason!r}, in the batch {b_reason!r}", data)
            continue
        wrong = [k for k, row in u.items() if row is None or bunits.get(k) != row]
        if wrong and spec.solo_sample is not None and all(k in bunits and bunits[k] is None for k in wrong):
            tally.dependent["same natural key as a line not re-parsed alone"] += 1
            continue
        if wrong:
            k = wrong[0]
            diff = [
                j for j, (x, y) in enumerate(zip(u[k] or (), bunits.get(k) or (), strict=False)) if x != y
            ]
            tally.fail(
                f"line {first + i}: rows differ from the line alone, key {k}, columns at {diff}: "
                f"alone {[u[k][j] for j in diff] if u[k] else None}, "
                f"in the batch {[bunits[k][j] for j in diff] if bunits.get(k) else None}",
                data,
            )
            continue
        tally.independent += 1
        if reason is not None:
            tally.quarantined += 1
        elif u:
            tally.kept += 1
        else:
            tally.consumed += 1
    if not any_dependent and spec.solo_sample is None:
        stray = [k for k in bunits if k not in owners]
        if stray:
            tally.fail(f"batch rows no single line gives: {stray[:3]}", data)


def unverified_counts(
    spec: Spec, lines: list[bytes], solo: list, first: int, bq: dict, batch, tally: Tally, data: bytes
) -> None:
    """Lines not re-parsed alone (solo_sample): a quarantined one is accounted for by its entry (checked
    above); the kept ones must give one row each, except lines whose key fields repeat (may collapse)."""
    kept = [i for i, o in enumerate(solo) if o is not None and first + i not in bq]
    keys = Counter(spec.raw_key(_decoded(lines[i])[0]) for i in kept)
    unique = [i for i in kept if keys[spec.raw_key(_decoded(lines[i])[0])] == 1]
    if not len(unique) <= batch.rows <= len(kept):
        tally.fail(f"{len(kept)} kept lines ({len(unique)} with unique ids) gave {batch.rows} rows", data)
        return
    for i, o in enumerate(solo):
        if o != "unverified":
            continue
        if first + i in bq:
            tally.independent += 1
            tally.quarantined += 1
        elif i in unique:
            tally.independent += 1
            tally.kept += 1
        else:
            tally.dependent["same key fields as another line (not re-parsed alone)"] += 1


def fuzz(kind: str, target: int, round_examples: int = 500) -> dict:
    module = parsers()[kind]
    spec = specs()[kind]
    tally = Tally()
    whole = st.one_of(
        st.binary(max_size=2000), slurmish, slurmish.map(lambda b: (SACCT_HEADER + "\n").encode() + b)
    )
    # A batch's lines come from a Random that Hypothesis controls (st.randoms): composite strategies for
    # 8-32 lines of a dozen fields cost Hypothesis ~0.3 s per example, ten times the parsing.
    batch = st.randoms(use_true_random=False).map(
        lambda rnd: ("batch", [rnd.choice(spec.lines)(rnd) for _ in range(rnd.randint(8, 32))])
    )
    example = st.one_of(whole.map(lambda d: ("whole", d)), batch, batch, batch, batch)

    @settings(
        max_examples=round_examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(example)
    def run(ex) -> None:
        what, payload = ex
        if what == "whole":
            check_whole(kind, module, payload, tally)
        else:
            check_batch(kind, module, spec, payload, tally)

    t0, c0 = time.monotonic(), time.process_time()
    while tally.inputs < target:
        run()
    return {
        "parser": kind,
        "inputs": tally.inputs,
        "whole_inputs": tally.whole_inputs,
        "independent_lines": tally.independent,
        "kept": tally.kept,
        "quarantined": tally.quarantined,
        "consumed": tally.consumed,
        "batches": tally.batches,
        "lines_in_batches": tally.lines,
        "dependent": dict(tally.dependent),
        "examples": tally.whole_inputs + tally.batches,
        "wall_s": round(time.monotonic() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
        "failures": tally.failures,
        "failure_samples": tally.failure_samples,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--inputs", type=int, default=100_000, help="inputs per parser (whole inputs + verified lines)"
    )
    ap.add_argument("--only", default=",".join(parsers()))
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    results = []
    for kind in args.only.split(","):
        res = fuzz(kind, args.inputs)
        results.append(res)
        print(json.dumps(res), flush=True)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(results, fh, indent=1)
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
