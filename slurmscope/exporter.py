"""The Prometheus exporter: catalog rows -> metric families -> bytes, rendered once per run, served as is.

A scrape must never run a Slurm command or a pipeline (a slow or hung slurmctld would turn every scrape
into a timeout, and N Prometheus replicas would multiply the load). So `render` runs the catalog queries
once, after each collector or pipeline run, and `serve_metrics` hands out whatever bytes `get_bytes`
returns at that moment. Everything is a pure function of the database and `now`: rendering at a past
instant gives what a scrape then would have shown, which `export_history` uses to backfill Prometheus.

A missing table or a query that no longer matches its table (a mart still being written, an older
database) degrades to no samples for that family and `slurmscope_exporter_family_up 0`, never to a
failed scrape.
"""

from __future__ import annotations

import gzip
import logging
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import duckdb
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.core import Metric as Family
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector, CollectorRegistry

from slurmscope.catalog import CATALOG, FAMILY_UP, INTERNAL, RENDER_TIME, Metric
from slurmscope.config import Config
from slurmscope.webconfig import BasicAuth, WebConfig, load_web_config, server_context

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


Sample = tuple[tuple[str, ...], float]


@dataclass
class Snapshot:
    """The samples of every catalog family at one instant, plus which families could be read."""

    now: datetime
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    up: dict[str, bool] = field(default_factory=dict)


def enabled_metrics(cfg: Config) -> list[Metric]:
    """Catalog entries this configuration serves: user-labelled families only when the config allows them."""
    user_labels = bool(cfg.get("exporter", "user_labels"))
    return [m for m in CATALOG if user_labels or not m.user_labels]


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def snapshot(
    con: duckdb.DuckDBPyConnection,
    cfg: Config,
    now: datetime,
    *,
    shift_seconds: float = 0.0,
    metrics: list[Metric] | None = None,
) -> Snapshot:
    """Run every enabled catalog query for `now`, once per configured cluster (the macros take one cluster;
    every family has a `cluster` label, so the clusters' samples never collide). A family is up when its
    query ran for every cluster; a cluster whose query failed loses only its own samples.

    `shift_seconds` moves the time axis: values of `*_timestamp_seconds` families are shifted by it, so
    that a history recorded at another time can be replayed as if it ended at another instant.
    """
    tables = _tables(con)
    snap = Snapshot(now=now)
    metrics = metrics if metrics is not None else enabled_metrics(cfg)
    for cluster in cfg.clusters:
        _run_queries(con, snap, metrics, tables, [cluster, now], shift_seconds)
    return snap


def _run_queries(
    con: duckdb.DuckDBPyConnection,
    snap: Snapshot,
    metrics: list[Metric],
    tables: set[str],
    params: list[Any],
    shift_seconds: float,
) -> None:
    shared: dict[str, tuple[list[str], dict[str, list[tuple]]] | None] = {}
    for metric in metrics:
        if any(t not in tables for t in metric.requires):
            snap.up[metric.name] = False
            continue
        try:
            if metric.shared_query:
                if metric.macro not in shared:  # run once per render; a failure is remembered, not retried
                    shared[metric.macro] = _by_family(con, metric.macro, params)
                if shared[metric.macro] is None:
                    snap.up[metric.name] = False
                    continue
                cols, by_family = shared[metric.macro]
                rows = by_family.get(metric.name, [])
            else:
                cur = con.execute(f"SELECT * FROM {metric.macro}(?, ?)", params)  # noqa: S608 - a catalog name
                cols = [d[0] for d in cur.description]
                rows = cur.fetchall()
        except duckdb.Error as exc:
            log.warning("metric %s: source query failed: %s", metric.name, exc)
            snap.up[metric.name] = False
            continue
        idx = [cols.index(label) for label in metric.labels]
        vi = cols.index("value")
        out: list[Sample] = []
        seen: set[tuple[str, ...]] = set()
        for row in rows:
            value = row[vi]
            if value is None:
                continue
            value = float(value)
            if math.isnan(value):
                continue
            labels = tuple("" if row[i] is None else str(row[i]) for i in idx)
            if labels in seen:  # a query bug must not produce an invalid exposition
                log.warning("metric %s: duplicate sample %s dropped", metric.name, labels)
                continue
            seen.add(labels)
            if metric.is_timestamp:
                value += shift_seconds
            out.append((labels, value))
        snap.samples.setdefault(metric.name, []).extend(out)
        snap.up.setdefault(metric.name, True)  # stays 0 when the query failed for another cluster


def _by_family(
    con: duckdb.DuckDBPyConnection, macro: str, params: list[Any]
) -> tuple[list[str], dict[str, list[tuple]]] | None:
    """Run a shared macro once and split its rows by their `family` column; None when it failed."""
    try:
        cur = con.execute(f"SELECT * FROM {macro}(?, ?)", params)  # noqa: S608 - a catalog name
    except duckdb.Error as exc:
        log.warning("shared query %s failed: %s", macro, exc)
        return None
    cols = [d[0] for d in cur.description]
    fi = cols.index("family")
    out: dict[str, list[tuple]] = {}
    for row in cur.fetchall():
        out.setdefault(row[fi], []).append(row)
    return cols, out


