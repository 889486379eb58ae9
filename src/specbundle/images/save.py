"""Connected side: resolve each engine image to its digests and save it into the mirror.

``docker save`` streams the archive; it is hashed while written to a mirror temp file and
renamed into the object store, so a crash leaves no half archive visible. The record is
written after the object, then the digests of the archive and of the canonical record are
added to the bundle's ``extra_blobs``: gc keeps them and ``specbundle export`` carries them,
and ``specbundle sign`` stores the record with the version it signs, which is what
``images load --trust`` reads. Save before signing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Sequence

import docker
import docker.errors
from docker.models.images import Image

from specbundle._fsutil import canonical_json, open_dir, open_file_at
from specbundle.errors import EnvironmentProblem, UsageError
from specbundle.image_record import ImageRecord, image_record_path, read_image_records
from specbundle.images.daemon import connect, daemon_version
from specbundle.mirror import Mirror, utc_now
from specbundle.spec import EngineName

__all__ = ["engine_images", "save_images"]

Progress = Callable[[str, int], None]


def engine_images(spec: dict[str, object], engines: Sequence[str] | None = None) -> dict[str, str]:
    """Image reference per engine named in a stored spec (``engines.<name>.image``)."""
    configured = spec.get("engines")
    table = configured if isinstance(configured, dict) else {}
    out: dict[str, str] = {}
    for engine in EngineName:
        settings = table.get(engine.value)
        if isinstance(settings, dict) and settings.get("image"):
            out[engine.value] = str(settings["image"])
    if engines:
        unknown = [e for e in engines if e not in out]
        if unknown:
            raise UsageError(
                f"the bundle spec names no image for {', '.join(unknown)}",
                hint=f"engines with an image: {', '.join(out) or 'none'}",
            )
        out = {e: out[e] for e in engines}
    return out


def _repo_of(ref: str) -> str:
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


def _resolve(client: docker.DockerClient, ref: str, pull: bool) -> Image:
    try:
        if pull:
            return client.images.pull(ref)
        return client.images.get(ref)
    except docker.errors.ImageNotFound as err:
        raise UsageError(
            f"image {ref!r} is not present in the local Docker engine",
            hint="use `specbundle images pull` on a connected machine, or docker pull it first",
        ) from err
    except docker.errors.APIError as err:
        raise EnvironmentProblem(f"docker could not resolve {ref!r}: {err.explanation}") from err


def _repo_digest(image: Image, ref: str) -> str | None:
    repo = _repo_of(ref)
    digests = [str(d) for d in image.attrs.get("RepoDigests") or ()]
    if "@sha256:" in ref:
        return ref
    return next((d for d in digests if d.split("@", 1)[0] == repo), None)


def _save_one(
    mirror: Mirror, client: docker.DockerClient, engine: str, ref: str, *, pull: bool,
    progress: Progress | None,
) -> ImageRecord:
    image = _resolve(client, ref, pull)
    tmp = mirror.new_temp_path(f"image-{engine}")
    h = hashlib.sha256()
    size = 0
    try:
        with open_dir(mirror.root, "tmp") as dfd:  # the temp file itself, never a link
            fd = open_file_at(dfd, tmp.name, tmp.parent, os.O_WRONLY | os.O_TRUNC)
        with os.fdopen(fd, "wb") as fh:
            for chunk in image.save(named=True):
                fh.write(chunk)
                h.update(chunk)
                size += len(chunk)
                if progress is not None:
                    progress(engine, len(chunk))
        digest = h.hexdigest()
        mirror.put_object(tmp, digest)
    except docker.errors.APIError as err:
        raise EnvironmentProblem(f"docker save {ref!r} failed: {err.explanation}") from err
    finally:
        tmp.unlink(missing_ok=True)
    attrs = image.attrs
    return ImageRecord(
        engine=engine, reference=ref, image_id=str(image.id), archive_sha256=digest,
        archive_size=size, repo_digest=_repo_digest(image, ref),
        platform=f"{attrs.get('Os', '')}/{attrs.get('Architecture', '')}",
        docker_version=daemon_version(client), saved_at=utc_now(),
    )


def save_images(
    mirror: Mirror, name: str, *, engines: Sequence[str] | None = None, pull: bool = False,
    client: docker.DockerClient | None = None, progress: Progress | None = None,
) -> tuple[ImageRecord, ...]:
    """Save the engine images a bundle's spec names into the mirror and record them.

    ``pull`` asks the daemon to pull each tag first (connected side, registry access);
    without it the image must already be in the local engine. Returns one record per engine.
    """
    record = mirror.load_bundle(name)
    refs = engine_images(record.spec, engines)
    if not refs:
        raise UsageError(f"bundle {name!r} names no engine image to save")
    client = client or connect()
    saved = [_save_one(mirror, client, e, r, pull=pull, progress=progress) for e, r in refs.items()]
    with mirror.lock():
        replaced = {d for e, r in read_image_records(mirror, name).items() if e in refs
                    for d in (r.archive_sha256, r.record_sha256)}
        added: set[str] = set()
        for rec in saved:
            body = canonical_json(rec.to_json())
            added |= {rec.archive_sha256, mirror.put_bytes(body)}
            mirror.write_bundle_file(name, image_record_path(rec.engine), body + b"\n")
        current = mirror.load_bundle(name)
        blobs = (set(current.extra_blobs) - replaced) | added
        mirror.save_bundle(dataclasses.replace(current, extra_blobs=tuple(sorted(blobs))))
        for rec in saved:
            mirror.append_event("image-save", name, {
                "engine": rec.engine, "reference": rec.reference, "image_id": rec.image_id,
                "repo_digest": rec.repo_digest, "archive_sha256": rec.archive_sha256,
            })
    return tuple(saved)
