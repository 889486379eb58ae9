"""Bring a transfer set into a mirror on the isolated side: verify all, then commit. No network.

1. ``index.json`` (parsed strictly) must verify under an unrevoked policy key scoped to the
   bundle name and every repo it names; nothing in it is used before that, and every path it
   names is validated (:mod:`specbundle.ids`). Its version must not be older than the last
   import of that bundle (rollback refused; the same version with other content is refused).
2. Every chunk (if split) and every part is hashed against the index while it is copied into a
   *staging mirror* under ``<mirror>/tmp/import-<index digest>/``; parts verified by an
   interrupted run are kept there, so a rerun resumes.
3. The staged manifest is verified first; snapshots are then built from *its* record (never
   from the carried, unsigned ``bundle.json``), and the whole staged bundle is verified with
   :func:`specbundle.verify.verify_bundle` exactly as it will be used, with the revocations
   the index carries. The copy in step 2 goes through
   :func:`~specbundle.verify.write_hashed`, whose records let verify use the digest of the
   very bytes written instead of reading them a second time (one pass over the data); objects
   staged by an earlier run or linked from the mirror are re-hashed by verify.
4. Only then, under the mirror lock: objects are renamed into the store, snapshots linked,
   the version's files written, attestation lines and revocations appended, and ``current``
   flipped by one rename as the commit point; the record copy, the import event and the
   import state follow. A crash anywhere leaves the old or the new version visible; the state
   ("already imported") is written last, so a broken import is never "unchanged".
   One importer stages at a time (``.import.lock``); a refused log floor stops the commit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from specbundle import _faults
from specbundle._fsutil import (
    fd_path,
    open_dir,
    real_dir,
    refuse_link_at,
    remove_at,
    rename_at,
    unlink_at,
)
from specbundle.attest import (
    ATTESTATIONS_FILE,
    Envelope,
    append_lines,
    check_statement,
    parse_statement,
)
from specbundle.digest import hash_file, sha256_bytes
from specbundle.errors import MirrorError, VerificationError
from specbundle.mirror import Mirror, trees, utc_now, versions
from specbundle.mirror.eventlog import read_chain
from specbundle.strict import MalformedDocument, loads_json, read_bounded, read_mirror_file
from specbundle.transfer.chunks import CHUNK_DIR, read_blocks, read_range
from specbundle.transfer.index import INDEX_FILE, Part, TransferIndex
from specbundle.transfer.staging import discard_on_disk_error, staging_lock
from specbundle.verify import (
    BundleVerificationFailed,
    HashedFile,
    TrustPolicy,
    VerificationReport,
    VerifiedBundle,
    floors,
    hash_existing,
    verify_bundle,
    write_hashed,
)
from specbundle.verify.manifest_check import open_manifest
from specbundle.verify.revocations import (
    REVOCATION_EVENT,
    check_revocations,
    log_state,
    read_events_lenient,
    revoked_fingerprints,
)

__all__ = ["IMPORT_POINTS", "IMPORT_STATE", "CommitPoints", "ImportResult", "check_log_floor",
           "commit_version", "import_bundle", "imported_log_seq", "read_index"]

IMPORT_STATE = "import/state.json"
_faults.register("import.staged", "import.objects-moved", "import.files-written", "import.logged",
                 "import.attestations-appended", "import.state-written")
Progress = Callable[[int], None]


@dataclass(frozen=True)
class ImportResult:
    """Outcome: ``imported`` (committed now) or ``unchanged`` (this exact index was already in)."""

    bundle: str
    version: int
    status: Literal["imported", "unchanged"]
    index_sha256: str
    #: this run's verification (None when the set was already in: nothing was verified)
    verification: VerificationReport | None


def _index_revocations(idx: TransferIndex, policy: TrustPolicy) -> tuple[
        list[dict[str, Any]], dict[str, str]]:
    """The index's revocation envelopes that verify under the policy, and what they revoke."""
    events = [{"type": REVOCATION_EVENT, "seq": None, "data": {"envelope": e}}
              for e in idx.revocations]
    check = check_revocations(events, policy.public_keys, policy)
    good = {r.envelope_sha256 for r in check.revocations}
    envs = [e for e in idx.revocations
            if sha256_bytes(Envelope.from_json(e).to_line()) in good]
    return envs, {fp: r.detail for fp, r in check.revoked.items()}


