"""The one place a Slurm command runs.

Every command gets an argv list (never a shell), its own session so that a timeout
kills the whole process group (ReFrame's rule: a hung ``squeue`` must not leave
children behind), and a timeout. Failures raise :class:`SlurmCommandError` carrying
the argv, exit code and stderr, so a log line says exactly what failed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.core.errors import MosaicError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0


class SlurmError(MosaicError):
    """Slurm could not be reached or refused a request."""


class SlurmCommandError(SlurmError):
    """A Slurm command failed: exit code (``None`` on timeout), argv and stderr."""

    def __init__(self, argv: Sequence[str], returncode: int | None, stderr: str, stdout: str = "") -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout
        what = "timed out" if returncode is None else f"exited {returncode}"
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else "(no stderr)"
        super().__init__(f"{' '.join(self.argv)}: {what}: {detail}")


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    input_text: str | None = None,
) -> Result:
    """Run ``argv`` and return its output; raise :class:`SlurmCommandError` on failure.

    ``env`` entries are added to this process's environment (e.g. ``SLURM_CONF``).
    With ``check=False`` a non-zero exit is returned, not raised (a timeout or a
    missing program always raises).
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    log.debug("run %s", " ".join(argv))
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
            start_new_session=True,
        )
    except OSError as e:
        raise SlurmCommandError(argv, None, f"cannot start: {e.strerror}") from e
    try:
        stdout, stderr = proc.communicate(input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        stderr = (stderr or "") + f"\n(killed after {timeout_s:g} s)"
        raise SlurmCommandError(argv, None, stderr, stdout) from None
    if check and proc.returncode != 0:
        raise SlurmCommandError(argv, proc.returncode, stderr, stdout)
    return Result(tuple(argv), proc.returncode, stdout, stderr)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
