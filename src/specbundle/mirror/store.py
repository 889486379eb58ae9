"""The content-addressed mirror: one directory, safe under crashes and concurrent writers.

Layout (all paths relative to the mirror root)::

    objects/sha256/ab/<hex>                 every file's bytes, once, read-only
    models--org--name/blobs/<sha256>        -> ../../objects/sha256/ab/<hex>   (HF cache layout)
    models--org--name/snapshots/<commit>/…  -> ../../blobs/<sha256>
    models--org--name/refs/<revision>       the commit a branch or tag resolved to
    bundles/<name>/bundle.json              the bundle record (written last, atomically)
    bundles/<name>/…                        later stages' files (scan, signatures, manifests)
    events.jsonl                            append-only, hash-chained event log
    tmp/                                    downloads in flight and resumable partial files
    .lock                                   writers serialise the commit phase on this

Bytes become visible only by rename: an object is renamed into place once its digest is
verified, a snapshot tree is built beside its final name and renamed, and the bundle record is
written last. A crash leaves at most orphan objects (reused by the next pull, removed by gc).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import filelock

from specbundle._fsutil import atomic_write_bytes, atomic_write_json, canonical_json, fsync_dir
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import (
    BundleNotFound,
    EnvironmentProblem,
    MirrorError,
    NotAMirror,
    UsageError,
)
from specbundle.record import ArtifactRecord, BundleRecord

__all__ = ["GENESIS", "GcResult", "Mirror", "model_dir_name", "utc_now"]

GENESIS = "0" * 64
_LOCK_TIMEOUT_S = 600.0


def utc_now() -> str:
    """RFC 3339 UTC timestamp with second precision."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def model_dir_name(repo: str) -> str:
    """Hugging Face cache folder name for a model repo id."""
    return "models--" + repo.replace("/", "--")


