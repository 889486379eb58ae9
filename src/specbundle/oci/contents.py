"""THE SEAM, push side: what of a bundle goes to a registry. Nothing else reads the mirror.

:func:`bundle_contents` lists the bundle's *current signed version* (the custody layout of
:mod:`specbundle.mirror.versions`): the signed bundle manifest, its version folder's signed
files (each artifact's OMS ``model.sig``, the scan report and image records whose digests the
manifest signs) and every object the manifest's record names. The attestation log's DSSE
lines (provenance, scan, pair binding, bench evidence, admission decisions) travel too.

Everything comes from the manifest, never from the unsigned working ``bundle.json``, the same
rule :mod:`specbundle.transfer.export` follows; pull verifies all of it again
(:mod:`specbundle.oci.stage`). The contents depend on the signed version only, so the isolated
side computes the same OCI digests from its verified copy (``render --model-source oci``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbundle.attest import ATTESTATIONS_FILE
from specbundle.attest.manifest import BundleManifest, parse_manifest_unverified
from specbundle.errors import MirrorError, UsageError
from specbundle.mirror import Mirror, versions
from specbundle.mirror.versions import SCAN_REPORT, model_sig_rel
from specbundle.record import BundleRecord, FileEntry, Role

__all__ = ["BundleContents", "Object", "bundle_contents"]


@dataclass(frozen=True)
class Object:
    """One content-addressed object and the file holding its bytes."""

    sha256: str
    size: int
    path: Path


@dataclass(frozen=True)
class BundleContents:
    """Everything :func:`specbundle.oci.push.push_bundle` sends for one bundle version."""

    manifest: BundleManifest
    #: the signed manifest's DSSE envelope, as stored (``versions/<N>/manifest.json``)
    manifest_envelope: bytes
    #: role -> the artifact's files, sorted by path (the ModelPack layers)
    files: dict[Role, tuple[FileEntry, ...]]
    #: sha256 -> object, for every blob the manifest names
    objects: dict[str, Object]
    #: role -> bytes of its OMS model.sig
    model_sigs: dict[Role, bytes]
    #: the attestation log's DSSE envelopes, one line each, in log order
    envelopes: tuple[bytes, ...]
    #: the version's other signed files: bundle-relative path (``versions/<N>/...``) -> bytes
    meta_files: dict[str, bytes]

    @property
    def record(self) -> BundleRecord:
        """The signed record (from the manifest)."""
        return self.manifest.record

    @property
    def name(self) -> str:
        """The bundle name."""
        return self.manifest.bundle

    @property
    def version(self) -> int:
        """The bundle version."""
        return self.manifest.version


def bundle_contents(mirror: Mirror, name: str) -> BundleContents:
    """List what to push for the current version of bundle ``name``.

    Raises:
        BundleNotFound: no such bundle.
        UsageError: the bundle is not signed (no manifest, or an artifact has no model.sig).
        MirrorError: an object the manifest names is missing from the store.
    """
    cur = versions.read_current_manifest(mirror, name)
    if cur is None:
        mirror.load_bundle(name)  # BundleNotFound first
        raise UsageError(f"bundle {name!r} is not signed (no signed bundle manifest)",
                         hint="run `specbundle sign` first")
    man = parse_manifest_unverified(cur[1])  # connected side, own mirror: pull verifies it
    rec = man.record
    sigs: dict[Role, bytes] = {}
    for art in rec.artifacts:
        data = versions.read_version_file(mirror, name, man.version, model_sig_rel(art.role))
        if data is None:
            raise UsageError(f"bundle {name!r} is not signed ({art.role} has no model.sig)",
                             hint="run `specbundle sign` first")
        sigs[art.role] = data
    meta: dict[str, bytes] = {}
    report = versions.read_version_file(mirror, name, man.version, SCAN_REPORT)
    if report is not None:
        meta[versions.version_rel(man.version, SCAN_REPORT)] = report
    for engine, data in versions.version_images(mirror, name, man.version).items():
        meta[versions.version_rel(man.version, f"images/{engine}.json")] = data
    log = mirror.read_bundle_file(name, ATTESTATIONS_FILE) or b""
    envelopes = tuple(line.strip() for line in log.splitlines() if line.strip())
    objects: dict[str, Object] = {}
    for sha in sorted(rec.referenced_blobs()):
        path = mirror.object_path(sha)
        try:
            objects[sha] = Object(sha, path.stat().st_size, path)
        except FileNotFoundError:
            raise MirrorError(f"{name}: object {sha} is missing from the mirror") from None
    files = {a.role: tuple(sorted(a.files, key=lambda f: f.path)) for a in rec.artifacts}
    return BundleContents(man, cur[1], files, objects, sigs, envelopes, meta)
