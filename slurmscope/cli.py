"""The `slurmscope` command: a thin layer over the library (see ARCHITECTURE.md §4 for the contract).

Data goes to stdout, logs to stderr, and every failure exits non-zero with a message that says what to
fix. Each command imports its implementation lazily so `--help` stays fast and nothing runs at import.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurmscope.config import ALL_CLUSTERS, Config, ConfigError, check_listen, is_cluster_name, load_config

if TYPE_CHECKING:
    from slurmscope.collectors.registry import Collector


class KindChoice(click.Choice):
    """The kinds of the collector registry that pass `accepts`, read when click first needs them.

    Importing the registry imports every collector (polars, duckdb): `--help` and `slurmscope agent` on a
    GPU node must not pay for that, so the list is derived on first use instead of at import.
    """

    def __init__(self, accepts: Callable[[Collector], bool], *extra: str) -> None:
        self._accepts = accepts
        self._extra = extra
        self.case_sensitive = True

    @functools.cached_property
    def choices(self) -> tuple[str, ...]:
        from slurmscope.collectors.registry import COLLECTORS

        return tuple(c.kind for c in COLLECTORS if self._accepts(c)) + self._extra


@dataclass
class Context:
    """`config`: the one cluster a command acts on (`--cluster NAME`, else the first configured); `base`:
    the whole file, every configured cluster; `every`: `--cluster all` was given; `named`: a name was."""

    config: Config
    db_path: str
    base: Config | None = None
    every: bool = False
    named: bool = False  # `--cluster NAME` was given

    def targets(self) -> list[Config]:
        """The clusters of a command that takes `--cluster all`: each configured one, else the selected one."""
        if self.every and self.base is not None:
            return [self.base.for_cluster(name) for name in self.base.clusters]
        return [self.config]

    def check_listed(self) -> None:
        """A command that reaches Slurm refuses a name the file's `[[clusters]]` does not list: it would run
        the top-level Slurm access under a mistyped name."""
        base = self.base
        if base is not None and base.listed and self.config.cluster not in base.clusters:
            raise click.BadParameter(
                f"cluster {self.config.cluster!r} is not in [[clusters]] of {base.source}"
                f" (configured: {', '.join(base.clusters)})",
                param_hint="--cluster",
            )


ACCEPTS_ALL = {"collect", "pipelines", "report", "export", "restore", "status", "serve"}
"""Commands that take `--cluster all` (ARCHITECTURE.md §4); the others (ingest, agent, demo, doctor) act on
one cluster, and the rest (query, dashboards, alerts, simulate) on none."""
NO_CLUSTER = {"query", "dashboards", "alerts", "simulate"}


def _context(ctx: click.Context) -> Context:
    return ctx.ensure_object(dict)["app"]


class _Main(click.Group):
    """Turns a foreseeable OS fault (a directory that cannot be written, a file that cannot be read, a full
    disk) into one line naming the path, instead of a traceback, for every command."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise click.ClickException(f"{where}{exc.strerror or exc}") from None


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="SLURMSCOPE_CONFIG",
    help="TOML config file (default ./slurmscope.toml if present, else built-in defaults).",
)
@click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False),
    envvar="SLURMSCOPE_DB",
    help="DuckDB file (default from config: ./slurmscope.duckdb).",
)
@click.option(
    "--cluster",
    help="Cluster name (default: the first configured, else 'default'); 'all': every configured cluster "
    "(collect, pipelines run, report, export, restore, status, serve).",
)
@click.option("-v", "--verbose", count=True, help="More logging on stderr.")
@click.pass_context
def main(
    ctx: click.Context, config_path: str | None, db_path: str | None, cluster: str | None, verbose: int
) -> None:
    """Observability and accounting analytics for Slurm GPU clusters."""
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        cfg = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    every = cluster is not None and cluster.lower() == ALL_CLUSTERS
    if every and ctx.invoked_subcommand not in ACCEPTS_ALL | NO_CLUSTER:
        raise click.BadParameter(
            f"'all' is for {', '.join(sorted(ACCEPTS_ALL))}; `{ctx.invoked_subcommand}` acts on one cluster",
            param_hint="--cluster",
        )
    if cluster is not None and not every and not is_cluster_name(cluster):
        raise click.BadParameter(
            f"expects a cluster name (letters, digits, '_', '.', '-', at most 64), got {cluster!r}",
            param_hint="--cluster",
        )
    selected = cfg.for_cluster(cluster if cluster and not every else cfg.cluster)
    ctx.ensure_object(dict)["app"] = Context(
        config=selected,
        db_path=db_path or cfg.db_path,
        base=cfg,
        every=every,
        named=bool(cluster) and not every,
    )


