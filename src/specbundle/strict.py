"""Strict parsing for every byte that crosses a trust boundary (spec, policy, records, logs).

One place decides what a well-formed JSON or YAML document is, so that no two readers of the
same file can disagree: duplicate keys are refused (readers differ on which one wins), nesting
is bounded (Python's parsers recurse and a 100 000-deep list crashes them), size is bounded
before a byte is parsed (a 100 MB bundle.yaml would parse for minutes), the encoding must be
UTF-8 (a UTF-16 or non-UTF-8 file is refused with its name, not half-decoded), and strings
may not carry lone surrogates (they make every later writer crash).

Every failure is a :class:`MalformedDocument` with a one-line reason. Callers translate it
into their own error kind: an input file given by the user is a ``SpecError`` (exit 2), a
record or log read from a mirror or transfer set is a ``VerificationError`` (exit 3).

Hand-written on top of ``json`` and PyYAML's ``SafeLoader`` because neither offers duplicate-key
refusal or depth limits as options; both parsers still do all the tokenising.
"""

from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "MalformedDocument",
    "decode_utf8",
    "dumps_safe",
    "load_json_file",
    "load_yaml_file",
    "loads_json",
    "loads_yaml",
    "open_regular",
    "read_bounded",
    "read_mirror_file",
]

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64
_MAX_YAML_ALIASES = 64
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


class MalformedDocument(ValueError):
    """A document that is not strictly well-formed; the message is one line."""


