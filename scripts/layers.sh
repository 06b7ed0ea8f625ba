#!/usr/bin/env bash
# The layer contract (pyproject.toml [tool.importlinter]) checked on an installed copy: the folders are
# mapped into slurmscope.* by package-dir, which import-linter can only see in a real install.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! .venv/bin/python -m pip install --quiet --no-deps --target "$work/site" . >"$work/pip.log" 2>&1; then
  cat "$work/pip.log" >&2
  exit 1
fi
rm -rf build
cd "$work"
PYTHONPATH="$work/site" "$root/.venv/bin/lint-imports" --no-cache "$root/pyproject.toml"
