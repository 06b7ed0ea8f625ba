"""Pure helpers every Slurm parser shares: lines, fields, times, durations, TRES/GRES, memory.

Slurm prints the same kinds of values in every command (sacct, sinfo, squeue, scontrol, sacctmgr), with
the same quirks: sentinel words instead of empty times (`Unknown` = not yet, `None` = never, `(null)`),
epoch seconds when SLURM_TIME_FORMAT=%s, local wall-clock times in recorded files, durations in four
shapes, GPUs listed twice in TRES strings (typed and untyped), MIG slices that look like GPUs. Getting
each rule right once, here, keeps the parsers consistent with one another.

Every scalar function is total over its documented inputs: a sentinel gives None, a value that is not in
any Slurm shape raises ValueError (so a parser can quarantine the line with the message as reason).
The `*_expr` functions are the vectorised Polars equivalents used on whole columns (they give null where
the scalar version would give None or raise).

Stable API (other parsers import these): split_lines, split_fields, parse_slurm_time, time_expr,
fast_time_expr, parse_time_columns, parse_duration, duration_expr, parse_duration_columns, parse_tres, gpu_count, is_mig_type, parse_mem_mb, parse_req_mem,
parse_exit_code, parse_int, int_expr, and the usage fields' parse_cpu_time, parse_size_bytes, parse_tres_usage with their
column helpers. Hostlists are in slurmscope.hostlist, the words Slurm prints for no
value (NULL_WORDS) in slurmscope.slurm_states.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo

import polars as pl

from slurmscope.mig import is_mig_type
from slurmscope.slurm_states import NULL_WORDS

# ---------------------------------------------------------------------------------------------- lines


def split_lines(data: bytes) -> list[tuple[int, str, bytes | None]]:
    """Split raw command output into (line_no, text, raw_bytes_or_None), line_no starting at 1.

    Accepts LF and CRLF (a trailing CR is dropped) and a last line without a newline. Bytes that are not
    valid UTF-8 are decoded with U+FFFD replacement and the original bytes are returned as the third item
    (None for clean lines) so a quarantined line keeps what Slurm really printed. Blank lines are returned
    too; a parser may skip them (they carry no record).
    """
    if not data:
        return []
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    out: list[tuple[int, str, bytes | None]] = []
    for i, raw in enumerate(parts, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            out.append((i, raw.decode("utf-8"), None))
        except UnicodeDecodeError:
            out.append((i, raw.decode("utf-8", errors="replace"), raw))
    return out


def split_fields(
    text: str,
    delimiter: str,
    expected: int,
    free_text: int | None = None,
    trailing: bool = False,
) -> tuple[list[str] | None, str | None]:
    """Split one line into exactly `expected` fields, recovering a delimiter inside one free-text field.

    `--parsable2` output has no quoting, so a `|` in a job name adds fields. When the line has too many
    fields and `free_text` names the one column that may hold user text, the surplus belongs to it: the
    fields before it are taken from the left, the fields after it from the right, and the middle is joined
    back with the delimiter. `trailing=True` is for `--parsable` (not 2) output, which ends every line with
    one more delimiter. Returns (fields, None) or (None, reason) when the line cannot be split safely.
    """
    if not delimiter:
        return None, "empty delimiter"
    parts = text.split(delimiter)
    if trailing:
        if parts and parts[-1] == "":
            parts.pop()
        else:
            return None, f"line does not end with the delimiter {delimiter!r} (--parsable output)"
    n = len(parts)
    if n == expected:
        return parts, None
    if n < expected:
        return None, f"{n} fields, expected {expected}"
    if free_text is None:
        return (
            None,
            f"{n} fields, expected {expected}, and no free-text column to absorb the extra delimiters",
        )
    after = expected - free_text - 1
    head = parts[:free_text]
    tail = parts[n - after :] if after else []
    middle = delimiter.join(parts[free_text : n - after])
    return head + [middle] + tail, None


# ---------------------------------------------------------------------------------------------- times

_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?(?:\.\d+)?$")
_EPOCH = re.compile(r"^\d{1,12}$")
MAX_EPOCH_SECONDS = 253_402_300_799
"""9999-12-31T23:59:59Z: Python's datetime ends there, so parse_slurm_time rejects later epochs."""


def _zone(tz: tzinfo | str | None) -> tzinfo:
    if tz is None:
        return UTC
    if isinstance(tz, str):
        return ZoneInfo(tz)
    return tz


def _zone_name(tz: tzinfo | str | None) -> str:
    if tz is None:
        return "UTC"
    if isinstance(tz, str):
        return tz
    key = getattr(tz, "key", None)
    if key:
        return key
    if tz is UTC:
        return "UTC"
    raise ValueError(f"time zone {tz!r} has no IANA name")


