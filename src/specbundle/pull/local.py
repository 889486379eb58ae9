"""Weights already on disk as a model source (``source: dir:<path>``).

The folder has no history, so the commit is derived from the content: the sha1 of the canonical
list of (path, size, sha256), marked ``commit_kind: content`` so nobody mistakes it for git.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from specbundle._fsutil import canonical_json
from specbundle.errors import SourceUnavailable
from specbundle.pull.interface import ModelSource, OpenSink, RemoteFile, ResolvedRevision
from specbundle.record import FileEntry
from specbundle.strict import MalformedDocument, open_regular

__all__ = ["DirSource", "content_commit"]

_CHUNK = 4 << 20


def content_commit(files: tuple[FileEntry, ...]) -> str:
    """A 40-hex id for a file set, stable across machines."""
    doc = [[f.path, f.size, f.sha256] for f in sorted(files, key=lambda f: f.path)]
    return hashlib.sha1(canonical_json(doc), usedforsecurity=False).hexdigest()


class DirSource(ModelSource):
    """Files of a local folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.endpoint = None

    def resolve(self, repo: str, revision: str) -> ResolvedRevision:
        """List regular files (symlinks and anything outside the folder are refused)."""
        if not self.root.is_dir():
            raise SourceUnavailable(f"{repo}: local source {self.root} is not a directory")
        files = []
        for p in sorted(self.root.rglob("*")):
            rel = p.relative_to(self.root).as_posix()
            if ".git" in p.relative_to(self.root).parts or p.is_dir():
                continue
            if p.is_symlink():
                raise SourceUnavailable(f"{repo}: {rel} is a symlink; copy the real file in")
            files.append(RemoteFile(path=rel, size=p.stat().st_size))
        if not files:
            raise SourceUnavailable(f"{repo}: local source {self.root} holds no files")
        return ResolvedRevision(repo, revision, None, "content", tuple(files))

    def fetch(self, resolved: ResolvedRevision, file: RemoteFile, offset: int,
              sink: OpenSink) -> None:
        """Copy the file's bytes, from ``offset`` when resuming."""
        path = self.root / file.path
        try:
            with open_regular(path, what=str(path)) as fh:  # never blocks on a FIFO
                fh.seek(offset)
                write = sink(True)
                while chunk := fh.read(_CHUNK):
                    write(chunk)
        except MalformedDocument as err:
            raise SourceUnavailable(f"{resolved.repo}: {err}") from None
        except OSError as err:
            raise SourceUnavailable(f"{resolved.repo}: cannot read {path}: {err.strerror}") \
                from err
