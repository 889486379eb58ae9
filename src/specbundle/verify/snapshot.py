"""Re-hash a mirrored artifact's snapshot tree and compare it with its signed manifest.

A snapshot is a tree of relative symlinks into ``blobs/`` -> ``objects/sha256``. Besides
missing, extra and changed content, a link that leaves the mirror's object store is refused
even when the bytes it reaches are identical: the store is what import verified, and a link
elsewhere is a file nobody checked will stay the same. Files the caller wrote through
:func:`~specbundle.verify.hashed.write_hashed` (import's staging copy) are not read again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from specbundle.attest import OmsManifest
from specbundle.attest.oms import GIT_IGNORED_PATHS
from specbundle.digest import hash_files
from specbundle.mirror import Mirror
from specbundle.record import ArtifactRecord
from specbundle.verify.diff import Problem, diff_files
from specbundle.verify.hashed import FileId, HashedFile, proven_digest

__all__ = ["SnapshotDigests", "check_snapshot"]


class SnapshotDigests:
    """Digests of store objects for one verification: each object is read at most once.

    An object shared by target and draft is hashed once; one the caller wrote through
    :func:`~specbundle.verify.hashed.write_hashed` is not read at all while it is still the
    very inode, size and mtime its record was computed over.
    """

    def __init__(self, proven: Mapping[FileId, HashedFile]) -> None:
        self.proven = proven
        self.known: dict[Path, str] = {}
        self.on_write: set[Path] = set()

    def resolve(self, paths: set[Path], workers: int | None,
                progress: Callable[[int], None] | None) -> dict[Path, str]:
        """Digest of each path, hashing only those neither known nor proven."""
        for t in paths - set(self.known) if self.proven else ():
            if (d := proven_digest(t, self.proven)) is not None:
                self.known[t] = d
                self.on_write.add(t)
        rehash = paths - set(self.known)
        if rehash:
            self.known |= hash_files(rehash, workers=workers, progress=progress)
        return {t: self.known[t] for t in paths}


def _walk(snap: Path, who: str) -> tuple[dict[str, Path], list[Problem]]:
    files: dict[str, Path] = {}
    problems: list[Problem] = []
    for dirpath, dirnames, filenames in os.walk(snap):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            rel = p.relative_to(snap).as_posix()
            if any(rel == g or rel.startswith(g + "/") for g in GIT_IGNORED_PATHS):
                continue
            if p.is_symlink() or p.is_file():
                if p.is_symlink() and p.is_dir():
                    problems.append(Problem("unsafe-file", f"{who}:{rel}", "symlinked directory"))
                elif p.exists():
                    files[rel] = p
                else:
                    problems.append(Problem("unsafe-file", f"{who}:{rel}", "dangling symlink"))
            elif not p.is_dir():
                problems.append(Problem("unsafe-file", f"{who}:{rel}", "not a regular file"))
    return files, problems


def check_snapshot(
    mirror: Mirror, art: ArtifactRecord, manifest: OmsManifest, *,
    workers: int | None = None, progress: Callable[[int], None] | None = None,
    digests: SnapshotDigests | None = None,
) -> tuple[list[Problem], int, int]:
    """Problems of one artifact's snapshot, bytes checked, and how many were hashed on write."""
    who = art.role
    snap = mirror.artifact_dir(art)
    if not snap.is_dir():
        return [Problem("missing-file", who, f"snapshot {snap} is missing")], 0, 0
    files, problems = _walk(snap, who)
    store = (mirror.root / "objects" / "sha256").resolve()
    real: dict[str, Path] = {}
    for rel, p in files.items():
        target = p.resolve()
        if not target.is_relative_to(store):
            problems.append(Problem("unsafe-file", f"{who}:{rel}",
                                    "resolves outside the mirror object store",
                                    "objects/sha256/…", str(target)))
            continue
        real[rel] = target
    unique = set(real.values())
    digests = digests or SnapshotDigests({})
    found = digests.resolve(unique, workers, progress)
    actual = {rel: found[t] for rel, t in real.items()}
    unsafe = {p.subject.split(":", 1)[-1] for p in problems if p.kind == "unsafe-file"}
    expected = {k: v for k, v in manifest.digests().items() if k not in unsafe}
    problems += diff_files(who, expected, actual)
    return (problems, sum(t.stat().st_size for t in unique),
            sum(t.stat().st_size for t in unique & digests.on_write))
