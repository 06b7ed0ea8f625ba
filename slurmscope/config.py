"""One TOML file of settings, with SLURMSCOPE_* environment overrides.

Every key has a documented default (docs/configuration.md) so that slurmscope runs with no file at all.
Errors name the file, the key and what was expected, because an operator editing a TOML file on a head
node at 3 a.m. needs to know exactly which line to fix. Every key, nested tables included, has a spec in
SCHEMA: a value that would only fail later (or, worse, be read as zero) is refused at load.
"""

from __future__ import annotations

import copy
import difflib
import errno
import ipaddress
import math
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from slurmscope import mig, xid


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names file, key and expectation."""


@dataclass(frozen=True)
class _At:
    """Where a value came from: the file (or environment variable) and its full dotted key."""

    source: str
    key: str
    env: bool = False  # environment values are strings to parse; TOML values must already have the type

    def child(self, name: str) -> _At:
        part = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'
        return _At(self.source, f"{self.key}.{part}" if self.key else part, self.env)

    def item(self, index: int) -> _At:
        return _At(self.source, f"{self.key}[{index}]", self.env)

    def error(self, expected: str, value: Any) -> ConfigError:
        shown = str(value).lower() if isinstance(value, bool) else repr(value)  # as TOML writes it
        return ConfigError(f"{self.source}: key '{self.key}' expects {expected}, got {shown}")

    def unknown(self, name: str, known: Mapping[str, Any]) -> ConfigError:
        key = self.child(name).key
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(sorted(known))}"
        return ConfigError(f"{self.source}: unknown key '{key}'; {hint}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class Num:
    """A number; an int default makes it an integer key. Bounds are inclusive unless `positive`."""

    default: int | float
    low: float = 0
    high: float | None = None
    positive: bool = False
    label: str = ""

    @property
    def integer(self) -> bool:
        return isinstance(self.default, int)

    def expected(self) -> str:
        kind = "an integer" if self.integer else "a number"
        low, high = _number(self.low), None if self.high is None else _number(self.high)
        if self.positive:
            kind += f" > {low}" + (f" and <= {high}" if high else "")
        else:
            kind += f" from {low} to {high}" if high else f" >= {low}"
        return f"{self.label} ({kind})" if self.label else kind

    def parse(self, value: Any, at: _At) -> int | float:
        if at.env and isinstance(value, str):
            try:
                value = int(value) if self.integer else float(value)
            except ValueError:
                raise at.error(self.expected(), value) from None
        kinds = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            raise at.error(self.expected(), value)
        if value < self.low or (self.positive and value <= self.low):
            raise at.error(self.expected(), value)
        if self.high is not None and value > self.high:
            raise at.error(self.expected(), value)
        return value if self.integer else float(value)


@dataclass(frozen=True)
class KeepPeriod:
    """A retention period in whole days or months: 0 keeps everything, otherwise at least `minimum`."""

    default: int
    minimum: int
    unit: str
    why: str

    def expected(self) -> str:
        return f"0 (keep everything) or an integer number of {self.unit} >= {self.minimum} ({self.why})"

    def parse(self, value: Any, at: _At) -> int:
        if at.env and isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise at.error(self.expected(), value) from None
        if isinstance(value, bool) or not isinstance(value, int) or (value != 0 and value < self.minimum):
            raise at.error(self.expected(), value)
        return value


def _port(default: int) -> Num:
    return Num(default, low=1, high=65535, label="a TCP port")


TRUE, FALSE = {"true", "1", "yes"}, {"false", "0", "no"}


@dataclass(frozen=True)
class Bool:
    default: bool

    def expected(self) -> str:
        return "true or false"

    def parse(self, value: Any, at: _At) -> bool:
        if at.env and isinstance(value, str) and value.lower() in TRUE | FALSE:
            return value.lower() in TRUE
        if not isinstance(value, bool):
            raise at.error(self.expected(), value)
        return value


def _one_of(choices: tuple[str, ...]) -> str:
    quoted = [repr(c) for c in choices]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


@dataclass(frozen=True)
class Str:
    """A string, optionally one of `choices` (case-insensitive with `fold_case`) or passing `check`."""

    default: str
    choices: tuple[str, ...] = ()
    fold_case: bool = False
    check: Callable[[str], bool] | None = None
    what: str = "a string"

    def expected(self) -> str:
        return _one_of(self.choices) if self.choices else self.what

    def parse(self, value: Any, at: _At) -> str:
        if not isinstance(value, str):
            raise at.error(self.expected(), value)
        if self.choices and (value.upper() if self.fold_case else value) not in self.choices:
            raise at.error(self.expected(), value)
        if self.check is not None and not self.check(value):
            raise at.error(self.expected(), value)
        return value


@dataclass(frozen=True)
class List:
    """A TOML array whose every element passes `item`; from the environment, a comma-separated string."""

    default: list[Any]
    item: Num | Str

    def expected(self) -> str:
        return f"a list, each {self.item.expected()}"

    def parse(self, value: Any, at: _At) -> list[Any]:
        if at.env and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise at.error(self.expected(), value)
        return [self.item.parse(v, at.item(i)) for i, v in enumerate(value)]


@dataclass(frozen=True)
class Table:
    """A table with a fixed set of keys; keys the file leaves out keep their defaults."""

    fields: dict[str, Any]

    @property
    def default(self) -> dict[str, Any]:
        return {k: copy.deepcopy(spec.default) for k, spec in self.fields.items()}

    def parse(self, value: Any, at: _At) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise at.error("a table", value)
        out = self.default
        for key, item in value.items():
            if key not in self.fields:
                raise at.unknown(key, self.fields)
            out[key] = self.fields[key].parse(item, at.child(key))
        return out


RATE_FIELDS: dict[str, Num] = {
    "rate": Num(0.0),
    "purchase_usd": Num(0.0),
    "lifetime_years": Num(5.0, positive=True),
    "power_kw": Num(0.0),
    "usd_per_kwh": Num(0.0),
    "pue": Num(1.0, low=1),
    "overhead_usd_per_year": Num(0.0),
    "gpus_per_unit": Num(1, low=1),
}
RATE_EXPECTED = (
    "a $/GPU-hour number (2.5), {rate = 2.5} or an amortised cost {purchase_usd = 30000, lifetime_years = 5, "
    "power_kw = 0.7, usd_per_kwh = 0.12, pue = 1.3, overhead_usd_per_year = 500, gpus_per_unit = 1}"
)


def _rate_entry(value: Any, at: _At) -> float | dict[str, float]:
    """One price-book entry, checked so that pipelines.common.hourly_rate can never price it at 0 by accident."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Num(0.0, label="a $/GPU-hour").parse(value, at)
    if not isinstance(value, Mapping):
        raise at.error(RATE_EXPECTED, value)
    for key in value:
        if key not in RATE_FIELDS:
            raise at.unknown(key, RATE_FIELDS)
    entry = {key: RATE_FIELDS[key].parse(item, at.child(key)) for key, item in value.items()}
    if "rate" in entry and len(entry) > 1:
        others = ", ".join(k for k in entry if k != "rate")
        raise ConfigError(
            f"{at.source}: key '{at.key}' gives both rate and {others}: "
            "use either rate or the amortised cost (purchase_usd, ...)"
        )
    if "rate" not in entry and "purchase_usd" not in entry:
        raise ConfigError(
            f"{at.source}: key '{at.key}' needs rate (a $/GPU-hour) or purchase_usd (an amortised cost), "
            f"got {dict(value)!r}"
        )
    return entry


