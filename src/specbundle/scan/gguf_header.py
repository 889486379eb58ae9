"""Bounded, header-only GGUF validation: metadata and tensor infos, never tensor data.

The parser is hand-written on the ``gguf`` package's type tables (value types, ggml types and
block sizes) because ``gguf.GGUFReader`` memory-maps the whole file and silently truncates a
lying string or array length instead of rejecting it; here every count and length is bounded
by the bytes left in the file before anything is allocated (cf. llama.cpp CVE-2025-53630).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.sniff import FileKind

__all__ = ["GGUFCheck", "GGUFFormatError", "GGUFHeader", "GGUFTensor", "load_gguf", "read_gguf"]

_MAX_KV = 1 << 16
_MAX_TENSORS = 1 << 20
_MAX_KEY = 1 << 16
_MAX_DIMS = 4
_MAX_DEPTH = 3
_SCALARS: dict[GGUFValueType, tuple[str, int]] = {
    GGUFValueType.UINT8: ("<B", 1), GGUFValueType.INT8: ("<b", 1),
    GGUFValueType.UINT16: ("<H", 2), GGUFValueType.INT16: ("<h", 2),
    GGUFValueType.UINT32: ("<I", 4), GGUFValueType.INT32: ("<i", 4),
    GGUFValueType.FLOAT32: ("<f", 4), GGUFValueType.BOOL: ("<?", 1),
    GGUFValueType.UINT64: ("<Q", 8), GGUFValueType.INT64: ("<q", 8),
    GGUFValueType.FLOAT64: ("<d", 8),
}


class GGUFFormatError(Exception):
    """A structural violation that stops parsing (carries the finding's check id)."""

    def __init__(self, check_id: str, message: str) -> None:
        super().__init__(message)
        self.check_id = check_id


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor info."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """Everything before the tensor data."""

    version: int
    kv: dict[str, Any]
    tensors: tuple[GGUFTensor, ...]
    alignment: int
    data_start: int
    file_size: int


class _Reader:
    def __init__(self, fh: IO[bytes], size: int) -> None:
        self.fh, self.size = fh, size

    @property
    def left(self) -> int:
        return self.size - self.fh.tell()

    def take(self, n: int, what: str) -> bytes:
        if n > self.left:
            raise GGUFFormatError("gguf.bounds", f"{what}: {n} bytes declared, {self.left} left")
        return self.fh.read(n)

    def scalar(self, vtype: GGUFValueType) -> Any:
        fmt, n = _SCALARS[vtype]
        return struct.unpack(fmt, self.take(n, vtype.name))[0]

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4, "u32"))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8, "u64"))[0])

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

    def value(self, vtype: GGUFValueType, depth: int = 0) -> Any:
        if vtype is GGUFValueType.STRING:
            return self.string("string value")
        if vtype is not GGUFValueType.ARRAY:
            return self.scalar(vtype)
        if depth >= _MAX_DEPTH:
            raise GGUFFormatError("gguf.bounds", "arrays nested too deeply")
        etype, count = self.vtype(), self.u64()
        min_size = 8 if etype in (GGUFValueType.STRING, GGUFValueType.ARRAY) else \
            _SCALARS[etype][1]
        if count * min_size > self.left:
            raise GGUFFormatError("gguf.bounds", f"array of {count} elements exceeds the file")
        if etype in _SCALARS:
            fmt, n = _SCALARS[etype]
            return np.frombuffer(self.take(count * n, "array"), dtype=np.dtype(fmt))
        return [self.value(etype, depth + 1) for _ in range(count)]


def read_gguf(path: Path) -> GGUFHeader:
    """Parse and bound-check a GGUF header; raises :class:`GGUFFormatError`."""
    with path.open("rb") as raw:
        size = raw.seek(0, 2)
        raw.seek(0)
        r = _Reader(raw, size)
        if r.take(4, "magic") != b"GGUF":
            raise GGUFFormatError("gguf.magic", "file does not start with GGUF")
        version = r.u32()
        if version not in (2, 3):
            raise GGUFFormatError("gguf.version", f"unsupported GGUF version {version}")
        n_tensors, n_kv = r.u64(), r.u64()
        if n_kv > min(_MAX_KV, r.left // 13) or n_tensors > min(_MAX_TENSORS, r.left // 24):
            raise GGUFFormatError("gguf.bounds", f"implausible counts: {n_tensors} tensors, "
                                  f"{n_kv} metadata entries for {size} bytes")
        kv: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string("key", _MAX_KEY)
            if key in kv:
                raise GGUFFormatError("gguf.duplicate", f"duplicate metadata key {key!r}")
            kv[key] = r.value(r.vtype())
        infos = [_tensor_info(r) for _ in range(n_tensors)]
        header_end = raw.tell()
    alignment = kv.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment < 8 or alignment & (alignment - 1):
        raise GGUFFormatError("gguf.alignment", f"general.alignment {alignment!r} is not a "
                              "power of two >= 8")
    data_start = -(-header_end // alignment) * alignment
    return GGUFHeader(version, kv, tuple(infos), alignment, data_start, size)


def _tensor_info(r: _Reader) -> GGUFTensor:
    name = r.string("tensor name", _MAX_KEY)
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
    if any(d == 0 for d in dims) or dims[0] % block:
        raise GGUFFormatError("gguf.tensor-shape", f"{name}: shape {dims} invalid for type {t}")
    numel = 1
    for d in dims:
        numel *= d
    return GGUFTensor(name, dims, t, offset, numel // block * type_size)


def _layout(h: GGUFHeader) -> Iterator[tuple[str, Severity, str]]:
    names: set[str] = set()
    end = 0
    for t in sorted(h.tensors, key=lambda t: t.offset):
        if t.name in names:
            yield "gguf.duplicate", Severity.CRITICAL, f"duplicate tensor name {t.name!r}"
        names.add(t.name)
        if t.offset % h.alignment:
            yield "gguf.alignment", Severity.CRITICAL, f"{t.name}: offset not aligned"
        if h.data_start + t.offset + t.nbytes > h.file_size:
            yield "gguf.bounds", Severity.CRITICAL, f"{t.name}: data beyond the end of the file"
        if t.offset < end:
            yield "gguf.overlap", Severity.CRITICAL, f"{t.name}: overlaps the previous tensor"
        end = max(end, t.offset + t.nbytes)
    if h.file_size - (h.data_start + end) >= h.alignment and h.tensors:
        yield "gguf.trailing-bytes", Severity.HIGH, "bytes after the last tensor"
    if "general.architecture" not in h.kv:
        yield "gguf.metadata", Severity.MEDIUM, "general.architecture is missing"


class GGUFCheck(Check):
    """Every GGUF file: header, metadata bounds and tensor layout."""

    family = "gguf"
    rules: ClassVar[dict[str, str]] = {
        "gguf.magic": "Not a GGUF file",
        "gguf.version": "Unsupported GGUF version",
        "gguf.bounds": "Count, length or offset beyond the file or the limits",
        "gguf.unknown-type": "Unknown metadata value type or ggml tensor type",
        "gguf.duplicate": "Duplicate metadata key or tensor name",
        "gguf.tensor-shape": "Invalid tensor dimensions",
        "gguf.alignment": "Bad alignment or unaligned tensor offset",
        "gguf.overlap": "Overlapping tensor data",
        "gguf.trailing-bytes": "Bytes after the last tensor",
        "gguf.metadata": "Required metadata missing",
        "gguf.missing-file": "The spec's gguf_file is not in the artifact",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Parse every GGUF once (cached for the template and compatibility checks)."""
        out: list[Finding] = []
        for tree in ctx.trees:
            if tree.gguf_file and tree.file(tree.gguf_file) is None:
                out.append(finding("gguf.missing-file", Severity.HIGH,
                                   "gguf_file named in the spec is not mirrored",
                                   tree.gguf_file).with_role(tree.role))
            for f in tree.files:
                if not (f.rel.endswith(".gguf") or ctx.kind(f.path) is FileKind.GGUF):
                    continue
                try:
                    h = ctx.cached("gguf", f.path, read_gguf)
                except GGUFFormatError as err:
                    out.append(finding(err.check_id, Severity.CRITICAL, str(err),
                                       f.rel).with_role(tree.role))
                    continue
                out.extend(finding(cid, sev, msg, f.rel).with_role(tree.role)
                           for cid, sev, msg in _layout(h))
        return CheckOutcome.of(out)


def load_gguf(ctx: CheckContext, path: Path) -> GGUFHeader | None:
    """The cached header, or None when it is malformed (the GGUF check reports that)."""
    try:
        header: GGUFHeader = ctx.cached("gguf", path, read_gguf)
    except GGUFFormatError:
        return None
    return header
