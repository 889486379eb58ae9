"""The source's file listing, judged before anything is selected, fetched or recorded.

A listing comes from a hub (or a mirror in front of one) the attacker may control, so every
entry is checked here, once, for every source:

- an entry whose declarations cannot be verified (a size that is not a non-negative integer,
  an LFS sha256 or git blob id that is not lowercase hex) or a listing no git tree can have
  (the same path twice, a path that is both a file and a folder) is refused outright: which
  bytes would be mirrored under that name is ambiguous (:class:`ListingRejected`, exit 3);
- a name that cannot safely become a path in a model tree (traversal, absolute, backslash,
  control characters, lone surrogates, over-long components: :func:`specbundle.ids.check_rel_path`;
  over :data:`MAX_PATH_BYTES` in all), or that hides or disguises what it is (bidi, zero-width,
  tag or filler characters, look-alike letters, digits and dots, decomposed forms, Windows
  device names, trailing dots, a ``.git`` folder: the scan's own
  :func:`specbundle.names.name_problem`, less the characters only Windows refuses)
  is never fetched nor mirrored; nor are names that collide once case and normalisation
  are folded (``Config.json`` beside ``config.json``). It is recorded as skipped, under an
  escaped spelling that carries no control or invisible character, so the record, the event
  log and every terminal stay safe, and the scan still sees the name and blocks it.
"""

from __future__ import annotations

import re
from collections import Counter

from specbundle import ids
from specbundle.digest import is_sha256
from specbundle.errors import ExitCode, PullError
from specbundle.names import colliding, name_problem
from specbundle.pull.interface import RemoteFile
from specbundle.record import SkippedFile
from specbundle.text import safe_text

__all__ = ["MAX_PATH_BYTES", "UNSAFE_NAME_REASON", "ListingRejected", "screen_listing"]

UNSAFE_NAME_REASON = "unsafe name, never fetched"
#: Longest name mirrored: the mirror's own folders come on top, and the kernel refuses paths
#: past 4096 bytes (the scan calls a longer name unsafe too).
MAX_PATH_BYTES = 1024
_BLOB_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_SHOWN = 5


class ListingRejected(PullError):
    """The source listed files in a way no honest git tree or hub can; nothing is mirrored."""

    exit_code = ExitCode.VERIFICATION_FAILED
    kind = "listing"


def _shown(paths: list[str]) -> str:
    more = f" (+{len(paths) - _SHOWN} more)" if len(paths) > _SHOWN else ""
    return ", ".join(repr(ids.printable(p)[:200]) for p in paths[:_SHOWN]) + more


def _declaration_problem(f: RemoteFile) -> str | None:
    # typed fields, but filled from a hub's JSON by a library: checked as the objects they are
    path: object = f.path
    size: object = f.size
    lfs: object = f.lfs_sha256
    blob: object = f.git_blob_id
    if not isinstance(path, str):
        return "a file name that is not a string"
    if size is not None and (type(size) is not int or size < 0):
        return f"size {size!r} is not a byte count"
    if lfs is not None and not (isinstance(lfs, str) and is_sha256(lfs)):
        return "LFS sha256 is not 64 lowercase hex digits"
    if blob is not None and not (isinstance(blob, str) and _BLOB_ID.match(blob)):
        return "git blob id is not 40 or 64 lowercase hex digits"
    return None


def screen_listing(
    where: str, files: tuple[RemoteFile, ...],
) -> tuple[tuple[RemoteFile, ...], tuple[SkippedFile, ...]]:
    """Split a listing into entries that may be selected and unsafe names (recorded skipped).

    ``where`` names the repo and commit in error messages.

    Raises:
        ListingRejected: an unverifiable declaration, a duplicate path, or a path that is
            both a file and a folder.
    """
    for f in files:
        why = _declaration_problem(f)
        if why:
            raw: object = f.path
            name = ids.printable(raw)[:200] if isinstance(raw, str) else "?"
            raise ListingRejected(f"{where}: the source's entry for {name!r} is unusable: {why}; "
                                  "nothing was mirrored")
    dupes = sorted(p for p, n in Counter(f.path for f in files).items() if n > 1)
    if dupes:
        raise ListingRejected(f"{where}: the source lists the same path more than once: "
                              f"{_shown(dupes)}; nothing was mirrored")
    keep: list[RemoteFile] = []
    unsafe: list[SkippedFile] = []
    for f in files:
        try:
            ids.check_rel_path(f.path)
            if len(f.path.encode()) > MAX_PATH_BYTES:
                raise ValueError(f"path longer than {MAX_PATH_BYTES} bytes: ...")
            disguised = name_problem(f.path, portable=False)
            if disguised:
                raise ValueError(disguised)
        except ValueError as err:
            reason = safe_text(str(err).split(":", 1)[0])
            # printable() first: its backslash escapes keep the stored spelling refused
            unsafe.append(SkippedFile(safe_text(ids.printable(f.path)),
                                      f"{UNSAFE_NAME_REASON} ({reason})", f.size))
        else:
            keep.append(f)
    # names one case-insensitive or normalising file system (the mirror's, or the one the
    # bundle is carried on) would make one file: which bytes end up there is ambiguous
    clashing = colliding([f.path for f in keep])
    if clashing:
        unsafe.extend(SkippedFile(f.path, f"{UNSAFE_NAME_REASON} (collides with another name "
                                  "on case-insensitive file systems)", f.size)
                      for f in keep if f.path in clashing)
        keep = [f for f in keep if f.path not in clashing]
    folders = {"/".join(parts[:i]) for f in keep for parts in [f.path.split("/")]
               for i in range(1, len(parts))}
    clash = sorted(f.path for f in keep if f.path in folders)
    if clash:
        raise ListingRejected(f"{where}: the source lists a path as both a file and a folder: "
                              f"{_shown(clash)}; nothing was mirrored")
    return tuple(keep), tuple(sorted(unsafe, key=lambda s: s.path))
