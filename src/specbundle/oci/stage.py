"""THE SEAM, pull side: stage what came from a registry, verify it, only then commit it.

The same sequence as :mod:`specbundle.transfer.importer`: objects are written into a staging
mirror under ``<mirror>/tmp/oci-<digest>/`` through :func:`specbundle.verify.write_hashed`
(each byte hashed once, as it streams, and refused unless it matches the descriptor), the
record, model.sig and attestation lines are written beside them, snapshots are linked, and
:func:`specbundle.verify.verify_bundle` checks the staged bundle against the trust policy.
Only then, under the mirror lock, is anything renamed into the mirror, record last.

Signed material arrives as referrers anyone with push rights could add, so candidates are
sorted here: a model.sig that no policy key opens and a DSSE line no trusted key signed are
*ignored* (reported, never staged); a model.sig is still staged when no candidate opens, so
verify reports the real problem and the pull fails closed.

When the custody manifest lands, re-point :func:`stage_and_commit` at it: stage the manifest
as one more signed file and let its verifier replace ``verify_bundle``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from specbundle import _faults
from specbundle._fsutil import fsync_dir
from specbundle.attest import ATTESTATIONS_FILE, Envelope, check_envelope, open_model_sig
from specbundle.errors import MirrorError, VerificationError
from specbundle.mirror import Mirror
from specbundle.oci.media import safe_rel
from specbundle.record import BundleRecord, Role
from specbundle.sign import model_sig_rel
from specbundle.strict import MalformedDocument, loads_json
from specbundle.verify import HashedFile, TrustPolicy, VerifiedBundle, verify_bundle, write_hashed

__all__ = ["Fetched", "StageResult", "stage_and_commit"]

_faults.register("oci.pull-object-staged", "oci.pull-object-committed", "oci.pull-files-written")

OpenBlob = Callable[[str, int], AbstractContextManager[Iterator[bytes]]]
Progress = Callable[[int], None]
_RESERVED = ("export/", "import/", "oci/", "sign/", ATTESTATIONS_FILE)


@dataclass(frozen=True)
class Fetched:
    """What pull read from the store, all of it still unverified."""

    source: str                           # digest of the bundle index (names the staging dir)
    meta_files: dict[str, bytes]          # bundle-relative path -> bytes, bundle.json included
    model_sigs: dict[str, list[bytes]]    # role -> candidate model.sig bytes
    envelopes: list[bytes]                # candidate attestation lines, in push order
    objects: dict[str, int]               # sha256 hex -> size the store declares


@dataclass(frozen=True)
class StageResult:
    """The committed bundle and what was left out."""

    verified: VerifiedBundle
    status: str                            # "pulled" or "unchanged"
    objects_fetched: int
    bytes_fetched: int
    attestations_added: int
    ignored: tuple[str, ...] = field(default=())


def _record(meta: dict[str, bytes]) -> BundleRecord:
    raw = meta.get("bundle.json")
    if raw is None:
        raise VerificationError("the artifact carries no bundle record (bundle.json)")
    try:
        return BundleRecord.from_json(loads_json(raw, what="bundle.json"))
    except (MalformedDocument, MirrorError, KeyError, TypeError, ValueError,
            AttributeError) as err:
        raise VerificationError(f"bundle record is malformed: {err}") from None


def _pick_sig(role: str, repo: str, name: str, cands: list[bytes], policy: TrustPolicy,
              ignored: list[str]) -> bytes | None:
    keys = [k for k in policy.keys if k.fingerprint in policy.model_signers
            and k.may_sign(repo, name)]
    for i, data in enumerate(cands):
        for k in keys:
            try:
                open_model_sig(data, k.public)
            except VerificationError:
                continue
            ignored += [f"{role} model.sig referrer #{j + 1}: no trusted key opens it"
                        for j in range(len(cands)) if j != i]
            return data
    return cands[0] if cands else None


def _pick_envelopes(lines: list[bytes], policy: TrustPolicy, ignored: list[str]) -> list[bytes]:
    keep = []
    for i, line in enumerate(lines):
        try:
            env = Envelope.from_json(loads_json(line, what="attestation"))
            signers = check_envelope(env, policy.public_keys).signers
        except (MalformedDocument, VerificationError) as err:
            ignored.append(f"attestation referrer #{i + 1}: {err}")
            continue
        if not signers:
            ignored.append(f"attestation referrer #{i + 1}: not signed by a trusted key")
            continue
        keep.append(line.strip())
    return keep


def _stage_objects(staging: Mirror, mirror: Mirror, rec: BundleRecord, fetched: Fetched,
                   open_blob: OpenBlob, progress: Progress | None, workers: int
                   ) -> tuple[list[HashedFile], int]:
    """Stage every object the record names; downloads run ``workers`` at a time (network,
    hashing and fsync of different objects overlap, as skopeo's parallel layer copies do)."""
    todo: list[tuple[str, int]] = []
    recorded = {f.sha256: f.size for a in rec.artifacts for f in a.files}
    for sha in sorted(rec.referenced_blobs()):
        size = fetched.objects.get(sha)
        if size is None:
            raise VerificationError(f"the record names object {sha}, which the artifact lacks")
        if recorded.get(sha, size) != size:  # before a byte is fetched: no disk-filling layer
            raise VerificationError(f"object {sha} is {recorded[sha]} B in the record but "
                                    f"{size} B in the artifact")
        if staging.has_object(sha, size):
            continue
        if mirror.has_object(sha, size):
            dest = staging.object_path(sha)
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(mirror.object_path(sha), dest)  # verify_bundle re-hashes it
                continue
            except OSError:
                pass
        todo.append((sha, size))

    def fetch(item: tuple[str, int]) -> HashedFile:
        sha, size = item
        tmp = staging.tmp_dir / f"{sha}.staged"
        with open_blob(f"sha256:{sha}", size) as blocks:
            got = write_hashed(_counting(blocks, progress), tmp)
        if got.sha256 != sha or got.size != size:
            tmp.unlink(missing_ok=True)
            raise VerificationError(f"blob sha256:{sha} from the store hashes to "
                                    f"sha256:{got.sha256} ({got.size} B): refused")
        staging.put_object(tmp, sha)
        _faults.point("oci.pull-object-staged")
        return got

    todo.sort(key=lambda t: -t[1])  # big first: best overlap
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="oci-pull") as pool:
        hashed = list(pool.map(fetch, todo))
    return hashed, sum(size for _, size in todo)


