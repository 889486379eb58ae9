"""Identify a file by its first bytes, and what its name says it should be.

Extensions lie (an ELF named ``tokenizer.model``, a pickle named ``weights.msgpack``), so every
check that cares about a format asks :func:`sniff` instead of the name. Only a small head of the
file is read.
"""

from __future__ import annotations

import re
import struct
from enum import StrEnum
from pathlib import Path, PurePosixPath

from specbundle.scan.pickle_walker import looks_like_pickle

__all__ = [
    "ARCHIVE_KINDS", "EXECUTABLE_KINDS", "FileKind", "expected_kinds", "sniff", "sniff_bytes",
]

_HEAD = 64 * 1024


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


def sniff_bytes(head: bytes, size: int) -> FileKind:
    """Kind of a file from its first bytes and total size."""
    if size == 0:
        return FileKind.EMPTY
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return FileKind.PICKLE
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if len(head) > 262 and head[257:262] == b"ustar":
        return FileKind.TAR
    if _is_safetensors(head, size):
        return FileKind.SAFETENSORS
    if _is_sentencepiece(head):
        return FileKind.SENTENCEPIECE
    if looks_like_pickle(head, truncated=size > len(head)):
        return FileKind.PICKLE
    return FileKind.TEXT if _is_text(head) else FileKind.UNKNOWN


def sniff(path: Path) -> FileKind:
    """Kind of a file on disk from its first 64 KiB, and the whole stream for pickles.

    A protocol-0 pickle is text; whether text is a pickle is decided by parsing opcodes from
    the start of the file for as long as they parse, never by a byte window.
    """
    with path.open("rb") as fh:
        head = fh.read(_HEAD)
        size = fh.seek(0, 2)
        kind = sniff_bytes(head, size)
        if kind in (FileKind.TEXT, FileKind.UNKNOWN) and size > len(head):
            fh.seek(0)
            if looks_like_pickle(fh):
                return FileKind.PICKLE
    return kind
