"""Strict, header-only validation of safetensors files and their shard index.

The ``safetensors`` library is the reference parser and is run as a second parser once the
strict checks pass (a parser differential is itself a finding). The strict checks are hand-
written because the library is deliberately lenient where a gate must not be: it accepts
duplicate JSON keys, a header that does not start with ``{``, and any tensor name. Only the
8-byte length and the header are read, never tensor data, so the cost is O(header) per shard.
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, NamedTuple

from safetensors import SafetensorError, safe_open

from specbundle.scan.configs import load_config
from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree, TreeFile
from specbundle.scan.jsonfile import DuplicateKeys, loads_strict
from specbundle.scan.sniff import FileKind
from specbundle.strict import open_regular

__all__ = ["DTYPE_BITS", "SafetensorsCheck", "StHeader", "StTensor", "read_header", "tensor_bytes"]

# Bits per element of every dtype safetensors 0.8 defines (sub-byte types included).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
_MAX_NAME = 1024
# numpy (1.x) and the frameworks on it hold at most 32 dimensions and sizes below 2^63 bytes;
# the Rust crate reads any shape whose product fits, so a zero-size tensor with dims like
# [2^64-1, 0] or 200 dims of 1 passes it and aborts every loader that allocates the tensor.
_MAX_RANK = 32
_MAX_BITS = ((1 << 63) - 1) * 8
_BEGIN, _END = operator.attrgetter("begin"), operator.attrgetter("end")
_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})
_BAD_NAME = re.compile(r"[\x00-\x1f/\\]|\.\.")
# Inert in safetensors, but metadata is shown in UIs, copied into model cards and templates,
# and passed to shells by careless tooling: template syntax and shell pipelines are reported.
_HOSTILE_META = re.compile(
    r"\{\{|\{%|\{#|\$\{|\$\(|`|<%|#\{|"                  # Jinja / shell / JS / ERB syntax
    r"\|\s*(sh|bash|zsh|dash|ksh|python[0-9.]*|perl|ruby|php|node|nc|ncat|socat|"
    r"powershell|pwsh|iex)\b|"                                  # piping into an interpreter
    r"\b(curl|wget)\s+\S|\brm\s+-[rf]|\bbase64\s+(-d|--decode)\b|"
    r"\b(ba|z|da|k)?sh\s+-c\b|\b(python[0-9.]*|perl|ruby|node)\s+-[ce]\b|"
    r"\bnc(at)?\s+(-\w+\s+)*-[el]\b|/dev/(tcp|udp)/|\bchmod\s+\+?[0-7x]|"
    r"\bpowershell\b|\bpwsh\b|\bInvoke-Expression\b|"
    r"&&|;\s*(sh|bash|curl|wget|rm|chmod|nc|python[0-9.]*)\b|/bin/(ba|z|da)?sh\b|"
    r"\b(eval|exec|system|popen)\(|__\w+__|\bsubprocess\b|\bos\.system\b|"
    r"<script\b|javascript:",
    re.IGNORECASE)


class StTensor(NamedTuple):
    """One tensor entry of a header (a named tuple: a frozen dataclass costs 3x to build, and
    a multi-GB checkpoint has thousands of entries)."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class StHeader:
    """A parsed header: tensors, metadata, data start, and every problem found."""

    tensors: dict[str, StTensor] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    data_start: int = 0
    problems: tuple[tuple[str, Severity, str, dict[str, object]], ...] = ()


