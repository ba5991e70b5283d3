"""One round at a time per spool: the controller's tick and ``mosaic resize`` exclude each other.

Both observe Slurm, decide, and requeue-hold / update / release jobs. Run concurrently
(a user's ``mosaic resize`` during the daemon's tick, or a second controller started by
mistake on the same spool) each would act on an observation the other is invalidating:
a job held by one could be released by the other with the wrong shape, and two rounds
would be open in the store at once. An exclusive ``flock`` on ``<spool>/round.lock``
serialises them. The kernel drops the lock when its holder dies (SIGKILL included), so a
crash never leaves the spool locked; the half-applied round it leaves is completed by
the next tick, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = "round.lock"
POLL_S = 0.05


class RoundBusy(Exception):
    """Another process holds the spool's round lock (a tick or a resize is in progress)."""


@contextmanager
def round_lock(
    spool_dir: Path,
    wait_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold the spool's round lock for the ``with`` block; :class:`RoundBusy` after ``wait_s``."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    path = spool_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = clock() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() >= deadline:
                    raise RoundBusy(
                        f"{path}: another controller tick or 'mosaic resize' is applying a round "
                        f"(waited {wait_s:g} s)"
                    ) from None
                sleep(POLL_S)
        # Who holds it, for an operator looking at a stuck spool (informational only: a full
        # spool must not stop the round here; the flock is the lock).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
