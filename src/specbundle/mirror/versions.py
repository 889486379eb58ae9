"""Bundle versions on disk: immutable signed manifests and the one ref that names the current.

Layout inside ``bundles/<name>/``::

    versions/<NNNNNN>/manifest.json            DSSE envelope of the bundle-manifest statement
    versions/<NNNNNN>/sign/<role>/model.sig    OMS signature per artifact (the manifest's roots)
    versions/<NNNNNN>/scan/report.json         the scan report whose digest the manifest signs
    versions/<NNNNNN>/images/<engine>.json     the image records whose digests it signs
    current                                    the current version number; replaced by a rename

Every file of a version is immutable once written, so two versions never share a mutable
file and a half-written newer version can never change what the current one means.

A writer (sign, import) puts every byte of a version in place first and flips ``current`` as
its last step, so a crash leaves the previous version visible, never a mixture. Layout lives
here, with the mirror, so the isolated side never imports the signer to find a file.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from specbundle import _faults
from specbundle._fsutil import disk_error, open_dir, rename_at, tmp_name, unlink_at, write_at
from specbundle.digest import sha256_bytes
from specbundle.errors import VerificationError
from specbundle.mirror.store import Mirror
from specbundle.record import BundleRecord
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file

if TYPE_CHECKING:
    from specbundle.attest.manifest import BundleManifest

__all__ = [
    "CURRENT_REF",
    "SCAN_REPORT",
    "current_version",
    "files_to_commit",
    "flip_current",
    "live_records",
    "manifest_rel",
    "model_sig_rel",
    "read_current_manifest",
    "read_manifest",
    "read_signed_file",
    "read_version_file",
    "reclaim_unflipped",
    "version_images",
    "version_rel",
    "write_manifest",
]

CURRENT_REF = "current"
#: The scan stage's report, whose digest the manifest signs.
SCAN_REPORT = "scan/report.json"
_VERSION = re.compile(r"^[1-9][0-9]{0,8}$")
#: admit's status file (specbundle.admit.api.STATUS_FILE): the admitted manifest stays kept
_ADMISSION_STATUS = "admit/status.json"
_faults.register("versions.ref-staged", "versions.ref-flipped")


def model_sig_rel(role: str) -> str:
    """Bundle-relative path of an artifact's ``model.sig``."""
    if role not in ("target", "draft"):
        raise ValueError(f"unknown artifact role {role!r}")
    return f"sign/{role}/model.sig"


def version_rel(version: int, rel: str = "") -> str:
    """Bundle-relative path of a file inside one version's folder."""
    return f"versions/{version:06d}/{rel}".rstrip("/")


def manifest_rel(version: int) -> str:
    """Bundle-relative path of one version's manifest."""
    return version_rel(version, "manifest.json")


def read_version_file(mirror: Mirror, name: str, version: int, rel: str) -> bytes | None:
    """A file of one version (``sign/<role>/model.sig``, ``scan/report.json``, ...)."""
    return mirror.read_bundle_file(name, version_rel(version, rel))


def read_signed_file(mirror: Mirror, name: str, version: int, rel: str, sha256: str) -> bytes:
    """A file of one version, only if its bytes hash to ``sha256`` (the digest a verified
    manifest signs for it): what is acted on is what was verified, even if the mirror changed
    since verification.

    Raises:
        VerificationError: the file is missing or its bytes differ from the signed ones.
    """
    raw = read_version_file(mirror, name, version, rel)
    if raw is None or sha256_bytes(raw) != sha256:
        raise VerificationError(
            f"bundle {name!r}: {rel} differs from the one signed in version {version}",
            hint="verify the bundle again; the mirror changed after verification")
    return raw


def version_images(mirror: Mirror, name: str, version: int) -> dict[str, bytes]:
    """Engine -> image record bytes stored with one version."""
    d = mirror.bundle_dir(name) / version_rel(version, "images")
    if not d.is_dir() or d.is_symlink():
        return {}
    out: dict[str, bytes] = {}
    for p in sorted(d.glob("*.json")):
        raw = read_version_file(mirror, name, version, f"images/{p.name}")
        if raw is not None:
            out[p.stem] = raw
    return out


def current_version(mirror: Mirror, name: str) -> int | None:
    """The version ``current`` names, None if the bundle has no manifest yet.

    Raises:
        VerificationError: the ref holds anything but a version number (tampered or corrupt).
    """
    raw = mirror.read_bundle_file(name, CURRENT_REF)
    if raw is None:
        return None
    text = raw.decode("ascii", errors="replace").strip()
    if not _VERSION.match(text):
        raise VerificationError(f"bundles/{name}/{CURRENT_REF} is corrupt: {text[:40]!r}",
                                hint="restore the bundle from a transfer set or re-sign it")
    return int(text)


def read_manifest(mirror: Mirror, name: str, version: int) -> bytes | None:
    """One version's manifest envelope bytes."""
    return mirror.read_bundle_file(name, manifest_rel(version))


def read_current_manifest(mirror: Mirror, name: str) -> tuple[int, bytes] | None:
    """(version, envelope bytes) of the current version; None when never signed.

    Raises:
        VerificationError: ``current`` names a version whose manifest is missing.
    """
    v = current_version(mirror, name)
    if v is None:
        return None
    data = read_manifest(mirror, name, v)
    if data is None:
        raise VerificationError(f"bundle {name!r}: current names version {v}, whose manifest "
                                "is missing")
    return v, data