def _require_cluster_data(con, cluster: str) -> None:
    """Refuse to run for a cluster the database has no rows of while others have some (docs/ingest.md)."""
    from slurmscope.db import missing_cluster

    problem = missing_cluster(con, cluster)
    if problem:
        raise click.ClickException(problem)


def _connect(app: Context, *, read_only: bool = False, create: bool = True):
    """Open the database, waiting while `serve` holds the write lock for one of its short jobs.

    Only commands that bring data in create a missing file: for the others a mistyped --db would otherwise
    give an empty database and a run that "succeeds" on nothing.
    """
    from slurmscope.db import LOCK_WAIT_SECONDS, connect_waiting

    if not create and app.db_path != ":memory:" and not Path(app.db_path).exists():
        raise click.ClickException(
            f"database {app.db_path} does not exist (run a collector or `slurmscope demo` first)"
        )
    try:
        return connect_waiting(app.db_path, read_only=read_only, wait_seconds=LOCK_WAIT_SECONDS)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:  # duckdb.IOException: lock held too long, unreadable file
        raise click.ClickException(f"cannot open database {app.db_path}: {exc}") from None


@main.command()
@click.argument("kind", type=KindChoice(lambda c: c.ingestable))
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--format", "fmt", help="Field list of a headerless capture (sacct --format, sinfo/squeue -o/-O)."
)
@click.option("--delimiter", help="Field delimiter (default '|'); multi-byte allowed.")
@click.option(
    "--timezone", "tz", help="Zone of the times in the files (default: the configured cluster zone)."
)
@click.option(
    "--at",
    "at",
    help="When the snapshot was taken (ISO 8601 or epoch seconds), for outputs that print no time of their own.",
)
@click.pass_context
def ingest(
    ctx: click.Context,
    kind: str,
    files: tuple[str, ...],
    fmt: str | None,
    delimiter: str | None,
    tz: str | None,
    at: str | None,
) -> None:
    """Load recorded Slurm or NVML output files into the database."""
    import duckdb

    from slurmscope.collectors.ingest import IngestError, ingest_files

    app = _context(ctx)
    con = _connect(app)
    try:
        results = ingest_files(
            con, app.config, kind, [Path(f) for f in files], fmt=fmt, delimiter=delimiter, timezone=tz, at=at
        )
    except IngestError as exc:
        raise click.ClickException(str(exc)) from None
    except duckdb.Error as exc:  # disk full, I/O error: the failed file's transaction was rolled back
        raise click.ClickException(f"ingest failed, database {app.db_path}: {exc}") from None
    finally:
        con.close()
    for r in results:
        click.echo(f"{r.path}: {r.rows} rows loaded, {r.quarantined} quarantined", err=True)
        for w in r.warnings:
            click.echo(f"{r.path}: warning: {w}", err=True)
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise click.ClickException(
            "; ".join(f"{r.path}: {r.error}" for r in failed) + " (run recorded as failed)"
        )


def _since_date(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        day = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"expected YYYY-MM-DD (UTC), got {value!r}") from None
    return day.replace(tzinfo=UTC) if day.tzinfo is None else day.astimezone(UTC)


