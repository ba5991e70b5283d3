#!/usr/bin/env bash
# Set up Mosaic and run its main job on the embedded default: bring up a private local Slurm
# test cluster (4 nodes x 4 fake GPUs; Debian's Slurm is installed when missing, so run as
# root), submit the bundled trace of emulated jobs through `mosaic submit`, run the controller
# until every job finished, tear the cluster down, and print the summary from `mosaic report`
# (sacct) next to the simulator's. Writes out/demo/{summary.json,jobs.csv,plot.png}.
# Extra arguments go to `mosaic demo` (e.g. --scheduler las).
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo's jobs are emulated: torch and DeepSpeed (for the job-side tests) are not needed.
MOSAIC_SETUP_FRAMEWORKS=0 ./contrib/setup.sh
exec .venv/bin/mosaic demo --out out/demo "$@"
