"""Isolated side: load a bundle's engine images into Docker only if they are the signed ones.

The images come from the bundle value (:class:`specbundle.bundle.Bundle`) and nothing else.
Before ``docker load`` each archive must (1) be vouched for: a verified bundle gives only the
image records stored with its signed version, each checked against the digest its manifest
signs, and the archives those signed records name (no side file, such as a transfer index
copied into the mirror, can add or bring back an image); the unsigned reading gives the
mirror's own bundle record (``extra_blobs``), which proves integrity but not authorship, so
the CLI takes that path only when asked to (``--allow-unsigned``); (2) hash to the recorded
digest; (3) hold exactly the recorded image: its config blob hashes to the image ID
(``docker load`` itself checks each layer against the config's ``diff_ids``). One file
descriptor is hashed, inspected and streamed to the daemon, so the bytes checked are the
bytes loaded. Any mismatch refuses the load.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

import docker
import docker.errors

from specbundle.bundle import Bundle
from specbundle.digest import sha256_bytes
from specbundle.errors import EnvironmentProblem, VerificationError
from specbundle.image_record import ImageRecord
from specbundle.images.archive import inspect_archive
from specbundle.images.daemon import connect
from specbundle.strict import MalformedDocument, open_regular

__all__ = ["LoadedImage", "Vouched", "check_image", "load_images", "vouched_digests"]

@dataclass(frozen=True)
class Vouched:
    """Digests some record vouches for, and which record that is (for messages)."""

    digests: frozenset[str]
    source: str
    signed: bool


@dataclass(frozen=True)
class LoadedImage:
    """An engine image now present in the daemon, proven equal to the vouched record."""

    engine: str
    reference: str
    image_id: str
    archive_sha256: str
    was_present: bool
    signed: bool


def vouched_digests(bundle: Bundle) -> Vouched:
    """What may be loaded for ``bundle``: the digests its own value vouches for."""
    return Vouched(bundle.image_digests(), str(bundle.custody()["source"]), bundle.signed)


def _hash_fd(fh: BinaryIO) -> str:
    h = hashlib.sha256()
    fh.seek(0)
    for block in iter(lambda: fh.read(4 << 20), b""):
        h.update(block)
    fh.seek(0)
    return h.hexdigest()


def check_image(rec: ImageRecord, record_bytes: bytes, vouched: Vouched, fh: BinaryIO) -> None:
    """Raise :class:`VerificationError` unless ``fh`` holds exactly the vouched-for image."""
    record_ok = bool({rec.record_sha256, sha256_bytes(record_bytes)} & vouched.digests)
    if not record_ok or rec.archive_sha256 not in vouched.digests:
        what = "image record" if not record_ok else "image archive"
        raise VerificationError(
            f"{what} for {rec.engine} is not bound to the {vouched.source}",
            hint="re-run `specbundle images save` before signing and exporting the bundle",
        )
    got = _hash_fd(fh)
    if got != rec.archive_sha256:
        raise VerificationError(
            f"image archive for {rec.engine} hashes to {got}, the signed record says "
            f"{rec.archive_sha256}; refusing to load a tampered archive"
        )
    # The archive digest already covers every layer (and docker load checks diff_ids), so only
    # the config is read here: one extra pass over a 10 GB image would buy nothing.
    info = inspect_archive(fh, check_layers=False)
    if info.image_id != rec.image_id:
        raise VerificationError(
            f"image archive for {rec.engine} holds image {info.image_id}, the signed record "
            f"says {rec.image_id}; refusing to load"
        )
    fh.seek(0)


def _load_one(client: docker.DockerClient, rec: ImageRecord, fh: BinaryIO) -> bool:
    try:
        client.images.get(rec.image_id)
        present = True
    except docker.errors.ImageNotFound:
        present = False
    try:
        if not present:
            client.images.load(fh)
        image = client.images.get(rec.image_id)
    except docker.errors.ImageNotFound as err:
        raise VerificationError(
            f"docker load did not produce image {rec.image_id} for {rec.engine}"
        ) from err
    except docker.errors.APIError as err:
        raise EnvironmentProblem(f"docker load failed for {rec.engine}: {err.explanation}") from err
    if str(image.id) != rec.image_id:
        raise VerificationError(
            f"daemon reports {image.id} for {rec.engine}, the record says {rec.image_id}"
        )
    if "@" not in rec.reference and rec.reference not in image.tags:
        image.tag(rec.reference)
    return present


def load_images(
    bundle: Bundle, *, engines: Sequence[str] | None = None,
    client: docker.DockerClient | None = None,
) -> tuple[LoadedImage, ...]:
    """Check and ``docker load`` the images of ``bundle``; returns what was loaded.

    A verified bundle loads only what its signed version names (see the module docstring).
    """
    mirror, name = bundle.mirror, bundle.name
    vouched = vouched_digests(bundle)
    records = bundle.image_records()
    wanted = list(engines) if engines else sorted(records)
    missing = [e for e in wanted if e not in records]
    if missing or not wanted:
        raise VerificationError(
            f"bundle {name!r} carries no image for {', '.join(missing) or 'any engine'}",
            hint="run `specbundle images save` on the connected side before signing",
        )
    client = client or connect()
    out: list[LoadedImage] = []
    for engine in wanted:
        rec = records[engine]
        raw = bundle.image_record_bytes(engine) or b""
        path = mirror.object_path(rec.archive_sha256)
        try:
            fh = open_regular(path, what=f"image archive {rec.archive_sha256}")
        except MalformedDocument as err:
            raise VerificationError(str(err), hint="restore the bundle from a transfer set") \
                from None
        except FileNotFoundError:
            raise VerificationError(
                f"image archive {rec.archive_sha256} for {engine} is missing from the mirror"
            ) from None
        with fh:
            check_image(rec, raw, vouched, fh)
            present = _load_one(client, rec, fh)
        out.append(LoadedImage(engine, rec.reference, rec.image_id, rec.archive_sha256, present,
                               vouched.signed))
    with mirror.lock():
        for li in out:
            mirror.append_event("image-load", name, {
                "engine": li.engine, "image_id": li.image_id, "signed": li.signed,
                "archive_sha256": li.archive_sha256, "was_present": li.was_present,
                "custody": bundle.custody(),
            })
    return tuple(out)
