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
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from specbundle import _faults, ids
from specbundle._fsutil import (
    canonical_json,
    disk_error,
    link_at,
    mkdir_at,
    open_dir,
    open_file_at,
    refuse_link_at,
    rename_at,
    rmtree_at,
    tmp_name,
    unlink_at,
    write_at,
)
from specbundle.digest import sha256_bytes
from specbundle.errors import CorruptMirror, MirrorError
from specbundle.record import ArtifactRecord, FileEntry

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
    with open_dir(mirror.root, f"{mdir.name}/blobs") as dfd:  # a planted link: refused
        for f in files:
            if not mirror.has_object(f.sha256, f.size):
                raise MirrorError(f"{mdir.name}: object for {f.path} ({f.sha256}) is missing")
            try:
                st = os.stat(f.sha256, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is None or not stat.S_ISLNK(st.st_mode):
                link_at(dfd, f.sha256, os.path.relpath(mirror.object_path(f.sha256), blobs))
    return blobs


def build_tree(mirror: Mirror, repo: str, commit: str, files: tuple[FileEntry, ...]) -> Path:
    """Create (or keep) the immutable tree for one selection; every object must be stored.

    Every folder is opened no-follow from the mirror root and the tree is staged, linked and
    renamed through those fds: a link planted as ``trees`` or as the tree is refused (exit 3).
    """
    mdir = mirror.model_dir(repo)
    final = mdir / TREES / tree_name(commit, files)
    rels = [safe_rel(f.path) for f in files]
    tdir = PurePosixPath(mdir.name, TREES)
    try:
        blobs = _link_blobs(mirror, mdir, files)
        with open_dir(mirror.root, tdir) as tfd:
            if refuse_link_at(tfd, final.name, final.parent, folder=True) \
                    and _complete(final, files):
                return final
            stage = mkdir_at(tfd, final.name, final.parent)
            try:
                for f, rel in zip(files, rels, strict=True):
                    with open_dir(mirror.root, tdir.joinpath(stage, *rel.parts[:-1])) as sub:
                        os.symlink(os.path.relpath(blobs / f.sha256, final / rel.parent),
                                   rel.name, dir_fd=sub)
                # an incomplete tree left by a foreign tool: set it aside first
                _discard_at(mirror, tfd, final.name)
                rename_at(tfd, stage, tfd, final.name)
                _faults.point("tree.renamed")
            except BaseException:
                rmtree_at(tfd, stage)
                raise
    except OSError as err:
        raise disk_error(err, final, what="building the model tree") from err
    return final


def _discard_at(mirror: Mirror, dfd: int, name: str) -> None:
    """Move ``name`` (in folder ``dfd``) out of sight into ``tmp/`` with one rename, then
    delete it there (a crash in between leaves a ``.trash.`` folder gc reclaims)."""
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    trash = tmp_name("trash", "x")  # .trash.<pid>.<token>.x
    with open_dir(mirror.root, "tmp") as tfd:
        rename_at(dfd, name, tfd, trash)
        rmtree_at(tfd, trash)


def _flip_link(dfd: int, name: str, target: str) -> bool:
    """Point ``name`` in folder ``dfd`` at ``target`` with one rename; True if it changed."""
    try:
        if os.readlink(name, dir_fd=dfd) == target:
            return False
    except (FileNotFoundError, OSError):
        pass  # missing, or not a link: replaced below (the caller set a folder aside)
    link_at(dfd, name, target)
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
    """Point ``snapshots/<commit>`` at the union tree of the live selections (None: removed).

    Acts through the ``snapshots`` folder's no-follow fd: a link planted as it (or above it)
    is refused (exit 3), never written through.
    """
    mdir = mirror.model_dir(repo)
    link = mdir / "snapshots" / _check_commit(commit)
    files = _union_files(selections)
    try:
        if not files:
            _drop_view(mirror, mdir, link.name)
            return None
        with open_dir(mirror.root, f"{mdir.name}/snapshots") as dfd:
            tree = build_tree(mirror, repo, commit, files)
            st = _lstat_at(dfd, link.name)
            if st is not None and not stat.S_ISLNK(st.st_mode):  # an older layout's folder
                _discard_at(mirror, dfd, link.name)
            if _flip_link(dfd, link.name, os.path.relpath(tree, link.parent)):
                _faults.point("view.flipped")
    except OSError as err:
        raise disk_error(err, link, what="publishing the Hugging Face view") from err
    return link


def _lstat_at(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _drop_view(mirror: Mirror, mdir: Path, name: str) -> None:
    """Remove the view link ``snapshots/<name>`` if there is one (a folder stays)."""
    try:
        with open_dir(mirror.root, f"{mdir.name}/snapshots", create=False) as dfd:
            st = _lstat_at(dfd, name)
            if st is not None and stat.S_ISLNK(st.st_mode):
                unlink_at(dfd, name)
    except FileNotFoundError:
        pass  # no snapshots folder: nothing to remove


def write_ref(mirror: Mirror, art: ArtifactRecord) -> None:
    """``refs/<branch-or-tag>`` lets ``HF_HUB_OFFLINE`` resolve a name; a sha needs no ref.

    Written through the ref folder's no-follow fd; a link, FIFO or folder planted as the ref
    is refused (exit 3), never written through.
    """
    if art.commit_kind == "git" and art.requested_revision != art.commit:
        rel = safe_rel(art.requested_revision)
        ref = mirror.model_dir(art.repo) / "refs" / rel
        parent = PurePosixPath(ref.parent.relative_to(mirror.root).as_posix())
        with open_dir(mirror.root, parent) as dfd:
            if refuse_link_at(dfd, ref.name, ref.parent, folder=False):
                fd = open_file_at(dfd, ref.name, ref.parent, os.O_RDONLY)
                try:
                    same = os.read(fd, 256) == art.commit.encode()
                finally:
                    os.close(fd)
                if same:
                    return
            write_at(dfd, ref.name, _check_commit(art.commit).encode(), ref.parent)
        _faults.point("ref.flipped")
