"""THE SEAM, pull side: stage what came from a registry, verify it, only then commit it.

The same sequence as :mod:`specbundle.transfer.importer`, reusing its pieces: under the
importer's staging lock, everything is written into a staging mirror under
``<mirror>/tmp/oci-<digest>/``: objects through :func:`specbundle.verify.write_hashed` (each
byte hashed once, as it streams, and refused unless it matches the descriptor), the signed
bundle manifest as version N with its ``current`` ref, the version's model.sig, scan report
and image records, the attestation lines. Snapshots are built from the *signed* manifest's
record (nothing carried unsigned names a path), and :func:`specbundle.verify.verify_bundle`
checks the staged version exactly as it will be used, with the mirror's revocations. Only
then, under the mirror lock, :func:`~specbundle.transfer.importer.commit_version` writes the
version and flips ``current`` last; an older version than the mirror's is a rollback and a
different manifest for the same version a conflict, both refused.

Signed material arrives as referrers anyone with push rights could add, so candidates are
sorted here: a bundle manifest no unrevoked policy key scoped to its name and repos signed,
a model.sig that no policy key opens and a DSSE line no trusted key signed are *ignored*
(reported, never staged); without an acceptable manifest nothing is staged and the pull fails
closed; a model.sig is still staged when no candidate opens, so verify reports the problem.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specbundle import _faults, ids
from specbundle._fsutil import mkdir_at, open_dir, real_dir, remove_at, rmtree_at
from specbundle.attest import (
    ATTESTATIONS_FILE,
    Envelope,
    check_envelope,
    check_statement,
    open_model_sig,
    parse_statement,
)
from specbundle.attest.manifest import BUNDLE_MANIFEST_V1, BundleManifest, parse_manifest
from specbundle.errors import DiskError, MirrorError, VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.mirror.eventlog import read_chain
from specbundle.mirror.versions import SCAN_REPORT, model_sig_rel
from specbundle.strict import MalformedDocument, loads_json
from specbundle.transfer.importer import CommitPoints, check_log_floor, commit_version
from specbundle.transfer.staging import discard_on_disk_error, staging_lock
from specbundle.verify import (
    HashedFile,
    TrustPolicy,
    VerifiedBundle,
    floors,
    verify_bundle,
    write_hashed,
)
from specbundle.verify.anchors import open_anchored
from specbundle.verify.eligibility import eligible_keys, eligible_signers
from specbundle.verify.policy import TrustedKey
from specbundle.verify.revocations import revoked_fingerprints

__all__ = ["Fetched", "StageResult", "stage_and_commit", "staged_copy"]

_faults.register("oci.pull-object-staged", "oci.pull-object-committed", "oci.pull-files-written",
                 "oci.pull-objects-moved", "oci.pull-attestations-appended", "oci.pull-logged")
_POINTS = CommitPoints("oci.pull-objects-moved", "oci.pull-files-written",
                       "oci.pull-attestations-appended", "oci.pull-object-committed",
                       "oci.pull-logged")

OpenBlob = Callable[[str, int], AbstractContextManager[Iterator[bytes]]]
Progress = Callable[[int], None]


@dataclass(frozen=True)
class Fetched:
    """What pull read from the store, all of it still unverified."""

    source: str                           # digest of the bundle index (names the staging dir)
    meta_files: dict[str, bytes]          # bundle-relative path (versions/<N>/...) -> bytes
    model_sigs: dict[str, list[bytes]]    # role -> candidate model.sig bytes
    envelopes: list[bytes]                # candidate DSSE lines (manifests too), in push order
    objects: dict[str, int]               # sha256 hex -> size the store declares
    version: int | None = None            # the version the metadata manifest says it carries


@dataclass(frozen=True)
class StageResult:
    """The committed bundle and what was left out."""

    verified: VerifiedBundle
    status: str                            # "pulled" or "unchanged"
    objects_fetched: int
    bytes_fetched: int
    attestations_added: int
    ignored: tuple[str, ...] = field(default=())


def _predicate_type(line: bytes) -> str | None:
    """The payload's predicate type, unverified: only sorts manifests from log lines."""
    try:
        env = Envelope.from_json(loads_json(line, what="attestation"))
        return parse_statement(env.payload, typed=False).predicate_type
    except (MalformedDocument, VerificationError, ValueError, KeyError, TypeError,
            AttributeError):
        return None


