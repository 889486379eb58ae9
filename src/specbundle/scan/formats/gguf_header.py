"""GGUF files: header bounds, the types llama.cpp asserts, tensor layout and coverage.

Parsing lives in :mod:`.gguf_reader`. On top of it, a file is accepted only if
llama.cpp reads it as gguf-py does: keys llama.cpp fetches with a fixed type (``gguf_get_val_u32``
and friends assert it, ``gguf_get_arr_data`` reads scores and token types as raw float/int
arrays of the vocabulary's length) must have that type; tensor data must sit exactly where
llama.cpp computes it (each offset the padded sum of the previous tensors, in info order); and
every byte of the file is covered: after the last tensor (or after the header when there are
no tensors) only zero padding below the alignment may follow. Every byte llama.cpp skips as
padding (before the data, between tensors, after the last) must be zero, and the alignment stays
small. llama.cpp reads names and string values as C strings (``gguf_find_key``'s ``strcmp``,
``ggml_set_name``, the model's key/value map that holds the chat template), so a NUL in a key,
a tensor name or a string value is a second reading: a ``tokenizer.chat_template\0x`` key is
the template llama-server uses, and no other reader calls it one. The same holds for every
element of a string array (``gguf_get_arr_str``: a token ``</s>\0x`` is ``</s>``), and a string
value that is not UTF-8 is one gguf-py refuses and llama.cpp reads. Counts llama.cpp asserts
(layers, experts, expert groups, one text per token) abort the engine process, so a file that
breaks them is refused here too; a BOOL byte other than 0/1 and a non-finite hyperparameter are
refused as ambiguous.
"""

from __future__ import annotations

import math
import mmap
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from gguf import GGUFValueType

from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.formats.gguf_reader import (
    GGUFFormatError,
    GGUFHeader,
    GGUFTensor,
    StringArray,
    read_gguf,
)
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.sniff import FileKind
from specbundle.strict import open_regular

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
    "general.name": (_V.STRING, None), "general.type": (_V.STRING, None),
    "adapter.type": (_V.STRING, None), "adapter.lora.alpha": (_V.FLOAT32, None),
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
    "tokenizer.ggml.add_sep_token": (_V.BOOL, None),
    "tokenizer.ggml.token_type_count": (_V.UINT32, None),
    "tokenizer.chat_template": (_V.STRING, None),
}
_TOKEN_ID = re.compile(r"^tokenizer\.ggml\.\w+_token_id$")
_CHARSMAP = "tokenizer.ggml.precompiled_charsmap"
# Per-architecture hyperparameters llama-model-loader reads as u32 (or a u32 array per layer)
# and f32; another type makes the engine refuse the file that another reader accepts.
_ARCH_U32 = frozenset((
    "context_length", "embedding_length", "block_count", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.dimension_count",
    "expert_count", "expert_used_count", "vocab_size", "nextn_predict_layers",
    "leading_dense_block_count", "expert_feed_forward_length",
    "expert_shared_feed_forward_length", "expert_shared_count", "expert_gating_func",
    "attention.key_length", "attention.value_length", "attention.sliding_window",
    "attention.q_lora_rank", "attention.kv_lora_rank", "rope.scaling.original_context_length",
    "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank",
    "ssm.group_count", "wkv.head_size", "pooling_type", "decoder_start_token_id",
    "expert_group_count", "expert_group_used_count"))
_ARCH_F32 = frozenset((
    "rope.freq_base", "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon",
    "attention.group_norm_epsilon", "rope.scaling.factor", "rope.scaling.attn_factor",
    "expert_weights_scale", "logit_scale", "attn_logit_softcapping",
    "final_logit_softcapping", "residual_scale", "embedding_scale", "attention.scale"))
_ARCH_BOOL = frozenset(("rope.scaling.finetuned", "attention.causal", "use_parallel_residual",
                        "expert_weights_norm"))


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
        if rest in _ARCH_BOOL:
            return ((_V.BOOL, None),)
        if rest == "rope.scaling.type":
            return ((_V.STRING, None),)
    return None


def _name(t: tuple[GGUFValueType, GGUFValueType | None]) -> str:
    return t[0].name + (f"[{t[1].name}]" if t[1] is not None else "")


