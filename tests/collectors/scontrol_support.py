"""Shared by the scontrol parsers' tests (show config, show reservation, ping): one way to run a parser and
one property that every line is kept or quarantined."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from hypothesis import strategies as st
from slurmscope.collectors import ping
from slurmscope.collectors import slurm_config as config_parser
from slurmscope.collectors.slurm_format import is_blank

from tests.paths import FIXTURES

FIX = FIXTURES


T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


S = "SckyzO__slurm_exporter"


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def run(module, data: bytes | str, tz: str = "UTC", snapshot: datetime = T0):
    if isinstance(data, str):
        data = data.encode()
    return module.parse(data, cluster="c", snapshot_time=snapshot, tz=ZoneInfo(tz))


_ALPHABET = st.sampled_from(
    list(" =\n\t:()abcXYZ0123456789")
    + [
        "ReservationName=r",
        " StartTime=2024-01-01T00:00:00",
        "Slurmctld(primary) at h is UP",
        "Key = value",
        "Cgroup Support Configuration:",
        "No reservations in the system",
    ]
)


def _accounted(module, data: bytes) -> None:
    """No exception; every non-blank line is quarantined or accounted for by a kept record."""
    p = run(module, data)
    lines = data.split(b"\n")
    texts = [line.decode("utf-8", "replace") for line in lines]
    nonblank = {i for i, t in enumerate(texts, start=1) if not is_blank(t)}
    q = set(p.quarantine["line_no"].to_list())
    assert q <= nonblank
    for i in sorted(nonblank - q):
        alone = run(module, lines[i - 1])
        height = next(iter(alone.tables.values())).height
        if module is ping:
            assert height == 1  # a controller line
        elif module is config_parser:
            assert height == 1 or alone.quarantine.height == 0  # a setting, a section title or the header
        else:
            starts = [
                j
                for j in range(1, i + 1)
                if j not in q and texts[j - 1].strip().startswith("ReservationName=")
            ]
            assert starts or texts[i - 1].strip().startswith("No reservations in the system")
