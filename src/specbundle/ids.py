"""Identifier validators for every value that may become part of a filesystem path.

Commits, repo ids, bundle names and relative file paths arrive from hubs, transfer sets and
mirror records, all hostile until verified. Each validator returns the value unchanged or
raises ``ValueError`` with a one-line reason; callers wrap it into their own error kind
(``VerificationError`` for transfer/mirror data, ``UsageError`` for user input). One module so
that every boundary applies the same rules.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

__all__ = ["check_bundle_name", "check_commit", "check_digest", "check_rel_path",
           "check_repo", "is_commit", "printable"]

#: git sha1 (40 hex) or sha256 object format (64 hex); a ``dir:`` source's content commit is
#: a sha1 of its file list, so it has the same shape.
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: Hugging Face repo ids: ``name`` or ``org/name`` of letters, digits, ``-_.``.
_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: C0 and C1 controls, DEL, and lone surrogates (non-UTF-8 bytes decoded with
#: ``surrogateescape``, or ``\\udc80``-style escapes in a hub's JSON): none can be a file name that
#: is written to a record, shown on a terminal or created on disk.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: Longest component any common file system creates (bytes of UTF-8).
_MAX_COMPONENT = 255


def is_commit(value: object) -> bool:
    """True for a lowercase 40- or 64-hex commit id."""
    return isinstance(value, str) and bool(_COMMIT.match(value))


def check_commit(value: object) -> str:
    """A commit id (40 hex, or 64 hex for sha256 repos); nothing else may name a snapshot."""
    if not is_commit(value):
        raise ValueError(f"not a commit id (40 or 64 lowercase hex): {value!r}")
    return str(value)


def check_digest(value: object) -> str:
    """A lowercase sha256 hex digest."""
    if not isinstance(value, str) or not _SHA256.match(value):
        raise ValueError(f"not a sha256 digest: {value!r}")
    return value


def check_repo(value: object) -> str:
    """A repo id, ``org/name`` or ``name``; for a ``dir:`` source, the folder's given name."""
    if not isinstance(value, str):
        raise ValueError(f"not a repo id: {value!r}")
    parts = value.split("/")
    if len(parts) > 2 or not all(_REPO_PART.match(p) and ".." not in p for p in parts):
        raise ValueError(f"not a repo id (org/name of letters, digits, -_.): {value!r}")
    return value


def check_bundle_name(value: object) -> str:
    """A bundle name: one path segment of letters, digits and ``-_.``, not starting with a dot."""
    if not isinstance(value, str) or not _NAME.match(value) or ".." in value:
        raise ValueError(f"not a bundle name (letters, digits, -_., max 128): {value!r}")
    return value


def check_rel_path(value: object) -> str:
    """A relative POSIX path inside a tree: no absolute, ``..``, ``.``, empty or control parts."""
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise ValueError(f"not a relative path: {value!r}")
    if _CONTROL.search(value) or "\\" in value:
        raise ValueError(f"path has control characters or backslashes: {printable(value)}")
    p = PurePosixPath(value)
    parts = value.split("/")
    if p.is_absolute() or any(x in ("..", ".", "") for x in parts):
        raise ValueError(f"path is absolute or has '..'/'.'/empty segments: {value!r}")
    if any(len(x.encode()) > _MAX_COMPONENT for x in parts):
        raise ValueError(f"path has a component longer than {_MAX_COMPONENT} bytes: "
                         f"{printable(value[:200])}")
    return p.as_posix()


def printable(value: str) -> str:
    """``value`` with controls, DEL, lone surrogates and backslashes escaped (``\\xNN``).

    For names that are refused or only reported: the result is valid UTF-8, holds nothing a
    terminal acts on, and always differs from a hostile original (it keeps a backslash), so a
    name checker still refuses it.
    """
    return re.sub(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\\]", _escape_char, value)


def _escape_char(m: re.Match[str]) -> str:
    o = ord(m.group())
    return "\\\\" if o == 0x5C else (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
