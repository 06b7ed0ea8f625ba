"""How to store NVLink errors per link: what each layout costs in rows and bytes at fleet scale.

Every GPU-minute the agent reads four error counters on each NVLink (18 on an H100/H200). Three layouts:

- dense: one row per (GPU, minute, link) with the four rises: 18 rows per GPU-minute;
- array: one row per GPU-minute with a list of 18 (link, four rises) structs;
- sparse (chosen, migration 0019): per GPU-minute the four rises summed over links in gpu_samples (4 BIGINT
  columns), plus one gpu_nvlink_errors row per (GPU, minute, link) whose counters rose.

Each layout is written to its own DuckDB file for `--gpus` GPUs x `--minutes` minutes, `--erring` of the links
erring in any minute (healthy fleets: almost none), and measured as rows, bytes on disk after a CHECKPOINT and
CPU seconds to insert; then scaled linearly to 10,000 GPUs x a day.

    .venv/bin/python -m benchmarks.nvlink_storage --gpus 1000 --minutes 60 --erring 0.001
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import duckdb

from benchmarks.harness import parser, run, timer

LINKS = 18
COUNTERS = ("crc_flit", "crc_data", "replay", "recovery")
ERRORS = " , ".join(f"CASE WHEN e THEN {i + 1} ELSE 0 END AS {c}_delta" for i, c in enumerate(COUNTERS))

# g: GPU, m: minute, l: link, e: the link erred that minute (a hash, so every layout sees the same links)
GRID = """
    SELECT 'gpu' || (g // 8) AS node, 'GPU-' || g AS gpu_uuid,
           TIMESTAMPTZ '2027-01-15 00:00:00+00' + m * INTERVAL 1 MINUTE AS minute, l AS link,
           (hash(g, m, l) % 1000000) < {erring} * 1000000 AS e
    FROM range({gpus}) a(g), range({minutes}) b(m), range(18) c(l)
"""

KEYS = "node VARCHAR, gpu_uuid VARCHAR, minute TIMESTAMPTZ"
PER_LINK = (
    "CREATE TABLE t (node VARCHAR, gpu_uuid VARCHAR, minute TIMESTAMPTZ, link INTEGER, crc_flit_delta BIGINT,"
    " crc_data_delta BIGINT, replay_delta BIGINT, recovery_delta BIGINT,"
    " PRIMARY KEY (node, gpu_uuid, minute, link))"
)
SUMS = ", ".join(f"nvlink_{c}_{k} BIGINT" for k in ("delta", "total") for c in COUNTERS)

# Each layout writes the GPU-minute keys gpu_samples already has (table k) and what it adds; "none" is the keys
# alone, so a layout's cost is its bytes minus none's.
LAYOUTS = {
    "none": (
        f"CREATE TABLE k ({KEYS}, PRIMARY KEY (node, gpu_uuid, minute))",
        "INSERT INTO k SELECT DISTINCT node, gpu_uuid, minute FROM ({grid})",
    ),
    "dense": (
        f"CREATE TABLE k ({KEYS}, PRIMARY KEY (node, gpu_uuid, minute)); {PER_LINK}",
        "INSERT INTO k SELECT DISTINCT node, gpu_uuid, minute FROM ({grid});"
        " INSERT INTO t SELECT node, gpu_uuid, minute, link, {errors} FROM ({grid})",
    ),
    "array": (
        f"CREATE TABLE k ({KEYS}, links STRUCT(link INTEGER, crc_flit_delta BIGINT, crc_data_delta BIGINT,"
        " replay_delta BIGINT, recovery_delta BIGINT)[], PRIMARY KEY (node, gpu_uuid, minute))",
        "INSERT INTO k SELECT node, gpu_uuid, minute, list({{'link': link, 'crc_flit_delta': crc_flit_delta,"
        " 'crc_data_delta': crc_data_delta, 'replay_delta': replay_delta, 'recovery_delta': recovery_delta}}"
        " ORDER BY link) FROM (SELECT node, gpu_uuid, minute, link, {errors} FROM ({grid})) GROUP BY ALL",
    ),
    "sparse": (
        f"CREATE TABLE k ({KEYS}, {SUMS}, PRIMARY KEY (node, gpu_uuid, minute)); {PER_LINK}",
        "INSERT INTO k SELECT node, gpu_uuid, minute, sum(crc_flit_delta), sum(crc_data_delta),"
        " sum(replay_delta), sum(recovery_delta), 0, 0, 0, 0"
        " FROM (SELECT node, gpu_uuid, minute, {errors} FROM ({grid})) GROUP BY ALL;"
        " INSERT INTO t SELECT node, gpu_uuid, minute, link, {errors} FROM ({grid}) WHERE e",
    ),
}


def measure(layout: str, gpus: int, minutes: int, erring: float, workdir: Path) -> dict:
    path = workdir / f"{layout}.duckdb"
    path.unlink(missing_ok=True)
    create, insert = LAYOUTS[layout]
    con = duckdb.connect(str(path))
    con.execute("SET threads = 1")
    con.execute(create)
    sql = insert.format(errors=ERRORS, grid=GRID.format(gpus=gpus, minutes=minutes, erring=erring))
    with timer() as t:
        con.execute(sql)
        con.execute("CHECKPOINT")
    tables = [
        r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name = 't'").fetchall()
    ]
    rows = sum(con.execute(f"SELECT count(*) FROM {n}").fetchone()[0] for n in tables)  # noqa: S608 - 't'
    con.close()
    return {"per_link_rows": rows, "bytes": os.path.getsize(path), "insert_cpu_s": t["cpu_s"]}


def body(args) -> dict:
    """Each layout's added bytes over the keys alone, and scaled to 10,000 GPUs x a day."""
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="nvlink_storage_"))
    workdir.mkdir(parents=True, exist_ok=True)
    got = {name: measure(name, args.gpus, args.minutes, args.erring, workdir) for name in LAYOUTS}
    scale = 10_000 * 1440 / (args.gpus * args.minutes)
    base = got.pop("none")["bytes"]
    for r in got.values():
        r["added_bytes"] = r["bytes"] - base
        r["added_gib_per_day_10k_gpus"] = round(r["added_bytes"] * scale / 2**30, 3)
        r["per_link_rows_per_day_10k_gpus"] = round(r["per_link_rows"] * scale)
    return {"gpu_minutes": args.gpus * args.minutes, "keys_bytes": base, **got}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--erring", type=float, default=0.001, help="share of (link, minute) pairs with errors")
    ap.add_argument("--workdir", help="where the DuckDB files go (default: a new temporary directory)")
    run("nvlink_storage", ap, body)


if __name__ == "__main__":
    main()