def _keys(h: GGUFHeader) -> Iterator[tuple[str, Severity, str]]:
    """Typed keys with another type, vocabulary arrays of another length, names not UTF-8."""
    for name in h.nul:
        yield ("gguf.key-name", Severity.CRITICAL, f"name {name!r} is empty or holds a NUL "
               "(llama.cpp reads it up to the NUL, or refuses an empty key; others read all)")
    for keys, cid, what in (
            (h.nul_values, "gguf.key-name", "holds a NUL (llama.cpp reads it up to the NUL, "
             "others read all of it)"),
            (h.not_utf8_values, "gguf.encoding", "is not valid UTF-8 (gguf-py refuses it, "
             "llama.cpp reads the bytes)"),
            (h.odd_bools, "gguf.key-type", "holds a BOOL byte other than 0 or 1 (readers that "
             "test the byte and readers that compare it read it differently)")):
        for key in keys:
            yield cid, Severity.HIGH, f"the value of {key!r} (or an element of it) {what}"
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
        elif want is not None and got[0] is _V.FLOAT32 and not math.isfinite(h.kv[key]):
            # NaN or infinity in a hyperparameter (rope base, norm epsilon, scales): every
            # reader loads it and the model silently computes garbage
            yield ("gguf.key-type", Severity.HIGH, f"{key} is {h.kv[key]!r}, not a finite number")
    if arch:
        yield from _experts(h, arch)
    tokens = h.kv.get("tokenizer.ggml.tokens")
    if isinstance(tokens, StringArray):
        repeats, example = _duplicate_tokens(tokens)
        if repeats:
            yield ("gguf.duplicate", Severity.HIGH,
                   f"{repeats} token texts repeat in tokenizer.ggml.tokens, e.g. {example!r} "
                   "(llama.cpp asserts one id per text: the engine aborts)")
        for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            v = h.kv.get(key)
            if isinstance(v, np.ndarray | StringArray) and len(v) != len(tokens):
                yield ("gguf.key-type", Severity.CRITICAL,
                       f"{key} has {len(v)} entries for {len(tokens)} tokens (llama.cpp reads "
                       "one per token, past the end of the array)")


_CHUNK = 1 << 14  # tokens per chunk: the per-chunk lists stay near 1 MB


def _spans(tokens: StringArray, i: int) -> tuple[list[int], list[int], list[int]]:
    """Where the texts of tokens ``i`` up to ``i + _CHUNK`` start and end in the array, and
    which of them (chunk positions) are empty."""
    offs = np.frombuffer(tokens.offsets, dtype=np.uint32)[i:i + _CHUNK + 1].astype(np.int64)
    starts = offs[:_CHUNK] + 8
    ends = offs[1:] if len(offs) > _CHUNK else np.append(offs[1:], len(tokens.data))
    return starts.tolist(), ends.tolist(), np.flatnonzero(starts == ends).tolist()


def _texts(tokens: StringArray, i: int) -> list[bytes]:
    """Token texts ``i`` up to ``i + _CHUNK`` as llama-vocab keys them (an empty text is
    ``[EMPTY_<id>]``): one bounded chunk of bytes objects at a time."""
    a, b, empty = _spans(tokens, i)
    texts = list(map(tokens.data.__getitem__, map(slice, a, b)))  # C-level maps, no loop
    for j in empty:
        texts[j] = b"[EMPTY_%d]" % (i + j)
    return texts


def _hashes(texts: Iterable[bytes], count: int,
            wide: bool) -> npt.NDArray[np.uint64] | npt.NDArray[np.uint32]:
    h = np.fromiter(map(hash, texts), dtype=np.int64, count=count)
    return h.view(np.uint64) if wide else h.astype(np.uint32)


def _chunk_hashes(tokens: StringArray, i: int,
                  wide: bool) -> npt.NDArray[np.uint64] | npt.NDArray[np.uint32]:
    """The hashes of one chunk's texts (as :func:`_texts` reads them) without keeping the
    texts: the first pass, over every token."""
    a, b, empty = _spans(tokens, i)
    h = np.fromiter(map(hash, map(tokens.data.__getitem__, map(slice, a, b))), dtype=np.int64,
                    count=len(a))
    if empty:
        h[empty] = [hash(b"[EMPTY_%d]" % (i + j)) for j in empty]
    return h.view(np.uint64) if wide else h.astype(np.uint32)


