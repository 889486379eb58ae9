"""Digests that verify's own code computed while a file was written: import's single pass.

Import copies every object into a staging mirror and must then verify it; reading 100 GB
twice doubles the time. Instead the staging copy is written through :func:`write_hashed`, which
hashes exactly the bytes it writes, and :func:`~specbundle.verify.verify_bundle` accepts those
records in place of re-reading. A :class:`HashedFile` can only come from this module (a token
guards the constructor, as for ``VerifiedBundle``), so a caller cannot vouch for a digest it
did not compute here; and it is bound to the file's inode, size and mtime, so a file swapped
or rewritten after hashing no longer matches and is simply re-hashed.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from specbundle.digest import hash_file

__all__ = ["HashedFile", "hash_existing", "proven_digest", "write_hashed"]

_TOKEN = object()
_WRITES_IN_FLIGHT = 2  # blocks queued for the writer thread: bounded memory, full overlap
FileId = tuple[int, int]


@dataclass(frozen=True)
class HashedFile:
    """The sha256 of one file's bytes, and the identity of the file they were read from."""

    sha256: str
    size: int
    dev: int
    ino: int
    mtime_ns: int
    _token: object = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _TOKEN:
            raise TypeError("HashedFile is only created by specbundle.verify.hashed")

    @property
    def file_id(self) -> FileId:
        """(device, inode): survives renames within the filesystem, nothing else."""
        return self.dev, self.ino

    def matches(self, st: os.stat_result) -> bool:
        """True if ``st`` is the same, unmodified file this digest was computed over."""
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == (
            self.dev, self.ino, self.size, self.mtime_ns)


def _record(sha256: str, size: int, st: os.stat_result) -> HashedFile:
    return HashedFile(sha256, size, st.st_dev, st.st_ino, st.st_mtime_ns, _TOKEN)


def write_hashed(blocks: Iterable[bytes], dest: Path) -> HashedFile:
    """Write ``blocks`` to a new file ``dest`` (fsynced) and hash those very bytes.

    Any old ``dest`` is unlinked first and the file created exclusively, so the bytes cannot
    land in an inode shared with another path (a hard link planted in the staging area).
    One writer thread writes each block while this thread hashes that same immutable
    ``bytes`` object and reads the next (hashlib and file I/O release the GIL), so the copy
    costs about max(hash, write) instead of their sum.
    """
    dest.unlink(missing_ok=True)
    h, n = hashlib.sha256(), 0
    with dest.open("xb") as fh, ThreadPoolExecutor(1, thread_name_prefix="write-hashed") as pool:
        pending: deque[Future[int]] = deque()
        for block in blocks:
            data = block if type(block) is bytes else bytes(block)  # immutable while queued
            pending.append(pool.submit(fh.write, data))
            h.update(data)
            n += len(data)
            while len(pending) >= _WRITES_IN_FLIGHT:
                pending.popleft().result()
        while pending:
            pending.popleft().result()
        fh.flush()
        os.fsync(fh.fileno())
        st = os.fstat(fh.fileno())
    return _record(h.hexdigest(), n, st)


def hash_existing(path: Path, progress: Callable[[int], None] | None = None) -> HashedFile:
    """Hash a file already on disk (e.g. staged by an interrupted run) into a record.

    The identity is taken before reading, so a write during the read leaves a stale mtime
    and the record will not match the file afterwards.
    """
    st = path.stat()
    return _record(hash_file(path, progress), st.st_size, st)


def proven_digest(path: Path, proven: Mapping[FileId, HashedFile]) -> str | None:
    """The digest recorded for ``path`` if it is still that exact file, else None."""
    st = path.stat()
    rec = proven.get((st.st_dev, st.st_ino))
    return rec.sha256 if rec is not None and rec.matches(st) else None
