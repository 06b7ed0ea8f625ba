"""Billing days: the calendar day of an instant in the configured zone, and the instant each day starts.

Every mart cuts time at the billing zone's days, so all of them must put an instant in the same day, also
where the zone's rules are odd: days that begin at 01:00 (a DST change at midnight, as in Havana, Santiago
or Tehran until 2022), offsets of half an hour or of odd seconds (Lord Howe, Monrovia until 1972), a day the
zone skipped (Apia, 30 December 2011). `local_day` converts each instant with the time-zone database: it is
the reference, and where a faster way would disagree, it decides. `DayLookup` gives the same day from the
zone's offset in every UTC hour of a span, with the instant of each change inside an hour found to the
second, so that an instant's day is a lookup by position and an addition: converting 10M instants one by
one cost 0.64 CPU-s per column, several times the lookup.

A day starts at its first instant whose billing day is that day or a later one: its local midnight, or,
where the zone jumps over midnight, the instant of the jump (so a skipped day starts and ends at one instant).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import polars as pl

UTC_DT = pl.Datetime("us", "UTC")
HOUR_US = 3_600_000_000
DAY_US = 86_400_000_000
MAX_SPAN_HOURS = 1_000_000
"""Longest span (114 years) a DayLookup tabulates; instants further apart (junk dates) are converted one by one."""
BLOCK_HOURS = 8192
"""Tables cover whole blocks of 8192 hours (341 days), so the slices of a full rebuild share one."""
MARGIN_US = 2 * DAY_US
"""Hours tabulated beyond the instants asked for: a day's start lies within 14 h of its UTC midnight."""


def local_day(ts: pl.Expr, tz: str) -> pl.Expr:
    """Calendar day (Date) in `tz` of each instant, converted one by one: the reference."""
    return ts.dt.convert_time_zone(tz).dt.date()


def local_date(ts: datetime, tz: str) -> date:
    """Calendar date of one instant in `tz`."""
    return ts.astimezone(ZoneInfo(tz)).date()


