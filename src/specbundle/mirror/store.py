"""The content-addressed mirror: one directory, safe under crashes and concurrent writers.

Layout (all paths relative to the mirror root)::

    objects/sha256/ab/<hex>                   every file's bytes, once, read-only
    models--org--name/blobs/<sha256>          -> ../../objects/sha256/ab/<hex>  (HF cache layout)
    models--org--name/trees/<commit>-<sel>/…  one immutable tree per file selection (.trees)
    models--org--name/snapshots/<commit>      -> ../trees/…  the HF_HUB_OFFLINE view
    models--org--name/refs/<revision>         the commit a branch or tag resolved to
    bundles/<name>/bundle.json                the bundle record (written last, atomically)
    bundles/<name>/…                          later stages' files (scan, signatures, manifests)
    events.jsonl                              append-only, framed, hash-chained event log
    leases/<id>.lease                         running writers and the objects they pinned
    tmp/                                      downloads in flight and resumable partial files
    .lock                                     writers serialise the commit phase on this

Bytes become visible only by rename: an object is renamed into place once its digest is
verified, a selection's tree is built beside its final name and renamed, the bundle record is
written right after its event is appended (log before visible), and only then do the HF view
and refs move. A crash leaves at most orphan objects and trees (reused by the next pull,
removed by gc, which keeps whatever a live writer's lease pins) or a logged pull whose record
the rerun writes under the same event.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from specbundle import _faults
from specbundle._fsutil import (
    disk_error,
    fd_path,
    json_bytes,
    move_in_at,
    open_dir,
    real_dir,
    tmp_name,
    write_at,
)
from specbundle._locks import LockTimeout, hold
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import (
    BundleNotFound,
    CorruptMirror,
    EnvironmentProblem,
    MirrorBusy,
    MirrorError,
    NotAMirror,
    UsageError,
    VerificationError,
)
from specbundle.mirror import eventlog, trees
from specbundle.mirror.eventlog import GENESIS
from specbundle.mirror.gc import GcResult, collect, reclaim_partials
from specbundle.mirror.lease import Lease
from specbundle.record import ArtifactRecord, BundleRecord, FileEntry
from specbundle.strict import MalformedDocument, load_json_file, read_mirror_file

__all__ = ["GENESIS", "GcResult", "Mirror", "model_dir_name", "utc_now"]

_LOCK_TIMEOUT_S = 600.0
_faults.register("object.renamed")


def utc_now() -> str:
    """RFC 3339 UTC timestamp with second precision."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def model_dir_name(repo: str) -> str:
    """Hugging Face cache folder name for a model repo id."""
    return "models--" + repo.replace("/", "--")


