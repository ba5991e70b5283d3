"""Resuming a DeepSpeed job under a new plan: when its checkpoint loads as is, and when it must be converted.

What DeepSpeed supports (0.19.8, read from ``deepspeed/runtime/engine.py`` and
``deepspeed/checkpoint/``):

* Same data-parallel (DP) size: ``engine.load_checkpoint`` loads a ZeRO-1 or ZeRO-2
  checkpoint into either stage (both use ``DeepSpeedZeroOptimizer`` and the same per-rank
  ``zero_pp_rank_R_mp_rank_00_optim_states.pt`` partitions).
* Another DP size: loading ZeRO optimizer partitions raises ``ZeRORuntimeException``
  ("Automatic adjustment of ZeRO's optimizer state partitioning with a new world size is
  not currently supported"). The supported route is DeepSpeed's *universal checkpoint*:
  ``python -m deepspeed.checkpoint.ds_to_universal`` turns the partitions into one file per
  parameter (fp32 weights, Adam moments), and a run whose config sets
  ``checkpoint.load_universal`` loads it at any DP size.
* ZeRO-0 (no partitioning) stores the optimizer with the model: it loads at any DP size.

So mosaic-run converts when the DP size changed under ZeRO >= 1, and refuses the plan
change with a clear error if the conversion fails, rather than starting the job from a
state it cannot load.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

from planner.core.execplan import ExecPlan, PlanError
from wrapper.checkpoint import CheckpointInfo, read_complete_marker, write_complete_marker

log = logging.getLogger(__name__)

CONVERT_TIMEOUT_S = 1800


def universal_dir(info: CheckpointInfo) -> Path:
    """Where the universal form of a checkpoint goes (next to it; not a ``step-N`` name, so never listed)."""
    return info.path.with_name(f"{info.path.name}-universal")


def needs_universal(info: CheckpointInfo, plan: ExecPlan) -> bool:
    saved = info.record.get("plan") or {}
    saved_stage = saved.get("zero_stage", 0) if isinstance(saved, dict) else 0
    return bool(saved_stage) and info.dp is not None and info.dp != plan.dp


def prepare_deepspeed_resume(
    latest: CheckpointInfo | None, plan: ExecPlan, root: Path
) -> tuple[Path | None, bool]:
    """(checkpoint to load, whether it is universal) for a DeepSpeed job about to start with ``plan``."""
    if latest is None:
        return None, False
    if not needs_universal(latest, plan):
        return latest.path, False
    target = universal_dir(latest)
    if read_complete_marker(target) is not None:
        return target, True
    log.info(
        "DP size %s -> %s under ZeRO: converting %s to a universal checkpoint",
        latest.dp,
        plan.dp,
        latest.path.name,
    )
    shutil.rmtree(target, ignore_errors=True)
    argv = [
        sys.executable,
        "-m",
        "deepspeed.checkpoint.ds_to_universal",
        "--input_folder",
        str(latest.path),
        "--output_folder",
        str(target),
        "--num_extract_workers",
        "1",
        "--num_merge_workers",
        "1",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PlanError(
            f"{latest.path}: cannot convert to a universal checkpoint ({e}); refusing the plan change"
        ) from e
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PlanError(
            f"{latest.path}: DeepSpeed could not convert it to a universal checkpoint "
            f"(exit {done.returncode}: "
            f"{' | '.join(tail)}); refusing to resume at DP {plan.dp} from DP {latest.dp}"
        )
    write_complete_marker(target, {**latest.record, "universal": True, "source": latest.path.name})
    return target, True