def _pick_manifest(cands: list[bytes], want: int | None, policy: TrustPolicy,
                   revoked: Mapping[str, str], ignored: list[str]
                   ) -> tuple[BundleManifest, bytes]:
    """The one signed manifest an unrevoked policy key scoped to its name and repos signed."""
    good: list[tuple[int, BundleManifest, bytes]] = []
    why: list[str] = []
    for i, data in enumerate(cands):
        who = f"bundle manifest referrer #{i + 1}"
        try:
            cs = check_statement(Envelope.from_json(loads_json(data, what="bundle manifest")),
                                 policy.public_keys)
            if not cs.signers:
                raise VerificationError("not signed by a key of the trust policy")
            man = parse_manifest(cs.statement, cs.check.payload)
        except (MalformedDocument, VerificationError) as err:
            why.append(f"{who}: {err}")
            continue
        gone = sorted(cs.signers & revoked.keys())
        ok = eligible_signers(policy, cs.signers, bundle=man.bundle, repos=man.repos,
                              revoked=revoked).counted
        if not ok:
            why.append(f"{who}: signed by key {gone[0][:16]}…, {revoked[gone[0]]}" if gone
                       else f"{who}: no signer may sign bundle {man.bundle!r} with repos "
                            f"{', '.join(man.repos)}")
        elif want is not None and man.version != want:
            why.append(f"{who}: version {man.version}, the artifact carries version {want}")
        else:
            good.append((len(ok), man, data))
    if not good:
        raise VerificationError("the artifact carries no bundle manifest signed by a key the "
                                "policy trusts for it" + (f": {'; '.join(why)}" if why else ""))
    if len({m.digest for _, m, _ in good}) > 1:
        raise VerificationError(f"the artifact carries {len(good)} different trusted manifests "
                                f"for bundle {good[0][1].bundle!r}; refusing to choose")
    good.sort(key=lambda g: -g[0])  # the same statement: the copy with most eligible signers
    ignored += why
    return good[0][1], good[0][2]


def _version_files(meta: dict[str, bytes], man: BundleManifest) -> dict[str, bytes]:
    """The carried files of version N, each one the manifest signs (verify checks digests)."""
    allowed = {SCAN_REPORT} | {f"images/{e}.json" for e in man.images}
    out: dict[str, bytes] = {}
    prefix = versions.version_rel(man.version) + "/"
    for rel, data in sorted(meta.items()):
        inner = rel.removeprefix(prefix)
        try:
            ids.check_rel_path(rel)
            if inner == rel or inner not in allowed:
                raise ValueError(f"not a signed file of version {man.version}")
        except ValueError as err:
            raise VerificationError(f"bundle file {rel[:200]!r} is refused: {err}") from None
        out[inner] = data
    return out


def _opens(data: bytes, keys: list[TrustedKey]) -> bool:
    for k in keys:
        try:
            open_model_sig(data, k.public)
        except VerificationError:
            continue
        return True
    return False


def _anchored(policy: TrustPolicy, data: bytes, repo: str, name: str) -> bool:
    """A certificate-signed model.sig an eligible anchor role opens (verify re-checks it)."""
    try:
        return open_anchored(policy.model_anchors, data, repo, name, None) is not None
    except VerificationError:
        return False


def _pick_sig(role: str, repo: str, name: str, cands: list[bytes], policy: TrustPolicy,
              revoked: Mapping[str, str], ignored: list[str]) -> bytes | None:
    may = eligible_keys(policy, bundle=name, repos=(repo,), revoked=revoked, model=True)
    keys = [k for k in policy.keys if k.fingerprint in may]
    for i, data in enumerate(cands):
        if _opens(data, keys) or _anchored(policy, data, repo, name):
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


