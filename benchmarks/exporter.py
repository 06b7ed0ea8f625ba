"""The exporter: render once per run, serve the bytes; render time and size, and scrape latency under load.

    .venv/bin/python -m benchmarks.exporter --workdir /tmp/bm --seconds 10 --renders 3      # build + measure
    .venv/bin/python -m benchmarks.exporter --db /tmp/bm/metrics.duckdb --seconds 10 --renders 1 --accept-gzip

1. The database: `slurmscope demo --no-serve` at `--gpus` x `--days` (simulator -> ingest -> pipelines),
   plus per-minute GPU telemetry over the last `--telemetry-hours` for every GPU the simulator wrote none
   for (it spools a handful of nodes), generated in DuckDB, so the per-GPU families carry one series per
   GPU, as a fleet of node agents would feed them. `--db` reuses a database built before.
2. Render: `slurmscope.exporter.render` at the last telemetry minute, `--renders` times (what serve does
   after every collector run; a scrape never renders).
3. Serve: the rendered bytes from `slurmscope.exporter.serve_metrics` on 127.0.0.1 (ephemeral port), the
   same server `serve` runs. `--scrapes` sequential scrapes from this process give the bare cost of one;
   then `--scrapers` client processes each scrape in a closed loop (next request as soon as the last body
   arrived, a new connection each time) for `--seconds`: a far harsher load than 20 Prometheus servers
   scraping every 15 s. Then a paced run: every scraper once per second, all in step. Then the
   Prometheus-like run: every scraper once per `--prometheus-interval` (15 s), the scrapers' phases spread
   evenly over the interval, for 4 intervals (80 scrapes).
A single scraper gives the unloaded baseline; the server's CPU per scrape is reported for each run.
Client processes, not threads, so the clients' own Python does not share the server's GIL. Latency is
request sent -> whole body read, per scrape. `--accept-gzip` makes the scrapers ask for gzip as Prometheus
does (the server compresses once per render). Goal (issue 9): p99 <= 100 ms with 20 concurrent scrapers.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness import parser, run, timer

TELEMETRY = """
INSERT INTO gpu_samples (cluster, node, gpu_uuid, minute, gpu_index, gpu_minor, pci_bus_id, model, samples,
    util_gpu_mean, util_gpu_max, util_mem_mean, mem_used_max_bytes, mem_total_bytes, power_mean_watts,
    power_max_watts, energy_joules, temp_gpu_max_celsius, temp_mem_max_celsius, sm_clock_mean_mhz,
    mem_clock_mean_mhz, throttle_seconds, throttle_reasons, pcie_replay_delta, ecc_corrected_delta,
    ecc_uncorrected_delta, ecc_corrected_total, ecc_uncorrected_total, remapped_pending, remapped_failed,
    retired_pages, nvlink_errors_delta, null_fields)
SELECT n.cluster, n.node, 'GPU-' || md5(n.node || '/' || g.i), $end - to_minutes(m.k), g.i, g.i,
       printf('0000:%02x:00.0', 16 + g.i), coalesce(n.gpu_type, 'h100'), 6,
       (hash(n.node, g.i, m.k) % 101)::DOUBLE, 100.0, 40.0, 60000000000, 85899345920, 300.0 + g.i, 650.0,
       21000.0, 55.0 + g.i, 60.0, 1755.0, 2619.0, 0.0, 0, 0, 0, 0, 0, 0, false, false, 0, 0, 0
FROM (SELECT cluster, node, max(gpus_total) AS gpus, any_value(gpu_type) AS gpu_type FROM node_states
      WHERE snapshot_time = (SELECT max(snapshot_time) FROM node_states) AND gpus_total > 0 GROUP BY ALL) n,
     range(0, 8) g(i), range(0, $minutes) m(k)
WHERE g.i < n.gpus AND n.node NOT IN (SELECT DISTINCT node FROM gpu_samples)   -- the simulator's own nodes
"""
INVENTORY = """
INSERT INTO gpu_inventory (cluster, node, gpu_uuid, seen_at, gpu_index, gpu_minor, pci_bus_id, model, serial,
                           driver_version, cuda_version, mig_mode)
SELECT DISTINCT cluster, node, gpu_uuid, $end - INTERVAL 1 HOUR, gpu_index, gpu_minor, pci_bus_id, model,
       NULL, '550.54.15', '12.4', false
