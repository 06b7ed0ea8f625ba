"""The exporter maps the hand-made history (tests/exporter_data.py) to exactly the samples it implies."""

from __future__ import annotations

import base64
import io
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from slurmscope.config import load_config
from slurmscope.exporter import export_history, render, serve_metrics
from tests.exporter_data import END, build


@pytest.fixture
def cfg():
    return load_config(env={}).with_overrides(cluster={"name": "c1"})


@pytest.fixture
def history(con):
    build(con)
    return con


def samples(body: bytes) -> dict[tuple[str, frozenset], float]:
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(s, name, **labels):
    return s[(name, frozenset({"cluster": "c1", **labels}.items()))]


def names(s):
    return {k[0] for k in s}


def test_gpus_and_nodes_at_end(history, cfg):
    s = samples(render(history, cfg, END))
    # g01 uses 5 and g02 8 of 8; g03 (DOWN) and g04 (drained) hold 16 GPUs out of service; 3 idle on g01.
    assert value(s, "slurmscope_gpus", partition="gpu", gpu_model="h100", state="allocated") == 13
    assert value(s, "slurmscope_gpus", partition="gpu", gpu_model="h100", state="idle") == 3
    assert value(s, "slurmscope_gpus", partition="gpu", gpu_model="h100", state="down") == 16
    assert value(s, "slurmscope_node_down", node="g03") == 1
    assert value(s, "slurmscope_node_down", node="g04") == 0
    assert (
        value(
            s,
            "slurmscope_node_state_info",
            node="g04",
            partition="gpu",
            state="drain",
            state_raw="drained",
            reason="xid 79 RMA",
        )
        == 1
    )
    assert (
        value(s, "slurmscope_node_unavailable_since_timestamp_seconds", node="g04", state="drain")
        == (END - timedelta(hours=30)).timestamp()
    )
    assert value(s, "slurmscope_node_events_total", node="g01", state="drain") == 3
    assert value(s, "slurmscope_node_events_total", node="g02", state="down") == 0  # initialised at 0


def test_jobs_queue_and_scheduler(history, cfg):
    s = samples(render(history, cfg, END))
    assert value(s, "slurmscope_jobs_ended_total", partition="gpu", account="a", state="COMPLETED") == 72 * 4
    assert value(s, "slurmscope_jobs_ended_total", partition="gpu", account="b", state="FAILED") == 72 + 12
    assert value(s, "slurmscope_jobs_ended_total", partition="gpu", account="a", state="NODE_FAIL") == 3
    assert value(s, "slurmscope_jobs_ended_total", partition="gpu", account="a", state="TIMEOUT") == 0
    assert value(s, "slurmscope_job_requeues_total", partition="gpu", account="a") == 40
    assert value(s, "slurmscope_jobs_pending", partition="gpu", account="a", reason="Priority") == 2
    assert value(s, "slurmscope_jobs_pending", partition="gpu", account="a", reason="Resources") == 1
    assert value(s, "slurmscope_gpus_pending", partition="gpu", account="a", qos="normal") == 16
    assert value(s, "slurmscope_gpus_pending", partition="gpu", account="a", qos="high") == 8
    assert value(s, "slurmscope_gpus_pending", partition="gpu", account="b", qos="normal") == 4 + 2
    # b's oldest pending job is held (30 h); the oldest waiting on the scheduler is the 20-h Priority one
    assert (
        value(s, "slurmscope_pending_oldest_submit_timestamp_seconds", partition="gpu", account="b")
        == (END - timedelta(hours=30)).timestamp()
    )
    assert (
        value(
            s, "slurmscope_pending_schedulable_oldest_submit_timestamp_seconds", partition="gpu", account="b"
        )
        == (END - timedelta(hours=20)).timestamp()
    )
    # the failure split: 72 x 4 COMPLETED of a; 72 + 12 FAILED of b (user by record), one of them moved to
    # system by its node incident; a's 3 NODE_FAIL are the system's
    outcomes = {
        (acct, f): value(s, "slurmscope_job_outcomes_total", partition="gpu", account=acct, failure=f)
        for acct in "ab"
        for f in ("none", "user", "system")
    }
    assert outcomes == {
        ("a", "none"): 288,
        ("a", "user"): 0,
        ("a", "system"): 3,
        ("b", "none"): 0,
        ("b", "user"): 84,
        ("b", "system"): 0,
    }
    assert value(s, "slurmscope_job_outcomes_node_incident_total", partition="gpu", account="b") == 1
    assert value(s, "slurmscope_job_outcomes_node_incident_total", partition="gpu", account="a") == 0
    assert value(s, "slurmscope_node_incidents", node="g01", cause="hardware") == 1
    assert value(s, "slurmscope_node_incidents", node="g01", cause="maintenance") == 1
    assert value(s, "slurmscope_goodput_ratio", partition="gpu", nodes="4", kind="measured") == 0.92
    assert value(s, "slurmscope_sdiag_backfill_last_cycle_seconds") == 0.25
    assert (
        value(s, "slurmscope_sdiag_backfill_last_cycle_timestamp_seconds")
        == (END - timedelta(minutes=40)).timestamp()
    )
    assert (
        value(
            s,
            "slurmscope_job_wait_seconds",
            partition="gpu",
            account="a",
            gpu_class="5-8",
            gpu_model="h100",
            percentile="90",
        )
        == 3000
    )
    # 288 sdiag deltas of 15 minutes in three days, 5 starts each.
    assert value(s, "slurmscope_scheduler_jobs_total", event="started") == 288 * 5