def _stage_objects(staging: Mirror, mirror: Mirror, man: BundleManifest, fetched: Fetched,
                   open_blob: OpenBlob, progress: Progress | None, workers: int,
                   abort: Callable[[], None] | None = None) -> tuple[list[HashedFile], int]:
    """Stage every object the manifest names; downloads run ``workers`` at a time (network,
    hashing and fsync of different objects overlap, as skopeo's parallel layer copies do)."""
    rec = man.record
    todo: list[tuple[str, int]] = []
    recorded = {f.sha256: f.size for a in rec.artifacts for f in a.files}
    for sha in sorted(rec.referenced_blobs()):
        size = fetched.objects.get(sha)
        if size is None:
            raise VerificationError(f"the manifest names object {sha}, which the artifact lacks")
        if recorded.get(sha, size) != size:  # before a byte is fetched: no disk-filling layer
            raise VerificationError(f"object {sha} is {recorded[sha]} B in the manifest but "
                                    f"{size} B in the artifact")
        if staging.has_object(sha, size):
            continue
        if mirror.has_object(sha, size):
            try:
                with open_dir(staging.root, f"objects/sha256/{sha[:2]}") as dfd:
                    os.link(mirror.object_path(sha), sha, dst_dir_fd=dfd)  # re-hashed by verify
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
    pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="oci-pull")
    try:
        hashed = list(pool.map(fetch, todo))
    except BaseException:
        # Ctrl-C or a failed blob: shut the running reads now (a stalled one included);
        # staged objects stay for the rerun
        if abort is not None:
            abort()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
    return hashed, sum(size for _, size in todo)


def _counting(blocks: Iterator[bytes], progress: Progress | None) -> Iterator[bytes]:
    for b in blocks:
        if progress:
            progress(len(b))
        yield b


def _write_version(staging: Mirror, mirror: Mirror, man: BundleManifest, man_bytes: bytes,
                   files: dict[str, bytes], sigs: dict[str, bytes], lines: list[bytes]) -> None:
    """Lay the version out in staging as the mirror will hold it (paths from ``man`` only)."""
    name, v = man.bundle, man.version
    versions.write_manifest(staging, name, v, man_bytes)
    for role, sig in sigs.items():
        staging.write_bundle_file(name, versions.version_rel(v, model_sig_rel(role)), sig)
    for inner, data in files.items():
        staging.write_bundle_file(name, versions.version_rel(v, inner), data)
        staging.write_bundle_file(name, inner, data)  # the working copy, as import leaves it
    staging.write_bundle_file(name, ATTESTATIONS_FILE, b"".join(ln + b"\n" for ln in lines))
    # the mirror's previous version (a flipped one, never a crashed writer's leftover), so
    # verify checks the chain the commit will create
    cur = versions.current_version(mirror, name)
    prev = versions.read_manifest(mirror, name, v - 1) if cur is not None and 1 < v <= cur + 1 \
        else None
    if prev is not None:
        versions.write_manifest(staging, name, v - 1, prev)
    staging.write_bundle_file(name, versions.CURRENT_REF, f"{v}\n".encode())


def _unchanged(mirror: Mirror, verified: VerifiedBundle, man_bytes: bytes,
               lines: list[bytes]) -> bool:
    """This very version is current, its record saved, and no attestation line is new."""
    name = verified.name
    if versions.current_version(mirror, name) != verified.version \
            or versions.read_manifest(mirror, name, verified.version) != man_bytes:
        return False
    try:
        if mirror.load_bundle(name) != verified.record:
            return False
    except MirrorError:
        return False
    have = set((mirror.read_bundle_file(name, ATTESTATIONS_FILE) or b"").splitlines())
    return all(ln in have for ln in lines)