def _family(metric: Metric) -> Family:
    if metric.type == "counter":
        return CounterMetricFamily(metric.family, metric.help, labels=list(metric.labels), unit=metric.unit)
    if metric.type == "info":
        # Info labels are all data; keep the identifying ones as labels too (they are the same set here).
        return InfoMetricFamily(metric.family, metric.help, labels=[])
    return GaugeMetricFamily(metric.family, metric.help, labels=list(metric.labels), unit=metric.unit)


def _add(fam: Family, metric: Metric, labels: tuple[str, ...], value: float, ts: float | None) -> None:
    if metric.type == "info":
        fam.add_metric([], dict(zip(metric.labels, labels, strict=True)), timestamp=ts)
    else:
        fam.add_metric(list(labels), value, timestamp=ts)


def families(snaps: Iterable[tuple[Snapshot, float | None]], metrics: list[Metric]) -> list[Family]:
    """Metric families over one or more snapshots (with sample timestamps for the history export)."""
    snaps = list(snaps)
    fams: list[Family] = []
    for metric in metrics:
        fam = _family(metric)
        # OpenMetrics wants each series' samples together (time ascending within it).
        series: dict[tuple[str, ...], list[tuple[float, float | None]]] = {}
        for snap, ts in snaps:
            for labels, value in snap.samples.get(metric.name, []):
                series.setdefault(labels, []).append((value, ts))
        for labels, points in series.items():
            for value, ts in points:
                _add(fam, metric, labels, value, ts)
        fams.append(fam)
    up = _family(FAMILY_UP)
    render = _family(RENDER_TIME)
    for name in sorted({n for snap, _ in snaps for n in snap.up}):
        for snap, ts in snaps:
            if name in snap.up:
                up.add_metric([name], 1.0 if snap.up[name] else 0.0, timestamp=ts)
    for snap, ts in snaps:
        render.add_metric([], snap.now.timestamp(), timestamp=ts)
    return [*fams, up, render]


class _Static(Collector):
    def __init__(self, fams: list[Family]) -> None:
        self._fams = fams

    def collect(self) -> Iterable[Family]:
        return iter(self._fams)


def _registry(fams: list[Family]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Static(fams))
    return reg


def render(
    con: duckdb.DuckDBPyConnection, cfg: Config, now: datetime, *, shift_seconds: float = 0.0
) -> bytes:
    """The /metrics body (Prometheus text format 0.0.4) describing the database at `now`."""
    metrics = enabled_metrics(cfg)
    snap = snapshot(con, cfg, now, shift_seconds=shift_seconds, metrics=metrics)
    if shift_seconds:
        snap.now = snap.now + timedelta(seconds=shift_seconds)
    return text_format(snap, metrics)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if value != value:
        return "NaN"
    return repr(value)


def text_format(snap: Snapshot, metrics: list[Metric]) -> bytes:
    """Text exposition 0.0.4 written directly: at 90,000 samples building prometheus_client families and
    calling generate_latest took ~15 s on the shared test machine; this is a join of preformatted lines.
    Output is checked by `promtool check metrics` and parsed back with prometheus_client in the tests."""
    out: list[str] = []
    for metric in (*metrics, *INTERNAL):
        if metric is FAMILY_UP:
            rows = [((name,), 1.0 if ok else 0.0) for name, ok in sorted(snap.up.items())]
        elif metric is RENDER_TIME:
            rows = [((), snap.now.timestamp())]
        else:
            rows = snap.samples.get(metric.name, [])
        help_ = metric.help.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {metric.name} {help_}")
        out.append(f"# TYPE {metric.name} {'gauge' if metric.type == 'info' else metric.type}")
        names = metric.labels
        for labels, value in rows:
            if names:
                body = ",".join(f'{n}="{_escape_label(v)}"' for n, v in zip(names, labels, strict=True))
                out.append(f"{metric.name}{{{body}}} {_number(1.0 if metric.type == 'info' else value)}")
            else:
                out.append(f"{metric.name} {_number(value)}")
    return ("\n".join(out) + "\n").encode("utf-8")


def export_history(
    con: duckdb.DuckDBPyConnection,
    cfg: Config,
    start: datetime,
    end: datetime,
    step: timedelta,
    out: IO[bytes],
    *,
    shift: timedelta = timedelta(0),
) -> int:
    """Write an OpenMetrics file of what scrapes every `step` from `start` to `end` would have shown.

    For `promtool tsdb create-blocks-from openmetrics`: families are not interleaved and each series'
    samples are together with ascending timestamps. `shift` moves every sample (and every
    `*_timestamp_seconds` value) in time, so a simulated period can be replayed as the recent past.
    Returns the number of instants written.
    """
    instants = []
    t = start
    while t <= end:
        instants.append(t)
        t += step
    return export_instants(con, cfg, instants, out, shift=shift)


