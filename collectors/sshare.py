"""sshare: the fair-share association tree as Slurm computed it (shares, usage, FairShare, LevelFS).

`sshare --all --long --parsable2` prints one row per association; an account row's name is indented by
one space per level of the tree, and a user row sits under its account with the next indentation. Depth
and parent are rebuilt from that indentation, so pipelines can walk the tree without `sacctmgr`.
`RawShares` is the word `parent` for associations that take their parent's shares; that becomes NULL.
With `-M <cluster>` (slurm.cluster_flag) sshare prints `CLUSTER: <name>` before its header, whatever the
cluster count (src/sshare/sshare.c `_multi_cluster`, Slurm 22.05 to 25.11): that line is skipped.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from zoneinfo import ZoneInfo

import polars as pl
from slurmscope.collectors.base import Parsed, TableSpec, quarantine_frame
from slurmscope.collectors.parsing import split_fields, split_lines
from slurmscope.collectors.slurm_format import is_blank, out_of_range

from slurmscope.config import Config

KIND = "sshare"
TABLES = {"shares": TableSpec("shares", ("cluster", "snapshot_time", "account", "user"))}

# sshare --long columns on Slurm 20.11-24.11; the header line, when present, wins.
LONG_FIELDS = (
    "Account",
    "User",
    "RawShares",
    "NormShares",
    "RawUsage",
    "NormUsage",
    "EffectvUsage",
    "FairShare",
    "LevelFS",
    "GrpTRESMins",
    "TRESRunMins",
)
LIVE_FIELDS = (*LONG_FIELDS, "GrpTRESRaw")
"""The live call's columns: --long's, and GrpTRESRaw, the decayed TRES-minutes Slurm holds against each
GrpTRESMins limit (sshare's `usage_tres_raw / 60`, the number acct_policy.c compares), which --long omits."""

_COLUMNS = {
    "account": "account",
    "user": "user",
    "rawshares": "raw_shares",
    "normshares": "norm_shares",
    "rawusage": "raw_usage",
    "normusage": "norm_usage",
    "effectvusage": "effectv_usage",
    "fairshare": "fairshare",
    "levelfs": "level_fs",
    "grptresmins": "grp_tres_mins",
    "tresrunmins": "tres_run_mins",
    "grptresraw": "grp_tres_raw",
}
_BANNER = re.compile(r"^CLUSTER: \S+\s*$")
_FLOATS = ("norm_shares", "raw_usage", "norm_usage", "effectv_usage", "fairshare", "level_fs")

SHARES_SCHEMA = {
    "cluster": pl.String,
    "snapshot_time": pl.Datetime("us", "UTC"),
    "account": pl.String,
    "user": pl.String,
    "parent": pl.String,
    "depth": pl.Int32,
    "raw_shares": pl.Int64,
    "norm_shares": pl.Float64,
    "raw_usage": pl.Float64,
    "norm_usage": pl.Float64,
    "effectv_usage": pl.Float64,
    "fairshare": pl.Float64,
    "level_fs": pl.Float64,
    "grp_tres_mins": pl.String,
    "tres_run_mins": pl.String,
    "grp_tres_raw": pl.String,
}


def command(cfg: Config, *, start: datetime | None = None, end: datetime | None = None) -> list[str]:
    """argv of the live sshare call (documented in docs/collectors.md)."""
    return [
        cfg.slurm_command("sshare"),
        *cfg.slurm_cluster_args(),
        "--all",
        "--parsable2",
        f"--format={','.join(LIVE_FIELDS)}",
    ]


def _names(fields: list[str]) -> list[str]:
    return [_COLUMNS.get(f.strip().lower().replace(" ", ""), f.strip().lower()) for f in fields]


def _float(s: str, what: str) -> float | None:
    s = s.strip()
    if s == "":
        return None
    v = float(s)  # accepts 'inf' (LevelFS of an association with no usage), raises ValueError otherwise
    if math.isnan(v):
        return None
    return v


def parse(
    data: bytes,
    *,
    cluster: str,
    snapshot_time: datetime,
    tz: ZoneInfo,
    fmt: str | None = None,
    delimiter: str | None = None,
    source: str = "",
) -> Parsed:
    """sshare -P output (header line, or the field list in `fmt`) -> shares rows."""
    delim = delimiter or "|"
    names: list[str] | None = _names(fmt.split(",")) if fmt else None
    rows: dict[tuple[str, str], dict] = {}
    bad: list[dict] = []
    stack: list[tuple[int, str]] = []  # (depth, account) of the account rows above the current line
    seen_header = False

    def quarantine(line_no: int, text: str, raw: bytes | None, reason: str) -> None:
        bad.append({"line_no": line_no, "raw_text": text, "raw_bytes": raw, "reason": f"sshare: {reason}"})

    for line_no, text, raw in split_lines(data):
        if is_blank(text):
            continue
        if not seen_header and _BANNER.match(text):
            continue
        titles = [f.strip() for f in text.split(delim)]
        if not seen_header and all(t.isalpha() for t in titles) and "account" in _names(titles):
            names = _names(titles)  # the header line (any column order), e.g. Account|User|RawShares|...
            seen_header = True
            continue
        if set(text.strip(" \t\r\n\f\v")) <= {"-", " "}:  # not str.strip(): 0x1C-0x1F are not a rule
            continue  # the dashed rule under a non-parsable header
        cols = names or _names(list(LONG_FIELDS))
        if "account" not in cols:
            quarantine(line_no, text, raw, "no Account column in the header or --format")
            continue
        values, reason = split_fields(text, delim, len(cols))
        if values is None:
            quarantine(line_no, text, raw, reason or "bad line")
            continue
        v = dict(zip(cols, values, strict=True))
        acct_field = v["account"]
        depth = len(acct_field) - len(acct_field.lstrip(" "))
        account = acct_field.strip()
        user = v.get("user", "").strip()
        if not account:
            quarantine(line_no, text, raw, "empty Account")
            continue
        try:
            raw_shares_s = v.get("raw_shares", "").strip()
            raw_shares = None if raw_shares_s in ("", "parent") else int(raw_shares_s)
            floats = {k: _float(v[k], k) if k in v else None for k in _FLOATS}
        except ValueError as exc:
            quarantine(line_no, text, raw, f"not a number: {exc}")
            continue
        if user:
            parent: str | None = account
        else:
            while stack and stack[-1][0] >= depth:
                stack.pop()
            parent = stack[-1][1] if stack else None
        row = {
            "cluster": cluster,
            "snapshot_time": snapshot_time,
            "account": account,
            "user": user,
            "parent": parent,
            "depth": depth,
            "raw_shares": raw_shares,
            **floats,
            "grp_tres_mins": (v.get("grp_tres_mins") or "").strip() or None,
            "tres_run_mins": (v.get("tres_run_mins") or "").strip() or None,
            "grp_tres_raw": (v.get("grp_tres_raw") or "").strip() or None,
        }
        problem = out_of_range(row, SHARES_SCHEMA)
        if problem:
            quarantine(line_no, text, raw, problem)
            continue
        if not user:
            stack.append((depth, account))
        rows[(account, user)] = row
    df = (
        pl.DataFrame(list(rows.values()), schema=SHARES_SCHEMA, orient="row")
        if rows
        else pl.DataFrame(schema=SHARES_SCHEMA)
    )
    return Parsed(tables={"shares": df}, quarantine=quarantine_frame(bad))
