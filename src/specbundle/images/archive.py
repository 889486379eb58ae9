"""Read a ``docker save`` archive without extracting it, to learn which image it holds.

Both formats Docker writes are understood: the classic one (``manifest.json`` naming
``<id>.json`` and ``<layer>/layer.tar``) and the OCI layout of Docker 25+ (``manifest.json``
naming ``blobs/sha256/<hex>``). The image ID is the sha256 of the config blob, so checking it
before ``docker load`` proves which image the daemon will create. Members are only read,
never extracted, so hostile paths inside the tarball cannot land anywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from specbundle.errors import VerificationError
from specbundle.strict import loads_json, open_regular

__all__ = ["ArchiveInfo", "inspect_archive"]

_MAX_JSON = 16 * 1024 * 1024


@dataclass(frozen=True)
class ArchiveInfo:
    """What an image archive declares and what its config hashes to."""

    image_id: str
    repo_tags: tuple[str, ...]
    layers: tuple[str, ...]
    diff_ids: tuple[str, ...]


def _read_member(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.getmember(name)
    if not member.isfile() or member.size > _MAX_JSON:
        raise VerificationError(f"image archive member {name!r} is not a small regular file")
    fh = tar.extractfile(member)
    if fh is None:
        raise VerificationError(f"image archive member {name!r} is unreadable")
    with fh:
        return fh.read()


def _layer_digest(tar: tarfile.TarFile, name: str) -> str:
    member = tar.getmember(name)
    fh = tar.extractfile(member)
    if fh is None:
        raise VerificationError(f"image archive layer {name!r} is not a file")
    h = hashlib.sha256()
    with fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def inspect_archive(source: Path | BinaryIO, *, check_layers: bool = True) -> ArchiveInfo:
    """Parse the archive's manifest and config; verify layer digests against the config.

    Raises :class:`VerificationError` for an archive that holds no image, more than one
    image, or layers whose bytes differ from the config's ``rootfs.diff_ids``.
    """
    path = source if isinstance(source, Path) else getattr(source, "name", "<archive>")
    try:
        with (open_regular(source, follow=True) if isinstance(source, Path)  # never a FIFO
              else contextlib.nullcontext(source)) as fh, \
                tarfile.open(fileobj=fh, mode="r:") as tar:
            try:
                manifest = loads_json(_read_member(tar, "manifest.json"), what="manifest.json")
            except KeyError:
                raise VerificationError(f"{path}: no manifest.json; not an image archive") from None
            if not isinstance(manifest, list) or len(manifest) != 1:
                raise VerificationError(f"{path}: expected exactly one image in the archive")
            entry = manifest[0]
            config_name = str(entry["Config"])
            config = _read_member(tar, config_name)
            image_id = "sha256:" + hashlib.sha256(config).hexdigest()
            layers = tuple(str(x) for x in entry.get("Layers") or ())
            conf = loads_json(config, what="image config")
            diff_ids = tuple(conf.get("rootfs", {}).get("diff_ids") or ())
            if len(diff_ids) != len(layers):
                raise VerificationError(
                    f"{path}: config lists {len(diff_ids)} layers, manifest {len(layers)}"
                )
            if check_layers:
                for i, (layer, want) in enumerate(zip(layers, diff_ids, strict=True)):
                    got = _layer_digest(tar, layer)
                    if got != want:
                        raise VerificationError(
                            f"{path}: layer {i} ({layer}) hashes to {got}, config says {want}"
                        )
            return ArchiveInfo(image_id, tuple(entry.get("RepoTags") or ()), layers, diff_ids)
    except (tarfile.TarError, KeyError, ValueError, TypeError, AttributeError) as err:
        raise VerificationError(f"{path}: not a readable image archive: {err}") from err