def read_header(path: Path, max_header: int) -> StHeader:
    """Parse and validate a safetensors header; problems are returned, not raised."""
    probs: list[tuple[str, Severity, str, dict[str, object]]] = []

    def bad(cid: str, msg: str, sev: Severity = Severity.CRITICAL, **ev: object) -> StHeader:
        probs.append((cid, sev, msg, ev))
        return StHeader(problems=tuple(probs))

    with open_regular(path, follow=True) as fh:
        size = fh.seek(0, 2)
        fh.seek(0)
        raw_len = fh.read(8)
        if len(raw_len) < 8:
            return bad("safetensors.header-length", "file shorter than the 8-byte length")
        (n,) = struct.unpack("<Q", raw_len)
        if n > size - 8:
            return bad("safetensors.header-length", "header length beyond the end of the file",
                       header_len=n, file_size=size)
        if n > max_header:
            return bad("safetensors.header-length", "header length above the limit",
                       header_len=n, limit=max_header)
        raw = fh.read(n)
    if not raw.startswith(b"{"):
        probs.append(("safetensors.header-start", Severity.HIGH,
                      "header does not start with '{'", {"first": raw[:8].hex()}))
    body = raw.rstrip(b" ")
    if body != body.rstrip(b"\t\r\n\x00") or not body.endswith(b"}"):
        # writers pad with spaces; serde_json and Python's json differ on other trailers
        probs.append(("safetensors.header-padding", Severity.HIGH,
                      "header padding is not spaces after the closing '}'",
                      {"last": raw[-8:].hex()}))
    try:
        doc = loads_strict(raw.decode("utf-8"))
    except DuplicateKeys as err:
        return bad("safetensors.duplicate-key", "duplicate JSON keys in header", keys=str(err))
    except (UnicodeDecodeError, ValueError) as err:
        return bad("safetensors.header-json", f"header is not UTF-8 JSON: {err}")
    if not isinstance(doc, dict):
        return bad("safetensors.header-json", "header is not a JSON object")
    meta = doc.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        probs.append(("safetensors.metadata", Severity.HIGH,
                      "__metadata__ must map strings to strings", {}))
        meta = {}
    for key, value in sorted(meta.items()):
        m = _HOSTILE_META.search(value) or _HOSTILE_META.search(key)
        if m:
            probs.append(("safetensors.metadata-suspicious", Severity.MEDIUM,
                          "__metadata__ holds template syntax or a shell command",
                          {"key": key[:80], "match": m.group(0)[:80]}))
    # one search over all names joined by a character the rule does not match (and that no
    # ".." can straddle); only a hit sends every name through the rule on its own
    names_clean = not _BAD_NAME.search("\x7f".join(doc))
    tensors = _well_formed(doc) if names_clean and _names_sized(doc) else None
    if tensors is None:  # some entry is not: each one through the rule that names its problem
        tensors = {}
        for name, entry in doc.items():
            t = _tensor(name, entry, probs, names_clean)
            if t is not None:
                tensors[name] = t
    if not _tiles(tensors, size - 8 - n):
        _layout(tensors, size - 8 - n, probs)
    return StHeader(tensors, meta, 8 + n, _capped(probs))


_MAX_PER_RULE = 50  # findings of one rule per file; the rest are counted in one more


def _capped(probs: list[tuple[str, Severity, str, dict[str, object]]],
            ) -> tuple[tuple[str, Severity, str, dict[str, object]], ...]:
    """At most :data:`_MAX_PER_RULE` problems of each rule, plus one that counts the rest: a
    hostile header of a million bad entries must not make a report of a million findings."""
    seen: dict[str, int] = {}
    for cid, *_ in probs:
        seen[cid] = seen.get(cid, 0) + 1
    if max(seen.values(), default=0) <= _MAX_PER_RULE:
        return tuple(probs)
    out, kept = [], dict.fromkeys(seen, 0)
    for prob in probs:
        cid, sev = prob[0], prob[1]
        kept[cid] += 1
        if kept[cid] <= _MAX_PER_RULE:
            out.append(prob)
        elif kept[cid] == _MAX_PER_RULE + 1:
            out.append((cid, sev, f"{seen[cid] - _MAX_PER_RULE} more problems of this kind",
                        {}))
    return tuple(out)


def _names_sized(doc: dict[str, Any]) -> bool:
    return not doc or (min(map(len, doc)) > 0 and max(map(len, doc)) <= _MAX_NAME)


def _well_formed(doc: dict[str, Any]) -> dict[str, StTensor] | None:
    """Every entry, if each passes all of :func:`_tensor`'s rules; else None (and nothing
    is decided here: :func:`_tensor` then reports). One loop without a call per entry: a
    checkpoint has thousands of entries and this is the warm scan's largest cost."""
    out: dict[str, StTensor] = {}
    bits_of, new = DTYPE_BITS.get, tuple.__new__  # a named tuple's own __new__ is Python code
    for name, e in doc.items():
        if type(e) is not dict or len(e) != 3:
            return None
        try:  # three keys, these three: exactly _ENTRY_KEYS
            dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        except KeyError:
            return None
        if type(dtype) is not str or type(shape) is not list or type(offs) is not list \
                or len(offs) != 2:
            return None
        begin, end = offs
        bits = bits_of(dtype)
        # type() excludes bool, which JSON true/false become
        if bits is None or type(begin) is not int or type(end) is not int \
                or not 0 <= begin <= end:
            return None
        for d in shape:
            if type(d) is not int or d < 0:
                return None
        if _bits(shape, bits, (end - begin) * 8) != (end - begin) * 8:  # exactly the span
            return None
        out[name] = new(StTensor, (dtype, tuple(shape), begin, end))
    return out


