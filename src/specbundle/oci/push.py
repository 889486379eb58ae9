"""Push one signed bundle to an OCI store (registry or layout): connected side.

Order makes a half-finished push invisible: blobs first (in parallel; present ones skipped),
then the model and metadata manifests by digest, the signature referrers, the bundle index by
digest, and last the tag. A push killed anywhere leaves the old tag in place; rerunning it
skips what is there and resumes the interrupted upload sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from specbundle.mirror import Mirror
from specbundle.oci.backend import Backend, BlobPush
from specbundle.oci.contents import bundle_contents
from specbundle.oci.pack import pack_bundle

__all__ = ["PushResult", "push_bundle"]

Progress = Callable[[int], None]


@dataclass(frozen=True)
class PushResult:
    """What the push did; ``index_digest`` pins the bundle (``REPO@digest``)."""

    bundle: str
    target: str
    tag: str | None
    index_digest: str
    manifests: dict[str, str]
    blobs_uploaded: int
    blobs_skipped: int
    blobs_mounted: int
    bytes_uploaded: int
    bytes_resumed: int
    referrers: int

    def to_json(self) -> dict[str, object]:
        """JSON form (the CLI's --json)."""
        return {"bundle": self.bundle, "target": self.target, "tag": self.tag,
                "index_digest": self.index_digest, "manifests": self.manifests,
                "blobs_uploaded": self.blobs_uploaded, "blobs_skipped": self.blobs_skipped,
                "blobs_mounted": self.blobs_mounted, "bytes_uploaded": self.bytes_uploaded,
                "bytes_resumed": self.bytes_resumed, "referrers": self.referrers}


def push_bundle(mirror: Mirror, name: str, store: Backend, tag: str | None, *,
                workers: int = 4, progress: Progress | None = None) -> PushResult:
    """Push bundle ``name`` from ``mirror`` into ``store`` and tag its index ``tag``.

    Raises:
        UsageError: the bundle is not signed.
        MirrorError: an object is missing or no longer matches its digest.
        SourceUnavailable: the store refused or could not be reached.
    """
    c = bundle_contents(mirror, name)
    packed = pack_bundle(c)
    objs = sorted(c.objects.values(), key=lambda o: -o.size)  # big first: best overlap
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="oci-push") as pool:
        futures = [pool.submit(store.push_blob, f"sha256:{o.sha256}", o.size, o.path, progress)
                   for o in objs]
        futures += [pool.submit(store.push_bytes, b.descriptor.digest, b.data)
                    for b in packed.small_blobs]
        results: list[BlobPush] = [f.result() for f in futures]
    for doc in packed.manifests:
        store.put_manifest(doc.data, doc.descriptor.media_type, doc.descriptor.digest)
    store.put_manifest(packed.index.data, packed.index.descriptor.media_type,
                       packed.index.descriptor.digest)
    for doc in packed.referrers:
        store.put_manifest(doc.data, doc.descriptor.media_type, doc.descriptor.digest,
                           subject=doc.subject)
    if tag:
        store.put_manifest(packed.index.data, packed.index.descriptor.media_type,
                           packed.index.descriptor.digest, tag=tag)
    big = results[:len(objs)]
    return PushResult(
        name, store.name, tag, packed.index.descriptor.digest,
        {d.descriptor.annotations.get("dev.specbundle.role", "?"): d.descriptor.digest
         for d in packed.manifests},
        sum(1 for r in big if r.sent), sum(1 for r in big if r.skipped),
        sum(1 for r in big if r.mounted), sum(r.sent for r in results),
        sum(r.resumed_at for r in big), len(packed.referrers))
