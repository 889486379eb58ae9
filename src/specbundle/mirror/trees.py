"""Model trees: one immutable tree per file selection, plus the Hugging Face cache view.

Two bundles may pin the same ``repo@commit`` with different file selections (one allows the
pickle, one does not). Each selection gets its own tree, named by the commit and a digest of
its (path, sha256) list, so no bundle ever sees, scans or signs another bundle's files::

    models--org--name/trees/<commit>-<sel16>/…   -> ../../blobs/<sha256>   (per selection)
    models--org--name/snapshots/<commit>          -> ../trees/<commit>-<sel16>   (HF view)
    models--org--name/refs/<revision>             <commit>

``snapshots/<commit>`` is what ``HF_HUB_OFFLINE=1 HF_HUB_CACHE=<mirror>`` resolves: a
symlink to the tree of the union of every committed selection at that commit (a path two
selections disagree on is left out, so the view never serves bytes a bundle did not verify).
Trees are built beside their final name and renamed; the view and the refs are flipped by one
rename each, and only after the bundle record that needs them is committed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from specbundle import _faults, ids
from specbundle._fsutil import atomic_write_bytes, canonical_json, disk_error, fsync_dir, tmp_name
from specbundle.digest import sha256_bytes
from specbundle.errors import CorruptMirror, MirrorError
from specbundle.record import ArtifactRecord, FileEntry
from specbundle.strict import MalformedDocument, read_mirror_file

if TYPE_CHECKING:
    from specbundle.mirror.store import Mirror

__all__ = [
    "TREES", "build_tree", "publish_view", "safe_rel", "selection_id", "tree_name", "write_ref",
]

TREES = "trees"
_faults.register("tree.renamed", "view.flipped", "ref.flipped")


def safe_rel(path: str) -> PurePosixPath:
    """A relative path that stays inside its folder: :func:`specbundle.ids.check_rel_path`."""
    try:
        return PurePosixPath(ids.check_rel_path(path))
    except ValueError:
        raise CorruptMirror(f"refusing unsafe path inside a model tree: {path!r}") from None


def _check_commit(commit: str) -> str:
    """A commit id safe to use as a folder name: :func:`specbundle.ids.check_commit`."""
    try:
        return ids.check_commit(commit)
    except ValueError:
        raise CorruptMirror(f"not a commit id: {str(commit)[:80]!r}") from None


def selection_id(files: Iterable[FileEntry]) -> str:
    """16 hex of the sha256 of the sorted (path, sha256) list: names one file selection."""
    doc = sorted([f.path, f.sha256] for f in files)
    return sha256_bytes(canonical_json(doc))[:16]


def tree_name(commit: str, files: Iterable[FileEntry]) -> str:
    """Folder name of the tree holding exactly ``files`` at ``commit``."""
    return f"{_check_commit(commit)}-{selection_id(files)}"


def _complete(tree: Path, files: tuple[FileEntry, ...]) -> bool:
    want = {f.path for f in files}
    have = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_symlink()}
    return want == have and all((tree / p).exists() for p in want)


def _link_blobs(mirror: Mirror, mdir: Path, files: tuple[FileEntry, ...]) -> Path:
    blobs = mdir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for f in files:
        if not mirror.has_object(f.sha256, f.size):
            raise MirrorError(f"{mdir.name}: object for {f.path} ({f.sha256}) is missing")
        link = blobs / f.sha256
        if not link.is_symlink():
            tmp = blobs / tmp_name(f.sha256)
            tmp.symlink_to(os.path.relpath(mirror.object_path(f.sha256), blobs))
            tmp.replace(link)
    return blobs


def build_tree(mirror: Mirror, repo: str, commit: str, files: tuple[FileEntry, ...]) -> Path:
    """Create (or keep) the immutable tree for one selection; every object must be stored."""
    mdir = mirror.model_dir(repo)
    final = mdir / TREES / tree_name(commit, files)
    rels = [safe_rel(f.path) for f in files]
    try:
        blobs = _link_blobs(mirror, mdir, files)
        if final.is_dir() and _complete(final, files):
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    except OSError as err:
        raise disk_error(err, final, what="building the model tree") from err
    try:
        for f, rel in zip(files, rels, strict=True):
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(os.path.relpath(blobs / f.sha256, final / rel.parent))
        staging.chmod(0o755)
        if final.exists():  # an incomplete tree left by a foreign tool: set it aside first
            _discard(mirror, final)
        staging.replace(final)
        fsync_dir(final.parent)
        _faults.point("tree.renamed")
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise disk_error(err, final, what="building the model tree") from err
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _discard(mirror: Mirror, path: Path) -> None:
    """Move a folder out of sight with one rename, then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=".trash.", dir=mirror.tmp_dir))
    path.replace(trash / "x")
    shutil.rmtree(trash, ignore_errors=True)


def _flip_link(link: Path, target: str) -> bool:
    """Point ``link`` at ``target`` with one rename; True if it changed."""
    if link.is_symlink() and str(link.readlink()) == target:
        return False
    tmp = link.parent / tmp_name(link.name)
    tmp.symlink_to(target, target_is_directory=True)
    tmp.replace(link)
    fsync_dir(link.parent)
    return True


def _union_files(selections: Iterable[tuple[FileEntry, ...]]) -> tuple[FileEntry, ...]:
    """Every path any selection holds, except paths two selections disagree on."""
    seen: dict[str, FileEntry] = {}
    bad: set[str] = set()
    for files in selections:
        for f in files:
            old = seen.setdefault(f.path, f)
            if old.sha256 != f.sha256:
                bad.add(f.path)
    return tuple(sorted((f for p, f in seen.items() if p not in bad), key=lambda f: f.path))


def publish_view(mirror: Mirror, repo: str, commit: str,
                 selections: Iterable[tuple[FileEntry, ...]]) -> Path | None:
    """Point ``snapshots/<commit>`` at the union tree of the live selections (None: removed)."""
    mdir = mirror.model_dir(repo)
    link = mdir / "snapshots" / _check_commit(commit)
    files = _union_files(selections)
    try:
        if not files:
            if link.is_symlink():
                link.unlink()
            return None
        tree = build_tree(mirror, repo, commit, files)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() and not link.is_symlink():  # a snapshot folder from an older layout
            _discard(mirror, link)
        if _flip_link(link, os.path.relpath(tree, link.parent)):
            _faults.point("view.flipped")
    except OSError as err:
        raise disk_error(err, link, what="publishing the Hugging Face view") from err
    return link


def write_ref(mirror: Mirror, art: ArtifactRecord) -> None:
    """``refs/<branch-or-tag>`` lets ``HF_HUB_OFFLINE`` resolve a name; a sha needs no ref."""
    if art.commit_kind == "git" and art.requested_revision != art.commit:
        ref = mirror.model_dir(art.repo) / "refs" / safe_rel(art.requested_revision)
        try:
            if read_mirror_file(ref, max_bytes=256) == art.commit.encode():
                return
        except (MalformedDocument, OSError):
            pass  # absent, or not a regular file: replaced below
        atomic_write_bytes(ref, _check_commit(art.commit).encode())
        _faults.point("ref.flipped")