def _duplicate_tokens(tokens: StringArray) -> tuple[int, str]:
    """How many token texts repeat as llama-vocab reads them, and one of them.

    One hash per token, sorted in place; only texts whose hash repeats are compared exactly,
    in a second chunked pass. Memory is the bound that matters on a hostile array of millions
    of tiny strings: where elements average 16 bytes or more on disk the hash is 64 bits (the
    check adds at most half the array, and a repeat by chance, ~n^2/2^65, never costs the
    second pass); below, 32 bits (at most half again of an element of 8 bytes, the least there
    is), where chance repeats among n tokens are ~n^2/2^33, thousands at most, and Python's
    hash is keyed per process, so none can be aimed."""
    n = len(tokens)
    if n < 2:
        return 0, ""
    wide = len(tokens.data) >= 16 * n
    h = np.empty(n, dtype=np.uint64 if wide else np.uint32)
    for i in range(0, n, _CHUNK):
        h[i:i + _CHUNK] = _chunk_hashes(tokens, i, wide)
    h.sort()
    repeated = []
    for k in range(0, n - 1, _CHUNK):  # neighbours equal, compared a chunk at a time
        stop = min(k + _CHUNK, n - 1)
        nxt = h[k + 1:stop + 1]
        repeated.append(nxt[nxt == h[k:stop]])
    suspects = np.unique(np.concatenate(repeated))
    del h
    if not suspects.size:
        return 0, ""
    seen: dict[bytes, int] = {}
    for i in range(0, n, _CHUNK):
        texts = _texts(tokens, i)
        for j in np.flatnonzero(np.isin(_hashes(texts, len(texts), wide), suspects)).tolist():
            seen[texts[j]] = seen.get(texts[j], 0) + 1
    repeats = [(t, c) for t, c in seen.items() if c > 1]
    if not repeats:
        return 0, ""
    return (sum(c - 1 for _t, c in repeats),
            repeats[0][0].decode("utf-8", errors="surrogateescape"))


_MAX_LAYERS = 512  # LLAMA_MAX_LAYERS
_MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS of the llama.cpp this project ships (older builds: 512)
# hyperparameters llama.cpp reads as one value or one per layer (get_key_or_arr)
_PER_LAYER = ("feed_forward_length", "attention.head_count", "attention.head_count_kv")


def _experts(h: GGUFHeader, arch: str) -> Iterator[tuple[str, Severity, str]]:
    """The layer and expert counts llama.cpp's ``load_hparams`` asserts (``GGML_ASSERT``: the
    engine process aborts, whatever the caller): 1..512 layers, per-layer arrays of one entry
    per layer, at most 1024 experts, experts used <= experts, used > 0 exactly when there are
    experts, and groups that divide the experts."""
    def get(name: str) -> int | None:  # a per-layer array counts as its largest entry
        v = h.kv.get(f"{arch}.{name}")
        if isinstance(v, np.ndarray) and v.size and v.dtype.kind in "iu":
            return int(v.max())
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    layers = h.kv.get(f"{arch}.block_count")
    if isinstance(layers, int) and not isinstance(layers, bool):
        if not 0 < layers <= _MAX_LAYERS:
            yield ("gguf.key-type", Severity.HIGH, f"{arch}.block_count is {layers} (llama.cpp "
                   f"asserts 1..{_MAX_LAYERS}: the engine aborts)")
        for name in _PER_LAYER:
            v = h.kv.get(f"{arch}.{name}")
            if isinstance(v, np.ndarray) and len(v) != layers:
                yield ("gguf.key-type", Severity.HIGH, f"{arch}.{name} has {len(v)} entries for "
                       f"{layers} layers (llama.cpp refuses the file)")
    n, used = get("expert_count"), get("expert_used_count")
    groups, group_used = get("expert_group_count"), get("expert_group_used_count")
    if n is None and used is None and groups is None:
        return
    n_, used_, groups_, group_used_ = n or 0, used or 0, groups or 0, group_used or 0
    bad = n_ > _MAX_EXPERTS or used_ > n_ or (used_ == 0) != (n_ == 0) or (
        n_ == 0 and groups_ != 0) or (n_ > 0 and (groups_ >= n_ or (groups_ > 1 and (
            n_ % groups_ or not 0 < group_used_ < groups_))))
    if bad:
        yield ("gguf.key-type", Severity.HIGH,
               f"{arch}: {n_} experts, {used_} used, {groups_} groups, {group_used_} groups used "
               f"(llama.cpp asserts at most {_MAX_EXPERTS} experts, used <= experts, used > 0 "
               "with experts, groups dividing them: the engine aborts)")


# llama.cpp accepts any power of two; writers use 32 (the default) or 64. A huge alignment makes
# room for that many bytes of "padding" before, between and after tensors.
_MAX_ALIGNMENT = 1 << 16
# Padding is read to check it is zero; past this total the file is too large to analyse.
_MAX_PADDING_BYTES = 64 << 20


