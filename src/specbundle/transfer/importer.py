"""Bring a transfer set into a mirror on the isolated side: verify all, then commit. No network.

1. ``index.json`` must verify under a policy key scoped to the bundle (or its target repo),
   and its version must not be older than the last import of that bundle (rollback refused;
   the same version with different content is refused too).
2. Every chunk (if split) and every part is hashed against the index while it is copied into a
   *staging mirror* under ``<mirror>/tmp/import-<index digest>/``; parts verified by an
   interrupted run are kept there, so a rerun resumes.
3. The staged bundle is verified with :func:`specbundle.verify.verify_bundle` (signatures,
   file set, thresholds) exactly as it will be used. The copy in step 2 goes through
   :func:`~specbundle.verify.write_hashed`, whose records let verify use the digest of the
   very bytes written instead of reading them a second time (one pass over the data); objects
   staged by an earlier run or linked from the mirror are re-hashed by verify.
4. Only then, under the mirror lock: objects are renamed into the store, snapshots linked,
   stage files written, new attestation lines appended, and the bundle record written last.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specbundle._fsutil import fsync_dir
from specbundle.attest import (
    ATTESTATIONS_FILE,
    Envelope,
    attestations_path,
    check_statement,
    parse_statement,
)
from specbundle.digest import hash_file, sha256_bytes
from specbundle.errors import MirrorError, VerificationError
from specbundle.mirror import Mirror
from specbundle.transfer.chunks import CHUNK_DIR, read_blocks, read_range
from specbundle.transfer.index import INDEX_FILE, Part, TransferIndex
from specbundle.verify import (
    HashedFile,
    TrustPolicy,
    VerifiedBundle,
    hash_existing,
    verify_bundle,
    write_hashed,
)

__all__ = ["IMPORT_STATE", "ImportResult", "import_bundle", "read_index"]

IMPORT_STATE = "import/state.json"
Progress = Callable[[int], None]


@dataclass(frozen=True)
class ImportResult:
    """Outcome: ``imported`` (committed now) or ``unchanged`` (this exact index was already in)."""

    bundle: str
    version: int
    status: Literal["imported", "unchanged"]
    index_sha256: str
    verified: VerifiedBundle | None


def read_index(src: Path, policy: TrustPolicy) -> tuple[TransferIndex, bytes, frozenset[str]]:
    """Verify and parse ``index.json``; returns the index, its bytes and the trusted signers."""
    try:
        data = (src / INDEX_FILE).read_bytes()
        env = Envelope.from_json(json.loads(data))
    except FileNotFoundError as err:
        raise VerificationError(f"{src} has no {INDEX_FILE}: not a complete transfer set") from err
    except ValueError as err:
        raise VerificationError(f"{src / INDEX_FILE} is not JSON: {err}") from err
    cs = check_statement(env, policy.public_keys)
    idx = TransferIndex.from_statement(parse_statement(cs.check.payload))
    repos = {s.name for s in cs.statement.subjects if "sha256" in s.digest}
    allowed = {k.fingerprint for k in policy.keys
               if k.may_sign(idx.bundle, idx.bundle) or any(k.may_sign(r, idx.bundle)
                                                             for r in repos)}
    signers = cs.signers & allowed
    if not signers:
        raise VerificationError(
            f"transfer index of {idx.bundle!r} is not signed by a key the policy trusts for it"
            + (f": {'; '.join(cs.check.problems)}" if cs.check.problems else ""))
    return idx, data, signers


def _check_rollback(mirror: Mirror, idx: TransferIndex, digest: str) -> bool:
    """True if this exact index is already imported; raises on a rollback or a conflict."""
    raw = mirror.read_bundle_file(idx.bundle, IMPORT_STATE)
    if raw is None:
        return False
    state = json.loads(raw)
    have = int(state["version"])
    if idx.version < have:
        raise VerificationError(f"rollback refused: {idx.bundle!r} is at index version {have}, "
                                f"this transfer set carries version {idx.version}")
    if idx.version == have and state["index_sha256"] != digest:
        raise VerificationError(f"index version {have} of {idx.bundle!r} was already imported "
                                "with different content; refusing the conflicting set")
    return idx.version == have and (mirror.bundle_dir(idx.bundle) / "bundle.json").is_file()


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


def _stage_part(src: Path, idx: TransferIndex, part: Part, dest: Path,
                progress: Progress | None) -> HashedFile:
    """Copy one part to ``dest``, hashing the bytes written; refuse it unless they match."""
    if dest.is_file() and not dest.is_symlink() and dest.stat().st_size == part.size:
        done = hash_existing(dest)
        if done.sha256 == part.sha256:
            return done  # verified by an interrupted earlier run
    if idx.chunk_size is not None and part.offset is not None:
        blocks: Iterable[bytes] = read_range(src, idx.chunk_size, part.offset, part.size,
                                             progress)
    else:
        p = src / part.path
        if not p.is_file() or p.is_symlink():
            raise VerificationError(f"transfer set lacks part {part.path}")
        blocks = read_blocks(p, progress)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    got = write_hashed(blocks, tmp)
    if got.size != part.size or got.sha256 != part.sha256:
        tmp.unlink()
        if idx.chunk_size is not None:
            _check_chunks(src, idx, content=True)
        raise VerificationError(f"part {part.path} differs from the index "
                                f"(expected {part.sha256}, {part.size} B; got {got.sha256}, "
                                f"{got.size} B)")
    tmp.replace(dest)
    return got


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
            tmp = staging.tmp_dir / f"{part.sha256}.staged"
            hashed.append(_stage_part(src, idx, part, tmp, progress))
            staging.put_object(tmp, part.sha256)  # a rename: same inode, same record
        else:
            _stage_part(src, idx, part, staging.bundle_dir(idx.bundle) / rest, progress)
    return hashed


def _link_existing(mirror: Mirror, staging: Mirror, part: Part) -> bool:
    """Reuse an object the mirror already holds (verify_bundle re-hashes it in staging)."""
    if not mirror.has_object(part.sha256, part.size):
        return False
    dest = staging.object_path(part.sha256)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(mirror.object_path(part.sha256), dest)
    except OSError:
        return False
    return True


def _commit(staging: Mirror, mirror: Mirror, idx: TransferIndex, index_bytes: bytes) -> None:
    rec = staging.load_bundle(idx.bundle)
    for sha in sorted(rec.referenced_blobs()):
        if not mirror.has_object(sha):
            dest = mirror.object_path(sha)
            dest.parent.mkdir(parents=True, exist_ok=True)
            staging.object_path(sha).replace(dest)  # same filesystem: a rename
            fsync_dir(dest.parent)
    for art in rec.artifacts:
        mirror.link_snapshot(art)
    sroot = staging.bundle_dir(idx.bundle)
    for p in sorted(sroot.rglob("*")):
        rel = p.relative_to(sroot).as_posix()
        if p.is_file() and rel not in ("bundle.json", ATTESTATIONS_FILE) \
                and not p.name.startswith("."):
            mirror.write_bundle_file(idx.bundle, rel, p.read_bytes())
    new = attestations_path(staging, idx.bundle)
    old = attestations_path(mirror, idx.bundle)
    have = set(old.read_bytes().splitlines()) if old.exists() else set()
    add = [ln for ln in (new.read_bytes().splitlines() if new.exists() else []) if ln
           and ln not in have]
    if add:
        prefix = b"\n" if old.exists() and not old.read_bytes().endswith(b"\n") else b""
        with old.open("ab") as fh:
            fh.write(prefix + b"\n".join(add) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    mirror.write_bundle_file(idx.bundle, "import/index.json", index_bytes)
    mirror.write_bundle_file(idx.bundle, IMPORT_STATE, json.dumps(
        {"version": idx.version, "index_sha256": sha256_bytes(index_bytes)}).encode())
    mirror.save_bundle(rec)
    mirror.append_event("import", idx.bundle, {
        "version": idx.version, "index_sha256": sha256_bytes(index_bytes),
        "target": rec.target.commit, "draft": rec.draft.commit if rec.draft else None,
        "attestations_added": len(add)})


def import_bundle(
    src: Path, mirror: Mirror, policy: TrustPolicy, *, progress: Progress | None = None,
) -> ImportResult:
    """Verify the transfer set in ``src`` completely, then commit it into ``mirror``.

    Raises:
        VerificationError: bad/untrusted index, rollback, missing or altered part or chunk.
        BundleVerificationFailed: the staged bundle fails :func:`verify_bundle`.
    """
    mirror = Mirror.open(mirror.root, create=True)
    idx, index_bytes, _ = read_index(src, policy)
    digest = sha256_bytes(index_bytes)
    if _check_rollback(mirror, idx, digest):
        return ImportResult(idx.bundle, idx.version, "unchanged", digest, None)
    if idx.chunk_size is not None:
        _check_chunks(src, idx)
    staging = Mirror.open(mirror.tmp_dir / f"import-{digest[:24]}", create=True)
    hashed = _stage(src, idx, staging, mirror, progress)
    try:
        for art in staging.load_bundle(idx.bundle).artifacts:
            staging.link_snapshot(art)
    except MirrorError as err:
        raise VerificationError(f"transfer set is incomplete: {err.message}") from err
    verified = verify_bundle(staging, idx.bundle, policy, hashed=hashed, progress=progress)
    if verified.name != idx.bundle:
        raise VerificationError("the staged record names another bundle than the index")
    with mirror.lock():
        _check_rollback(mirror, idx, digest)  # another import may have won meanwhile
        _commit(staging, mirror, idx, index_bytes)
    shutil.rmtree(staging.root, ignore_errors=True)
    return ImportResult(idx.bundle, idx.version, "imported", digest, verified)
