"""The typed parameters of a pipeline run: the run's window and the config sections pipelines read.

Built by the runner from slurmscope.config alone (config.DEFAULTS merged with the user's file), so a default
lives in one place; a pipeline reads `params.drift.baseline_days`, never a fallback of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from slurmscope.config import Config


@dataclass(frozen=True)
class Billing:
    timezone: str
    currency: str
    idle_cost: str
    charge_by: str
    bill_down: bool
    tres_billing_weights: dict[str, str]
    mig_models: dict[str, str]
    rates: dict[str, Any]
    close_after_days: int
    reissue_months: list[str]
    energy_usd_per_kwh: float
    pue: float


@dataclass(frozen=True)
class Pipelines:
    incremental_lookback_seconds: float
    incremental_margin_seconds: float
    occupancy_bucket_seconds: int
    node_snapshot_max_gap_seconds: int
    full_slice_days: int


@dataclass(frozen=True)
class Reliability:
    checkpoint_cost_seconds: float
    restart_cost_seconds: float
    fault_grace_seconds: int
    job_sizes: list[int]
    incident_merge_seconds: int
    hardware_reasons: str
    failure_reasons: str
    maintenance_reasons: str


@dataclass(frozen=True)
class Drift:
    gpu_z_threshold: float
    error_z_threshold: float
    trend_z_threshold: float
    baseline_days: int
    min_baseline_days: int
    util_bin_percent: float
    min_gpu_minutes: int
    min_fleet_gpus: int
    idle_util_percent: float
    fairshare_starved_ratio: float
    fairshare_over_served_ratio: float


@dataclass(frozen=True)
class Fairshare:
    decay_half_life_seconds: float
    usage_reset_period: str
    charge: str
    algorithm: str


HEALTH_LOOKBACK_SECONDS = 86400
"""How far before its window health reads events and samples (pipelines/health.py caps every window to it)."""


@dataclass(frozen=True)
class Health:
    event_window_seconds: float
    xid_actions: dict[int, str]
    throttle_ratio: float
    throttle_window_seconds: float
    temp_degraded_celsius: float
    temp_failing_celsius: float
    sample_max_age_seconds: float
    gpu_forget_seconds: float
    nvlink_replay_recovery: int
    nvlink_crc_per_second: float
    remap_growth_rows: int
    remap_window_seconds: float

    def whole_minutes_seconds(self) -> float:
        """How far before a window health reads every NVML minute: a verdict at or after the window's start
        reads events (event window) and the latest sample's throttling (sample age + throttle window) from
        no earlier, and ten minutes more keep the counter rises of those minutes exact. The rest of the
        one-day look-back only feeds the remap window and each GPU's last sample (pipelines/health.py)."""
        recent = max(self.event_window_seconds, self.sample_max_age_seconds + self.throttle_window_seconds)
        return min(float(recent) + 600.0, float(HEALTH_LOOKBACK_SECONDS))


SECTIONS: dict[str, type] = {
    "billing": Billing,
    "pipelines": Pipelines,
    "reliability": Reliability,
    "drift": Drift,
    "fairshare": Fairshare,
    "health": Health,
}
"""Config section -> its typed copy (each field is a key of that section in config.DEFAULTS)."""


def section(cls: type, values: dict[str, Any]) -> Any:
    return cls(**{f.name: values[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Params:
    """One run of one pipeline: the window [start, end), `now` (running attempts accrue up to it; later than
    `end` in the slices of a full rebuild), whether it rebuilds everything, the billing zone and its first
    day and month of the window, and the config sections."""

    cluster: str
    now: datetime
    start: datetime
    end: datetime
    full: bool
    tz: str
    start_date: date
    start_month: date
    billing: Billing
    pipelines: Pipelines
    reliability: Reliability
    drift: Drift
    fairshare: Fairshare
    health: Health
    budgets: dict[str, dict[str, float]] = field(default_factory=dict)

    def sql(self) -> dict[str, Any]:
        """The named parameters an INPUTS query may use."""
        return {
            "cluster": self.cluster,
            "now": self.now,
            "start": self.start,
            "end": self.end,
            "tz": self.tz,
            "start_date": self.start_date,
            "start_month": self.start_month,
            "util_bin_percent": float(self.drift.util_bin_percent),
            "health_whole_us": int(self.health.whole_minutes_seconds() * 1e6),
        }


def from_config(cfg: Config, start: datetime, end: datetime, now: datetime, full: bool) -> Params:
    tz = cfg.get("billing", "timezone")
    start_local = start.astimezone(ZoneInfo(tz))
    return Params(
        cluster=cfg.cluster,
        now=now,
        start=start,
        end=end,
        full=full,
        tz=tz,
        start_date=start_local.date(),
        start_month=start_local.date().replace(day=1),
        **{name: section(cls, cfg.raw[name]) for name, cls in SECTIONS.items()},
        budgets=dict(cfg.raw.get("budgets", {})),
    )
