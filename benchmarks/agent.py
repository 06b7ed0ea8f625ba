"""Overhead of the NVML agent's own work (sampling loop, aggregation, attribution, spooling, /metrics).

Two measurements, both with the fake NVML (the real NVML calls' cost is judged on a real GPU, see
benchmarks/nvml_real_gpu.sh):

1. in-process, virtual clock: N sampling rounds of 8 GPUs back to back; CPU seconds per round. At a 1 s
   interval the agent's CPU share of one core is (CPU per round) / 1 s. The fake's own cost is included,
   so this over-states the agent's share.
2. a real `slurmscope agent --fake` process at --interval 1 for --seconds, scraped every 15 s like
   Prometheus would: CPU (utime+stime from /proc/<pid>/stat, after start-up) over wall time, and peak RSS
   (VmHWM) from /proc/<pid>/status.

    .venv/bin/python -m benchmarks.agent --gpus 8 --rounds 3600 --seconds 120

Budget (issue 5): <= 1 % of one core and <= 80 MB RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from slurmscope.agent.agent import Agent
from slurmscope.agent.fake import FakeProcess, fake_from_spec

from benchmarks.harness import parser, run


def in_process(gpus: int, rounds: int, tmp: Path) -> dict:
    t = [1_800_000_000.0]
    fake = fake_from_spec(
        {"gpus": [{"model": "h100", "state": "load", "count": gpus}], "start": t[0]}, clock=lambda: t[0]
    )
    for i, g in enumerate(fake.gpus):
        g.processes = [FakeProcess(10_000 + i, 1 << 30)]
    mapping = tmp / "map"
    mapping.mkdir()
    for j in range(gpus // 2):
        (mapping / f"job_{j}").write_text(
            f"job_id={100 + j}\nstart_time={t[0]:.0f}\ndevices={2 * j},{2 * j + 1}\n"
        )
    cg = {
        10_000 + i: f"0::/system.slice/slurmstepd.scope/job_{100 + i // 2}/step_0/user/task_0\n"
        for i in range(gpus)
    }
    agent = Agent(
        fake,
        node="bench",
        spool_dir=tmp / "spool",
        mapping_dir=mapping,
        interval=1,
        read_cgroup=cg.get,
        clock=lambda: t[0],
    )
    agent.tick(t[0])  # discovery, first slow round
    t[0] += 1
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        agent.tick(t[0])
        t[0] += 1
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    agent.close(t[0])
    return {
        "rounds": rounds,
        "gpus": gpus,
        "cpu_seconds": round(cpu, 3),
        "cpu_ms_per_round": round(1000 * cpu / rounds, 3),
        "cpu_share_of_one_core_at_1s": round(cpu / rounds, 5),
        "wall_seconds": round(wall, 3),
        "spool_records": agent.stats["records"],
    }


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def real_process(gpus: int, seconds: float, tmp: Path, port: int) -> dict:
    spec = tmp / "spec.json"
    spec.write_text(
        json.dumps({"node": "bench", "gpus": [{"model": "h100", "state": "load", "count": gpus}]})
    )
    exe = Path(sys.executable).with_name("slurmscope")
    cmd = [
        str(exe),
        "agent",
        "--port",
        str(port),
        "--spool",
        str(tmp / "spool2"),
        "--interval",
        "1",
        "--fake",
        str(spec),
    ]
    proc = subprocess.Popen(cmd, cwd=tmp, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        for _ in range(200):
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(2.0)  # past start-up and the first slow round
        c0, w0 = _proc_cpu(proc.pid), time.monotonic()
        scrapes = 0
        while time.monotonic() - w0 < seconds:
            time.sleep(min(15.0, seconds - (time.monotonic() - w0)))
            urllib.request.urlopen(url, timeout=5).read()
            scrapes += 1
        cpu, wall = _proc_cpu(proc.pid) - c0, time.monotonic() - w0
        rss, hwm = _proc_status(proc.pid, "VmRSS"), _proc_status(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "gpus": gpus,
        "interval_seconds": 1,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 3),
        "cpu_share_of_one_core": round(cpu / wall, 5),
        "scrapes": scrapes,
        "rss_mb": round(rss / 2**20, 1),
        "peak_rss_mb": round(hwm / 2**20, 1),
    }


def body(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        out = {"in_process": in_process(args.gpus, args.rounds, Path(d))}
        if not args.skip_process:
            out["agent_process"] = real_process(args.gpus, args.seconds, Path(d), args.port)
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3600)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--port", type=int, default=19401)
    ap.add_argument("--skip-process", action="store_true")
    run("agent", ap, body)


if __name__ == "__main__":
    main()
