"""Signed bundles for the OCI tests, built by the real pull -> scan report -> sign stages."""

from __future__ import annotations

from pathlib import Path

from specbundle import attest
from specbundle.digest import sha256_bytes
from specbundle.mirror import Mirror
from specbundle.oci import RegistryBackend
from specbundle.oci.media import EMPTY_CONFIG, IMAGE_MANIFEST, Descriptor, dumps
from specbundle.pull import pull_bundle
from specbundle.sign import sign_bundle
from specbundle.spec import load_spec
from tests.sign.helpers import make_model, policy_doc, spec_file, write_policy, write_scan_report


def signed_pair(tmp: Path, mirror: Mirror, key: attest.SigningKey, name: str, *,
                target_seed: int, draft_dir: Path | None = None, vocab: int = 64) -> Path:
    """Pull, scan-report and sign bundle ``name``; a given ``draft_dir`` is shared.

    Returns the draft folder, so a second bundle can reuse the very same draft.
    """
    t = make_model(tmp / f"{name}-src" / "target", seed=target_seed, vocab=vocab)
    d = draft_dir or make_model(tmp / f"{name}-src" / "draft", seed=target_seed + 100)
    pull_bundle(load_spec(spec_file(tmp, name, t, d)), mirror)
    write_scan_report(mirror, name)
    sign_bundle(mirror, name, [key])
    return d


def trust_file(tmp: Path, key: attest.SigningKey, stem: str = "trust") -> Path:
    """A trust policy trusting ``key`` for ``org/*``."""
    return write_policy(tmp / f"{stem}.yaml", policy_doc({"release": key}))


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
