"""Bounded GGUF header parser: metadata and tensor infos over a memory map, never tensor data.

Hand-written on the ``gguf`` package's type tables (value types, ggml types and block sizes)
because ``gguf.GGUFReader`` silently truncates a lying string or array length instead of
rejecting it, and builds several Python objects per array element (a 160 MB tokenizer array
costs gigabytes). Here every count and length is bounded by the bytes left before anything is
allocated (cf. llama.cpp CVE-2025-53630), scalar arrays are numpy views copied once, and string
arrays are one bytes copy plus an offset table (:class:`StringArray`): 8 bytes per element
on top of the metadata itself, decoded only when an element is read.
"""

from __future__ import annotations

import codecs
import mmap
import re
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from specbundle.strict import open_regular

__all__ = ["GGUFFormatError", "GGUFHeader", "GGUFTensor", "StringArray", "read_gguf"]

_MAX_KV = 1 << 16
# Real checkpoints hold thousands of tensors (a 671B MoE with merged experts: ~1 500); each
# info costs a few microseconds of Python, so past this the header is too large to analyse.
MAX_TENSORS = 1 << 17
_MAX_KEY = 1 << 16
_MAX_DIMS = 4
# Scalar strings (chat templates, descriptions), all of them together: real ones stay below a
# few MB. Each is decoded to a str, up to 4x its bytes (surrogate escapes next to astral
# characters), so past this budget the metadata is too large to analyse.
MAX_STRING_BYTES = 32 << 20
# Real vocabularies stay below 10^6 tokens; beyond this an array is too large to analyse
# (a HIGH finding), which bounds the per-element loop whatever the file says.
MAX_ARRAY_ELEMENTS = 1 << 22
# Real metadata (vocabulary included) stays below 100 MB; past this the header is too large
# to analyse, so hostile metadata costs at most this many bytes of parsing.
MAX_METADATA_BYTES = 512 << 20
_SCALARS: dict[GGUFValueType, tuple[str, int]] = {
    GGUFValueType.UINT8: ("<B", 1), GGUFValueType.INT8: ("<b", 1),
    GGUFValueType.UINT16: ("<H", 2), GGUFValueType.INT16: ("<h", 2),
    GGUFValueType.UINT32: ("<I", 4), GGUFValueType.INT32: ("<i", 4),
    GGUFValueType.FLOAT32: ("<f", 4), GGUFValueType.BOOL: ("<?", 1),
    GGUFValueType.UINT64: ("<Q", 8), GGUFValueType.INT64: ("<q", 8),
    GGUFValueType.FLOAT64: ("<d", 8),
}
_U64 = struct.Struct("<Q")
_ESCAPED = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8 (surrogateescape)


class GGUFFormatError(Exception):
    """A structural violation that stops parsing (carries the finding's check id)."""

    def __init__(self, check_id: str, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.check_id = check_id
        self.too_large = too_large


class StringArray(Sequence[str]):
    """A GGUF string array: the raw bytes and each element's offset, decoded on access."""

    def __init__(self, data: bytes, offsets: array[int]) -> None:
        self.data, self.offsets = data, offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def raw(self, i: int) -> bytes:
        """Element ``i`` as bytes."""
        o = self.offsets[i]
        (n,) = _U64.unpack_from(self.data, o)
        return self.data[o + 8:o + 8 + n]

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.raw(i).decode("utf-8", errors="surrogateescape")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringArray):
            return self.data == other.data
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor info."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int
    name_bytes: int = 0


