"""Identify a file by its first bytes, and what its name says it should be.

Extensions lie (an ELF named ``tokenizer.model``, a pickle named ``weights.msgpack``), so every
check that cares about a format asks :func:`sniff` instead of the name. Only a small head of the
file is read, except where two formats claim the same bytes.

Safetensors has no magic: its first 8 bytes are a length, and some lengths spell another
format's magic (0x280 is a pickle PROTO 2, 0x5a4d is ``MZ``, 0x2123 is ``#!``). Such a file is
judged by the structures that parse, not by the first magic that matches: the safetensors
header must be a JSON object, the rival must parse as itself (pickle opcodes past the length
field, an ELF ident, a PE header, an interpreter line...). One that parses wins; both parsing
is a polyglot, which no name allows; neither leaves the magic in charge, as before.
"""

from __future__ import annotations

import io
import re
import struct
import zlib
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import IO

from specbundle.scan.jsonfile import DuplicateKeys, loads_strict
from specbundle.scan.pickles import looks_like_pickle
from specbundle.strict import open_regular

__all__ = [
    "ARCHIVE_KINDS", "EXECUTABLE_KINDS", "FileKind", "expected_kinds", "sniff", "sniff_bytes",
]

_HEAD = 64 * 1024
# the largest safetensors header a collision is resolved by parsing (ScanOptions' default
# limit); a longer one cannot be read by the scan, so the magic decides
MAX_HEADER_PROBE = 100_000_000


class FileKind(StrEnum):
    """What a file's bytes are."""

    EMPTY = "empty"
    SAFETENSORS = "safetensors"
    GGUF = "gguf"
    PICKLE = "pickle"
    ZIP = "zip"
    NUMPY = "numpy"
    SENTENCEPIECE = "sentencepiece"
    TEXT = "text"
    IMAGE = "image"
    ELF = "elf"
    PE = "pe"
    MACHO = "mach-o"
    SCRIPT = "script"
    SEVENZ = "7z"
    GZIP = "gzip"
    XZ = "xz"
    ZSTD = "zstd"
    BZIP2 = "bzip2"
    TAR = "tar"
    RAR = "rar"
    POLYGLOT = "polyglot"
    UNKNOWN = "unknown-binary"


EXECUTABLE_KINDS = frozenset({FileKind.ELF, FileKind.PE, FileKind.MACHO, FileKind.SCRIPT})
ARCHIVE_KINDS = frozenset({FileKind.ZIP, FileKind.SEVENZ, FileKind.GZIP, FileKind.XZ,
                           FileKind.ZSTD, FileKind.BZIP2, FileKind.TAR, FileKind.RAR})

_MAGIC: tuple[tuple[bytes, FileKind], ...] = (
    (b"\x7fELF", FileKind.ELF),
    (b"MZ", FileKind.PE),
    (b"\xfe\xed\xfa\xce", FileKind.MACHO), (b"\xfe\xed\xfa\xcf", FileKind.MACHO),
    (b"\xce\xfa\xed\xfe", FileKind.MACHO), (b"\xcf\xfa\xed\xfe", FileKind.MACHO),
    (b"\xca\xfe\xba\xbe", FileKind.MACHO),
    (b"#!", FileKind.SCRIPT),
    (b"GGUF", FileKind.GGUF),
    (b"PK\x03\x04", FileKind.ZIP), (b"PK\x05\x06", FileKind.ZIP), (b"PK\x07\x08", FileKind.ZIP),
    (b"7z\xbc\xaf\x27\x1c", FileKind.SEVENZ),
    (b"\x1f\x8b", FileKind.GZIP),
    (b"\xfd7zXZ\x00", FileKind.XZ),
    (b"\x28\xb5\x2f\xfd", FileKind.ZSTD),
    (b"BZh", FileKind.BZIP2),
    (b"Rar!\x1a\x07", FileKind.RAR),
    (b"\x93NUMPY", FileKind.NUMPY),
    (b"\x89PNG\r\n\x1a\n", FileKind.IMAGE), (b"\xff\xd8\xff", FileKind.IMAGE),
    (b"GIF87a", FileKind.IMAGE), (b"GIF89a", FileKind.IMAGE),
)

