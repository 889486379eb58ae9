"""Attach a file to a pushed bundle as a referrer: how a benchmark Job in the cluster writes
its report back next to the bundle (``oras discover`` lists it; pull ignores unknown types).

The subject is resolved and its digest checked before anything is written; the file is one
layer of a manifest whose ``subject`` is the bundle index (OCI 1.1 API or fallback tag).
"""

from __future__ import annotations

import hashlib
import re

from specbundle.digest import sha256_bytes
from specbundle.errors import UsageError
from specbundle.oci.backend import Backend
from specbundle.oci.media import (
    ANN_TITLE,
    EMPTY_CONFIG,
    EMPTY_JSON,
    IMAGE_INDEX,
    IMAGE_MANIFEST,
    MAX_MANIFEST_BYTES,
    MAX_META_BYTES,
    Descriptor,
    dumps,
)

__all__ = ["BENCH_REPORT", "attach_file"]

BENCH_REPORT = "application/vnd.specbundle.bench.report.v1+json"
_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")


def attach_file(store: Backend, reference: str, data: bytes, artifact_type: str,
                title: str) -> str:
    """Push ``data`` as a referrer of the manifest ``reference`` names; returns its digest."""
    if not reference.startswith("sha256:"):
        raise UsageError(f"the subject must be named by digest, not by tag {reference!r}: a "
                         "tag can move, and the referrer would bind whatever it names now",
                         hint="REGISTRY/REPO@sha256:<index digest> (oci push prints it)")
    if not _TYPE.match(artifact_type):
        raise UsageError(f"{artifact_type!r} is not a media type")
    if len(data) > MAX_META_BYTES:
        raise UsageError(f"{title} is over {MAX_META_BYTES} bytes; attach something smaller")
    raw, media_type = store.get_manifest(reference, MAX_MANIFEST_BYTES)
    subject = Descriptor(media_type or IMAGE_INDEX, f"sha256:{hashlib.sha256(raw).hexdigest()}",
                         len(raw))
    if subject.digest != reference:
        raise UsageError(f"{store.name}@{reference} returned other content")
    empty = store.push_bytes(f"sha256:{sha256_bytes(EMPTY_JSON)}", EMPTY_JSON)
    layer = Descriptor(artifact_type, f"sha256:{sha256_bytes(data)}", len(data),
                       {ANN_TITLE: title})
    store.push_bytes(layer.digest, data)
    doc = dumps({"schemaVersion": 2, "mediaType": IMAGE_MANIFEST, "artifactType": artifact_type,
                 "config": {"mediaType": EMPTY_CONFIG, "digest": empty.digest,
                            "size": empty.size},
                 "layers": [layer.to_json()],
                 "subject": {"mediaType": subject.media_type, "digest": subject.digest,
                             "size": subject.size}})
    digest = f"sha256:{sha256_bytes(doc)}"
    store.put_manifest(doc, IMAGE_MANIFEST, digest, subject=subject)
    return digest
