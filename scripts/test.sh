#!/usr/bin/env bash
# The README's test command: set up, then run the whole suite. Fails when pytest ran no test.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" || exit 1
VENV="${OBSERVED_VENV:-$ROOT/.venv}"
cd "$ROOT"
export OBSERVED_REQUIRE_TOOLS=1          # a missing prometheus/chromium fails instead of skipping
mkdir -p test-artifacts

# The layering and lint are checks like the tests: import-linter (pyproject [tool.importlinter]:
# layers, capture/worker independent, Hermes only in observed_engine.host, no Streamlit in the core)
# and ruff (pyflakes F, unused arguments ARG).
lint_rc=0
echo "test.sh: lint-imports"
"$VENV/bin/lint-imports" --no-cache || lint_rc=1
echo "test.sh: ruff check"
"$VENV/bin/ruff" check --no-cache observed_engine dashboard tests benchmarks deploy || lint_rc=1

"$VENV/bin/python" -m pytest -q -p no:cacheprovider --junitxml=test-artifacts/junit.xml "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
if [ "$rc" = 0 ] && [ "$lint_rc" != 0 ]; then
  echo "test.sh: the tests passed but lint-imports or ruff failed (see above)" >&2
  exit 1
fi
exit "$rc"