@dataclass(frozen=True)
class PriceBook:
    """`billing.rates`: GPU model, `partition:<name>` or `default` -> rate.

    A file's table replaces the built-in one as a whole: a site that writes a price book gets exactly that
    price book, and a model it forgot is an error at pipeline run instead of being charged the demo rate.
    """

    default: dict[str, Any]

    def parse(self, value: Any, at: _At) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise at.error("a table of <GPU model> = <rate>", value)
        out: dict[str, Any] = {}
        seen: dict[str, str] = {}
        for key, entry in value.items():
            where = at.child(key)
            if key.startswith("partition:") and not key.removeprefix("partition:"):
                raise ConfigError(f"{at.source}: key '{where.key}' names no partition (partition:<name>)")
            if key.lower() in seen:
                raise ConfigError(
                    f"{at.source}: keys '{at.child(seen[key.lower()]).key}' and '{where.key}' name the same "
                    "GPU model (models are case-insensitive)"
                )
            seen[key.lower()] = key
            out[key] = _rate_entry(entry, where)
        return out


_WEIGHT = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_/:.-]*)\s*=\s*([0-9]*\.?[0-9]+)([KMGTP]?)\s*$", re.I)


def parse_billing_weights(text: str) -> dict[str, float] | None:
    """Slurm's TRESBillingWeights string (`CPU=0.25,Mem=0.25G,GRES/gpu=2.0`) as TRES name (lower case) ->
    weight per unit; a Mem weight with a unit suffix is per that unit (slurm.conf(5)); None when malformed."""
    out: dict[str, float] = {}
    for item in text.split(","):
        m = _WEIGHT.match(item)
        if not m:
            return None
        name, value, unit = m.group(1).lower(), float(m.group(2)), m.group(3).upper()
        if unit and name != "mem":
            return None
        out[name] = value
    return out


@dataclass(frozen=True)
class BillingWeights:
    """`billing.tres_billing_weights`: partition -> its TRESBillingWeights string as in slurm.conf.

    charge_by = "billing_tres" turns a job's billing TRES into GPU-equivalents with the partition's GRES/gpu
    weight, so each entry must weigh GPUs: an entry that does not would price every job of it at nothing.
    """

    default: dict[str, str]

    def parse(self, value: Any, at: _At) -> dict[str, str]:
        if not isinstance(value, Mapping):
            raise at.error('a table of <partition> = "<TRESBillingWeights>"', value)
        out: dict[str, str] = {}
        for key, text in value.items():
            where = at.child(key)
            expected = (
                "a TRESBillingWeights string naming GRES/gpu, such as 'CPU=0.25,Mem=0.25G,GRES/gpu=2.0'"
            )
            weights = parse_billing_weights(text) if isinstance(text, str) else None
            if not weights or not any(k == "gres/gpu" or k.startswith("gres/gpu:") for k in weights):
                raise where.error(expected, text)
            if any(w <= 0 for k, w in weights.items() if k.startswith("gres/gpu")):
                raise where.error(expected + " with a GPU weight > 0", text)
            out[key] = text
        return out