def parse_slurm_time(s: str | None, tz: tzinfo | str | None = None) -> datetime | None:
    """A Slurm timestamp as an aware UTC datetime; None for `Unknown`, `None`, `(null)`, empty, epoch 0.

    Accepts `YYYY-MM-DDTHH:MM:SS` (also with a space, without seconds, with fractions) and epoch seconds
    (SLURM_TIME_FORMAT=%s). Wall-clock times are read in `tz` (the zone the file was captured in; live
    collection runs with TZ=UTC): in a DST fold the earlier instant is used, a time inside a spring-forward
    gap is read with the offset before the gap (Python's fold=0 rule). Raises ValueError otherwise.
    """
    if s is None:
        return None
    s = s.strip()
    if s in NULL_WORDS:
        return None
    if _EPOCH.match(s):
        secs = int(s)
        return None if secs == 0 else datetime.fromtimestamp(secs, UTC)
    m = _ISO.match(s)
    if not m:
        raise ValueError(f"not a Slurm time: {s!r}")
    y, mo, d, h, mi, sec = (int(g) if g else 0 for g in m.groups())
    naive = datetime(y, mo, d, h, mi, sec)
    zone = _zone(tz)
    if zone is UTC:
        return naive.replace(tzinfo=UTC)
    return naive.replace(tzinfo=zone, fold=0).astimezone(UTC)


def time_expr(col: pl.Expr, tz: tzinfo | str | None = None) -> pl.Expr:
    """Vectorised parse_slurm_time on a String column: Datetime("us", "UTC"), null where not a time."""
    s = col.str.strip_chars()
    epoch = (
        pl.when(
            s.str.contains(r"^\d{1,12}$") & (s != "0") & (s.cast(pl.Int64, strict=False) <= MAX_EPOCH_SECONDS)
        )
        .then(s.cast(pl.Int64, strict=False) * 1_000_000)
        .otherwise(None)
        .cast(pl.Datetime("us"))
    )
    naive = (
        s.str.replace(" ", "T", literal=True)
        .str.replace(r"\.\d+$", "")
        .str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False, time_unit="us")
    )
    naive_nosec = s.str.replace(" ", "T", literal=True).str.to_datetime(
        "%Y-%m-%dT%H:%M", strict=False, time_unit="us"
    )
    naive = pl.coalesce(naive, naive_nosec)
    name = _zone_name(tz)
    if name == "UTC":
        local = naive.dt.replace_time_zone("UTC")
    else:
        first = naive.dt.replace_time_zone(name, ambiguous="earliest", non_existent="null")
        # In a spring-forward gap, read the wall time with the offset in force before the gap (fold=0).
        gap = (naive - pl.duration(hours=1)).dt.replace_time_zone(
            name, ambiguous="earliest", non_existent="null"
        ) + pl.duration(hours=1)
        local = pl.coalesce(first, gap).dt.convert_time_zone("UTC")
    return pl.coalesce(local, epoch.dt.replace_time_zone("UTC"))


def fast_time_expr(col: pl.Expr, tz: tzinfo | str | None = None) -> pl.Expr:
    """The cheap part of time_expr: `YYYY-MM-DDTHH:MM:SS[.f]` and epoch seconds only, null otherwise.

    About ten times faster than time_expr on a million rows; parse_time_columns uses it for every row and
    the complete parser only for the rows it leaves null (other shapes, wall times in a DST gap).
    """
    s = col
    naive = s.str.slice(0, 19).str.to_datetime("%Y-%m-%dT%H:%M:%S", strict=False, time_unit="us")
    name = _zone_name(tz)
    if name == "UTC":
        local = naive.dt.replace_time_zone("UTC")
    else:
        local = naive.dt.replace_time_zone(
            name, ambiguous="earliest", non_existent="null"
        ).dt.convert_time_zone("UTC")
    secs = s.cast(pl.Int64, strict=False)
    plain = s.str.contains(r"^[0-9]{1,12}$")  # what _EPOCH reads; the cast alone also takes '+5'
    epoch = (
        pl.when(plain & (secs > 0) & (secs <= MAX_EPOCH_SECONDS))
        .then(secs * 1_000_000)
        .otherwise(None)
        .cast(pl.Datetime("us"))
        .dt.replace_time_zone("UTC")
    )
    return pl.coalesce(local, epoch)


def _odd_rows(df: pl.DataFrame, src: str, out: str) -> pl.Series:
    """Rows whose text is a value (not a sentinel) that the fast expression left null."""
    return _odd_values(df, src, out)


def parse_time_columns(
    df: pl.DataFrame, columns: dict[str, str], tz: tzinfo | str | None = None
) -> pl.DataFrame:
    """Add Datetime("us", "UTC") columns {out: source text column} with exactly parse_slurm_time's result.

    Vectorised for the shapes Slurm prints; the few other rows go through the scalar parser (values it
    rejects become null). Sources missing from `df` give all-null columns.
    """
    dtype = pl.Datetime("us", "UTC")
    present = {o: c for o, c in columns.items() if c in df.columns}
    df = df.with_columns(
        *[fast_time_expr(pl.col(c), tz).alias(o) for o, c in present.items()],
        *[pl.lit(None, dtype).alias(o) for o in columns if o not in present],
    )
    for out, src in present.items():
        idx = _odd_rows(df, src, out)
        if idx.len():
            vals = []
            for v in df[src].gather(idx).to_list():
                try:
                    vals.append(parse_slurm_time(v, tz))
                except ValueError:
                    vals.append(None)
            df = df.with_columns(df[out].scatter(idx, pl.Series(vals, dtype=dtype)))
    return df


