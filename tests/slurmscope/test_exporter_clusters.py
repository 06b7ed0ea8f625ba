"""The exporter renders every configured cluster: each cluster's series in the two-cluster database are the
series a render of that cluster alone gives (tests/cluster_pair.py)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurmscope.catalog import INTERNAL
from slurmscope.db import connect
from slurmscope.exporter import render
from tests.cluster_pair import NAMES

INTERNAL_NAMES = {m.name for m in INTERNAL}


def _series(body: bytes) -> dict[str, dict[tuple, float]]:
    """cluster -> {(sample name, sorted labels): value} of every catalog family."""
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name in INTERNAL_NAMES:
            continue
        for s in fam.samples:
            labels = tuple(sorted(s.labels.items()))
            out.setdefault(s.labels["cluster"], {})[(s.name, labels)] = s.value
    return out


def test_one_render_holds_each_cluster_as_rendered_alone(cluster_pair):
    cfg = cluster_pair.config()
    assert cfg.clusters == NAMES
    con = connect(cluster_pair.combined, read_only=True)
    try:
        both = _series(render(con, cfg, cluster_pair.now))
    finally:
        con.close()
    assert set(both) == set(NAMES)
    for name in NAMES:
        con = connect(cluster_pair.alone[name], read_only=True)
        try:
            alone = _series(render(con, cfg.for_cluster(name), cluster_pair.now))
        finally:
            con.close()
        assert set(alone) == {name}
        # sums over rows read in another order differ in the last bits
        assert both[name] == pytest.approx(alone[name], rel=1e-12)
        assert len({sample for sample, _labels in both[name]}) >= 40  # most families have samples
    # b's first GPU node is DOWN in every snapshot, simcluster's is not: the series really are per cluster
    down = {c: sum(v for (n, _), v in s.items() if n == "slurmscope_node_down") for c, s in both.items()}
    assert down["b"] >= down["simcluster"] + 1


def test_a_family_failing_for_one_cluster_keeps_the_other_s_samples_and_reports_down(cluster_pair, tmp_path):
    import shutil

    db = tmp_path / "x.duckdb"
    shutil.copyfile(cluster_pair.combined, db)
    con = connect(db)
    try:
        # a cost macro that fails for cluster b only (a cast error raised at query time)
        con.execute(
            "CREATE OR REPLACE MACRO metric_cost_usd_total(cluster_name, now) AS TABLE "
            "SELECT cluster, account, partition, gpu_model, CAST(CASE WHEN cluster_name = 'b' THEN 'x' "
            "ELSE '1' END AS DOUBLE) AS value FROM (SELECT cluster_name AS cluster, 'a' AS account, "
            "'p' AS partition, 'g' AS gpu_model)"
        )
        body = render(con, cluster_pair.config(), cluster_pair.now).decode()
    finally:
        con.close()
    assert (
        'slurmscope_cost_usd_total{cluster="simcluster",account="a",partition="p",gpu_model="g"} 1.0' in body
    )
    assert 'cluster="b",account="a"' not in body
    assert 'slurmscope_exporter_family_up{family="slurmscope_cost_usd_total"} 0.0' in body
