"""Engine-visible model paths and image references.

Engines get target and draft as absolute local paths inside the mirror, through a per-bundle
alias ``bundles/<name>/render/models/{target,draft}`` that is a relative symlink to the
pinned snapshot. The alias exists because snapshot folders are named after the hub repo
(``models--yuhuili--EAGLE3-...``) and vLLM rewrites an explicit ``method`` when the draft path
contains ``eagle-``/``eagle3``/``dflash``/``dspark`` (vLLM #47486); the alias name is neutral.
Relative links keep working when the whole mirror is mounted elsewhere or read-only.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from specbundle._fsutil import link_at, open_dir
from specbundle.errors import RenderError
from specbundle.mirror import Mirror
from specbundle.record import ArtifactRecord, BundleRecord

__all__ = [
    "METHOD_WORDS",
    "alias_dir",
    "ensure_aliases",
    "is_pinned",
    "method_words_in",
    "model_aliases",
    "resolve_image",
]

#: Substrings vLLM matches (lower-cased) in a draft path to infer the method.
METHOD_WORDS: tuple[str, ...] = ("eagle", "dflash", "dspark")

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_IMAGE_REF_RE = re.compile(r"^[A-Za-z0-9][^\s@'\"`$]*(@sha256:[0-9a-f]{64})?$")
_PINNED_RE = re.compile(r"(@|^)sha256:[0-9a-f]{64}$")


def alias_dir(mirror_root: Path, name: str) -> Path:
    """Folder holding the neutral model aliases of a bundle."""
    return mirror_root / "bundles" / name / "render" / "models"


def model_aliases(mirror_root: Path, name: str, *, has_draft: bool) -> tuple[Path, Path | None]:
    """The target and draft paths engines see (whether or not the links exist yet)."""
    base = alias_dir(mirror_root, name)
    return base / "target", (base / "draft") if has_draft else None


def method_words_in(path: Path | str) -> list[str]:
    """Method words in a path, lower-cased, in the order vLLM would test them."""
    low = str(path).lower()
    return [w for w in METHOD_WORDS if w in low]


def _alias_error(name: str, link: Path, err: OSError) -> RenderError:
    return RenderError(
        f"bundle {name!r}: cannot create the model alias {link}: {err.strerror or err}",
        hint="render once where the mirror is writable (or `oci pull --render-aliases`); "
             "the rendered manifests read the models there")


def ensure_aliases(mirror: Mirror, record: BundleRecord) -> tuple[Path, Path | None]:
    """Create or repoint the per-bundle aliases to the record's snapshots (atomic rename).

    Every step is relative to the alias folder's descriptor, opened without following links,
    so a link planted on the way cannot redirect the write; concurrent renders of one bundle
    (two servers started side by side) each stage their own temp link.
    """
    target, draft = model_aliases(mirror.root, record.name, has_draft=record.draft is not None)
    mirror.bundle_dir(record.name)  # the name checked before it touches the filesystem
    try:
        with open_dir(mirror.root, f"bundles/{record.name}/render/models") as dfd:
            for link, art in ((target, record.target), (draft, record.draft)):
                if link is not None and art is not None:
                    _point_alias(mirror, record.name, dfd, link, art)
    except OSError as err:  # a read-only mirror without the aliases in place
        raise _alias_error(record.name, target, err) from None
    return target, draft


def _point_alias(mirror: Mirror, name: str, dfd: int, link: Path, art: ArtifactRecord) -> None:
    snap = mirror.artifact_dir(art)
    if not snap.is_dir():
        raise RenderError(
            f"bundle {name!r}: {art.role} snapshot {snap} is missing from the mirror",
            hint="pull (or import) the bundle into this mirror first",
        )
    rel = os.path.relpath(snap, link.parent)
    try:
        st = os.stat(link.name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISLNK(st.st_mode):
            raise RenderError(f"refusing to replace {link}: it is not a model alias (a link)",
                              hint="remove it (someone planted it) and render again")
        if os.readlink(link.name, dir_fd=dfd) == rel:
            return
    try:
        link_at(dfd, link.name, rel)
    except OSError as err:  # a read-only mirror without the aliases in place
        raise _alias_error(name, link, err) from None


def is_pinned(image: str) -> bool:
    """True if an image names its content: ``name@sha256:...`` or a bare image ID."""
    return bool(_PINNED_RE.search(image))


def resolve_image(spec_image: str, *, image: str | None = None, digest: str | None = None) -> str:
    """The image to deploy: an explicit reference, the spec's image plus a digest, or as is.

    ``digest`` (``sha256:<hex>``, e.g. from ``docker image inspect`` on the isolated side)
    pins the spec's image without a registry; the tag is kept for people reading the manifest.
    """
    if image is not None and digest is not None:
        raise RenderError("give either an image reference or an image digest, not both")
    if image is not None:
        if not _IMAGE_REF_RE.match(image):  # it lands verbatim in shell, YAML and unit files
            raise RenderError(f"image reference {image!r} is not valid",
                              hint="use name[:tag]@sha256:<64 hex>, without spaces")
        return image
    if digest is None:
        return spec_image
    if not _DIGEST_RE.match(digest):
        raise RenderError(f"image digest {digest!r} is not of the form sha256:<64 hex>")
    return spec_image.split("@", 1)[0] + "@" + digest
