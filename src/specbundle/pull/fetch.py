"""Fetch one file into the mirror: hash while streaming, verify, then rename into place.

Every byte is hashed as it arrives (sha256, plus the git blob sha1 for small non-LFS files), so
verification costs no second read. A download in flight lives in ``tmp/partial/<key>.part`` and
survives an interrupt: the next run re-hashes the part it already has and asks the source for
the rest (or starts over if the source ignores ranges). Verified digests of each commit are
journalled so a rerun skips files already in the store, including small non-LFS files whose
sha256 the hub does not declare.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specbundle._fsutil import (
    disk_error,
    fd_path,
    json_bytes,
    open_dir,
    open_file_at,
    refuse_link_at,
    write_at,
)
from specbundle._locks import LockTimeout, hold_at
from specbundle.digest import BLOCK_SIZE, is_sha256
from specbundle.errors import CorruptMirror, DigestMismatch, PullError
from specbundle.mirror import Mirror, model_dir_name
from specbundle.mirror.lease import Lease
from specbundle.pull.interface import (
    ModelSource,
    ProgressSink,
    RemoteFile,
    ResolvedRevision,
    WriteChunk,
)
from specbundle.record import FileEntry
from specbundle.strict import MalformedDocument, load_json_file, open_regular

__all__ = ["Cancelled", "FetchOutcome", "Journal", "fetch_file"]

_LOCK_TIMEOUT_S = 3600.0
#: Seconds between journal writes while files stream in.
_FLUSH_S = 0.5


@dataclass(frozen=True)
class FetchOutcome:
    """One file's entry and whether bytes moved for it."""

    entry: FileEntry
    status: Literal["downloaded", "resumed", "reused"]


class Journal:
    """Digests already verified for one (repo, commit), persisted across runs."""

    def __init__(self, mirror: Mirror, repo: str, commit: str | None) -> None:
        self._lock = threading.Lock()
        self._dirty = False
        self._flushed = -_FLUSH_S
        self._path: Path | None = None
        self._data: dict[str, dict[str, int | str]] = {}
        if commit is not None:
            self._root = mirror.root
            self._path = mirror.root / "journal" / model_dir_name(repo) / f"{commit}.json"
            try:
                data = load_json_file(self._path)
            except (OSError, MalformedDocument):
                data = {}  # a cache: a bad journal only costs re-downloads
            self._data = {k: v for k, v in data.items() if isinstance(v, dict)
                          and isinstance(v.get("size"), int)
                          and is_sha256(str(v.get("sha256")))} if isinstance(data, dict) else {}

    def get(self, path: str) -> tuple[int, str] | None:
        """(size, sha256) verified earlier for this path, if any."""
        d = self._data.get(path)
        return None if d is None else (int(d["size"]), str(d["sha256"]))

    def put(self, entry: FileEntry) -> None:
        """Remember a verified file; written atomically, at most every :data:`_FLUSH_S`.

        Rewriting the whole journal per file made a 30 000-file repo cost quadratic disk
        writes (gigabytes); a crash now costs at most that interval's files a re-download.
        """
        if self._path is None:
            return
        with self._lock:
            self._data[entry.path] = {"size": entry.size, "sha256": entry.sha256}
            self._dirty = True
            if time.monotonic() - self._flushed >= _FLUSH_S:
                self._write()

    def flush(self) -> None:
        """Write what :meth:`put` has not written yet (end of an artifact, or on failure)."""
        with self._lock:
            self._write()

    def _write(self) -> None:
        if self._path is None or not self._dirty:
            return
        rel = self._path.parent.relative_to(self._root).as_posix()
        with open_dir(self._root, rel) as dfd:  # never through a link planted in journal/
            write_at(dfd, self._path.name, json_bytes(self._data), self._path.parent)
        self._dirty, self._flushed = False, time.monotonic()


def _git_blob_hasher(size: int | None, blob_id: str | None) -> hashlib._Hash | None:
    if blob_id is None or size is None:
        return None
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {size}\0".encode())
    return h


def _reuse(mirror: Mirror, journal: Journal, f: RemoteFile) -> FileEntry | None:
    if f.lfs_sha256 and mirror.has_object(f.lfs_sha256, f.size):
        return FileEntry(f.path, mirror.object_path(f.lfs_sha256).stat().st_size, f.lfs_sha256,
                         f.lfs_sha256, None)
    known = journal.get(f.path)
    if known and (f.size is None or known[0] == f.size) and mirror.has_object(known[1], known[0]):
        return FileEntry(f.path, known[0], known[1], f.lfs_sha256, f.git_blob_id)
    return None


class Cancelled(PullError):
    """The pull was interrupted; partial files stay for the next run."""


