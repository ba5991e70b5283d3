#!/usr/bin/env bash
# Set up Mosaic and run every check CI runs: lint, types, and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# --fast: lint, types and the pure tests (no live Slurm cluster, no training processes, no
# long simulations), for quick feedback while working; CI runs everything.
fast=0
if [ "${1:-}" = "--fast" ]; then
    fast=1
    shift
fi
if [ "$fast" = 0 ] || [ ! -x .venv/bin/pytest ]; then
    ./contrib/setup.sh
fi
echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy" >&2
.venv/bin/mypy
echo "== pytest" >&2
# Workers (pytest-xdist): the live tests mostly wait on Slurm, so three share two cores well;
# each worker brings up its own test clusters. MOSAIC_TEST_WORKERS=0 runs in one process.
workers=${MOSAIC_TEST_WORKERS:-3}
if [ "$fast" = 1 ]; then
    HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-fast} exec .venv/bin/python -m pytest -q \
        -n "${MOSAIC_TEST_WORKERS:-2}" -m "not live and not jobs and not slow" -p no:cacheprovider "$@"
fi
HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci} exec .venv/bin/python -m pytest -n "$workers" --dist worksteal --durations=20 "$@"
