"""`slurmscope dashboards build --out DIR`: dashboard JSON and Grafana provisioning files.

Two forms of every dashboard from the same builders: dashboards/ (fixed datasource uid, for the provisioning
files next to them) and import/ (for Grafana's UI import: the datasource is chosen in the import dialog).
The output is deterministic (sorted keys, fixed uids and datasource uid) so the committed copy in
dashboards/generated/ can be compared byte for byte with what the code generates (tests do).
"""

from __future__ import annotations

from pathlib import Path

from slurmscope.dashboards import (
    cost,
    efficiency,
    fairshare,
    jobs,
    nodes,
    overview,
    reliability,
    scheduler,
)
from slurmscope.dashboards.common import DATASOURCE_NAME, DATASOURCE_UID, import_form, to_json

MODULES = (overview, nodes, jobs, fairshare, scheduler, reliability, cost, efficiency)

DATASOURCE_YAML = f"""# Grafana datasource provisioning for slurmscope; the dashboards refer to uid {DATASOURCE_UID}.
# Point url at your Prometheus (the one loading alerts/slurmscope.rules.yaml).
apiVersion: 1
datasources:
  - name: {DATASOURCE_NAME}
    uid: {DATASOURCE_UID}
    type: prometheus
    access: proxy
    url: http://127.0.0.1:9090
    isDefault: false
    editable: false
    jsonData:
      timeInterval: 1m
"""

PROVIDER_YAML = """# Grafana dashboard provider for slurmscope: loads every JSON file under `path`.
# Set path to where the dashboards/*.json of `slurmscope dashboards build --out DIR` are.
apiVersion: 1
providers:
  - name: slurmscope
    folder: slurmscope
    type: file
    disableDeletion: true
    allowUiUpdates: false
    updateIntervalSeconds: 60
    options:
      path: /var/lib/grafana/dashboards/slurmscope
      foldersFromFilesStructure: false
"""


def generate() -> dict[str, str]:
    """Relative path -> file content for every generated file."""
    files = {f"dashboards/{m.SLUG}.json": to_json(m.build()) for m in MODULES}
    files.update({f"import/{m.SLUG}.json": import_form(files[f"dashboards/{m.SLUG}.json"]) for m in MODULES})
    files["provisioning/datasources/slurmscope.yaml"] = DATASOURCE_YAML
    files["provisioning/dashboards/slurmscope.yaml"] = PROVIDER_YAML
    return files


def build_all(out_dir: Path) -> list[Path]:
    """Write the dashboards and provisioning files under out_dir; return the paths written."""
    written = []
    for rel, content in generate().items():
        path = Path(out_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written
