"""Referrers anyone with push rights can add; signed bundles moved to tests/lib/bundles.py
(``signed_pair``) and tests/lib/policy.py (``trust_file``), re-exported here until ported."""

from __future__ import annotations

from specbundle.digest import sha256_bytes
from specbundle.oci import RegistryBackend
from specbundle.oci.media import EMPTY_CONFIG, IMAGE_MANIFEST, Descriptor, dumps
from tests.lib.bundles import signed_pair
from tests.lib.policy import trust_file

__all__ = ["push_referrer", "signed_pair", "trust_file"]


def push_referrer(store: RegistryBackend, subject: Descriptor, kind: str, data: bytes,
                  annotations: dict[str, str]) -> None:
    """What anyone with push rights can add: a manifest of type ``kind`` about ``subject``."""
    empty = store.push_bytes(f"sha256:{sha256_bytes(b'{}')}", b"{}")
    layer = Descriptor(kind, f"sha256:{sha256_bytes(data)}", len(data))
    store.push_bytes(layer.digest, data)
    doc = dumps({"schemaVersion": 2, "mediaType": IMAGE_MANIFEST, "artifactType": kind,
                 "config": {"mediaType": EMPTY_CONFIG, "digest": empty.digest, "size": 2},
                 "layers": [layer.to_json()], "annotations": annotations,
                 "subject": {"mediaType": subject.media_type, "digest": subject.digest,
                             "size": subject.size}})
    store.put_manifest(doc, IMAGE_MANIFEST, f"sha256:{sha256_bytes(doc)}", subject=subject)
