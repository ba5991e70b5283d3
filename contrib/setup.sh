#!/usr/bin/env bash
# Set up Mosaic for development on a fresh Debian 12 machine (idempotent):
# a virtual environment in .venv with Mosaic installed in editable mode and its
# development tools. Installs Debian's python3-venv first when the interpreter lacks it.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "setup: $PYTHON not found; install Python >= 3.11 (Debian 12: apt-get install python3)" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup: Mosaic needs Python >= 3.11, $PYTHON is $("$PYTHON" -V 2>&1)" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing python3-venv" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    else
        echo "setup: $PYTHON has no venv module; install python3-venv" >&2
        exit 1
    fi
fi
# The live Slurm path's integration tests bring up a real local Slurm cluster
# (`mosaic testcluster`): Debian's Slurm 22.05, munge, and MariaDB + slurmdbd for
# accounting (sacct); lua runs etc/job_submit.lua in its test. Installed only when a program
# is missing, only as root with apt.
SLURM_PACKAGES="slurmctld slurmd slurm-client munge slurmdbd mariadb-server slurm-wlm-mysql-plugin lua5.4"
slurm_missing=""
for prog in slurmctld slurmd munged sbatch slurmdbd mariadbd sacct lua5.4; do
    if ! command -v "$prog" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$prog" ]; then
        slurm_missing="$slurm_missing $prog"
    fi
done
if [ -n "$slurm_missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing Slurm for the test cluster ($SLURM_PACKAGES)" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $SLURM_PACKAGES >/dev/null
    else
        echo "setup: missing$slurm_missing; the live Slurm tests will be skipped" \
             "(as root: apt-get install $SLURM_PACKAGES)" >&2
    fi
fi
# `mosaic compare`'s test opens its report.html in a real headless browser (Debian's chromium).
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing chromium for the report test" >&2
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "setup: chromium missing; the report's browser test will be skipped" \
             "(as root: apt-get install chromium)" >&2
    fi
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev,plots]'
# The job side's frameworks, so the wrapper's tests run for real: torch 2.13.0 (the CPU wheel this
# machine image carries; another version pulls GBs of CUDA packages) and DeepSpeed without prebuilt
# ops, constrained so it keeps that torch. Skipped when both import already (re-runs stay fast).
# MOSAIC_SETUP_FRAMEWORKS=0 (contrib/demo.sh) skips them: the demo's jobs are emulated.
if [ "${MOSAIC_SETUP_FRAMEWORKS:-1}" != 0 ] && ! .venv/bin/python -c 'import torch, deepspeed' >/dev/null 2>&1; then
    echo "setup: installing torch 2.13.0 (CPU) and DeepSpeed 0.19.8" >&2
    constraint=$(mktemp)
    echo "torch==2.13.0" >"$constraint"
    .venv/bin/python -m pip install --quiet "torch==2.13.0"
    DS_BUILD_OPS=0 .venv/bin/python -m pip install --quiet --no-build-isolation "deepspeed==0.19.8" -c "$constraint"
    rm -f "$constraint"
fi
echo "setup: ready ($(.venv/bin/mosaic --version))" >&2
