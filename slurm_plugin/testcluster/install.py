"""Install Debian's Slurm (and MariaDB + slurmdbd for accounting) when missing.

Only as root with apt; otherwise a clear error says what to install. The same package
lists are installed by ``contrib/setup.sh`` so CI's fresh machine has them.
"""

from __future__ import annotations

import logging
import os
import shutil

from planner.core.errors import MosaicError
from slurm_plugin.slurm.runner import run

log = logging.getLogger(__name__)

SLURM_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server", "slurm-wlm-mysql-plugin")
SLURM_PROGRAMS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo", "scontrol")
ACCOUNTING_PROGRAMS = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct")


class InstallError(MosaicError):
    """Slurm is missing and cannot be installed here."""


def missing_programs(accounting: bool) -> list[str]:
    wanted = SLURM_PROGRAMS + (ACCOUNTING_PROGRAMS if accounting else ())
    return [p for p in wanted if _which(p) is None]


def _which(program: str) -> str | None:
    # Daemons live in /usr/sbin, which is not always on a non-root PATH.
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin:/sbin:/bin")


def ensure_installed(accounting: bool) -> None:
    """Install the packages whose programs are missing (apt, as root)."""
    missing = missing_programs(accounting)
    if not missing:
        return
    packages = SLURM_PACKAGES + (ACCOUNTING_PACKAGES if accounting else ())
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise InstallError(
            f"missing {', '.join(missing)}; install as root: apt-get install {' '.join(packages)}"
        )
    log.info("installing %s", " ".join(packages))
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env, timeout_s=600)
    run(["apt-get", "install", "-y", "-qq", *packages], env=env, timeout_s=900)
    still = missing_programs(accounting)
    if still:
        raise InstallError(f"installed {' '.join(packages)} but {', '.join(still)} still missing")
