"""The staging area import and OCI pull share: one importer at a time, and a disk that
refuses a write leaves no staged bytes behind (their space is what the rerun needs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specbundle._fsutil import disk_error, remove_at
from specbundle._locks import LockTimeout, hold
from specbundle.errors import MirrorError
from specbundle.mirror import Mirror

__all__ = ["discard_on_disk_error", "staging_lock"]

_STAGING_TIMEOUT_S = 3600.0


@contextmanager
def discard_on_disk_error(staging: Mirror, need: int) -> Iterator[None]:
    """A write into the staging area that the disk refuses removes the whole staging (its
    space is what the rerun needs) and names the path and the bytes needed (exit 6)."""
    try:
        yield
    except OSError as err:
        remove_at(staging.root.parent, staging.root.name)  # its own folder, never a link
        where = Path(err.filename) if isinstance(err.filename, str) else staging.root
        raise disk_error(err, where, need=need, what="staging into") from err


@contextmanager
def staging_lock(mirror: Mirror) -> Iterator[None]:
    """Held while staging into ``mirror``'s ``tmp/``: one importer (transfer set or OCI pull)
    at a time; the mirror lock is taken inside it only to commit."""
    try:
        with hold(mirror.root, ".import.lock", timeout=_STAGING_TIMEOUT_S):
            yield
    except LockTimeout as err:
        raise MirrorError(f"another import holds {mirror.tmp_dir}") from err
