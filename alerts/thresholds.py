"""Every alert threshold in one place, each with the reason for its value.

Change a number here, rebuild (`slurmscope alerts build --out alerts`) and the promtool tests in
alerts/tests/ fail until their hand-written series are moved to the new boundary: on purpose, so that a
threshold never moves without someone looking at what it means for the pager. A site moves one in its config
instead (`[alerts.thresholds]`, validated in slurmscope/config.py THRESHOLD_KEYS): `alerts build` renders
the rules with it (resolve()), and these stay the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

# A node that is DOWN for 10 minutes is not a reboot or a slurmd restart (those take 1-5 minutes).
NODE_DOWN_FOR = "10m"

# Drained nodes waiting longer than a day usually mean a forgotten RMA or a ticket nobody owns.
NODE_DRAINED_MAX_SECONDS = 24 * 3600
NODE_DRAINED_FOR = "15m"

# Three DOWN/DRAIN events in six hours: one can be maintenance, three is a node that keeps failing jobs.
NODE_FLAP_EVENTS = 3
NODE_FLAP_WINDOW = "6h"
NODE_FLAP_FOR = "5m"

# Which XIDs page is not a threshold: NVIDIA's XID catalogue decides (slurmscope/xid.py, alerts/rules.py
# xid_alerts, config health.xid_actions).
# Event alerts look back this far: long enough to survive a few missed scrapes, short enough to clear.
# They fire at the first evaluation that sees the event: a counter that grew cannot flap, and a `for:` would
# only spend the latency budget (XID to firing: 60 s live, 3 min through the central store; docs/nvml.md).
EVENT_WINDOW = "15m"
EVENT_FOR = "0s"

# A failed row remap needs a GPU replacement; any for longer than a few minutes is real.
ROW_REMAP_FOR = "5m"

# NVLink: DCGM's NVLink health watch fails a GPU on any replay or recovery error in a minute
# (DCGM_LIMIT_MAX_NVLINK_ERROR = 1) and on CRC errors at 100 or more a second ("RM has informed us that CRC errors
# only matter at rates of 100+ per second", DCGM_LIMIT_MAX_NVLINK_CRC_ERROR; NVIDIA/DCGM
# modules/health/DcgmHealthWatch.cpp, dcgmlib DcgmGpuHardwareLimits.h). The counters are events, so the alert
# fires at the first evaluation that sees them (EVENT_FOR); health.nvlink_crc_per_second is the same number (a
# test keeps them equal).
NVLINK_CRC_PER_SECOND = 100
NVLINK_CRC_WINDOW = "5m"

# A remapped row or a retired page waiting for a reset: NVIDIA says a pending remapping "won't affect future
# work on the GPU since error-containment and dynamic page blacklisting will take care of that" (nvmlDevice-
# GetRemappedRows), so this is a warning to drain and reset at the next opportunity, not a page; 15 minutes
# keeps a reset that is already under way from raising it.
RESET_PENDING_FOR = "15m"

# Hardware-throttled (NVML HW slowdown 0x8, HW thermal 0x40, HW power brake 0x80: clocks cut by half or more)
# more than a tenth of the time over 15 minutes (90 s): at half clock that is at least 5 % of the GPU's
# throughput, and NVML reports HW slowdown at a clock change only for an instant. Before the causes were
# split the threshold was a quarter, because a GPU at its power cap counted too; health.throttle_ratio is the
# same number (a test keeps them equal). A GPU at its
# software power cap (0x4) is working as configured and never counts (slurmscope_gpu_clock_event_ratio).
THROTTLE_RATIO = 0.1
THROTTLE_WINDOW = "15m"
THROTTLE_FOR = "15m"

# More than 20 % of ended attempts failing over an hour, with at least 10 ended attempts so that three
# failures out of five at night do not page anyone.
JOB_FAILURE_RATIO = 0.2
JOB_FAILURE_MIN_JOBS = 10
JOB_FAILURE_FOR = "15m"

# More than 20 requeues in an hour in one partition is far above the background of preemption requeues.
REQUEUES_PER_HOUR = 20
REQUEUE_FOR = "10m"

# Three jobs killed by NODE_FAIL in an hour in one partition: a bad node or switch, not bad luck.
NODE_FAIL_KILLS_PER_HOUR = 3
NODE_FAIL_FOR = "5m"

# bf_interval defaults to 30 s; 15 minutes without a backfill cycle while jobs pend means it is stuck.
BACKFILL_STALL_SECONDS = 900
BACKFILL_STALL_FOR = "10m"

# Wait-time p90 of a partition at more than 3x its average of the previous week, and above half an hour:
# ratios alone page on 10 s -> 40 s.
WAIT_P90_DRIFT_FACTOR = 3
WAIT_P90_MIN_SECONDS = 1800
WAIT_P90_MIN_JOBS = 5
WAIT_P90_DRIFT_FOR = "30m"

# An account below half its share with a job pending for 12 hours is starved, whatever the priority says.
STARVATION_PENDING_SECONDS = 12 * 3600
STARVATION_USAGE_OVER_SHARES = 0.5
STARVATION_FOR = "30m"

# Budgets are per account, in config `budgets` (served as slurmscope_account_budget_*_ratio): the alerts
# compare ratios, so one rule serves every account whatever its budget. 80 % spent leaves a fifth of the
# month's money for the owner to decide; the cost pipeline runs every few minutes, so 15 minutes is several
# runs agreeing, not one run's blip.
BUDGET_SPENT_RATIO = 0.8
BUDGET_SPENT_FOR = "15m"
# The month-end forecast (spent / elapsed share of the month, none in the month's first day) over the
# budget for an hour: a burst of one afternoon early in the month moves it a lot, an hour of it is a trend.
BUDGET_FORECAST_RATIO = 1.0
BUDGET_FORECAST_FOR = "1h"

# Cluster GPU utilisation in the last hour below 60 % of its average of the day before: a driver,
# filesystem or network regression that makes every job slower shows up here first.
UTIL_DRIFT_FACTOR = 0.6
UTIL_DRIFT_FOR = "30m"

# NVML seeing fewer GPUs than GRES promises: a GPU fell off the bus or a driver failed to load.
GPU_MISMATCH_FOR = "10m"

# A collector is stale after missing COLLECTOR_STALE_RUNS runs in a row at its own interval (from the collector
# registry, collectors/registry.py), and never before COLLECTOR_STALE_MIN_SECONDS: a slurmctld restart with a
# few 60-s command timeouts can hold the 1-minute collectors for ten minutes. That is 15 minutes for node and
# queue state, 30 for accounting, 6 hours for the controller's configuration.
COLLECTOR_STALE_RUNS = 6
COLLECTOR_STALE_MIN_SECONDS = 900
COLLECTOR_STALE_FOR = "5m"
COLLECTOR_FAILING_FOR = "15m"

# Pipelines run a minute after every collector run that loaded rows (sinfo loads rows every minute) and
# again in the nightly full rebuild: an hour without a successful run of one pipeline means it fails or
# hangs, and its dashboards and alerts freeze at that hour.
PIPELINE_STALE_SECONDS = 3600
PIPELINE_STALE_FOR = "10m"

# The Prometheus scrape jobs of docs/deployment.md: the central exporter and the node agents.
EXPORTER_JOB = "slurmscope"
AGENT_JOB = "slurmscope-agent"

# The exporter scraped every minute: five failed scrapes in a row is not a `serve` restart (seconds).
EXPORTER_DOWN_FOR = "5m"

# An agent restarts in seconds (Restart=always); a node reboot takes 5-10 minutes.
AGENT_DOWN_FOR = "10m"
# One lost agent is a ticket; a tenth of the fleet (and at least two agents) at once is a network,
# DNS, certificate or rollout problem, and the real-time GPU alerts are blind there: that pages.
AGENTS_DOWN_RATIO = 0.1
AGENTS_DOWN_MIN = 2
AGENTS_DOWN_FOR = "5m"

# Any failed evaluation of a slurmscope rule group over 15 minutes: its alerts cannot fire and its
# recording rules (the dashboards) have gaps. A one-off failure (a query timeout) clears within the window.
RULE_FAILURES_WINDOW = "5m"
RULE_FAILURES_FOR = "15m"

# Every slurmctld down for 2 minutes: longer than a controller failover takes (SlurmctldTimeout 120 s).
CONTROLLER_DOWN_FOR = "2m"

# The exporter renders after every collector run (at least every 5 minutes): 10 minutes old is stuck.
METRICS_STALE_SECONDS = 600
METRICS_STALE_FOR = "5m"

# Drift alerts page on what the drift pipeline marked breached: its thresholds (robust z-scores per signal)
# live in the config section drift.* because the pipeline and the reports use them too; only the `for:`
# lives here. Half an hour keeps a single noisy day-boundary recomputation from paging.
DRIFT_FOR = "30m"
# Account and partition trends (usage, cost, failure rate, wait) move slowly: an hour, and only a ticket.
TREND_DRIFT_FOR = "1h"


def resolve(overrides: Mapping[str, Any] | None = None) -> SimpleNamespace:
    """Every constant above, with config alerts.thresholds (keys: the lower-case names) applied.

    An override equal in value to an integer default stays an integer, so `3` and `3.0` render alike; the
    committed rule file is resolve()'s render, i.e. the defaults here."""
    values = {name: value for name, value in globals().items() if name.isupper()}
    for key, value in (overrides or {}).items():
        name = key.upper()
        if name not in values:
            raise KeyError(f"no alert threshold {key!r}")
        default = values[name]
        if isinstance(default, int) and isinstance(value, float) and value.is_integer():
            value = int(value)
        values[name] = value
    return SimpleNamespace(**values)
