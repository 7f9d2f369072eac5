#!/usr/bin/env bash
# The README's first command: set up what the demo runs, then run the demo workload through real engines and serve the live dashboard.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --for demo      # what the demo runs, nothing the tests alone need
VENV="${OBSERVED_VENV:-$ROOT/.venv}"
# The demo writes only inside a directory of its own (store, private Hermes home, token cache,
# dashboard log): here .demo/ in this checkout (gitignored), unless OBSERVED_DEMO_DIR or --dir says otherwise.
export OBSERVED_DEMO_DIR="${OBSERVED_DEMO_DIR:-$ROOT/.demo}"
exec "$VENV/bin/observed-engine" demo "$@"
