"""Image records: which engine image a bundle carries, pinned by every digest that names it.

One JSON file per engine at ``bundles/<name>/images/<engine>.json``. The archive itself is a
content-addressed object in the mirror; its digest is also listed in the bundle record's
``extra_blobs`` so that gc keeps it and export carries it under the signed transfer index.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from specbundle._fsutil import canonical_json
from specbundle.digest import is_sha256, sha256_bytes
from specbundle.errors import CorruptMirror, MirrorError, VerificationError
from specbundle.mirror import Mirror
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file

__all__ = ["ENGINE_NAME", "IMAGE_RECORD_SCHEMA", "ImageRecord", "bundle_image_bytes",
           "image_record_path", "parse_image_record", "read_image_records"]

IMAGE_RECORD_SCHEMA = "https://specbundle.dev/image-record/v1"
#: What an engine name in an image record path may look like.
ENGINE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


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
        if not isinstance(d.get("repo_digest"), str | None):
            raise MirrorError("image record is malformed: repo_digest is not a string")
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


def parse_image_record(raw: bytes, engine: str) -> ImageRecord:
    """One record's bytes, parsed strictly (duplicate keys refused) for ``engine``.

    Raises:
        MirrorError: unreadable, of another schema, or naming another engine.
    """
    if not ENGINE_NAME.fullmatch(engine):
        raise MirrorError(f"invalid engine name {engine[:40]!r} for an image record")
    try:
        doc = loads_json(raw, what=f"image record {engine}")
    except ValueError as err:  # MalformedDocument is a ValueError
        raise MirrorError(f"image record for {engine} is unreadable: {err}") from None
    if not isinstance(doc, dict):
        raise MirrorError(f"image record for {engine} is not a JSON object")
    rec = ImageRecord.from_json(doc)
    if rec.engine != engine:
        raise MirrorError(f"image record for {engine} names engine {rec.engine!r}")
    return rec


def bundle_image_bytes(mirror: Mirror, name: str) -> dict[str, bytes]:
    """Engine -> bytes of the bundle-level (unsigned, connected-side) image records."""
    d = mirror.bundle_dir(name) / "images"
    out: dict[str, bytes] = {}
    for p in sorted(d.glob("*.json")) if d.is_dir() else ():
        if p.is_file() and not p.is_symlink():
            try:
                out[p.stem] = read_mirror_file(p, what=f"bundles/{name}/images/{p.name}")
            except (MalformedDocument, OSError) as err:  # swapped in after the look above
                raise CorruptMirror(f"mirror {mirror.root}: {err}") from None
    return out


def read_image_records(mirror: Mirror, name: str) -> dict[str, ImageRecord]:
    """The bundle-level image records, by engine (connected side: save, ls, audit).

    These files are unsigned; a stage that acts on an image takes it from a
    :class:`~specbundle.bundle.Bundle` instead, whose verified form reads only the copies
    stored with the signed version.

    Raises:
        VerificationError: a record is unreadable or names another engine.
    """
    try:
        return {e: parse_image_record(raw, e)
                for e, raw in bundle_image_bytes(mirror, name).items()}
    except MirrorError as err:
        raise VerificationError(err.message) from None
