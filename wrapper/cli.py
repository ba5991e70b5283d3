"""``mosaic-run -- COMMAND ...``: run a job's training command.

With no plan for the job (no controller, or the job is not managed), the job runs
exactly as submitted: ``mosaic-run`` replaces itself with the command, so signals,
exit status and output are the command's own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mosaic-run",
        description="Run a training command as Mosaic planned it (as submitted when there is no plan).",
        usage="mosaic-run [-h] -- COMMAND [ARG ...]",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after --")
    return parser


def main(argv: Sequence[str] | None = None) -> int:  # returns only on error
    args = build_parser().parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("mosaic-run: error: no command given (usage: mosaic-run -- COMMAND [ARG ...])", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None:
        print(f"mosaic-run: error: command not found: {command[0]}", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(command[0], command)  # replaces this process: never returns


if __name__ == "__main__":
    sys.exit(main())
