#!/usr/bin/env bash
# The README's test command: set up, then run the whole suite. Fails when pytest ran no test.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" || exit 1
VENV="${OBSERVED_VENV:-$ROOT/.venv}"
cd "$ROOT"
export OBSERVED_REQUIRE_TOOLS=1          # a missing prometheus/chromium fails instead of skipping
mkdir -p test-artifacts
"$VENV/bin/python" -m pytest -q -p no:cacheprovider --junitxml=test-artifacts/junit.xml "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