def _pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _padding(h: GGUFHeader, path: Path, in_order: bool) -> Iterator[tuple[str, Severity, str]]:
    """Every byte llama.cpp skips is zero padding: between the header and the data, between
    tensors, and after the last one (at most alignment-1 bytes). Bytes there are a payload
    behind a valid header, whatever the number of tensors."""
    regions: list[tuple[int, int, str]] = []
    if h.tensors:
        regions.append((h.header_end, h.data_start, "between the header and the tensor data"))
    if in_order:
        for t in h.tensors:
            start = h.data_start + t.offset + t.nbytes
            regions.append((start, h.data_start + _pad(t.offset + t.nbytes, h.alignment),
                            f"after tensor {t.name!r}"))
    end = max((t.offset + t.nbytes for t in h.tensors), default=0)
    last = h.data_start + end if h.tensors else h.header_end
    if h.file_size - last >= h.alignment:
        yield ("gguf.trailing-bytes", Severity.HIGH,
               f"{h.file_size - last} bytes after the last tensor (or the header)")
    else:
        regions.append((last, h.file_size, "after the last tensor (or the header)"))
    regions = [(a, min(b, h.file_size), why) for a, b, why in regions if a < min(b, h.file_size)]
    if sum(b - a for a, b, _ in regions) > _MAX_PADDING_BYTES:
        yield ("gguf.too-large", Severity.HIGH, "padding beyond "
               f"{_MAX_PADDING_BYTES} bytes is too large to analyse")
        return
    if not regions:
        return
    with (open_regular(path, follow=True) as fh,
          mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm):
        for a, b, why in regions:
            if mm[a:b].count(0) != b - a:
                yield ("gguf.trailing-bytes", Severity.HIGH, f"non-zero padding {why}")
                return


def _layout(h: GGUFHeader, path: Path) -> Iterator[tuple[str, Severity, str]]:
    if h.alignment > _MAX_ALIGNMENT:
        yield ("gguf.alignment", Severity.HIGH, f"general.alignment {h.alignment} above "
               f"{_MAX_ALIGNMENT} (room for hidden bytes in the padding)")
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
    in_order = True
    for t in h.tensors:  # llama.cpp: each offset is the padded sum of the tensors before it
        if t.name_bytes >= _GGML_MAX_NAME:
            yield ("gguf.tensor-name", Severity.HIGH,
                   f"tensor name of {t.name_bytes} bytes (llama.cpp refuses >= 64)")
        if t.offset != expected:
            yield ("gguf.tensor-order", Severity.HIGH,
                   f"{t.name}: offset {t.offset}, llama.cpp expects {expected}")
            in_order = False
            break
        expected += _pad(t.nbytes, h.alignment)
    if h.alignment <= _MAX_ALIGNMENT:
        yield from _padding(h, path, in_order)
    if "general.architecture" not in h.kv:
        yield "gguf.metadata", Severity.MEDIUM, "general.architecture is missing"
    yield from _keys(h)


_MAX_PER_RULE = 50  # findings of one rule per file; the rest are counted in one more


def _capped(found: Iterator[tuple[str, Severity, str]]) -> Iterator[tuple[str, Severity, str]]:
    """At most :data:`_MAX_PER_RULE` findings of each rule and severity, then one that counts
    the rest: 10^5 hostile tensor infos must not make a report of 10^5 findings."""
    seen: dict[tuple[str, Severity], int] = {}
    for cid, sev, msg in found:
        n = seen[cid, sev] = seen.get((cid, sev), 0) + 1
        if n <= _MAX_PER_RULE:
            yield cid, sev, msg
    for (cid, sev), n in seen.items():
        if n > _MAX_PER_RULE:
            yield cid, sev, f"{n - _MAX_PER_RULE} more findings of this kind"


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
        "gguf.key-name": "A name or string llama.cpp reads only up to a NUL (or an empty key)",
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
                if not (f.rel.endswith(".gguf") or ctx.kind(f.path) is FileKind.GGUF) \
                        or not ctx.readable(f.path):
                    continue
                try:
                    h = ctx.cached("gguf", f.path, read_gguf)
                except GGUFFormatError as err:
                    sev = Severity.HIGH if err.too_large else Severity.CRITICAL
                    out.append(finding(err.check_id, sev, str(err), f.rel).with_role(tree.role))
                    continue
                out.extend(finding(cid, sev, msg, f.rel).with_role(tree.role)
                           for cid, sev, msg in _capped(_layout(h, f.path)))
        return CheckOutcome.of(out)


def load_gguf(ctx: CheckContext, path: Path) -> GGUFHeader | None:
    """The cached header, or None when it is malformed or unreadable (the GGUF and files
    checks report those)."""
    if not ctx.readable(path):
        return None
    try:
        header: GGUFHeader = ctx.cached("gguf", path, read_gguf)
    except GGUFFormatError:
        return None
    return header
