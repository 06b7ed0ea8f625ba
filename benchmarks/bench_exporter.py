"""Exporter cost: render time and size on a demo database, and scrape throughput of the served bytes.

    .venv/bin/python benchmarks/bench_exporter.py --gpus 256 --days 7 --renders 20 --scrapes 2000
    .venv/bin/python benchmarks/bench_exporter.py --db /tmp/bm/metrics.duckdb --renders 3 --scrapes 200

(`--db` reuses a database, e.g. the 10,000-GPU one benchmarks/bench_metrics.py builds, rendered at its
last sinfo snapshot.)

A render runs every catalog query once (after each collector/pipeline run), so its time bounds how often
serve can refresh; a scrape only copies bytes, so its cost is independent of the database.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from slurmscope.config import load_config
from slurmscope.db import connect
from slurmscope.demo import Progress, run_demo
from slurmscope.exporter import render, serve_metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--renders", type=int, default=20)
    ap.add_argument("--scrapes", type=int, default=2000)
    ap.add_argument("--db", help="reuse this database instead of building a demo")
    args = ap.parse_args()
    if args.db:
        con = connect(args.db, read_only=True)
        cluster, end = con.execute(
            "SELECT cluster, max(snapshot_time) FROM node_states GROUP BY 1 LIMIT 1"
        ).fetchone()
        con.close()
        measure(args, args.db, load_config(None, env={}).with_overrides(cluster={"name": cluster}), end)
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        cfg = load_config(None, env={}).with_overrides(cluster={"name": "simcluster"})
        t0 = time.perf_counter()
        result = run_demo(
            cfg,
            str(db),
            gpus=args.gpus,
            days=args.days,
            seed=1,
            port=0,
            out_dir=Path(tmp) / "out",
            serve=False,
            progress=Progress(stream=io.StringIO()),
        )
        print(f"demo build: {time.perf_counter() - t0:.1f} s")
        end = datetime.fromisoformat(result.summary["end"]).replace(tzinfo=UTC)
        measure(args, db, cfg, end)


def measure(args: argparse.Namespace, db, cfg, end: datetime) -> None:
    """Render --renders times at `end`, then time --scrapes sequential scrapes of the body."""
    con = connect(db, read_only=True)
    times = []
    for _ in range(args.renders):
        t = time.perf_counter()
        body = render(con, cfg, end)
        times.append(time.perf_counter() - t)
    con.close()
    samples = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"render: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
        f"over {args.renders}; {len(body)} bytes, {samples} samples"
    )
    server = serve_metrics("127.0.0.1", 0, lambda: body)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    t = time.perf_counter()
    for _ in range(args.scrapes):
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
    dt = time.perf_counter() - t
    server.shutdown()
    print(f"scrape: {args.scrapes} sequential scrapes in {dt:.2f} s = {dt / args.scrapes * 1000:.2f} ms each")


if __name__ == "__main__":
    main()