# ------------------------------------------------------------------------------------------ durations

_DUR_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+)(?:\.\d+)?)?$")
_DUR_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?$")
_DUR_NULL = frozenset({"UNLIMITED", "Partition_Limit", "INFINITE", "NOT_SET", "INVALID"})


def parse_duration(s: str | None) -> int | None:
    """Seconds of a Slurm duration; None for `UNLIMITED`, `Partition_Limit`, `INFINITE`, empty, sentinels.

    Output shapes: `D-HH:MM:SS`, `HH:MM:SS`, `MM:SS`, `MM:SS.mmm` (TotalCPU; fractions are truncated).
    Slurm's input shapes are accepted too: `D-HH`, `D-HH:MM`, and a bare number meaning minutes.
    Raises ValueError for anything else.
    """
    if s is None:
        return None
    s = s.strip()
    if s in NULL_WORDS or s in _DUR_NULL:
        return None
    if s.isdigit():
        return int(s) * 60  # bare number: minutes (Slurm's input convention)
    m = _DUR_DAYS.match(s)
    if m:
        days, h, mi, sec = (int(g) if g else 0 for g in m.groups())
        return days * 86400 + h * 3600 + mi * 60 + sec
    m = _DUR_CLOCK.match(s)
    if m:
        h, mi, sec = (int(g) if g else 0 for g in m.groups())
        return h * 3600 + mi * 60 + sec
    raise ValueError(f"not a Slurm duration: {s!r}")


def duration_expr(col: pl.Expr) -> pl.Expr:
    """Vectorised parse_duration for the printed shapes ([D-]HH:MM:SS, MM:SS[.mmm]): Int64 seconds or null."""
    s = col.str.strip_chars()
    parts = s.str.extract_groups(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.\d+)?$")
    d = parts.struct.field("1").cast(pl.Int64, strict=False).fill_null(0)
    h = parts.struct.field("2").cast(pl.Int64, strict=False).fill_null(0)
    m = parts.struct.field("3").cast(pl.Int64, strict=False)
    sec = parts.struct.field("4").cast(pl.Int64, strict=False)
    return _keep_name(d * 86400 + h * 3600 + m * 60 + sec, col)


def _keep_name(result: pl.Expr, col: pl.Expr) -> pl.Expr:
    """Name a derived expression after its input column, as the other *_expr helpers do."""
    try:
        return result.alias(col.meta.output_name())
    except Exception:  # an input without a single root name: leave the derived name
        return result


