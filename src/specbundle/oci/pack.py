"""Build the OCI documents for one bundle: two ModelPack artifacts, the metadata manifest,
the bundle index, and the referrer manifests that carry the signatures.

Documents are plain dicts serialised by :func:`~specbundle.oci.media.dumps`, so the same
bundle always gives the same digests (pushing twice is a no-op; a moved tag is detectable).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from specbundle.attest.manifest import BUNDLE_MANIFEST_V1
from specbundle.digest import sha256_bytes
from specbundle.oci.contents import BundleContents
from specbundle.oci.media import (
    ANN_BUNDLE,
    ANN_LINE,
    ANN_PREDICATE,
    ANN_ROLE,
    ANN_TITLE,
    ANN_VERSION,
    BUNDLE_ARTIFACT,
    BUNDLE_FILE,
    BUNDLE_INDEX_ARTIFACT,
    DSSE_ENVELOPE,
    EMPTY_CONFIG,
    EMPTY_JSON,
    FILEPATH,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    MODEL_ARTIFACT,
    MODEL_CONFIG,
    OBJECT_LAYER,
    SIGSTORE_BUNDLE,
    Descriptor,
    dumps,
    layer_media_type,
)
from specbundle.record import ArtifactRecord, BundleRecord
from specbundle.strict import loads_json

__all__ = ["Blob", "Doc", "Packed", "model_digests", "model_manifest", "pack_bundle"]


@dataclass(frozen=True)
class Doc:
    """A manifest (or index) ready to push: bytes, descriptor, optional subject."""

    data: bytes
    descriptor: Descriptor
    subject: Descriptor | None = None


@dataclass(frozen=True)
class Blob:
    """A small in-memory blob (config, bundle file, signature)."""

    data: bytes
    descriptor: Descriptor


@dataclass(frozen=True)
class Packed:
    """Everything to push, in push order: blobs, manifests, index, referrers."""

    small_blobs: tuple[Blob, ...]
    manifests: tuple[Doc, ...]
    index: Doc
    referrers: tuple[Doc, ...]


def _blob(data: bytes, media_type: str, annotations: dict[str, str] | None = None) -> Blob:
    return Blob(data, Descriptor(media_type, f"sha256:{sha256_bytes(data)}", len(data),
                                 annotations or {}))


def _doc(doc: dict[str, Any], media_type: str, annotations: dict[str, str] | None = None,
         artifact_type: str | None = None, subject: Descriptor | None = None) -> Doc:
    data = dumps(doc)
    return Doc(data, Descriptor(media_type, f"sha256:{sha256_bytes(data)}", len(data),
                                annotations or {}, artifact_type), subject)


def _manifest(artifact_type: str, config: Descriptor, layers: list[Descriptor], *,
              subject: Descriptor | None = None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": 2, "mediaType": IMAGE_MANIFEST,
                           "artifactType": artifact_type, "config": config.to_json(),
                           "layers": [x.to_json() for x in layers]}
    if subject is not None:
        doc["subject"] = {"mediaType": subject.media_type, "digest": subject.digest,
                          "size": subject.size}
    if annotations:
        doc["annotations"] = annotations
    return doc


def _model_config(art: ArtifactRecord, layers: list[Descriptor], bundle: str) -> bytes:
    """The ModelPack config (``schema/config-schema.json``: descriptor, config, modelfs with
    ``diffIds``; for raw layers a DiffID is the layer digest)."""
    name = art.repo.rsplit("/", 1)[-1]
    fmt = "gguf" if any(f.path.endswith(".gguf") for f in art.files) else \
        "safetensors" if any(f.path.endswith(".safetensors") for f in art.files) else ""
    desc: dict[str, Any] = {"name": name, "vendor": art.repo.split("/", 1)[0],
                            "revision": art.commit, "sourceURL": art.source,
                            "title": f"{art.repo} ({art.role} of {bundle})"}
    if art.pulled_at:
        desc["createdAt"] = art.pulled_at
    return dumps({"descriptor": desc, "config": {"format": fmt} if fmt else {},
                  "modelfs": {"type": "layers", "diffIds": [x.digest for x in layers]}})


def model_manifest(art: ArtifactRecord, bundle: str) -> tuple[Blob, Doc]:
    """One artifact's ModelPack config blob and manifest (no signature needed)."""
    files = sorted(art.files, key=lambda f: f.path)
    layers = [Descriptor(layer_media_type(f.path), f"sha256:{f.sha256}", f.size,
                         {FILEPATH: f.path, ANN_TITLE: f.path}) for f in files]
    cfg = _blob(_model_config(art, layers, bundle), MODEL_CONFIG)
    ann = {ANN_ROLE: art.role, ANN_BUNDLE: bundle, "org.opencontainers.image.source":
           art.source, "org.opencontainers.image.revision": art.commit,
           "org.opencontainers.image.title": art.repo}
    doc = _doc(_manifest(MODEL_ARTIFACT, cfg.descriptor, layers, annotations=ann),
               IMAGE_MANIFEST, {ANN_ROLE: art.role}, MODEL_ARTIFACT)
    return cfg, doc


