"""An OCI image layout directory as a :class:`~specbundle.oci.backend.Backend`.

``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>`` (image-spec ``image-layout.md``), as
``skopeo copy oci:DIR:TAG`` and ``oras copy --from-oci-layout DIR:TAG`` read them. Every
manifest specbundle writes is listed in ``index.json`` (tagged ones with
``org.opencontainers.image.ref.name``), so referrers are found by their ``subject`` without a
registry. Writes go to a temp file and are renamed into place; ``index.json`` is rewritten
atomically after its blobs exist. On import the directory is hostile: blobs are addressed
only by validated digests and ``index.json`` is parsed strictly with a size limit.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from specbundle._fsutil import atomic_write_bytes, tmp_name
from specbundle.digest import sha256_bytes
from specbundle.errors import (
    CorruptMirror,
    MirrorError,
    SourceUnavailable,
    UsageError,
    VerificationError,
)
from specbundle.oci.backend import BlobPush, Progress, bounded, fallback_tag, with_referrer
from specbundle.oci.media import ANN_REF_NAME, IMAGE_INDEX, MAX_MANIFEST_BYTES, Descriptor, dumps
from specbundle.oci.ref import valid_tag
from specbundle.strict import MalformedDocument, loads_json, open_regular, read_bounded

__all__ = ["LayoutBackend"]

_BLOCK = 4 * 1024 * 1024
_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
_MAX_INDEX = 16 * 1024 * 1024
_FALLBACK = re.compile(r"^sha256-[0-9a-f]{64}$")


class LayoutBackend:
    """An OCI image layout at ``root`` (created on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = f"oci:{root}"

    def _blob(self, digest: str) -> Path:
        Descriptor.from_json({"mediaType": "x", "digest": digest, "size": 0}, self.name)
        return self.root / "blobs" / "sha256" / digest.removeprefix("sha256:")

    def _init(self) -> None:
        (self.root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        if not (self.root / "oci-layout").is_file():
            atomic_write_bytes(self.root / "oci-layout", _LAYOUT)

    def _index(self) -> dict[str, Any]:
        p = self.root / "index.json"
        if not p.is_file():
            return {"schemaVersion": 2, "mediaType": IMAGE_INDEX, "manifests": []}
        try:
            doc = loads_json(read_bounded(p, max_bytes=_MAX_INDEX), max_bytes=_MAX_INDEX,
                             what=f"{self.name}/index.json")
        except MalformedDocument as err:
            raise VerificationError(str(err)) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("manifests"), list):
            raise VerificationError(f"{self.name}/index.json is not an OCI image index")
        return doc

    # -- blobs --------------------------------------------------------------------------------
    def push_blob(self, digest: str, size: int, path: Path,
                  progress: Progress | None = None) -> BlobPush:
        """Copy ``path`` in (hashed while copied) unless a blob of that size is there."""
        self._init()
        dest = self._blob(digest)
        if dest.is_file() and dest.stat().st_size == size:
            return BlobPush(digest, size, 0, skipped=True)
        tmp = dest.with_name(tmp_name(dest.name, "part"))
        h, n = hashlib.sha256(), 0
        try:
            src_fh = open_regular(path, what=str(path))  # a mirror object: never a FIFO or link
        except MalformedDocument as err:
            raise CorruptMirror(str(err)) from None
        with src_fh as src, tmp.open("wb") as out:
            while block := src.read(_BLOCK):
                h.update(block)
                out.write(block)
                n += len(block)
                if progress:
                    progress(len(block))
            out.flush()
            os.fsync(out.fileno())
        if f"sha256:{h.hexdigest()}" != digest or n != size:
            tmp.unlink()
            raise MirrorError(f"{path} no longer hashes to {digest}: the mirror is corrupt")
        tmp.replace(dest)
        return BlobPush(digest, size, n)

    def push_bytes(self, digest: str, data: bytes) -> BlobPush:
        """Write a small blob."""
        self._init()
        dest = self._blob(digest)
        if dest.is_file() and dest.stat().st_size == len(data):
            return BlobPush(digest, len(data), 0, skipped=True)
        atomic_write_bytes(dest, data)
        return BlobPush(digest, len(data), len(data))

    @contextmanager
    def _open(self, digest: str, size: int) -> Iterator[Iterator[bytes]]:
        p = self._blob(digest)
        if not p.is_file() or p.is_symlink():
            raise SourceUnavailable(f"{self.name} lacks blob {digest}")
        try:
            fh = open_regular(p, what=f"{self.name} blob {digest}")
        except MalformedDocument as err:
            raise VerificationError(str(err)) from None
        with fh:
            yield bounded(iter(lambda: fh.read(_BLOCK), b""), size, digest)

    def abort(self) -> None:
        """Nothing to shut: local file reads never stall."""

    def open_blob(self, digest: str, size: int) -> AbstractContextManager[Iterator[bytes]]:
        """Stream a blob file; at most ``size`` bytes are accepted."""
        return self._open(digest, size)

    # -- manifests ----------------------------------------------------------------------------
    def put_manifest(self, data: bytes, media_type: str, digest: str, *,
                     tag: str | None = None, subject: Descriptor | None = None) -> None:
        """Write the manifest blob, then list it in ``index.json`` (tag moved if given)."""
        self.push_bytes(digest, data)
        index = self._index()
        keep = [m for m in index["manifests"] if isinstance(m, dict) and not (
            m.get("digest") == digest and not (m.get("annotations") or {}).get(ANN_REF_NAME))
            and not (tag and (m.get("annotations") or {}).get(ANN_REF_NAME) == tag)]
        entry: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": len(data)}
        if tag:
            entry["annotations"] = {ANN_REF_NAME: tag}
        elif any(m.get("digest") == digest for m in keep):
            entry = {}
        if entry:
            keep.append(entry)
        index["manifests"] = keep
        atomic_write_bytes(self.root / "index.json", dumps(index))
        if subject is not None:  # also the fallback tag, so `skopeo copy` of it carries them
            tag_name = fallback_tag(subject)
            try:
                raw, _ = self.get_manifest(tag_name, MAX_MANIFEST_BYTES)
                existing = [m for m in loads_json(raw)["manifests"] if isinstance(m, dict)]
            except (SourceUnavailable, MalformedDocument, KeyError, TypeError):
                existing = []
            new = with_referrer(existing, data, media_type, digest)
            if new is not None:
                self.put_manifest(new, IMAGE_INDEX, f"sha256:{sha256_bytes(new)}", tag=tag_name)

    def get_manifest(self, reference: str, max_bytes: int) -> tuple[bytes, str]:
        """A manifest by tag (``index.json``) or digest (the blob)."""
        entries = [m for m in self._index()["manifests"] if isinstance(m, dict)]
        if reference.startswith("sha256:"):
            match = next((m for m in entries if m.get("digest") == reference), None)
            digest = reference
        else:
            if not valid_tag(reference):
                raise VerificationError(f"{reference!r} is not a valid tag")
            match = next((m for m in entries
                          if (m.get("annotations") or {}).get(ANN_REF_NAME) == reference), None)
            if match is None:
                raise SourceUnavailable(f"{self.name} has no tag {reference!r}")
            digest = str(match.get("digest"))
        p = self._blob(digest)
        if not p.is_file():
            raise SourceUnavailable(f"{self.name} lacks manifest {digest}")
        try:
            data = read_bounded(p, max_bytes=max_bytes, what=f"manifest {digest}")
        except MalformedDocument as err:
            raise VerificationError(str(err)) from None
        mt = str(match.get("mediaType", "")) if match else ""
        return data, mt

    def referrers(self, subject: Descriptor, max_bytes: int) -> list[Descriptor]:
        """Manifests listed in ``index.json`` whose ``subject`` is ``subject``."""
        out = []
        for m in self._index()["manifests"]:
            d = Descriptor.from_json(m, f"{self.name}/index.json")
            if d.size > MAX_MANIFEST_BYTES or (d.annotations.get(ANN_REF_NAME)):
                continue
            data, _ = self.get_manifest(d.digest, max_bytes)
            try:
                doc = loads_json(data, max_bytes=max_bytes)
            except MalformedDocument:
                continue
            sub = doc.get("subject") if isinstance(doc, dict) else None
            if isinstance(sub, dict) and sub.get("digest") == subject.digest:
                out.append(Descriptor(d.media_type, d.digest, d.size, dict(
                    doc.get("annotations") or {}), doc.get("artifactType")))
        return out

    def _fallbacks(self) -> set[str]:
        return {str((m.get("annotations") or {}).get(ANN_REF_NAME))
                for m in self._index()["manifests"] if isinstance(m, dict)
                and _FALLBACK.match(str((m.get("annotations") or {}).get(ANN_REF_NAME, "")))}

    def only_tag(self) -> str:
        """The one tag of a layout that has exactly one (else the caller must name it)."""
        tags = sorted({str((m.get("annotations") or {}).get(ANN_REF_NAME))
                       for m in self._index()["manifests"] if isinstance(m, dict)
                       and (m.get("annotations") or {}).get(ANN_REF_NAME)} - self._fallbacks())
        if len(tags) != 1:
            raise UsageError(f"{self.name} has {len(tags)} tags ({', '.join(tags[:5])})",
                             hint="name one with --tag")
        return tags[0]

    def remove(self) -> None:
        """Delete the layout (used when an export is redone from scratch)."""
        shutil.rmtree(self.root, ignore_errors=True)