def parse_duration_columns(df: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    """Add Int64 seconds columns {out: source text column} with exactly parse_duration's result.

    Vectorised in stages (Polars does not share sub-expressions in eager mode): `D-` becomes `:`, the
    text is split on `:`, the fields are read from the right. Only rows that this leaves null while
    holding a value (other shapes, e.g. `1-04:30`, bare minutes) go through the scalar parser.
    """
    present = {o: c for o, c in columns.items() if c in df.columns}
    missing = [pl.lit(None, pl.Int64).alias(o) for o in columns if o not in present]
    if missing:
        df = df.with_columns(*missing)
    for out, src in present.items():
        # the printed `[D-]HH:MM:SS` by position (see _cpu_time_fast); the rest below
        s = pl.col(src)
        df = df.with_columns(
            pl.when(s.str.contains(_CPU_FAST_HMS))
            .then(s.str.replace_many(["-", ":"], ["", ""]).cast(pl.Int64, strict=False))
            .alias("_dur_v")
        )
        v = pl.col("_dur_v")
        df = df.with_columns(
            (v // 1000000 * 86400 + v // 10000 % 100 * 3600 + v // 100 % 100 * 60 + v % 100).alias(out)
        ).drop("_dur_v")
        df = _rest(df, src, out, _duration_general)
    return df


def _duration_general(df: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    for out, src in columns.items():
        s = pl.col(src)
        df = df.with_columns(
            s.str.replace("-", ":", literal=True).str.split(":").alias("_dur_l"),
            s.str.contains("-", literal=True).alias("_dur_dash"),
            s.str.contains(r"^\d+-[^-]*$").alias("_dur_days"),  # the one dash right after the days
        )
        last = pl.col("_dur_l").list.get(-1, null_on_oob=True).str.split_exact(".", 1)
        df = df.with_columns(
            pl.col("_dur_l").list.len().alias("_dur_n"),
            last.struct.field("field_0").cast(pl.Int64, strict=False).alias("_dur_1"),
            last.struct.field("field_1").alias("_dur_frac"),
            *[
                pl.col("_dur_l")
                .list.get(-k, null_on_oob=True)
                .cast(pl.Int64, strict=False)
                .alias(f"_dur_{k}")
                for k in (2, 3, 4)
            ],
        )
        n, dash = pl.col("_dur_n"), pl.col("_dur_dash")
        g = {k: pl.col(f"_dur_{k}") for k in (1, 2, 3, 4)}
        frac_ok = pl.col("_dur_frac").is_null() | pl.col("_dur_frac").str.contains(r"^[0-9]+$")
        value = (
            pl.when(pl.col("_dur_days") & (n == 4))
            .then(g[4] * 86400 + g[3] * 3600 + g[2] * 60 + g[1])
            .when(~dash & (n == 3))
            .then(g[3] * 3600 + g[2] * 60 + g[1])
            .when(~dash & (n == 2))
            .then(g[2] * 60 + g[1])
            .otherwise(None)
        )
        # Int64 arithmetic wraps silently: a field too large to be safe leaves the row to the scalar parser
        # (exact Python integers; beyond Int64 it gives NULL below).
        small = pl.all_horizontal(
            [g[k].is_null() | (g[k].abs() < 10**k_max) for k, k_max in ((1, 15), (2, 14), (3, 12), (4, 9))]
        )
        df = df.with_columns(pl.when(frac_ok & small).then(value).otherwise(None).alias(out)).drop(
            "_dur_l", "_dur_dash", "_dur_days", "_dur_n", "_dur_1", "_dur_frac", "_dur_2", "_dur_3", "_dur_4"
        )
        text = df[src]
        odd = (df[out].is_null() & text.is_not_null() & ~text.is_in(list(NULL_WORDS | _DUR_NULL))).arg_true()
        if odd.len():
            vals = []
            for v in text.gather(odd).to_list():
                try:
                    secs = parse_duration(v)
                except ValueError:
                    secs = None
                # beyond Int64 (a huge bare minute count) is as unreadable as text: NULL, not a failed parse
                vals.append(secs if secs is None or -(2**63) <= secs < 2**63 else None)
            df = df.with_columns(df[out].scatter(odd, pl.Series(vals, dtype=pl.Int64)))
    return df


# ------------------------------------------------------------------------------------------- numbers


def parse_int(s: str | None) -> int | None:
    """An integer field; None for empty/sentinels. Raises ValueError for text."""
    if s is None:
        return None
    s = s.strip()
    if s in NULL_WORDS:
        return None
    return int(s)


def int_expr(col: pl.Expr, dtype: type[pl.DataType] | pl.DataType = pl.Int64) -> pl.Expr:
    """Vectorised parse_int: null where the text is not an integer."""
    return col.str.strip_chars().cast(dtype, strict=False)


def parse_exit_code(s: str | None) -> tuple[int | None, int | None]:
    """sacct `ExitCode` / `DerivedExitCode` `code:signal` as (exit_code, signal)."""
    if s is None:
        return None, None
    s = s.strip()
    if s in NULL_WORDS:
        return None, None
    code, _, sig = s.partition(":")
    try:
        return int(code), (int(sig) if sig else None)
    except ValueError:
        raise ValueError(f"not an exit code: {s!r}") from None


# -------------------------------------------------------------------------------------------- memory

_MEM = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([KMGTPE]?)([nc]?)$", re.IGNORECASE)
_MEM_FACTOR = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3, "E": 1024.0**4}


def parse_req_mem(s: str | None, default_unit: str = "M") -> tuple[float | None, str | None]:
    """Memory in MiB and its scope: `48000Mn` -> (48000, 'node'), `4000Mc` -> (4000, 'cpu'), `2G` -> (2048, None).

    Slurm before 21.08 suffixes ReqMem with n (per node) or c (per CPU); later versions print the plain
    amount. A bare number is in `default_unit` (Slurm's memory unit is MiB). Units are binary (K=KiB).
    """
    if s is None:
        return None, None
    s = s.strip()
    if s in NULL_WORDS:
        return None, None
    m = _MEM.match(s)
    if not m:
        raise ValueError(f"not a memory size: {s!r}")
    num, unit, scope = m.groups()
    unit = (unit or default_unit).upper()
    value = float(num) * _MEM_FACTOR[unit]
    return value, {"n": "node", "c": "cpu"}.get(scope.lower()) if scope else None


def parse_mem_mb(s: str | None, default_unit: str = "M") -> float | None:
    """Memory in MiB (`62.50G` -> 64000.0, `12756K` -> 12.457..., `31000Mn` -> 31000.0); None for sentinels."""
    return parse_req_mem(s, default_unit)[0]


# ------------------------------------------------------------------------------------- usage fields

_CPU_TIME = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)(?:\.(\d+))?$")
_SIZE_VALUE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([KMGTPE]?)$")
_UNIT_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_DIGITS = list(range(1, 16))
_TENS = [float(10**n) for n in _DIGITS]


def parse_cpu_time(s: str | None) -> float | None:
    """Seconds (with the fraction kept) of sacct's TotalCPU, UserCPU, SystemCPU; None when empty.

    sacct prints these with `_elapsed_time` (src/sacct/print.c, Slurm 22.05): `D-HH:MM:SS` from a day on,
    `HH:MM:SS` from an hour on, `MM:SS.mmm` below an hour when there are microseconds (milliseconds
    shown), else `00:MM:SS`. Raises ValueError for any other text.
    """
    if s is None:
        return None
    s = s.strip()
    if s in NULL_WORDS:
        return None
    m = _CPU_TIME.match(s)
    if not m:
        raise ValueError(f"not a CPU time as sacct prints it: {s!r}")
    days, hours, minutes, seconds, frac = m.groups()
    whole = int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
    return float(whole) + (int(frac) / 10 ** len(frac) if frac else 0.0)


_BIGINT_MAX = 2**63 - 1


def parse_size_bytes(s: str | None) -> int | None:
    """Bytes of a usage size as sacct prints it (MaxRSS, AveRSS, the sizes of TRESUsageIn*); None when empty.

    Slurm stores these in bytes and prints them with convert_num_unit from UNIT_NONE: with `--noconvert`
    the bare byte count (`4849664`), otherwise scaled by 1024 with a suffix (`4736K`, `4.62M`: two
    decimals when not whole). A suffix is a power of 1024 of bytes; the result is rounded half up.
    """
    if s is None:
        return None
    s = s.strip()
    if s in NULL_WORDS:
        return None
    m = _SIZE_VALUE.match(s)
    if not m:
        raise ValueError(f"not a size as sacct prints it: {s!r}")
    value = int(math.floor(float(m.group(1)) * float(1024 ** _UNIT_POWER[m.group(2)]) + 0.5))
    if value > _BIGINT_MAX:
        raise ValueError(f"size beyond a BIGINT of bytes: {s!r}")
    return value


def parse_tres_usage(s: str | None) -> dict[str, float]:
    """A TRESUsageIn*/TRESUsageOut* string as {name: value}: `cpu` in seconds, every other entry in its base
    unit (bytes for mem, vmem, fs/disk, gres/gpumem; joules for energy; percent for gres/gpuutil).

    sacct prints usage TRES with TRES_STR_FLAG_BYTES (src/common/slurmdb_defs.c,
    slurmdb_make_tres_string_from_simple, Slurm 22.05): cpu as a time (`secs2time_str`), every other
    count through convert_num_unit from UNIT_NONE (bare, or scaled by 1024 with a suffix). `NONE` and
    `INVALID` (no value) entries are left out. Unlike parse_tres, a malformed entry raises ValueError: a usage string is
    a measurement, and a misprinted one is quarantined rather than read in part.
    """
    out: dict[str, float] = {}
    if s is None or s.strip() in NULL_WORDS:
        return out
    for entry in s.split(","):
        name, eq, value = entry.strip().partition("=")
        if not eq or not name:
            raise ValueError(f"not a TRES usage entry (name=value): {entry.strip()!r}")
        value = value.strip()
        if value in NULL_WORDS or value == "UNLIMITED":  # NONE, INVALID: no measurement
            continue
        if name == "cpu":
            secs = parse_cpu_time(value)
            if secs is None:
                raise ValueError(f"TRES usage entry without a value: {entry.strip()!r}")
            out[name] = secs
        else:
            size = parse_size_bytes(value)
            if size is None:
                raise ValueError(f"TRES usage entry without a value: {entry.strip()!r}")
            out[name] = float(size)
    return out


# The shapes sacct prints (zero-padded, fixed width): read by position, no capture groups (a regex with
# captures costs Polars ten times a plain match). Anything else takes the general expressions below.
_CPU_FAST_MS = r"^[0-9]{2}:[0-9]{2}\.[0-9]{3}$"
_CPU_FAST_HMS = r"^(?:[0-9]{1,9}-)?[0-9]{2}:[0-9]{2}:[0-9]{2}$"
_SIZE_FAST = r"^[0-9]{1,15}$"  # --noconvert's bare bytes; 15 digits stay exact through the float rounding


def _digits(e: pl.Expr) -> pl.Expr:
    return e.cast(pl.Int64, strict=False)


def _cpu_time_fast(df: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    """Add each `out` of {out: src}: CPU seconds for `MM:SS.mmm` and `[D-]HH:MM:SS` (parse_cpu_time's
    arithmetic, in its order), else null.

    The shapes are fixed-width, so with the separators removed the digits are one integer whose decimal
    places are the fields. In stages, every column in each (eager Polars would redo the shared integer for
    every use, and one call per stage runs the columns side by side).
    """
    stage = {}
    for i, src in enumerate(columns.values()):
        s = pl.col(src)
        stage[f"_cpu_v{i}"] = s.str.replace_many([":", ".", "-"], ["", "", ""]).cast(pl.Int64, strict=False)
        stage[f"_cpu_k{i}"] = (
            pl.when(s.str.contains(_CPU_FAST_MS)).then(1).when(s.str.contains(_CPU_FAST_HMS)).then(2)
        )
    df = df.with_columns(**stage)
    values = {}
    for i, (out, src) in enumerate(columns.items()):
        v, k = pl.col(f"_cpu_v{i}"), pl.col(f"_cpu_k{i}")
        # the fraction as the text `.mmm` read as a float: that is m / 1000 correctly rounded, as Python's
        # division gives it (Polars divides a column by a constant as a product with its reciprocal, which
        # is not: 410 * 0.001 is 0.41000000000000003)
        ms = (v // 100000 * 60 + v // 1000 % 100).cast(pl.Float64) + pl.col(src).str.slice(5, 4).cast(
            pl.Float64, strict=False
        )
        hms = (v // 1000000 * 86400 + v // 10000 % 100 * 3600 + v // 100 % 100 * 60 + v % 100).cast(
            pl.Float64
        ) + 0.0
        values[out] = pl.when(k == 1).then(ms).when(k == 2).then(hms)
    return df.with_columns(**values).drop(*stage)


def _odd_values(df: pl.DataFrame, src: str, out: str) -> pl.Series:
    """Rows whose text holds a value (not a sentinel) that the expression so far left null."""
    cand = (df[out].is_null() & (df[src].str.len_bytes() > 0)).arg_true()
    if not cand.len():
        return cand
    text = df[src].gather(cand).str.strip_chars()
    return cand.filter(~text.is_in(list(NULL_WORDS)))


def _rest(df: pl.DataFrame, src: str, out: str, general) -> pl.DataFrame:
    """Run the general column path `general(frame, {out: src})` on the rows the fast path left, scatter back."""
    idx = _odd_values(df, src, out)
    if not idx.len():
        return df
    sub = general(df.select(pl.col(src).gather(idx)), {out: src})
    return df.with_columns(df[out].scatter(idx, sub[out]))


def parse_cpu_time_columns(df: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    """Add Float64 seconds columns {out: source text column} with exactly parse_cpu_time's result.

    The printed shapes are read by position; other rows go through the regex expression (in stages: eager
    Polars does not share sub-expressions), and rows that leaves null while holding a value through the
    scalar parser (which gives null for text in no shape: the caller quarantines those lines).
    """
    present = {out: src for out, src in columns.items() if src in df.columns}
    df = _cpu_time_fast(df, present).with_columns(
        pl.lit(None, pl.Float64).alias(out) for out in columns if out not in present
    )
    for out, src in present.items():
        df = _rest(df, src, out, _cpu_time_general)
    return df


def _cpu_time_general(df: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    for out, src in columns.items():
        df = df.with_columns(
            pl.col(src).str.strip_chars().str.extract_groups(_CPU_TIME.pattern).alias("_cpu_g")
        )
        field = [pl.col("_cpu_g").struct.field(str(i)) for i in range(1, 6)]
        df = df.with_columns(
            *[f.cast(pl.Int64, strict=False).alias(f"_cpu_{i}") for i, f in enumerate(field[:4])],
            pl.all_horizontal([f.is_null() | (f.str.len_chars() <= 12) for f in field[:4]]).alias(
                "_cpu_small"
            ),
            field[4].alias("_cpu_frac"),
        )
        frac = pl.col("_cpu_frac")
        frac_value = (
            pl.when(frac.is_null())
            .then(0.0)
            .when(frac.str.len_chars() <= 15)
            .then(
                frac.cast(pl.Int64, strict=False).cast(pl.Float64)
                / frac.str.len_chars().replace_strict(_DIGITS, _TENS, default=None, return_dtype=pl.Float64)
            )
        )
        whole = (
            pl.col("_cpu_0").fill_null(0) * 86400
            + pl.col("_cpu_1").fill_null(0) * 3600
            + pl.col("_cpu_2") * 60
            + pl.col("_cpu_3")
        )
        df = df.with_columns(
            pl.when(pl.col("_cpu_small")).then(whole.cast(pl.Float64) + frac_value).otherwise(None).alias(out)
        ).drop("_cpu_g", "_cpu_0", "_cpu_1", "_cpu_2", "_cpu_3", "_cpu_small", "_cpu_frac")
        df = _scalar_fallback(df, src, out, parse_cpu_time, pl.Float64)
    return df


def parse_size_columns(df: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    """Add Int64 byte columns {out: source text column} with exactly parse_size_bytes's result.

    Bare byte counts (what `--noconvert` prints) are a plain cast; suffixed sizes go through the regex
    expression, and what that leaves through the scalar parser.
    """
    for out, src in columns.items():
        if src not in df.columns:
            df = df.with_columns(pl.lit(None, pl.Int64).alias(out))
            continue
        s = pl.col(src)
        df = df.with_columns(pl.when(s.str.contains(_SIZE_FAST)).then(_digits(s)).alias(out))
        df = _rest(df, src, out, _size_general)
    return df


def _size_general(df: pl.DataFrame, columns: dict[str, str]) -> pl.DataFrame:
    for out, src in columns.items():
        df = df.with_columns(
            pl.col(src).str.strip_chars().str.extract_groups(_SIZE_VALUE.pattern).alias("_size_g")
        )
        df = df.with_columns(
            pl.col("_size_g").struct.field("1").alias("_size_n"),
            pl.col("_size_g").struct.field("2").alias("_size_u"),
        )
        num, unit = pl.col("_size_n"), pl.col("_size_u")
        factor = unit.replace_strict(
            list(_UNIT_POWER),
            [float(1024**k) for k in _UNIT_POWER.values()],
            default=None,
            return_dtype=pl.Float64,
        )
        value = num.cast(pl.Float64, strict=False) * factor
        df = df.with_columns(
            pl.when((num.str.len_chars() <= 15) & (value < 9.0e15))
            .then((value + 0.5).floor().cast(pl.Int64))
            .otherwise(None)
            .alias(out)
        ).drop("_size_g", "_size_n", "_size_u")
        df = _scalar_fallback(df, src, out, parse_size_bytes, pl.Int64)
    return df


# A usage string every entry of which parse_tres_usage reads: `cpu=` a CPU time, any other name a size,
# either one a word for no value. No look-ahead in Polars' regex engine, so "a name other than cpu" is
# spelled out by length and letters.
_NO_VALUE = "(?:" + "|".join(re.escape(w) for w in sorted(NULL_WORDS | {"UNLIMITED"}) if w) + ")?"
_NOT_CPU = r"(?:[^=,\s]{1,2}|[^=,\s]{4,}|[^c=,\s][^=,\s]{2}|c[^p=,\s][^=,\s]|cp[^u=,\s])"
_USAGE_ENTRY = (
    rf"(?:cpu=(?:(?:[0-9]+-)?(?:[0-9]+:)?[0-9]+:[0-9]+(?:\.[0-9]+)?|{_NO_VALUE})"
    rf"|{_NOT_CPU}=(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[KMGTPE]?|{_NO_VALUE}))"
)
_USAGE_STRICT = rf"^{_USAGE_ENTRY}(?:,{_USAGE_ENTRY})*$"


def parse_tres_usage_columns(df: pl.DataFrame, src: str, columns: dict[str, str], ok: str) -> pl.DataFrame:
    """Add Float64 columns {out: TRES name} with parse_tres_usage(text).get(name), and Boolean `ok`: whether
    the string is readable (parse_tres_usage raises for it when not; null text is readable).

    A string in the printed shape (`_USAGE_STRICT`: readable by construction) with each wanted name at
    most once has its values cut out by name and read by the column helpers above; any other string
    (spaces, a name twice, a misprint) goes through the scalar parser. Usage strings are unique per
    step, so the common case must not be a Python call per row.
    """
    text = pl.col(src)  # unstripped: a string with spaces is not in the printed shape (the scalar reads it)
    # With a comma in front every entry starts `,name=`: found as a literal, no regex. What follows the
    # first `,name=` starts with the value, and holds a second `,name=` if the name is there twice.
    lead = pl.col("_tu_lead")
    value_cols = {out: f"_tu_{out}" for out in columns}
    after = {out: pl.col(f"_tu_after_{out}") for out in columns}
    frame = df.select(pl.col(src), (pl.lit(",") + text).alias("_tu_lead"))
    frame = frame.with_columns(
        lead.str.slice(lead.str.find(f",{name}=", literal=True) + len(name) + 2).alias(f"_tu_after_{out}")
        for out, name in columns.items()
    ).drop("_tu_lead")
    once = [
        after[out].str.contains(f",{name}=", literal=True).not_().fill_null(True)
        for out, name in columns.items()
    ]
    frame = frame.with_columns(
        pl.all_horizontal(text.str.contains(_USAGE_STRICT), *once).fill_null(False).alias("_tu_fast"),
        (text.str.len_bytes() > 0).fill_null(False).alias("_tu_some"),
    )
    frame = frame.with_columns(
        pl.when(pl.col("_tu_fast"))
        .then(after[out].str.splitn(",", 2).struct.field("field_0"))
        .alias(value_cols[out])
        for out in columns
    ).drop(*(f"_tu_after_{out}" for out in columns))
    for out, name in columns.items():
        read = parse_cpu_time_columns if name == "cpu" else parse_size_columns
        frame = read(frame, {out: value_cols[out]})
    frame = frame.with_columns(pl.col(out).cast(pl.Float64) for out in columns)
    oks = pl.Series(ok, [True], dtype=pl.Boolean).new_from_index(0, df.height)
    slow = (frame["_tu_some"] & ~frame["_tu_fast"]).arg_true()
    if slow.len():
        texts = df[src].gather(slow)
        slow = slow.filter(~texts.str.strip_chars().is_in(list(NULL_WORDS)))
    if slow.len():
        results = []
        for v in df[src].gather(slow).to_list():
            try:
                results.append(parse_tres_usage(v))
            except ValueError:
                results.append(None)
        oks = oks.scatter(slow, pl.Series([r is not None for r in results], dtype=pl.Boolean))
        frame = frame.with_columns(
            frame[out].scatter(
                slow, pl.Series([None if r is None else r.get(name) for r in results], dtype=pl.Float64)
            )
            for out, name in columns.items()
        )
    return df.with_columns(oks.alias(ok), *[frame[out] for out in columns])


def _scalar_fallback(df: pl.DataFrame, src: str, out: str, fn, dtype) -> pl.DataFrame:
    """Rows whose text holds a value the expression left null: the scalar parser's answer (null if it raises)."""
    odd = _odd_values(df, src, out)
    if not odd.len():
        return df
    vals = []
    for v in df[src].gather(odd).to_list():
        try:
            r = fn(v)
        except ValueError:
            r = None
        vals.append(r if dtype != pl.Int64 or r is None or -(2**63) <= r < 2**63 else None)
    return df.with_columns(df[out].scatter(odd, pl.Series(vals, dtype=dtype)))


def unreadable(src: str, out: str) -> pl.Expr:
    """Rows of `df` whose `src` text holds a value (not empty, not a sentinel) that parsed to null."""
    text = pl.col(src).str.strip_chars()
    return pl.col(out).is_null() & text.is_not_null() & ~text.is_in(list(NULL_WORDS))


# ---------------------------------------------------------------------------------------------- TRES

_SIZE = re.compile(r"^(\d+(?:\.\d*)?)([KMGTPE])$", re.IGNORECASE)


def parse_tres(s: str | None) -> dict[str, float]:
    """A TRES string (`billing=12,cpu=12,gres/gpu:h100=8,gres/gpu=8,mem=31000M,node=1`) as {name: value}.

    Sizes with a unit (`mem=62.50G`, `gres/gpumem=100K`) become MiB; durations (`cpu=00:00:04` in
    TRESUsageInTot) become seconds; plain numbers stay as they are. Entries that have no value in any of
    these shapes are skipped (never raises): TRES strings are informational and often truncated.
    """
    out: dict[str, float] = {}
    if not s:
        return out
    for entry in s.split(","):
        name, eq, value = entry.strip().partition("=")
        if not eq or not name:
            continue
        value = value.strip()
        try:
            out[name] = float(value)
            continue
        except ValueError:
            pass
        m = _SIZE.match(value)
        if m:
            out[name] = float(m.group(1)) * _MEM_FACTOR[m.group(2).upper()]
            continue
        try:
            d = parse_duration(value)
        except ValueError:
            continue
        if d is not None:
            out[name] = float(d)
    return out


def _gres_entries(s: str) -> list[tuple[str, str | None, float | None, bool]]:
    """(name, type, count, untyped) of each entry of a TRES or GRES string; count None when unreadable."""
    out: list[tuple[str, str | None, float | None, bool]] = []
    # GRES strings put commas inside "(IDX:0-3,5)": cut parenthesised parts first.
    cleaned = re.sub(r"\([^)]*\)", "", s)
    for entry in cleaned.split(","):
        entry = entry.strip()
        if not entry:
            continue
        for prefix in ("gres/", "gres:"):
            if entry.startswith(prefix):
                entry = entry[len(prefix) :]
                break
        if "=" in entry:
            # TRES style: gpu=8, gpu:h100=8
            key, _, value = entry.partition("=")
            name, _, gtype = key.partition(":")
            try:
                count: float | None = float(value)
            except ValueError:
                count = None
            out.append((name, gtype or None, count, not gtype))
            continue
        # GRES style: gpu, gpu:2, gpu:a100:4, gpu:a100:no_consume:4, gpu:(null):0
        parts = [p for p in entry.split(":") if p != "no_consume"]
        if not parts:
            continue
        name = parts[0]
        rest = parts[1:]
        count = 1.0
        if rest:
            try:
                count = float(rest[-1])
                rest = rest[:-1]
            except ValueError:
                count = 1.0 if len(rest) == 1 else None
        gtype = ":".join(rest) if rest else None
        if gtype in ("(null)", "null", ""):
            gtype = None
        out.append((name, gtype, count, gtype is None))
    return out


def gpu_count(tres_or_gres: str | None) -> tuple[int, str | None, int]:
    """(gpus, gpu_type, mig_slices) of an AllocTRES / ReqTRES / AllocGRES / sinfo Gres string.

    Slurm lists a job's GPUs twice when types are configured (`gres/gpu:h100=8,gres/gpu=8`): the untyped
    entry is the count, the typed ones say which model. So: gpus = the untyped count when present, else
    the sum of the typed counts; never both. MIG slices (`gres/gpu:1g.10gb=1`, or a `mig` GRES) are counted
    apart and are not GPUs: when the untyped count includes them, they are subtracted. gpu_type is the
    non-MIG type with the largest count (ties: alphabetical), else the MIG profile when the job has only
    slices, else None. Unreadable entries are ignored; never raises.
    """
    if not tres_or_gres:
        return 0, None, 0
    untyped: float | None = None
    typed: dict[str, float] = {}
    mig: dict[str, float] = {}
    mig_in_gpu = 0.0  # slices listed as gres/gpu:<profile>: the untyped gres/gpu count includes them
    for name, gtype, count, is_untyped in _gres_entries(tres_or_gres):
        if count is None or not math.isfinite(count) or count < 0:
            continue
        if name == "mig":
            mig[gtype or "mig"] = count
        elif name != "gpu":
            continue
        elif is_untyped:
            untyped = count
        elif is_mig_type(gtype):
            mig[gtype] = count
            mig_in_gpu += count
        else:
            typed[gtype] = count
    mig_slices = int(sum(mig.values()))
    if untyped is not None:
        gpus = max(int(untyped - mig_in_gpu), 0)
    else:
        gpus = int(sum(typed.values()))
    if typed:
        gpu_type = sorted(typed.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    elif mig:
        gpu_type = sorted(mig.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    else:
        gpu_type = None
    return gpus, gpu_type, mig_slices


__all__ = [
    "duration_expr",
    "fast_time_expr",
    "parse_duration_columns",
    "parse_time_columns",
    "gpu_count",
    "int_expr",
    "is_mig_type",
    "parse_duration",
    "parse_exit_code",
    "parse_int",
    "parse_mem_mb",
    "parse_req_mem",
    "parse_cpu_time",
    "parse_cpu_time_columns",
    "parse_size_bytes",
    "parse_size_columns",
    "parse_slurm_time",
    "parse_tres",
    "parse_tres_usage",
    "parse_tres_usage_columns",
    "unreadable",
    "split_fields",
    "split_lines",
    "time_expr",
]
