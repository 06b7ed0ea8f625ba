"""Central side of the NVML agents: pull spool files (HTTP or shared path), load them once, acknowledge.

A spool file is validated as a whole first (header, footer count, checksum): a file that fails is
quarantined line by line and nothing from it is loaded, because a torn file would otherwise look like a
complete hour. Each loaded file is recorded in `spool_files` in the same transaction as its rows, so a
file seen twice loads once. Per-minute samples of the same GPU and minute from two files (an agent that
restarted mid-minute) are merged: sample counts add, means are weighted, maxima and deltas combine.
Only after the commit is the agent told it may prune the file. A live run is fetch (HTTP or file reads, no
database), load, acknowledge, so serve holds its write lock only for the load, never while an agent that
does not answer runs out its timeout.
"""

from __future__ import annotations

import hashlib
import json
import logging
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import polars as pl
from slurmscope.collectors import base
from slurmscope.collectors.base import (
    IngestResult,
    Outcome,
    Parsed,
    RunRecord,
    TableSpec,
    data_span,
    quarantine_frame,
    record_failure,
)

from slurmscope.config import Config
from slurmscope.spool import (
    CLOCK_EVENT_CAUSES,
    GPM_FIELDS,
    NVLINK_COUNTERS,
    VIOLATION_POLICIES,
    activity_source,
    parse_iso,
    read_spool_bytes,
)
from slurmscope.webconfig import basic_auth_header, client_context

log = logging.getLogger(__name__)

KIND = "nvml"
TABLES = {
    "gpu_samples": TableSpec("gpu_samples", ("cluster", "node", "gpu_uuid", "minute")),
    "gpu_events": TableSpec("gpu_events", ("cluster", "node", "gpu_uuid", "event_time", "event_type")),
    "gpu_jobs": TableSpec(
        "gpu_jobs", ("cluster", "node", "gpu_uuid", "job_id", "mig_instance", "interval_start")
    ),
    "gpu_inventory": TableSpec("gpu_inventory", ("cluster", "node", "gpu_uuid", "seen_at")),
    "gpu_nvlink_errors": TableSpec("gpu_nvlink_errors", ("cluster", "node", "gpu_uuid", "minute", "link")),
}

