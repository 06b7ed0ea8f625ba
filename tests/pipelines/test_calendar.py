"""calendar: the billing day of an instant from the hour-offset table (DayLookup) against converting each
instant (local_day, the reference), and the first instant of each day, in zones whose days are odd."""

from __future__ import annotations

from datetime import UTC, date, datetime

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slurmscope.pipelines import calendar

US = 1_000_000
HOUR = 3600 * US

# (zone, a year with its odd days)
ZONES = [
    ("UTC", 2025),
    ("Europe/Berlin", 2025),  # changes on the UTC hour
    ("America/Havana", 2023),  # DST at midnight: 12 March starts at 01:00, 5 November has 00:00 twice
    ("America/Santiago", 2022),  # DST at midnight, clocks back from 24:00 to 23:00
    ("Asia/Tehran", 2020),  # +3:30/+4:30, switching at local midnight: the date changes mid-hour
    ("Australia/Lord_Howe", 2023),  # a 30-minute DST
    ("Australia/Adelaide", 2025),  # changes at half past a UTC hour
    ("Pacific/Apia", 2011),  # 30 December 2011 skipped
    ("Africa/Monrovia", 1971),  # -0:44:30 until 1972-01-07 00:44:30 UTC
]


def span(year: int) -> tuple[int, int]:
    lo = calendar.epoch_us(datetime(year, 1, 1, tzinfo=UTC))
    return lo, lo + 2 * 366 * 24 * HOUR


def changes(tz: str, year: int) -> list[int]:
    """Every instant at which the zone's offset changes in the two years (inside an hour or at its start)."""
    lo, hi = span(year)
    table = calendar.lookup(tz, lo, hi)
    if table.hours is None:
        return []
    h = table.hours.with_columns(h=pl.int_range(pl.len(), dtype=pl.Int64) + table.first_hour)
    inside = h["switch"].drop_nulls().to_list()
    at_start = h.filter(pl.col("o0") != pl.col("o1").shift(1))["h"].to_list()[1:]
    return inside + [x * HOUR for x in at_start]


def days_of(tz: str, year: int, us: list[int]) -> tuple[list, list]:
    lo, hi = span(year)
    df = pl.DataFrame({"us": us}, schema={"us": pl.Int64})
    fast = df.select(calendar.lookup(tz, lo, hi).day(pl.col("us")))["us"].to_list()
    ref = df.select(calendar.local_day(pl.from_epoch("us", "us").dt.replace_time_zone("UTC"), tz))
    return fast, ref["us"].to_list()


@settings(max_examples=60, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    picks=st.lists(st.tuples(st.integers(0, 10**9), st.integers(-2 * US, 2 * US)), min_size=1, max_size=40),
    anywhere=st.lists(st.integers(0, 2 * 366 * 24 * HOUR - 1), max_size=40),
)
def test_day_from_the_hour_table_is_the_converted_instants_day(zone, picks, anywhere):
    tz, year = zone
    near = changes(tz, year)
    lo, _ = span(year)
    us = [lo + x for x in anywhere]
    if near:
        us += [near[i % len(near)] + d for i, d in picks]
    fast, ref = days_of(tz, year, us)
    assert fast == ref


@pytest.mark.parametrize(("tz", "year"), ZONES)
def test_every_microsecond_around_each_change(tz, year):
    near = changes(tz, year)
    if tz not in ("UTC",):
        assert near, "the zone changes its offset in these two years"
    us = [t + d for t in near for d in (-US, -1, 0, 1, US - 1)]
    fast, ref = days_of(tz, year, us)
    assert fast == ref


@pytest.mark.parametrize(("tz", "year"), ZONES)
def test_a_day_starts_at_its_first_instant(tz, year):
    """local_day(start) is the day (or a later one, for a skipped day) and the microsecond before is earlier."""
    starts = calendar.day_starts(date(year, 1, 1), date(year + 1, 12, 31), tz)
    assert starts["start"].null_count() == 0
    at = starts.select(
        "day",
        on=calendar.local_day(pl.col("start"), tz),
        before=calendar.local_day(pl.col("start") - pl.duration(microseconds=1), tz),
    )
    assert at.filter(pl.col("on") < pl.col("day")).height == 0
    assert at.filter(pl.col("before") >= pl.col("day")).height == 0


def test_odd_days_start_where_the_reference_puts_them():
    def start(tz: str, day: date) -> datetime:
        return calendar.day_starts(day, day, tz)["start"].item()

    # Havana skips 00:00-01:00 on 12 March 2023: the day starts at 01:00 CDT
    assert start("America/Havana", date(2023, 3, 12)) == datetime(2023, 3, 12, 5, tzinfo=UTC)
    # Apia skipped 30 December 2011: it starts and ends where 31 December starts
    assert start("Pacific/Apia", date(2011, 12, 30)) == start("Pacific/Apia", date(2011, 12, 31))
    assert start("Pacific/Apia", date(2011, 12, 31)) == datetime(2011, 12, 30, 10, tzinfo=UTC)
    # Tehran jumped from 24:00 to 01:00 on 22 March 2020 (+3:30 to +4:30)
    assert start("Asia/Tehran", date(2020, 3, 21)) == datetime(2020, 3, 20, 20, 30, tzinfo=UTC)
    # Havana's 5 November 2023 has 00:00 twice: the day starts at the first
    assert start("America/Havana", date(2023, 11, 5)) == datetime(2023, 11, 5, 4, tzinfo=UTC)


def test_day_start_expression_equals_the_table():
    days = pl.DataFrame({"day": pl.date_range(date(2011, 12, 25), date(2012, 1, 5), "1d", eager=True)})
    got = days.select(calendar.day_start(pl.col("day"), "Pacific/Apia"))["day"]
    want = calendar.day_starts(date(2011, 12, 25), date(2012, 1, 5), "Pacific/Apia")["start"]
    assert got.to_list() == want.to_list()


def test_instants_over_a_century_apart_are_converted_one_by_one():
    """Junk dates (a year 2300 End) leave the span untabulated: the reference gives each day."""
    ts = [
        datetime(2025, 10, 26, 0, 30, tzinfo=UTC),
        datetime(2025, 10, 26, 1, 30, tzinfo=UTC),
        datetime(2300, 1, 1, 23, 30, tzinfo=UTC),
    ]
    df = pl.DataFrame({"ts": ts}).with_columns(us=pl.col("ts").dt.epoch("us"))
    days = calendar.lookup_of("Europe/Berlin", df.lazy())
    assert days.hours is None
    got = df.select(days.day_of(pl.col("ts")))["ts"].to_list()
    assert got == df.select(calendar.local_day(pl.col("ts"), "Europe/Berlin"))["ts"].to_list()


def test_sql_tables_cut_days_as_the_lookup_does():
    lo, hi = datetime(2023, 3, 1, tzinfo=UTC), datetime(2023, 3, 20, tzinfo=UTC)
    hours, days = calendar.sql_tables("America/Havana", lo, hi)
    assert hours["h"].diff().drop_nulls().unique().to_list() == [1]
    assert days.filter(pl.col("day") == date(2023, 3, 12))["start_us"].item() == calendar.epoch_us(
        datetime(2023, 3, 12, 5, tzinfo=UTC)
    )
    assert days["day"].min() <= date(2023, 2, 28) and days["day"].max() >= date(2023, 3, 21)
    empty_hours, empty_days = calendar.sql_tables("UTC", None, None)
    assert empty_hours.height == 0 and empty_days.height == 0
