"""One TOML file of settings, with SLURMSCOPE_* environment overrides.

Every key has a documented default (docs/configuration.md) so that slurmscope runs with no file at all.
Errors name the file, the key and what was expected, because an operator editing a TOML file on a head
node at 3 a.m. needs to know exactly which line to fix.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names file, key and expectation."""


DEFAULTS: dict[str, Any] = {
    "cluster": {
        "name": "default",
        "timezone": "UTC",
    },
    "database": {
        "path": "slurmscope.duckdb",
    },
    "slurm": {
        "bin_dir": "",
        "sacct": "sacct",
        "sinfo": "sinfo",
        "squeue": "squeue",
        "sshare": "sshare",
        "sdiag": "sdiag",
        "sacctmgr": "sacctmgr",
        "scontrol": "scontrol",
        "timeout_seconds": 60.0,
    },
    "collect": {
        "sacct_window_seconds": 86400,
        "sacct_overlap_seconds": 3600,
        "sacct_initial_lookback_seconds": 7 * 86400,
        "events_lookback_seconds": 30 * 86400,
    },
    "nvml": {
        "interval_seconds": 10.0,
        "slow_interval_seconds": 60.0,
        "spool_dir": "/var/spool/slurmscope",
        "mapping_dir": "/run/slurmscope/gpu-jobs",
        "port": 9401,
        "agents": [],
        "spool_paths": [],
        "web_config_file": "",
        "agent_username": "",
        "agent_password_file": "",
        "agent_ca_file": "",
    },
    "exporter": {
        "address": "127.0.0.1",
        "port": 9400,
        "user_labels": False,
        "web_config_file": "",
    },
    "fairshare": {
        "decay_half_life_seconds": 7 * 86400,
        "usage_reset_period": "NONE",
        "charge": "billing",
        "algorithm": "fair_tree",
    },
    "billing": {
        "timezone": "UTC",
        "currency": "usd",
        "idle_cost": "separate",
        "default_rate_per_gpu_hour": 2.0,
        "rates": {},
        "close_after_days": 5,
        "reissue_months": [],
        "energy_usd_per_kwh": 0.0,
        "pue": 1.0,
    },
    "pipelines": {
        "incremental_lookback_seconds": 2 * 86400,
        "occupancy_bucket_seconds": 900,
        "node_snapshot_max_gap_seconds": 3600,
        "full_slice_days": 30,
    },
    "reliability": {
        "checkpoint_cost_seconds": 300.0,
        "fault_grace_seconds": 600,
        "job_sizes": [1, 2, 4, 8, 16, 32, 64, 128],
    },
    "drift": {
        "gpu_z_threshold": 4.0,
        "error_z_threshold": 4.0,
        "trend_z_threshold": 3.5,
        "baseline_days": 28,
        "min_baseline_days": 7,
        "util_bin_percent": 10.0,
        "min_gpu_minutes": 30,
        "min_fleet_gpus": 3,
        "idle_util_percent": 5.0,
        "fairshare_starved_ratio": 0.5,
        "fairshare_over_served_ratio": 2.0,
    },
    "report": {
        "pseudonymise_users": False,
    },
    "alerts": {  # runbook_url = runbook_base_url + <AlertName>.md (docs/configuration.md)
        "runbook_base_url": "file:///opt/slurmscope/docs/runbooks/",
    },
    "health": {  # node and GPU health verdicts (pipelines/health.py, docs/pipelines.md#health)
        "event_window_seconds": 3600,
        "critical_xids": [48, 63, 64, 74, 79, 92, 94, 95, 119, 120],
        "application_xids": [13, 31, 43, 45],
        "throttle_ratio": 0.25,
        "throttle_window_seconds": 900,
        "temp_degraded_celsius": 85.0,
        "temp_failing_celsius": 95.0,
        "sample_max_age_seconds": 900,
        "gpu_forget_seconds": 86400,
    },
}


@dataclass(frozen=True)
class Config:
    """Validated settings; `raw` keeps the merged tree for modules that own their own sections."""

    source: str
    raw: dict[str, Any] = field(repr=False)

    def get(self, section: str, key: str) -> Any:
        return self.raw[section][key]

    @property
    def cluster(self) -> str:
        return self.raw["cluster"]["name"]

    @property
    def timezone(self) -> ZoneInfo:
        return ZoneInfo(self.raw["cluster"]["timezone"])

    @property
    def db_path(self) -> str:
        return self.raw["database"]["path"]

    def slurm_command(self, name: str) -> str:
        """Path of a Slurm binary: an explicit path wins, else bin_dir/name, else the bare name on PATH."""
        value = self.raw["slurm"][name]
        if os.sep in value:
            return value
        bin_dir = self.raw["slurm"]["bin_dir"]
        return str(Path(bin_dir) / value) if bin_dir else value

    def with_overrides(self, **sections: Mapping[str, Any]) -> Config:
        raw = copy.deepcopy(self.raw)
        for section, values in sections.items():
            raw.setdefault(section, {}).update(values)
        return Config(source=self.source, raw=raw)


