#!/usr/bin/env bash
# Set up Mosaic and run its main job on the embedded default: the simulator replays the
# bundled 240-job trace on the bundled 64-GPU cluster with the mosaic preset, prints
# the summary and writes out/quickstart/{summary.json,jobs.csv,plot.png}.
set -euo pipefail
cd "$(dirname "$0")/.."
./contrib/setup.sh
exec .venv/bin/mosaic sim --scheduler "${1:-mosaic}" --out out/quickstart