def _logged(mirror: Mirror, name: str, manifest_sha256: str) -> bool:
    """Whether the log records this version's arrival (an oci-pull or an import of it)."""
    return any(ev.get("bundle") == name and ev.get("type") in ("oci-pull", "import")
               and isinstance(ev.get("data"), dict)
               and ev["data"].get("manifest_sha256") == manifest_sha256
               for ev in mirror.read_events())


def _check_version(mirror: Mirror, name: str, v: int, man_bytes: bytes) -> None:
    """Refuse a rollback, or another manifest for a version the mirror holds (lock held)."""
    cur = versions.current_version(mirror, name)
    if cur is not None and cur > v:
        raise VerificationError(f"rollback refused: {name!r} is at bundle version {cur}, the "
                                f"artifact carries version {v}")
    if cur == v and versions.read_manifest(mirror, name, v) != man_bytes:
        raise VerificationError(f"mirror already holds another version {v} of {name!r}; "
                                "versions are immutable", hint="pull into another mirror")


@dataclass(frozen=True)
class _Picked:
    """What of ``fetched`` the policy lets in: the manifest, its files, sigs and lines."""

    man: BundleManifest
    man_bytes: bytes
    files: dict[str, bytes]
    sigs: dict[str, bytes]
    lines: list[bytes]
    revoked: Mapping[str, str]
    ignored: list[str]


def _pick(mirror: Mirror, fetched: Fetched, policy: TrustPolicy) -> _Picked:
    ignored: list[str] = []
    revoked = revoked_fingerprints(mirror, policy)
    manifests = [ln for ln in fetched.envelopes if _predicate_type(ln) == BUNDLE_MANIFEST_V1]
    man, man_bytes = _pick_manifest(manifests, fetched.version, policy, revoked, ignored)
    files = _version_files(fetched.meta_files, man)
    sigs: dict[str, bytes] = {}
    for art in man.record.artifacts:
        sig = _pick_sig(art.role, art.repo, man.bundle, fetched.model_sigs.get(art.role, []),
                        policy, revoked, ignored)
        if sig is not None:
            sigs[art.role] = sig
    lines = _pick_envelopes([ln for ln in fetched.envelopes if ln not in manifests], policy,
                            ignored)
    return _Picked(man, man_bytes, files, sigs, lines, revoked, ignored)


def _stage_verified(staging: Mirror, mirror: Mirror, p: _Picked, fetched: Fetched,
                    policy: TrustPolicy, open_blob: OpenBlob, progress: Progress | None,
                    workers: int, abort: Callable[[], None] | None
                    ) -> tuple[VerifiedBundle, int, int]:
    """Lay the version out in ``staging`` and verify it there against ``mirror``'s floors
    and revocations: (verified, objects fetched, bytes fetched)."""
    man = p.man
    with discard_on_disk_error(staging, sum(fetched.objects.values())):
        _write_version(staging, mirror, man, p.man_bytes, p.files, p.sigs, p.lines)
        hashed, nbytes = _stage_objects(staging, mirror, man, fetched, open_blob, progress,
                                        workers, abort)
    try:
        for art in man.record.artifacts:
            staging.link_snapshot(art)
    except MirrorError as err:
        raise VerificationError(f"artifact is incomplete: {err.message}") from err
    verified = verify_bundle(staging, man.bundle, policy, hashed=hashed, progress=progress,
                             revoked=p.revoked, floors_of=mirror)
    return verified, len(hashed), nbytes