def epoch_us(ts: datetime) -> int:
    return (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _offset(us: pl.Expr, tz: str) -> pl.Expr:
    """UTC offset of `tz` (microseconds) at the instants `us` (epoch microseconds)."""
    t = pl.from_epoch(us, "us").dt.replace_time_zone("UTC")
    wall = t.dt.convert_time_zone(tz).dt.replace_time_zone(None)
    return (wall - t.dt.replace_time_zone(None)).dt.total_microseconds()


def hour_offsets(tz: str, hours: pl.LazyFrame) -> pl.LazyFrame:
    """h, o0, o1, switch for each UTC hour `h` (epoch hours) of `hours`: the offset at its start and at its
    end, and where they differ, the first instant of the hour on the new offset (the time-zone database's
    changes fall on whole seconds)."""
    start = pl.col("h") * HOUR_US
    hours = hours.with_columns(o0=_offset(start, tz), o1=_offset(start + (HOUR_US - 1), tz))
    at = start + pl.col("s") * 1_000_000
    switch = (
        hours.filter(pl.col("o0") != pl.col("o1"))
        .with_columns(s=pl.int_ranges(0, 3600, dtype=pl.Int64))
        .explode("s")
        .filter(_offset(at, tz) == pl.col("o1"))
        .group_by("h")
        .agg(at.min().alias("switch"))
    )
    return hours.join(switch, on="h", how="left")


@dataclass(frozen=True, eq=False)
class DayLookup:
    """The billing day of instants from a table of `tz`'s offsets per UTC hour from `first_hour` on
    (`hours`: o0, o1, switch); without a table (UTC, or a span too long to tabulate) the day is the UTC date
    or converted one by one."""

    tz: str
    first_hour: int = 0
    hours: pl.DataFrame | None = None

    def day(self, us: pl.Expr) -> pl.Expr:
        """Billing day (Date) of the instants `us` (epoch microseconds), which must lie in the tabulated span."""
        if self.tz == "UTC":
            return (us // DAY_US).cast(pl.Int32).cast(pl.Date)
        if self.hours is None:
            return local_day(pl.from_epoch(us, "us").dt.replace_time_zone("UTC"), self.tz)
        i = us // HOUR_US - self.first_hour
        switch = pl.lit(self.hours["switch"]).gather(i)
        off = (
            pl.when(us >= switch)
            .then(pl.lit(self.hours["o1"]).gather(i))
            .otherwise(pl.lit(self.hours["o0"]).gather(i))
        )
        return ((us + off) // DAY_US).cast(pl.Int32).cast(pl.Date)

    def day_of(self, ts: pl.Expr) -> pl.Expr:
        """Billing day (Date) of the instants `ts` (UTC Datetime)."""
        return self.day(ts.dt.epoch("us"))


def lookup(tz: str, lo_us: int | None, hi_us: int | None) -> DayLookup:
    """The DayLookup for instants from `lo_us` to `hi_us` (epoch microseconds; None: no instant)."""
    if tz == "UTC" or lo_us is None or hi_us is None:
        return DayLookup(tz)
    first = (lo_us - MARGIN_US) // HOUR_US // BLOCK_HOURS * BLOCK_HOURS
    last = ((hi_us + MARGIN_US) // HOUR_US // BLOCK_HOURS + 1) * BLOCK_HOURS - 1
    if last - first >= MAX_SPAN_HOURS:
        return DayLookup(tz)
    return DayLookup(tz, first, _hour_table(tz, first, last))


@functools.lru_cache(maxsize=16)
def _hour_table(tz: str, first: int, last: int) -> pl.DataFrame:
    hours = pl.LazyFrame({"h": pl.int_range(first, last + 1, dtype=pl.Int64, eager=True)})
    return hour_offsets(tz, hours).sort("h").collect().select("o0", "o1", "switch")


def lookup_of(tz: str, instants: pl.LazyFrame) -> DayLookup:
    """The DayLookup for every instant in the column `us` (epoch microseconds) of `instants`."""
    if tz == "UTC":
        return DayLookup(tz)
    lo, hi = instants.select(pl.col("us").min().alias("lo"), pl.col("us").max().alias("hi")).collect().row(0)
    return lookup(tz, lo, hi)


def _starts(days: pl.Series, tz: str) -> pl.Series:
    """First instant (UTC) of each billing day in `days`: local midnight (the earlier one when the clocks go
    back over it), else the end of the jump over it."""
    midnight = days.cast(pl.Datetime("us"))
    starts = midnight.dt.replace_time_zone(
        tz, ambiguous="earliest", non_existent="null"
    ).dt.convert_time_zone("UTC")
    skipped = midnight.filter(starts.is_null() & days.is_not_null()).unique()
    if skipped.len() == 0:
        return starts
    # the jump over a midnight M lies within 15 h of M read as UTC (offsets stay within -12 h and +14 h)
    walls = pl.DataFrame({"wall": skipped.dt.epoch("us")})
    hours = walls.select(
        h=pl.int_ranges(pl.col("wall") // HOUR_US - 15, pl.col("wall") // HOUR_US + 16, dtype=pl.Int64)
    ).explode("h")
    table = hour_offsets(tz, hours.unique().lazy()).sort("h").collect()
    # a change inside an hour (at `switch`) or at its start (from the previous hour's end offset)
    changes = pl.concat(
        [
            table.select(t="switch", before="o0", after="o1"),
            table.select(
                t=pl.col("h") * HOUR_US,
                before=pl.when(pl.col("h").shift(1) == pl.col("h") - 1).then(pl.col("o1").shift(1)),
                after="o0",
            ),
        ]
    ).filter(
        pl.col("t").is_not_null() & pl.col("before").is_not_null() & (pl.col("before") < pl.col("after"))
    )
    ends = (
        walls.join(changes, how="cross")
        .filter(
            (pl.col("t") + pl.col("before") <= pl.col("wall"))
            & (pl.col("wall") < pl.col("t") + pl.col("after"))
        )
        .group_by("wall")
        .agg(pl.col("t").min().alias("switch"))
    )
    jump = dict(zip(ends["wall"].to_list(), ends["switch"].to_list(), strict=True))
    fixed = midnight.dt.epoch("us").replace_strict(jump, default=None, return_dtype=pl.Int64)
    jumped = pl.from_epoch(fixed, "us").dt.replace_time_zone("UTC")
    return pl.select(pl.coalesce(pl.lit(starts), pl.lit(jumped))).to_series().alias(days.name)


def day_start(day: pl.Expr, tz: str) -> pl.Expr:
    """First instant (UTC Datetime) of the billing day `day` (a Date)."""
    return day.map_batches(lambda s: _starts(s, tz), return_dtype=UTC_DT, is_elementwise=True)


def day_starts(first: date, last: date, tz: str) -> pl.DataFrame:
    """day, start: each billing day from `first` to `last` with its first instant."""
    days = pl.DataFrame({"day": pl.date_range(first, last, "1d", eager=True)})
    return days.with_columns(start=_starts(days["day"], tz))


def sql_tables(tz: str, lo: datetime | None, hi: datetime | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(hours, days) for SQL that cuts instants from `lo` to `hi` into billing days: hours (h, o0, o1,
    switch) as in DayLookup for every UTC hour of the span, the UTC ones included, and days (day, start_us)
    from the day before `lo`'s to the second after `hi`'s. A span over MAX_SPAN_HOURS keeps its last part."""
    schema = {"h": pl.Int64, "o0": pl.Int64, "o1": pl.Int64, "switch": pl.Int64}
    if lo is None or hi is None:
        return pl.DataFrame(schema=schema), pl.DataFrame(schema={"day": pl.Date, "start_us": pl.Int64})
    hi_us = epoch_us(hi)
    lo_us = max(epoch_us(lo), hi_us - (MAX_SPAN_HOURS - 1) * HOUR_US + MARGIN_US)
    first, last = (lo_us - MARGIN_US) // HOUR_US, (hi_us + MARGIN_US) // HOUR_US
    hours = pl.LazyFrame({"h": pl.int_range(first, last + 1, dtype=pl.Int64, eager=True)})
    hours = hour_offsets(tz, hours).sort("h").collect().select(list(schema)).cast(schema)
    lo_day = (
        (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=lo_us)).astimezone(ZoneInfo(tz)).date()
    )
    days = day_starts(lo_day - timedelta(days=1), local_date(hi, tz) + timedelta(days=2), tz)
    return hours, days.select("day", pl.col("start").dt.epoch("us").alias("start_us"))
