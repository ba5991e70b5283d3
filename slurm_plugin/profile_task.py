"""The first process of a profiling run under ``srun`` (``mosaic profile``): pin, then exec the job.

``python -m slurm_plugin.profile_task --cpus C [--local-ranks] -- COMMAND...``

* ``--cpus C``: when the step may run on more CPUs than the ``C`` it asked for (a cluster
  with ``TaskPlugin=task/none``, such as Mosaic's test cluster, binds nothing), restrict
  this process, and so the job it becomes, to the first ``C`` of them
  (``os.sched_setaffinity``, inherited by every child). Where Slurm bound the step to its
  CPUs already, the mask is left as Slurm set it. Asking for more CPUs than the step may use
  is refused (exit 2): the run would not measure what it claims.
* ``--local-ranks``: a plan sample runs its ranks as processes of this one-task step
  (``mosaic-run`` starts them locally from the profiler's plan file), so the Slurm job
  variables that would make ``mosaic-run`` launch with ``srun`` again are removed.

Kept free of Mosaic imports so that it starts fast on the node.
"""

from __future__ import annotations

import os
import sys

LOCAL_RANKS_DROP = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_GPUS")


def _usage(message: str) -> int:
    sys.stderr.write(f"mosaic profile task: {message}\n")
    return 2


def main(argv: list[str]) -> int:
    if "--" not in argv:
        return _usage("usage: --cpus C [--local-ranks] -- COMMAND...")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    if not command or "--cpus" not in options:
        return _usage("usage: --cpus C [--local-ranks] -- COMMAND...")
    try:
        cpus = int(options[options.index("--cpus") + 1])
    except (IndexError, ValueError):
        return _usage("--cpus needs a positive integer")
    allowed = sorted(os.sched_getaffinity(0))
    if cpus < 1 or cpus > len(allowed):
        return _usage(
            f"--cpus {cpus}: this step may use {len(allowed)} CPU(s) "
            f"({','.join(map(str, allowed))}) on {os.uname().nodename}"
        )
    if len(allowed) > cpus:
        os.sched_setaffinity(0, allowed[:cpus])
    if "--local-ranks" in options:
        for name in LOCAL_RANKS_DROP:
            os.environ.pop(name, None)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        return _usage(f"cannot run {command[0]}: {e.strerror}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