FROM gpu_samples WHERE minute = $end AND node NOT IN (SELECT node FROM gpu_inventory)
"""


def build(db: Path, out: Path, gpus: int, days: float, seed: int, hours: float) -> dict:
    from slurmscope.config import load_config
    from slurmscope.db import connect
    from slurmscope.demo import run_demo

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # the demo's summary; stdout is the record's
        res = run_demo(
            load_config(None, env={}), str(db), gpus=gpus, days=days, seed=seed, out_dir=out, serve=False
        )
    t1 = time.perf_counter()
    end = datetime.fromisoformat(res.summary["end"]).replace(tzinfo=UTC)
    con = connect(db)
    try:
        params = {"end": end, "minutes": max(1, int(hours * 60))}
        con.execute(TELEMETRY, params)
        con.execute(INVENTORY, {"end": end})
        con.execute("CHECKPOINT")
        samples = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
        gpus_seen = con.execute("SELECT count(DISTINCT gpu_uuid) FROM gpu_samples").fetchone()[0]
    finally:
        con.close()
    return {
        "demo_s": round(t1 - t0, 1),
        "telemetry_s": round(time.perf_counter() - t1, 1),
        "gpu_samples": samples,
        "gpus_with_telemetry": gpus_seen,
        "end": end.isoformat(),
        "jobs": res.summary["jobs_submitted"],
    }


def scraper(
    port: int, seconds: float, pace: float, start_at: float, q, phase: float = 0.0, gzip_ok: bool = False
) -> None:
    """One Prometheus stand-in: GET /metrics until the deadline; latencies in ms go back on `q`.

    With gzip_ok it asks for gzip as Prometheus does (`Accept-Encoding: gzip`) and fails unless it gets it.
    """
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    lat, errors, size = [], 0, 0
    time.sleep(phase)  # Prometheus spreads its targets' scrapes over the interval
    nxt = time.monotonic()
    while time.time() < deadline:
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            if resp.status != 200 or gzip_ok != (resp.getheader("Content-Encoding") == "gzip"):
                errors += 1
                continue
            size = len(body)
        except OSError:
            errors += 1
            continue
        lat.append((time.perf_counter() - t0) * 1000)
        if pace:
            nxt += pace
            time.sleep(max(0.0, nxt - time.monotonic()))
    q.put((lat, errors, size))


def load_test(
    port: int, scrapers: int, seconds: float, pace: float, spread: bool = False, gzip_ok: bool = False
) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start_at = time.time() + 2.0 + 0.1 * scrapers  # let every process start before the clock runs
    phases = [pace * i / scrapers if spread else 0.0 for i in range(scrapers)]
    procs = [
        ctx.Process(target=scraper, args=(port, seconds, pace, start_at, q, ph, gzip_ok)) for ph in phases
    ]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    lat = sorted(x for r, _, _ in results for x in r)
    errors = sum(e for _, e, _ in results)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p / 100 * len(lat)))], 1) if lat else float("nan")

    return {
        "scrapers": scrapers,
        "seconds": seconds,
        "pace_s": pace or None,
        "scrapes": len(lat),
        "errors": errors,
        "scrapes_per_s": round(len(lat) / seconds, 1),
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "max_ms": round(lat[-1], 1) if lat else None,
        "body_bytes": results[0][2],
    }


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.db is not None:
        return measure(args, args.db)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        return measure(args, args.workdir / "metrics.duckdb", args.workdir)
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        return measure(args, Path(tmp) / "metrics.duckdb", Path(tmp))


def measure(args: argparse.Namespace, db: Path, build_in: Path | None = None) -> dict[str, Any]:
    """Build the database first when `build_in` is given, then render and serve."""
    from slurmscope.config import load_config
    from slurmscope.db import connect
    from slurmscope.exporter import render, serve_metrics

    out: dict[str, Any] = {}
    if build_in is not None:
        out["build"] = build(db, build_in / "demo", args.gpus, args.days, args.seed, args.telemetry_hours)
    cfg = load_config(None, env={})
    con = connect(db, read_only=True)
    try:
        end = con.execute("SELECT max(minute) FROM gpu_samples").fetchone()[0]
        times = []
        for _ in range(args.renders):
            with timer() as t:
                payload = render(con, cfg, end)
            times.append(t["wall_s"])
    finally:
        con.close()
    lines = payload.decode().splitlines()
    out["render"] = {
        "median_s": round(statistics.median(times), 3),
        "all_s": times,
        "bytes": len(payload),
        "series": sum(1 for ln in lines if ln and not ln.startswith("#")),
        "families": sum(1 for ln in lines if ln.startswith("# TYPE")),
        "gpu_series": sum(1 for ln in lines if ln.startswith("slurmscope_gpu_utilization_ratio{")),
    }
    server = serve_metrics("127.0.0.1", 0, lambda: payload)
    try:
        port = server.server_address[1]
        if args.scrapes:
            url = f"http://127.0.0.1:{port}/metrics"
            with timer() as t:
                for _ in range(args.scrapes):
                    with urllib.request.urlopen(url, timeout=10) as r:
                        r.read()
            out["sequential"] = {
                **t,
                "scrapes": args.scrapes,
                "ms_per_scrape": 1000 * t["wall_s"] / args.scrapes,
            }
        runs = [
            ("single_scraper", 1, 0.0, args.seconds, False),
            ("closed_loop", args.scrapers, 0.0, args.seconds, False),
            ("paced_1s", args.scrapers, 1.0, args.seconds, False),
        ]
        if args.prometheus_interval:
            runs.append(
                (
                    "prometheus_interval",
                    args.scrapers,
                    args.prometheus_interval,
                    4 * args.prometheus_interval,
                    True,
                )
            )
        for name, n, pace, secs, spread in runs if args.seconds else []:
            cpu0 = time.process_time()
            out[name] = load_test(port, n, secs, pace, spread, gzip_ok=args.accept_gzip)
            out[name]["server_cpu_ms_per_scrape"] = round(
                (time.process_time() - cpu0) * 1000 / max(1, out[name]["scrapes"]), 2
            )
    finally:
        server.shutdown()
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument("--days", type=float, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--telemetry-hours", type=float, default=6)
    ap.add_argument(
        "--db", type=Path, help="reuse this database (built by an earlier run) instead of building"
    )
    ap.add_argument(
        "--workdir",
        type=Path,
        help="build the database here and keep it (default: a temporary directory, removed)",
    )
    ap.add_argument("--renders", type=int, default=5)
    ap.add_argument("--scrapes", type=int, default=0, help="sequential scrapes from this process first")
    ap.add_argument("--scrapers", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=20, help="length of each load run (0: no load runs)")
    ap.add_argument(
        "--prometheus-interval",
        type=float,
        default=15.0,
        help="also run scrapers once per this many seconds, spread over it (0: skip)",
    )
    ap.add_argument(
        "--accept-gzip",
        action="store_true",
        help="scrapers send Accept-Encoding: gzip, as Prometheus does (the server compresses once per render)",
    )
    run("exporter", ap, body)


if __name__ == "__main__":
    main()
