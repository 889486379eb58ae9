"""Image records: which engine image a bundle carries, pinned by every digest that names it.

One JSON file per engine at ``bundles/<name>/images/<engine>.json``. The archive itself is a
content-addressed object in the mirror; its digest is also listed in the bundle record's
``extra_blobs`` so that gc keeps it and export carries it under the signed transfer index.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from specbundle._fsutil import canonical_json
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import MirrorError, VerificationError
from specbundle.mirror import Mirror, versions
from specbundle.strict import loads_json

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


def read_image_records(mirror: Mirror, name: str, *, signed_version: int | None = None,
                       signed_digests: Mapping[str, str] | None = None,
                       ) -> dict[str, ImageRecord]:
    """All image records of a bundle, by engine (empty when none were saved).

    With ``signed_version`` and ``signed_digests`` (a verified manifest's ``version`` and
    ``images``), only the records stored with that signed version are read, each checked
    against its signed digest as it is read: the bundle-level ``images/`` folder is unsigned,
    so on the isolated side it must never name the image that runs. Without them (connected
    side), the bundle-level records.

    Raises:
        VerificationError: a signed record is missing or its bytes differ from the signed ones.
    """
    if signed_version is not None:
        return _signed_records(mirror, name, signed_version, signed_digests or {})
    out: dict[str, ImageRecord] = {}
    folder = mirror.bundle_dir(name) / "images"
    for path in sorted(folder.glob("*.json")):
        try:
            data = loads_json(path.read_bytes(), what=f"image record {path.name}")
        except (OSError, ValueError) as err:
            raise VerificationError(f"image record {path} is unreadable: {err}") from err
        rec = ImageRecord.from_json(data)
        if rec.engine != path.stem:
            raise VerificationError(f"image record {path} names engine {rec.engine!r}")
        out[rec.engine] = rec
    return out


_ENGINE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def _signed_records(mirror: Mirror, name: str, version: int,
                    digests: Mapping[str, str]) -> dict[str, ImageRecord]:
    out: dict[str, ImageRecord] = {}
    for engine, want in sorted(digests.items()):
        if not _ENGINE.fullmatch(engine):
            raise VerificationError(f"signed manifest names an invalid engine {engine[:40]!r}")
        raw = versions.read_signed_file(mirror, name, version, image_record_path(engine), want)
        try:
            rec = ImageRecord.from_json(loads_json(raw, what=f"image record {engine}"))
        except (ValueError, AttributeError) as err:  # MalformedDocument is a ValueError
            raise VerificationError(f"signed image record for {engine} is unusable: {err}"
                                    ) from None
        if rec.engine != engine:
            raise VerificationError(f"signed image record for {engine} names {rec.engine!r}")
        out[engine] = rec
    return out