def _tiles(tensors: dict[str, StTensor], data_len: int) -> bool:
    """Whether the spans tile ``[0, data_len)`` exactly (compared as lists, at C speed); only
    when they do not does :func:`_layout` walk them to say where."""
    if not tensors:
        return data_len == 0
    spans = sorted(zip(map(_BEGIN, tensors.values()), map(_END, tensors.values()),
                       strict=True))
    return (spans[0][0] == 0 and spans[-1][1] == data_len
            and [b for b, _e in spans[1:]] == [e for _b, e in spans[:-1]])


def _uint(x: object) -> bool:
    return type(x) is int and x >= 0  # type() excludes bool, which JSON true/false become


def _tensor(name: str, entry: object,
            probs: list[tuple[str, Severity, str, dict[str, object]]],
            name_clean: bool = False) -> StTensor | None:
    if not name or len(name) > _MAX_NAME or (not name_clean and _BAD_NAME.search(name)):
        probs.append(("safetensors.tensor-name", Severity.HIGH,
                      "tensor name with path syntax or control characters", {"tensor": name}))
    if type(entry) is not dict or entry.keys() != _ENTRY_KEYS:
        probs.append(("safetensors.tensor-entry", Severity.CRITICAL,
                      "tensor entry must have exactly dtype, shape, data_offsets",
                      {"tensor": name}))
        return None
    dtype, shape, offs = entry["dtype"], entry["shape"], entry["data_offsets"]
    bits_per = DTYPE_BITS.get(dtype) if type(dtype) is str else None
    if bits_per is None:
        probs.append(("safetensors.unknown-dtype", Severity.CRITICAL, f"unknown dtype {dtype!r}",
                      {"tensor": name}))
        return None
    if (type(shape) is not list or type(offs) is not list or len(offs) != 2
            or not all(map(_uint, shape)) or not _uint(offs[0]) or not _uint(offs[1])
            or offs[0] > offs[1]):
        probs.append(("safetensors.tensor-entry", Severity.CRITICAL,
                      "shape/data_offsets must be non-negative integers, begin <= end",
                      {"tensor": name}))
        return None
    span = offs[1] - offs[0]
    bits = _bits(shape, bits_per, span * 8)
    if bits != span * 8:
        probs.append(("safetensors.size-mismatch", Severity.CRITICAL,
                      "shape x dtype does not equal the byte span",
                      {"tensor": name, "span": span,
                       "expected_bytes": bits / 8 if bits <= span * 8 else f"> {span}"}))
    return StTensor(dtype, tuple(shape), offs[0], offs[1])


def _bits(shape: list[int], bits_per: int, cap: int) -> int:
    """Elements x bits per element for non-negative ``shape``: exact up to ``cap``, past it
    ``cap + 1``. Dims >= 1 only grow the product, so stopping there decides the same; a
    hostile header's thousands of 2^62 dims would otherwise cost quadratic big-int time and
    a product too large for any float."""
    if 0 in shape:
        return 0
    bits = bits_per
    for d in shape:
        bits *= d
        if bits > cap:
            return cap + 1
    return bits


def _unallocatable(hdr: StHeader) -> Iterator[tuple[str, int]]:
    """Tensors the format admits but no loader can allocate: over :data:`_MAX_RANK`
    dimensions, or a zero-size tensor whose other dimensions make 2^63 bytes or more (numpy
    refuses ``[2^62, 4, 0]`` of F16; torch sizes are int64). Decided apart from the format's
    rules (:func:`read_header`), which read such a shape as an empty tensor."""
    for name, t in hdr.tensors.items():
        shape = t.shape
        if len(shape) > _MAX_RANK or (0 in shape and _bits(
                [d for d in shape if d], DTYPE_BITS[t.dtype], _MAX_BITS) > _MAX_BITS):
            yield name, len(shape)


def _layout(tensors: dict[str, StTensor], data_len: int,
            probs: list[tuple[str, Severity, str, dict[str, object]]]) -> None:
    """Offsets must tile the data section exactly: no gap, no overlap, nothing after."""
    pos = 0
    for name, t in sorted(tensors.items(), key=lambda kv: (kv[1].begin, kv[1].end)):
        if t.end > data_len:
            probs.append(("safetensors.offset-range", Severity.CRITICAL,
                          "tensor data beyond the end of the file", {"tensor": name}))
        if t.begin < pos:
            probs.append(("safetensors.overlap", Severity.CRITICAL,
                          "tensor overlaps the previous one", {"tensor": name, "begin": t.begin}))
        elif t.begin > pos:
            probs.append(("safetensors.gap", Severity.HIGH, "unused bytes between tensors",
                          {"tensor": name, "gap": t.begin - pos}))
        pos = max(pos, t.end)
    if pos < data_len:
        probs.append(("safetensors.trailing-bytes", Severity.HIGH,
                      "bytes after the last tensor", {"trailing": data_len - pos}))