TS = pl.Datetime("us", "UTC")
SCHEMAS: dict[str, dict[str, Any]] = {
    "gpu_samples": {
        "node": pl.String,
        "gpu_uuid": pl.String,
        "minute": TS,
        "gpu_index": pl.Int32,
        "gpu_minor": pl.Int32,
        "pci_bus_id": pl.String,
        "model": pl.String,
        "samples": pl.Int32,
        "util_gpu_mean": pl.Float64,
        "util_gpu_max": pl.Float64,
        "util_mem_mean": pl.Float64,
        "mem_used_max_bytes": pl.Int64,
        "mem_total_bytes": pl.Int64,
        "power_mean_watts": pl.Float64,
        "power_max_watts": pl.Float64,
        "energy_joules": pl.Float64,
        "temp_gpu_max_celsius": pl.Float64,
        "temp_mem_max_celsius": pl.Float64,
        "sm_clock_mean_mhz": pl.Float64,
        "mem_clock_mean_mhz": pl.Float64,
        "throttle_seconds": pl.Float64,
        "throttle_reasons": pl.Int64,
        "pcie_replay_delta": pl.Int64,
        "ecc_corrected_delta": pl.Int64,
        "ecc_uncorrected_delta": pl.Int64,
        "ecc_corrected_total": pl.Int64,
        "ecc_uncorrected_total": pl.Int64,
        "remapped_pending": pl.Boolean,
        "remapped_failed": pl.Boolean,
        "retired_pages": pl.Int64,
        "nvlink_errors_delta": pl.Int64,
        "null_fields": pl.Int32,
        "sw_power_cap_seconds": pl.Float64,
        "hw_slowdown_seconds": pl.Float64,
        "sw_thermal_seconds": pl.Float64,
        "hw_thermal_seconds": pl.Float64,
        "hw_power_brake_seconds": pl.Float64,
        **{f"nvlink_{c}_delta": pl.Int64 for c in NVLINK_COUNTERS},
        **{f"nvlink_{c}_total": pl.Int64 for c in NVLINK_COUNTERS},
        "pcie_link_gen": pl.Int32,
        "pcie_link_width": pl.Int32,
        "remapped_correctable": pl.Int64,
        "remapped_uncorrectable": pl.Int64,
        "retired_pages_sbe": pl.Int64,
        "retired_pages_dbe": pl.Int64,
        "retired_pages_pending": pl.Boolean,
        **{f"violation_{p}_seconds": pl.Float64 for p in VIOLATION_POLICIES},
        "gpm_samples": pl.Int32,
        **{f"{f}_mean": pl.Float64 for f in GPM_FIELDS},
        "activity_source": pl.String,
    },
    "gpu_events": {
        "node": pl.String,
        "gpu_uuid": pl.String,
        "event_time": TS,
        "event_type": pl.String,
        "xid": pl.Int32,
        "pci_bus_id": pl.String,
        "source": pl.String,
        "detail": pl.String,
    },
    "gpu_jobs": {
        "node": pl.String,
        "gpu_uuid": pl.String,
        "job_id": pl.String,
        "interval_start": TS,
        "interval_end": TS,
        "gpu_index": pl.Int32,
        "mig_instance": pl.String,
        "source": pl.String,
    },
    "gpu_inventory": {
        "node": pl.String,
        "gpu_uuid": pl.String,
        "seen_at": TS,
        "gpu_index": pl.Int32,
        "gpu_minor": pl.Int32,
        "pci_bus_id": pl.String,
        "model": pl.String,
        "serial": pl.String,
        "driver_version": pl.String,
        "cuda_version": pl.String,
        "mig_mode": pl.Boolean,
    },
    "gpu_nvlink_errors": {
        "node": pl.String,
        "gpu_uuid": pl.String,
        "minute": TS,
        "link": pl.Int32,
        **{f"{c}_delta": pl.Int64 for c in NVLINK_COUNTERS},
    },
}
CAUSE_COLUMNS = tuple(f"{c}_seconds" for c in CLOCK_EVENT_CAUSES)
GPM_COLUMNS = tuple(f"{f}_mean" for f in GPM_FIELDS)

RECORD_TABLE = {
    "sample": "gpu_samples",
    "event": "gpu_events",
    "job": "gpu_jobs",
    "inventory": "gpu_inventory",
    "nvlink": "gpu_nvlink_errors",
}


# --------------------------------------------------------------------------------------------------
# Pure: bytes -> typed rows
# --------------------------------------------------------------------------------------------------


