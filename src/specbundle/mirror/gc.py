"""Garbage collection: remove what no committed bundle and no live writer needs.

Runs entirely under the mirror lock. Live = every object a bundle's current signed version
(and an admitted one) or its working record references, plus every digest a live writer's
lease pins (:mod:`.lease`: pull, export); gc refuses to run at all when a record or the
current manifest is unreadable, because it could not know what that bundle keeps alive.
Trees of dead selections go, the HF views are rebuilt from the live selections, refs to dead
commits and the journals of dead commits go, and ``tmp/`` is reclaimed: pull's partial
downloads when no writer is live, an importer's staging when no importer holds the staging
lock, anything else once it is older than :data:`TMP_GRACE_S`.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specbundle import _faults
from specbundle._fsutil import open_dir, unlink_at
from specbundle._locks import LockTimeout, hold
from specbundle.errors import CorruptMirror, MirrorError, VerificationError
from specbundle.mirror import trees
from specbundle.mirror.lease import live_leases
from specbundle.record import BundleRecord, FileEntry
from specbundle.strict import MalformedDocument, read_mirror_file

if TYPE_CHECKING:
    from specbundle.mirror.store import Mirror

__all__ = ["TMP_GRACE_S", "GcResult", "collect", "reclaim_partials"]

TMP_GRACE_S = 3600.0
_faults.register("gc.object-removed", "gc.tree-removed", "gc.view-rebuilt", "gc.objects-listed")


@dataclass(frozen=True)
class GcResult:
    """What garbage collection removed (or would remove, in a dry run)."""

    removed_objects: tuple[str, ...]
    removed_snapshots: tuple[str, ...]
    freed_bytes: int
    kept_objects: int
    dry_run: bool
    removed_tmp: tuple[str, ...] = ()
    live_writers: int = 0


def _records(mirror: Mirror) -> list[BundleRecord]:
    """Every record whose bytes stay: each bundle's working copy and its signed versions
    (the current one, an admitted one). The signed version is the truth: a re-pull that moved
    the working copy, or an import killed between the ``current`` flip and the working-copy
    update, must not let gc delete what the current version names."""
    from specbundle.mirror import versions  # versions imports the store, which imports gc

    out = []
    for name in mirror.bundle_names():
        try:
            if (mirror.bundle_dir(name) / "bundle.json").exists():
                out.append(mirror.load_bundle(name))
            out += versions.live_records(mirror, name)
        except (MirrorError, VerificationError) as err:
            raise CorruptMirror(f"gc refused: {err.message}",
                                hint="fix or remove that bundle first; gc cannot tell what it "
                                     "keeps alive") from None
    return out


def _names(mirror: Mirror, rel: str) -> list[str]:
    """The entries of the mirror folder ``rel`` (checked as by ``open_dir``), sorted."""
    try:
        with open_dir(mirror.root, rel, create=False) as dfd, os.scandir(dfd) as it:
            return sorted(e.name for e in it)
    except FileNotFoundError:
        return []


def _newest_mtime(p: Path) -> float:
    try:
        newest = p.lstat().st_mtime
    except FileNotFoundError:
        return 0.0
    if p.is_dir() and not p.is_symlink():
        for q in p.rglob("*"):
            try:
                newest = max(newest, q.lstat().st_mtime)
            except FileNotFoundError:
                continue
    return newest


def _remove(mirror: Mirror, p: Path) -> None:
    """Remove ``p`` (a file, link or folder inside the mirror) through its folder's checked fd:
    a parent swapped for a link makes gc refuse, never delete what the link names."""
    rel = p.parent.relative_to(mirror.root)
    with open_dir(mirror.root, rel.as_posix(), create=False) as dfd:
        try:
            st = os.stat(p.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(p.name, dir_fd=dfd, ignore_errors=True)
        else:
            unlink_at(dfd, p.name)


_MAX_REF_BYTES = 256  # a ref holds one commit id
_PULL_LEFTOVERS = ("partial", ".rollback-", ".trash.")
_STAGING = ("import-", "oci-")  # transfer-set imports and OCI pulls (specbundle.transfer)


def reclaim_partials(mirror: Mirror) -> bool:
    """Remove pull's own leftovers in ``tmp/`` (partial downloads, rollback links, trash) when
    no writer is live; caller holds the lock. True if anything was removed."""
    live, _ = live_leases(mirror.root, reap=True)
    tmp = mirror.root / "tmp"
    if live or not tmp.is_dir():
        return False
    gone = [p for p in tmp.iterdir() if p.name.startswith(_PULL_LEFTOVERS)]
    for p in gone:
        _remove(mirror, p)
    return bool(gone)


def _staging_live(mirror: Mirror) -> bool:
    """Whether an import or OCI pull holds the staging lock (it stages under ``tmp/``)."""
    try:
        with hold(mirror.root, ".import.lock", timeout=0):
            return False
    except LockTimeout:
        return True


def _reclaim_tmp(mirror: Mirror, live: int, dry: bool) -> list[str]:
    tmp = mirror.root / "tmp"
    removed: list[str] = []
    now = time.time()
    staging_free = tmp.is_dir() and not _staging_live(mirror)
    for p in sorted(tmp.iterdir()) if tmp.is_dir() else ():
        mine = p.name.startswith((*_PULL_LEFTOVERS, ".obj.", ".bytes."))
        # an importer's staging that no live importer holds (killed, or failed on a full disk)
        staged = staging_free and p.name.startswith(_STAGING) and p.name != "oci-uploads"
        if not staged and live and (p.name == "partial" or now - _newest_mtime(p) < TMP_GRACE_S):
            continue
        if not (mine or staged) and now - _newest_mtime(p) < TMP_GRACE_S:
            continue
        removed.append(f"tmp/{p.name}")
        if not dry:
            _remove(mirror, p)
    return removed


def collect(mirror: Mirror, *, dry_run: bool = False) -> GcResult:
    """Remove objects, trees and temp files nothing needs (see the module docstring)."""
    with mirror.lock():
        records = _records(mirror)
        live_writers, pinned = live_leases(mirror.root, reap=not dry_run)
        live = set(pinned)
        for r in records:
            live |= r.referenced_blobs()
        sels: dict[tuple[str, str], list[tuple[FileEntry, ...]]] = {}
        for r in records:
            for a in r.artifacts:
                sels.setdefault((a.repo, a.commit), []).append(a.files)
        removed, freed, kept = [], 0, 0
        for prefix in _names(mirror, "objects/sha256"):
            with open_dir(mirror.root, f"objects/sha256/{prefix}", create=False) as dfd:
                with os.scandir(dfd) as it:
                    objs = sorted(e.name for e in it)
                _faults.point("gc.objects-listed", prefix)
                for obj in objs:  # relative to the checked folder: a planted link is refused
                    if obj in live:
                        kept += 1
                        continue
                    try:
                        st = os.stat(obj, dir_fd=dfd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # a writer moved it in under its final name since the listing
                    if obj.startswith(".") and time.time() - st.st_ctime < TMP_GRACE_S:
                        continue  # an object a writer is moving in (put_object's private name)
                    removed.append(obj)
                    freed += st.st_size
                    if not dry_run:
                        unlink_at(dfd, obj)
                        _faults.point("gc.object-removed")
        removed_trees = _gc_trees(mirror, sels, live, dry_run)
        removed_tmp = _reclaim_tmp(mirror, live_writers, dry_run)
        if not dry_run:
            _gc_journals(mirror, sels)
            if removed or removed_trees or removed_tmp:
                mirror.append_event("gc", None, {"removed_objects": removed,
                                                 "removed_snapshots": removed_trees,
                                                 "removed_tmp": removed_tmp,
                                                 "freed_bytes": freed})
    return GcResult(tuple(removed), tuple(removed_trees), freed, kept, dry_run,
                    tuple(removed_tmp), live_writers)


def _gc_trees(mirror: Mirror, sels: dict[tuple[str, str], list[tuple[FileEntry, ...]]],
              live: set[str], dry: bool) -> list[str]:
    removed: list[str] = []
    by_dir: dict[str, dict[str, list[tuple[FileEntry, ...]]]] = {}
    repos: dict[str, str] = {}
    for (repo, commit), files in sels.items():
        by_dir.setdefault(mirror.model_dir(repo).name, {})[commit] = files
        repos[mirror.model_dir(repo).name] = repo
    for mdir in sorted(mirror.root.glob("models--*")):
        commits = by_dir.get(mdir.name, {})
        keep = {trees.tree_name(c, fs) for c, many in commits.items() for fs in many}
        if not dry:  # trees and views first: a mirror from the older layout gets them here
            for commit, many in commits.items():
                try:
                    for sel in many:
                        trees.build_tree(mirror, repos[mdir.name], commit, sel)
                    view = trees.publish_view(mirror, repos[mdir.name], commit, many)
                except MirrorError:
                    view = None  # an object is missing: verify reports it; gc keeps the rest
                    legacy = mdir / "snapshots" / commit
                    if legacy.is_symlink():
                        keep.add(legacy.readlink().name)
                if view is not None:
                    keep.add(view.readlink().name)
                    _faults.point("gc.view-rebuilt")
        else:
            for commit in commits:
                view = mdir / "snapshots" / commit
                if view.is_symlink():
                    keep.add(view.readlink().name)
        for snap in sorted((mdir / "snapshots").glob("*")):
            if snap.name not in commits:
                removed.append(f"{mdir.name}/snapshots/{snap.name}")
                if not dry:
                    _remove(mirror, snap)
        for tree in sorted((mdir / trees.TREES).glob("*")):
            if tree.name not in keep:
                removed.append(f"{mdir.name}/{trees.TREES}/{tree.name}")
                if not dry:
                    _remove(mirror, tree)
                    _faults.point("gc.tree-removed")
        if dry:
            continue
        for blob in _names(mirror, f"{mdir.name}/blobs"):
            if blob not in live:
                _remove(mirror, mdir / "blobs" / blob)
        for ref in sorted(p for p in (mdir / "refs").rglob("*")
                          if p.is_symlink() or not p.is_dir()):
            if _ref_target(ref) not in commits:
                _remove(mirror, ref)
        if not commits:
            _remove(mirror, mdir)
    return removed


def _ref_target(ref: Path) -> str | None:
    """The commit a ref names, or None for anything no writer made (a link, a FIFO, a device,
    an oversized file): gc drops those with the refs to collected commits, never reading
    through them."""
    try:
        return read_mirror_file(ref, max_bytes=_MAX_REF_BYTES).decode("ascii").strip()
    except (MalformedDocument, UnicodeDecodeError, OSError):
        return None


def _gc_journals(mirror: Mirror, sels: dict[tuple[str, str], list[tuple[FileEntry, ...]]]) -> None:
    """Pull's journals of verified digests are useless once their commit is gone."""
    live = {(mirror.model_dir(r).name, c) for r, c in sels}
    for journal in sorted(mirror.root.glob("journal/models--*/*.json")):
        if (journal.parent.name, journal.stem) not in live:
            _remove(mirror, journal)