_T = FileKind
# What each name may contain. Names not listed here are unknown and fail closed.
_BY_SUFFIX: dict[str, frozenset[FileKind]] = {
    ".safetensors": frozenset({_T.SAFETENSORS}),
    ".gguf": frozenset({_T.GGUF}),
    ".json": frozenset({_T.TEXT}), ".jinja": frozenset({_T.TEXT}), ".j2": frozenset({_T.TEXT}),
    ".txt": frozenset({_T.TEXT, _T.EMPTY}), ".md": frozenset({_T.TEXT, _T.EMPTY}),
    ".yaml": frozenset({_T.TEXT}), ".yml": frozenset({_T.TEXT}),
    ".tiktoken": frozenset({_T.TEXT}), ".csv": frozenset({_T.TEXT}),
    ".py": frozenset({_T.TEXT, _T.SCRIPT, _T.EMPTY}), ".ipynb": frozenset({_T.TEXT}),
    # SentencePiece protobuf, or tiktoken's base64 text (Llama 3 original/tokenizer.model)
    ".model": frozenset({_T.SENTENCEPIECE, _T.TEXT}), ".spm": frozenset({_T.SENTENCEPIECE}),
    ".bin": frozenset({_T.PICKLE, _T.ZIP}), ".pt": frozenset({_T.PICKLE, _T.ZIP}),
    ".pth": frozenset({_T.PICKLE, _T.ZIP}), ".ckpt": frozenset({_T.PICKLE, _T.ZIP}),
    ".pkl": frozenset({_T.PICKLE}), ".pickle": frozenset({_T.PICKLE}),
    ".npy": frozenset({_T.NUMPY}),
    ".png": frozenset({_T.IMAGE}), ".jpg": frozenset({_T.IMAGE}),
    ".jpeg": frozenset({_T.IMAGE}), ".gif": frozenset({_T.IMAGE}),
    ".svg": frozenset({_T.TEXT}),
}
_BY_NAME: dict[str, frozenset[FileKind]] = {
    ".gitattributes": frozenset({_T.TEXT, _T.EMPTY}), ".gitignore": frozenset({_T.TEXT, _T.EMPTY}),
    "LICENSE": frozenset({_T.TEXT}), "LICENCE": frozenset({_T.TEXT}),
    "NOTICE": frozenset({_T.TEXT}),
    "USE_POLICY": frozenset({_T.TEXT}), "README": frozenset({_T.TEXT}),
    "merges.txt": frozenset({_T.TEXT}),
}


# Mistral's versioned SentencePiece models (tokenizer.model.v3, tokenizer.mm.model.v7m1), read
# by mistral-common (vLLM and SGLang's ``--tokenizer-mode mistral``) beside tekken.json
_MISTRAL_SPM = re.compile(r"tokenizer(?:\.mm)?\.model\.v[0-9][0-9a-z]{0,7}")


def expected_kinds(path: str) -> frozenset[FileKind] | None:
    """Kinds a file with this name may hold; None when the name is unknown."""
    p = PurePosixPath(path)
    if p.name in _BY_NAME:
        return _BY_NAME[p.name]
    if _MISTRAL_SPM.fullmatch(p.name):
        return frozenset({_T.SENTENCEPIECE})
    return _BY_SUFFIX.get(p.suffix.lower())


def _is_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 0 < n <= size - 8 and head[8:9] == b"{"


def _is_sentencepiece(head: bytes) -> bool:
    # ModelProto: field 1 (pieces), wire type 2 -> 0x0a, varint length, then SentencePiece
    # whose field 1 (piece string) is again 0x0a.
    if len(head) < 4 or head[0] != 0x0A:
        return False
    i = 1
    while i < min(len(head), 6) and head[i] & 0x80:
        i += 1
    return i + 1 < len(head) and head[i + 1] == 0x0A


def _is_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start >= len(head) - 3  # a multi-byte character cut by the head limit
    return True


def _magic(head: bytes) -> FileKind | None:
    """The kind the first bytes claim by a magic number, if any."""
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return FileKind.PICKLE
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if len(head) > 262 and head[257:262] == b"ustar":
        return FileKind.TAR
    return None


# Reads ``n`` bytes at an offset of the file (fewer at its end).
_Read = Callable[[int, int], bytes]


def _safetensors_parses(read: _Read) -> bool:
    """Whether the file is a safetensors file: a length, then a JSON object that long."""
    (n,) = struct.unpack("<Q", read(0, 8))
    if n > MAX_HEADER_PROBE:
        return False
    raw = read(8, n)
    try:
        doc = loads_strict(raw)
    except DuplicateKeys:
        return True  # an object all the same (the safetensors check reports the duplicates)
    except ValueError:  # UnicodeDecodeError and JSON errors alike
        return False
    return len(raw) == n and isinstance(doc, dict)


def _pickle_parses(head: bytes, stream: IO[bytes], truncated: bool) -> bool:
    """Whether the bytes are a pickle beyond the 8-byte length field: a pickle that ends inside
    it is at most a constant (no import and call fits in 8 bytes), which no loader acts on."""
    if looks_like_pickle(head[:8]):
        return False
    stream.seek(0)
    return looks_like_pickle(stream, truncated=truncated)


