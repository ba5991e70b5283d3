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
    emulate.add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return emulate.main_from_args(args)
