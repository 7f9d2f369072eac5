#!/usr/bin/env bash
# The README's test command: set up, then run the whole suite. Fails when pytest ran no test.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" || exit 1
VENV="${OBSERVED_VENV:-$ROOT/.venv}"
cd "$ROOT"
export OBSERVED_REQUIRE_TOOLS=1          # a missing prometheus/chromium fails instead of skipping
mkdir -p test-artifacts

# The Hermes version matrix (tests/hermes_versions/): a fast check of each other Hermes line in its
# own cached venv, run in the background while the main suite runs on 0.19.0; their exit codes are
# collected at the end and any failure fails the run. OBSERVED_HERMES_VERSIONS="" skips it.
HERMES_VERSIONS="${OBSERVED_HERMES_VERSIONS-0.16.0 0.17.0 0.18.2 0.20.1.2 0.22.2.post1}"
version_pids=()
version_names=()
group_b_pid=""
stop_versions() {
  for pid in "${version_pids[@]}" ${group_b_pid:+"$group_b_pid"}; do
    kill -- "-$pid" 2>/dev/null || true
  done
}
trap stop_versions EXIT
if [ -n "$HERMES_VERSIONS" ]; then
  for v in $HERMES_VERSIONS; do
    echo "test.sh: Hermes $v check started in the background (test-artifacts/hermes-$v.log)"
    # its venv (cached; created on a fresh machine, beside the main suite), then the check
    # (a process group of its own: stopped whole, pip or pytest, if test.sh ends first)
    OBSERVED_HERMES_VERSION="$v" ROOT="$ROOT" setsid -w bash -c '
      bash "$ROOT/scripts/setup_hermes_versions.sh" "$OBSERVED_HERMES_VERSION" || exit 1
      exec "$ROOT/.venv-hermes-$OBSERVED_HERMES_VERSION/bin/python" -m pytest -q -p no:cacheprovider \
        --junitxml="test-artifacts/junit-hermes-$OBSERVED_HERMES_VERSION.xml" tests/hermes_versions \
        tests/compare/test_replay_logs.py tests/compare/test_replay_tls.py \
        tests/compare/test_compare.py::test_a_replay_does_not_sleep_between_tool_calls_and_changes_nothing_by_it
    ' >"test-artifacts/hermes-$v.log" 2>&1 &
    version_pids+=($!)
    version_names+=("$v")
  done
fi

# The layering and lint are checks like the tests: import-linter (pyproject [tool.importlinter]:
# layers, capture/worker independent, Hermes only in observed_engine.host, no Streamlit in the core)
# and ruff (pyflakes F, unused arguments ARG).
lint_rc=0
echo "test.sh: lint-imports"
"$VENV/bin/lint-imports" --no-cache || lint_rc=1
echo "test.sh: ruff check"
"$VENV/bin/ruff" check --no-cache observed_engine dashboard tests benchmarks deploy || lint_rc=1

# The whole suite runs as two pytest processes at once, one per core: the files below (dashboard,
# browser, demo, replay and load tests: none touches the venv's Hermes or another file's state)
# in the background, the rest here. With arguments, only what they name runs, in one process.
# OBSERVED_TEST_GROUPS=1 runs everything in one process.
GROUP_B=(tests/e2e/test_dashboard_browser.py tests/e2e/test_demo_browser.py tests/demo/test_demo.py
         tests/api/test_concurrency_load.py tests/compare/test_compare.py tests/dashboard/test_apptest.py
         tests/dashboard/test_security.py tests/benchmarks/test_benchmarks.py tests/compare/test_tune.py)
ignores=()
if [ "$#" = 0 ] && [ "${OBSERVED_TEST_GROUPS:-2}" != 1 ]; then
  present=()
  for f in "${GROUP_B[@]}"; do
    [ -f "$f" ] && present+=("$f") && ignores+=("--ignore=$f")
  done
  echo "test.sh: ${#present[@]} test files in a second pytest process (test-artifacts/group-b.log)"
  setsid -w "$VENV/bin/python" -m pytest -q -p no:cacheprovider --junitxml=test-artifacts/junit-group-b.xml \
    "${present[@]}" >test-artifacts/group-b.log 2>&1 &
  group_b_pid=$!
fi

"$VENV/bin/python" -m pytest -q -p no:cacheprovider --junitxml=test-artifacts/junit.xml "${ignores[@]}" "$@"
rc=$?

if [ -n "$group_b_pid" ]; then
  wait "$group_b_pid"
  brc=$?
  group_b_pid=""
  echo "test.sh: second pytest process: $(tail -1 test-artifacts/group-b.log)"
  if [ "$brc" != 0 ]; then
    echo "test.sh: the second pytest process FAILED (exit $brc); its failures:" >&2
    grep -E "^(FAILED|ERROR) " test-artifacts/group-b.log >&2 || tail -60 test-artifacts/group-b.log >&2
    if [ "$rc" = 0 ] || [ "$rc" = 5 ]; then rc=$brc; fi
  fi
fi

versions_rc=0
for i in "${!version_pids[@]}"; do
  v="${version_names[$i]}"
  wait "${version_pids[$i]}"
  vrc=$?
  if [ "$vrc" = 0 ]; then
    echo "test.sh: Hermes $v check: $(tail -1 "test-artifacts/hermes-$v.log")"
  else
    echo "test.sh: Hermes $v check FAILED (exit $vrc); the end of test-artifacts/hermes-$v.log:" >&2
    tail -40 "test-artifacts/hermes-$v.log" >&2
    versions_rc=1
  fi
done
version_pids=()

if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
if [ "$rc" = 0 ] && [ "$versions_rc" != 0 ]; then
  echo "test.sh: the main suite passed but a Hermes version check failed (see above)" >&2
  exit 1
fi
if [ "$rc" = 0 ] && [ "$lint_rc" != 0 ]; then
  echo "test.sh: the tests passed but lint-imports or ruff failed (see above)" >&2
  exit 1
fi
exit "$rc"