@dataclass(frozen=True)
class MigModels:
    """`billing.mig_models`: MIG GRES type (or bare profile) -> the GPU model its slices belong to.

    A GRES type such as `1g.10gb` names no GPU: its slices are counted under, and priced at the rate of, the
    model given here (slurmscope.mig). Keys are matched without regard to case."""

    default: dict[str, str]

    def parse(self, value: Any, at: _At) -> dict[str, str]:
        if not isinstance(value, Mapping):
            raise at.error('a table of <MIG GRES type> = "<GPU model>"', value)
        out: dict[str, str] = {}
        for key, model in value.items():
            where = at.child(key)
            if not mig.is_mig_type(key):
                raise ConfigError(
                    f"{at.source}: key '{where.key}' is not a MIG GRES type "
                    "(a profile such as 1g.10gb, or a type such as a100_3g.40gb)"
                )
            if not isinstance(model, str) or not model.strip():
                raise where.error("a GPU model name such as 'a100'", model)
            out[key.lower()] = model.strip()
        return out


BUDGET_AMOUNTS: dict[str, Num] = {
    "usd": Num(0.0, positive=True),
    "gpu_hours": Num(0.0, positive=True),
}
BUDGET_MONTHLY = {"usd_per_month": "usd", "gpu_hours_per_month": "gpu_hours"}
BUDGET_PERIODS = ("month", "quarter", "year")
BUDGET_EXPECTED = (
    "a table { usd_per_month = 5000 }, { gpu_hours_per_month = 2000 } or "
    '{ period = "quarter", usd = 15000, gpu_hours = 6000 }'
)
PERIOD_EXPECTED = (
    "'month', 'quarter', 'year' or a table { start = \"YYYY-MM\", end = \"YYYY-MM\" } (months, inclusive)"
)


def _budget_period(value: Any, at: _At) -> str | dict[str, str]:
    """`period`: a calendar month, quarter or year (billing zone), or one span of whole months."""
    if isinstance(value, str):
        if value not in BUDGET_PERIODS:
            raise at.error(PERIOD_EXPECTED, value)
        return value
    if not isinstance(value, Mapping):
        raise at.error(PERIOD_EXPECTED, value)
    for key in value:
        if key not in ("start", "end"):
            raise at.unknown(key, {"start": None, "end": None})
    out = {}
    for key in ("start", "end"):
        if key not in value:
            raise ConfigError(f"{at.source}: key '{at.key}' needs start and end (months 'YYYY-MM')")
        month = value[key]
        if not isinstance(month, str) or not _is_month(month):
            raise at.child(key).error("a month 'YYYY-MM'", month)
        out[key] = month
    if out["start"] > out["end"]:
        raise ConfigError(f"{at.source}: key '{at.key}': start {out['start']} is after end {out['end']}")
    return out


@dataclass(frozen=True)
class Budgets:
    """`budgets`: account -> {period, usd, gpu_hours}: an amount of money and/or GPU-hours per period.

    `usd_per_month` / `gpu_hours_per_month` are the monthly shorthand (period "month"). A period is whole
    billing months because spending is read from the monthly invoices. An account without an entry has no
    budget (no burn-down, no budget alert), never a budget of 0; outside a {start, end} period it has none."""

    default: dict[str, dict[str, Any]]

    def parse(self, value: Any, at: _At) -> dict[str, dict[str, Any]]:
        if not isinstance(value, Mapping):
            raise at.error("a table of <account> = { period = ..., usd = ..., gpu_hours = ... }", value)
        known = {"period": None, **BUDGET_AMOUNTS, **BUDGET_MONTHLY}
        out: dict[str, dict[str, Any]] = {}
        for account, entry in value.items():
            where = at.child(account)
            if not isinstance(entry, Mapping):
                raise where.error(BUDGET_EXPECTED, entry)
            for key in entry:
                if key not in known:
                    raise where.unknown(key, known)
            period = _budget_period(entry["period"], where.child("period")) if "period" in entry else "month"
            budget: dict[str, Any] = {"period": period}
            for key, item in entry.items():
                if key == "period":
                    continue
                amount = BUDGET_MONTHLY.get(key, key)
                if key in BUDGET_MONTHLY and period != "month":
                    raise ConfigError(
                        f"{at.source}: key '{where.child(key).key}' is a monthly amount but the period is "
                        f"{period!r}: use {amount} (the amount per period)"
                    )
                if amount in budget:
                    raise ConfigError(
                        f"{at.source}: keys '{where.child(key).key}' and '{where.child(amount).key}' both "
                        f"set the {amount} budget: use one"
                    )
                budget[amount] = float(BUDGET_AMOUNTS[amount].parse(item, where.child(key)))
            if len(budget) == 1:
                raise ConfigError(
                    f"{at.source}: key '{where.key}' needs an amount: usd or gpu_hours "
                    "(usd_per_month or gpu_hours_per_month for a monthly budget)"
                )
            out[account] = budget
        return out


