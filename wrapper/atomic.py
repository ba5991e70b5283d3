"""The one atomic file write of Mosaic, shared by the job side and the controller's side.

:func:`write_atomic` writes a temporary file in the target's directory, flushes and fsyncs
it, then ``os.replace``\\ s it over the target: a reader at any moment sees the old whole
file or the new whole file, never a part. On any failure before the rename the temporary
file is removed and the old file is left as it was. A process killed outright (``SIGKILL``,
a lost node) can leave a temporary file, named ``.<name>.<random>.tmp`` next to the target;
readers never open it, and a writer may sweep ``.<name>.*`` (the plan files' writer does).

It lives in :mod:`wrapper` because that is the lowest package that does I/O and that every
other one may import (``tests/test_boundaries.py``: the job side imports only ``planner``,
which does no I/O; ``slurm_plugin`` imports ``wrapper``). It imports nothing of Mosaic's.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

_ATTEMPTS = 100


def write_atomic(
    path: str | Path,
    content: str | bytes,
    *,
    mode: int | None = None,
    parents: bool = True,
    sync_dir: bool = False,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Replace ``path`` with ``content`` (``str``: written as UTF-8) so that readers see the
    old file or the new one.

    ``mode``: the new file's permission bits, exactly (the umask is not applied); ``None``:
    those ``open()`` would give a new file (``0o666`` less the umask). ``parents``: create
    missing parent directories first (``False``: a missing directory is an error, e.g. for a
    checkpoint's marker, which must not create the checkpoint it marks). ``sync_dir``: also
    fsync the directory after the rename, so that the new name itself survives a power loss
    (a checkpoint's complete-marker). ``before_replace``: called once the temporary file is
    written and fsynced, just before the rename (a test's crash point).
    """
    p = Path(path)
    if parents:
        p.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8") if isinstance(content, str) else content
    fd, tmp = _create_temporary(p)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(p.parent)


def publish_dir(built: str | Path, target: str | Path) -> None:
    """Rename the finished directory ``built`` to ``target`` (which must not exist) and fsync
    the parent: readers see no ``target`` or the whole of it. ``built`` must be on the same
    file system, e.g. made beside ``target``'s parent (a sweep's cell)."""
    final = Path(target)
    os.replace(built, final)
    fsync_dir(final.parent)


def fsync_dir(directory: str | Path) -> None:
    """fsync a directory, making the names created or renamed in it durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temporary(target: Path) -> tuple[int, Path]:
    """A new, empty file ``.<name>.<random>.tmp`` beside ``target``, opened for writing."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(_ATTEMPTS):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{target}: no free temporary file name beside it after {_ATTEMPTS} tries")
