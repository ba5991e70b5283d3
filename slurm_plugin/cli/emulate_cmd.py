"""``mosaic emulate``: an emulated training job (for demos and the live integration tests)."""

from __future__ import annotations

import argparse

from slurm_plugin import emulate


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "emulate",
        parents=[common],
        help="run an emulated training job inside a Slurm job (no GPU needed)",
        description="Advances progress at the job's speed, checkpoints on SIGUSR1 (and writes the "
        "checkpoint marker the controller waits for), resumes after a requeue, exits when done.",
    )
    p.add_argument("--duration-s", type=float, required=True, help="emulated run time at the requested GPUs")
    p.add_argument("--time-scale", type=float, default=1.0, help="emulated seconds per real second")
    p.add_argument("--scaling", choices=("linear", "none"), default="linear")
    p.add_argument("--requested-gpus", type=int, help="the GPU count --duration-s refers to")
    p.add_argument(
        "--exit-on-checkpoint", action="store_true", help="exit after the checkpoint (as mosaic-run does)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return emulate.main(
        args.duration_s, args.time_scale, args.scaling, args.requested_gpus, args.exit_on_checkpoint
    )
