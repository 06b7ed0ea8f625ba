"""Pipelines per cluster: in a database holding two clusters, each cluster's marts equal those of a database
holding that cluster alone (tests/cluster_pair.py makes cluster `b` so that any leak would change them)."""

from __future__ import annotations

import pytest

from slurmscope.db import connect
from tests.cluster_pair import NAMES, marts

VOLATILE = {"issued_at", "updated_at"}
"""Columns holding the wall-clock instant of the run that wrote the row, not data."""


def _same(value):
    """Floats to 12 significant digits: a sum over rows read in another order differs in the last bits."""
    return float(f"{value:.12g}") if isinstance(value, float) else value


def _rows(con, table: str, cluster: str) -> list[tuple]:
    cols = [
        c
        for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
        if c not in VOLATILE
    ]
    sel = ", ".join(f'"{c}"' for c in cols)
    rows = con.execute(
        f"SELECT {sel} FROM {table} WHERE cluster = ? ORDER BY ALL",  # noqa: S608 - table names from the database
        [cluster],
    ).fetchall()
    return [tuple(_same(v) for v in row) for row in rows]


@pytest.mark.parametrize("cluster", NAMES)
def test_each_cluster_s_marts_equal_that_cluster_run_alone(cluster_pair, cluster):
    both = connect(cluster_pair.combined, read_only=True)
    alone = connect(cluster_pair.alone[cluster], read_only=True)
    try:
        tables = marts(both)
        assert tables == marts(alone)
        filled = 0
        for table in tables:
            got, want = _rows(both, table, cluster), _rows(alone, table, cluster)
            assert got == want, f"{table}: {len(got)} rows with the other cluster present, {len(want)} alone"
            filled += bool(want)
        assert filled >= 20, f"only {filled} marts have rows: the comparison would prove little"
    finally:
        both.close()
        alone.close()


def test_the_clusters_marts_differ_and_each_is_priced_by_its_own_book(cluster_pair):
    """b holds two thirds of simcluster's attempts, renamed accounts, and its own $3.00 rate against the
    top-level $2.00 (so its cost per allocated GPU-hour is 3.0 and simcluster's 2.0)."""
    con = connect(cluster_pair.combined, read_only=True)
    try:
        accounts = dict(
            con.execute(
                "SELECT cluster, list(DISTINCT account ORDER BY account) FROM mart_cost_daily GROUP BY 1"
            ).fetchall()
        )
        assert accounts["b"] == [f"{a}-b" for a in accounts["simcluster"]]
        rate = dict(
            con.execute(
                "SELECT cluster, sum(cost_usd) / sum(gpu_seconds / 3600) FROM mart_cost_daily GROUP BY 1"
            ).fetchall()
        )
        assert rate == pytest.approx({"simcluster": 2.0, "b": 3.0})
        jobs = dict(con.execute("SELECT cluster, count(*) FROM jobs GROUP BY 1").fetchall())
        assert 0 < jobs["b"] < jobs["simcluster"]
    finally:
        con.close()
