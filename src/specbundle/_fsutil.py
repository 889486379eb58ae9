"""Atomic file writes and canonical JSON: the two primitives every stage that persists uses.

Nothing written through here is ever visible half-done: bytes go to a temp file in the same
directory, are fsynced, then renamed over the target, and the directory is fsynced too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from specbundle import _faults
from specbundle.errors import CorruptMirror, DiskError

__all__ = ["atomic_open", "atomic_write_bytes", "atomic_write_json", "canonical_json",
           "disk_error", "fd_path", "fsync_dir", "json_bytes", "link_at", "mkdir_at", "move_in_at",
           "open_append", "open_dir", "open_file_at", "real_dir", "refuse_link_at",
           "remove_at", "rename_at", "rmtree_at", "tmp_name", "unlink_at", "write_at"]

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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_faults.register("fs.dir-opened", "fs.file-checked")


def _planted(where: Path, kind: str | None = None) -> CorruptMirror:
    kind = kind or ("a symbolic link" if where.is_symlink() else "not a folder")
    return CorruptMirror(f"refusing to write through {where}: it is {kind}",
                         hint="someone planted it in the mirror; remove it and rerun")


def _open_child(parent: int, part: str, where: Path, create: bool) -> int:
    """Open one component below ``parent`` (no-follow), creating it when missing."""
    for attempt in (0, 1):
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create or attempt:
                raise
            try:
                os.mkdir(part, 0o755, dir_fd=parent)
            except FileExistsError:
                pass  # created meanwhile: the open below checks what it is
            except OSError as err:
                raise disk_error(err, where, what="creating") from err
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _planted(where) from None
            raise disk_error(err, where, what="opening") from err
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def open_dir(root: Path, rel: str | PurePosixPath = "", *, create: bool = True) -> Iterator[int]:
    """A directory fd on ``root/rel`` for writing into a folder someone else may write.

    Every component below ``root`` is opened relative to the one above it with
    ``O_NOFOLLOW | O_DIRECTORY`` (created when missing and ``create`` is set), so it is a real
    directory, never a link or a file planted in a mirror's ``bundles/<name>/render`` (which
    would make a writer replace or delete a folder outside the mirror). Writers act on the
    final component through this fd (:func:`write_at`, :func:`rename_at`, :func:`unlink_at`):
    a folder swapped for a link after the check cannot redirect them, since the fd names the
    directory that was checked, not the path. ``root`` itself is the caller's (e.g. the mirror
    root the operator named).

    Raises:
        CorruptMirror: a component is a symbolic link or not a directory (exit 3).
        DiskError: a missing component cannot be created.
        FileNotFoundError: a component is missing and ``create`` is false.
    """
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise disk_error(err, root, what="opening") from err
    try:
        cur = root
        for part in PurePosixPath(rel).parts:
            if part in (".", "..", "/"):
                raise CorruptMirror(f"refusing to write through {root}/{rel}: unsafe component")
            cur = cur / part
            nxt = _open_child(fd, part, cur, create)
            os.close(fd)
            fd = nxt
        _faults.point("fs.dir-opened", cur)
        yield fd
    finally:
        os.close(fd)


def real_dir(root: Path, rel: str | PurePosixPath = "", *, create: bool = True) -> Path:
    """``root/rel`` checked (and created) as by :func:`open_dir`, as a path.

    For a caller that hands the folder to something that takes paths (a child process, a
    temp-file API); a writer that renames or deletes inside it uses :func:`open_dir`.
    """
    try:
        with open_dir(root, rel, create=create):
            pass
    except FileNotFoundError:
        if create:
            raise
    return root / rel


def tmp_name(name: str, suffix: str = "tmp") -> str:
    """A hidden sibling name for staging ``name`` that no other writer picks.

    The pid alone is not enough: two threads of one process (a library caller rendering two
    servers side by side) would share it and rename each other's temp file away.
    """
    return f".{name}.{os.getpid()}.{secrets.token_hex(6)}.{suffix}"


def link_at(dfd: int, name: str, target: str) -> None:
    """Make ``name`` in the folder ``dfd`` a symlink to ``target`` with one rename.

    The caller decides whether what is there now may be replaced; readers see the old link
    or the new one, never neither.
    """
    tmp = tmp_name(name)
    os.symlink(target, tmp, dir_fd=dfd)
    try:
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    os.fsync(dfd)


def write_at(dfd: int, name: str, data: bytes, where: Path, mode: int = 0o644) -> None:
    """Atomically replace ``name`` in the directory ``dfd`` (temp file, fsync, rename).

    ``where`` is the folder's path, for messages only. A disk failure leaves ``name`` as it
    was, removes the temp file and raises :class:`DiskError` naming the path.
    """
    tmp = tmp_name(name)
    created = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dfd)
        created = True
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        created = False
        os.fsync(dfd)
    except BaseException as err:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
        if isinstance(err, OSError):
            raise disk_error(err, where / name, need=len(data)) from err
        raise


def rename_at(src_dfd: int, src: str, dst_dfd: int, dst: str) -> None:
    """Rename ``src`` (in folder ``src_dfd``) over ``dst`` (in ``dst_dfd``), then flush both."""
    os.rename(src, dst, src_dir_fd=src_dfd, dst_dir_fd=dst_dfd)
    os.fsync(dst_dfd)
    if src_dfd != dst_dfd:
        os.fsync(src_dfd)


def unlink_at(dfd: int, name: str, *, missing_ok: bool = True) -> None:
    """Remove the file ``name`` from the folder ``dfd`` (never what a link there names)."""
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        if not missing_ok:
            raise


def refuse_link_at(dfd: int, name: str, where: Path, *, folder: bool) -> bool:
    """True if ``name`` exists in ``dfd``; refuses (exit 3) a link, or the wrong kind there.

    ``folder`` says what a writer about to replace ``name`` expects: a folder it swaps whole,
    or a regular file it rewrites. Checked through the folder's fd, never by following.
    """
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise _planted(where / name, "a symbolic link")
    if folder and not stat.S_ISDIR(st.st_mode):
        raise _planted(where / name, "not a folder")
    if not folder and not stat.S_ISREG(st.st_mode):
        raise _planted(where / name, "not a regular file")
    return True


def open_file_at(dfd: int, name: str, where: Path,
                 flags: int = os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode: int = 0o644) -> int:
    """An fd on the regular file ``name`` in the folder ``dfd``: never a link, FIFO or device.

    Opened non-blocking (a FIFO planted there cannot hang the writer), checked with ``fstat``,
    then switched back to blocking. ``where`` is the folder's path, for messages only.

    Raises:
        CorruptMirror: ``name`` is a link, a folder or not a regular file (exit 3).
        DiskError: it cannot be opened or created.
    """
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode,
                     dir_fd=dfd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
            refuse_link_at(dfd, name, where, folder=False)
            raise _planted(where / name, "not a regular file") from None
        raise disk_error(err, where / name, what="opening") from err
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _planted(where / name, "not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def move_in_at(src: Path, dfd: int, name: str, where: Path, *, mode: int = 0o444) -> bool:
    """Move the regular file ``src`` into the folder ``dfd`` as ``name`` (fsynced, ``mode``),
    unless ``name`` is there already (then ``src`` is removed); True if it moved.

    ``src`` is opened no-follow and non-blocking and must be a regular file; it is renamed to
    a private name in ``dfd`` first and only published as ``name`` if that is still the file
    that was checked. A link, FIFO or folder put in place of ``src`` (or swapped in after the
    check) is never chmodded, fsynced through or published.

    Raises:
        CorruptMirror: ``src`` or an existing ``name`` is not a regular file, or ``src`` was
            swapped while it was moved (exit 3).
    """
    try:
        have = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(have.st_mode):
            raise _planted(where / name, "not a regular file")
        src.unlink(missing_ok=True)  # the link itself, never what it names
        return False
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
            raise _planted(src, "not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _planted(src, "not a regular file")
        os.fsync(fd)
        os.fchmod(fd, mode)
        _faults.point("fs.file-checked", src)
        private = tmp_name(name, "in")
        os.rename(src, private, dst_dir_fd=dfd)
        moved = os.stat(private, dir_fd=dfd, follow_symlinks=False)
        if (moved.st_dev, moved.st_ino) != (st.st_dev, st.st_ino):
            unlink_at(dfd, private)
            raise _planted(src, "a file swapped while it was stored")
        os.rename(private, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
    finally:
        os.close(fd)
    return True


def fd_path(dfd: int, name: str) -> Path:
    """A path naming ``name`` in the folder ``dfd`` itself, for an API that takes paths.

    Resolved through ``/proc/self/fd`` (Linux), so it names the folder that was checked even
    if its path is swapped for a link later; only ``name`` itself is looked up anew (a writer
    creates it with ``O_EXCL`` or checks it with :func:`refuse_link_at`). Valid while ``dfd``
    is open.
    """
    return Path(f"/proc/self/fd/{dfd}") / name


def open_append(path: Path) -> int:
    """An append fd on the log file ``path``, through its folder's no-follow fd (created when
    missing): a link, FIFO or folder planted as the file or as its folder is refused (exit 3).
    The folder above it is the caller's (e.g. a run folder under the mirror's checked tmp/)."""
    with open_dir(path.parent.parent, path.parent.name) as dfd:
        return open_file_at(dfd, path.name, path.parent)


def mkdir_at(dfd: int, name: str, where: Path, mode: int = 0o755) -> str:
    """Create a fresh hidden staging folder beside ``name`` in ``dfd``; returns its name."""
    tmp = tmp_name(name)
    try:
        os.mkdir(tmp, mode, dir_fd=dfd)
    except OSError as err:
        raise disk_error(err, where / name, what="creating a staging folder for") from err
    return tmp


def rmtree_at(dfd: int, name: str) -> None:
    """Delete the folder ``name`` in ``dfd`` and what it holds, never following a link
    (a link there is unlinked, not its target emptied)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dfd)


def remove_at(root: Path, rel: str | PurePosixPath) -> None:
    """Delete ``root/rel`` (a folder and what it holds, or a file) through its parent's
    no-follow fd (:func:`open_dir`): a folder on the way swapped for a link is refused, and a
    link at ``rel`` is unlinked, never what it names emptied. Missing: nothing to do."""
    rel = PurePosixPath(rel)
    try:
        with open_dir(root, rel.parent, create=False) as dfd:
            rmtree_at(dfd, rel.name)
    except FileNotFoundError:
        pass


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


def json_bytes(value: Any, *, pretty: bool = True) -> bytes:
    """JSON as stored: pretty (sorted, indented, newline-terminated) for humans, or canonical."""
    if pretty:
        return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    return canonical_json(value)


def atomic_write_json(path: Path, value: Any, *, pretty: bool = True) -> None:
    """Write JSON atomically; pretty for humans, canonical when ``pretty`` is false."""
    atomic_write_bytes(path, json_bytes(value, pretty=pretty))