class Mirror:
    """A mirror directory. Cheap to construct; all state lives on disk."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    # -- basics -----------------------------------------------------------------------------
    @classmethod
    def open(cls, root: Path, *, create: bool = False) -> Mirror:
        """Open an existing mirror, or create its skeleton when ``create`` is set."""
        m = cls(root)
        if m.root.exists() and not m.root.is_dir():
            raise NotAMirror(f"{m.root} is not a specbundle mirror (not a directory)",
                             hint="pass the mirror folder as --mirror or $SPECBUNDLE_MIRROR")
        if create:
            try:
                m.root.mkdir(parents=True, exist_ok=True)  # the root the operator named
                for sub in ("objects/sha256", "bundles", "tmp"):
                    real_dir(m.root, sub)  # never through a link planted below it
            except OSError as err:
                raise EnvironmentProblem(
                    f"cannot create the mirror at {m.root}: {err.strerror}") from err
        elif not (m.root / "objects").is_dir():
            raise NotAMirror(
                f"{m.root} is not a specbundle mirror (no objects/ folder)",
                hint="pull a bundle into it first, or pass the right --mirror",
            )
        return m

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock for the commit phase of any writer (pull, gc, import)."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            with hold(self.root, ".lock", timeout=_LOCK_TIMEOUT_S):
                yield
        except LockTimeout as err:
            raise MirrorBusy(f"mirror {self.root} is locked by another writer",
                             hint=f"waited {_LOCK_TIMEOUT_S:.0f} s; retry when it is done") \
                from err

    def lease(self, kind: str = "pull") -> Lease:
        """A writer lease: objects it pins survive gc until it is closed (see :mod:`.lease`)."""
        return Lease(self, kind)

    @property
    def tmp_dir(self) -> Path:
        """Staging area on the same filesystem, so renames into place are atomic."""
        return real_dir(self.root, "tmp")

    def new_temp_path(self, hint: str = "obj") -> Path:
        """A fresh, unique temp file path inside the mirror (the file is created empty)."""
        name = tmp_name(hint)
        with open_dir(self.root, "tmp") as dfd:  # never a link planted as tmp/
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            except OSError as err:
                raise disk_error(err, self.root / "tmp", what="creating a temp file in") \
                    from err
        os.close(fd)
        return self.root / "tmp" / name

    # -- objects ----------------------------------------------------------------------------
    def object_path(self, sha256: str) -> Path:
        """Where the bytes with this digest live (whether or not they exist yet)."""
        if not is_sha256(sha256):
            raise MirrorError(f"not a sha256 digest: {sha256!r}")
        return self.root / "objects" / "sha256" / sha256[:2] / sha256

    def has_object(self, sha256: str, size: int | None = None) -> bool:
        """True if the object is stored (and has the expected size when given)."""
        p = self.object_path(sha256)
        try:
            st = p.stat()
        except FileNotFoundError:
            return False
        return size is None or st.st_size == size

    def put_object(self, tmp: Path, sha256: str) -> Path:
        """Move a fully written, already verified temp file into the store (idempotent)."""
        dest = self.object_path(sha256)
        try:
            with open_dir(self.root, f"objects/sha256/{sha256[:2]}") as dfd:
                # by the fd of the file checked: a link or FIFO put in place of the temp file
                # is never chmodded or moved into the store
                move_in_at(tmp, dfd, sha256, dest.parent)
        except OSError as err:
            raise disk_error(err, dest, what="storing the object") from err
        _faults.point("object.renamed")
        return dest

    def put_bytes(self, data: bytes) -> str:
        """Store small bytes (a record, an archive index) and return their digest."""
        digest = sha256_bytes(data)
        if not self.has_object(digest, len(data)):
            with open_dir(self.root, "tmp") as dfd:  # never a link planted as tmp/
                name = tmp_name("bytes")
                write_at(dfd, name, data, self.root / "tmp")
                self.put_object(fd_path(dfd, name), digest)
        return digest

    # -- model trees (Hugging Face cache layout) --------------------------------------------
    def model_dir(self, repo: str) -> Path:
        """``models--org--name`` for a repo id."""
        return self.root / model_dir_name(repo)

    def snapshot_dir(self, repo: str, commit: str) -> Path:
        """``snapshots/<commit>``: the Hugging Face cache view (union of the selections there).

        Stages that read one bundle's files use :meth:`artifact_dir` instead.
        """
        return self.model_dir(repo) / "snapshots" / commit

    def artifact_dir(self, art: ArtifactRecord) -> Path:
        """The tree of exactly this artifact's files: what scan, verify, render and bench read.

        A mirror written before per-selection trees has only ``snapshots/<commit>``; that
        folder is returned until the next pull or gc rebuilds the tree.
        """
        tree = self.model_dir(art.repo) / trees.TREES / trees.tree_name(art.commit, art.files)
        legacy = self.snapshot_dir(art.repo, art.commit)
        if not tree.is_dir() and legacy.is_dir() and not legacy.is_symlink():
            return legacy
        return tree

    def link_snapshot(self, art: ArtifactRecord) -> Path:
        """Build this artifact's tree (every object must be stored); returns :meth:`artifact_dir`.

        Refs and the HF view are not touched: :meth:`publish` moves them once the record that
        needs them is committed.
        """
        return trees.build_tree(self, art.repo, art.commit, art.files)

    def selections(self, repo: str, commit: str,
                   extra: tuple[ArtifactRecord, ...] = ()) -> list[tuple[FileEntry, ...]]:
        """File selections at ``repo@commit`` of every committed bundle (plus ``extra``)."""
        out = [a.files for a in extra if (a.repo, a.commit) == (repo, commit)]
        for name in self.bundle_names():
            try:
                rec = self.load_bundle(name)
            except MirrorError:
                continue  # an unreadable record keeps nothing visible
            out.extend(a.files for a in rec.artifacts if (a.repo, a.commit) == (repo, commit))
        return out

    def publish(self, record: BundleRecord) -> None:
        """Move the HF view and refs to a committed record's commits (caller holds the lock)."""
        for art in record.artifacts:
            trees.publish_view(self, art.repo, art.commit,
                               self.selections(art.repo, art.commit, (art,)))
            trees.write_ref(self, art)

    # -- bundles ----------------------------------------------------------------------------
    def bundle_dir(self, name: str) -> Path:
        """Folder of a bundle's record and stage outputs."""
        if not name or "/" in name or name.startswith("."):
            raise UsageError(f"invalid bundle name {name!r}")
        return self.root / "bundles" / name

    def bundle_names(self) -> list[str]:
        """Names of bundles with a committed record or a signed current version, sorted.

        A ``current`` ref alone makes a bundle present (an import killed before it rewrote the
        working copy): the signed version, not ``bundle.json``, is the truth.
        """
        bdir = self.root / "bundles"
        if not bdir.is_dir():
            return []
        return sorted({p.parent.name for pat in ("*/bundle.json", "*/current")
                       for p in bdir.glob(pat) if not p.parent.name.startswith(".")})

    def load_bundle(self, name: str) -> BundleRecord:
        """Read a bundle record; :class:`BundleNotFound` if there is none."""
        path = self.bundle_dir(name) / "bundle.json"
        hint = "restore it from a transfer set or pull the bundle again"
        try:
            data = load_json_file(path, follow=False)
        except FileNotFoundError:
            signed = self._signed_record(name)
            if signed is not None:
                return signed
            known = ", ".join(self.bundle_names()) or "none"
            raise BundleNotFound(
                f"no bundle named {name!r} in mirror {self.root}", hint=f"bundles here: {known}"
            ) from None
        except MalformedDocument as err:
            raise CorruptMirror(f"bundle record {path} is malformed: {err}", hint=hint) from None
        except OSError as err:
            raise MirrorError(f"bundle record {path} is unreadable: {err.strerror}") from err
        try:
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            return BundleRecord.from_json(data)
        except CorruptMirror:
            raise
        except MirrorError as err:
            raise CorruptMirror(f"bundle record {path}: {err.message}", hint=hint) from None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            what = f"missing field {err}" if isinstance(err, KeyError) else str(err)
            raise CorruptMirror(f"bundle record {path} is malformed: {what}", hint=hint) \
                from None

    def _signed_record(self, name: str) -> BundleRecord | None:
        """The current signed version's record, for a bundle whose working copy is missing
        (an import killed after its ``current`` flip); None when it was never signed."""
        from specbundle.mirror import versions  # versions imports this module

        try:
            recs = versions.live_records(self, name)
        except VerificationError as err:
            raise CorruptMirror(err.message, hint=err.hint) from None
        return recs[0] if recs else None

    def save_bundle(self, record: BundleRecord, *, publish: bool = True) -> Path:
        """Write the record (caller holds :meth:`lock`); this is what makes a bundle visible.

        Then the HF view and refs move to its commits (:meth:`publish`), unless the caller
        does that itself after a later commit step.
        """
        self.bundle_dir(record.name)
        path = self.write_bundle_file(record.name, "bundle.json", json_bytes(record.to_json()))
        if publish:
            self.publish(record)
        return path

    def write_bundle_file(self, name: str, rel: str, data: bytes) -> Path:
        """Atomically write a stage output file inside a bundle's folder."""
        self.bundle_dir(name)
        return self.write_file(f"bundles/{name}/{trees.safe_rel(rel)}", data)

    def write_file(self, rel: str, data: bytes) -> Path:
        """Atomically write ``rel`` under the mirror root through its folder's no-follow fd
        (:func:`~specbundle._fsutil.open_dir`): a link or file planted on the way is refused
        (exit 3), and a folder swapped for a link after the check is not followed."""
        rel_path = trees.safe_rel(rel)
        parent = PurePosixPath(*rel_path.parts[:-1])
        with open_dir(self.root, parent) as dfd:
            write_at(dfd, rel_path.name, data, self.root / parent)
        return self.root / rel_path

    def output_dir(self, name: str, rel: str) -> Path:
        """A stage output folder inside a bundle's folder, every component a real directory
        (never a link planted in the mirror; see :func:`~specbundle._fsutil.real_dir`)."""
        self.bundle_dir(name)
        return real_dir(self.root, PurePosixPath("bundles", name, trees.safe_rel(rel)))

    def read_bundle_file(self, name: str, rel: str) -> bytes | None:
        """Read a stage output file, or None if the stage has not written it."""
        path = self.bundle_dir(name) / trees.safe_rel(rel)
        try:
            return read_mirror_file(path, what=f"bundles/{name}/{rel}")
        except FileNotFoundError:
            return None
        except MalformedDocument as err:
            raise CorruptMirror(f"mirror {self.root}: {err}",
                                hint="restore the bundle from a transfer set") from None
        except OSError as err:
            raise CorruptMirror(f"mirror {self.root}: cannot read bundles/{name}/{rel}: "
                                f"{err.strerror}") from None

    # -- event log --------------------------------------------------------------------------
    @property
    def events_path(self) -> Path:
        """The append-only, hash-chained event log."""
        return self.root / "events.jsonl"

    def append_event(self, kind: str, bundle: str | None, data: dict[str, Any]) -> dict[str, Any]:
        """Append one event, chained to the previous line's digest (caller holds the lock).

        A torn tail is repaired first (a ``log-repaired`` event); a full disk leaves the log
        as it was and raises :class:`~specbundle.errors.DiskError` (see :mod:`.eventlog`).
        """
        entry = {"time": utc_now(), "type": kind, "bundle": bundle, "data": data}
        return eventlog.append_event(self.events_path, entry)

    def append_event_once(self, kind: str, bundle: str, data: dict[str, Any],
                          same: Iterable[str] | None = None) -> None:
        """Append the event unless this bundle's newest event of ``kind`` already carries
        ``data`` (only the ``same`` fields compared, when given; caller holds the lock): a
        writer logs *before* its commit makes the state visible, so a rerun after a crash
        between the two must not log it twice."""
        keys = list(data) if same is None else list(same)
        for ev in reversed(self.read_events()):
            if ev.get("type") == kind and ev.get("bundle") == bundle:
                old = ev.get("data")
                if isinstance(old, dict) and all(old.get(k) == data.get(k) for k in keys):
                    return
                break
        self.append_event(kind, bundle, data)

    def read_events(self) -> list[dict[str, Any]]:
        """All committed events, oldest first (chain verification lives in the audit stage)."""
        return eventlog.read_events(self.events_path)

    # -- garbage collection -----------------------------------------------------------------
    def gc(self, *, dry_run: bool = False) -> GcResult:
        """Remove objects, trees and temp files that no bundle and no live writer needs."""
        return collect(self, dry_run=dry_run)

    def reclaim_tmp(self) -> bool:
        """Drop pull's partial-download folder when no writer is live (caller holds the lock)."""
        return reclaim_partials(self)