def read_index(src: Path, policy: TrustPolicy, mirror: Mirror | None = None
               ) -> tuple[TransferIndex, bytes, frozenset[str]]:
    """Verify and parse ``index.json``; returns the index, its bytes and the trusted signers.

    Nothing of the index is used before its signature checks out; the signer must be scoped
    to the bundle name and every repo of the set, and not revoked (policy, ``mirror``'s log,
    or a revocation the index itself carries).
    """
    try:
        data = read_bounded(src / INDEX_FILE, what=INDEX_FILE)
        env = Envelope.from_json(loads_json(data, what=INDEX_FILE))
    except FileNotFoundError as err:
        raise VerificationError(f"{src} has no {INDEX_FILE}: not a complete transfer set") from err
    except OSError as err:
        raise VerificationError(f"cannot read {src / INDEX_FILE}: {err.strerror}") from err
    except MalformedDocument as err:
        raise VerificationError(f"{src / INDEX_FILE}: {err}") from None
    cs = check_statement(env, policy.public_keys)
    if not cs.signers:
        raise VerificationError(
            f"transfer index in {src} is not signed by a key the policy trusts"
            + (f": {'; '.join(cs.check.problems)}" if cs.check.problems else ""))
    idx = TransferIndex.from_statement(parse_statement(cs.check.payload))
    repos = tuple(sorted({s.name for s in cs.statement.subjects if "sha256" in s.digest}))
    revoked = dict(policy.revoked) | _index_revocations(idx, policy)[1]
    if mirror is not None:
        revoked |= revoked_fingerprints(mirror, policy)
    allowed = {k.fingerprint for k in policy.keys
               if k.may_sign_all(repos, idx.bundle) and k.fingerprint not in revoked}
    signers = cs.signers & allowed
    if not signers:
        gone = sorted(cs.signers & revoked.keys())
        why = (f": key {gone[0][:16]}… {revoked[gone[0]]}" if gone
               else f": no signer may sign bundle {idx.bundle!r} with repos {', '.join(repos)}")
        raise VerificationError(
            f"transfer index of {idx.bundle!r} is not signed by a key the policy trusts for it"
            + why)
    return idx, data, signers


def _read_state(mirror: Mirror, name: str) -> dict[str, Any] | None:
    raw = mirror.read_bundle_file(name, IMPORT_STATE)
    if raw is None:
        return None
    try:
        state = loads_json(raw, what=IMPORT_STATE)
        if not isinstance(state.get("version"), int) or not isinstance(
                state.get("index_sha256"), str):
            raise ValueError("version or index_sha256 missing")
    except (ValueError, AttributeError) as err:
        raise VerificationError(f"bundles/{name}/{IMPORT_STATE} is corrupt: {err}",
                                hint="restore it, or remove it to import the set again") from None
    return dict(state)


def _check_rollback(mirror: Mirror, idx: TransferIndex, digest: str) -> bool:
    """True if this exact index is already imported; raises on a rollback or a conflict."""
    state = _read_state(mirror, idx.bundle)
    if state is None:
        return False
    have = int(state["version"])
    if idx.version < have:
        raise VerificationError(f"rollback refused: {idx.bundle!r} is at index version {have}, "
                                f"this transfer set carries version {idx.version}")
    if idx.version == have and state["index_sha256"] != digest:
        raise VerificationError(f"index version {have} of {idx.bundle!r} was already imported "
                                "with different content; refusing the conflicting set")
    # The state is written after the ref flip: present, equal and naming the manifest that
    # is current means fully committed; anything else imports again (never "unchanged" on
    # a bundle whose current version is not the one this set brought).
    if idx.version != have:
        return False
    cur = versions.read_current_manifest(mirror, idx.bundle)
    if cur is None:
        return False
    try:
        current = sha256_bytes(Envelope.from_json(loads_json(cur[1])).payload)
    except (MalformedDocument, VerificationError):
        return False
    return state.get("manifest_sha256") == current


def _check_chunks(src: Path, idx: TransferIndex, *, content: bool = False) -> None:
    """Every chunk present with its size; with ``content``, also its sha256 (names the bad one).

    Content is normally proven by the part digests (one read of the media, not two); the chunk
    digests are read only to say *which* chunk is damaged once a part failed.
    """
    problems = []
    for c in idx.chunks:
        p = src / CHUNK_DIR / c.name
        if not p.is_file():
            problems.append(f"chunk {CHUNK_DIR}/{c.name} is missing")
        elif p.stat().st_size != c.size:
            problems.append(f"chunk {c.name} has {p.stat().st_size} bytes, index says {c.size}")
        elif content and hash_file(p) != c.sha256:
            problems.append(f"chunk {c.name} content differs from the index")
    if problems:
        raise VerificationError("split transfer set is incomplete: " + "; ".join(problems))


