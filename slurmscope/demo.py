"""`slurmscope demo`: the whole product on a simulated cluster, with no Slurm, no GPU and no network.

Simulate -> ingest through the same parsers as recorded files -> pipelines -> dashboards, alerts, report
-> serve /metrics. Stages import their modules lazily, so `slurmscope --help` stays fast.
Progress goes to stderr as plain text bars; the closing summary goes to stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurmscope.config import Config, check_listen

BATCH = 48  # snapshot files per load transaction


@dataclass
class DemoResult:
    """What the demo built; tests and the closing summary read it."""

    out_dir: Path
    db_path: str
    sim_dir: Path
    summary: dict
    ingested: dict[str, tuple[int, int, int]] = field(
        default_factory=dict
    )  # kind -> files, rows, quarantined
    pipelines: dict[str, int] | None = None
    built: dict[str, list[Path]] = field(default_factory=dict)
    report_month: str | None = None
    port: int | None = None
    urls: list[str] = field(default_factory=list)


class Progress:
    """One plain-text bar per stage on stderr: redrawn in place on a terminal, one line per finished stage
    otherwise (a CI log or a pipe gets no carriage returns)."""

    def __init__(self, stream=None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.n_stages = 8
        self.i = 0

    def stage(self, name: str) -> Callable[[int, int], None]:
        self.i += 1
        label = f"[{self.i}/{self.n_stages}] {name:<22}"
        t0 = time.monotonic()
        last = [-1]

        def update(done: int, total: int) -> None:
            total = max(total, 1)
            if last[0] == self.width + 1:
                return
            filled = int(self.width * done / total)
            if done < total and (filled == last[0] or not self.tty):
                return
            last[0] = filled
            bar = "#" * filled + "-" * (self.width - filled)
            end = f" {time.monotonic() - t0:5.1f}s\n" if done >= total else "\r"
            if done >= total:
                last[0] = self.width + 1
            self.stream.write(f"{label} [{bar}] {100 * done // total:3d}%{end}")
            self.stream.flush()

        update(0, 1)
        return update

    def note(self, text: str) -> None:
        self.stream.write(f"      {text}\n")
        self.stream.flush()


def snapshot_time(path: Path) -> datetime:
    """Simulator snapshot files are named `<epoch>.txt`: the name is the snapshot time."""
    return datetime.fromtimestamp(int(path.stem), UTC)


def ingest_snapshots(
    con, cfg: Config, kind: str, paths: list[Path], progress: Callable[[int, int], None] | None = None
) -> tuple[int, int]:
    """Parse each snapshot with its collector's parser at the time in its name; load in batches.

    Batching keeps a 30-day demo fast (one transaction per BATCH files instead of per file) while every
    line still goes through the collector's own parse() and base.load (same upsert keys, quarantine).
    """
    import polars as pl

    from slurmscope.collectors.base import Parsed, RunRecord, load, sha256
    from slurmscope.collectors.ingest import ingestable

    module = ingestable(kind).module
    tz = cfg.timezone
    rows = quarantined = 0
    for start in range(0, len(paths), BATCH):
        chunk = paths[start : start + BATCH]
        tables: dict[str, list] = {}
        quar = []
        digest = []
        for p in chunk:
            data = p.read_bytes()
            digest.append(sha256(data))
            parsed = module.parse(
                data, cluster=cfg.cluster, snapshot_time=snapshot_time(p), tz=tz, source=f"{kind}:{p.name}"
            )
            for t, df in parsed.tables.items():
                tables.setdefault(t, []).append(df)
            if parsed.quarantine.height:
                quar.append(parsed.quarantine)
        merged = Parsed(tables={t: pl.concat(dfs, how="diagonal_relaxed") for t, dfs in tables.items()})
        if quar:
            merged.quarantine = pl.concat(quar)
        run = RunRecord(
            cluster=cfg.cluster, collector=kind, source=f"{kind}:{chunk[0].name}..{chunk[-1].name}"
        )
        load(con, merged, module.TABLES, run, content_sha=sha256("".join(digest).encode()))
        rows += merged.rows
        quarantined += merged.quarantine.height
        if progress:
            progress(start + len(chunk), len(paths))
    return rows, quarantined


def last_full_month(start: datetime, end: datetime) -> str:
    """The last calendar month wholly inside [start, end); else the month the period starts in."""
    first_of_end = end.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    prev = (first_of_end - timedelta(days=1)).replace(day=1)
    if prev >= start.replace(hour=0, minute=0, second=0, microsecond=0) and first_of_end <= end:
        return prev.strftime("%Y-%m")
    return start.strftime("%Y-%m")


def run_demo(
    cfg: Config,
    db_path: str,
    *,
    gpus: int = 512,
    days: float = 30,
    seed: int = 42,
    port: int = 9400,
    out_dir: Path = Path("demo"),
    serve: bool = True,
    progress: Progress | None = None,
    sim_options: dict | None = None,
) -> DemoResult:
    """Build everything into `out_dir` (and the database at `db_path`); serve /metrics unless serve=False."""
    from slurmscope.db import connect
    from slurmscope.simulator import simulate

    if serve:  # fail now, not after the build
        check_listen(cfg.get("exporter", "address"), port, "pass --port")
        check_listen("127.0.0.1", port + 1, "the demo's node agent uses --port + 1; pass another --port")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prog = progress or Progress()
    sim_dir = out_dir / "sim"

    bar = prog.stage("simulate")
    summary = simulate(
        gpus=gpus, days=days, seed=seed, out_dir=sim_dir, cluster=cfg.cluster, **(sim_options or {})
    )
    bar(1, 1)
    prog.note(
        f"{summary['jobs_submitted']} jobs on {summary['gpus']} GPUs, "
        f"{summary['start']} .. {summary['end']} UTC -> {sim_dir}"
    )
    result = DemoResult(out_dir=out_dir, db_path=str(db_path), sim_dir=sim_dir, summary=summary)
    sim_start = datetime.fromisoformat(summary["start"]).replace(tzinfo=UTC)
    sim_end = datetime.fromisoformat(summary["end"]).replace(tzinfo=UTC)

    con = connect(db_path)
    try:
        _ingest(con, cfg, result, prog)
        _telemetry(con, cfg, result, prog)
        _pipelines(con, cfg, result, prog, sim_end)
        _builders(result, prog)
        _report(con, cfg, result, prog, sim_start, sim_end)
    finally:
        con.close()
    if not serve:
        prog.stage("serve /metrics")(1, 1)
        prog.note("skipped (--no-serve)")
        print_summary(result, serve=False, port=port)
        return result
    server, stop = _start_serving(cfg, db_path, result, prog, port, sim_end)
    print_summary(result, serve=True, port=port)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        if stop is not None:
            stop.set()
    return result


def _ingest(con, cfg: Config, result: DemoResult, prog: Progress) -> None:
    from slurmscope.collectors.ingest import ingest_files
    from slurmscope.collectors.registry import COLLECTORS

    sim = result.sim_dir
    bar = prog.stage("ingest sacct+events")
    res = ingest_files(con, cfg, "sacct", [sim / "sacct.txt"], fmt=None, timezone="UTC")
    result.ingested["sacct"] = (1, sum(r.rows for r in res), sum(r.quarantined for r in res))
    bar(1, 2)
    res = ingest_files(con, cfg, "events", [sim / "events.txt"], timezone="UTC")
    result.ingested["events"] = (1, sum(r.rows for r in res), sum(r.quarantined for r in res))
    bar(2, 2)
    # The simulator writes a snapshots/<kind> folder for each snapshot kind it simulates.
    kinds = [
        (c.kind, sorted((sim / "snapshots" / c.kind).glob("*.txt"), key=lambda p: int(p.stem)))
        for c in COLLECTORS
        if c.ingestable and (sim / "snapshots" / c.kind).is_dir()
    ]
    total = sum(len(p) for _k, p in kinds)
    bar = prog.stage("ingest snapshots")
    done = 0
    for kind, paths in kinds:
        base = done

        def step(d: int, _t: int, base: int = base) -> None:
            bar(base + d, total)

        rows, quar = ingest_snapshots(con, cfg, kind, paths, step)
        result.ingested[kind] = (len(paths), rows, quar)
        done += len(paths)
    bar(total, total)
    bad = {k: v[2] for k, v in result.ingested.items() if v[2]}
    if bad:
        prog.note(f"quarantined lines: {bad} (see `slurmscope status`)")


def _telemetry(con, cfg: Config, result: DemoResult, prog: Progress) -> None:
    bar = prog.stage("ingest GPU telemetry")
    spool = result.sim_dir / "spool"
    files = sorted(spool.glob("*/*.jsonl")) if spool.is_dir() else []
    if not files:
        bar(1, 1)
        prog.note("no simulated telemetry in this run")
        return
    from slurmscope.collectors.nvml import ingest_spool_files as load

    rows = quar = 0
    for i in range(0, len(files), 50):
        res = load(con, cfg, files[i : i + 50])
        rows += sum(r.rows for r in res)
        quar += sum(r.quarantined for r in res)
        bar(min(i + 50, len(files)), len(files))
    result.ingested["nvml"] = (len(files), rows, quar)


def _pipelines(con, cfg: Config, result: DemoResult, prog: Progress, now: datetime) -> None:
    bar = prog.stage("pipelines")
    from slurmscope.pipelines.runner import run_pipelines

    result.pipelines = run_pipelines(con, cfg, full=True, now=now)
    bar(1, 1)
    failed = [k for k, v in result.pipelines.items() if v < 0]
    prog.note(
        f"marts: {sum(v for v in result.pipelines.values() if v > 0)} rows from "
        f"{len(result.pipelines)} pipelines" + (f"; failed: {failed}" if failed else "")
    )


def _builders(result: DemoResult, prog: Progress) -> None:
    bar = prog.stage("dashboards + alerts")
    from slurmscope.alerts.build import build_all as build_alerts
    from slurmscope.dashboards.build import build_all as build_dashboards

    for i, (stage, build) in enumerate((("dashboards", build_dashboards), ("alerts", build_alerts))):
        result.built[stage] = list(build(result.out_dir / stage))
        bar(i + 1, 2)


def _report(con, cfg: Config, result: DemoResult, prog: Progress, start: datetime, end: datetime) -> None:
    bar = prog.stage("monthly report")
    from slurmscope.report import build_report

    month = last_full_month(start, end)
    result.report_month = month
    result.built["report"] = list(
        build_report(con, cfg, month=month, out_dir=result.out_dir / "report", formats=["html", "csv"])
    )
    bar(1, 1)


def _start_serving(
    cfg: Config, db_path: str, result: DemoResult, prog: Progress, port: int, sim_end: datetime
):
    """Serve /metrics for the simulated cluster, rendered as of the end of the simulated period, and start
    the fake-NVML node agent; returns the server and the agent's stop event."""
    bar = prog.stage("serve /metrics")
    from slurmscope.db import connect
    from slurmscope.exporter import render, serve_metrics

    con = connect(db_path, read_only=True)
    try:
        shift = (datetime.now(UTC) - sim_end).total_seconds()
        body = render(con, cfg, sim_end, shift_seconds=shift)
    finally:
        con.close()
    address = cfg.get("exporter", "address")
    server = serve_metrics(address, port, lambda: body)
    result.port = port
    stop, agent_url = _start_agent(cfg, result, port + 1)
    bar(1, 1)
    result.urls = [f"http://{address}:{port}/metrics"] + ([f"{agent_url}/metrics"] if agent_url else [])
    return server, stop


