"""OMS manifests and subjects of artifacts as the mirror holds them.

Both sides need these: sign builds statements over them, while export, admit and audit
name a bundle's artifacts by them. They live here, below both sides, so the isolated side
never imports the signer to find a root digest.
"""

from __future__ import annotations

from collections.abc import Callable

from specbundle.attest.oms import GIT_IGNORED_PATHS, OmsManifest
from specbundle.attest.statement import Subject, artifact_subjects
from specbundle.digest import hash_files
from specbundle.errors import MirrorError, VerificationError
from specbundle.mirror import Mirror
from specbundle.record import ArtifactRecord, BundleRecord

__all__ = ["bundle_manifest", "claimed_subjects", "subjects_for"]


def bundle_manifest(
    mirror: Mirror, art: ArtifactRecord, *, rehash: bool = False, workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> OmsManifest:
    """The OMS manifest of a mirrored artifact, from recorded digests or by re-hashing."""
    files = [f for f in art.files
             if not any(f.path == g or f.path.startswith(g + "/") for g in GIT_IGNORED_PATHS)]
    for f in files:
        if not mirror.has_object(f.sha256, f.size):
            raise MirrorError(f"{art.repo}: object for {f.path} ({f.sha256}) is missing or "
                              "has the wrong size", hint="pull the bundle again")
    if rehash:
        paths = {mirror.object_path(f.sha256): f for f in files}
        actual = hash_files(paths, workers=workers, progress=progress)
        bad = [f"{paths[p].path}: recorded {paths[p].sha256}, object hashes to {d}"
               for p, d in actual.items() if d != paths[p].sha256]
        if bad:
            raise VerificationError(f"{art.repo}: mirror objects changed: " + "; ".join(bad))
    return OmsManifest.build(art.repo, [(f.path, f.sha256) for f in files], allow_symlinks=True)


def subjects_for(art: ArtifactRecord, root: str) -> tuple[Subject, Subject]:
    """OMS root digest + commit subjects of one artifact."""
    return artifact_subjects(art.repo, root, art.commit, art.commit_kind)


def claimed_subjects(mirror: Mirror, rec: BundleRecord) -> list[Subject]:
    """Every artifact's subjects as an (unverified) record claims them, roots from its digests."""
    return [s for art in rec.artifacts
            for s in subjects_for(art, bundle_manifest(mirror, art).root_digest)]