def _stage_part(src: Path, idx: TransferIndex, part: Part, root: Path, dest: PurePosixPath,
                progress: Progress | None) -> tuple[HashedFile, Path]:
    """Copy one part to ``root/dest``, hashing the bytes written; refuse it unless they match.

    The staging folder is opened no-follow from ``root`` (the staging mirror) and the part is
    written and renamed through its fd: a link, FIFO or folder planted on the way is refused.
    Returns the record and a path to the part valid after the call (through a real folder).
    """
    where = root / dest.parent
    with open_dir(root, dest.parent) as dfd:
        if refuse_link_at(dfd, dest.name, where, folder=False) and os.stat(
                dest.name, dir_fd=dfd, follow_symlinks=False).st_size == part.size:
            done = hash_existing(fd_path(dfd, dest.name))
            if done.sha256 == part.sha256:
                return done, root / dest  # verified by an interrupted earlier run
        if idx.chunk_size is not None and part.offset is not None:
            blocks: Iterable[bytes] = read_range(src, idx.chunk_size, part.offset, part.size,
                                                 progress)
        else:
            p = src / part.path
            if not p.is_file() or p.is_symlink():
                raise VerificationError(f"transfer set lacks part {part.path}")
            blocks = read_blocks(p, progress)
        tmp = f".{dest.name}.part"
        got = write_hashed(blocks, fd_path(dfd, tmp))  # created O_EXCL: never through a link
        if got.size != part.size or got.sha256 != part.sha256:
            unlink_at(dfd, tmp)
            if idx.chunk_size is not None:
                _check_chunks(src, idx, content=True)
            raise VerificationError(f"part {part.path} differs from the index "
                                    f"(expected {part.sha256}, {part.size} B; got "
                                    f"{got.sha256}, {got.size} B)")
        rename_at(dfd, tmp, dfd, dest.name)
    return got, root / dest


def _stage(src: Path, idx: TransferIndex, staging: Mirror, mirror: Mirror,
           progress: Progress | None) -> list[HashedFile]:
    """Stage every part; returns the hash records of the objects copied in this run."""
    hashed = []
    for part in idx.parts:
        head, _, rest = part.path.partition("/")
        if head == "objects":
            if staging.has_object(part.sha256, part.size) or _link_existing(mirror, staging,
                                                                             part):
                continue
            got, tmp = _stage_part(src, idx, part, staging.root,
                                   PurePosixPath("tmp", f"{part.sha256}.staged"), progress)
            hashed.append(got)
            staging.put_object(tmp, part.sha256)  # a rename: same inode, same record
        else:
            staging.bundle_dir(idx.bundle)  # a valid name
            _stage_part(src, idx, part, staging.root,
                        PurePosixPath("bundles", idx.bundle, trees.safe_rel(rest)), progress)
    return hashed


def _link_existing(mirror: Mirror, staging: Mirror, part: Part) -> bool:
    """Reuse an object the mirror already holds (verify_bundle re-hashes it in staging)."""
    if not mirror.has_object(part.sha256, part.size):
        return False
    sha = part.sha256
    try:
        with open_dir(staging.root, f"objects/sha256/{sha[:2]}") as dfd:  # no planted link
            os.link(mirror.object_path(sha), sha, dst_dir_fd=dfd)
    except OSError:
        return False
    return True


_SKIP = ("bundle.json", ATTESTATIONS_FILE, versions.CURRENT_REF)


@dataclass(frozen=True)
class CommitPoints:
    """The commit-point names (:mod:`specbundle._faults`) one caller of
    :func:`commit_version` passes, so each stage keeps its own kill-at-this-point names."""

    objects_moved: str
    files_written: str
    appended: str
    #: passed after each object renamed into the store (None: not marked)
    object_moved: str | None = None
    #: passed after the event is logged, before ``current`` flips
    logged: str = "import.logged"


IMPORT_POINTS = CommitPoints("import.objects-moved", "import.files-written",
                             "import.attestations-appended")


