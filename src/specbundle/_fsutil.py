"""Atomic file writes and canonical JSON: the two primitives every stage that persists uses.

Nothing written through here is ever visible half-done: bytes go to a temp file in the same
directory, are fsynced, then renamed over the target, and the directory is fsynced too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from specbundle.errors import CorruptMirror, DiskError

__all__ = ["atomic_open", "atomic_write_bytes", "atomic_write_json", "canonical_json",
           "disk_error", "fsync_dir", "real_dir"]

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def disk_error(err: OSError, path: Path, *, need: int | None = None,
               what: str = "writing") -> DiskError:
    """A one-line :class:`DiskError` naming the path (and the space needed, on a full disk)."""
    if isinstance(err, DiskError):
        return err
    if err.errno in _NO_SPACE or (err.errno is None and "short write" in str(err)):
        free = _free_bytes(path)
        need_s = f"{need} bytes needed" if need is not None else "more space needed"
        free_s = f", {free} free" if free is not None else ""
        return DiskError(f"no space left on the device {what} {path}: {need_s}{free_s}",
                         hint="free space on that filesystem (specbundle mirror gc) and rerun;"
                              " the previous state was kept")
    return DiskError(f"{what} {path} failed: {err.strerror or err}",
                     hint="the previous state was kept")


def real_dir(root: Path, rel: str | PurePosixPath = "", *, create: bool = True) -> Path:
    """``root/rel`` as a real directory, for writing into a folder someone else may write.

    Every component below ``root`` must be a directory and never a symbolic link (checked
    with ``lstat``, created when missing and ``create`` is set): a link or a file planted in a
    mirror's ``bundles/<name>/render`` (or anywhere on the way) would otherwise make a writer
    replace or delete a folder outside the mirror. ``root`` itself is the caller's (e.g. the
    mirror root the operator named). The one rule every writer into a mirror uses.

    Raises:
        CorruptMirror: a component is a symbolic link or not a directory (exit 3).
        DiskError: a missing component cannot be created.
    """
    cur = root
    for part in PurePosixPath(rel).parts:
        if part in (".", "..", "/"):
            raise CorruptMirror(f"refusing to write through {root}/{rel}: unsafe component")
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            if not create:
                return cur
            try:
                cur.mkdir(0o755)
            except FileExistsError:
                st = os.lstat(cur)  # created meanwhile: check what it is
            except OSError as err:
                raise disk_error(err, cur, what="creating") from err
            else:
                continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
            raise CorruptMirror(f"refusing to write through {cur}: it is {kind}",
                                hint="someone planted it in the mirror; remove it and rerun")
    return cur


def fsync_dir(path: Path) -> None:
    """Flush a directory entry so a rename inside it survives a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: Path, mode: int = 0o644, *, need: int | None = None) -> Iterator[IO[bytes]]:
    """Yield a binary file that replaces ``path`` only if the block completes.

    A disk failure leaves ``path`` as it was and raises :class:`DiskError` naming it.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise disk_error(err, path, need=need) from err
    tmp_path = Path(tmp)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        tmp_path.chmod(mode)
        tmp_path.replace(path)
        fsync_dir(path.parent)
    except OSError as err:
        tmp_path.unlink(missing_ok=True)
        raise disk_error(err, path, need=need) from err
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, mode, need=len(data)) as fh:
        fh.write(data)


def canonical_json(value: Any) -> bytes:
    """RFC 8785-style canonical JSON: sorted keys, no whitespace, UTF-8, no NaN.

    Hand-written because the values we sign contain only strings, integers, booleans,
    null, lists and objects (floats are carried as strings or integers), for which
    sorted-key compact ``json.dumps`` is exactly the JCS serialisation.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def atomic_write_json(path: Path, value: Any, *, pretty: bool = True) -> None:
    """Write JSON atomically; pretty for humans, canonical when ``pretty`` is false."""
    if pretty:
        data = (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    else:
        data = canonical_json(value)
    atomic_write_bytes(path, data)