def export_instants(
    con: duckdb.DuckDBPyConnection,
    cfg: Config,
    instants: Iterable[datetime],
    out: IO[bytes],
    *,
    shift: timedelta = timedelta(0),
) -> int:
    """export_history at arbitrary ascending instants (e.g. coarse far back, fine near the end)."""
    metrics = enabled_metrics(cfg)
    snaps: list[tuple[Snapshot, float | None]] = []
    for t in sorted(set(instants)):
        snap = snapshot(con, cfg, t, shift_seconds=shift.total_seconds(), metrics=metrics)
        snap.now = t + shift
        snaps.append((snap, (t + shift).timestamp()))
    out.write(generate_openmetrics(_registry(families(snaps, metrics))))
    return len(snaps)


# ---- HTTP ---------------------------------------------------------------------------------------------

LANDING = b"""<html><head><title>slurmscope exporter</title></head>
<body><h1>slurmscope exporter</h1><p><a href="/metrics">Metrics</a></p></body></html>
"""


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops connections when many scrapers arrive at once (the kernel
    # then makes clients retry after 1 s and 3 s): benchmarks/bench_metrics.py measured p99 1.2-4 s.
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], get_bytes: Callable[[], bytes | None], auth: BasicAuth
    ) -> None:
        self.get_bytes = get_bytes
        self.auth = auth
        self._gz_lock = threading.Lock()
        self._gz: tuple[bytes, bytes] | None = None
        super().__init__(address, _Handler)

    def gzipped(self, body: bytes) -> bytes:
        """The body gzip-compressed, once per rendered body (Prometheus asks for gzip on every scrape)."""
        with self._gz_lock:
            if self._gz is None or self._gz[0] is not body:
                self._gz = (body, gzip.compress(body, compresslevel=6, mtime=0))
            return self._gz[1]

    def shutdown(self) -> None:
        super().shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client speaking plain HTTP to the TLS port, or hanging up mid-request: not worth a traceback.
        log.debug("request from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if not self.server.auth.check(self.headers.get("Authorization")):
            self._send(401, b"Unauthorized\n", "text/plain", {"WWW-Authenticate": 'Basic realm="slurmscope"'})
            return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body = self.server.get_bytes()
            if body is None:
                self._send(503, b"metrics not rendered yet\n", "text/plain")
            elif "gzip" in (self.headers.get("Accept-Encoding") or ""):
                self._send(
                    200,
                    self.server.gzipped(body),
                    CONTENT_TYPE,
                    {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
                )
            else:
                self._send(200, body, CONTENT_TYPE, {"Vary": "Accept-Encoding"})
        elif path == "/":
            self._send(200, LANDING, "text/html; charset=utf-8")
        else:
            self._send(404, b"Not Found\n", "text/plain")

    def _send(self, code: int, body: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


def serve_metrics(
    address: str, port: int, get_bytes: Callable[[], bytes | None], web_config: str | Path | None = None
) -> MetricsServer:
    """Serve get_bytes() on /metrics from a daemon thread; `.shutdown()` stops it and closes the socket.

    With a web config file: TLS when tls_server_config names a certificate, basic auth when
    basic_auth_users is set (bcrypt hashes, as the Prometheus exporter-toolkit).
    """
    wc = load_web_config(web_config) if web_config else WebConfig()
    server = MetricsServer((address, port), get_bytes, BasicAuth(wc.users))
    ctx = server_context(wc)
    if ctx is not None:
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, name="slurmscope-metrics", daemon=True)
    thread.start()
    return server


def _main(argv: list[str] | None = None) -> int:
    """`python -m slurmscope.exporter history ...`: backfill Prometheus from the DuckDB history.

    Writes what scrapes every --step between --start and --end would have shown, as OpenMetrics for
    `promtool tsdb create-blocks-from openmetrics FILE DATA_DIR` (docs/dashboards.md).
    """
    import argparse
    import sys

    from slurmscope.config import load_config
    from slurmscope.db import connect

    ap = argparse.ArgumentParser(prog="python -m slurmscope.exporter")
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("history", help="write an OpenMetrics backfill file")
    h.add_argument("--db", required=True)
    h.add_argument("--config")
    h.add_argument("--start", required=True, help="ISO time, UTC unless it has an offset")
    h.add_argument("--end", required=True)
    h.add_argument("--step", type=float, default=300, help="seconds between instants (default 300)")
    h.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    def when(text: str) -> datetime:
        t = datetime.fromisoformat(text)
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    cfg = load_config(args.config)
    con = connect(args.db, read_only=True)
    try:
        with open(args.out, "wb") as fh:
            n = export_history(con, cfg, when(args.start), when(args.end), timedelta(seconds=args.step), fh)
    finally:
        con.close()
    print(f"{n} instants written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