@main.command()
@click.argument("kind", required=False, default="all", type=KindChoice(lambda c: c.live, "all"))
@click.option("--once", is_flag=True, help="Run once and exit (the only mode outside `serve`).")
@click.option(
    "--since",
    callback=_since_date,
    metavar="DATE",
    help="First import the accounting history from DATE (UTC), resumable; sacct or all only.",
)
@click.pass_context
def collect(ctx: click.Context, kind: str, once: bool, since: datetime | None) -> None:
    """Run live collectors against Slurm (argument lists, per-command timeouts, TZ=UTC)."""
    from slurmscope.collectors.collect import backfill_with
    from slurmscope.collectors.collect import collect as run_collect

    app = _context(ctx)
    app.check_listed()
    if since is not None and kind not in ("all", "sacct"):
        raise click.BadParameter(f"--since imports job history: use it with sacct or all, not {kind}")
    failed: list[str] = []
    con = _connect(app)
    try:
        for cfg in app.targets():
            try:
                if since is not None:
                    _backfill(con, cfg, since, backfill_with)
                outcomes = run_collect(con, cfg, kind)
            except ValueError as exc:
                raise click.ClickException(str(exc)) from None
            where = f"{cfg.cluster}: " if app.every else ""
            for o in outcomes:
                click.echo(
                    f"{where}{o.collector}: {o.status} rows={o.rows}"
                    + (f" error={o.error}" if o.error else ""),
                    err=True,
                )
                if o.warning:
                    click.echo(f"{where}{o.collector}: warning: {o.warning}", err=True)
            failed += [f"{where}{o.collector}" for o in outcomes if o.status != "ok"]
    finally:
        con.close()
    if failed:
        raise click.ClickException(f"{len(failed)} collector(s) failed: " + ", ".join(failed))


def _backfill(con, cfg: Config, since: datetime, backfill_with) -> None:
    """The history import with a progress bar on a terminal (click prints only the label elsewhere)."""
    with click.progressbar(
        length=1000, label=f"sacct history since {since:%Y-%m-%d}", file=sys.stderr, show_eta=True
    ) as bar:
        seen = [0]
        rows = [0]

        def progress(done: float, total: float, n: int) -> None:
            rows[0] += n
            step = int(1000 * done / total) if total > 0 else 1000
            bar.update(max(0, step - seen[0]))
            seen[0] = max(seen[0], step)

        out = backfill_with(lambda fn: fn(con), cfg, since, progress=progress)
    click.echo(
        f"sacct history: {out.status} rows={rows[0]}" + (f" error={out.error}" if out.error else ""), err=True
    )
    if out.status != "ok":
        raise click.ClickException(
            "history import stopped: run the same command again to resume from the last loaded window"
        )


@main.command()
@click.option(
    "--port", type=click.IntRange(1, 65535), help="Port of the node-local /metrics and spool endpoint."
)
@click.option("--spool", type=click.Path(file_okay=False), help="Spool directory.")
@click.option("--interval", type=float, help="Sampling interval in seconds (>= 1).")
@click.option(
    "--fake", "fake", type=click.Path(exists=True), help="Use the fake NVML backend with this spec."
)
@click.option(
    "--web-config",
    "web_config",
    type=click.Path(exists=True, dir_okay=False),
    help="Exporter-toolkit web config (TLS, basic auth) for every endpoint but /healthz "
    "[default: nvml.web_config_file].",
)
@click.pass_context
def agent(
    ctx: click.Context,
    port: int | None,
    spool: str | None,
    interval: float | None,
    fake: str | None,
    web_config: str | None,
) -> None:
    """Per-node NVML agent: GPU telemetry, health events and GPU-to-job attribution."""
    from slurmscope.agent.agent import run_agent

    app = _context(ctx)
    try:
        run_agent(app.config, port=port, spool=spool, interval=interval, fake=fake, web_config=web_config)
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"agent: {exc}") from None


@main.group()
def pipelines() -> None:
    """Derived datasets (marts)."""


