"""Writer leases: what a running writer has verified but not yet committed, so gc keeps it.

A writer (pull) takes a lease for its whole run: a file ``leases/<id>.lease`` on which it holds
an exclusive ``flock``. The kernel drops the flock when the process dies (even on ``kill -9``),
so a lease is live exactly while its owner runs; gc finds dead ones by taking their flock.
Before a writer relies on an object (reuses a stored one, or renames a verified download into
the store) it *pins* the digest into its lease under the mirror lock; gc runs entirely under
that lock and keeps every object a live lease pins, so the order "pin, then check or put" can
never lose an object to a concurrent gc. Hand-written on ``fcntl.flock`` because filelock
does not expose "is somebody else holding this" for another process's lock file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from specbundle._fsutil import disk_error, open_dir, open_file_at
from specbundle.digest import is_sha256
from specbundle.errors import CorruptMirror

if TYPE_CHECKING:
    from specbundle.mirror.store import Mirror

__all__ = ["LEASE_DIR", "Lease", "live_leases"]

LEASE_DIR = "leases"
# a pin is a 64-hex digest and a newline: room for a million objects in one writer's run
_MAX_LEASE_BYTES = 65 * 1_000_000


class Lease:
    """A live writer's claim on the objects it pinned; release it with :meth:`close`."""

    def __init__(self, mirror: Mirror, kind: str) -> None:
        self._mirror = mirror
        self._pinned: set[str] = set()
        self._mu = threading.Lock()
        self.id = f"{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        d = mirror.root / LEASE_DIR
        self.path = d / f"{self.id}.lease"
        with mirror.lock():  # gc (under the lock) never sees a lease file that is not yet held
            with open_dir(mirror.root, LEASE_DIR) as dfd:  # never through a planted link
                self._fd: int | None = open_file_at(dfd, self.path.name, d,
                                                    os.O_RDWR | os.O_CREAT | os.O_APPEND)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def pin(self, *digests: str | None) -> None:
        """Keep these objects from gc until the lease ends (takes the mirror lock briefly)."""
        new = sorted({d for d in digests if d and is_sha256(d)} - self._pinned)
        if not new or self._fd is None:
            return
        with self._mu, self._mirror.lock():
            data = "".join(f"{d}\n" for d in new).encode()
            try:
                if os.write(self._fd, data) != len(data):
                    raise OSError(28, "short write")
            except OSError as err:
                raise disk_error(err, self.path, need=len(data), what="pinning objects in") \
                    from err
            self._pinned.update(new)

    def close(self) -> None:
        """End the lease (idempotent): its pins no longer protect anything."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def live_leases(root: Path, *, reap: bool) -> tuple[int, set[str]]:
    """(number of live leases, digests they pin); call under the mirror lock.

    With ``reap`` the files of dead writers are removed, and so is anything in the lease folder
    that is not a regular file (a link, a FIFO): no writer made it, and opening it could hang
    gc or read another file. A live lease too large to be a writer's is refused, since gc
    cannot know what it pins.

    Raises:
        CorruptMirror: a live lease holds more than a writer ever writes.
    """
    pins: set[str] = set()
    live = 0
    for p in sorted((root / LEASE_DIR).glob("*.lease")):
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise disk_error(err, p, what="reading a writer lease at") from err
            if reap:
                p.unlink(missing_ok=True)
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                if reap:
                    p.unlink(missing_ok=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                live += 1
                pins.update(x for x in _read_pins(fd, p) if is_sha256(x))
                continue
            if reap:  # nobody holds it: its writer died
                p.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return live, pins


def _read_pins(fd: int, path: Path) -> list[str]:
    """The pinned digests of a live lease, read from the descriptor that was checked."""
    data = os.pread(fd, _MAX_LEASE_BYTES + 1, 0)
    if len(data) > _MAX_LEASE_BYTES:
        raise CorruptMirror(f"writer lease {path.name} is larger than {_MAX_LEASE_BYTES} bytes; "
                            "gc cannot tell what it pins")
    return data.decode("ascii", errors="replace").split()