def _counting(blocks: Iterator[bytes], progress: Progress | None) -> Iterator[bytes]:
    for b in blocks:
        if progress:
            progress(len(b))
        yield b


def _commit(staging: Mirror, mirror: Mirror, rec: BundleRecord, source: str) -> int:
    """Rename objects in, link snapshots, write files, append new lines, record last."""
    for sha in sorted(rec.referenced_blobs()):
        if not mirror.has_object(sha):
            dest = mirror.object_path(sha)
            dest.parent.mkdir(parents=True, exist_ok=True)
            staging.object_path(sha).replace(dest)
            fsync_dir(dest.parent)
            _faults.point("oci.pull-object-committed")
    for art in rec.artifacts:
        mirror.link_snapshot(art)
    sroot = staging.bundle_dir(rec.name)
    for p in sorted(sroot.rglob("*")):
        rel = p.relative_to(sroot).as_posix()
        if p.is_file() and rel not in ("bundle.json", ATTESTATIONS_FILE):
            mirror.write_bundle_file(rec.name, rel, p.read_bytes())
    new = staging.read_bundle_file(rec.name, ATTESTATIONS_FILE) or b""
    old = mirror.read_bundle_file(rec.name, ATTESTATIONS_FILE) or b""
    have = set(old.splitlines())
    add = [ln for ln in new.splitlines() if ln and ln not in have]
    if add:
        prefix = b"\n" if old and not old.endswith(b"\n") else b""
        mirror.write_bundle_file(rec.name, ATTESTATIONS_FILE,
                                 old + prefix + b"\n".join(add) + b"\n")
    _faults.point("oci.pull-files-written")
    mirror.save_bundle(rec)
    mirror.append_event("oci-pull", rec.name, {
        "index": source, "target": rec.target.commit,
        "draft": rec.draft.commit if rec.draft else None, "attestations_added": len(add)})
    return len(add)


def stage_and_commit(mirror: Mirror, fetched: Fetched, policy: TrustPolicy, open_blob: OpenBlob,
                     *, progress: Progress | None = None, workers: int = 4) -> StageResult:
    """Stage, verify with :func:`verify_bundle`, then commit ``fetched`` into ``mirror``.

    Raises:
        VerificationError: a malformed or conflicting record, a blob that does not match its
            digest, an unsafe path (exit 3).
        BundleVerificationFailed: the staged bundle fails verification (exit 3).
    """
    rec = _record(fetched.meta_files)
    existing = mirror.read_bundle_file(rec.name, "bundle.json")
    if existing is not None and _record({"bundle.json": existing}) != rec:
        raise VerificationError(f"mirror already holds a different bundle named {rec.name!r}; "
                                "refusing to replace it", hint="pull into another mirror")
    ignored: list[str] = []
    staging = Mirror.open(
        mirror.tmp_dir / f"oci-{fetched.source.removeprefix('sha256:')[:24]}", create=True)
    for rel, data in sorted(fetched.meta_files.items()):
        safe_rel(rel, "bundle file")
        if rel.startswith(_RESERVED):
            raise VerificationError(f"bundle file {rel!r} is in a reserved place")
        if rel != "bundle.json":
            staging.write_bundle_file(rec.name, rel, data)
    for art in rec.artifacts:
        role: Role = art.role
        sig = _pick_sig(role, art.repo, rec.name, fetched.model_sigs.get(role, []), policy,
                        ignored)
        if sig is not None:
            staging.write_bundle_file(rec.name, model_sig_rel(role), sig)
    lines = _pick_envelopes(fetched.envelopes, policy, ignored)
    staging.write_bundle_file(rec.name, ATTESTATIONS_FILE,
                              b"".join(ln + b"\n" for ln in lines))
    hashed, nbytes = _stage_objects(staging, mirror, rec, fetched, open_blob, progress, workers)
    with staging.lock():
        staging.save_bundle(rec)
    try:
        for art in rec.artifacts:
            staging.link_snapshot(art)
    except MirrorError as err:
        raise VerificationError(f"artifact is incomplete: {err.message}") from err
    verified = verify_bundle(staging, rec.name, policy, hashed=hashed, progress=progress)
    with mirror.lock():
        unchanged = existing is not None and _same_log(mirror, staging, rec.name)
        added = 0 if unchanged else _commit(staging, mirror, rec, fetched.source)
    shutil.rmtree(staging.root, ignore_errors=True)
    return StageResult(verified, "unchanged" if unchanged else "pulled", len(hashed), nbytes,
                       added, tuple(ignored))


def _same_log(mirror: Mirror, staging: Mirror, name: str) -> bool:
    old = set((mirror.read_bundle_file(name, ATTESTATIONS_FILE) or b"").splitlines())
    new = set((staging.read_bundle_file(name, ATTESTATIONS_FILE) or b"").splitlines())
    return new <= old
