#!/usr/bin/env bash
# The README's first command: set up, then run the demo workload through real engines and serve the live dashboard.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
VENV="${OBSERVED_VENV:-$ROOT/.venv}"
exec "$VENV/bin/observed-engine" demo "$@"