def _start_agent(cfg: Config, result: DemoResult, port: int):
    """One `slurmscope agent` on the fake NVML (4 busy and 4 idle H100s), so GPU panels have live series."""
    import json
    import threading

    from slurmscope.agent.agent import run_agent

    base = (result.out_dir / "agent").resolve()
    (base / "gpu-jobs").mkdir(parents=True, exist_ok=True)
    spec = {
        "node": "h100-001",
        "mapping_dir": str(base / "gpu-jobs"),
        "gpus": [
            {"model": "h100", "state": "load", "count": 4},
            {"model": "h100", "state": "idle", "count": 4},
        ],
    }
    (base / "fake-nvml.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    stop = threading.Event()
    thread = threading.Thread(
        target=run_agent,
        name="slurmscope-demo-agent",
        daemon=True,
        kwargs={
            "port": port,
            "spool": str(base / "spool"),
            "interval": 10.0,
            "fake": str(base / "fake-nvml.json"),
            "address": "127.0.0.1",
            "stop": stop,
            "kmsg_path": None,
        },
        args=(cfg,),
    )
    thread.start()
    return stop, f"http://127.0.0.1:{port}"


def _rel(paths: Iterable[Path], base: Path) -> str:
    paths = list(paths)
    return f"{len(paths)} files" if paths else "nothing"


def print_summary(result: DemoResult, *, serve: bool, port: int) -> None:
    out = result.out_dir
    s = result.summary
    lines = [
        "",
        "slurmscope demo: built",
        f"  simulated cluster  {s['gpus']} GPUs on {sum(s['nodes'].values())} nodes "
        f"({', '.join(f'{n} {kind}' for kind, n in s['nodes'].items())}), {s['jobs_submitted']} jobs, "
        f"{s['start']} .. {s['end']} UTC, ground truth in {result.sim_dir}/events.jsonl",
        f"  database           {result.db_path}  (try: slurmscope --db {result.db_path} status)",
    ]
    for kind, (files, rows, quar) in result.ingested.items():
        lines.append(f"    ingested {kind:<12} {files:>5} files {rows:>9} rows {quar:>4} quarantined")
    if result.pipelines is not None:
        lines.append(f"  marts              {', '.join(f'{k}={v}' for k, v in result.pipelines.items())}")
    for stage in ("dashboards", "alerts", "report"):
        if stage in result.built:
            lines.append(f"  {stage:<18} {out / stage}/ ({_rel(result.built[stage], out)})")
    if result.report_month:
        lines.append(f"  report month       {result.report_month}: open {out / 'report' / 'report.html'}")
    lines += [
        "",
        "Point Prometheus at it (prometheus.yml):",
        "  scrape_configs:",
        "    - job_name: slurmscope",
        f"      static_configs: [{{targets: ['127.0.0.1:{port}']}}]",
        "    - job_name: slurmscope-agent   # the demo's node agent on the fake NVML",
        f"      static_configs: [{{targets: ['127.0.0.1:{port + 1}']}}]",
        f"  rule_files: ['{(out / 'alerts').resolve()}/slurmscope.rules.yaml']",
        "Point Grafana at it: copy "
        f"{(out / 'dashboards' / 'provisioning').resolve()}/* into /etc/grafana/provisioning/ and the JSON in "
        f"{(out / 'dashboards' / 'dashboards').resolve()} where the dashboards provider points "
        "(see docs/dashboards.md); the datasource is that Prometheus.",
    ]
    if not serve:
        lines.append(
            "/metrics not served (--no-serve); run the demo again without --no-serve to serve it "
            "(`slurmscope serve` would start the live Slurm collectors against this database)."
        )
    else:
        lines += [
            "",
            f"Serving {result.urls[0]}  (Ctrl-C to stop)",
            *(f"Node agent on the fake NVML: {u} (live GPU series)" for u in result.urls[1:]),
        ]
    lines += [
        "",
        "Next:",
        f"  export SLURMSCOPE_DB={result.db_path}",
        '  slurmscope query "SELECT account, round(sum(gpus*elapsed_seconds)/3600) AS gpu_hours '
        'FROM jobs GROUP BY 1 ORDER BY 2 DESC" --format table',
        f"  slurmscope report --month {result.report_month or 'YYYY-MM'} --out reports/",
        "  ./scripts/test     # every test",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
