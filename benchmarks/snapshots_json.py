"""Slurm's JSON of the nodes and the queue read as a stream, against the live text of the same rows.

    .venv/bin/python -m benchmarks.snapshots_json [--nodes 10000] [--partitions 3] [--jobs 20000]

Writes a slurmrestd v0.0.38 `/nodes` and `/jobs` document (records copied from the test bed's real
answers in tests/fixtures/slurm-22.05/json-state/, names and ids varied, pretty-printed as Slurm prints
them) and the live text lines of the same rows (each record's `json_values` joined as the live format
prints them) into a temporary folder. Then, each in a fresh process for its own peak RSS: the JSON path as
`ingest` runs it (`parse_stream` on the open file), the text path of the same rows (the fair reference for
time: what the command's own output costs), and `json.load` of the document alone (the reference for
memory: holding the document as Python objects, which the stream avoids).
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmscope.collectors import sinfo, squeue

from benchmarks.harness import REPO, in_child, parser, peak_rss_mib, run, timer

STATE = REPO / "tests" / "fixtures" / "slurm-22.05" / "json-state"
US = "\x1f"
SINFO_KEYS = (
    "node",
    "partition",
    "state",
    "cpus_state",
    "memory",
    "alloc_mem",
    "gres",
    "gres_used",
    "features",
    "reason_user",
    "reason_time",
    "reason",
)
SQUEUE_KEYS = (
    "job_id",
    "job_id_raw",
    "array_job_id",
    "array_task_id",
    "user",
    "account",
    "partition",
    "qos",
    "state",
    "priority",
    "submit_time",
    "start_time",
    "nodes",
    "cpus",
    "tres_per_node",
    "timelimit",
    "dependency",
    "reason",
    "name",
)


def _write(folder: Path, nodes: int, partitions: int, jobs: int) -> None:
    """The two documents and the two texts, written record by record (never whole in memory)."""
    ndoc = json.loads((STATE / "rest_nodes_a.json").read_bytes())
    jdoc = json.loads((STATE / "rest_slurm_jobs_a.json").read_bytes())
    parts = ["gpu", "debug", *(f"p{i}" for i in range(2, partitions))][:partitions]
    with open(folder / "nodes.json", "w") as js, open(folder / "nodes.txt", "w") as tx:
        js.write('{\n  "meta": ' + json.dumps(ndoc["meta"]) + ',\n  "errors": [],\n  "nodes": [\n')
        for i in range(nodes):
            node = copy.deepcopy(ndoc["nodes"][i % len(ndoc["nodes"])])
            node["name"] = node["hostname"] = f"n{i:06d}"
            node["partitions"] = parts
            js.write(("," if i else "") + json.dumps(node, indent=2))
            for v in sinfo.json_values(node):
                tx.write(US.join(v[k] for k in SINFO_KEYS) + "\n")
        js.write("\n  ]\n}\n")
    with open(folder / "jobs.json", "w") as js, open(folder / "jobs.txt", "w") as tx:
        js.write('{\n  "meta": ' + json.dumps(jdoc["meta"]) + ',\n  "errors": [],\n  "jobs": [\n')
        for i in range(jobs):
            job = copy.deepcopy(jdoc["jobs"][i % len(jdoc["jobs"])])
            job["job_id"] = 1_000_000 + i
            if job["array_job_id"]:
                job["array_job_id"] = job["job_id"]
            js.write(("," if i else "") + json.dumps(job, indent=2))
            for v in squeue.json_values(job):
                tx.write(US.join(v[k] for k in SQUEUE_KEYS) + "\n")
        js.write("\n  ]\n}\n")


def _child(args: argparse.Namespace) -> dict[str, Any]:
    kind, path = args.child.split(":", 1)
    module = sinfo if kind == "nodes" else squeue
    kw = dict(cluster="bench", snapshot_time=datetime.now(UTC), tz=UTC)
    with timer() as t:
        if path.endswith(".txt"):
            rows = module.parse(Path(path).read_bytes(), **kw).rows
        elif args.load:
            with open(path, "rb") as fh:
                rows = len(json.load(fh)[kind])  # records, held whole: the memory reference
        else:
            with open(path, "rb") as fh:
                rows = module.parse_stream(fh, **kw).rows
    return {**t, "rows": rows, "peak_rss_mib": peak_rss_mib()}


def body(args: argparse.Namespace) -> dict[str, Any]:
    if args.child:
        return _child(args)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bm_json_") as tmp:
        folder = Path(tmp)
        _write(folder, args.nodes, args.partitions, args.jobs)
        for kind in ("nodes", "jobs"):
            doc = folder / f"{kind}.json"
            out[f"{kind}_json_mib"] = round(doc.stat().st_size / 2**20, 1)
            out[f"{kind}_json_stream"] = in_child("benchmarks.snapshots_json", "--child", f"{kind}:{doc}")
            out[f"{kind}_text"] = in_child(
                "benchmarks.snapshots_json", "--child", f"{kind}:{folder / f'{kind}.txt'}"
            )
            out[f"{kind}_json_load"] = in_child(
                "benchmarks.snapshots_json", "--child", f"{kind}:{doc}", "--load"
            )
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    run("snapshots_json", ap, body)


if __name__ == "__main__":
    main()
