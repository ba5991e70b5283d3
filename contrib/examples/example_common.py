"""What the two CPU examples (``image_cnn.py``, ``text_transformer.py``) share: how many CPUs
the run may use, the deterministic per-step sample stream, and the end-of-run summary line.

Not a package module: the examples import it from their own directory (``python
contrib/examples/image_cnn.py`` puts ``contrib/examples`` first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from wrapper import runtime


def fail(message: str) -> NoReturn:
    """Stop on bad input: one line naming the script and what is wrong, exit status 2."""
    sys.stderr.write(f"{Path(sys.argv[0]).name}: error: {message}\n")
    raise SystemExit(2)


def take_cpus(requested: int | None, local_world_size: int = 1) -> int:
    """The CPUs this run uses; with ``requested``, restrict the process to that many.

    ``requested`` (``--cpus N``): the first N CPUs of the affinity the process started with
    (``os.sched_setaffinity``; loader workers started later inherit it). More than it may use
    is an error naming both. Without it: the affinity's size, capped by Slurm's
    ``SLURM_CPUS_PER_TASK`` (srun already set the affinity to the task's CPUs where its
    task/affinity or cgroup plugin runs), shared by the ranks of this node when no Slurm
    count is given.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if requested is not None:
        if requested < 1:
            fail(f"--cpus: expected a positive number of CPUs, got {requested}")
        if requested > len(allowed):
            fail(
                f"--cpus {requested}: this process may use only {len(allowed)} CPU(s) ({allowed}); "
                "ask for fewer or start it with a wider affinity"
            )
        os.sched_setaffinity(0, allowed[:requested])
        return requested
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        return min(len(allowed), int(slurm))
    return max(1, len(allowed) // max(1, local_world_size))


def common_arguments(parser: argparse.ArgumentParser, batch: int) -> None:
    """``batch``: the default ``--batch`` of a plain run (only named in the help: under
    mosaic-run the plan's global batch is the batch, see :func:`batch_split`)."""
    """The options both examples take (the registry, wrapper/examples.py, builds them)."""
    parser.add_argument("--cpus", type=int, help="use the first N CPUs of this process's affinity")
    parser.add_argument(
        "--steps", type=int, default=100, help="optimizer steps (total, resumed runs included)"
    )
    parser.add_argument(
        "--batch",
        type=int,
        help=f"examples per optimizer step (default {batch}; under mosaic-run: the plan's)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the model, data order and augmentation")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the training step")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="also checkpoint every N steps")
    parser.add_argument("--loss-log", help="rank 0 appends {step, loss, world_size} per step")


def batch_split(rt: runtime.Runtime, batch: int | None, default: int) -> tuple[int, int, int]:
    """(micro-batch, accumulation steps, global batch) of this rank: mosaic-run's resolved plan,
    else ``--batch`` (default ``default``) in one micro-batch (a plain run has one rank). A
    ``--batch`` other than the plan's global batch is an error naming both."""
    if rt.plan is not None and rt.plan.is_resolved:
        micro, accum, global_batch = rt.plan.micro_batch, rt.plan.grad_accum, rt.plan.global_batch
        assert micro is not None and accum is not None and global_batch is not None
        if batch is not None and batch != global_batch:
            fail(
                f"--batch {batch}: mosaic-run's plan has global batch {global_batch} "
                "(give mosaic-run --global-batch, or drop --batch)"
            )
        return micro, accum, global_batch
    if rt.world_size > 1:
        fail("more than one rank needs a plan: run under mosaic-run --framework torch --global-batch N")
    size = default if batch is None else batch
    return size, 1, size


def check_checkpointing(rt: runtime.Runtime, every: int) -> None:
    if every and rt.checkpoint_dir is None:
        fail("--checkpoint-every: no MOSAIC_CHECKPOINT_DIR to write to; run under mosaic-run")


def end_of_step(
    args: argparse.Namespace,
    rt: runtime.Runtime,
    timer: Timer,
    done: int,
    loss: float,
    model: Any,
    optimizer: Any,
    save: Callable[[int, float], None] | None = None,
    **fields: Any,
) -> bool:
    """After optimizer step ``done``: loss log, heartbeat (the last one forced, so even a short
    run reports a rate), checkpoint. True when the run must stop (a checkpoint signal).

    ``save(step, loss)`` writes a checkpoint where the model is not a torch module with its
    optimizer (a DeepSpeed engine); by default ``Runtime.save_checkpoint`` (DCP) does."""
    if save is None:

        def save(step: int, loss: float) -> None:
            rt.save_checkpoint(step, model, optimizer, extra={"loss": loss})

    timer.step_done(done)
    log_loss(args.loss_log, rt.rank, done, loss, rt.world_size)
    rt.report(
        done,
        samples=done * timer.samples_per_step,
        force=done == args.steps,
        loss=loss,
        progress=done / args.steps,
        **fields,
    )
    if rt.should_checkpoint():
        if rt.checkpoint_dir is not None:  # a plain run just stops
            save(done, loss)
        return True
    if args.checkpoint_every and done % args.checkpoint_every == 0:
        save(done, loss)
    return False


def check_positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            fail(f"--{name.replace('_', '-')}: expected a positive integer, got {value}")


def stream_position(step: int, global_batch: int, rank_offset: int) -> int:
    """Position in the endless sample stream of example ``rank_offset`` of optimizer step ``step``."""
    return step * global_batch + rank_offset


class SampleStream:
    """The endless, seeded sample stream: position p is example ``perm_e[p mod n]`` of epoch
    ``e = p // n``, each epoch its own permutation. Depends only on the seed, never on the
    number of ranks or on where a run started, so a resumed run sees what an uninterrupted
    one would."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed
        self._perms: dict[int, np.ndarray] = {}

    def index(self, position: int) -> int:
        epoch = position // self.n
        perm = self._perms.get(epoch)
        if perm is None:
            if len(self._perms) > 4:
                self._perms.clear()
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perms[epoch] = perm
        return int(perm[position % self.n])


@dataclass
class Timer:
    """Throughput over the steps after the first of this run (the first carries start-up)."""

    samples_per_step: int
    first_end: float | None = None
    first_step: int = 0
    last_end: float | None = None
    last_step: int = 0

    def step_done(self, step: int) -> None:
        now = time.perf_counter()
        if self.first_end is None:
            self.first_end, self.first_step = now, step
        self.last_end, self.last_step = now, step

    def summary(self, **fields: object) -> dict[str, object]:
        record: dict[str, object] = {"event": "summary", **fields}
        steps = self.last_step - self.first_step
        seconds = (self.last_end or 0.0) - (self.first_end or 0.0)
        record["timed_steps"] = steps
        record["timed_s"] = round(seconds, 3)
        record["samples_per_s"] = (
            round(steps * self.samples_per_step / seconds, 3) if steps > 0 and seconds > 0 else None
        )
        return record


def print_summary(record: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def log_loss(path: str | None, rank: int, step: int, loss: float, world_size: int) -> None:
    if rank == 0 and path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "loss": loss, "world_size": world_size}) + "\n")
