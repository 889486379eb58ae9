"""Writer locks whose lock file is opened through a checked folder, never through a link.

Hand-written on ``flock(2)`` rather than taken from ``filelock``: filelock opens its lock file
by path, and the versions our dependency range allows (3.13 on) open it ``O_TRUNC`` and follow a
link, so a link planted as a mirror's ``.lock`` would make every writer truncate the file it
names. Here the lock file is opened relative to a no-follow folder fd with ``O_NOFOLLOW |
O_NONBLOCK`` and must be a regular file (a link, folder, FIFO or device is exit 3, and nothing
is written through it). ``flock`` is released by the kernel when the process dies, and each
acquisition opens its own file description, so threads of one process exclude each other too.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from specbundle._fsutil import disk_error, open_dir
from specbundle.errors import CorruptMirror

__all__ = ["LockTimeout", "hold", "hold_at"]

_POLL_S = 0.05


class LockTimeout(Exception):
    """Another holder kept the lock for the whole wait (the caller says who and what to do)."""


def _refused(where: Path) -> CorruptMirror:
    return CorruptMirror(f"refusing to use {where} as a lock file: it is not a regular file",
                         hint="someone planted it in the mirror; remove it and rerun")


def _open_lock(dfd: int, name: str, where: Path) -> int:
    """The lock file ``name`` in ``dfd``, created when missing; read-only where the folder is
    (``flock`` needs no write access, so a read-only mirror can still be locked)."""
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                         dir_fd=dfd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
                raise _refused(where) from None
            if flags & os.O_CREAT and err.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                continue  # an existing lock file on a read-only mirror: lock it read-only
            raise disk_error(err, where, what="opening the lock file") from err
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _refused(where)
        return fd
    raise disk_error(OSError(errno.EROFS, os.strerror(errno.EROFS)), where,
                     what="creating the lock file")


@contextlib.contextmanager
def hold_at(dfd: int, name: str, where: Path, *, timeout: float) -> Iterator[None]:
    """Hold the exclusive lock on ``name`` in the folder ``dfd`` (``where`` names it in
    messages); waits up to ``timeout`` seconds (0: one try).

    Raises:
        LockTimeout: another holder kept it for the whole wait.
        CorruptMirror: ``name`` is a link, folder, FIFO or device (exit 3).
        DiskError: it cannot be opened or created.
    """
    fd = _open_lock(dfd, name, where)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LockTimeout(str(where)) from None
                time.sleep(min(_POLL_S, left))
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def hold(root: Path, name: str, *, timeout: float) -> Iterator[None]:
    """:func:`hold_at` on ``root/name``; ``root`` is the operator's folder (the mirror root)
    and must exist."""
    with open_dir(root) as dfd, hold_at(dfd, name, root / name, timeout=timeout):
        yield
