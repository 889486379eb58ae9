"""Re-hash a mirrored artifact's snapshot tree and compare it with its signed manifest.

A snapshot is a tree of relative symlinks into ``blobs/`` -> ``objects/sha256``. Besides
missing, extra and changed content, a link that leaves the mirror's object store is refused
even when the bytes it reaches are identical: the store is what import verified, and a link
elsewhere is a file nobody checked will stay the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from specbundle.attest import OmsManifest
from specbundle.attest.oms import GIT_IGNORED_PATHS
from specbundle.digest import hash_files
from specbundle.mirror import Mirror
from specbundle.record import ArtifactRecord
from specbundle.verify.diff import Problem, diff_files

__all__ = ["check_snapshot"]


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
) -> tuple[list[Problem], int]:
    """Problems of one artifact's snapshot, and the number of bytes re-hashed."""
    who = art.role
    snap = mirror.snapshot_dir(art.repo, art.commit)
    if not snap.is_dir():
        return [Problem("missing-file", who, f"snapshot {snap} is missing")], 0
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
    digests = hash_files(unique, workers=workers, progress=progress) if unique else {}
    actual = {rel: digests[t] for rel, t in real.items()}
    unsafe = {p.subject.split(":", 1)[-1] for p in problems if p.kind == "unsafe-file"}
    expected = {k: v for k, v in manifest.digests().items() if k not in unsafe}
    problems += diff_files(who, expected, actual)
    return problems, sum(t.stat().st_size for t in unique)