def test_collectors_fairshare_gpu_and_cost(history, cfg):
    s = samples(render(history, cfg, END))
    assert value(s, "slurmscope_collector_success", collector="sshare") == 0
    assert value(s, "slurmscope_collector_success", collector="sinfo") == 1
    # sacct runs every 5 minutes from START and stopped 2 h before END; the last run finished 2 s after it started.
    assert (
        value(s, "slurmscope_collector_last_success_timestamp_seconds", collector="sacct")
        == (END - timedelta(hours=2, minutes=5) + timedelta(seconds=2)).timestamp()
    )
    assert value(s, "slurmscope_fairshare_effective_usage_ratio", account="b") == pytest.approx(0.1)
    assert (
        value(s, "slurmscope_gpu_throttle_ratio", node="g02", gpu="3", gpu_model="h100", source="central")
        == 0.5
    )
    assert (
        value(s, "slurmscope_gpu_row_remap_failed", node="g02", gpu="5", gpu_model="h100", source="central")
        == 1
    )
    assert (
        value(
            s,
            "slurmscope_gpu_ecc_errors_total",
            node="g01",
            gpu="0",
            gpu_model="h100",
            type="uncorrected",
            source="central",
        )
        == 1
    )
    assert value(s, "slurmscope_node_gpus_visible", node="g02") == 7
    assert value(s, "slurmscope_gpu_xid_events_total", node="g02", xid="79", source="central") == 1
    assert value(s, "slurmscope_gpu_lost_events_total", node="g02", source="central") == 1
    assert value(s, "slurmscope_gpu_seconds_total", account="a", partition="gpu", gpu_model="h100") == 360000
    assert value(s, "slurmscope_cost_usd_total", account="a", partition="gpu", gpu_model="h100") == 200
    assert value(s, "slurmscope_cost_correction_usd", account="a", partition="gpu", gpu_model="h100") == -2


def test_render_describes_the_past_instant(history, cfg):
    s = samples(render(history, cfg, END - timedelta(hours=3, minutes=30)))
    assert value(s, "slurmscope_node_down", node="g03") == 0  # g03 went down 2 h before END
    assert value(s, "slurmscope_job_requeues_total", partition="gpu", account="a") == 0
    assert (
        "slurmscope_jobs_pending",
        frozenset({"cluster": "c1", "partition": "gpu", "account": "a", "reason": "Priority"}.items()),
    ) not in s
    assert "slurmscope_gpu_seconds_total" not in names(s)  # counters updated 10 min before END
    assert value(s, "slurmscope_node_events_total", node="g01", state="drain") == 2  # the 5 h and 4 h events


def test_counters_never_decrease(history, cfg):
    previous: dict = {}
    t = END - timedelta(days=1)
    while t <= END:
        s = samples(render(history, cfg, t))
        for key, v in s.items():
            if key[0].endswith("_total") and key in previous:
                assert v >= previous[key], (key, t)
        previous.update({k: v for k, v in s.items() if k[0].endswith("_total")})
        t += timedelta(hours=3)


def test_user_labels_only_when_enabled(history, cfg):
    assert "slurmscope_fairshare_user_factor_ratio" not in names(samples(render(history, cfg, END)))
    on = cfg.with_overrides(exporter={"user_labels": True})
    s = samples(render(history, on, END))
    assert value(s, "slurmscope_fairshare_user_factor_ratio", account="a", user="alice") == pytest.approx(0.3)
    assert not any("user" in dict(k[1]) for k in s if k[0] != "slurmscope_fairshare_user_factor_ratio")


def test_missing_mart_degrades_to_no_samples(history, cfg):
    history.execute("DROP TABLE mart_usage_counters")
    s = samples(render(history, cfg, END))
    assert "slurmscope_gpu_seconds_total" not in names(s)
    up = "slurmscope_exporter_family_up"
    assert s[(up, frozenset({("family", "slurmscope_gpu_seconds_total")}))] == 0
    assert s[(up, frozenset({("family", "slurmscope_gpus")}))] == 1
    assert value(s, "slurmscope_gpus", partition="gpu", gpu_model="h100", state="down") == 16


