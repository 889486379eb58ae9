"""OCI and CNCF ModelPack media types, descriptors and the documents specbundle writes.

ModelPack (``modelpack/model-spec`` docs/spec.md, docs/config.md): a model is an OCI image
manifest with ``artifactType`` :data:`MODEL_ARTIFACT`, config :data:`MODEL_CONFIG`, one raw
layer per file (weights uncompressed, so a Kubernetes image volume or a registry's dedup sees
the file's own sha256), each annotated with its path (:data:`FILEPATH`). specbundle adds a
bundle index (an OCI image index tying target, draft and the bundle metadata manifest) and
referrers for signatures; its own types live under ``application/vnd.specbundle.*``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from specbundle import ids
from specbundle.errors import VerificationError

__all__ = [
    "ANN_BUNDLE", "ANN_LINE", "ANN_PREDICATE", "ANN_REF_NAME", "ANN_ROLE", "ANN_TITLE",
    "BUNDLE_ARTIFACT", "BUNDLE_FILE", "BUNDLE_INDEX_ARTIFACT", "DOC", "DSSE_ENVELOPE",
    "EMPTY_CONFIG",
    "EMPTY_JSON", "FILEPATH", "IMAGE_INDEX", "IMAGE_MANIFEST", "MAX_MANIFEST_BYTES",
    "MAX_META_BYTES", "MODEL_ARTIFACT", "MODEL_CONFIG", "OBJECT_LAYER", "SIGSTORE_BUNDLE",
    "WEIGHT", "WEIGHT_CONFIG", "Descriptor", "dumps", "layer_media_type", "safe_rel",
]

IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IMAGE_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"

MODEL_ARTIFACT = "application/vnd.cncf.model.manifest.v1+json"
MODEL_CONFIG = "application/vnd.cncf.model.config.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
DOC = "application/vnd.cncf.model.doc.v1.raw"
FILEPATH = "org.cncf.model.filepath"

BUNDLE_INDEX_ARTIFACT = "application/vnd.specbundle.bundle.index.v1+json"
BUNDLE_ARTIFACT = "application/vnd.specbundle.bundle.v1+json"
BUNDLE_FILE = "application/vnd.specbundle.bundle.file.v1"
OBJECT_LAYER = "application/vnd.specbundle.object.v1"
SIGSTORE_BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
DSSE_ENVELOPE = "application/vnd.dsse.envelope.v1+json"

ANN_TITLE = "org.opencontainers.image.title"
ANN_REF_NAME = "org.opencontainers.image.ref.name"
ANN_ROLE = "dev.specbundle.role"
ANN_BUNDLE = "dev.specbundle.bundle"
ANN_LINE = "dev.specbundle.attestation.line"
ANN_PREDICATE = "dev.specbundle.predicate-type"
#: the bundle version on the metadata manifest: a pointer only, the signed manifest decides
ANN_VERSION = "dev.specbundle.version"

#: containerd's and distribution's limit for a manifest; anything bigger is refused unread.
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
#: bundle metadata (record, scan report, signatures, one attestation) is small.
MAX_META_BYTES = 16 * 1024 * 1024

_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack",
                    ".ckpt", ".npz")
_DOC_SUFFIXES = (".md", ".txt", ".pdf")


def layer_media_type(path: str) -> str:
    """ModelPack layer type for a model file: weights, docs, else weight config."""
    low = path.lower()
    if low.endswith(_WEIGHT_SUFFIXES):
        return WEIGHT
    if low.endswith(_DOC_SUFFIXES) or PurePosixPath(low).name.startswith("license"):
        return DOC
    return WEIGHT_CONFIG


def dumps(doc: dict[str, Any]) -> bytes:
    """The exact bytes pushed: compact, key-sorted JSON (stable digests across runs)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def safe_rel(path: str, what: str) -> str:
    """A relative POSIX path inside a tree: :func:`specbundle.ids.check_rel_path`."""
    try:
        return ids.check_rel_path(path)
    except ValueError:
        raise VerificationError(f"{what} names an unsafe path {path!r}") from None


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor."""

    media_type: str
    digest: str
    size: int
    annotations: dict[str, str] = field(default_factory=dict)
    artifact_type: str | None = None

    @property
    def hex(self) -> str:
        """The sha256 hex of the digest."""
        return self.digest.removeprefix("sha256:")

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        d: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest,
                             "size": self.size}
        if self.annotations:
            d["annotations"] = dict(self.annotations)
        if self.artifact_type:
            d["artifactType"] = self.artifact_type
        return d

    @classmethod
    def from_json(cls, obj: object, where: str) -> Descriptor:
        """Validate a descriptor from a hostile document (digest, size, annotation types)."""
        if not isinstance(obj, dict):
            raise VerificationError(f"{where}: descriptor is not an object")
        mt, dg, size = obj.get("mediaType"), obj.get("digest"), obj.get("size")
        ann = obj.get("annotations", {})
        at = obj.get("artifactType")
        if not isinstance(mt, str) or not isinstance(dg, str) or type(size) is not int:
            raise VerificationError(f"{where}: descriptor lacks mediaType, digest or size")
        if not dg.startswith("sha256:") or len(dg) != 71 or \
                any(c not in "0123456789abcdef" for c in dg[7:]):
            raise VerificationError(f"{where}: unsupported digest {dg[:80]!r} (sha256 only)")
        if size < 0:
            raise VerificationError(f"{where}: negative size")
        if not isinstance(ann, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in ann.items()):
            raise VerificationError(f"{where}: annotations must map strings to strings")
        if at is not None and not isinstance(at, str):
            raise VerificationError(f"{where}: artifactType must be a string")
        return cls(mt, dg, size, dict(ann), at)