@contextmanager
def staged_copy(mirror: Mirror, fetched: Fetched, policy: TrustPolicy, open_blob: OpenBlob,
                *, progress: Progress | None = None, workers: int = 4,
                abort: Callable[[], None] | None = None) -> Iterator[VerifiedBundle]:
    """``fetched`` staged and verified exactly as :func:`stage_and_commit` would, then
    handed out (a private staging mirror under ``mirror``'s ``tmp/``) instead of committed:
    to look at a version before it is pulled. Removed on exit; ``mirror`` is not changed.

    Raises:
        VerificationError: as :func:`stage_and_commit` (the trust state's rollback floors
            apply as verify applies them; only the commit's own version checks do not).
        BundleVerificationFailed: the staged bundle fails verification (exit 3).
    """
    picked = _pick(mirror, fetched, policy)
    with _look_room(mirror) as root:
        staging = Mirror.open(root, create=True)
        yield _stage_verified(staging, mirror, picked, fetched, policy, open_blob, progress,
                              workers, abort)[0]


@contextmanager
def _look_room(mirror: Mirror) -> Iterator[Path]:
    """A private staging folder under the mirror's ``tmp/`` (objects it holds are linked, not
    fetched), or in the system's temp folder where the mirror is read-only or full (a
    deployment node): looking never needs write access to the mirror. Removed on exit."""
    try:
        with open_dir(mirror.root, "tmp") as tfd:  # never a link planted as tmp/
            look = mkdir_at(tfd, "look", mirror.root / "tmp")
    except DiskError:
        outside = Path(tempfile.mkdtemp(prefix="specbundle-look-"))
        try:
            yield outside
        finally:
            shutil.rmtree(outside, ignore_errors=True)
        return
    try:
        yield mirror.root / "tmp" / look
    finally:
        remove_at(mirror.root, f"tmp/{look}")


def stage_and_commit(mirror: Mirror, fetched: Fetched, policy: TrustPolicy, open_blob: OpenBlob,
                     *, progress: Progress | None = None, workers: int = 4,
                     abort: Callable[[], None] | None = None) -> StageResult:
    """Stage, verify with :func:`verify_bundle`, then commit ``fetched`` into ``mirror``.

    Raises:
        VerificationError: no trusted manifest, a blob that does not match its digest, an
            unsafe or unsigned file, a rollback or a conflicting version (exit 3).
        BundleVerificationFailed: the staged bundle fails verification (exit 3).
    """
    p = _pick(mirror, fetched, policy)
    man, man_bytes, lines, name = p.man, p.man_bytes, p.lines, p.man.bundle
    with staging_lock(mirror):
        with mirror.lock():
            _check_version(mirror, name, man.version, man_bytes)  # fail before fetching
        staging = Mirror.open(real_dir(  # never a link planted as the staging folder
            mirror.root, f"tmp/oci-{fetched.source.removeprefix('sha256:')[:24]}"), create=True)
        with open_dir(staging.root, "bundles") as bfd:  # objects resume, not files
            rmtree_at(bfd, staging.bundle_dir(name).name)
        verified, nobjects, nbytes = _stage_verified(staging, mirror, p, fetched, policy,
                                                     open_blob, progress, workers, abort)
        with mirror.lock():
            check_log_floor(mirror)
            _check_version(mirror, name, verified.version, man_bytes)  # another writer won?
            unchanged = _unchanged(mirror, verified, man_bytes, lines)
            added = 0
            event = {"index": fetched.source, "bundle_version": verified.version,
                     "manifest_sha256": verified.manifest_digest,
                     "target": verified.record.target.commit,
                     "draft": verified.record.draft.commit if verified.record.draft else None}
            if not unchanged:
                versions.reclaim_unflipped(mirror, name)  # a crashed writer's version folders
                added = commit_version(staging, mirror, verified, points=_POINTS,
                                       event=("oci-pull", event))
                floors.raise_floors(policy, mirror, bundle=(
                    name, verified.version, verified.manifest_digest),
                    head=read_chain(mirror.events_path)[1])
            elif not _logged(mirror, name, verified.manifest_digest):
                # committed by a run whose event was lost (an older release logged last)
                mirror.append_event("oci-pull", name, {**event, "attestations_added": 0})
        remove_at(mirror.root, f"tmp/{staging.root.name}")
    return StageResult(verified, "unchanged" if unchanged else "pulled", nobjects, nbytes,
                       added, tuple(p.ignored))
