# Sourced by scripts/test and scripts/demo: create .venv and install slurmscope into it when needed.
# Reinstalls only when pyproject.toml or the wanted extras changed, so a second run starts in seconds.
# EXTRAS: the optional dependency groups (scripts/test wants "test"; the demo needs none, so a fresh demo does
# not download the test tools and Spark). pip's output goes to .venv/install.log and is shown only on failure.
set -euo pipefail
PY=${PYTHON:-python3}
EXTRAS=${EXTRAS:-}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.slurmscope-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1) ${EXTRAS}"
have=$(cat "$stamp" 2>/dev/null || true)
# An install with extras serves a run that wants none (the demo after the tests), not the other way round.
if [[ $have != "$want" && ! ( -z $EXTRAS && ${have%% *} == "${want%% *}" ) ]]; then
  spec="."
  [[ -n $EXTRAS ]] && spec=".[${EXTRAS}]"
  echo "bootstrap: installing slurmscope${EXTRAS:+ with [$EXTRAS]} into .venv (first run or pyproject.toml changed)..." >&2
  log=.venv/install.log
  if ! { .venv/bin/python -m pip install --quiet --upgrade pip && .venv/bin/python -m pip install --quiet -e "$spec"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "bootstrap: pip install failed (log above, also in $log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