def commit_version(staging: Mirror, mirror: Mirror, verified: VerifiedBundle,
                   revocations: Iterable[dict[str, Any]] = (), *,
                   points: CommitPoints = IMPORT_POINTS,
                   event: tuple[str, dict[str, Any]] | None = None) -> int:
    """Commit a version verified in ``staging`` into ``mirror``; the caller holds its lock.

    Objects renamed into the store, snapshots linked, the version's files written, new
    attestation lines and revocations appended, the ``event`` (kind, data; the count of
    lines added is filled in) logged once, then ``current`` flipped by one rename (the commit
    point) and the record copy saved: the log holds every version before it is visible.
    Returns the attestation lines added.
    """
    rec, name = verified.record, verified.name
    files = versions.files_to_commit(staging, mirror, name, verified.version, _SKIP)
    for sha in sorted(rec.referenced_blobs()):
        if not mirror.has_object(sha):
            mirror.put_object(staging.object_path(sha), sha)  # same filesystem: a rename
            if points.object_moved:
                _faults.point(points.object_moved)
    _faults.point(points.objects_moved)
    for art in rec.artifacts:
        mirror.link_snapshot(art)
    for rel, data in files:
        mirror.write_bundle_file(name, rel, data)
    _faults.point(points.files_written)
    mine = mirror.read_bundle_file(name, ATTESTATIONS_FILE) or b""
    have = set(mine.splitlines())
    add = [ln for ln in (staging.read_bundle_file(name, ATTESTATIONS_FILE) or b"").splitlines()
           if ln and ln not in have]
    if add:
        append_lines(mirror, name, add)
    known = {sha256_bytes(Envelope.from_json(e).to_line()) for e in _log_revocations(mirror)}
    for env in revocations:
        if sha256_bytes(Envelope.from_json(env).to_line()) not in known:
            mirror.append_event(REVOCATION_EVENT, None, {"envelope": env, "via": "import"})
    _faults.point(points.appended)
    if event is not None:
        mirror.append_event_once(event[0], name, {**event[1], "attestations_added": len(add)},
                                 same=event[1])
        _faults.point(points.logged)
    versions.flip_current(mirror, name, verified.version)
    mirror.save_bundle(rec)
    return len(add)


def _commit(staging: Mirror, mirror: Mirror, idx: TransferIndex, index_bytes: bytes,
            verified: VerifiedBundle, revocations: list[dict[str, Any]]) -> None:
    """Everything of the new version first, the ``current`` flip last (then bookkeeping)."""
    rec = verified.record
    commit_version(staging, mirror, verified, revocations, event=("import", {
        "version": idx.version, "index_sha256": sha256_bytes(index_bytes),
        "bundle_version": verified.version, "manifest_sha256": verified.manifest_digest,
        "target": rec.target.commit, "draft": rec.draft.commit if rec.draft else None}))
    mirror.write_bundle_file(idx.bundle, "import/index.json", index_bytes)
    mirror.write_bundle_file(idx.bundle, IMPORT_STATE, json.dumps(
        {"version": idx.version, "index_sha256": sha256_bytes(index_bytes),
         "manifest_sha256": verified.manifest_digest, "log_seq": _log_seq(mirror)}).encode())
    _faults.point("import.state-written")


def _log_seq(mirror: Mirror) -> int:
    """seq of the newest event-log entry, -1 for an empty log."""
    events = read_events_lenient(mirror.events_path)
    seqs = [e["seq"] for e in events if isinstance(e.get("seq"), int)]
    return max(seqs, default=-1)


def check_log_floor(mirror: Mirror) -> None:
    """Refuse a log shorter than one an earlier import saw (its tail was cut); caller holds
    the mirror lock."""
    _check_floor(mirror)


def imported_log_seq(mirror: Mirror) -> int:
    """The newest log seq an import into ``mirror`` recorded (-1: none)."""
    seen = -1
    for p in mirror.root.glob("bundles/*/import/state.json"):
        try:
            st = loads_json(read_mirror_file(p, what=IMPORT_STATE), what=IMPORT_STATE)
            seen = max(seen, int(st.get("log_seq", -1)))
        except (ValueError, TypeError, AttributeError, OSError):
            raise VerificationError(f"{p} is corrupt", hint="restore it") from None
    return seen


def _check_floor(mirror: Mirror) -> None:
    """Refuse a log shorter than one an earlier import saw (its tail was cut)."""
    seen = imported_log_seq(mirror)
    head = _log_seq(mirror)
    if head < seen:
        raise VerificationError(f"the event log of {mirror.root} ends at seq {head}, but an "
                                f"earlier import saw seq {seen}: the log was truncated",
                                hint="restore events.jsonl; run `specbundle audit log --verify`")


def _log_revocations(mirror: Mirror) -> list[dict[str, Any]]:
    return [ev["data"]["envelope"] for ev in read_events_lenient(mirror.events_path)
            if ev.get("type") == REVOCATION_EVENT and isinstance(ev.get("data"), dict)
            and isinstance(ev["data"].get("envelope"), dict)]