def model_digests(record: BundleRecord) -> dict[str, str]:
    """Role -> digest of its ModelPack manifest, computed offline (for pinned references)."""
    return {a.role: model_manifest(a, record.name)[1].descriptor.digest for a in record.artifacts}


def pack_bundle(c: BundleContents) -> Packed:
    """The OCI documents for ``c``."""
    small: list[Blob] = [_blob(EMPTY_JSON, EMPTY_CONFIG)]
    empty = small[0].descriptor
    manifests: list[Doc] = []
    role_docs: dict[str, Doc] = {}
    for art in c.record.artifacts:
        cfg, doc = model_manifest(art, c.name)
        small.append(cfg)
        manifests.append(doc)
        role_docs[art.role] = doc
    files = [_blob(data, BUNDLE_FILE, {ANN_TITLE: rel})
             for rel, data in sorted(c.meta_files.items())]
    small += files
    model_blobs = {f.sha256 for fs in c.files.values() for f in fs}
    extra = [Descriptor(OBJECT_LAYER, f"sha256:{o.sha256}", o.size)
             for o in c.objects.values() if o.sha256 not in model_blobs]
    meta = _doc(_manifest(BUNDLE_ARTIFACT, empty, [b.descriptor for b in files] + extra,
                          annotations={ANN_BUNDLE: c.name, ANN_VERSION: str(c.version)}),
                IMAGE_MANIFEST, {ANN_ROLE: "bundle"}, BUNDLE_ARTIFACT)
    manifests.append(meta)
    spec = c.record.spec
    pairing = json.dumps(spec.get("speculative", {}), sort_keys=True)[:4096]
    index = _doc({"schemaVersion": 2, "mediaType": IMAGE_INDEX,
                  "artifactType": BUNDLE_INDEX_ARTIFACT,
                  "manifests": [d.descriptor.to_json() for d in manifests],
                  "annotations": {ANN_BUNDLE: c.name, "dev.specbundle.pairing": pairing,
                                  "org.opencontainers.image.title": c.name}},
                 IMAGE_INDEX, {}, BUNDLE_INDEX_ARTIFACT)
    referrers: list[Doc] = []
    for role, sig in sorted(c.model_sigs.items()):
        b = _blob(sig, SIGSTORE_BUNDLE, {ANN_TITLE: "model.sig"})
        small.append(b)
        subj = role_docs[role].descriptor
        referrers.append(_doc(_manifest(SIGSTORE_BUNDLE, empty, [b.descriptor], subject=subj,
                                        annotations={ANN_ROLE: role}),
                              IMAGE_MANIFEST, {ANN_ROLE: role}, SIGSTORE_BUNDLE, subj))
    # the signed bundle manifest: a DSSE referrer of the metadata manifest, like the log lines
    # (pull tells them apart by the payload's predicate type, never by an annotation)
    b = _blob(c.manifest_envelope, DSSE_ENVELOPE, {ANN_TITLE: "manifest.json"})
    small.append(b)
    ann = {ANN_ROLE: "manifest", ANN_PREDICATE: BUNDLE_MANIFEST_V1}
    referrers.append(_doc(_manifest(DSSE_ENVELOPE, empty, [b.descriptor],
                                    subject=meta.descriptor, annotations=ann),
                          IMAGE_MANIFEST, ann, DSSE_ENVELOPE, meta.descriptor))
    for i, line in enumerate(c.envelopes):
        b = _blob(line, DSSE_ENVELOPE)
        small.append(b)
        ann = {ANN_LINE: str(i + 1), ANN_PREDICATE: _predicate_type(line)}
        # subject: the metadata manifest, not the index: tools that re-serialise an index
        # (skopeo 1.9 drops artifactType and annotations) keep image manifests byte-exact
        referrers.append(_doc(_manifest(DSSE_ENVELOPE, empty, [b.descriptor],
                                        subject=meta.descriptor, annotations=ann),
                              IMAGE_MANIFEST, ann, DSSE_ENVELOPE, meta.descriptor))
    return Packed(tuple(small), tuple(manifests), index, tuple(referrers))


def _predicate_type(line: bytes) -> str:
    """For display only (``oras discover``); never trusted."""
    try:
        payload = loads_json(base64.b64decode(loads_json(line)["payload"]))
        return str(payload.get("predicateType", ""))[:256]
    except (ValueError, KeyError, TypeError):
        return ""
