"""The agent's HTTP side: node-local /metrics (no job label), the spool listing, downloads and acks."""

from __future__ import annotations

import json
import logging
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlparse

from slurmscope.agent.spool import ack_file, count_spool, list_spool

from slurmscope.spool import CLOCK_EVENT_CAUSES, GPM_FIELDS

if TYPE_CHECKING:
    from slurmscope.agent.agent import Agent

log = logging.getLogger(__name__)


AGENT_SOURCE = "agent"
"""`source` label of the agent's slurmscope_gpu_* series; the central exporter's copies say "central"."""


def metric_families(agent: Agent) -> list[Any]:
    """Map the agent's last snapshot to Prometheus families. Computes nothing; null fields are omitted.

    Every series carries `cluster` (config cluster.name) so that one Prometheus can watch several clusters;
    the slurmscope_gpu_* series also carry `source="agent"`, because the central exporter serves some of the
    same names from the ingested spool (`source="central"`) and the two must never be added together.
    """
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    snap = agent.snapshot
    cluster = agent.cluster or ""
    base = ["node", "gpu", "uuid", "model"]
    names = ["cluster", *base, "source"]
    fams: dict[str, Any] = {}

    def g(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
        if name not in fams:
            fams[name] = GaugeMetricFamily(name, doc, labels=names + list(extra))
        return fams[name]

    def c(name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
        if name not in fams:
            fams[name] = CounterMetricFamily(name, doc, labels=names + list(extra))
        return fams[name]

    gauges = [
        (
            "slurmscope_gpu_utilization_ratio",
            "GPU busy fraction (NVML utilisation.gpu / 100).",
            "util_gpu",
            0.01,
        ),
        ("slurmscope_gpu_memory_utilization_ratio", "Memory controller busy fraction.", "util_mem", 0.01),
        ("slurmscope_gpu_memory_used_bytes", "Framebuffer memory in use.", "mem_used", 1),
        ("slurmscope_gpu_memory_total_bytes", "Framebuffer memory size.", "mem_total", 1),
        ("slurmscope_gpu_power_watts", "Power draw.", "power_w", 1),
        ("slurmscope_gpu_temperature_celsius", "GPU core temperature.", "temp_gpu", 1),
        ("slurmscope_gpu_memory_temperature_celsius", "HBM temperature.", "temp_mem", 1),
        ("slurmscope_gpu_sm_clock_hertz", "SM clock.", "sm_clock", 1e6),
        ("slurmscope_gpu_memory_clock_hertz", "Memory clock.", "mem_clock", 1e6),
        (
            "slurmscope_gpu_clock_event_reasons",
            "Bitmask of active clock-event (throttle) reasons.",
            "reasons",
            1,
        ),
        (
            "slurmscope_gpu_remapped_rows_pending",
            "1 when a row remapping awaits a GPU reset.",
            "remapped_pending",
            1,
        ),
        ("slurmscope_gpu_remapped_rows_failed", "1 when a row remapping failed.", "remapped_failed", 1),
        (
            "slurmscope_gpu_retired_pages_pending",
            "1 when a page retirement awaits a GPU reset or reboot (pre-Ampere).",
            "retired_pending",
            1,
        ),
        ("slurmscope_gpu_pcie_link_generation", "Current PCIe link generation.", "pcie_gen", 1),
        ("slurmscope_gpu_pcie_link_width", "Current PCIe link width (lanes).", "pcie_width", 1),
    ]
    counters = [
        ("slurmscope_gpu_energy_joules", "Energy since driver load (NVML counter).", "energy_mj", 1e-3),
        ("slurmscope_gpu_pcie_replay", "PCIe replays since reset.", "pcie_replay", 1),
    ]
    by_cause = [
        (
            "slurmscope_gpu_retired_pages",
            "Retired framebuffer pages (pre-Ampere), by cause.",
            (("multiple_single_bit", "retired_sbe"), ("double_bit", "retired_dbe")),
        ),
        (
            "slurmscope_gpu_remapped_rows",
            "Rows remapped to spare rows over the GPU's life (InfoROM), by the errors that caused them.",
            (("correctable", "remapped_corr"), ("uncorrectable", "remapped_unc")),
        ),
    ]
    for d in snap["devices"]:
        labels = [cluster, *(d["labels"][k] for k in base), AGENT_SOURCE]
        g("slurmscope_gpu_info", "GPU identity; value 1.", ("driver_version", "cuda_version")).add_metric(
            labels + [d["driver"], d["cuda"]], 1
        )
        g(
            "slurmscope_gpu_healthy",
            "0 while lost or after a failed row remap, or within health.event_window_seconds of an XID whose"
            " action (NVIDIA's XID catalogue) is reset_gpu, reboot_node or contact_support.",
        ).add_metric(labels, 1 if d["healthy"] else 0)
        g("slurmscope_gpu_lost", "1 while NVML reports the GPU lost.").add_metric(
            labels, 1 if d["lost"] else 0
        )
        g("slurmscope_gpu_mig_enabled", "1 when MIG mode is on.").add_metric(labels, 1 if d["mig"] else 0)
        if d["gpm"] is not None:
            g(
                "slurmscope_gpu_gpm_supported",
                "1 when NVML's GPM profiling metrics are read (Hopper and newer, not in MIG mode); 0: the"
                " activity is GPU_UTIL.",
            ).add_metric(labels, 1 if d["gpm"] else 0)
        c(
            "slurmscope_gpu_throttle_seconds",
            "Seconds with a hardware clock-event reason active (HW slowdown, HW thermal, HW power brake).",
        ).add_metric(labels, d["throttle_total"])
        cf = c(
            "slurmscope_gpu_clock_event_seconds",
            "Seconds each clock-event reason was active, by cause; sw_power_cap is a GPU at its power limit.",
            ("reason",),
        )
        read = d["clock_events"] or (d["reading"] is not None and d["reading"].reasons is not None)
        for cause in CLOCK_EVENT_CAUSES if read else ():  # never read (NotSupported): absent, not 0
            cf.add_metric(labels + [cause], d["clock_events"].get(cause, 0.0))
        xf = c("slurmscope_gpu_xid_errors", "XID errors seen by this agent since it started.", ("xid",))
        for xid, n in sorted(d["xids"].items()):
            xf.add_metric(labels + [str(xid)], n)
        r = d["reading"]
        if r is None:
            continue
        for name, doc, attr, scale in gauges:
            v = getattr(r, attr)
            if v is not None:
                g(name, doc).add_metric(labels, float(v) * scale)
        for name, doc, attr, scale in counters:
            v = getattr(r, attr)
            if v is not None:
                c(name, doc).add_metric(labels, float(v) * scale)
        for name, doc, causes in by_cause:
            for cause, attr in causes:
                v = getattr(r, attr)
                if v is not None:
                    fam = g(name, doc, ("cause",)) if name.endswith("pages") else c(name, doc, ("cause",))
                    fam.add_metric(labels + [cause], float(v))
        totals = r.nvlink_totals
        if totals is not None:
            nf = c(
                "slurmscope_gpu_nvlink_errors",
                "NVLink data-link errors NVML counted, all links, by counter (crc_flit, crc_data, replay,"
                " recovery).",
                ("counter",),
            )
            lf = c(
                "slurmscope_gpu_nvlink_link_errors",
                "NVLink data-link errors per link and counter; a link's series appears with its first error.",
                ("link", "counter"),
            )
            for counter, v in totals.items():
                nf.add_metric(labels + [counter], float(v))
            for link, counts in sorted(r.nvlink.items()):
                for counter, v in counts.items():
                    if v:
                        lf.add_metric(labels + [str(link), counter], float(v))
        if r.violations is not None:
            vf = c(
                "slurmscope_gpu_violation_seconds",
                "Time NVML's perf policies held the GPU below its application clocks, by policy; only"
                " board_limit and reliability are faults.",
                ("policy",),
            )
            for policy, ns in r.violations.items():
                vf.add_metric(labels + [policy], ns / 1e9)
        for name in GPM_FIELDS if r.gpm else ():
            if name in r.gpm:
                g(
                    f"slurmscope_gpu_{name}_ratio",
                    f"GPM {name.replace('_', ' ')} over the last sampling interval (0-1).",
                ).add_metric(labels, r.gpm[name] / 100.0)
        for kind, attr in (("corrected", "ecc_corr_agg"), ("uncorrected", "ecc_unc_agg")):
            v = getattr(r, attr)
            if v is not None:
                c("slurmscope_gpu_ecc_errors", "Aggregate ECC errors.", ("type",)).add_metric(
                    labels + [kind], v
                )
    by_index = {
        d["labels"]["gpu"]: [cluster, *(d["labels"][k] for k in base), AGENT_SOURCE] for d in snap["devices"]
    }
    ef = c(
        "slurmscope_gpu_field_errors",
        "NVML calls that failed, by field and error (field left null).",
        ("field", "error"),
    )
    for (idx, fieldname, err), n in sorted(snap.get("errors", {}).items()):
        labels = by_index.get(str(idx), [cluster, agent.node, str(idx), "", "", AGENT_SOURCE])
        ef.add_metric(labels + [fieldname, err], n)
    out = list(fams.values())
    stats = snap.get("stats", {})
    up = GaugeMetricFamily(
        "slurmscope_agent_nvml_up", "1 when NVML is initialised.", labels=["cluster", "node"]
    )
    up.add_metric([cluster, agent.node], 1 if snap.get("initialized") else 0)
    last = GaugeMetricFamily(
        "slurmscope_agent_last_sample_timestamp_seconds",
        "Time of the last sample.",
        labels=["cluster", "node"],
    )
    if snap.get("time") is not None:
        last.add_metric([cluster, agent.node], snap["time"])
    dur = GaugeMetricFamily(
        "slurmscope_agent_sample_duration_seconds",
        "Wall time of the last sampling round.",
        labels=["cluster", "node"],
    )
    dur.add_metric([cluster, agent.node], stats.get("tick_seconds_last", 0.0))
    pend = GaugeMetricFamily(
        "slurmscope_agent_spool_files", "Closed spool files not yet acknowledged.", labels=["cluster", "node"]
    )
    pend.add_metric([cluster, agent.node], count_spool(agent.spool_dir))
    sw = CounterMetricFamily(
        "slurmscope_agent_spool_write_errors",
        "Spool writes that failed (directory full or read-only); records are kept in memory.",
        labels=["cluster", "node"],
    )
    sw.add_metric([cluster, agent.node], stats.get("spool_write_errors", 0))
    held = GaugeMetricFamily(
        "slurmscope_agent_spool_pending_records",
        "Records held in memory because the spool could not be written.",
        labels=["cluster", "node"],
    )
    held.add_metric([cluster, agent.node], stats.get("pending_records", 0))
    chk = CounterMetricFamily(
        "slurmscope_agent_attribution_checks",
        "Process cgroup vs prolog mapping checks.",
        labels=["cluster", "node", "result"],
    )
    for res, n in sorted(snap.get("checks", {}).items()):
        chk.add_metric([cluster, agent.node, res], n)
    return out + [up, last, dur, pend, sw, held, chk]


class _Collector:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self):  # noqa: ANN201 - prometheus_client protocol
        yield from metric_families(self.agent)


class _Handler(BaseHTTPRequestHandler):
    server_version = "slurmscope-agent"
    agent: Agent
    registry: Any
    auth: Any = None

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("http: " + fmt, *args)

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _denied(self) -> bool:
        """Every endpoint but /healthz needs the web config's credentials: /spool/<file>/ack deletes data."""
        if (
            urlparse(self.path).path == "/healthz"
            or self.auth is None
            or self.auth.check(self.headers.get("Authorization"))
        ):
            return False
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="slurmscope-agent"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def do_GET(self) -> None:  # noqa: N802
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if self._denied():
            return
        path = urlparse(self.path).path
        spool = self.agent.spool_dir
        if path == "/metrics":
            self._send(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        elif path in ("/spool", "/spool/"):
            body = json.dumps({"node": self.agent.node, "files": list_spool(spool)}).encode()
            self._send(200, body, "application/json")
        elif path.startswith("/spool/"):
            name = unquote(path[len("/spool/") :])
            p = spool / name
            if "/" in name or name.startswith(".") or not name.endswith(".jsonl") or not p.is_file():
                self._send(404, b"no such spool file\n")
                return
            self._send(200, p.read_bytes(), "application/x-ndjson")
        elif path == "/healthz":
            self._send(200, b"ok\n")
        else:
            self._send(404, b"not found\n")

    def do_POST(self) -> None:  # noqa: N802
        if self._denied():
            return
        url = urlparse(self.path)
        m = re.fullmatch(r"/spool/([^/]+)/ack", url.path)
        if not m:
            self._send(404, b"not found\n")
            return
        sha = (parse_qs(url.query).get("sha256") or [None])[0]
        result = ack_file(self.agent.spool_dir, unquote(m.group(1)), sha)
        code = {"deleted": HTTPStatus.OK, "absent": HTTPStatus.OK, "mismatch": HTTPStatus.CONFLICT}[result]
        self._send(int(code), (result + "\n").encode())


def start_http(
    agent: Agent, address: str, port: int, web_config: str | Path | None = None
) -> ThreadingHTTPServer:
    """/metrics, /spool, /healthz from a daemon thread; TLS and basic auth from an exporter-toolkit web config."""
    from prometheus_client import CollectorRegistry

    from slurmscope.webconfig import BasicAuth, WebConfig, load_web_config, server_context

    wc = load_web_config(web_config) if web_config else WebConfig()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(agent))
    auth = BasicAuth(wc.users) if wc.users else None
    handler = type("Handler", (_Handler,), {"agent": agent, "registry": registry, "auth": auth})
    server = ThreadingHTTPServer((address, port), handler)
    server.daemon_threads = True
    ctx = server_context(wc)
    if ctx is not None:
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    if not wc.users and address not in ("127.0.0.1", "::1", "localhost"):
        log.warning(
            "agent on %s:%d without basic auth: anyone who reaches the port can acknowledge (delete) "
            "spool files; set nvml.web_config_file",
            address,
            port,
        )
    threading.Thread(target=server.serve_forever, name="agent-http", daemon=True).start()
    return server