@pipelines.command("run")
@click.option("--since", help="Rebuild windows from this date (YYYY-MM-DD) on.")
@click.option("--full", is_flag=True, help="Rebuild every mart from all history.")
@click.option("--only", multiple=True, help="Run only the named pipeline(s).")
@click.option(
    "--now",
    "now_text",
    help="Evaluate as of this UTC time (ISO 8601) instead of the clock: "
    "reproducible rebuilds of a past state.",
)
@click.pass_context
def pipelines_run(
    ctx: click.Context, since: str | None, full: bool, only: tuple[str, ...], now_text: str | None
) -> None:
    """Rebuild the marts idempotently."""
    from datetime import datetime, timezone

    from slurmscope.pipelines.runner import run_pipelines

    now = None
    if now_text:
        try:
            now = datetime.fromisoformat(now_text)
        except ValueError:
            raise click.BadParameter(
                f"expects an ISO 8601 time, got {now_text!r}", param_hint="--now"
            ) from None
        now = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    app = _context(ctx)
    failed: list[str] = []
    con = _connect(app, create=False)
    try:
        for cfg in app.targets():  # one cluster at a time: memory is one cluster's, not the sum
            try:
                _require_cluster_data(con, cfg.cluster)
                results = run_pipelines(con, cfg, since=since, full=full, only=only or None, now=now)
            except (ValueError, click.ClickException) as exc:
                message = exc.message if isinstance(exc, click.ClickException) else str(exc)
                if not app.every:
                    raise click.ClickException(message) from None
                failed.append(message)  # a cluster without data yet: the others still run
                continue
            where = f"{cfg.cluster}: " if app.every else ""
            for name, rows in results.items():
                click.echo(
                    f"{where}{name}: {rows} rows" if rows >= 0 else f"{where}{name}: failed (see log)",
                    err=True,
                )
            failed += [f"{where}{name}" for name, rows in results.items() if rows < 0]
    finally:
        con.close()
    if failed:
        raise click.ClickException(f"pipeline(s) failed: {', '.join(failed)}")


@main.command()
@click.option("--port", type=click.IntRange(1, 65535), help="Port for /metrics (default from config).")
@click.option("--address", help="Bind address (default 127.0.0.1).")
@click.pass_context
def serve(ctx: click.Context, port: int | None, address: str | None) -> None:
    """Long-running service: scheduled collectors and pipelines, and /metrics."""
    from slurmscope.scheduler import serve as run_serve

    app = _context(ctx)
    if app.named:
        app.check_listed()  # --cluster NAME: serve that cluster alone
        served = app.config
    else:
        served = app.base or app.config  # every configured cluster (also `--cluster all`)
    address = address or app.config.get("exporter", "address")
    port = port if port is not None else app.config.get("exporter", "port")
    try:
        check_listen(address, port, "pass --port or --address, or set exporter.port / exporter.address")
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    run_serve(served, app.db_path, address=address, port=port)


