"""The torch.distributed environment of one task, derived from what srun sets (pure).

``torch.distributed.init_process_group("env://")``, DeepSpeed and Megatron all read
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``; srun sets ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, ... instead.
This module is the one translation, used by the task shim (:mod:`wrapper.task`) under srun
and by the local launcher, which sets the same ``SLURM_*`` variables srun would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from planner.core.errors import InputError
from planner.core.hostlist import expand_hostlist

# Ports 20000-39999: above the usual service range and below Linux's default ephemeral range
# (32768+ overlaps, but jobs on one node rarely share a job id modulo 20000).
_PORT_BASE = 20000
_PORT_SPAN = 20000


def master_port(job_id: str) -> int:
    """A port derived from the job id, the same on every node without any exchange."""
    digits = re.sub(r"\D", "", job_id)
    return _PORT_BASE + (int(digits) if digits else 0) % _PORT_SPAN


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list (``n[3-5,7],m1`` -> ``n3``), like ``scontrol show hostnames``."""
    try:
        hosts = expand_hostlist(nodelist)
    except InputError as e:
        raise InputError(f"SLURM_JOB_NODELIST: {e}") from e
    if not hosts:
        raise InputError(f"SLURM_JOB_NODELIST: cannot read node list {nodelist!r}")
    return hosts[0]


def task_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``RANK`` etc. for the task whose srun variables are in ``env``.

    ``MASTER_ADDR`` is, in order: ``MOSAIC_MASTER_ADDR`` (a site override), then
    ``SLURM_LAUNCH_NODE_IPADDR`` (the node running the batch step, which srun's block
    distribution makes the home of rank 0), then the first host of the job's node list.
    """

    def need(key: str) -> str:
        value = env.get(key)
        if value is None or not value.strip():
            raise InputError(f"{key} is not set: run the task under srun or mosaic-run")
        return value.strip()

    def need_int(key: str) -> int:
        value = need(key)
        if not value.isdigit():
            raise InputError(f"{key}: expected a non-negative integer, got {value!r}")
        return int(value)

    rank, world, local = need_int("SLURM_PROCID"), need_int("SLURM_NTASKS"), need_int("SLURM_LOCALID")
    if not 0 <= rank < world:
        raise InputError(f"SLURM_PROCID {rank} is not below SLURM_NTASKS {world}")
    local_world = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_STEP_TASKS_PER_NODE") or ""
    local_size = _first_count(local_world) if local_world else world
    addr = env.get("MOSAIC_MASTER_ADDR") or env.get("SLURM_LAUNCH_NODE_IPADDR")
    if not addr:
        addr = first_host(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "127.0.0.1")
    port = env.get("MOSAIC_MASTER_PORT") or str(master_port(env.get("SLURM_JOB_ID", "0")))
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(local_size),
        "NODE_RANK": env.get("SLURM_NODEID", "0"),
        "MASTER_ADDR": addr,
        "MASTER_PORT": port,
    }


def _first_count(tasks_per_node: str) -> int:
    """``2(x3),1`` (Slurm's compressed per-node counts) -> 2."""
    match = re.match(r"^(\d+)", tasks_per_node)
    return int(match.group(1)) if match else 1