def _merge(base: dict[str, Any], extra: Mapping[str, Any], source: str, prefix: str = "") -> None:
    for key, value in extra.items():
        dotted = f"{prefix}{key}"
        if key not in base:
            # Free-form tables (rates, price book entries) accept any key.
            if prefix.rstrip(".") in FREE_FORM:
                base[key] = value
                continue
            raise ConfigError(f"{source}: unknown key '{dotted}'")
        default = base[key]
        if isinstance(default, dict):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: key '{dotted}' must be a table, got {type(value).__name__}")
            _merge(default, value, source, dotted + ".")
        else:
            base[key] = _coerce(value, default, source, dotted)


FREE_FORM = {"billing.rates"}


def _coerce(value: Any, default: Any, source: str, key: str) -> Any:
    expected = type(default)
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "1", "0", "yes", "no"}:
            return value.lower() in {"true", "1", "yes"}
        raise ConfigError(f"{source}: key '{key}' expects true or false, got {value!r}")
    if isinstance(default, (int, float)):
        try:
            number = float(value) if isinstance(default, float) else int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: key '{key}' expects a number, got {value!r}") from None
        if number < 0:
            raise ConfigError(f"{source}: key '{key}' expects a number >= 0, got {value!r}")
        return number
    if isinstance(default, list):
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{source}: key '{key}' expects a list, got {value!r}")
        return value
    if not isinstance(value, expected):
        raise ConfigError(f"{source}: key '{key}' expects a {expected.__name__}, got {value!r}")
    return value


def _validate(raw: dict[str, Any], source: str) -> None:
    for key in ("cluster.timezone", "billing.timezone"):
        section, name = key.split(".")
        try:
            ZoneInfo(raw[section][name])
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                f"{source}: key '{key}' expects an IANA time zone such as 'Europe/Berlin', "
                f"got {raw[section][name]!r}"
            ) from None
    if not raw["cluster"]["name"]:
        raise ConfigError(f"{source}: key 'cluster.name' expects a non-empty string")
    if raw["fairshare"]["charge"] not in {"billing", "gpu_seconds"}:
        raise ConfigError(f"{source}: key 'fairshare.charge' expects 'billing' or 'gpu_seconds'")
    if raw["fairshare"]["algorithm"] not in {"fair_tree", "classic"}:
        raise ConfigError(f"{source}: key 'fairshare.algorithm' expects 'fair_tree' or 'classic'")
    if raw["billing"]["idle_cost"] not in {"separate", "spread"}:
        raise ConfigError(
            f"{source}: key 'billing.idle_cost' expects 'separate' or 'spread', "
            f"got {raw['billing']['idle_cost']!r}"
        )
    if raw["billing"]["pue"] < 1:
        raise ConfigError(f"{source}: key 'billing.pue' expects a number >= 1, got {raw['billing']['pue']!r}")
    if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S*/", raw["alerts"]["runbook_base_url"]):
        raise ConfigError(
            f"{source}: key 'alerts.runbook_base_url' expects an absolute URL ending in '/', "
            f"got {raw['alerts']['runbook_base_url']!r}"
        )
    if raw["nvml"]["interval_seconds"] < 1:
        raise ConfigError(f"{source}: key 'nvml.interval_seconds' expects a number >= 1")


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Defaults, then the TOML file, then SLURMSCOPE_<SECTION>_<KEY> variables from `env`.

    Without an explicit path, ./slurmscope.toml is read when it exists.
    """
    env = os.environ if env is None else env
    raw = copy.deepcopy(DEFAULTS)
    source = "built-in defaults"
    if path is None and Path("slurmscope.toml").exists():
        path = "slurmscope.toml"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"{source}: file not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
        _merge(raw, data, source)
    for name, value in sorted(env.items()):
        if not name.startswith("SLURMSCOPE_") or name in ENV_NOT_CONFIG:
            continue
        rest = name[len("SLURMSCOPE_") :].lower()
        section, _, key = rest.partition("_")
        if section not in raw or not isinstance(raw[section], dict) or key not in raw[section]:
            raise ConfigError(
                f"environment: {name} names no config key (expected SLURMSCOPE_<SECTION>_<KEY>)"
            )
        raw[section][key] = _coerce(value, raw[section][key], f"environment {name}", f"{section}.{key}")
    _validate(raw, source)
    return Config(source=source, raw=raw)


ENV_NOT_CONFIG = {"SLURMSCOPE_CONFIG", "SLURMSCOPE_DB"}