def _is_duration(text: str) -> bool:
    return bool(re.fullmatch(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+", text))


DURATION = Str("", check=_is_duration, what="a Prometheus duration such as '10m', '1h30m' or '0s'")
THRESHOLD_KEYS: dict[str, Num | Str] = {
    # how far past the line an alert fires; each is the lower-case name of its constant in alerts/thresholds.py
    "node_drained_max_seconds": Num(0, low=1),
    "node_flap_events": Num(0, low=1),
    "job_failure_ratio": Num(0.0, positive=True, high=1),
    "job_failure_min_jobs": Num(0, low=1),
    "requeues_per_hour": Num(0),
    "node_fail_kills_per_hour": Num(0, low=1),
    "backfill_stall_seconds": Num(0, low=1),
    "wait_p90_drift_factor": Num(0.0, positive=True),
    "wait_p90_min_seconds": Num(0),
    "wait_p90_min_jobs": Num(0, low=1),
    "starvation_pending_seconds": Num(0, low=1),
    "budget_spent_ratio": Num(0.0, positive=True),
    "budget_forecast_ratio": Num(0.0, positive=True),
    "util_drift_factor": Num(0.0, positive=True, high=1),
    "collector_stale_runs": Num(0, low=1),
    "collector_stale_min_seconds": Num(0),
    "pipeline_stale_seconds": Num(0, low=1),
    "metrics_stale_seconds": Num(0, low=1),
    "agents_down_ratio": Num(0.0, positive=True, high=1),
    "agents_down_min": Num(0, low=1),
    # how long the condition must hold (the rule's `for:`)
    **{
        f"{name}_for": DURATION
        for name in (
            "node_down",
            "node_drained",
            "node_flap",
            "row_remap",
            "throttle",
            "job_failure",
            "requeue",
            "node_fail",
            "backfill_stall",
            "wait_p90_drift",
            "starvation",
            "budget_spent",
            "budget_forecast",
            "util_drift",
            "gpu_mismatch",
            "collector_stale",
            "collector_failing",
            "pipeline_stale",
            "exporter_down",
            "agent_down",
            "agents_down",
            "rule_failures",
            "controller_down",
            "metrics_stale",
            "drift",
            "trend_drift",
        )
    },
}


@dataclass(frozen=True)
class AlertThresholds:
    """`alerts.thresholds`: the alert thresholds an operator tunes, by the lower-case name of their constant
    in alerts/thresholds.py, which holds every default with its reason (the core cannot import it, so only
    the keys a file sets are kept here; tests/alerts/test_rules_thresholds.py checks that each key names a
    constant whose default it accepts).
    The GPU throttling threshold is health.throttle_ratio, one number for the verdict and the alert."""

    default: dict[str, Any]

    def parse(self, value: Any, at: _At) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise at.error("a table of <threshold> = <value>", value)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key not in THRESHOLD_KEYS:
                raise at.unknown(key, THRESHOLD_KEYS)
            out[key] = THRESHOLD_KEYS[key].parse(item, at.child(key))
        return out


@dataclass(frozen=True)
class XidActions:
    """`health.xid_actions`: XID code -> action, replacing NVIDIA's resolution for that code (slurmscope.xid).

    An XID NVIDIA attributes to the application cannot be made failing: the verdict would blame the hardware
    for the job's bug, the one mistake the catalogue is there to prevent."""

    default: dict[int, str]

    def parse(self, value: Any, at: _At) -> dict[int, str]:
        choices = tuple(a.value for a in xid.Action)
        if not isinstance(value, Mapping):
            raise at.error(f"a table of <XID code> = <action> ({_one_of(choices)})", value)
        out: dict[int, str] = {}
        for key, action in value.items():
            where = at.child(str(key))
            code = str(key).strip()
            if not code.isdigit() or int(code) == 0:
                raise ConfigError(f"{at.source}: key '{where.key}' is not an XID code (a positive integer)")
            if action not in choices:
                raise where.error(_one_of(choices), action)
            if xid.VERDICT[xid.Action(action)] == "failing" and xid.lookup(int(code)).application:
                raise ConfigError(
                    f"{at.source}: key '{where.key}': NVIDIA attributes XID {int(code)} to the application; "
                    f"it cannot be made {action} (failing)"
                )
            out[int(code)] = action
        return out


def _is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _is_host(name: str) -> bool:
    """An IPv4/IPv6 address or an RFC 1123 host name."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    labels = name.removesuffix(".").split(".")
    return 0 < len(name) <= 253 and all(HOST_LABEL.fullmatch(label) for label in labels)


def _is_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        port = parts.port  # ValueError when out of range or not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and _is_host(parts.hostname or "") and port != 0


def _is_base_url(text: str) -> bool:
    return bool(re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S*/", text))


def _is_month(text: str) -> bool:
    match = re.fullmatch(r"(\d{4})-(\d{2})", text)
    return bool(match) and 1 <= int(match.group(2)) <= 12


LAKE_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")


def _is_lake_target(text: str) -> bool:
    """'' (no scheduled export), a path, or a URL whose scheme pyarrow's filesystem layer opens."""
    if "://" not in text:
        return True
    return urlsplit(text).scheme in LAKE_SCHEMES and bool(urlsplit(text).netloc or urlsplit(text).path)


def _is_regex(text: str) -> bool:
    """Valid for Python and for Polars (Rust's regex crate: no look-around or backreferences)."""
    import polars as pl

    try:
        re.compile(text)
        pl.Series([""]).str.contains(text)
    except (re.error, pl.exceptions.ComputeError):
        return False
    return True


REGEX = "a regular expression (case-insensitive; Python and Rust syntax, no look-around; '' matches nothing)"
# Node incident causes (pipelines/reliability.py, docs/pipelines.md#reliability): what a DOWN/DRAIN reason says.
HARDWARE_REASONS = (
    r"\bxid\b|\becc\b|nvlink|pcie|off the bus|fallen off|\bgpus?\b.*\b(error|fail|lost|missing|dead|bad|hung)"
    r"|\b(lost|missing|failed|dead|bad)\b.*\bgpus?\b|gres/gpu count|dimm|memory error|\bmce\b|machine check"
    r"|\bdisk\b|\bnvme\b|\bpsu\b|power supply|\bfans?\b|thermal|overheat|hardware|\bhw\b|\brma\b|infiniband"
    r"|\bhca\b|link (down|flap)"
)
FAILURE_REASONS = (
    r"not responding|unexpectedly rebooted|kill task failed|prolog|epilog|batch job complete failure"
    r"|health ?check|\bnhc\b|low (realmemory|socket|cpu|tmpdisk)|\bfail|\berror|crash|panic|\bhung\b|\boom\b"
    r"|unreachable|time ?out"
)
MAINTENANCE_REASONS = (
    r"maint|upgrade|update|patch|reinstall|reimage|provision|firmware|\bbios\b|kernel|scheduled|planned"
    r"|decommission|retire|reboot|testing|burn.?in|benchmark|\badmin\b"
)

SLURM_COMMANDS = ("sacct", "sinfo", "squeue", "sshare", "sdiag", "sacctmgr", "scontrol")
ALL_CLUSTERS = "all"
"""`--cluster all`: the word is reserved, so no cluster may be named so."""
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def is_cluster_name(name: str) -> bool:
    """A name that is also a directory of `report --cluster all` and a lake partition; never 'all'."""
    return bool(CLUSTER_NAME.fullmatch(name)) and name.lower() != ALL_CLUSTERS


PER_CLUSTER_SECTIONS = ("slurm", "collect", "nvml", "fairshare", "billing", "budgets")
"""Sections a `[[clusters]]` entry may override for its cluster: how it is reached (Slurm commands or
slurmrestd, agents), how it is collected, and how it is charged. The rest (database, exporter, lake, alerts,
pipelines tuning, drift, health, report) belongs to the one service and applies to every cluster."""


def _partial(spec: Any, value: Any, at: _At) -> Any:
    """Only the keys a `[[clusters]]` entry gives, each checked by the section's own spec."""
    if not isinstance(spec, Table):
        return spec.parse(value, at)  # a whole-table key (budgets): the entry's table replaces it
    if not isinstance(value, Mapping):
        raise at.error("a table", value)
    out = {}
    for key, item in value.items():
        if key not in spec.fields:
            raise at.unknown(key, spec.fields)
        out[key] = spec.fields[key].parse(item, at.child(key))
    return out


@dataclass(frozen=True)
class Clusters:
    """`[[clusters]]`: several clusters served by one `serve` into one database.

    Each entry is a name, optionally its time zone, and the keys of PER_CLUSTER_SECTIONS that differ for it
    (its own slurm.conf, `-M`, binaries, slurmrestd, agents, price book); everything else comes from the
    file's top-level sections. The first entry is the default of commands run without `--cluster`.
    """

    default: list[dict[str, Any]]

    def parse(self, value: Any, at: _At) -> list[dict[str, Any]]:
        expected = "an array of tables [[clusters]], each with a name"
        if not isinstance(value, list) or not value:
            raise at.error(expected, value)
        known = {"name": None, "timezone": None, **dict.fromkeys(PER_CLUSTER_SECTIONS)}
        out: list[dict[str, Any]] = []
        seen: dict[str, str] = {}
        for i, entry in enumerate(value):
            where = at.item(i)
            if not isinstance(entry, Mapping):
                raise where.error('a table with name = "<cluster>"', entry)
            for key in entry:
                if key not in known:
                    raise where.unknown(key, known)
            if "name" not in entry:
                raise ConfigError(f"{at.source}: key '{where.key}' needs name = \"<cluster>\"")
            name = CLUSTER.fields["name"].parse(entry["name"], where.child("name"))
            if name.lower() in seen:
                raise ConfigError(
                    f"{at.source}: keys '{seen[name.lower()]}' and '{where.child('name').key}' name the same "
                    f"cluster {name!r} (names are case-insensitive: Slurm's database lowercases them)"
                )
            seen[name.lower()] = where.child("name").key
            parsed: dict[str, Any] = {"name": name}
            if "timezone" in entry:
                parsed["timezone"] = ZONE.parse(entry["timezone"], where.child("timezone"))
            for section in PER_CLUSTER_SECTIONS:
                if section in entry:
                    parsed[section] = _partial(SCHEMA.fields[section], entry[section], where.child(section))
            out.append(parsed)
        return out


ZONE = Str("UTC", check=_is_zone, what="an IANA time zone such as 'Europe/Berlin'")
DAY = 86400  # the longest health window: pipelines/health.py reads one day of events and samples back
CLUSTER = Table(
    {
        "name": Str(
            "default",
            check=is_cluster_name,
            what="a cluster name (letters, digits, '_', '.', '-', at most 64, not 'all')",
        ),
        "timezone": ZONE,
    }
)

SCHEMA = Table(
    {
        "cluster": CLUSTER,
        "clusters": Clusters([]),
        "database": Table({"path": Str("slurmscope.duckdb", check=bool, what="a file path")}),
        "slurm": Table(
            {
                "bin_dir": Str(""),
                **{name: Str(name, check=bool, what="a command name or path") for name in SLURM_COMMANDS},
                "timeout_seconds": Num(60.0, positive=True),
                "conf": Str(""),
                "cluster_flag": Bool(False),
                "source": Str("cli", choices=("cli", "rest")),
                "rest_socket": Str(""),
                "rest_url": Str(
                    "",
                    check=lambda u: u == "" or _is_url(u),
                    what="an http(s) URL such as 'http://slurmrestd:6820'",
                ),
                "rest_user": Str(""),
                "rest_token_file": Str(""),
                "rest_api_version": Str(
                    "v0.0.38", choices=("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")
                ),
            }
        ),
        "collect": Table(
            {
                "sacct_window_seconds": Num(86400, low=1),
                "sacct_max_window_seconds": Num(31 * 86400, low=60),
                "sacct_target_rows": Num(50000, low=100),
                "sacct_overlap_seconds": Num(3600),
                "sacct_initial_lookback_seconds": Num(7 * 86400),
                "events_lookback_seconds": Num(30 * 86400),
            }
        ),
        "nvml": Table(
            {
                "interval_seconds": Num(10.0, low=1),
                "slow_interval_seconds": Num(60.0, low=1),
                "spool_rotate_seconds": Num(60.0, low=1, high=3600),
                "spool_dir": Str("/var/spool/slurmscope", check=bool, what="a directory"),
                "mapping_dir": Str("/run/slurmscope/gpu-jobs", check=bool, what="a directory"),
                "port": _port(9401),
                "agents": List([], Str("", check=_is_url, what="an agent URL such as 'http://gpu-001:9401'")),
                "spool_paths": List([], Str("", check=bool, what="a directory")),
                "web_config_file": Str(""),
                "agent_username": Str(""),
                "agent_password_file": Str(""),
                "agent_ca_file": Str(""),
            }
        ),
        "exporter": Table(
            {
                "address": Str(
                    "127.0.0.1", check=_is_host, what="an IP address or host name (0.0.0.0: all interfaces)"
                ),
                "port": _port(9400),
                "user_labels": Bool(False),
                "web_config_file": Str(""),
            }
        ),
        "fairshare": Table(
            {
                "decay_half_life_seconds": Num(7 * 86400),
                "usage_reset_period": Str(
                    "NONE",
                    choices=("NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY"),
                    fold_case=True,
                ),
                "charge": Str("billing", choices=("billing", "gpu_seconds")),
                "algorithm": Str("fair_tree", choices=("fair_tree", "classic")),
            }
        ),
        "billing": Table(
            {
                "timezone": ZONE,
                "currency": Str("usd", check=bool, what="a currency code"),
                "idle_cost": Str("separate", choices=("separate", "spread")),
                "charge_by": Str("gpu", choices=("gpu", "billing_tres")),
                "bill_down": Bool(False),
                "tres_billing_weights": BillingWeights({}),
                "mig_models": MigModels({}),
                "rates": PriceBook({"default": 2.0}),
                "close_after_days": Num(5),
                "reissue_months": List([], Str("", check=_is_month, what="a month 'YYYY-MM'")),
                "energy_usd_per_kwh": Num(0.0),
                "pue": Num(1.0, low=1),
            }
        ),
        "pipelines": Table(
            {
                "incremental_lookback_seconds": Num(2 * 86400),
                "incremental_margin_seconds": Num(600),
                "occupancy_bucket_seconds": Num(900, low=1),
                "node_snapshot_max_gap_seconds": Num(3600, low=1),
                "full_slice_days": Num(30),
            }
        ),
        "reliability": Table(
            {
                "checkpoint_cost_seconds": Num(300.0),
                "restart_cost_seconds": Num(600.0),
                "fault_grace_seconds": Num(600),
                "job_sizes": List([1, 2, 4, 8, 16, 32, 64, 128], Num(1, low=1)),
                "incident_merge_seconds": Num(300),
                "hardware_reasons": Str(HARDWARE_REASONS, check=_is_regex, what=REGEX),
                "failure_reasons": Str(FAILURE_REASONS, check=_is_regex, what=REGEX),
                "maintenance_reasons": Str(MAINTENANCE_REASONS, check=_is_regex, what=REGEX),
            }
        ),
        "drift": Table(
            {
                "gpu_z_threshold": Num(4.0),
                "error_z_threshold": Num(4.0),
                "trend_z_threshold": Num(3.5),
                "baseline_days": Num(28, low=1, high=59),
                "min_baseline_days": Num(7, high=59),
                "util_bin_percent": Num(10.0, positive=True, high=100),
                "min_gpu_minutes": Num(30),
                "min_fleet_gpus": Num(3),
                "idle_util_percent": Num(5.0, high=100),
                "fairshare_starved_ratio": Num(0.5),
                "fairshare_over_served_ratio": Num(2.0),
            }
        ),
        "report": Table({"pseudonymise_users": Bool(False)}),
        "budgets": Budgets({}),
        "grafana": Table({"provisioning_dir": Str("")}),  # read by `doctor` only (docs/dashboards.md)
        "lake": Table(  # `serve`'s scheduled `export` (slurmscope/lake.py, docs/lake.md); off while export_dir is ''
            {
                "export_dir": Str(
                    "",
                    check=_is_lake_target,
                    what="a directory or an object-store URL such as 's3://bucket/lake'",
                ),
                "export_interval_seconds": Num(3600, low=60),
            }
        ),
        "retention": Table(  # slurmscope/retention.py, run by `serve` (docs/configuration.md#retention)
            {
                "gpu_minutes_days": KeepPeriod(
                    35, 7, "days", "the incremental health and drift runs read up to 4 days of minutes"
                ),
                "sacct_lake_months": KeepPeriod(
                    0, 3, "months", "cost rebuilds the open month and the one before, drift reads 61 days"
                ),
                "snapshot_lake_months": KeepPeriod(
                    0, 3, "months", "cost rebuilds the open month and the one before, drift reads 61 days"
                ),
                "run_log_days": KeepPeriod(7, 1, "days", "a whole day"),
                "interval_seconds": Num(3600, low=60),
            }
        ),
        "alerts": Table(  # runbook_url = runbook_base_url + <AlertName>.md (docs/configuration.md)
            {
                "runbook_base_url": Str(
                    "file:///opt/slurmscope/docs/runbooks/",
                    check=_is_base_url,
                    what="an absolute URL ending in '/'",
                ),
                "thresholds": AlertThresholds({}),
            }
        ),
        "health": Table(  # node and GPU health verdicts (pipelines/health.py, docs/pipelines.md#health)
            {
                "event_window_seconds": Num(3600, high=DAY),
                "xid_actions": XidActions({}),
                "throttle_ratio": Num(0.1, high=1),
                "throttle_window_seconds": Num(900, high=DAY),
                "temp_degraded_celsius": Num(85.0),
                "temp_failing_celsius": Num(95.0),
                "sample_max_age_seconds": Num(900, high=DAY),
                "gpu_forget_seconds": Num(86400, high=DAY),
                "nvlink_replay_recovery": Num(1, low=1),
                "nvlink_crc_per_second": Num(100.0, positive=True),
                "remap_growth_rows": Num(2, low=1),
                "remap_window_seconds": Num(86400, low=60, high=DAY),
            }
        ),
    }
)
"""Every key with its default, type and range; docs/configuration.md is the same table in words."""

DEFAULTS: dict[str, Any] = SCHEMA.default
"""The built-in value of every key: what a run reads where the file says nothing."""

ENV_NOT_CONFIG = {"SLURMSCOPE_CONFIG", "SLURMSCOPE_DB"}
MOVED = {
    "billing.default_rate_per_gpu_hour": "billing.rates.default",
    "health.critical_xids": "health.xid_actions (code -> action; NVIDIA's XID catalogue is the default)",
    "health.application_xids": "health.xid_actions (application XIDs come from NVIDIA's XID catalogue)",
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
    def clusters(self) -> tuple[str, ...]:
        """Every configured cluster: the `[[clusters]]` names in file order, else the one `cluster.name`."""
        return tuple(c["name"] for c in self.raw.get("clusters") or ()) or (self.cluster,)

    @property
    def listed(self) -> bool:
        """True when the file lists `[[clusters]]` (rather than the single `[cluster]`)."""
        return bool(self.raw.get("clusters"))

    def for_cluster(self, name: str) -> Config:
        """The settings of cluster `name` alone: the top-level sections with its `[[clusters]]` entry on top,
        and `clusters` that one name (so a `serve` or render given this config serves only it).

        A name the file does not list keeps the top-level sections under that name (`ingest --cluster x`
        of a recorded file from a cluster that is not collected live).
        """
        raw = copy.deepcopy(self.raw)
        raw["cluster"]["name"] = name
        entry = next((c for c in raw.get("clusters") or () if c["name"] == name), {})
        raw["clusters"] = [entry] if entry else []
        if "timezone" in entry:
            raw["cluster"]["timezone"] = entry["timezone"]
        for section in PER_CLUSTER_SECTIONS:
            if section not in entry:
                continue
            if isinstance(SCHEMA.fields[section], Table):
                raw[section].update(entry[section])
            else:
                raw[section] = entry[section]
        return Config(source=self.source, raw=raw)

    def slurm_cluster_args(self) -> list[str]:
        """`-M <cluster>` when `slurm.cluster_flag` is set: the command asks slurmdbd for this cluster's
        controller (https://slurm.schedmd.com/multi_cluster.html); otherwise nothing."""
        return ["-M", self.cluster] if self.raw["slurm"]["cluster_flag"] else []

    def slurm_environment(self, base: Mapping[str, str]) -> dict[str, str] | None:
        """`base` with SLURM_CONF set to `slurm.conf`, or None (inherit) when no slurm.conf is set."""
        conf = self.raw["slurm"]["conf"]
        return {**base, "SLURM_CONF": conf} if conf else None

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


def _moved(data: Mapping[str, Any], source: str) -> None:
    for old, new in MOVED.items():
        section, key = old.split(".")
        if isinstance(data.get(section), Mapping) and key in data[section]:
            raise ConfigError(f"{source}: unknown key '{old}'; it is now {new}")


def _environment(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    for name, value in sorted(env.items()):
        if not name.startswith("SLURMSCOPE_") or name in ENV_NOT_CONFIG:
            continue
        rest = name[len("SLURMSCOPE_") :].lower()
        section, _, key = rest.partition("_")
        spec = SCHEMA.fields.get(section)
        spec = spec.fields.get(key) if isinstance(spec, Table) else None
        if spec is None:
            raise ConfigError(
                f"environment: {name} names no config key (expected SLURMSCOPE_<SECTION>_<KEY>)"
            )
        if not isinstance(spec, (Num, Bool, Str, List, KeepPeriod)):
            raise ConfigError(f"environment: {name}: {section}.{key} is a table; set it in the config file")
        raw[section][key] = spec.parse(value, _At(f"environment {name}", f"{section}.{key}", env=True))


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Defaults, then the TOML file, then SLURMSCOPE_<SECTION>_<KEY> variables from `env`.

    Without an explicit path, ./slurmscope.toml is read when it exists.
    """
    env = os.environ if env is None else env
    raw = SCHEMA.default
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
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{source}: not UTF-8 text (TOML files are UTF-8): {exc.reason} at byte {exc.start}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
        _moved(data, source)
        raw = SCHEMA.parse(data, _At(source, ""))
        if raw["clusters"] and isinstance(data.get("cluster"), Mapping) and "name" in data["cluster"]:
            raise ConfigError(
                f"{source}: key 'cluster.name' and [[clusters]] both name clusters; list every cluster in"
                " [[clusters]] (the first is the default of --cluster)"
            )
    _environment(raw, env)
    if raw["clusters"]:
        if "SLURMSCOPE_CLUSTER_NAME" in env:
            raise ConfigError(
                f"environment SLURMSCOPE_CLUSTER_NAME: {source} lists [[clusters]]; choose one with --cluster"
            )
        raw["cluster"]["name"] = raw["clusters"][0]["name"]
    _check_together(raw, source)
    return Config(source=source, raw=raw)


def _check_together(raw: dict[str, Any], source: str) -> None:
    """Keys that are valid alone but not with each other."""
    for key, what in (("sacct_lake_months", "sacct months"), ("snapshot_lake_months", "snapshot months")):
        if raw["retention"][key] and not raw["lake"]["export_dir"]:
            raise ConfigError(
                f"{source}: key 'retention.{key}' expects 0 while lake.export_dir is empty: {what} "
                "are removed from the database only once the Parquet lake holds them"
            )


def check_listen(address: str, port: int, hint: str) -> None:
    """Fail now, in one line, when `address:port` cannot be bound, rather than after a long build.

    Binds the way http.server does (IPv4, SO_REUSEADDR) and lets go again; `hint` says what to change.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {address} is in use: {reason}; {hint}") from None
        raise ConfigError(f"cannot listen on {address}:{port}: {reason}; {hint}") from None
    except OverflowError as exc:
        raise ConfigError(f"cannot listen on {address}:{port}: {exc}; {hint}") from None
    finally:
        sock.close()