def _coerce(value: Any, dtype: Any) -> Any:
    if value is None:
        return None
    if dtype == TS:
        return parse_iso(value)
    if dtype in (pl.Int32, pl.Int64):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    if dtype == pl.Float64:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)
    if dtype == pl.Boolean:
        if not isinstance(value, bool):
            raise ValueError(f"expected true/false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


ADD_V3 = (
    "nvlink_errors_delta",
    *(f"nvlink_{c}_delta" for c in NVLINK_COUNTERS),
    *(f"violation_{p}_seconds" for p in VIOLATION_POLICIES),
    "gpm_samples",
)
"""Columns two chunks of a minute add (besides energy, throttle and the older deltas)."""
LATEST_V3 = (
    *(f"nvlink_{c}_total" for c in NVLINK_COUNTERS),
    "pcie_link_gen",
    "pcie_link_width",
    "remapped_correctable",
    "remapped_uncorrectable",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "retired_pages_pending",
)
"""Columns where the later chunk's value wins (counters that only grow, link settings, flags)."""


def merge_samples(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Combine two partial aggregates of one GPU-minute (the SQL merge does the same in the database)."""
    na, nb = a.get("samples") or 0, b.get("samples") or 0
    out = dict(a)

    def wmean(k: str) -> Any:
        x, y = a.get(k), b.get(k)
        if x is None or y is None or na + nb == 0:
            return y if x is None else x
        return (x * na + y * nb) / (na + nb)

    def mx(k: str) -> Any:
        vals = [v for v in (a.get(k), b.get(k)) if v is not None]
        return max(vals) if vals else None

    def add(k: str) -> Any:
        x, y = a.get(k), b.get(k)
        return None if x is None and y is None else (x or 0) + (y or 0)

    out["samples"] = na + nb
    ga, gb = a.get("gpm_samples") or 0, b.get("gpm_samples") or 0
    for k in GPM_COLUMNS:
        x, y = a.get(k), b.get(k)
        out[k] = y if x is None else x if y is None or ga + gb == 0 else (x * ga + y * gb) / (ga + gb)
    for k in (
        "util_gpu_mean",
        "util_mem_mean",
        "power_mean_watts",
        "sm_clock_mean_mhz",
        "mem_clock_mean_mhz",
    ):
        out[k] = wmean(k)
    for k in (
        "util_gpu_max",
        "mem_used_max_bytes",
        "mem_total_bytes",
        "power_max_watts",
        "temp_gpu_max_celsius",
        "temp_mem_max_celsius",
    ):
        out[k] = mx(k)
    for k in (
        "energy_joules",
        "throttle_seconds",
        *CAUSE_COLUMNS,
        "pcie_replay_delta",
        "ecc_corrected_delta",
        "ecc_uncorrected_delta",
        *ADD_V3,
        "null_fields",
    ):
        out[k] = add(k)
    x, y = a.get("throttle_reasons"), b.get("throttle_reasons")
    out["throttle_reasons"] = None if x is None and y is None else (x or 0) | (y or 0)
    for k in (
        "ecc_corrected_total",
        "ecc_uncorrected_total",
        "remapped_pending",
        "remapped_failed",
        "retired_pages",
        *LATEST_V3,
        "gpu_index",
        "gpu_minor",
        "pci_bus_id",
        "model",
    ):
        out[k] = b.get(k) if b.get(k) is not None else a.get(k)
    out["activity_source"] = activity_source(out["gpm_samples"], out["util_gpu_mean"])
    return out


@dataclass
class ParsedSpool:
    node: str | None
    parsed: Parsed
    problem: str | None


def parse_spool(data: bytes) -> ParsedSpool:
    """Validate and type a spool file. Never raises: what cannot be used goes to quarantine with a reason."""
    content = read_spool_bytes(data)
    if content.problem is not None:
        q = [
            {
                "line_no": i,
                "raw_text": raw.decode("utf-8", errors="replace"),
                "raw_bytes": None if _is_utf8(raw) else raw,
                "reason": f"spool file rejected: {content.problem}",
            }
            for i, raw in enumerate(content.lines, start=1)
        ]
        if not q:
            q = [
                {
                    "line_no": 1,
                    "raw_text": "",
                    "raw_bytes": None,
                    "reason": f"spool file rejected: {content.problem}",
                }
            ]
        return ParsedSpool(None, Parsed(quarantine=quarantine_frame(q)), content.problem)
    node = content.header["node"]
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in SCHEMAS}
    bad = [
        {
            "line_no": no,
            "raw_text": raw.decode("utf-8", errors="replace"),
            "raw_bytes": None if _is_utf8(raw) else raw,
            "reason": reason,
        }
        for no, raw, reason in content.bad_lines
    ]
    samples: dict[tuple[str, str], dict[str, Any]] = {}
    links: dict[tuple[str, Any, int], dict[str, Any]] = {}
    for no, rec in content.records:
        table = RECORD_TABLE[rec["type"]]
        schema = SCHEMAS[table]
        try:
            row = {k: _coerce(rec.get(k), dt) for k, dt in schema.items() if k != "node"}
        except (ValueError, TypeError) as exc:
            bad.append(
                {
                    "line_no": no,
                    "raw_text": content.lines[no - 1].decode("utf-8", errors="replace"),
                    "raw_bytes": None,
                    "reason": f"bad {rec['type']} record: {exc}",
                }
            )
            continue
        row["node"] = node
        if table == "gpu_jobs" and row["mig_instance"] is None:
            row["mig_instance"] = ""
        if table == "gpu_events" and row["gpu_uuid"] is None:
            row["gpu_uuid"] = ""
        if table == "gpu_samples":
            key = (row["gpu_uuid"], row["minute"])
            if key in samples:
                samples[key] = merge_samples(samples[key], row)
            else:
                row["activity_source"] = activity_source(row["gpm_samples"], row["util_gpu_mean"])
                samples[key] = row
        elif table == "gpu_nvlink_errors":
            key = (row["gpu_uuid"], row["minute"], row["link"])
            links[key] = _add_links(links[key], row) if key in links else row
        else:
            rows[table].append(row)
    rows["gpu_samples"] = list(samples.values())
    rows["gpu_nvlink_errors"] = list(links.values())
    tables = {t: pl.DataFrame(r, schema=SCHEMAS[t], orient="row") for t, r in rows.items() if r}
    return ParsedSpool(node, Parsed(tables=tables, quarantine=quarantine_frame(bad)), None)


def _add_links(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two chunks of one link's minute: the rises add."""
    out = dict(a)
    for c in NVLINK_COUNTERS:
        x, y = a[f"{c}_delta"], b[f"{c}_delta"]
        out[f"{c}_delta"] = None if x is None and y is None else (x or 0) + (y or 0)
    return out


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# --------------------------------------------------------------------------------------------------
# Loading (one transaction per file)
# --------------------------------------------------------------------------------------------------

_SAMPLE_COLS = ["cluster"] + list(SCHEMAS["gpu_samples"])
_WMEAN = ("util_gpu_mean", "util_mem_mean", "power_mean_watts", "sm_clock_mean_mhz", "mem_clock_mean_mhz")
_MAX = (
    "util_gpu_max",
    "mem_used_max_bytes",
    "mem_total_bytes",
    "power_max_watts",
    "temp_gpu_max_celsius",
    "temp_mem_max_celsius",
)
_ADD = (
    "energy_joules",
    "throttle_seconds",
    *CAUSE_COLUMNS,
    "pcie_replay_delta",
    "ecc_corrected_delta",
    "ecc_uncorrected_delta",
    *ADD_V3,
    "null_fields",
)
_LATEST = (
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "remapped_pending",
    "remapped_failed",
    "retired_pages",
    *LATEST_V3,
    "gpu_index",
    "gpu_minor",
    "pci_bus_id",
    "model",
)


def _sample_merge_sets() -> list[str]:
    """SET clauses merging a new partial record (`excluded.c`) into the stored one (`g.c`) of a GPU-minute."""
    sets = ["samples = coalesce(g.samples, 0) + coalesce(excluded.samples, 0)"]
    for (
        c
    ) in GPM_COLUMNS:  # weighted by the GPM readings; gpm_samples itself adds below (SET reads old values)
        sets.append(
            f"{c} = CASE WHEN excluded.{c} IS NULL THEN g.{c} WHEN g.{c} IS NULL THEN excluded.{c} "
            f"ELSE (g.{c} * coalesce(g.gpm_samples, 0) + excluded.{c} * coalesce(excluded.gpm_samples, 0)) "
            f"/ nullif(coalesce(g.gpm_samples, 0) + coalesce(excluded.gpm_samples, 0), 0) END"
        )
    sets.append(
        "activity_source = CASE WHEN coalesce(g.gpm_samples, 0) + coalesce(excluded.gpm_samples, 0) > 0 THEN 'gpm'"
        " WHEN g.util_gpu_mean IS NOT NULL OR excluded.util_gpu_mean IS NOT NULL THEN 'gpu_util' END"
    )
    for c in _WMEAN:
        sets.append(
            f"{c} = CASE WHEN excluded.{c} IS NULL THEN g.{c} WHEN g.{c} IS NULL THEN excluded.{c} "
            f"ELSE (g.{c} * coalesce(g.samples, 0) + excluded.{c} * coalesce(excluded.samples, 0)) "
            f"/ nullif(coalesce(g.samples, 0) + coalesce(excluded.samples, 0), 0) END"
        )
    sets += [f"{c} = greatest(g.{c}, excluded.{c})" for c in _MAX]
    sets += [
        f"{c} = CASE WHEN g.{c} IS NULL AND excluded.{c} IS NULL THEN NULL "
        f"ELSE coalesce(g.{c}, 0) + coalesce(excluded.{c}, 0) END"
        for c in _ADD
    ]
    sets.append(
        "throttle_reasons = CASE WHEN g.throttle_reasons IS NULL AND excluded.throttle_reasons IS NULL "
        "THEN NULL ELSE coalesce(g.throttle_reasons, 0) | coalesce(excluded.throttle_reasons, 0) END"
    )
    sets += [f"{c} = coalesce(excluded.{c}, g.{c})" for c in _LATEST]
    return sets


_SAMPLE_KEY = (
    "g.cluster = {s}.cluster AND g.node = {s}.node AND g.gpu_uuid = {s}.gpu_uuid AND g.minute = {s}.minute"
)
# gpu_samples has no key index (sql/0021_retention.sql): the stored rows of the file's minutes are found by
# the minute range, which DuckDB's row-group min/max turn into a read of the newest row groups only.
_SAMPLE_IN_RANGE = "g.cluster = $cluster AND g.node = $node AND g.minute >= $lo AND g.minute <= $hi"
_SAMPLE_UPDATE_SQL = (
    f"UPDATE gpu_samples AS g SET {', '.join(_sample_merge_sets())} FROM _nvml_samples AS excluded "  # noqa: S608 - column lists are module constants (SCHEMAS)
    f"WHERE {_SAMPLE_IN_RANGE} AND {_SAMPLE_KEY.format(s='excluded')}"
)
_SAMPLE_INSERT_SQL = (
    f"INSERT INTO gpu_samples ({', '.join(_SAMPLE_COLS)}) SELECT {', '.join(_SAMPLE_COLS)} FROM _nvml_samples s "  # noqa: S608 - column lists are module constants (SCHEMAS)
    f"WHERE NOT EXISTS (SELECT 1 FROM gpu_samples g WHERE {_SAMPLE_IN_RANGE} AND {_SAMPLE_KEY.format(s='s')})"
)


def _merge_samples(con: duckdb.DuckDBPyConnection, cluster: str, node: str, df: pl.DataFrame) -> None:
    """Upsert a file's GPU-minutes (one node): a minute already stored merges the new partial record into
    it (an agent that restarted mid-minute), the others are inserted; (cluster, node, gpu_uuid, minute)
    stays unique without an index."""
    params = {"cluster": cluster, "node": node, "lo": df["minute"].min(), "hi": df["minute"].max()}
    con.register("_nvml_samples", df.to_arrow())
    try:
        con.execute(_SAMPLE_UPDATE_SQL, params)
        con.execute(_SAMPLE_INSERT_SQL, params)
    finally:
        con.unregister("_nvml_samples")


_LINK_COLS = ["cluster"] + list(SCHEMAS["gpu_nvlink_errors"])


def _link_merge_sql() -> str:
    """A link's minute seen again (an agent restart split it): the rises add."""
    sets = [
        f"{c}_delta = CASE WHEN {c}_delta IS NULL AND excluded.{c}_delta IS NULL THEN NULL "
        f"ELSE coalesce({c}_delta, 0) + coalesce(excluded.{c}_delta, 0) END"
        for c in NVLINK_COUNTERS
    ]
    cols = ", ".join(_LINK_COLS)
    return (
        f"INSERT INTO gpu_nvlink_errors ({cols}) SELECT {cols} FROM _nvml_links "  # noqa: S608 - column lists are module constants (SCHEMAS)
        "ON CONFLICT (cluster, node, gpu_uuid, minute, link) DO UPDATE SET " + ", ".join(sets)
    )


_JOB_COLS = ["cluster"] + list(SCHEMAS["gpu_jobs"])
_JOB_MERGE_SQL = (
    f"INSERT INTO gpu_jobs ({', '.join(_JOB_COLS)}) SELECT {', '.join(_JOB_COLS)} FROM _nvml_jobs "  # noqa: S608 - column lists are module constants (SCHEMAS)
    "ON CONFLICT (cluster, node, gpu_uuid, job_id, mig_instance, interval_start) DO UPDATE SET "
    "interval_end = greatest(interval_end, excluded.interval_end), "
    "gpu_index = coalesce(excluded.gpu_index, gpu_index), source = coalesce(source, excluded.source)"
)


def _merge(con: duckdb.DuckDBPyConnection, view: str, sql: str, df: pl.DataFrame) -> None:
    con.register(view, df.to_arrow())
    try:
        con.execute(sql)
    finally:
        con.unregister(view)


def ingest_bytes(
    con: duckdb.DuckDBPyConnection, cfg: Config, data: bytes, *, file_name: str, path: str | None = None
) -> IngestResult:
    """Load one spool file's bytes (validated, deduplicated by name+checksum) in one transaction."""
    cluster = cfg.cluster
    digest = hashlib.sha256(data).hexdigest()
    shown = path or file_name
    ps = parse_spool(data)
    run = RunRecord(cluster=cluster, collector=KIND, source=f"nvml:{file_name}")
    if ps.node is not None:
        row = con.execute(
            "SELECT sha256 FROM spool_files WHERE cluster = ? AND node = ? AND file_name = ?",
            [cluster, ps.node, file_name],
        ).fetchone()
        if row is not None:
            if row[0] == digest:
                return IngestResult(shown, 0, 0, skipped=True, node=ps.node)
            ps = ParsedSpool(
                None,
                Parsed(
                    quarantine=quarantine_frame(
                        [
                            {
                                "line_no": 1,
                                "raw_text": data[:4000].decode("utf-8", errors="replace"),
                                "raw_bytes": None,
                                "reason": f"spool file {file_name} of node {ps.node} was already loaded with other content "
                                f"(sha256 {row[0]})",
                            }
                        ]
                    )
                ),
                "name reused with different content",
            )
    run.window_start, run.window_end = data_span(ps.parsed, TABLES)
    tables = dict(ps.parsed.tables)
    samples = tables.pop("gpu_samples", None)
    jobs = tables.pop("gpu_jobs", None)
    links = tables.pop("gpu_nvlink_errors", None)
    extra_rows = sum(0 if df is None else df.height for df in (samples, jobs, links))

    def after(c: duckdb.DuckDBPyConnection) -> None:
        if samples is not None:
            _merge_samples(c, cluster, ps.node, samples.with_columns(pl.lit(cluster).alias("cluster")))
        if jobs is not None:
            _merge(c, "_nvml_jobs", _JOB_MERGE_SQL, jobs.with_columns(pl.lit(cluster).alias("cluster")))
        if links is not None:
            _merge(c, "_nvml_links", _link_merge_sql(), links.with_columns(pl.lit(cluster).alias("cluster")))
        if ps.node is not None:
            c.execute(
                "INSERT INTO spool_files (cluster, node, file_name, sha256, rows) VALUES (?, ?, ?, ?, ?)",
                [cluster, ps.node, file_name, digest, ps.parsed.rows],
            )

    base.load(
        con,
        Parsed(tables=tables, quarantine=ps.parsed.quarantine),
        TABLES,
        run,
        content_sha=digest,
        after_upsert=after,
    )
    rows = sum(df.height for df in tables.values()) + extra_rows
    return IngestResult(shown, rows, ps.parsed.quarantine.height, node=ps.node, error=ps.problem)


def ingest_spool_files(
    con: duckdb.DuckDBPyConnection, cfg: Config, paths: Iterable[str | Path]
) -> list[IngestResult]:
    """`slurmscope ingest nvml FILE...`: load spool files in name (= time) order."""
    out = []
    for p in sorted((Path(p) for p in paths), key=lambda p: p.name):
        out.append(ingest_bytes(con, cfg, p.read_bytes(), file_name=p.name, path=str(p)))
    return out


# --------------------------------------------------------------------------------------------------
# Pulling from agents: fetch (no database), load (one transaction per file), then acknowledge
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentClient:
    """How the central collector reaches agents: basic-auth header and TLS trust (nvml.agent_* keys)."""

    authorization: str | None = None
    ca_file: str | None = None

    @classmethod
    def from_config(cls, cfg: Config) -> AgentClient:
        user = cfg.get("nvml", "agent_username")
        password_file = cfg.get("nvml", "agent_password_file")
        if bool(user) != bool(password_file):
            raise ValueError("nvml.agent_username and nvml.agent_password_file must be set together")
        header = None
        if user:
            password = Path(password_file).read_text(encoding="utf-8").rstrip("\r\n")
            header = basic_auth_header(user, password)
        return cls(authorization=header, ca_file=cfg.get("nvml", "agent_ca_file") or None)

    def fetch(self, url: str, *, method: str = "GET", timeout: float) -> bytes:
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        if self.authorization:
            req.add_header("Authorization", self.authorization)
        ctx = client_context(self.ca_file) if url.startswith("https:") else None
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310 - configured agent URLs
            return resp.read()


@dataclass(frozen=True)
class SpoolFile:
    name: str
    data: bytes
    sha256: str
    shown: str  # where it came from: the agent URL of the file, or its path


@dataclass
class Pull:
    """One configured source (an agent URL or a shared spool directory) during one run.

    `error` is why the source failed (fetch or load); the files fetched before the failure still load.
    `committed` are the files whose transaction committed: only those are acknowledged, and an
    acknowledgement that fails sets `ack_error` (the agent keeps the file; the next run skips it as loaded).
    """

    source: str
    client: AgentClient | None = None  # None: a shared spool directory
    timeout: float = 30.0
    files: list[SpoolFile] = field(default_factory=list)
    error: str | None = None
    committed: list[SpoolFile] = field(default_factory=list)
    rows: int = 0
    ack_error: str | None = None
    skipped: int = 0  # listed files already loaded: acknowledged again, not downloaded


def fetch(
    cfg: Config,
    window: tuple[datetime | None, datetime | None],
    *,
    loaded: Callable[[list[tuple[str, str]]], set[tuple[str, str, str]]] | None = None,
) -> list[Pull]:
    """Every configured agent URL, then every spool path: the files to load, read without the database.

    The window is not used: each spool file names its own segment, and the agent keeps it until
    acknowledged. `loaded` answers which listed (node, file name) pairs are already in `spool_files`, with
    their checksums (`collect` asks the database in a short turn of its own): those are not downloaded
    again, only acknowledged again, so a run downloads only the segments closed since the last one even
    when an acknowledgement was lost.
    """
    timeout = float(cfg.get("slurm", "timeout_seconds"))
    pulls = []
    for url in cfg.get("nvml", "agents"):
        pull = Pull(url, timeout=timeout)
        try:
            pull.client = AgentClient.from_config(cfg)
            _download(pull, loaded)
        except (OSError, ValueError) as exc:  # urllib's URLError and HTTPError are OSErrors
            pull.error = str(exc)
        pulls.append(pull)
    for directory in cfg.get("nvml", "spool_paths"):
        pull = Pull(str(directory))
        try:
            _read_closed_files(pull, Path(directory))
        except OSError as exc:
            pull.error = str(exc)
        pulls.append(pull)
    return pulls


def _download(
    pull: Pull, loaded: Callable[[list[tuple[str, str]]], set[tuple[str, str, str]]] | None
) -> None:
    base = pull.source.rstrip("/")
    listing = json.loads(pull.client.fetch(f"{base}/spool", timeout=pull.timeout))
    entries = sorted(listing.get("files", []), key=lambda e: e["name"])
    node = listing.get("node")
    known = loaded([(node, e["name"]) for e in entries]) if loaded is not None and node else set()
    for entry in entries:
        name = entry["name"]
        if (node, name, entry.get("sha256")) in known:
            pull.committed.append(SpoolFile(name, b"", entry["sha256"], f"{base}/spool/{name}"))
            pull.skipped += 1
            continue
        data = pull.client.fetch(f"{base}/spool/{quote(name)}", timeout=pull.timeout)
        if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            log.warning("%s/%s changed during download; will retry next run", base, name)
            continue
        pull.files.append(SpoolFile(name, data, entry["sha256"], f"{base}/spool/{name}"))


def _read_closed_files(pull: Pull, directory: Path) -> None:
    """Shared-filesystem mode: the closed files without an `<name>.ack` beside them."""
    for p in sorted(directory.glob("*.jsonl")):
        if p.name.startswith(".") or (directory / f"{p.name}.ack").exists():
            continue
        data = p.read_bytes()
        pull.files.append(SpoolFile(p.name, data, hashlib.sha256(data).hexdigest(), str(p)))


def loaded_files(
    con: duckdb.DuckDBPyConnection, cfg: Config, listed: list[tuple[str, str]]
) -> set[tuple[str, str, str]]:
    """The listed (node, file name) pairs already in spool_files, as (node, file name, sha256)."""
    if not listed:
        return set()
    con.register("_nvml_listed", pl.DataFrame(listed, schema=["node", "file_name"], orient="row").to_arrow())
    try:
        rows = con.execute(
            "SELECT s.node, s.file_name, s.sha256 FROM spool_files s "
            "JOIN _nvml_listed l ON s.node = l.node AND s.file_name = l.file_name WHERE s.cluster = ?",
            [cfg.cluster],
        ).fetchall()
    finally:
        con.unregister("_nvml_listed")
    return {(n, f, h) for n, f, h in rows}


def load(con: duckdb.DuckDBPyConnection, cfg: Config, pulls: list[Pull]) -> Outcome:
    """Load the fetched files, one transaction each, and record each failed source in collector_runs.

    One Outcome for all sources: status 'error' if any failed, rows of the sources that did not. A
    database error stops its own source, not the others.
    """
    for pull in pulls:
        for f in pull.files:
            try:
                res = ingest_bytes(con, cfg, f.data, file_name=f.name, path=f.shown)
            except duckdb.Error as exc:
                pull.error = str(exc)
                break
            pull.committed.append(f)
            pull.rows += res.rows
    failed = [p for p in pulls if p.error is not None]
    for pull in failed:
        record_failure(
            con,
            RunRecord(cluster=cfg.cluster, collector=KIND, source=f"nvml:{pull.source}"),
            "timeout" if "timed out" in pull.error else "error",
            f"{pull.source}: {pull.error}",
        )
    rows = sum(p.rows for p in pulls if p.error is None)
    if failed:
        return Outcome(KIND, "error", rows, "; ".join(f"nvml:{p.source}: {p.error}" for p in failed))
    return Outcome(KIND, "ok", rows)


def acknowledge(pulls: list[Pull]) -> None:
    """Tell each source it may prune the files whose load committed (call after `load`, outside the lock)."""
    for pull in pulls:
        for f in pull.committed:
            if pull.client is None:
                marker = Path(pull.source) / f"{f.name}.ack"
                try:
                    marker.write_text(f.sha256 + "\n")
                except OSError as exc:
                    log.warning(
                        "cannot acknowledge %s (%s); it stays and is skipped as already loaded", f.shown, exc
                    )
                continue
            url = f"{pull.source.rstrip('/')}/spool/{quote(f.name)}/ack?sha256={f.sha256}"
            try:
                pull.client.fetch(url, method="POST", timeout=pull.timeout)
            except OSError as exc:
                pull.ack_error = str(exc)
                break
