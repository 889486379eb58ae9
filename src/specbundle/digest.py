"""SHA-256 digests of files and streams, shared by pull, mirror, sign and verify.

Hashing is the floor of every stage's cost, so it reads in large blocks into a reused
buffer (``readinto``) and hashes in parallel across files where asked; ``hashlib``
releases the GIL on large updates, so threads scale across cores.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specbundle.errors import VerificationError
from specbundle.strict import MalformedDocument, open_regular

__all__ = ["BLOCK_SIZE", "SHA256_RE", "hash_file", "hash_files", "is_sha256", "sha256_bytes"]

BLOCK_SIZE = 4 * 1024 * 1024
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def is_sha256(value: str) -> bool:
    """True for a lowercase 64-hex string."""
    return bool(SHA256_RE.match(value))


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of an in-memory value."""
    return hashlib.sha256(data).hexdigest()


def hash_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """Hex sha256 of one file, read once in large blocks.

    Links are followed (a snapshot file is a link into the content store), but only a regular
    file is read: a FIFO or device planted in its place is refused at once, never hashed.

    Raises:
        VerificationError: ``path`` is not a regular file (exit 3, one line naming it).
    """
    h = hashlib.sha256()
    buf = bytearray(BLOCK_SIZE)
    view = memoryview(buf)
    try:
        fh = open_regular(path, follow=True)  # large readinto: unbuffered
    except MalformedDocument as err:
        raise VerificationError(str(err)) from None
    with fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            if progress is not None:
                progress(n)
    return h.hexdigest()


def hash_files(
    paths: Iterable[Path], *, workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[Path, str]:
    """Hash many files in parallel, largest first so the tail is short."""
    items = sorted(paths, key=lambda p: p.stat().st_size, reverse=True)
    n = workers or min(len(items), os.cpu_count() or 1) or 1
    if n <= 1:
        return {p: hash_file(p, progress) for p in items}
    with ThreadPoolExecutor(max_workers=n) as pool:
        return dict(zip(items, pool.map(lambda p: hash_file(p, progress), items), strict=True))