def _safe_rel(path: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or "\\" in path or not p.parts:
        raise MirrorError(f"refusing unsafe path inside a model tree: {path!r}")
    return p


@dataclass(frozen=True)
class GcResult:
    """What garbage collection removed (or would remove, in a dry run)."""

    removed_objects: tuple[str, ...]
    removed_snapshots: tuple[str, ...]
    freed_bytes: int
    kept_objects: int
    dry_run: bool


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
                for sub in ("objects/sha256", "bundles", "tmp"):
                    (m.root / sub).mkdir(parents=True, exist_ok=True)
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
            with filelock.FileLock(str(self.root / ".lock"), timeout=_LOCK_TIMEOUT_S):
                yield
        except filelock.Timeout as err:
            raise MirrorError(f"mirror {self.root} is locked by another writer") from err

    @property
    def tmp_dir(self) -> Path:
        """Staging area on the same filesystem, so renames into place are atomic."""
        d = self.root / "tmp"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def new_temp_path(self, hint: str = "obj") -> Path:
        """A fresh, unique temp file path inside the mirror (the file is created empty)."""
        fd, name = tempfile.mkstemp(prefix=f".{hint}.", suffix=".tmp", dir=self.tmp_dir)
        os.close(fd)
        return Path(name)

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
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            tmp.unlink(missing_ok=True)
            return dest
        with Path(tmp).open("rb+") as fh:
            os.fsync(fh.fileno())
        tmp.chmod(0o444)
        tmp.replace(dest)
        fsync_dir(dest.parent)
        return dest

    def put_bytes(self, data: bytes) -> str:
        """Store small bytes (a record, an archive index) and return their digest."""
        digest = sha256_bytes(data)
        if not self.has_object(digest, len(data)):
            tmp = self.new_temp_path("bytes")
            tmp.write_bytes(data)
            self.put_object(tmp, digest)
        return digest

    # -- model trees (Hugging Face cache layout) --------------------------------------------
    def model_dir(self, repo: str) -> Path:
        """``models--org--name`` for a repo id."""
        return self.root / model_dir_name(repo)

    def snapshot_dir(self, repo: str, commit: str) -> Path:
        """The snapshot folder an engine loads (a plain local path)."""
        return self.model_dir(repo) / "snapshots" / commit

    def link_snapshot(self, art: ArtifactRecord) -> Path:
        """Create ``snapshots/<commit>`` for an artifact whose objects are all stored.

        The tree is built in a temp folder and renamed into place; an existing complete
        snapshot of the same commit is kept (same commit, same bytes).
        """
        mdir = self.model_dir(art.repo)
        blobs = mdir / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        (mdir / "snapshots").mkdir(exist_ok=True)
        final = self.snapshot_dir(art.repo, art.commit)
        for f in art.files:
            if not self.has_object(f.sha256, f.size):
                raise MirrorError(f"{art.repo}: object for {f.path} ({f.sha256}) is missing")
            link = blobs / f.sha256
            if not link.is_symlink():
                target = os.path.relpath(self.object_path(f.sha256), blobs)
                tmp_link = blobs / f".{f.sha256}.{os.getpid()}.tmp"
                tmp_link.unlink(missing_ok=True)
                tmp_link.symlink_to(target)
                tmp_link.replace(link)
        if final.is_dir() and self._snapshot_complete(final, art):
            self._write_ref(art)
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{art.commit}.", dir=mdir / "snapshots"))
        try:
            for f in art.files:
                rel = _safe_rel(f.path)
                dest = staging / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.symlink_to(os.path.relpath(blobs / f.sha256, final / rel.parent))
            staging.chmod(0o755)
            if final.exists():
                shutil.rmtree(final)
            staging.replace(final)
            fsync_dir(final.parent)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._write_ref(art)
        return final

    def _snapshot_complete(self, snap: Path, art: ArtifactRecord) -> bool:
        want = {f.path for f in art.files}
        have = {p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_symlink()}
        return want == have and all((snap / p).exists() for p in want)

    def _write_ref(self, art: ArtifactRecord) -> None:
        # refs/<branch-or-tag> lets HF_HUB_OFFLINE resolve the name; a sha needs no ref.
        if art.commit_kind == "git" and art.requested_revision != art.commit:
            ref = self.model_dir(art.repo) / "refs" / _safe_rel(art.requested_revision)
            atomic_write_bytes(ref, art.commit.encode())

    # -- bundles ----------------------------------------------------------------------------
    def bundle_dir(self, name: str) -> Path:
        """Folder of a bundle's record and stage outputs."""
        if not name or "/" in name or name.startswith("."):
            raise UsageError(f"invalid bundle name {name!r}")
        return self.root / "bundles" / name

    def bundle_names(self) -> list[str]:
        """Names of bundles with a committed record, sorted."""
        bdir = self.root / "bundles"
        if not bdir.is_dir():
            return []
        return sorted(p.parent.name for p in bdir.glob("*/bundle.json"))

    def load_bundle(self, name: str) -> BundleRecord:
        """Read a bundle record; :class:`BundleNotFound` if there is none."""
        path = self.bundle_dir(name) / "bundle.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            known = ", ".join(self.bundle_names()) or "none"
            raise BundleNotFound(
                f"no bundle named {name!r} in mirror {self.root}", hint=f"bundles here: {known}"
            ) from None
        except (OSError, ValueError) as err:
            raise MirrorError(f"bundle record {path} is unreadable: {err}") from err
        try:
            return BundleRecord.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            what = f"missing field {err}" if isinstance(err, KeyError) else str(err)
            raise MirrorError(f"bundle record {path} is malformed: {what}",
                              hint="restore it from a transfer set or pull the bundle again"
                              ) from err

    def save_bundle(self, record: BundleRecord) -> Path:
        """Write the record (caller holds :meth:`lock`); this is what makes a bundle visible."""
        path = self.bundle_dir(record.name) / "bundle.json"
        atomic_write_json(path, record.to_json())
        return path

    def write_bundle_file(self, name: str, rel: str, data: bytes) -> Path:
        """Atomically write a stage output file inside a bundle's folder."""
        path = self.bundle_dir(name) / _safe_rel(rel)
        atomic_write_bytes(path, data)
        return path

    def read_bundle_file(self, name: str, rel: str) -> bytes | None:
        """Read a stage output file, or None if the stage has not written it."""
        path = self.bundle_dir(name) / _safe_rel(rel)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    # -- event log --------------------------------------------------------------------------
    @property
    def events_path(self) -> Path:
        """The append-only, hash-chained event log."""
        return self.root / "events.jsonl"

    def append_event(self, kind: str, bundle: str | None, data: dict[str, Any]) -> dict[str, Any]:
        """Append one event, chained to the previous line's digest (caller holds the lock)."""
        prev, seq = GENESIS, 0
        if self.events_path.exists():
            lines = self.events_path.read_bytes().splitlines()
            if lines:
                prev = sha256_bytes(lines[-1])
                seq = int(json.loads(lines[-1])["seq"]) + 1
        entry = {"seq": seq, "time": utc_now(), "type": kind, "bundle": bundle,
                 "data": data, "prev": prev}
        line = canonical_json(entry) + b"\n"
        fd = os.open(self.events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return entry

    def read_events(self) -> list[dict[str, Any]]:
        """All events, oldest first (chain verification lives in the audit stage)."""
        if not self.events_path.exists():
            return []
        return [json.loads(x) for x in self.events_path.read_bytes().splitlines() if x.strip()]

    # -- garbage collection -----------------------------------------------------------------
    def gc(self, *, dry_run: bool = False) -> GcResult:
        """Remove objects and snapshots that no bundle references."""
        with self.lock():
            records = [self.load_bundle(n) for n in self.bundle_names()]
            live = set().union(*(r.referenced_blobs() for r in records)) if records else set()
            live_snaps = {(a.repo, a.commit) for r in records for a in r.artifacts}
            removed, freed, kept = [], 0, 0
            for obj in sorted((self.root / "objects" / "sha256").glob("*/*")):
                if obj.name in live:
                    kept += 1
                    continue
                removed.append(obj.name)
                freed += obj.stat().st_size
                if not dry_run:
                    obj.unlink()
            removed_snaps = self._gc_trees(live, live_snaps, dry_run)
            if not dry_run and (removed or removed_snaps):
                self.append_event("gc", None, {"removed_objects": removed,
                                               "removed_snapshots": removed_snaps,
                                               "freed_bytes": freed})
        return GcResult(tuple(removed), tuple(removed_snaps), freed, kept, dry_run)

    def _gc_trees(self, live: set[str], live_snaps: set[tuple[str, str]], dry: bool) -> list[str]:
        removed: list[str] = []
        live_dirs = {(model_dir_name(r), c) for r, c in live_snaps}
        for mdir in sorted(self.root.glob("models--*")):
            for snap in sorted((mdir / "snapshots").glob("*")):
                if (mdir.name, snap.name) not in live_dirs:
                    removed.append(f"{mdir.name}/snapshots/{snap.name}")
                    if not dry:
                        shutil.rmtree(snap)
            for blob in sorted((mdir / "blobs").glob("*")):
                if blob.name not in live and not dry:
                    blob.unlink()
            for ref in sorted(p for p in (mdir / "refs").rglob("*") if p.is_file()):
                if (mdir.name, ref.read_text().strip()) not in live_dirs and not dry:
                    ref.unlink()
            if not dry and not any((mdir / "snapshots").glob("*")):
                shutil.rmtree(mdir)
        # pull's journals of verified digests: useless once their snapshot is gone
        for journal in sorted(self.root.glob("journal/models--*/*.json")):
            if (journal.parent.name, journal.stem) not in live_dirs and not dry:
                journal.unlink()
        return removed
