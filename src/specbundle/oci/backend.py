"""The one interface push and pull talk to: a content-addressed OCI store.

Two siblings implement it: :class:`~specbundle.oci.registry.RegistryBackend` (a registry over
the distribution HTTP API) and :class:`~specbundle.oci.layout.LayoutBackend` (an OCI image
layout directory, for carrying across the gap with ``skopeo``/``oras copy``). Push and pull
never know which one they have, so the layout path and the registry path share every check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specbundle.errors import VerificationError
from specbundle.oci.media import IMAGE_INDEX, Descriptor, dumps
from specbundle.strict import loads_json

__all__ = ["Backend", "BlobPush", "Progress", "bounded", "fallback_tag", "with_referrer"]

Progress = Callable[[int], None]


@dataclass(frozen=True)
class BlobPush:
    """What pushing one blob did: ``skipped`` (already there), ``mounted`` or bytes sent."""

    digest: str
    size: int
    sent: int
    skipped: bool = False
    mounted: bool = False
    resumed_at: int = 0


def bounded(blocks: Iterable[bytes], size: int, what: str) -> Iterator[bytes]:
    """Pass blocks through, refusing the stream once it exceeds its declared ``size``."""
    n = 0
    for b in blocks:
        n += len(b)
        if n > size:
            raise VerificationError(f"{what} is larger than its descriptor says ({size} B)")
        yield b


def fallback_tag(subject: Descriptor) -> str:
    """The OCI 1.1 referrers tag schema: ``sha256-<hex>`` names the subject's referrers."""
    return f"sha256-{subject.hex}"


def with_referrer(existing: list[dict[str, Any]], data: bytes, media_type: str,
                  digest: str) -> bytes | None:
    """The fallback-tag index listing ``existing`` plus this manifest (None: already there)."""
    if any(d.get("digest") == digest for d in existing):
        return None
    doc = loads_json(data, what="referrer manifest")
    entry: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": len(data)}
    if doc.get("artifactType"):
        entry["artifactType"] = doc["artifactType"]
    if doc.get("annotations"):
        entry["annotations"] = doc["annotations"]
    return dumps({"schemaVersion": 2, "mediaType": IMAGE_INDEX, "manifests": [*existing, entry]})


class Backend(Protocol):
    """A place blobs and manifests are pushed to and pulled from."""

    #: a short human name (``registry.example/repo`` or ``oci:DIR``) for messages
    name: str

    def push_blob(self, digest: str, size: int, path: Path,
                  progress: Progress | None = None) -> BlobPush:
        """Store the file at ``path`` (which must hash to ``digest``) unless already there."""
        ...

    def push_bytes(self, digest: str, data: bytes) -> BlobPush:
        """Store a small blob held in memory."""
        ...

    def open_blob(self, digest: str, size: int) -> AbstractContextManager[Iterator[bytes]]:
        """Stream a blob's bytes (unverified: the caller hashes them)."""
        ...

    def put_manifest(self, data: bytes, media_type: str, digest: str, *,
                     tag: str | None = None, subject: Descriptor | None = None) -> None:
        """Store a manifest by digest (and under ``tag``); record it as a referrer of
        ``subject`` where the store needs help (the OCI 1.1 fallback tag)."""
        ...

    def get_manifest(self, reference: str, max_bytes: int) -> tuple[bytes, str]:
        """Bytes and media type of a manifest by tag or digest (bounded, unverified)."""
        ...

    def referrers(self, subject: Descriptor, max_bytes: int) -> list[Descriptor]:
        """Descriptors of the manifests whose ``subject`` is ``subject`` (unverified)."""
        ...

    def abort(self) -> None:
        """Make running blob reads fail at once (Ctrl-C); no new one starts."""
        ...
