"""Pull a bundle from an OCI store (registry or layout) into a mirror, verified first.

Every document is hostile until the bundle verifies: manifests are read with a size limit,
hashed and compared with the digest that named them (the tag's index is pinned by the digest
computed here, and compared with the one asked for when pulling by digest), parsed with
:mod:`specbundle.strict`, and checked for the media and artifact types specbundle writes.
Blobs are hashed while they stream into the staging mirror. :mod:`specbundle.oci.stage`
verifies against the trust policy and commits; a tag that now names another index than the
last pull through it did is reported as moved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from specbundle._fsutil import json_bytes
from specbundle.errors import VerificationError
from specbundle.mirror import Mirror
from specbundle.oci.backend import Backend
from specbundle.oci.media import (
    ANN_LINE,
    ANN_ROLE,
    ANN_TITLE,
    ANN_VERSION,
    BUNDLE_ARTIFACT,
    BUNDLE_FILE,
    BUNDLE_INDEX_ARTIFACT,
    DOC,
    DSSE_ENVELOPE,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    MAX_MANIFEST_BYTES,
    MAX_META_BYTES,
    MODEL_ARTIFACT,
    OBJECT_LAYER,
    SIGSTORE_BUNDLE,
    WEIGHT,
    WEIGHT_CONFIG,
    Descriptor,
    safe_rel,
)
from specbundle.oci.stage import Fetched, StageResult, stage_and_commit, staged_copy
from specbundle.strict import MalformedDocument, load_json_file, loads_json
from specbundle.verify import TrustPolicy, VerifiedBundle

__all__ = ["PULL_STATE", "OciPullResult", "look_bundle", "pull_bundle"]

PULL_STATE = "oci/pulls.json"
Progress = Callable[[int], None]
_MODEL_LAYERS = (WEIGHT, WEIGHT_CONFIG, DOC)
_MAX_REFERRERS = 256


@dataclass(frozen=True)
class OciPullResult:
    """The committed bundle, the index digest it came from, and what was noticed."""

    bundle: str
    source: str
    index_digest: str
    staged: StageResult
    moved_from: str | None

    def to_json(self) -> dict[str, Any]:
        """JSON form (the CLI's --json)."""
        return {"bundle": self.bundle, "source": self.source, "index_digest": self.index_digest,
                "status": self.staged.status, "tag_moved_from": self.moved_from,
                "objects_fetched": self.staged.objects_fetched,
                "bytes_fetched": self.staged.bytes_fetched,
                "attestations_added": self.staged.attestations_added,
                "ignored_referrers": list(self.staged.ignored),
                "verification": self.staged.verified.report.to_json()}


def _parse(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = loads_json(data, max_bytes=MAX_MANIFEST_BYTES, what=what)
    except MalformedDocument as err:
        raise VerificationError(str(err)) from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise VerificationError(f"{what} is not an OCI schemaVersion 2 document")
    return doc


def _manifest(store: Backend, d: Descriptor, what: str) -> dict[str, Any]:
    """Fetch a manifest by digest, check size and digest, parse it."""
    if d.size > MAX_MANIFEST_BYTES:
        raise VerificationError(f"{what} is {d.size} bytes, over the manifest limit")
    data, _ = store.get_manifest(d.digest, MAX_MANIFEST_BYTES)
    if len(data) != d.size or f"sha256:{hashlib.sha256(data).hexdigest()}" != d.digest:
        raise VerificationError(f"{what} {d.digest} does not match its digest or size")
    doc = _parse(data, what)
    if doc.get("mediaType") != IMAGE_MANIFEST:
        raise VerificationError(f"{what} is not an OCI image manifest")
    return doc


def _layers(doc: dict[str, Any], what: str) -> list[Descriptor]:
    raw = doc.get("layers")
    if not isinstance(raw, list):
        raise VerificationError(f"{what} has no layers list")
    return [Descriptor.from_json(x, what) for x in raw]


def _small_blob(store: Backend, d: Descriptor, what: str) -> bytes:
    if d.size > MAX_META_BYTES:
        raise VerificationError(f"{what} is {d.size} bytes, over the {MAX_META_BYTES} limit")
    with store.open_blob(d.digest, d.size) as blocks:
        data = b"".join(blocks)
    if len(data) != d.size or f"sha256:{hashlib.sha256(data).hexdigest()}" != d.digest:
        raise VerificationError(f"{what} {d.digest} does not match its digest: refused")
    return data


def _referrers(store: Backend, subject: Descriptor, kind: str) -> list[tuple[Descriptor, bytes]]:
    """Each referrer of ``subject`` of artifact type ``kind`` and its one layer's bytes."""
    # a listing without artifactType (re-serialised by an old copier) is checked in the manifest
    found = [d for d in store.referrers(subject, MAX_MANIFEST_BYTES)
             if d.artifact_type in (kind, None)]
    if len(found) > _MAX_REFERRERS:
        raise VerificationError(f"{len(found)} referrers of {subject.digest}: over the limit")
    out = []
    for d in found:
        doc = _manifest(store, d, f"referrer {d.digest}")
        sub = doc.get("subject")
        layers = _layers(doc, f"referrer {d.digest}")
        if not isinstance(sub, dict) or sub.get("digest") != subject.digest \
                or doc.get("artifactType") != kind or len(layers) != 1 \
                or layers[0].media_type != kind:
            continue  # not ours, or not what it claims: nothing to stage
        out.append((d, _small_blob(store, layers[0], f"referrer {d.digest} layer")))
    return out


def _line(d: Descriptor) -> tuple[int, str]:
    n = d.annotations.get(ANN_LINE, "")
    return (int(n) if n.isdigit() and len(n) < 10 else 1 << 40, d.digest)


def _version(doc: dict[str, Any]) -> int | None:
    """The version the metadata manifest points at (unsigned: picks among signed manifests)."""
    ann = doc.get("annotations")
    raw = ann.get(ANN_VERSION) if isinstance(ann, dict) else None
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 9:
        raise VerificationError(f"bundle manifest names version {str(raw)[:20]!r}")
    return int(raw)


def _fetch(store: Backend, index_digest: str, index: dict[str, Any]) -> Fetched:
    # artifactType may be missing: skopeo 1.9 re-serialises an index without it. The index is
    # only a pointer; everything trusted comes from the verified bundle.
    if index.get("mediaType") != IMAGE_INDEX or \
            index.get("artifactType", BUNDLE_INDEX_ARTIFACT) != BUNDLE_INDEX_ARTIFACT:
        raise VerificationError("the reference is not a specbundle bundle index")
    raw = index.get("manifests")
    if not isinstance(raw, list) or len(raw) > 8:
        raise VerificationError("bundle index manifests list is malformed")
    by_role: dict[str, Descriptor] = {}
    for x in raw:
        d = Descriptor.from_json(x, "bundle index")
        role = d.annotations.get(ANN_ROLE, "")
        if role not in ("target", "draft", "bundle") or role in by_role \
                or d.media_type != IMAGE_MANIFEST:
            raise VerificationError(f"bundle index entry {d.digest} has role {role[:32]!r}")
        by_role[role] = d
    if "target" not in by_role or "bundle" not in by_role:
        raise VerificationError("bundle index lacks the target or the bundle manifest")
    objects: dict[str, int] = {}
    version: int | None = None
    sigs: dict[str, list[bytes]] = {}
    meta: dict[str, bytes] = {}
    for role, d in by_role.items():
        want = BUNDLE_ARTIFACT if role == "bundle" else MODEL_ARTIFACT
        doc = _manifest(store, d, f"{role} manifest")
        if doc.get("artifactType") != want:
            raise VerificationError(f"{role} manifest has artifactType "
                                    f"{str(doc.get('artifactType'))[:80]!r}, expected {want}")
        if role == "bundle":
            version = _version(doc)
        for layer in _layers(doc, f"{role} manifest"):
            if (role != "bundle" and layer.media_type in _MODEL_LAYERS) \
                    or (role == "bundle" and layer.media_type == OBJECT_LAYER):
                if objects.setdefault(layer.hex, layer.size) != layer.size:
                    raise VerificationError(f"blob {layer.digest} is listed with two sizes")
            elif role == "bundle" and layer.media_type == BUNDLE_FILE:
                rel = safe_rel(layer.annotations.get(ANN_TITLE, ""), "bundle file")
                if rel in meta:
                    raise VerificationError(f"bundle file {rel!r} is listed twice")
                meta[rel] = _small_blob(store, layer, f"bundle file {rel!r}")
            else:
                raise VerificationError(f"{role} manifest has a layer of unknown type "
                                        f"{layer.media_type[:80]!r}")
        if role != "bundle":
            sigs[role] = [b for _, b in _referrers(store, d, SIGSTORE_BUNDLE)]
    envs = sorted(_referrers(store, by_role["bundle"], DSSE_ENVELOPE), key=lambda r: _line(r[0]))
    return Fetched(index_digest, meta, sigs, [b for _, b in envs], objects, version)


def _fetch_reference(store: Backend, reference: str) -> Fetched:
    """The index ``reference`` names, pinned by the digest computed here, and what it lists."""
    data, _ = store.get_manifest(reference, MAX_MANIFEST_BYTES)
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    if reference.startswith("sha256:") and digest != reference:
        raise VerificationError(f"{store.name}@{reference} returned content hashing to {digest}")
    return _fetch(store, digest, _parse(data, "bundle index"))


@contextmanager
def look_bundle(store: Backend, reference: str, mirror: Mirror, policy: TrustPolicy, *,
                progress: Progress | None = None) -> Iterator[VerifiedBundle]:
    """The bundle ``reference`` names, fetched and verified exactly as :func:`pull_bundle`
    does, in a staging copy removed on exit: to compare it before pulling (``diff``).
    ``mirror`` gives the staging room, revocations, floors and objects it already holds; it
    is not changed.

    Raises:
        VerificationError: as :func:`pull_bundle` (exit 3).
        SourceUnavailable: the store cannot be reached or lacks the reference (exit 6).
    """
    fetched = _fetch_reference(store, reference)
    with staged_copy(mirror, fetched, policy, store.open_blob, progress=progress,
                     abort=store.abort) as verified:
        yield verified


def pull_bundle(store: Backend, reference: str, mirror: Mirror, policy: TrustPolicy, *,
                progress: Progress | None = None) -> OciPullResult:
    """Pull the bundle ``reference`` (tag or ``sha256:`` digest) names into ``mirror``.

    Raises:
        VerificationError: any document or blob that is malformed, oversized, not what its
            digest says, or a bundle that fails verification (exit 3).
        SourceUnavailable: the store cannot be reached or lacks the reference (exit 6).
    """
    mirror = Mirror.open(mirror.root, create=True)
    fetched = _fetch_reference(store, reference)
    digest = fetched.source
    staged = stage_and_commit(mirror, fetched, policy, store.open_blob, progress=progress,
                              abort=store.abort)
    source = f"{store.name}:{reference}" if not reference.startswith("sha256:") else \
        f"{store.name}@{reference}"
    moved = None
    with mirror.lock():
        path = mirror.root / PULL_STATE
        try:
            state = load_json_file(path, max_bytes=4 * 1024 * 1024) if path.is_file() else {}
        except MalformedDocument:
            state = {}
        state = state if isinstance(state, dict) else {}
        prev = state.get(source)
        if not reference.startswith("sha256:"):
            if isinstance(prev, str) and prev != digest:
                moved = prev
                mirror.append_event("oci-tag-moved", staged.verified.name,
                                    {"ref": source, "from": prev, "to": digest})
            state[source] = digest
            mirror.write_file(PULL_STATE, json_bytes(state))  # never through a planted link
    return OciPullResult(staged.verified.name, source, digest, staged, moved)