def _month(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from slurmscope.report import parse_month

    try:
        parse_month(value)
    except ValueError:
        raise click.BadParameter(f"expects YYYY-MM with a month from 01 to 12, got {value!r}") from None
    return value


@main.command()
@click.option("--month", required=True, callback=_month, help="YYYY-MM")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--format", "formats", default="html,csv", show_default=True)
@click.pass_context
def report(ctx: click.Context, month: str, out_dir: str, formats: str) -> None:
    """Monthly cost and usage report (self-contained HTML and CSVs); with `--cluster all`, one per cluster
    in OUT/<cluster>/."""
    from slurmscope.report import build_report

    app = _context(ctx)
    kinds = [f.strip() for f in formats.split(",") if f.strip()]
    problems: list[str] = []
    con = _connect(app, read_only=True, create=False)
    try:
        for cfg in app.targets():
            where = Path(out_dir) / cfg.cluster if app.every else Path(out_dir)
            try:
                _require_cluster_data(con, cfg.cluster)
                written = build_report(con, cfg, month=month, out_dir=where, formats=kinds)
            except (ValueError, click.ClickException) as exc:
                message = exc.message if isinstance(exc, click.ClickException) else str(exc)
                if not app.every:
                    raise click.ClickException(message) from None
                problems.append(message)
                continue  # the other clusters' reports are still written
            for path in written:
                click.echo(str(path))
    finally:
        con.close()
    if problems:
        raise click.ClickException("; ".join(problems))


@main.command()
@click.option(
    "--out", "out", required=True, help="Lake directory, or an object-store URL (s3://bucket/prefix)."
)
@click.option(
    "--since", callback=lambda c, p, v: v and _month(c, p, v), help="YYYY-MM: re-export from this month."
)
@click.pass_context
def export(ctx: click.Context, out: str, since: str | None) -> None:
    """Parquet lake of the raw tables and marts, per cluster and month (docs/lake.md)."""
    from slurmscope.lake import ExportError
    from slurmscope.lake import export as run_export

    app = _context(ctx)
    # no --cluster: every cluster in the database (the archive); `all`: the configured ones; a name: that one
    clusters = [c.cluster for c in app.targets()] if app.every or app.named else None
    con = _connect(app, read_only=True, create=False)

    def show(w) -> None:
        p = w.partition
        click.echo(f"{p.table}\t{p.cluster}\t{p.month}\t{w.rows}\t{w.status}")

    try:
        done = run_export(con, out, since=since, on_partition=show, clusters=clusters)
    except (ExportError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        con.close()
    written = sum(w.status == "written" for w in done)
    click.echo(f"export: {written} partition(s) written, {len(done) - written} unchanged, in {out}", err=True)


@main.command()
@click.option(
    "--from", "src", required=True, help="Lake directory, or an object-store URL (s3://bucket/prefix)."
)
@click.pass_context
def restore(ctx: click.Context, src: str) -> None:
    """Load a cluster's raw tables from the Parquet lake into a database without them, to rebuild its marts
    there with `pipelines run --full` (docs/lake.md#rebuilding-marts-from-the-lake)."""
    from slurmscope.lake import ExportError, RestoreError
    from slurmscope.lake import restore as run_restore

    app = _context(ctx)
    # no --cluster: every cluster in the lake; `all`: the configured ones; a name: that one
    clusters = [c.cluster for c in app.targets()] if app.every or app.named else None
    con = _connect(app)

    def show(r) -> None:
        p = r.partition
        click.echo(f"{p.table}\t{p.cluster}\t{p.month}\t{r.rows}")

    try:
        done = run_restore(con, src, clusters=clusters, on_partition=show)
    except (RestoreError, ExportError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        con.close()
    rows = sum(r.rows for r in done)
    click.echo(f"restore: {len(done)} partition(s), {rows} row(s) from {src}", err=True)


@main.group()
def dashboards() -> None:
    """Grafana dashboards as code."""


@dashboards.command("build")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
def dashboards_build(out_dir: str) -> None:
    """Write dashboard JSON and Grafana provisioning files."""
    from slurmscope.dashboards.build import build_all

    for path in build_all(Path(out_dir)):
        click.echo(str(path))


@main.group()
def alerts() -> None:
    """Prometheus recording and alerting rules."""


@alerts.command("build")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option(
    "--runbook-base",
    metavar="URL",
    help="Absolute URL the runbook links start with (default: config alerts.runbook_base_url).",
)
@click.pass_context
def alerts_build(ctx: click.Context, out_dir: str, runbook_base: str | None) -> None:
    """Write the rule files (and their promtool tests)."""
    from slurmscope.alerts.build import build_all, config_thresholds

    cfg = _context(ctx).config
    base = runbook_base or cfg.get("alerts", "runbook_base_url")
    try:
        written = build_all(Path(out_dir), base, cfg.get("health", "xid_actions"), config_thresholds(cfg))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--runbook-base") from None
    for path in written:
        click.echo(str(path))
    if len(written) == 1:
        click.echo(
            "alerts build: no promtool cases written: they test the default thresholds and XID actions, "
            "which the config moves (docs/cli.md)",
            err=True,
        )


@main.command()
@click.option("--gpus", type=int, required=True)
@click.option("--days", type=float, required=True)
@click.option("--seed", type=int, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
def simulate(gpus: int, days: float, seed: int, out_dir: str) -> None:
    """Simulate an AI training cluster and write Slurm-format outputs plus a ground-truth event log."""
    from slurmscope.simulator import simulate as run_simulate

    summary = run_simulate(gpus=gpus, days=days, seed=seed, out_dir=Path(out_dir))
    click.echo(json.dumps(summary, indent=2, default=str))


@main.command()
@click.option("--gpus", type=int, default=512, show_default=True)
@click.option("--days", type=float, default=30, show_default=True)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option(
    "--port",
    type=click.IntRange(1, 65534),
    default=9400,
    show_default=True,
    help="Port for /metrics; the demo's node agent takes the next one.",
)
@click.option("--out", "out_dir", default="demo", show_default=True, type=click.Path(file_okay=False))
@click.option("--no-serve", is_flag=True, help="Exit after building instead of serving /metrics.")
@click.pass_context
def demo(
    ctx: click.Context, gpus: int, days: float, seed: int, port: int, out_dir: str, no_serve: bool
) -> None:
    """The whole product on a simulated cluster: simulate, ingest, pipelines, dashboards, alerts, report, serve."""
    from slurmscope.demo import run_demo

    app = _context(ctx)
    try:
        run_demo(
            app.config,
            app.db_path,
            gpus=gpus,
            days=days,
            seed=seed,
            port=port,
            out_dir=Path(out_dir),
            serve=not no_serve,
        )
    except ConfigError as exc:  # the port is taken, or the price book misses a simulated GPU model
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option(
    "--prometheus",
    metavar="URL",
    help="Prometheus to check for the rules and scrape targets (e.g. http://prometheus:9090).",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def doctor(ctx: click.Context, prometheus: str | None, fmt: str) -> None:
    """Check this installation (Slurm, munge, database, agents, exporter, Prometheus, Grafana); say each fix."""
    from slurmscope.doctor import as_json, as_text, failed, run_checks

    app = _context(ctx)
    results = run_checks(app.config, app.db_path, prometheus=prometheus)
    if fmt == "json":
        click.echo(json.dumps(as_json(results), indent=1))
    else:
        click.echo(as_text(results), nl=False)
    if failed(results):
        ctx.exit(1)


@main.command()
@click.argument("job_id", metavar="JOBID")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.pass_context
def job(ctx: click.Context, job_id: str, fmt: str) -> None:
    """One job's CPU, memory and per-GPU use for every attempt, with a verdict (read-only)."""
    from datetime import UTC, datetime

    from slurmscope.jobstats import JobNotFound, job_report, render_json, render_text

    app = _context(ctx)
    con = _connect(app, read_only=True, create=False)
    try:
        report = job_report(con, app.config, job_id, datetime.now(UTC))
    except JobNotFound as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        con.close()
    click.echo(render_json(report) if fmt == "json" else render_text(report), nl=False)


@main.command()
@click.argument("sql")
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "json", "table"]), default="table", show_default=True
)
@click.pass_context
def query(ctx: click.Context, sql: str, fmt: str) -> None:
    """Run one SQL statement on a read-only connection and print the result."""
    import duckdb

    app = _context(ctx)
    con = _connect(app, read_only=True, create=False)
    try:
        con.execute(QUERY_LOCKDOWN)
        cur = con.execute(sql)
        if cur.description is None:
            return
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        if isinstance(exc, duckdb.PermissionException) or any(m in first for m in REFUSED):
            raise click.ClickException(f"query is read-only: {first}; use `slurmscope export`") from None
        raise click.ClickException(f"query failed: {first}") from None
    finally:
        con.close()
    _print_rows(cols, rows, fmt)


QUERY_LOCKDOWN = """
SET enable_external_access = false;
SET autoinstall_known_extensions = false;
SET autoload_known_extensions = false;
SET lock_configuration = true;
"""
"""`query` reads the database and nothing else: no COPY TO, no host files, no extensions, no network, and no
SET to undo this (setting names as in duckdb 2.0)."""
REFUSED = ("attached in read-only mode", "the configuration has been locked")
"""Messages of statements the read-only connection refuses (DuckDB's InvalidInputException)."""


def _print_rows(cols: list[str], rows: list[tuple], fmt: str) -> None:
    out = io.StringIO()
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(cols)
        w.writerows(rows)
    elif fmt == "json":
        out.write(json.dumps([dict(zip(cols, r, strict=True)) for r in rows], default=str, indent=1) + "\n")
    else:
        cells = [[("" if v is None else str(v)) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
        out.write("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip() + "\n")
        out.write("  ".join("-" * w for w in widths) + "\n")
        for r in cells:
            out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")
    click.echo(out.getvalue(), nl=False)


STATUS_SECTIONS = ("collectors", "database", "retention")


@main.command()
@click.option(
    "--format", "fmt", type=click.Choice(["csv", "json", "table"]), default="table", show_default=True
)
@click.option(
    "--section",
    "sections",
    type=click.Choice(STATUS_SECTIONS),
    multiple=True,
    help="Only these sections (repeatable; default: all three, or the collectors' with --format csv).",
)
@click.pass_context
def status(ctx: click.Context, fmt: str, sections: tuple[str, ...]) -> None:
    """Collectors (last run, watermark, quarantine), the database's size, and what retention removed; with
    `--cluster all`, every configured cluster's collectors and retention, in a first column `cluster`. CSV
    is one table: the collectors', or the one `--section` names."""
    if fmt == "csv" and len(sections) > 1:
        raise click.UsageError("--format csv prints one table: give one --section")
    wanted = sections or (("collectors",) if fmt == "csv" else STATUS_SECTIONS)
    app = _context(ctx)
    con = _connect(app, read_only=True, create=False)
    clusters = [c.cluster for c in app.targets()]
    try:
        tables = {
            "collectors": lambda: _rows(con, STATUS_SQL, [clusters]),
            "database": lambda: _database_size(con, app.db_path),
            "retention": lambda: _retention_status(con, clusters),
        }
        out = {name: tables[name]() for name in STATUS_SECTIONS if name in wanted}
    finally:
        con.close()
    if not app.every:
        out = {
            k: ((cols[1:], [r[1:] for r in rows]) if cols[0] == "cluster" else (cols, rows))
            for k, (cols, rows) in out.items()
        }
    if fmt == "json":
        click.echo(
            json.dumps(
                {k: [dict(zip(c, r, strict=True)) for r in rows] for k, (c, rows) in out.items()},
                default=str,
                indent=1,
            )
        )
        return
    for i, (name, (cols, rows)) in enumerate(out.items()):
        if i:
            click.echo("")
        if fmt == "table":
            click.echo(f"# {name}")
        _print_rows(cols, rows, fmt)


def _rows(con, sql: str, params: list) -> tuple[list[str], list[tuple]]:
    cur = con.execute(sql, params)
    return [d[0] for d in cur.description], cur.fetchall()


def _database_size(con, path: str) -> tuple[list[str], list[tuple]]:
    """The file on disk and DuckDB's own account of it: blocks in use, free blocks it will reuse, the WAL."""
    on_disk = Path(path).stat().st_size if path != ":memory:" else None
    size = con.execute(
        "SELECT block_size, used_blocks, free_blocks, wal_size FROM pragma_database_size()"
    ).fetchall()
    block, used, free, wal = size[0]
    return (
        ["file", "file_bytes", "used_bytes", "free_bytes", "wal"],
        [(path, on_disk, used * block, free * block, wal)],
    )


def _retention_status(con, clusters: list[str]) -> tuple[list[str], list[tuple]]:
    """RETENTION_SQL per cluster, with a first column `cluster` (as STATUS_SQL's)."""
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'retention_runs' AND database_name = current_database()"
    ).fetchall()[0][0]
    rows = []
    if exists:  # else a database no writer has migrated to this version yet
        for cluster in clusters:
            rows += [(cluster, *r) for r in _rows(con, RETENTION_SQL, [cluster])[1]]
    return ["cluster", *RETENTION_COLUMNS], rows


STATUS_SQL = """
WITH last AS (
    SELECT cluster, collector, max(started_at) AS started_at FROM collector_runs GROUP BY ALL
), ok AS (
    SELECT cluster, collector, max(finished_at) AS last_success FROM collector_runs WHERE status = 'ok' GROUP BY ALL
), q AS (
    SELECT cluster, split_part(source, ':', 1) AS collector, count(*) AS quarantined FROM quarantine GROUP BY ALL
)
SELECT r.cluster, r.collector, r.status AS last_status, r.started_at AS last_run, ok.last_success, r.rows AS last_rows,
       w.position AS watermark, coalesce(q.quarantined, 0) AS quarantined_lines, r.error AS last_error
FROM collector_runs r
JOIN last USING (cluster, collector, started_at)
LEFT JOIN ok USING (cluster, collector)
LEFT JOIN watermarks w USING (cluster, collector)
LEFT JOIN q USING (cluster, collector)
WHERE list_contains(?, r.cluster)
ORDER BY r.cluster, r.collector
"""

RETENTION_TABLES = (
    "gpu_samples",
    "jobs",
    "job_steps",
    "node_states",
    "pending_jobs",
    "collector_runs",
    "spool_files",
)
RETENTION_SQL = f"""
WITH t(table_name) AS (VALUES {", ".join(f"('{t}')" for t in RETENTION_TABLES)}),
runs AS (SELECT * FROM retention_runs WHERE cluster = $1),
last AS (SELECT table_name, max(run_at) AS run_at FROM runs GROUP BY ALL),
lr AS (
    SELECT table_name, run_at, sum(rows_removed) AS removed, min(range_start) AS removed_from,
           max(range_end) AS removed_to, sum(rows_written) AS hourly_rows_written,
           CASE WHEN bool_or(status = 'waiting') THEN 'waiting' ELSE 'ok' END AS status,
           string_agg(detail, '; ') AS detail
    FROM runs JOIN last USING (table_name, run_at) GROUP BY ALL
),
total AS (SELECT table_name, sum(rows_removed) AS removed_total FROM runs GROUP BY ALL),
kept AS (
    SELECT 'gpu_samples' AS table_name, (SELECT count(*) FROM gpu_samples WHERE cluster = $1) AS rows
    UNION ALL SELECT 'jobs', (SELECT count(*) FROM jobs WHERE cluster = $1)
    UNION ALL SELECT 'job_steps', (SELECT count(*) FROM job_steps WHERE cluster = $1)
    UNION ALL SELECT 'node_states', (SELECT count(*) FROM node_states WHERE cluster = $1)
    UNION ALL SELECT 'pending_jobs', (SELECT count(*) FROM pending_jobs WHERE cluster = $1)
    UNION ALL SELECT 'collector_runs', (SELECT count(*) FROM collector_runs WHERE cluster = $1)
    UNION ALL SELECT 'spool_files', (SELECT count(*) FROM spool_files WHERE cluster = $1)
),
state AS (
    SELECT name AS table_name, boundary,
           CASE name WHEN 'gpu_samples' THEN 'gpu_samples_hourly ('
               || (SELECT count(*) FROM gpu_samples_hourly WHERE cluster = $1) || ' rows)' ELSE 'lake' END AS older_in
    FROM retention_state WHERE cluster = $1
    UNION ALL SELECT 'job_steps', boundary, 'lake' FROM retention_state WHERE cluster = $1 AND name = 'jobs'
)
SELECT table_name AS "table", kept.rows, state.boundary, state.older_in,
       lr.run_at AS last_run, lr.removed AS last_removed, lr.removed_from, lr.removed_to,
       lr.hourly_rows_written, coalesce(total.removed_total, 0) AS removed_total, lr.status, lr.detail
FROM t LEFT JOIN kept USING (table_name) LEFT JOIN state USING (table_name) LEFT JOIN lr USING (table_name)
LEFT JOIN total USING (table_name)
ORDER BY list_position([{", ".join(f"'{t}'" for t in RETENTION_TABLES)}], table_name)
"""  # noqa: S608 - table names are the literals of RETENTION_TABLES
RETENTION_COLUMNS = [
    "table",
    "rows",
    "boundary",
    "older_in",
    "last_run",
    "last_removed",
    "removed_from",
    "removed_to",
    "hourly_rows_written",
    "removed_total",
    "status",
    "detail",
]


if __name__ == "__main__":
    main()