def decode_utf8(data: bytes, *, what: str = "document") -> str:
    """Strict UTF-8 (a UTF-8 BOM is dropped); UTF-16/32 and invalid bytes are refused."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise MalformedDocument(f"{what} is UTF-16/32 encoded; save it as UTF-8")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise MalformedDocument(
            f"{what} is not valid UTF-8 (byte {err.start}: {err.reason})"
        ) from None
    if "\x00" in text:
        raise MalformedDocument(f"{what} contains a NUL character")
    return text


def _open_fd(path: Path, follow: bool, name: str) -> int:
    """A non-blocking descriptor of a regular file (see :func:`open_regular`)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP and not follow:
            raise MalformedDocument(f"{name} is a symbolic link, not a regular file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise MalformedDocument(f"{name} is not a regular file")
    return fd


def open_regular(path: Path, *, follow: bool = False,
                 what: str | None = None) -> io.BufferedReader:
    """Open a regular file for streaming reads (hashing, copying) without ever blocking.

    The open is non-blocking (a FIFO nobody writes would hang a plain ``open`` forever), the
    descriptor must be a regular file (a FIFO, ``/dev/zero`` or a folder is refused before a
    byte is read), and only then is ``O_NONBLOCK`` cleared so reads behave as usual. With
    ``follow`` false a symbolic link in the last component is refused too; a snapshot file,
    which is a link into the content store by design, is opened with ``follow`` true.

    Raises:
        MalformedDocument: not a regular file, or a refused link (one line naming ``what``).
        OSError: the file cannot be opened (the caller names the path in its own error).
    """
    fd = _open_fd(path, follow, what or str(path))
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return io.BufferedReader(io.FileIO(fd, "rb"))
    except BaseException:
        os.close(fd)
        raise


def read_bounded(
    path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, what: str | None = None,
    follow: bool = True,
) -> bytes:
    """Read a whole regular file, refusing one larger than ``max_bytes`` before reading it.

    Opened as :func:`open_regular` does (never blocks; a FIFO, device or folder is refused);
    with ``follow`` false a symbolic link in the last component is refused too (every mirror
    read: see :func:`read_mirror_file`). Read straight from the descriptor (``O_NONBLOCK``
    does not change reads of a regular file): a tiny file costs less than ``read_bytes``.

    Raises:
        MalformedDocument: the file is too large, not a regular file, or a refused link.
        OSError: the file cannot be read (the caller names the path in its own error).
    """
    name = what or path.name
    fd = _open_fd(path, follow, name)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise MalformedDocument(f"{name} is larger than {max_bytes} bytes")
        chunks, left = [], max_bytes + 1
        while left > 0 and (block := os.read(fd, min(left, max(size + 1, 1 << 20)))):
            chunks.append(block)
            left -= len(block)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise MalformedDocument(f"{name} is larger than {max_bytes} bytes")
    return data


def read_mirror_file(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                     what: str | None = None) -> bytes:
    """The one way to read a file from a mirror or transfer set: a regular file, not a link,
    at most ``max_bytes`` (a link to ``/dev/zero`` or a FIFO is a malformed document)."""
    return read_bounded(path, max_bytes=max_bytes, what=what, follow=False)


def _depth(value: Any, limit: int) -> None:
    """Iterative depth check (recursion would be the very crash we guard against)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict):
            if d > limit:
                raise MalformedDocument(f"nested deeper than {limit} levels")
            for k, v in item.items():
                if isinstance(k, str) and _SURROGATE_RE.search(k):
                    raise MalformedDocument("a key contains a lone surrogate")
                stack.append((v, d + 1))
        elif isinstance(item, list):
            if d > limit:
                raise MalformedDocument(f"nested deeper than {limit} levels")
            stack.extend((v, d + 1) for v in item)
        elif isinstance(item, str) and _SURROGATE_RE.search(item):
            raise MalformedDocument("a string contains a lone surrogate")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise MalformedDocument(f"duplicate key {k!r}")
        out[k] = v
    return out


def _constant(name: str) -> None:
    raise MalformedDocument(f"non-JSON constant {name}")


_JSON_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")


def _json_depth(text: str) -> int:
    """Deepest bracket nesting outside strings, at C speed (regex + numpy, no Python loop)."""
    bare = _JSON_STRING_RE.sub("", text).encode("utf-8", "surrogatepass")
    arr = np.frombuffer(bare, dtype=np.uint8)
    step = np.isin(arr, _OPEN).astype(np.int32) - np.isin(arr, _CLOSE).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def loads_json(
    data: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH,
    what: str = "JSON document",
) -> Any:
    """Parse one JSON document strictly (see the module docstring for the rules)."""
    if len(data) > max_bytes:
        raise MalformedDocument(f"{what} is larger than {max_bytes} bytes")
    text = decode_utf8(data, what=what) if isinstance(data, bytes) else data
    if _json_depth(text) > max_depth:
        raise MalformedDocument(f"{what}: nested deeper than {max_depth} levels")
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except MalformedDocument as err:
        raise MalformedDocument(f"{what}: {err}") from None
    except RecursionError:
        raise MalformedDocument(f"{what}: nested too deeply") from None
    except json.JSONDecodeError as err:
        raise MalformedDocument(
            f"{what}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        ) from None
    if _SURROGATE_RE.search(text) or _SURROGATE_ESCAPE_RE.search(text):
        try:
            _depth(value, max_depth)
        except MalformedDocument as err:
            raise MalformedDocument(f"{what}: {err}") from None
    return value


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, deep nesting and alias bombs."""

    max_depth = DEFAULT_MAX_DEPTH

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > _MAX_YAML_ALIASES:
                raise MalformedDocument(f"more than {_MAX_YAML_ALIASES} YAML aliases")
        self._depth += 1
        if self._depth > self.max_depth:
            raise MalformedDocument(f"nested deeper than {self.max_depth} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    hashable = key in seen
                except TypeError:
                    raise MalformedDocument("a mapping key is not a scalar") from None
                if hashable:
                    line = key_node.start_mark.line + 1
                    raise MalformedDocument(f"line {line}: duplicate key {key!r}")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        ctx = f" ({err.context})" if err.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {err.problem or 'invalid'}{ctx}"
    return " ".join(str(err).split())


def loads_yaml(
    data: bytes | str, *, max_bytes: int = 1024 * 1024, max_depth: int = DEFAULT_MAX_DEPTH,
    what: str = "YAML document",
) -> Any:
    """Parse one YAML document strictly; an empty document is ``None``."""
    if len(data) > max_bytes:
        raise MalformedDocument(f"{what} is larger than {max_bytes} bytes")
    text = decode_utf8(data, what=what) if isinstance(data, bytes) else data
    loader = _StrictLoader(text)
    loader.max_depth = max_depth
    try:
        value = loader.get_single_data()
    except MalformedDocument as err:
        raise MalformedDocument(f"{what}: {err}") from None
    except RecursionError:
        raise MalformedDocument(f"{what}: nested too deeply") from None
    except yaml.YAMLError as err:
        raise MalformedDocument(f"{what}: not valid YAML ({_yaml_problem(err)})") from None
    finally:
        loader.dispose()
    try:
        _depth(value, max_depth)
    except MalformedDocument as err:
        raise MalformedDocument(f"{what}: {err}") from None
    return value


def load_json_file(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                   max_depth: int = DEFAULT_MAX_DEPTH, follow: bool = True) -> Any:
    """:func:`loads_json` over a file, bounded before reading (OSError passes through)."""
    return loads_json(read_bounded(path, max_bytes=max_bytes, follow=follow),
                      max_bytes=max_bytes, max_depth=max_depth, what=path.name)


def load_yaml_file(path: Path, *, max_bytes: int = 1024 * 1024,
                   max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """:func:`loads_yaml` over a file, bounded before reading (OSError passes through)."""
    return loads_yaml(read_bounded(path, max_bytes=max_bytes), max_bytes=max_bytes,
                      max_depth=max_depth, what=path.name)


def dumps_safe(value: Any) -> str:
    """JSON text that always serialises: lone surrogates and undecodable bytes are escaped.

    For reports that quote hostile strings from model files; never for signed bytes (those go
    through ``_fsutil.canonical_json``).
    """
    return json.dumps(value, ensure_ascii=True, sort_keys=True, default=repr)