def import_bundle(
    src: Path, mirror: Mirror, policy: TrustPolicy, *, progress: Progress | None = None,
) -> ImportResult:
    """Verify the transfer set in ``src`` completely, then commit it into ``mirror``.

    Raises:
        VerificationError: bad/untrusted index, rollback, missing or altered part or chunk.
        BundleVerificationFailed: the staged bundle fails :func:`verify_bundle`.
    """
    mirror = Mirror.open(mirror.root, create=True)
    idx, index_bytes, _ = read_index(src, policy, mirror)
    digest = sha256_bytes(index_bytes)
    if _check_rollback(mirror, idx, digest):
        remove_at(mirror.root, f"tmp/import-{digest[:24]}")
        return ImportResult(idx.bundle, idx.version, "unchanged", digest, None)
    if idx.chunk_size is not None:
        _check_chunks(src, idx)
    revocations, index_revoked = _index_revocations(idx, policy)
    # Staging is held by one importer at a time (a second one waits, then finds the set
    # imported or resumes the staged bytes); the mirror lock is taken only to commit.
    with staging_lock(mirror):
        return _import_locked(src, mirror, policy, idx, index_bytes, digest, revocations,
                              index_revoked, progress)


def _import_locked(src: Path, mirror: Mirror, policy: TrustPolicy, idx: TransferIndex,
                   index_bytes: bytes, digest: str, revocations: list[dict[str, Any]],
                   index_revoked: dict[str, str], progress: Progress | None) -> ImportResult:
    staging_dir = mirror.tmp_dir / f"import-{digest[:24]}"
    if _check_rollback(mirror, idx, digest):
        remove_at(mirror.root, f"tmp/{staging_dir.name}")  # a run killed after its commit
        return ImportResult(idx.bundle, idx.version, "unchanged", digest, None)
    # a link planted as the staging folder is refused: Mirror() resolves its root, and a
    # disk error removes the whole staging tree
    staging = Mirror.open(real_dir(mirror.root, f"tmp/{staging_dir.name}"), create=True)
    with discard_on_disk_error(staging, sum(p.size for p in idx.parts)):
        hashed = _stage(src, idx, staging, mirror, progress)
    _faults.point("import.staged")
    revoked = revoked_fingerprints(mirror, policy, index_revoked)
    # Only a manifest whose signature checks out may name the paths snapshots are built at.
    man, _, problems = open_manifest(staging, idx.bundle, policy, revoked)
    if man is None:
        raise BundleVerificationFailed(VerificationReport(
            idx.bundle, policy.digest, utc_now(), {}, {}, {}, 0, 0, tuple(problems)))
    try:
        for art in man.record.artifacts:
            staging.link_snapshot(art)
    except MirrorError as err:
        raise VerificationError(f"transfer set is incomplete: {err.message}") from err
    verified = verify_bundle(staging, idx.bundle, policy, hashed=hashed, progress=progress,
                             revoked=revoked, floors_of=mirror)
    repos = {a.repo for a in verified.record.artifacts}
    if verified.name != idx.bundle or not repos <= _index_repos(index_bytes):
        raise VerificationError("the signed manifest names another bundle or other repos "
                                "than the transfer index")
    with mirror.lock():
        _check_rollback(mirror, idx, digest)  # another import may have won meanwhile
        _check_floor(mirror)
        log = log_state(mirror, policy, index_revoked)  # the operator's log floor, revocations
        if rolled := floors.bundle_problem(policy, mirror, idx.bundle, verified.version,
                                           verified.manifest_digest):
            raise VerificationError(f"bundle {idx.bundle!r}: {rolled.message}")
        cur = versions.current_version(mirror, idx.bundle)
        if cur is not None and cur > verified.version:
            raise VerificationError(f"rollback refused: {idx.bundle!r} is at bundle version "
                                    f"{cur}, this set carries version {verified.version}")
        _commit(staging, mirror, idx, index_bytes, verified, revocations)
        floors.raise_floors(policy, mirror,
                            bundle=(idx.bundle, verified.version, verified.manifest_digest),
                            head=read_chain(mirror.events_path)[1],
                            revoked=log.from_log | index_revoked)
    remove_at(mirror.root, f"tmp/{staging.root.name}")
    return ImportResult(idx.bundle, idx.version, "imported", digest, verified.report)


def _index_repos(index_bytes: bytes) -> set[str]:
    env = Envelope.from_json(loads_json(index_bytes, what=INDEX_FILE))
    return {s.name for s in parse_statement(env.payload).subjects if "sha256" in s.digest}
