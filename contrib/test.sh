#!/usr/bin/env bash
# Set up Mosaic and run every check CI runs: lint, types, and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./contrib/setup.sh
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy
echo "== pytest" >&2
HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci} .venv/bin/python -m pytest "$@"
