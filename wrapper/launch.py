"""Start the ranks and watch them: signal forwarding, the grace period, failure handling.

Two ways to start one process per worker, both through the task shim (:mod:`wrapper.task`):

* ``srun`` inside a Slurm allocation (argv from :func:`wrapper.render.srun_argv`); srun
  forwards the signals it receives to every task.
* locally, one child per rank with the ``SLURM_*`` variables srun would set (tests, a
  single node without Slurm). Each rank gets its own process group so a kill reaches the
  rank and whatever it started.

Whichever started them, :class:`Supervisor` forwards the checkpoint signals (USR1, TERM) it
receives, kills whatever still runs ``grace_s`` after the first one (a rank that ignores
the signal or hangs while saving: its checkpoint stays incomplete and is never loaded), and
stops the others at once when one rank fails, so no rank waits forever in a collective.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from wrapper.status import done_marker_name

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
PR_SET_PDEATHSIG = 1  # linux/prctl.h
TASK_SHIM = (sys.executable, "-m", "wrapper.task", "--")


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick), for the rendezvous of rank 0."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In a local rank, before exec: get SIGKILL when mosaic-run dies, so no rank is ever orphaned."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def local_task_environments(workers: int, job_id: str, base: Mapping[str, str]) -> list[dict[str, str]]:
    """The srun variables of each local rank (one node, rank 0 the launch node)."""
    return [
        {
            **base,
            "SLURM_JOB_ID": job_id,
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "SLURM_NODEID": "0",
            "SLURM_NTASKS": str(workers),
            "SLURM_NTASKS_PER_NODE": str(workers),
            "SLURM_LAUNCH_NODE_IPADDR": base.get("MOSAIC_MASTER_ADDR", "127.0.0.1"),
        }
        for rank in range(workers)
    ]


def start_local(
    command: Sequence[str], workers: int, job_id: str, env: Mapping[str, str], output: IO[bytes] | None = None
) -> list[subprocess.Popen[bytes]]:
    """One process per rank, each in its own session (process group)."""
    return [
        subprocess.Popen(
            [*TASK_SHIM, *command],
            env=rank_env,
            start_new_session=True,
            stdout=output,
            stderr=output,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, safe before exec
        )
        for rank_env in local_task_environments(workers, job_id, env)
    ]


def start_srun(argv: Sequence[str], env: Mapping[str, str]) -> list[subprocess.Popen[bytes]]:
    """srun itself: it starts the tasks and forwards our signals to them."""
    return [subprocess.Popen(list(argv), env=dict(env))]


@dataclass
class Outcome:
    """How the ranks ended."""

    returncode: int
    stop_signal: str | None = None
    killed: list[int] = field(default_factory=list)  # ranks (local) or 0 (srun) killed after the grace
    failed_rank: int | None = None
    done_ranks: list[int] = field(default_factory=list)  # died after declaring their work done


class Supervisor:
    """Waits for the ranks, forwarding stop signals and enforcing the grace period."""

    def __init__(
        self,
        grace_s: float,
        srun: bool = False,
        poll_s: float = 0.05,
        done_dir: Path | None = None,
        world_size: int = 1,
    ) -> None:
        self.grace_s = grace_s
        self.srun = srun
        self.poll_s = poll_s
        self.done_dir = done_dir
        self.world_size = world_size
        self._pending: list[int] = []

    def _declared_done(self, proc_index: int) -> bool:
        """Did the rank(s) behind this process say their work is done (``Runtime.done``)?

        A local process is one rank; srun stands for all of them. A rank that dies after
        saying so (gloo's threads can abort interpreter teardown: SIGABRT) finished its work.
        """
        if self.done_dir is None:
            return False
        ranks = range(self.world_size) if self.srun else (proc_index,)
        return all((self.done_dir / done_marker_name(rank)).exists() for rank in ranks)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._pending.append(signum)

    def run(self, procs: Sequence[subprocess.Popen[bytes]]) -> Outcome:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        try:
            return self._wait(procs)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _wait(self, procs: Sequence[subprocess.Popen[bytes]]) -> Outcome:
        outcome = Outcome(returncode=0)
        deadline: float | None = None
        while True:
            while self._pending:
                signum = self._pending.pop(0)
                if outcome.stop_signal is None:
                    outcome.stop_signal = signal.Signals(signum).name
                    deadline = time.monotonic() + self.grace_s
                    log.info(
                        "%s received: forwarding to %d process(es), grace %.0f s",
                        outcome.stop_signal,
                        len(procs),
                        self.grace_s,
                    )
                for proc in procs:
                    self._send(proc, signum)
            codes = [proc.poll() for proc in procs]
            if all(code is not None for code in codes):
                break
            failed = next(
                (k for k, code in enumerate(codes) if code not in (None, 0) and k not in outcome.done_ranks),
                None,
            )
            if failed is not None and self._declared_done(failed):
                log.warning(
                    "rank %d exited with %s after its work was done and flushed: counted as success",
                    failed,
                    codes[failed],
                )
                outcome.done_ranks.append(failed)
                failed = None
            if failed is not None and outcome.failed_rank is None:
                outcome.failed_rank = failed
                log.warning("rank %d exited with %s: stopping the others", failed, codes[failed])
                for proc in procs:
                    if proc.poll() is None:
                        self._kill(proc)
            if deadline is not None and time.monotonic() >= deadline:
                for k, proc in enumerate(procs):
                    if proc.poll() is None:
                        log.warning(
                            "rank %d still running %.0f s after %s: killing it",
                            k,
                            self.grace_s,
                            outcome.stop_signal,
                        )
                        outcome.killed.append(k)
                        self._kill(proc)
                deadline = None
            time.sleep(self.poll_s)
        outcome.returncode = _combined(procs, outcome.failed_rank, outcome.done_ranks)
        return outcome

    def _send(self, proc: subprocess.Popen[bytes], signum: int) -> None:
        if proc.poll() is not None:
            return
        try:
            if self.srun:
                os.kill(proc.pid, signum)  # srun forwards it to every task of the step
            else:
                os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            if self.srun:
                # Two SIGINTs within a second make srun terminate the whole step (srun(1)).
                os.kill(proc.pid, signal.SIGINT)
                time.sleep(0.1)
                os.kill(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _combined(
    procs: Sequence[subprocess.Popen[bytes]], failed_rank: int | None, done: Sequence[int] = ()
) -> int:
    """The job's status: 0 when every rank succeeded (or died after its work was done), else
    the first failure's (128+N for signal N)."""
    codes: list[int] = [0 if k in done else int(proc.returncode or 0) for k, proc in enumerate(procs)]
    order = [failed_rank] if failed_rank is not None else []
    for k in [*order, *range(len(codes))]:
        code: int = codes[k]
        if code:
            return 128 - code if code < 0 else code
    return 0