def _elf_parses(head: bytes) -> bool:
    return head[4:5] in (b"\x01", b"\x02") and head[5:6] in (b"\x01", b"\x02") \
        and head[6:7] == b"\x01"


def _pe_parses(read: _Read) -> bool:
    (lfanew,) = struct.unpack("<I", read(0x3C, 4).ljust(4, b"\xff"))
    return read(lfanew, 4) == b"PE\x00\x00"


def _script_parses(head: bytes) -> bool:
    # the kernel's reading: an interpreter name after "#!" and blanks, before NUL or newline
    rest = head[2:258].lstrip(b" \t")
    return rest[:1] not in (b"", b"\x00", b"\n")


def _gzip_parses(head: bytes) -> bool:
    if head[2:3] != b"\x08" or head[3] & 0xE0:
        return False
    if head[3]:
        return True  # optional fields: not followed here, so the claim stands
    try:
        zlib.decompressobj(-zlib.MAX_WBITS).decompress(head[10:])
    except zlib.error:
        return False
    return True


def _tar_parses(head: bytes) -> bool:
    hdr = bytearray(head[:512])
    try:
        stored = int(hdr[148:156].split(b"\x00")[0].strip() or b"x", 8)
    except ValueError:
        return False
    hdr[148:156] = b" " * 8
    return stored == sum(hdr)


def _rival_parses(kind: FileKind, head: bytes, read: _Read,
                  pickle: Callable[[], bool]) -> bool:
    """Whether a kind a magic claimed parses as that kind (formats whose magic a safetensors
    length can spell; any other magic is long enough to be its own structure)."""
    if kind is FileKind.PICKLE:
        return pickle()
    if kind is FileKind.ELF:
        return _elf_parses(head)
    if kind is FileKind.PE:
        return _pe_parses(read)
    if kind is FileKind.SCRIPT:
        return _script_parses(head)
    if kind is FileKind.GZIP:
        return _gzip_parses(head)
    if kind is FileKind.BZIP2:
        return head[3:4] in tuple(b"%d" % i for i in range(1, 10))
    if kind is FileKind.IMAGE and head.startswith(b"\xff\xd8\xff"):
        return head[3] >= 0xC0  # a JPEG marker
    if kind is FileKind.TAR:
        return _tar_parses(head)
    return True


def _judge(head: bytes, size: int, read: _Read, pickle: Callable[[], bool]) -> FileKind | None:
    """A file's kind where magic numbers, safetensors and pickle structure decide it; None
    when none of them claims it."""
    claimed = _magic(head)
    if not _is_safetensors(head, size):
        return claimed
    if claimed is None:  # no magic: a pickle without PROTO is the one rival
        if not pickle():
            return FileKind.SAFETENSORS
        return FileKind.POLYGLOT if _safetensors_parses(read) else FileKind.PICKLE
    if not _safetensors_parses(read):
        return claimed
    return FileKind.POLYGLOT if _rival_parses(claimed, head, read, pickle) \
        else FileKind.SAFETENSORS


def _kind(head: bytes, size: int, read: _Read, pickle: Callable[[], bool]) -> FileKind:
    if size == 0:
        return FileKind.EMPTY
    kind = _judge(head, size, read, pickle)
    if kind is not None:
        return kind
    if _is_sentencepiece(head):
        return FileKind.SENTENCEPIECE
    if looks_like_pickle(head, truncated=size > len(head)):
        return FileKind.PICKLE
    return FileKind.TEXT if _is_text(head) else FileKind.UNKNOWN


def sniff_bytes(head: bytes, size: int) -> FileKind:
    """Kind of a file from its first bytes and total size (what lies past them is unknown:
    a structure that needs it does not parse)."""
    truncated = size > len(head)
    return _kind(head, size, lambda at, n: head[at:at + n],
                 lambda: _pickle_parses(head, io.BytesIO(head), truncated))


def sniff(path: Path) -> FileKind:
    """Kind of a file on disk from its first 64 KiB, and the whole stream for pickles.

    A protocol-0 pickle is text; whether text is a pickle is decided by parsing opcodes from
    the start of the file for as long as they parse, never by a byte window. Where two formats
    claim the bytes, each structure is read as far as it takes to parse.
    """
    with open_regular(path, follow=True) as fh:
        head = fh.read(_HEAD)
        size = fh.seek(0, 2)

        def read(at: int, n: int) -> bytes:
            if at + n <= len(head):
                return head[at:at + n]
            fh.seek(at)
            return fh.read(n)

        kind = _kind(head, size, read, lambda: _pickle_parses(head, fh, False))
        if kind in (FileKind.TEXT, FileKind.UNKNOWN) and size > len(head):
            fh.seek(0)
            if looks_like_pickle(fh):
                return FileKind.PICKLE
    return kind
