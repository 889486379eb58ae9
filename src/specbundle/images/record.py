"""Image records: which engine image a bundle carries, pinned by every digest that names it.

One JSON file per engine at ``bundles/<name>/images/<engine>.json``. The archive itself is a
content-addressed object in the mirror; its digest is also listed in the bundle record's
``extra_blobs`` so that gc keeps it and export carries it under the signed transfer index.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from specbundle._fsutil import canonical_json
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import MirrorError, VerificationError
from specbundle.mirror import Mirror

__all__ = ["IMAGE_RECORD_SCHEMA", "ImageRecord", "image_record_path", "read_image_records"]

IMAGE_RECORD_SCHEMA = "https://specbundle.dev/image-record/v1"


def image_record_path(engine: str) -> str:
    """Path of an engine's image record, relative to the bundle folder."""
    return f"images/{engine}.json"


@dataclass(frozen=True)
class ImageRecord:
    """An engine image saved into the mirror.

    ``image_id`` is the sha256 of the image config (what ``docker load`` recreates exactly);
    ``repo_digest`` is the registry manifest digest when the image came from a registry (a
    locally built or ``docker import``-ed image has none); ``archive_sha256`` names the
    ``docker save`` tarball stored as a mirror object.
    """

    engine: str
    reference: str
    image_id: str
    archive_sha256: str
    archive_size: int
    repo_digest: str | None = None
    platform: str = ""
    docker_version: str = ""
    saved_at: str = ""

    def __post_init__(self) -> None:
        if not self.image_id.startswith("sha256:") or not is_sha256(self.image_id[7:]):
            raise MirrorError(f"image record {self.engine}: bad image id {self.image_id!r}")
        if not is_sha256(self.archive_sha256):
            raise MirrorError(f"image record {self.engine}: bad archive digest")

    @property
    def pinned_ref(self) -> str:
        """The reference a manifest should use: ``repo@sha256:…`` if known, else the image ID.

        ``docker load`` (classic image store) does not restore registry digests, so on the
        isolated side only the image ID resolves locally; a registry digest is right for
        clusters that pull from an internal registry.
        """
        return self.repo_digest or self.image_id

    @property
    def record_sha256(self) -> str:
        """Digest of the canonical record; listed in the bundle's ``extra_blobs``."""
        return sha256_bytes(canonical_json(self.to_json()))

    def to_json(self) -> dict[str, Any]:
        """JSON form, with the schema URI."""
        return {"schema": IMAGE_RECORD_SCHEMA, **asdict(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ImageRecord:
        """Inverse of :meth:`to_json`; refuses an unknown schema."""
        if d.get("schema") != IMAGE_RECORD_SCHEMA:
            raise MirrorError(f"unknown image record schema {d.get('schema')!r}")
        try:
            return cls(
                engine=str(d["engine"]), reference=str(d["reference"]),
                image_id=str(d["image_id"]), archive_sha256=str(d["archive_sha256"]),
                archive_size=int(d["archive_size"]), repo_digest=d.get("repo_digest"),
                platform=str(d.get("platform", "")),
                docker_version=str(d.get("docker_version", "")),
                saved_at=str(d.get("saved_at", "")),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise MirrorError(f"image record is malformed: {err}") from err


def read_image_records(mirror: Mirror, name: str) -> dict[str, ImageRecord]:
    """All image records of a bundle, by engine (empty when none were saved)."""
    out: dict[str, ImageRecord] = {}
    folder = mirror.bundle_dir(name) / "images"
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError) as err:
            raise VerificationError(f"image record {path} is unreadable: {err}") from err
        rec = ImageRecord.from_json(data)
        if rec.engine != path.stem:
            raise VerificationError(f"image record {path} names engine {rec.engine!r}")
        out[rec.engine] = rec
    return out