@dataclass(frozen=True)
class GGUFHeader:
    """Everything before the tensor data, with each key's wire type.

    ``types`` maps a key to ``(value type, element type or None)``.
    """

    version: int
    kv: dict[str, Any]
    tensors: tuple[GGUFTensor, ...]
    alignment: int
    data_start: int
    file_size: int
    types: dict[str, tuple[GGUFValueType, GGUFValueType | None]]
    header_end: int = 0
    not_utf8: tuple[str, ...] = ()  # key and tensor names that are not valid UTF-8
    # key and tensor names with a NUL, and keys whose scalar string value has one: llama.cpp
    # reads them as C strings (gguf_find_key's strcmp, ggml_set_name, the model's key/value
    # map), so it sees the text before the NUL where every other reader sees all of it
    nul: tuple[str, ...] = ()
    nul_values: tuple[str, ...] = ()  # string values (array elements too) holding a NUL
    # string values (array elements too) that are not valid UTF-8: gguf-py (and every reader
    # on it) refuses to decode them, llama.cpp reads the bytes
    not_utf8_values: tuple[str, ...] = ()
    # BOOL values (array elements too) stored as a byte other than 0 or 1
    odd_bools: tuple[str, ...] = ()


class _Reader:
    def __init__(self, buf: mmap.mmap | bytes, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0
        self.string_bytes = 0  # scalar string bytes decoded so far
        self.odd_bools: list[str] = []

    @property
    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n > self.left:
            raise GGUFFormatError("gguf.bounds", f"{what}: {n} bytes declared, {self.left} left")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(out)

    def unpack(self, fmt: str, n: int, what: str) -> Any:
        return struct.unpack(fmt, self.take(n, what))[0]

    def u32(self) -> int:
        return int(self.unpack("<I", 4, "u32"))

    def u64(self) -> int:
        return int(self.unpack("<Q", 8, "u64"))

    def string(self, what: str, limit: int | None = None) -> str:
        n = self.u64()
        if limit is not None and n > limit:
            raise GGUFFormatError("gguf.bounds", f"{what}: string of {n} bytes over the limit")
        return self.take(n, what).decode("utf-8", errors="surrogateescape")

    def vtype(self) -> GGUFValueType:
        t = self.u32()
        try:
            return GGUFValueType(t)
        except ValueError:
            raise GGUFFormatError("gguf.unknown-type", f"unknown value type {t}") from None

    def strings(self, count: int) -> StringArray:
        """``count`` length-prefixed strings: one loop over offsets, no object per element.
        Offsets are 4 bytes each (an element is at least 8 on disk), so the array costs at most
        1.5x its bytes; one past 4 GiB is beyond the metadata cap anyway."""
        start, buf, end = self.pos, self.buf, self.size
        offsets = array("I")
        append, unpack = offsets.append, _U64.unpack_from
        p = start
        try:
            for _ in range(count):
                append(p - start)
                p += 8 + unpack(buf, p)[0]
        except (struct.error, OverflowError) as err:
            if isinstance(err, struct.error) or p > end:  # a lying or cut-off length
                raise GGUFFormatError("gguf.bounds", "string array runs past the file") from None
            raise GGUFFormatError("gguf.too-large", "string array beyond 4 GiB is too large to "
                                  "analyse", too_large=True) from None
        if p > end:
            raise GGUFFormatError("gguf.bounds", "string array runs past the file")
        if p - start > MAX_METADATA_BYTES:
            raise GGUFFormatError("gguf.too-large", f"string array beyond {MAX_METADATA_BYTES} "
                                  "bytes is too large to analyse", too_large=True)
        self.pos = p
        return StringArray(bytes(buf[start:p]), offsets)

    def value(self, vtype: GGUFValueType, key: str) -> tuple[Any, GGUFValueType | None]:
        if vtype is GGUFValueType.STRING:
            (n,) = _U64.unpack_from(self.buf, self.pos) if self.left >= 8 else (0,)
            if n <= self.left - 8:
                self.string_bytes += n
                if self.string_bytes > MAX_STRING_BYTES:
                    raise GGUFFormatError("gguf.too-large", f"{key}: string values beyond "
                                          f"{MAX_STRING_BYTES} bytes in all are too large to "
                                          "analyse", too_large=True)
            return self.string("string value"), None
        if vtype is GGUFValueType.BOOL:
            b = self.unpack("<B", 1, "BOOL")
            if b > 1:
                self.odd_bools.append(key)
            return b != 0, None
        if vtype is not GGUFValueType.ARRAY:
            fmt, n = _SCALARS[vtype]
            return self.unpack(fmt, n, vtype.name), None
        etype, count = self.vtype(), self.u64()
        if etype is GGUFValueType.ARRAY:
            # llama.cpp's reader refuses arrays of arrays; gguf-py reads them: a differential
            raise GGUFFormatError("gguf.nested-array", f"{key}: array of arrays")
        min_size = 8 if etype is GGUFValueType.STRING else _SCALARS[etype][1]
        if count * min_size > self.left:
            raise GGUFFormatError("gguf.bounds", f"{key}: array of {count} elements exceeds "
                                  "the file")
        if count > MAX_ARRAY_ELEMENTS:
            raise GGUFFormatError("gguf.too-large", f"{key}: array of {count} elements is too "
                                  "large to analyse", too_large=True)
        if etype is GGUFValueType.STRING:
            return self.strings(count), etype
        fmt, n = _SCALARS[etype]
        raw = self.take(count * n, "array")
        if etype is GGUFValueType.BOOL and raw.translate(None, b"\x00\x01"):
            self.odd_bools.append(key)
        return np.frombuffer(raw, dtype=np.dtype(fmt)), etype


_CHUNK = 1 << 20  # at most 2^17 elements: a chunk's prefix index stays below 4 MB
_PREFIX = np.arange(8, dtype=np.int32)


def _string_array_flaws(sa: StringArray) -> tuple[bool, bool]:
    """Whether some element holds a NUL, and whether some element is not valid UTF-8.

    The array's bytes are walked in bounded chunks; in a copy of each chunk every length prefix
    is overwritten with spaces, so one C-speed search for NUL and one UTF-8 decode see the
    elements alone, each cut off from the next by an ASCII byte (a sequence cannot straddle
    two elements). Memory: one chunk and its decoded text, whatever the array's size.
    """
    data, end = sa.data, len(sa.data)
    offs = np.frombuffer(sa.offsets, dtype=np.uint32) if len(sa.offsets) else \
        np.zeros(0, np.uint32)
    nul = bad = False
    a = 0
    while a < end and not (nul and bad):
        b = min(end, a + _CHUNK)
        seg = bytearray(memoryview(data)[a:b])
        # keys of the array's own dtype: a Python int key makes numpy cast (copy) the whole
        # offset array to int64 on every call, twice the array's index in memory
        lo = int(np.searchsorted(offs, np.uint32(max(a - 7, 0)), "left"))
        hi = int(np.searchsorted(offs, np.uint32(b), "left"))
        idx = ((offs[lo:hi].astype(np.int64) - a).astype(np.int32)[:, None] + _PREFIX).ravel()
        np.frombuffer(seg, np.uint8)[idx[(idx >= 0) & (idx < b - a)]] = 0x20
        nul = nul or 0 in seg
        used = b - a
        if not bad:
            try:
                used = codecs.utf_8_decode(seg, "strict", b == end)[1] or used
            except UnicodeDecodeError:
                bad = True
        a += used
    return nul, bad


def _tensor_info(r: _Reader) -> GGUFTensor:
    start = r.pos
    name = r.string("tensor name", _MAX_KEY)
    name_bytes = r.pos - start - 8
    n_dims = r.u32()
    if not 1 <= n_dims <= _MAX_DIMS:
        raise GGUFFormatError("gguf.tensor-shape", f"{name}: {n_dims} dimensions")
    dims = tuple(r.u64() for _ in range(n_dims))
    t = r.u32()
    offset = r.u64()
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(t)]
    except (ValueError, KeyError):
        raise GGUFFormatError("gguf.unknown-type", f"{name}: unknown ggml type {t}") from None
    if any(d == 0 or d >= 1 << 63 for d in dims) or dims[0] % block:
        raise GGUFFormatError("gguf.tensor-shape", f"{name}: shape {dims} invalid for type {t}")
    numel = 1
    for d in dims:
        numel *= d
    if numel >= 1 << 63:
        raise GGUFFormatError("gguf.tensor-shape", f"{name}: {numel} elements overflow int64")
    return GGUFTensor(name, dims, t, offset, numel // block * type_size, name_bytes)


def _parse(buf: mmap.mmap | bytes, size: int) -> GGUFHeader:
    r = _Reader(buf, size)
    if r.take(4, "magic") != b"GGUF":
        raise GGUFFormatError("gguf.magic", "file does not start with GGUF")
    version = r.u32()
    if version not in (2, 3):
        raise GGUFFormatError("gguf.version", f"unsupported GGUF version {version}")
    n_tensors, n_kv = r.u64(), r.u64()
    if n_kv > r.left // 13 or n_tensors > r.left // 24:
        raise GGUFFormatError("gguf.bounds", f"implausible counts: {n_tensors} tensors, "
                              f"{n_kv} metadata entries for {size} bytes")
    if n_kv > _MAX_KV or n_tensors > MAX_TENSORS:
        raise GGUFFormatError("gguf.too-large", f"{n_tensors} tensors, {n_kv} metadata entries: "
                              "too large to analyse", too_large=True)
    kv: dict[str, Any] = {}
    types: dict[str, tuple[GGUFValueType, GGUFValueType | None]] = {}
    for _ in range(n_kv):
        key = r.string("key", _MAX_KEY)
        if key in kv:
            raise GGUFFormatError("gguf.duplicate", f"duplicate metadata key {key!r}")
        vtype = r.vtype()
        kv[key], etype = r.value(vtype, key)
        types[key] = (vtype, etype)
        if r.pos > MAX_METADATA_BYTES:
            raise GGUFFormatError("gguf.too-large", f"metadata beyond {MAX_METADATA_BYTES} bytes "
                                  "is too large to analyse", too_large=True)
    infos = [_tensor_info(r) for _ in range(n_tensors)]
    header_end = r.pos
    names = [*kv, *(t.name for t in infos)]
    joined = "\x01".join(names)  # one C-speed search; per-name only when something is found
    not_utf8 = tuple(n for n in names if not _is_utf8(n)) if _ESCAPED.search(joined) else ()
    nul = tuple(n for n in names if "\x00" in n or not n) if "\x00" in joined or "" in kv \
        or any(not t.name for t in infos) else ()
    nul_values: list[str] = []
    not_utf8_values: list[str] = []
    for k, v in kv.items():
        if isinstance(v, str):
            if "\x00" in v:
                nul_values.append(k)
            if not _is_utf8(v):
                not_utf8_values.append(k)
        elif isinstance(v, StringArray):
            has_nul, not_utf8_elem = _string_array_flaws(v)
            if has_nul:
                nul_values.append(k)
            if not_utf8_elem:
                not_utf8_values.append(k)
    alignment = kv.get("general.alignment", 32)
    if types.get("general.alignment", (GGUFValueType.UINT32, None))[0] \
            is not GGUFValueType.UINT32:
        # gguf_get_val_u32 asserts the type: llama.cpp aborts where gguf-py reads on
        raise GGUFFormatError("gguf.key-type", "general.alignment is not a UINT32")
    if not isinstance(alignment, int) or alignment < 8 or alignment & (alignment - 1):
        raise GGUFFormatError("gguf.alignment", f"general.alignment {alignment!r} is not a "
                              "power of two >= 8")
    data_start = -(-header_end // alignment) * alignment
    return GGUFHeader(version, kv, tuple(infos), alignment, data_start, size, types,
                      header_end, not_utf8, nul, tuple(nul_values), tuple(not_utf8_values),
                      tuple(r.odd_bools))


def _is_utf8(name: str) -> bool:
    """Whether a name decoded with ``surrogateescape`` was valid UTF-8 on disk."""
    return _ESCAPED.search(name) is None


def read_gguf(path: Path) -> GGUFHeader:
    """Parse and bound-check a GGUF header; raises :class:`GGUFFormatError`."""
    with open_regular(path, follow=True) as fh:
        size = fh.seek(0, 2)
        if size < 24:
            raise GGUFFormatError("gguf.bounds", f"{size} bytes: too short for a GGUF header")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _parse(mm, size)