def tensor_bytes(path: Path, header: StHeader, name: str) -> bytes:
    """Read one (small) tensor's bytes, e.g. an EAGLE ``d2t`` table."""
    t = header.tensors[name]
    with open_regular(path, follow=True) as fh:
        fh.seek(header.data_start + t.begin)
        return fh.read(t.end - t.begin)


def _sound(hdr: StHeader) -> bool:
    """Whether the header parsed without a blocking problem (medium ones do not count: they
    must not switch off the reference parser or the index checks)."""
    return all(sev.rank < Severity.HIGH.rank for _c, sev, _m, _e in hdr.problems)


def _reference_parser(path: Path) -> str | None:
    """The safetensors library's verdict on the file. It takes only a name, so it is given
    the descriptor's own ``/proc/self/fd`` name: the regular file opened here (never a FIFO
    or device put in its place, which would hang or never end), whatever the path becomes."""
    try:
        with open_regular(path, follow=True) as held, \
                safe_open(f"/proc/self/fd/{held.fileno()}", framework="numpy") as fh:
            fh.keys()
    except (SafetensorError, OSError, ValueError) as err:
        return str(err)
    return None


class SafetensorsCheck(Check):
    """Every safetensors shard and every shard index."""

    family = "safetensors"
    rules: ClassVar[dict[str, str]] = {
        "safetensors.header-length": "Header length beyond the file or above the limit",
        "safetensors.header-start": "Header does not start with '{'",
        "safetensors.header-json": "Header is not a UTF-8 JSON object",
        "safetensors.duplicate-key": "Duplicate JSON keys in the header",
        "safetensors.metadata": "__metadata__ is not a string-to-string map",
        "safetensors.metadata-suspicious": "__metadata__ with template syntax or shell commands",
        "safetensors.header-padding": "Header padded with something other than spaces",
        "safetensors.tensor-entry": "Malformed tensor entry",
        "safetensors.tensor-name": "Tensor name with path syntax",
        "safetensors.unknown-dtype": "Unknown dtype",
        "safetensors.tensor-shape": "A shape no loader can allocate (rank or size overflow)",
        "safetensors.size-mismatch": "shape x dtype differs from the byte span",
        "safetensors.overlap": "Overlapping tensor offsets",
        "safetensors.gap": "Gap between tensors",
        "safetensors.offset-range": "Tensor offsets beyond the end of the file",
        "safetensors.trailing-bytes": "Bytes after the last tensor",
        "safetensors.reference-parser": "The safetensors library rejects a file the checks passed",
        "safetensors.index-json": "Shard index is not valid JSON with a weight_map",
        "safetensors.index-missing-shard": "Index names a shard that is not in the tree",
        "safetensors.index-tensor-missing": "Index names a tensor its shard does not contain",
        "safetensors.index-unlisted-tensor": "A shard holds a tensor the index does not list",
        "safetensors.index-duplicate-tensor": "The same tensor is stored in more than one shard",
        "safetensors.index-extra-shard": "A shard no index references",
        "safetensors.index-total-size": "metadata.total_size differs from the shards",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Validate shards, then indexes against shards."""
        out: list[Finding] = []
        for tree in ctx.trees:
            headers: dict[str, StHeader] = {}
            for f in tree.files:
                if (f.rel.endswith(".safetensors") or ctx.kind(f.path) is FileKind.SAFETENSORS) \
                        and ctx.readable(f.path):
                    hdr = ctx.cached("safetensors", f.path, lambda p: read_header(
                        p, ctx.options.max_safetensors_header))
                    headers[f.rel] = hdr
                    out.extend(x.with_role(tree.role) for x in self._shard(f, hdr))
            for idx in tree.matching(".safetensors.index.json"):
                out.extend(x.with_role(tree.role) for x in self._index(ctx, tree, idx, headers))
        return CheckOutcome.of(out)

    def _shard(self, f: TreeFile, hdr: StHeader) -> Iterator[Finding]:
        for cid, sev, msg, ev in hdr.problems:
            yield finding(cid, sev, msg, f.rel, **ev)
        if any(len(t.shape) > _MAX_RANK or 0 in t.shape for t in hdr.tensors.values()):
            bad = list(_unallocatable(hdr))
            for name, rank in bad[:_MAX_PER_RULE]:
                yield finding("safetensors.tensor-shape", Severity.HIGH,
                              f"shape no loader can allocate ({rank} dimensions, at most "
                              f"{_MAX_RANK}; or a zero-size tensor whose other dimensions "
                              "overflow 2^63 bytes)", f.rel, tensor=name)
            if len(bad) > _MAX_PER_RULE:
                yield finding("safetensors.tensor-shape", Severity.HIGH,
                              f"{len(bad) - _MAX_PER_RULE} more problems of this kind", f.rel)
        if _sound(hdr):  # a medium finding must not spare the file the reference parser
            err = _reference_parser(f.path)
            if err:
                yield finding("safetensors.reference-parser", Severity.HIGH,
                              f"safetensors library rejects the file: {err}", f.rel)

    def _index(self, ctx: CheckContext, tree: ArtifactTree, idx: TreeFile,
               headers: dict[str, StHeader]) -> Iterator[Finding]:
        base = PurePosixPath(idx.rel).parent
        cfg = load_config(ctx, idx)  # the config check's strict parse, shared (once per scan)
        try:
            if cfg.problem is not None:
                raise ValueError(cfg.problem[2])
            doc = cfg.doc
            wmap = doc["weight_map"]
            if not isinstance(wmap, dict) or not set(map(type, wmap.values())) <= {str}:
                raise TypeError("weight_map must map tensor names to shard names")
        except (ValueError, KeyError, TypeError) as err:
            yield finding("safetensors.index-json", Severity.HIGH, f"unusable index: {err}",
                          idx.rel)
            return
        listed: dict[str, set[str]] = {}
        for tensor, shard in wmap.items():
            listed.setdefault(shard, set()).add(tensor)
        shards = sorted(listed)
        for shard in shards:
            rel = (base / shard).as_posix()
            if "/" in shard or "\\" in shard or rel not in headers:
                yield finding("safetensors.index-missing-shard", Severity.HIGH,
                              f"index names shard {shard!r} that is not a safetensors file here",
                              idx.rel, shard=shard)
        shard_hdr = {s: headers.get((base / s).as_posix()) for s in shards}
        # set differences find whether anything is wrong at C speed; the per-tensor loops that
        # say what, in the report's order, run only then (a clean index costs no Python loop)
        if any(h is not None and _sound(h) and not listed[s] <= h.tensors.keys()
               for s, h in shard_hdr.items()):
            for tensor, shard in sorted(wmap.items()):
                hdr = shard_hdr[shard]
                if hdr is not None and _sound(hdr) and tensor not in hdr.tensors:
                    yield finding("safetensors.index-tensor-missing", Severity.HIGH,
                                  f"{tensor} is not in {shard}", idx.rel, tensor=tensor)
        seen: dict[str, str] = {}
        total = 0
        siblings = {r: h for r, h in headers.items() if PurePosixPath(r).parent == base}
        for rel, hdr in sorted(siblings.items()):
            name = PurePosixPath(rel).name
            if name not in listed:
                yield finding("safetensors.index-extra-shard", Severity.HIGH,
                              "shard not referenced by the index", rel, index=idx.rel)
                continue
            spans = hdr.tensors.values()
            total += sum(map(_END, spans)) - sum(map(_BEGIN, spans))
            names = hdr.tensors.keys()
            if names <= listed[name] and names.isdisjoint(seen):
                seen.update(dict.fromkeys(names, name))
                continue
            for tensor in names:
                if tensor in seen:
                    yield finding("safetensors.index-duplicate-tensor", Severity.HIGH,
                                  f"{tensor} is stored in {seen[tensor]} and {name}", rel,
                                  tensor=tensor)
                seen[tensor] = name
                if wmap.get(tensor) != name:
                    yield finding("safetensors.index-unlisted-tensor", Severity.HIGH,
                                  f"{tensor} is in {name} but the index says "
                                  f"{wmap.get(tensor)!r}", rel, tensor=tensor)
        declared = doc.get("metadata", {}).get("total_size") if isinstance(
            doc.get("metadata"), dict) else None
        if isinstance(declared, int) and declared != total and all(
            _sound(headers[(base / s).as_posix()]) for s in shards
            if (base / s).as_posix() in headers
        ):
            yield finding("safetensors.index-total-size", Severity.MEDIUM,
                          "metadata.total_size differs from the sum of tensor sizes", idx.rel,
                          declared=declared, actual=total)
