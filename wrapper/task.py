"""The per-task shim: ``python -m wrapper.task COMMAND ...`` under srun (or the local launcher).

Sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ... from the ``SLURM_*``
variables of this task (:func:`wrapper.distenv.task_environment`) and replaces itself with
the training command, so signals and the exit status are the training's own.
"""

from __future__ import annotations

import os
import sys

from planner.core.errors import InputError
from wrapper.distenv import task_environment


def main(argv: list[str]) -> int:
    command = argv[1:] if argv and argv[0] == "--" else argv
    if not command:
        sys.stderr.write("mosaic-run task: no command given\n")
        return 2
    try:
        env = {**os.environ, **task_environment(os.environ)}
    except InputError as e:
        sys.stderr.write(f"mosaic-run task: error: {e}\n")
        return 2
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
