"""THE SEAM, push side: what of a bundle goes to a registry. Nothing else reads the mirror.

:func:`bundle_contents` lists, for a signed bundle in a mirror, every object it names (the
model files of target and draft, and the record's extra blobs) and its signed material (each
artifact's OMS ``model.sig``, each DSSE line of ``attestations.jsonl``: provenance, scan, pair
binding, bench evidence, admission decisions) plus the unsigned bundle files that travel with
it (the record with spec and pairing, the scan report, rendered manifests).

When the custody work lands (one signed bundle manifest per version, verified into a
``VerifiedBundle``), re-point this module: add the manifest as one more signed file (pushed
by :mod:`specbundle.oci.pack` as a referrer of the metadata manifest, like the DSSE lines)
and derive :attr:`BundleContents.objects` from it instead of from the record.
:mod:`specbundle.oci.stage` is the matching pull-side seam.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbundle.attest import ATTESTATIONS_FILE
from specbundle.errors import MirrorError, UsageError
from specbundle.mirror import Mirror
from specbundle.record import BundleRecord, FileEntry, Role
from specbundle.sign import model_sig_rel

__all__ = ["BundleContents", "Object", "bundle_contents"]

#: per-mirror bookkeeping and signed material carried separately, never as bundle files
_LOCAL_DIRS = ("export", "import", "oci")


@dataclass(frozen=True)
class Object:
    """One content-addressed object and the file holding its bytes."""

    sha256: str
    size: int
    path: Path


@dataclass(frozen=True)
class BundleContents:
    """Everything :func:`specbundle.oci.push.push_bundle` sends for one bundle."""

    record: BundleRecord
    #: role -> the artifact's files, sorted by path (the ModelPack layers)
    files: dict[Role, tuple[FileEntry, ...]]
    #: sha256 -> object, for every blob the bundle names
    objects: dict[str, Object]
    #: role -> bytes of its OMS model.sig
    model_sigs: dict[Role, bytes]
    #: the attestation log's DSSE envelopes, one line each, in log order
    envelopes: tuple[bytes, ...]
    #: unsigned bundle files: bundle-relative path -> bytes (``bundle.json`` included)
    meta_files: dict[str, bytes]

    @property
    def name(self) -> str:
        """The bundle name."""
        return self.record.name


def _meta_files(mirror: Mirror, name: str, signed: set[str]) -> dict[str, bytes]:
    root = mirror.bundle_dir(name)
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not p.is_symlink() and rel.parts[0] not in _LOCAL_DIRS \
                and not any(x.startswith(".") for x in rel.parts) and rel.as_posix() not in signed:
            out[rel.as_posix()] = p.read_bytes()
    return out


def bundle_contents(mirror: Mirror, name: str) -> BundleContents:
    """List what to push for bundle ``name``.

    Raises:
        UsageError: the bundle is not signed (an artifact has no model.sig).
        MirrorError: an object the record names is missing from the store.
    """
    rec = mirror.load_bundle(name)
    sigs: dict[Role, bytes] = {}
    for art in rec.artifacts:
        data = mirror.read_bundle_file(name, model_sig_rel(art.role))
        if data is None:
            raise UsageError(f"bundle {name!r} is not signed ({art.role} has no model.sig)",
                             hint="run `specbundle sign` first")
        sigs[art.role] = data
    log = mirror.read_bundle_file(name, ATTESTATIONS_FILE) or b""
    envelopes = tuple(line for line in log.splitlines() if line.strip())
    objects: dict[str, Object] = {}
    for sha in sorted(rec.referenced_blobs()):
        path = mirror.object_path(sha)
        try:
            objects[sha] = Object(sha, path.stat().st_size, path)
        except FileNotFoundError:
            raise MirrorError(f"{name}: object {sha} is missing from the mirror") from None
    signed = {model_sig_rel(a.role) for a in rec.artifacts} | {ATTESTATIONS_FILE}
    files = {a.role: tuple(sorted(a.files, key=lambda f: f.path)) for a in rec.artifacts}
    return BundleContents(rec, files, objects, sigs, envelopes, _meta_files(mirror, name, signed))
