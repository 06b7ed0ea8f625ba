"""Every collector, once: the CLI's kind lists, serve's schedule, the fuzzers and the demo derive from here.

The order is the collection order of `collect all`: sacct runs after squeue, because it also asks by job id
for the pending jobs that squeue saw and its -S/-E window hides (collectors/collect.py); the NVML spool
comes last because it does not depend on Slurm at all. Modules are imported explicitly, so a reader (or a
tool) can follow a kind to its code; importing this module builds the tuple and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from slurmscope.collectors import (
    events,
    nvml,
    partitions,
    ping,
    reservations,
    sacct,
    sacct_rest,
    sdiag,
    sdiag_rest,
    sinfo,
    sinfo_rest,
    slurm_config,
    squeue,
    squeue_rest,
    sshare,
)

from slurmscope.config import Config


@dataclass(frozen=True)
class Collector:
    """One source. `module` follows the contract in collectors/base.py.

    `live`: run by `collect` and scheduled by `serve` every `interval_seconds`. `ingestable`: accepted by
    `ingest KIND FILE...`. `feeds_pipelines`: new rows change the marts, so serve runs the pipelines after
    a successful run. `spool`: the module loads whole NVML spool files with its own loader (fetch, load,
    acknowledge) instead of `parse` and base.load. `data_exit_codes`: non-zero exits whose output is still
    the measurement. `lookback_setting`: the [collect] key whose seconds bound each live run's window.
    `phase_seconds`: serve runs it this many seconds after each epoch-aligned interval boundary rather
    than whenever it started (None: from its start). `windowed`: an accounting source read in time windows
    from a stored watermark (with lookups by id for what a window hides), not as a snapshot.
    `replaces`: the kind this source stands in for when `slurm.source = "rest"`. `by_cluster_flag`: its
    command reaches another cluster with `-M` (`slurm.cluster_flag`); `scontrol ping` does not (it pings
    the controllers named in the local slurm.conf), so it runs only where that cluster's slurm.conf is set.
    """

    kind: str
    module: ModuleType
    interval_seconds: int
    live: bool = True
    ingestable: bool = True
    feeds_pipelines: bool = False
    spool: bool = False
    data_exit_codes: frozenset[int] = frozenset()
    lookback_setting: str | None = None
    phase_seconds: int | None = None
    windowed: bool = False
    replaces: str | None = None
    by_cluster_flag: bool = True


# Node and queue state move fast (1 min), accounting comes in 5-minute windows, the controller's settings
# hardly ever change. `scontrol ping` exits 1 when any controller is DOWN and prints which: recording that
# as a failed run stored nothing, so /metrics kept the last "UP" for the whole outage (seen on the test bed
# with slurmctld stopped) and SlurmControllerUnreachable could not fire. Events are upserted by (node,
# time_start): re-reading the whole lookback keeps ongoing events (no end yet) current without a watermark.
COLLECTORS: tuple[Collector, ...] = (
    Collector("config", slurm_config, 3600),
    Collector("partitions", partitions, 3600),
    Collector("ping", ping, 60, data_exit_codes=frozenset({1}), by_cluster_flag=False),
    Collector("sinfo", sinfo, 60, feeds_pipelines=True),
    Collector("sinfo_rest", sinfo_rest, 60, ingestable=False, feeds_pipelines=True, replaces="sinfo"),
    Collector("squeue", squeue, 60),
    Collector("squeue_rest", squeue_rest, 60, ingestable=False, replaces="squeue"),
    Collector("sshare", sshare, 300, feeds_pipelines=True),
    Collector("sdiag", sdiag, 300, feeds_pipelines=True),
    Collector("sdiag_rest", sdiag_rest, 300, ingestable=False, feeds_pipelines=True, replaces="sdiag"),
    Collector("reservations", reservations, 300),
    Collector("events", events, 300, feeds_pipelines=True, lookback_setting="events_lookback_seconds"),
    Collector("sacct", sacct, 300, feeds_pipelines=True, windowed=True),
    Collector(
        "sacct_rest", sacct_rest, 300, ingestable=False, feeds_pipelines=True, windowed=True, replaces="sacct"
    ),
    # The agents close a spool segment on each minute (epoch-aligned) at their first sampling round after
    # it (10 s by default): pulling 20 s past the minute takes each segment the minute it closes, so the
    # central store is at most 80 s behind instead of 2 minutes (docs/nvml.md, latency budget).
    Collector("nvml", nvml, 60, feeds_pipelines=True, spool=True, phase_seconds=20),
)


def active(source: str) -> tuple[Collector, ...]:
    """The live collectors that run for `slurm.source`: a `replaces` source only with "rest", and then
    instead of the collector it replaces (so `collect all` and serve never read jobs twice)."""
    replaced = {c.replaces for c in COLLECTORS if c.replaces} if source == "rest" else set()
    return tuple(
        c for c in COLLECTORS if c.live and (source == "rest" if c.replaces else c.kind not in replaced)
    )


def unreachable(cfg: Config) -> frozenset[str]:
    """Kinds that cannot reach `cfg`'s cluster: with `slurm.cluster_flag` and no `slurm.conf` the cluster is
    reached only through `-M`, which `scontrol ping` ignores (src/scontrol/scontrol.c `_print_ping` and
    src/api/reconfigure.c `slurm_ping` in Slurm 22.05 read the local slurm.conf's controllers)."""
    if not cfg.get("slurm", "cluster_flag") or cfg.get("slurm", "conf"):
        return frozenset()
    return frozenset(c.kind for c in COLLECTORS if not c.by_cluster_flag)


def scheduled(cfg: Config) -> tuple[Collector, ...]:
    """The live collectors `collect all` and `serve` run for `cfg`'s cluster."""
    skip = unreachable(cfg)
    return tuple(c for c in active(cfg.get("slurm", "source")) if c.kind not in skip)


def collector(kind: str) -> Collector:
    """The registered collector of `kind`; ValueError names the known kinds."""
    for c in COLLECTORS:
        if c.kind == kind:
            return c
    raise ValueError(f"unknown collector {kind!r}; expected one of {', '.join(c.kind for c in COLLECTORS)}")