def fetch_file(
    mirror: Mirror, source: ModelSource, resolved: ResolvedRevision, f: RemoteFile,
    journal: Journal, progress: ProgressSink | None = None, task: object = None,
    cancel: threading.Event | None = None, lease: Lease | None = None,
) -> FetchOutcome:
    """Make sure the verified bytes of ``f`` are in the store; return its entry.

    With a ``lease``, every digest is pinned before the store is asked for it, so a
    concurrent gc cannot remove an object between "it is there" and the commit.
    """
    known = journal.get(f.path)
    if lease is not None:
        lease.pin(f.lfs_sha256, known[1] if known else None)
    entry = _reuse(mirror, journal, f)
    if entry is not None:
        if progress is not None and task is not None:
            progress.advance(task, entry.size)
        return FetchOutcome(entry, "reused")
    key = hashlib.sha256(f"{resolved.repo}\0{resolved.commit}\0{f.path}".encode()).hexdigest()
    # the partial folder is opened no-follow and used through its fd: a link planted as
    # tmp/ or tmp/partial, or as the part file, is refused (never written through)
    with open_dir(mirror.root, "tmp/partial") as pfd:
        pdir = mirror.root / "tmp" / "partial"
        try:
            with hold_at(pfd, f"{key}.lock", pdir / f"{key}.lock", timeout=_LOCK_TIMEOUT_S):
                entry = _reuse(mirror, journal, f)  # a concurrent pull may have finished it
                if entry is not None:
                    return FetchOutcome(entry, "reused")
                refuse_link_at(pfd, f"{key}.part", pdir, folder=False)
                return _download(mirror, source, resolved, f, journal, (pfd, f"{key}.part"),
                                 progress, task, cancel or threading.Event(), lease)
        except LockTimeout as err:
            raise PullError(f"{f.path}: another pull holds its download lock") from err


def _download(
    mirror: Mirror, source: ModelSource, resolved: ResolvedRevision, f: RemoteFile,
    journal: Journal, at: tuple[int, str], progress: ProgressSink | None, task: object,
    cancel: threading.Event, lease: Lease | None,
) -> FetchOutcome:
    pfd, name = at
    part = fd_path(pfd, name)  # names the checked partial folder, whatever its path becomes
    shown = mirror.root / "tmp" / "partial" / name  # for messages
    offset = part.stat().st_size if part.exists() else 0
    if f.size is not None and offset > f.size:
        part.unlink()
        offset = 0
    state = _Hashing(f)
    if offset:
        try:
            old = open_regular(part)  # re-hash the bytes an interrupted run already wrote
        except MalformedDocument as err:
            raise CorruptMirror(f"staged download: {err}") from None
        with old:
            while chunk := old.read(BLOCK_SIZE):
                state.update(chunk)
    try:
        fh = os.fdopen(open_file_at(pfd, name, shown.parent), "ab", buffering=0)  # unbuffered:
    except OSError as err:  # a full disk fails in write, not close
        raise disk_error(err, shown, need=f.size, what="downloading into") from err
    with fh:

        def sink(ranged: bool) -> WriteChunk:
            if offset and not ranged:  # the source ignored the range: start the file over
                fh.seek(0)
                fh.truncate()
                state.reset()

            def write(chunk: bytes) -> None:
                if cancel.is_set():
                    raise Cancelled(f"{f.path}: interrupted")
                try:
                    if fh.write(chunk) != len(chunk):
                        raise OSError(28, "short write")
                except OSError as err:
                    left = None if f.size is None else f.size - state.size
                    raise disk_error(err, shown, need=left, what="downloading into") from err
                state.update(chunk)
                if progress is not None and task is not None:
                    progress.advance(task, len(chunk))

            return write

        source.fetch(resolved, f, offset, sink)
    digest = state.sha.hexdigest()
    problem = state.problem(f)
    if problem:
        part.unlink(missing_ok=True)
        raise DigestMismatch(f"{resolved.repo}@{resolved.commit}: {f.path}: {problem}; "
                             "nothing was mirrored")
    if lease is not None:
        lease.pin(digest)
    mirror.put_object(part, digest)
    entry = FileEntry(f.path, state.size, digest, f.lfs_sha256, f.git_blob_id)
    journal.put(entry)
    return FetchOutcome(entry, "resumed" if offset and state.resumed else "downloaded")


class _Hashing:
    """Running digests of one file's bytes."""

    def __init__(self, f: RemoteFile) -> None:
        self._f = f
        self.reset()
        self.resumed = True

    def reset(self) -> None:
        self.sha = hashlib.sha256()
        self.git = _git_blob_hasher(self._f.size, self._f.git_blob_id)
        self.size = 0
        self.resumed = False

    def update(self, chunk: bytes) -> None:
        self.sha.update(chunk)
        if self.git is not None:
            self.git.update(chunk)
        self.size += len(chunk)

    def problem(self, f: RemoteFile) -> str | None:
        digest = self.sha.hexdigest()
        if f.size is not None and self.size != f.size:
            return f"size {self.size} != {f.size} declared by the source"
        if f.lfs_sha256 and digest != f.lfs_sha256:
            return f"sha256 {digest} != LFS sha256 {f.lfs_sha256} declared by the hub"
        if self.git is not None and self.git.hexdigest() != f.git_blob_id:
            return f"git blob id {self.git.hexdigest()} != {f.git_blob_id} declared by the hub"
        return None
