# Sourced by scripts/test and scripts/demo: create .venv and install slurmscope into it when needed.
# Reinstalls only when pyproject.toml changed, so a second run starts in seconds.
set -euo pipefail
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.slurmscope-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  .venv/bin/python -m pip install --quiet --upgrade pip >&2
  .venv/bin/python -m pip install --quiet -e ".[test]" >&2
  echo "$want" > "$stamp"
fi