def test_history_export_is_openmetrics_with_shifted_timestamps(history, cfg):
    out = io.BytesIO()
    shift = timedelta(days=10)
    n = export_history(history, cfg, END - timedelta(hours=1), END, timedelta(minutes=30), out, shift=shift)
    assert n == 3
    text = out.getvalue().decode()
    assert text.endswith("# EOF\n")
    fams = {f.name: f for f in parse_openmetrics(text)}
    down = [s for s in fams["slurmscope_node_down"].samples if s.labels["node"] == "g03"]
    assert [(float(s.timestamp), s.value) for s in down] == [
        ((END + shift - timedelta(hours=1)).timestamp(), 1.0),
        ((END + shift - timedelta(minutes=30)).timestamp(), 1.0),
        ((END + shift).timestamp(), 1.0),
    ]
    since = [
        s.value
        for s in fams["slurmscope_node_unavailable_since_timestamp_seconds"].samples
        if s.labels["node"] == "g04"
    ]
    assert since == [(END + shift - timedelta(hours=30)).timestamp()] * 3


@pytest.mark.prometheus
def test_promtool_check_metrics_is_clean(history, cfg):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    body = render(history, cfg.with_overrides(exporter={"user_labels": True}), END)
    res = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
    assert res.stdout.decode().strip() == "" and res.stderr.decode().strip() == ""


def _get(url, headers=None, context=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def test_server_serves_the_rendered_bytes_without_touching_the_database():
    calls = []
    body = b"# HELP x y\n# TYPE x gauge\nx 1.0\n"

    def get_bytes():
        calls.append(1)
        return body

    server = serve_metrics("127.0.0.1", 0, get_bytes)
    try:
        port = server.server_address[1]
        status, got, headers = _get(f"http://127.0.0.1:{port}/metrics")
        assert (status, got) == (200, body)
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert _get(f"http://127.0.0.1:{port}/nope")[0] == 404
        assert len(calls) == 1
    finally:
        server.shutdown()


def test_server_answers_503_before_the_first_render():
    server = serve_metrics("127.0.0.1", 0, lambda: None)
    try:
        assert _get(f"http://127.0.0.1:{server.server_address[1]}/metrics")[0] == 503
    finally:
        server.shutdown()


def test_basic_auth_and_tls_from_web_config(tmp_path, tls_web_config):
    server = serve_metrics("127.0.0.1", 0, lambda: b"x 1.0\n", web_config=tls_web_config)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    ctx.check_hostname = False
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/metrics"
        good = "Basic " + base64.b64encode(b"prom:s3cret").decode()
        bad = "Basic " + base64.b64encode(b"prom:wrong").decode()
        assert _get(url, context=ctx)[0] == 401
        assert _get(url, {"Authorization": bad}, context=ctx)[0] == 401
        assert _get(url, {"Authorization": good}, context=ctx)[:2] == (200, b"x 1.0\n")
        assert _get(url, {"Authorization": good}, context=ctx)[:2] == (200, b"x 1.0\n")  # cached check
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP is refused on a TLS port
            urllib.request.urlopen(url.replace("https", "http"), timeout=5)
    finally:
        server.shutdown()


def test_history_command_writes_a_backfill_file(tmp_path, db_path):
    from slurmscope.db import connect
    from slurmscope.exporter import _main

    con = connect(db_path)
    build(con)
    con.close()
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('[cluster]\nname = "c1"\n')
    out = tmp_path / "h.om"
    start = (END - timedelta(hours=1)).isoformat()
    assert (
        _main(
            [
                "history",
                "--db",
                str(db_path),
                "--config",
                str(cfg_file),
                "--start",
                start,
                "--end",
                END.isoformat(),
                "--step",
                "1800",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    fams = {f.name: f for f in parse_openmetrics(out.read_text())}
    times = sorted({float(s.timestamp) for s in fams["slurmscope_nodes"].samples})
    assert times == [
        (END - timedelta(hours=1)).timestamp(),
        (END - timedelta(minutes=30)).timestamp(),
        END.timestamp(),
    ]


def test_gzip_when_asked_compressed_once_per_render():
    import gzip

    bodies = [b"x 1.0\n" * 1000]
    server = serve_metrics("127.0.0.1", 0, lambda: bodies[0])
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        status, got, headers = _get(url, {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(got) == bodies[0] and len(got) < len(bodies[0]) / 10
        first = server.gzipped(bodies[0])
        assert server.gzipped(bodies[0]) is first  # not recompressed for the same render
        bodies[0] = b"x 2.0\n"  # a new render
        status, got, _ = _get(url, {"Accept-Encoding": "gzip"})
        assert gzip.decompress(got) == b"x 2.0\n"
        status, got, headers = _get(url)
        assert got == b"x 2.0\n" and "Content-Encoding" not in headers
    finally:
        server.shutdown()
