#!/usr/bin/env bash
# The venvs of the Hermes version matrix (tests/hermes_versions/): one per older hermes-agent,
# .venv-hermes-<version>, each with that Hermes, this checkout (editable, no extras) and pytest.
# Reused when present; reinstalled when pyproject.toml is newer than the venv's stamp. Run by
# scripts/test.sh; safe to run again. OBSERVED_HERMES_VERSIONS overrides the list.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
VERSIONS="${OBSERVED_HERMES_VERSIONS:-0.16.0 0.17.0 0.18.2}"

setup_one() {
  local version="$1" venv="$ROOT/.venv-hermes-$1"
  local stamp="$venv/.observed-engine-installed"
  if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv"
    "$PY" -m venv "$venv"
  fi
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ] \
      || ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('hermes-agent') != '$version')" 2>/dev/null; then
    echo "setup: installing hermes-agent==$version and observed-engine into $venv"
    "$venv/bin/python" -m pip install -q "hermes-agent==$version" "pytest>=8" >/dev/null
    touch "$stamp.tmp"
  fi
}

# The Hermes installs are independent: in parallel (mostly download and unpack).
pids=()
for v in $VERSIONS; do
  setup_one "$v" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid" || rc=1
done
[ "$rc" = 0 ] || { echo "setup: a Hermes version venv failed to install" >&2; exit 1; }

# The project, editable, one venv after the other (the builds share the checkout's egg-info).
for v in $VERSIONS; do
  venv="$ROOT/.venv-hermes-$v"
  stamp="$venv/.observed-engine-installed"
  if [ -f "$stamp.tmp" ]; then
    "$venv/bin/python" -m pip install -q -e "$ROOT" >/dev/null
    "$venv/bin/python" -c "from observed_engine.tokens import ensure_offline_encodings as e; e()"
    mv "$stamp.tmp" "$stamp"
  fi
done
echo "setup: Hermes version venvs ready ($VERSIONS)"