def _signed(data: bytes, where: str) -> BundleManifest:
    from specbundle.attest.manifest import parse_manifest_unverified  # attest imports mirror

    try:
        return parse_manifest_unverified(data)
    except VerificationError as err:
        raise VerificationError(f"{where}: {err.message}",
                                hint="restore the bundle from a transfer set or re-sign it") \
            from None


def live_records(mirror: Mirror, name: str) -> list[BundleRecord]:
    """The signed versions whose bytes must stay: the current one and the one an admission
    pins (``admit/status.json`` names its manifest digest). Unverified parsing is enough
    here: this only ever *keeps* bytes, and verify checks the signature before any use.

    Raises:
        VerificationError: ``current`` or its manifest is corrupt (gc cannot tell what to keep).
    """
    cur = read_current_manifest(mirror, name)
    if cur is None:
        return []
    man = _signed(cur[1], f"bundles/{name}/{manifest_rel(cur[0])}")
    out = [man.record]
    raw = mirror.read_bundle_file(name, _ADMISSION_STATUS)
    try:
        pinned = loads_json(raw, what=_ADMISSION_STATUS).get("manifest_sha256") if raw else None
    except (MalformedDocument, AttributeError):
        pinned = None  # an unreadable status pins nothing
    if not isinstance(pinned, str) or pinned == man.digest:
        return out
    d = mirror.bundle_dir(name) / "versions"
    for p in sorted(d.glob("*/manifest.json")) if d.is_dir() else ():
        try:
            data = read_mirror_file(p, what=str(p))
        except (MalformedDocument, OSError) as err:
            raise VerificationError(f"cannot read {p}: {err}") from None
        old = _signed(data, str(p))
        if old.digest == pinned:
            out.append(old.record)
    return out


def write_manifest(mirror: Mirror, name: str, version: int, data: bytes) -> Path:
    """Write a version's manifest; an existing different one is never overwritten."""
    old = read_manifest(mirror, name, version)
    if old is not None and old != data:
        raise VerificationError(f"bundle {name!r} version {version} already exists with other "
                                "content; versions are immutable")
    return mirror.write_bundle_file(name, manifest_rel(version), data)


def reclaim_unflipped(mirror: Mirror, name: str) -> list[int]:
    """Remove version folders above ``current`` (a crashed writer's); caller holds the lock."""
    cur = current_version(mirror, name) or 0
    try:
        with open_dir(mirror.root, f"bundles/{name}/versions", create=False) as dfd:
            with os.scandir(dfd) as it:
                names = sorted(e.name for e in it if e.name.isdigit() and int(e.name) > cur)
            for n in names:  # relative to the folder checked: a planted link is not followed
                shutil.rmtree(n, dir_fd=dfd)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names)


def flip_current(mirror: Mirror, name: str, version: int) -> None:
    """Make ``version`` current by one atomic rename (the writer's last step)."""
    mirror.bundle_dir(name)
    where = mirror.root / "bundles" / name
    tmp = tmp_name(CURRENT_REF)
    with open_dir(mirror.root, f"bundles/{name}") as dfd:  # the folder checked, not a link
        write_at(dfd, tmp, f"{version}\n".encode(), where)
        _faults.point("versions.ref-staged")
        try:
            rename_at(dfd, tmp, dfd, CURRENT_REF)
        except OSError as err:
            unlink_at(dfd, tmp)
            raise disk_error(err, where / CURRENT_REF, what="flipping") from err
    _faults.point("versions.ref-flipped")


def files_to_commit(staging: Mirror, mirror: Mirror, name: str, v: int,
                    skip: tuple[str, ...]) -> list[tuple[str, bytes]]:
    """The files of bundle ``name`` staged in ``staging`` that committing version ``v`` into
    ``mirror`` writes (less ``skip`` and dot files). Of ``versions/`` only the new version's,
    and none may differ from a file the mirror already holds for that version: versions are
    immutable, a set from a forked mirror never rewrites history. Checked before any write.

    Raises:
        VerificationError: the mirror holds this version with other content.
    """
    sroot, own = staging.bundle_dir(name), version_rel(v) + "/"
    out: list[tuple[str, bytes]] = []
    for p in sorted(sroot.rglob("*")):
        rel = p.relative_to(sroot).as_posix()
        if not p.is_file() or p.is_symlink() or rel in skip \
                or any(x.startswith(".") for x in rel.split("/")):
            continue
        if rel.startswith("versions/") and not rel.startswith(own):
            continue  # an older (or other) version: history is never rewritten
        data = staging.read_bundle_file(name, rel)
        if data is None:
            continue
        if rel.startswith(own):
            have = mirror.read_bundle_file(name, rel)
            if have is not None and have != data:
                raise VerificationError(
                    f"mirror already holds version {v} of {name!r} with another "
                    f"{rel.split('/', 2)[-1]}; versions are immutable (a forked mirror's set?)",
                    hint="import it into another mirror")
            if have is not None:
                continue
        out.append((rel, data))
    return out
