"""GGUF files: header bounds, the types llama.cpp asserts, tensor layout and coverage.

Parsing lives in :mod:`specbundle.scan.gguf_reader`. On top of it, a file is accepted only if
llama.cpp reads it as gguf-py does: keys llama.cpp fetches with a fixed type (``gguf_get_val_u32``
and friends assert it, ``gguf_get_arr_data`` reads scores and token types as raw float/int
arrays of the vocabulary's length) must have that type; tensor data must sit exactly where
llama.cpp computes it (each offset the padded sum of the previous tensors, in info order); and
every byte of the file is covered: after the last tensor (or after the header when there are
no tensors) only zero padding below the alignment may follow.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from gguf import GGUFValueType

from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.gguf_reader import (
    GGUFFormatError,
    GGUFHeader,
    GGUFTensor,
    StringArray,
    read_gguf,
)
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.sniff import FileKind

__all__ = ["GGUFCheck", "GGUFFormatError", "GGUFHeader", "GGUFTensor", "StringArray",
           "load_gguf", "read_gguf"]

_V = GGUFValueType
_GGML_MAX_NAME = 64  # llama.cpp refuses tensor names of 64 bytes or more
# Keys llama.cpp reads with one type (llama-vocab.cpp, llama-model-loader.cpp, gguf.cpp):
# (value type, element type of an array). Wrong types abort (GGML_ASSERT) or misread.
_TYPED: dict[str, tuple[GGUFValueType, GGUFValueType | None]] = {
    "general.architecture": (_V.STRING, None),
    "general.file_type": (_V.UINT32, None),
    "general.quantization_version": (_V.UINT32, None),
    "general.name": (_V.STRING, None),
    "split.no": (_V.UINT16, None), "split.count": (_V.UINT16, None),
    "split.tensors.count": (_V.INT32, None),
    "tokenizer.ggml.model": (_V.STRING, None), "tokenizer.ggml.pre": (_V.STRING, None),
    "tokenizer.ggml.tokens": (_V.ARRAY, _V.STRING),
    "tokenizer.ggml.merges": (_V.ARRAY, _V.STRING),
    "tokenizer.ggml.scores": (_V.ARRAY, _V.FLOAT32),
    "tokenizer.ggml.token_type": (_V.ARRAY, _V.INT32),
    "tokenizer.ggml.add_bos_token": (_V.BOOL, None),
    "tokenizer.ggml.add_eos_token": (_V.BOOL, None),
    "tokenizer.ggml.add_space_prefix": (_V.BOOL, None),
    "tokenizer.ggml.remove_extra_whitespaces": (_V.BOOL, None),
    "tokenizer.chat_template": (_V.STRING, None),
}
_TOKEN_ID = re.compile(r"^tokenizer\.ggml\.\w+_token_id$")
_CHARSMAP = "tokenizer.ggml.precompiled_charsmap"
# Per-architecture hyperparameters llama-model-loader reads as u32 (or a u32 array per layer)
# and f32; another type makes the engine refuse the file that another reader accepts.
_ARCH_U32 = ("context_length", "embedding_length", "block_count", "feed_forward_length",
             "attention.head_count", "attention.head_count_kv", "rope.dimension_count",
             "expert_count", "expert_used_count", "vocab_size", "nextn_predict_layers")
_ARCH_F32 = ("rope.freq_base", "attention.layer_norm_rms_epsilon",
             "attention.layer_norm_epsilon")


def _want(key: str, arch: str | None) -> tuple[tuple[GGUFValueType, GGUFValueType | None],
                                               ...] | None:
    if key in _TYPED:
        return (_TYPED[key],)
    if key.startswith("tokenizer.chat_template."):
        return ((_V.STRING, None),)
    if _TOKEN_ID.match(key):
        return ((_V.UINT32, None),)
    if key == _CHARSMAP:
        return ((_V.ARRAY, _V.UINT8), (_V.ARRAY, _V.INT8))
    if arch and key.startswith(arch + "."):
        rest = key[len(arch) + 1:]
        if rest in _ARCH_U32:
            return ((_V.UINT32, None), (_V.ARRAY, _V.UINT32), (_V.ARRAY, _V.INT32))
        if rest in _ARCH_F32:
            return ((_V.FLOAT32, None),)
    return None


def _name(t: tuple[GGUFValueType, GGUFValueType | None]) -> str:
    return t[0].name + (f"[{t[1].name}]" if t[1] is not None else "")


def _keys(h: GGUFHeader) -> Iterator[tuple[str, Severity, str]]:
    """Typed keys with another type, vocabulary arrays of another length, names not UTF-8."""
    for name in h.not_utf8:
        # gguf-py refuses such a key or tensor name, llama.cpp reads it: two readings
        yield ("gguf.encoding", Severity.HIGH, f"name {name!r} is not valid UTF-8 "
               "(gguf-py refuses it, llama.cpp reads it)")
    arch = h.kv.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    for key, got in h.types.items():
        want = _want(key, arch)
        if want is not None and got not in want:
            yield ("gguf.key-type", Severity.CRITICAL,
                   f"{key} is {_name(got)}; llama.cpp reads it as {_name(want[0])}")
    tokens = h.kv.get("tokenizer.ggml.tokens")
    if isinstance(tokens, StringArray):
        for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            v = h.kv.get(key)
            if v is not None and len(v) != len(tokens):
                yield ("gguf.key-type", Severity.CRITICAL,
                       f"{key} has {len(v)} entries for {len(tokens)} tokens (llama.cpp reads "
                       "one per token, past the end of the array)")


def _padding_problem(path: Path, start: int, size: int, alignment: int) -> str | None:
    """Bytes after ``start``: at most alignment-1 zero bytes of padding may follow."""
    if size <= start:
        return None
    if size - start >= alignment:
        return f"{size - start} bytes after the last tensor (or the header)"
    with path.open("rb") as fh:
        fh.seek(start)
        if fh.read(alignment).strip(b"\x00"):
            return "non-zero bytes in the padding after the last tensor (or the header)"
    return None


def _layout(h: GGUFHeader, path: Path) -> Iterator[tuple[str, Severity, str]]:
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
    expected = 0
    for t in h.tensors:  # llama.cpp: each offset is the padded sum of the tensors before it
        if t.name_bytes >= _GGML_MAX_NAME:
            yield ("gguf.tensor-name", Severity.HIGH,
                   f"tensor name of {t.name_bytes} bytes (llama.cpp refuses >= 64)")
        if t.offset != expected:
            yield ("gguf.tensor-order", Severity.HIGH,
                   f"{t.name}: offset {t.offset}, llama.cpp expects {expected}")
            break
        expected += -(-t.nbytes // h.alignment) * h.alignment
    last = h.data_start + end if h.tensors else h.header_end
    why = _padding_problem(path, last, h.file_size, h.alignment)
    if why:
        yield "gguf.trailing-bytes", Severity.HIGH, why
    if "general.architecture" not in h.kv:
        yield "gguf.metadata", Severity.MEDIUM, "general.architecture is missing"
    yield from _keys(h)


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
        "gguf.key-type": "A key llama.cpp reads with a fixed type or length has another",
        "gguf.nested-array": "Array of arrays (llama.cpp refuses what gguf-py reads)",
        "gguf.tensor-name": "Tensor name llama.cpp refuses (64 bytes or more)",
        "gguf.tensor-order": "Tensor data not where llama.cpp computes it (padded, in order)",
        "gguf.too-large": "Metadata too large to analyse",
        "gguf.encoding": "A key or tensor name that is not valid UTF-8",
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
                    sev = Severity.HIGH if err.too_large else Severity.CRITICAL
                    out.append(finding(err.check_id, sev, str(err), f.rel).with_role(tree.role))
                    continue
                out.extend(finding(cid, sev, msg, f.rel).with_role(tree.role)
                           for cid, sev, msg in _layout(h, f.path))
        return CheckOutcome.of(out)


def load_gguf(ctx: CheckContext, path: Path) -> GGUFHeader | None:
    """The cached header, or None when it is malformed (the GGUF check reports that)."""
    try:
        header: GGUFHeader = ctx.cached("gguf", path, read_gguf)
    except GGUFFormatError:
        return None
    return header
