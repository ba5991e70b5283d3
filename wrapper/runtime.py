"""The runtime API a training script uses under ``mosaic-run``.

::

    from wrapper import runtime

    rt = runtime.current()                   # reads what mosaic-run set; installs signal handlers
    plan = rt.plan                           # the resolved ExecPlan (None: no plan, run as written)
    start = rt.load_checkpoint(model, optim) # step to start from (0 when there is no checkpoint)
    for step in range(start, total):
        ...one optimizer step...
        rt.report(step + 1, samples=(step + 1) * plan.global_batch)
        if rt.should_checkpoint():           # collective: every rank calls it at every step
            rt.save_checkpoint(step + 1, model, optim)
            break                            # exit cleanly; the controller relaunches the job
    rt.done()                                # collective: the work is done and flushed

Signals. ``mosaic-run`` forwards the controller's checkpoint signal (USR1, or TERM when
Slurm requeues the job) to every rank. The handler here only sets a flag: saving inside a
signal handler would run in the middle of whatever the rank was doing (a collective, a
half-applied optimizer step). :meth:`Runtime.should_checkpoint` all-reduces the flag (MAX),
so all ranks agree to stop at the same step even when the signal reached them at different
times.

Checkpoints are written with ``torch.distributed.checkpoint`` (DCP) from
``get_state_dict(model, optimizer)``: each rank writes its shards plus metadata describing
every tensor's global shape, so a checkpoint saved by 2 ranks loads into 4 or 1 (DCP
reshards on load), for DDP (replicated) and FSDP (sharded) models alike. Rank 0 writes the
complete-marker last, after a barrier (:mod:`wrapper.checkpoint`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from planner.core.execplan import ExecPlan, plan_from_mapping
from wrapper import checkpoint, status
from wrapper.telemetry import Telemetry

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class Runtime:
    """One training process's view of Mosaic: plan, rank, signals, checkpoints, heartbeats."""

    def __init__(self, env: Mapping[str, str] | None = None, install_handlers: bool = True) -> None:
        self.env = dict(os.environ if env is None else env)
        raw = self.env.get("MOSAIC_EXEC_PLAN")
        self.plan: ExecPlan | None = (
            plan_from_mapping(json.loads(raw), "MOSAIC_EXEC_PLAN") if raw is not None else None
        )
        version = self.env.get("MOSAIC_PLAN_VERSION")
        self.plan_version = int(version) if version and version.isdigit() else None
        self.rank = int(self.env.get("RANK", "0"))
        self.world_size = int(self.env.get("WORLD_SIZE", "1"))
        self.local_rank = int(self.env.get("LOCAL_RANK", "0"))
        self.job_id = self.env.get("MOSAIC_JOB_ID") or self.env.get("SLURM_JOB_ID") or "local"
        ckpt = self.env.get("MOSAIC_CHECKPOINT_DIR")
        self.checkpoint_dir = Path(ckpt) if ckpt else None
        status_dir = self.env.get("MOSAIC_STATUS_DIR")
        self.status_dir = Path(status_dir) if status_dir else None
        self.heartbeat_s = float(self.env.get("MOSAIC_HEARTBEAT_S", "10"))
        self.stop_signal: str | None = None
        self._last_report: tuple[float, int] | None = None
        self._telemetry: Telemetry | None = None
        if install_handlers and threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, self._on_signal)

    # -- signals ---------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Only a flag: the training loop decides when it is safe to save.
        self.stop_signal = signal.Signals(signum).name

    def stop_requested(self) -> bool:
        """This rank's own view: has a checkpoint signal arrived here?"""
        return self.stop_signal is not None

    def should_checkpoint(self) -> bool:
        """Should every rank checkpoint and stop now? Collective: all ranks call it at each step."""
        local = self.stop_requested()
        dist = _dist()
        if dist is None or not dist.is_initialized() or dist.get_world_size() == 1:
            return local
        import torch

        flag = torch.tensor([1 if local else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    # -- heartbeats ------------------------------------------------------------------
    def report(self, step: int, samples: int, force: bool = False, **extra: Any) -> None:
        """Progress heartbeat (rank 0 only, at most every ``MOSAIC_HEARTBEAT_S`` seconds unless forced).

        ``samples`` is the total number of training examples consumed so far; the
        throughput in the record is measured between two heartbeats of this run.
        """
        if self.rank != 0 or self.status_dir is None:
            return
        now = time.time()
        if not force and self._last_report is not None and now - self._last_report[0] < self.heartbeat_s:
            return
        if self._telemetry is None:
            self._telemetry = Telemetry()
        rate = None
        if self._last_report is not None and now > self._last_report[0]:
            rate = round((samples - self._last_report[1]) / (now - self._last_report[0]), 3)
        self._last_report = (now, samples)
        record = self._record("heartbeat", step, samples_per_s=rate, samples=samples, **extra)
        record.update(self._telemetry.sample())
        status.append_record(self.status_dir / status.HEARTBEATS, record)

    def _record(self, event: str, step: int, **fields: Any) -> dict[str, Any]:
        return {
            "event": event,
            "time": round(time.time(), 3),
            "job_id": self.job_id,
            "plan_version": self.plan_version,
            "step": step,
            "world_size": self.world_size,
            **fields,
        }

    # -- the end ---------------------------------------------------------------------
    def done(self) -> None:
        """Say this rank's work is done: call once, after the last step and checkpoint.

        Collective when ``torch.distributed`` is initialised (every rank calls it): a
        barrier, then each rank flushes its output and writes its done-marker
        (``$MOSAIC_DONE_DIR``), then a second barrier so every marker exists before any rank
        goes on to exit. ``mosaic-run`` then counts a rank that dies afterwards (gloo's
        threads can abort interpreter teardown: ``terminate called without an active
        exception``, SIGABRT) as having succeeded, and logs it. Without ``mosaic-run`` it only
        flushes.
        """
        dist = _dist()
        distributed = dist is not None and dist.is_initialized()
        if distributed:
            dist.barrier()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        done_dir = self.env.get("MOSAIC_DONE_DIR")
        if done_dir:
            path = Path(done_dir) / status.done_marker_name(self.rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(f"{time.time():.3f}\n")
                f.flush()
                os.fsync(f.fileno())
        if distributed:
            dist.barrier()

    # -- checkpoints -----------------------------------------------------------------
    def resume_path(self) -> Path | None:
        """The complete checkpoint to resume from (mosaic-run found it before launching)."""
        value = self.env.get("MOSAIC_RESUME_FROM")
        return Path(value) if value else None

    def resume_step(self) -> int:
        value = self.env.get("MOSAIC_RESUME_STEP")
        return int(value) if value and value.isdigit() else 0

    def save_checkpoint(
        self, step: int, model: Any, optimizer: Any, extra: Mapping[str, Any] | None = None
    ) -> Path:
        """Save model and optimizer with DCP into ``step-N/``; rank 0 marks it complete last."""
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.checkpoint.state_dict_saver import save

        path = self._checkpoint_path(step)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))
        self.mark_complete(path, step, "torch", extra)
        return path

    def mark_complete(
        self, path: Path, step: int, framework: str, extra: Mapping[str, Any] | None = None
    ) -> None:
        """Barrier, then rank 0 writes the complete-marker (call after every rank saved)."""
        dist = _dist()
        if dist is not None and dist.is_initialized():
            dist.barrier()
        if self.rank == 0:
            record = {
                "step": step,
                "world_size": self.world_size,
                "framework": framework,
                "plan": json.loads(self.env.get("MOSAIC_EXEC_PLAN", "{}")),
                "plan_version": self.plan_version,
                "time": round(time.time(), 3),
                "extra": dict(extra or {}),
            }
            if self.env.get("MOSAIC_SUBMISSION"):
                record["submission"] = self.env["MOSAIC_SUBMISSION"]  # which submission wrote it
            checkpoint.write_complete_marker(path, record)
            if self.status_dir is not None:
                status.append_record(
                    self.status_dir / status.HEARTBEATS, self._record("checkpoint", step, path=str(path))
                )
        if dist is not None and dist.is_initialized():
            dist.barrier()

    def load_checkpoint(self, model: Any, optimizer: Any) -> int:
        """Load the resume checkpoint into ``model``/``optimizer`` (resharding); return its step (0: none)."""
        path = self.resume_path()
        if path is None:
            return 0
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load

        if checkpoint.read_complete_marker(path) is None:
            raise RuntimeError(
                f"{path}: not a complete checkpoint (no {checkpoint.COMPLETE_MARKER}); refusing to load"
            )
        model_sd, optim_sd = get_state_dict(model, optimizer)
        load({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))  # fills them in place
        set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
        return self.resume_step()

    def checkpoint_extra(self) -> dict[str, Any]:
        """The ``extra`` mapping saved with the resume checkpoint (empty when none)."""
        path = self.resume_path()
        record = checkpoint.read_complete_marker(path) if path is not None else None
        extra = (record or {}).get("extra")
        return dict(extra) if isinstance(extra, dict) else {}

    def _checkpoint_path(self, step: int) -> Path:
        if self.checkpoint_dir is None:
            raise RuntimeError("MOSAIC_CHECKPOINT_DIR is not set: run the training under mosaic-run")
        path = checkpoint.step_dir(self.checkpoint_dir, step)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def deepspeed_resume(self) -> tuple[str, str] | None:
        """(load_dir, tag) for ``engine.load_checkpoint``, or ``None`` when there is nothing to resume.

        mosaic-run points this at a universal checkpoint it converted when the data-parallel
        size changed (and renders ``checkpoint.load_universal`` into the DeepSpeed config).
        """
        path = self.resume_path()
        if path is None:
            return None
        if checkpoint.read_complete_marker(path) is None:
            raise RuntimeError(
                f"{path}: not a complete checkpoint (no {checkpoint.COMPLETE_MARKER}); refusing to load"
            )
        return str(path.parent), path.name

    def deepspeed_client_state(self) -> dict[str, Any]:
        """``client_state`` for ``engine.save_checkpoint`` that lets DeepSpeed make it universal later.

        ``ds_to_universal`` needs ``universal_checkpoint_info`` in the checkpoint (Megatron-
        DeepSpeed writes it with its TP/PP layout patterns). A data-parallel-only model has
        no TP/PP slices to describe, so the version alone is the complete description.
        """
        from deepspeed.checkpoint.constants import (
            UNIVERSAL_CHECKPOINT_INFO,
            UNIVERSAL_CHECKPOINT_VERSION_KEY,
            UNIVERSAL_CHECKPOINT_VERSION_VALUE,
        )

        return {
            UNIVERSAL_CHECKPOINT_INFO: {UNIVERSAL_CHECKPOINT_VERSION_KEY: UNIVERSAL_CHECKPOINT_VERSION_VALUE}
        }

    def deepspeed_tag(self, step: int) -> tuple[str, str]:
        """(save_dir, tag) for ``engine.save_checkpoint`` so DeepSpeed writes into ``step-N/``."""
        if self.checkpoint_dir is None:
            raise RuntimeError("MOSAIC_CHECKPOINT_DIR is not set: run the training under mosaic-run")
        return str(self.checkpoint_dir), checkpoint.step_tag(step)


def _dist() -> Any:
    """``torch.distributed`` when torch is installed (the runtime works without it for heartbeats)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() else None


_CURRENT: Runtime | None = None


def current() -> Runtime:
    """The process's runtime (created on first use, which installs the signal handlers)."""
    global _CURRENT  # noqa: PLW0603 - one runtime per process, like torch.distributed's default group
    if _CURRENT is None:
        _CURRENT = Runtime()
    return _CURRENT
