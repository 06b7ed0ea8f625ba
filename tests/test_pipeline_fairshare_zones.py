"""Local dates from the UTC hour's offset (fairshare.with_local_date) against converting every instant."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import polars as pl
import pytest
from slurmscope.pipelines import fairshare as fs


def instants(year: int) -> pl.DataFrame:
    """One instant at a random point of every UTC hour of two years (so every transition hour is seen)."""
    rng = random.Random(year)
    hour = 3_600_000_000
    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000
    values = [start + h * hour + rng.randrange(hour) for h in range(2 * 366 * 24)]
    return pl.DataFrame({"us": [*values, None]}, schema={"us": pl.Int64})


@pytest.mark.parametrize(
    ("tz", "year"),
    [
        ("Europe/Berlin", 2025),  # transitions on the UTC hour
        ("Australia/Adelaide", 2025),  # +9:30/+10:30: transitions at half past a UTC hour
        ("Australia/Lord_Howe", 2025),  # a 30-minute DST
        ("America/St_Johns", 2025),  # -3:30/-2:30
        ("Africa/Monrovia", 1971),  # -0:44:30 until 1972-01-07 00:44:30 UTC
        ("Asia/Tehran", 2020),  # +3:30/+4:30, switching at local midnight: the date changes mid-hour
    ],
)
def test_local_date_from_hour_offsets_equals_converting_each_instant(tz: str, year: int):
    df = instants(year)
    zones = fs.zone_offsets(df.lazy(), tz).collect()
    switches = zones["switch"].drop_nulls().to_list()
    # every microsecond that matters around each transition inside an hour
    near = [t + d for t in switches for d in (-1_000_000, -1, 0, 1, 999_999)]
    df = pl.concat([df, pl.DataFrame({"us": near}, schema={"us": pl.Int64})])
    df = df.with_columns(ts=pl.from_epoch("us", "us").dt.replace_time_zone("UTC"))
    zones = fs.zone_offsets(df.lazy(), tz)
    got = fs.with_local_date(df.lazy(), pl.col("ts"), "day", zones).collect().sort("us", nulls_last=True)
    want = df.with_columns(day=fs.local_date(pl.col("ts"), tz)).sort("us", nulls_last=True)
    assert got["day"].to_list() == want["day"].to_list()
    if tz not in ("Europe/Berlin",):
        assert switches, "the sample should hold an hour with a transition inside it"


def test_without_zones_the_utc_date():
    df = pl.DataFrame({"ts": [datetime(2025, 3, 30, 23, 59, tzinfo=UTC), None]})
    got = fs.with_local_date(df.lazy(), pl.col("ts"), "day", None).collect()
    assert got["day"].to_list() == [datetime(2025, 3, 30).date(), None]


def test_instants_over_a_century_apart_still_find_their_hours():
    """Junk dates (a year 2300 End) make the hour table the hours present rather than every hour between."""
    ts = [
        datetime(2025, 10, 26, 0, 30, tzinfo=UTC),
        datetime(2025, 10, 26, 1, 30, tzinfo=UTC),
        datetime(2300, 1, 1, 23, 30, tzinfo=UTC),
    ]
    df = pl.DataFrame({"ts": ts}).with_columns(us=pl.col("ts").dt.epoch("us"))
    zones = fs.zone_offsets(df.lazy(), "Europe/Berlin").collect()
    assert zones.height == 3
    got = fs.with_local_date(df.lazy(), pl.col("ts"), "day", zones.lazy()).collect()
    assert got["day"].to_list() == df.select(fs.local_date(pl.col("ts"), "Europe/Berlin"))["ts"].to_list()
