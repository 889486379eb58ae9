"""Red-team round 3 for the GGUF and safetensors readers (issue 11, classes 1, 4, 5, 7).

Each hostile fixture has a benign twin that must pass. Oracles: llama.cpp (``gguf.cpp`` reads
strings as C strings, ``load_hparams`` asserts layer and expert counts), gguf-py (refuses
string values that are not UTF-8), numpy (refuses shapes of more than 32/64 dims or 2^63
bytes, zero-size or not).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from array import array
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from specbundle.scan import ScanReport, Severity, scan_tree, to_sarif
from specbundle.scan.formats import gguf_reader
from specbundle.scan.formats.gguf_header import _CHUNK, _duplicate_tokens
from specbundle.scan.formats.gguf_reader import StringArray
from tests.lib import corpus
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]
_U8, _U32, _I32, _F32, _BOOL, _STR, _ARR = 0, 4, 5, 6, 7, 8, 9


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _arr(etype: int, items: list[bytes]) -> bytes:
    return struct.pack("<IQ", etype, len(items)) + b"".join(items)


def _u32(key: str, v: int) -> tuple[str, int, bytes]:
    return (key, _U32, struct.pack("<I", v))


def _gguf(kv: list[tuple[str | bytes, int, bytes]], arch: bytes = b"llama") -> bytes:
    """A GGUF with one F16 tensor of 8 elements, alignment 32."""
    kv = [("general.architecture", _STR, _s(arch)), *kv]
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kv))
    for key, vt, val in kv:
        out += _s(key) + struct.pack("<I", vt) + val
    out += _s("a") + struct.pack("<IQIQ", 1, 8, 1, 0)
    return out + b"\x00" * (-len(out) % 32) + b"\x00" * 32


def _serialisable(rep: ScanReport) -> None:
    assert not rep.crashed_checks, [f.message for f in rep.findings]
    rep.canonical_bytes().decode("utf-8")
    json.dumps(to_sarif(rep), ensure_ascii=False).encode("utf-8")


def _clean(rep: ScanReport) -> bool:
    _serialisable(rep)
    return not rep.blocked and ids(rep) == set()


def _msgs(rep: ScanReport) -> list[str]:
    return [f"{f.check_id}: {f.message}" for f in rep.findings]


def _blocked(rep: ScanReport, check_id: str) -> None:
    _serialisable(rep)
    assert check_id in ids(rep, Severity.HIGH) and rep.blocked, _msgs(rep)


def _tokens(*toks: bytes) -> tuple[str, int, bytes]:
    return ("tokenizer.ggml.tokens", _ARR, _arr(_STR, [_s(t) for t in toks]))


# -- 1. string array elements are C strings to llama.cpp, UTF-8 to gguf-py -----------------------
@pytest.mark.parametrize("kv", [
    # llama-vocab copies each token with gguf_get_arr_str (a const char *): "</s>\0x" is "</s>"
    [_tokens(b"a", b"</s>\x00x", b"</s>")],
    [("tokenizer.ggml.merges", _ARR, _arr(_STR, [_s(b"a b\x00c d")]))],
    [("general.tags", _ARR, _arr(_STR, [_s(b"x"), _s(b"\x00")]))],
])
def test_nul_in_string_array_elements(scan_one: Scan, kv: list[tuple[str, int, bytes]]) -> None:
    _blocked(scan_one("model.gguf", _gguf(kv)), "gguf.key-name")


@pytest.mark.parametrize("kv", [
    [_tokens(b"a", b"b\xffc")],
    [_tokens(b"\xc3", b"\xa9")],  # each element invalid; joined they would read as "é"
    [_tokens(b"x" * 200 + b"\xc3", b"ok")],  # a length byte >= 0x80 must not complete it
    [_tokens(b"\xed\xa0\x80")],  # an encoded surrogate
    [("general.name", _STR, _s(b"caf\xe9"))],
    [("tokenizer.chat_template", _STR, _s(b"{{ x }}\xc0\xaf"))],
])
def test_string_values_not_utf8(scan_one: Scan, kv: list[tuple[str, int, bytes]]) -> None:
    # gguf-py (and transformers' GGUF loader) refuses to decode them; llama.cpp reads the bytes
    _blocked(scan_one("model.gguf", _gguf(kv)), "gguf.encoding")


def test_valid_unicode_strings_pass(scan_one: Scan) -> None:
    toks = [t.encode() for t in ("a", "é", "😀", "Ġthe", "日本語", "x" * 300, "é" * 200, "")]
    kv = [_tokens(*toks), ("general.name", _STR, _s("café 😀"))]
    assert _clean(scan_one("model.gguf", _gguf(kv))), _msgs(scan_one("model.gguf", _gguf(kv)))


def test_string_array_scan_across_chunks(tmp_path: Path) -> None:
    """Chunk edges inside a length prefix or a multi-byte character change nothing.

    A filler token first puts the reader's real chunk edge (1 MiB into the array) on each byte
    of the element that matters in turn, its length prefix included."""
    edge = gguf_reader._CHUNK
    toks = [("é😀" * (i % 5) + "a" * (i % 3)).encode() for i in range(200)]

    def flaws(items: list[bytes], i: int) -> set[tuple[bool, bool]]:
        """What the reader finds with the chunk edge on each byte of ``items[i]``."""
        start = sum(8 + len(t) for t in items[:i])
        seen = set()
        for k in range(start, start + 8 + len(items[i]) + 1):
            path = tmp_path / "m.gguf"
            path.write_bytes(_gguf([_tokens(b"a" * (edge - 8 - k), *items)]))
            h = gguf_reader.read_gguf(path)
            seen.add(("tokenizer.ggml.tokens" in h.nul_values,
                      "tokenizer.ggml.tokens" in h.not_utf8_values))
        return seen

    assert flaws(toks, 4) == {(False, False)}  # "é😀" * 4 + "a": 2- and 4-byte characters
    assert flaws([*toks, b"a\x00"], 200) == {(True, False)}
    assert flaws([*toks[:100], b"\xf0\x9f\x98", *toks[100:]], 100) == {(False, True)}
    assert flaws([b"\x00\xff", *toks], 0) == {(True, True)}


# -- 1. BOOL bytes and non-finite hyperparameters ------------------------------------------------
@pytest.mark.parametrize(("kv", "twin"), [
    ([("tokenizer.ggml.add_bos_token", _BOOL, b"\x02")],
     [("tokenizer.ggml.add_bos_token", _BOOL, b"\x01")]),
    ([("llama.attention.causal", _BOOL, b"\xff")], [("llama.attention.causal", _BOOL, b"\x00")]),
    ([("x.flags", _ARR, _arr(_BOOL, [b"\x01", b"\x80"]))],
     [("x.flags", _ARR, _arr(_BOOL, [b"\x01", b"\x00"]))]),
])
def test_bool_bytes_other_than_0_or_1(scan_one: Scan, kv: list[tuple[str, int, bytes]],
                                      twin: list[tuple[str, int, bytes]]) -> None:
    _blocked(scan_one("model.gguf", _gguf(kv)), "gguf.key-type")
    assert _clean(scan_one("model.gguf", _gguf(twin)))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_hyperparameters(scan_one: Scan, value: float) -> None:
    for key in ("llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"):
        _blocked(scan_one("model.gguf", _gguf([(key, _F32, struct.pack("<f", value))])),
                 "gguf.key-type")
        assert _clean(scan_one("model.gguf", _gguf([(key, _F32, struct.pack("<f", 1e-5))])))


# -- 1. counts llama.cpp asserts: the engine process aborts --------------------------------------
_ABORTS = {
    "used-above-experts": [_u32("llama.expert_count", 4), _u32("llama.expert_used_count", 8)],
    "used-without-experts": [_u32("llama.expert_used_count", 2)],
    "experts-without-used": [_u32("llama.expert_count", 4)],
    "groups-not-dividing": [_u32("llama.expert_count", 8), _u32("llama.expert_used_count", 2),
                            _u32("llama.expert_group_count", 3),
                            _u32("llama.expert_group_used_count", 1)],
    "group-used-too-many": [_u32("llama.expert_count", 8), _u32("llama.expert_used_count", 2),
                            _u32("llama.expert_group_count", 4),
                            _u32("llama.expert_group_used_count", 4)],
    "too-many-experts": [_u32("llama.expert_count", 1025), _u32("llama.expert_used_count", 2)],
    "no-layers": [_u32("llama.block_count", 0)],
    "too-many-layers": [_u32("llama.block_count", 600)],
    "per-layer-length": [_u32("llama.block_count", 2), ("llama.feed_forward_length", _ARR,
                                                        _arr(_U32, [b"\x40\0\0\0"] * 3))],
}
_FINE = {
    "moe": [_u32("llama.expert_count", 8), _u32("llama.expert_used_count", 2)],
    "grouped-moe": [_u32("llama.expert_count", 8), _u32("llama.expert_used_count", 2),
                    _u32("llama.expert_group_count", 4), _u32("llama.expert_group_used_count", 2)],
    "1024-experts": [_u32("llama.expert_count", 1024), _u32("llama.expert_used_count", 8)],
    "dense": [_u32("llama.block_count", 512), _u32("llama.expert_count", 0),
              _u32("llama.expert_used_count", 0)],
    "per-layer": [_u32("llama.block_count", 3), ("llama.feed_forward_length", _ARR,
                                                 _arr(_U32, [b"\x40\0\0\0"] * 3))],
}


@pytest.mark.parametrize("case", sorted(_ABORTS))
def test_counts_llama_cpp_asserts(scan_one: Scan, case: str) -> None:
    _blocked(scan_one("model.gguf", _gguf(_ABORTS[case])), "gguf.key-type")


@pytest.mark.parametrize("case", sorted(_FINE))
def test_counts_llama_cpp_accepts(scan_one: Scan, case: str) -> None:
    assert _clean(scan_one("model.gguf", _gguf(_FINE[case])))


def test_hostile_arch_name_in_count_findings_serialises(scan_one: Scan) -> None:
    arch = b"\xff\x1b[2J\xe2\x80\xae"
    kv = [(b"\xff\x1b[2J\xe2\x80\xae.expert_used_count", _U32, struct.pack("<I", 3))]
    rep = scan_one("model.gguf", _gguf(kv, arch))
    _serialisable(rep)
    text = rep.canonical_bytes().decode("utf-8")
    assert rep.blocked and "\x1b" not in text and "\u202e" not in text


def test_gguf_writer_moe_passes(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "m" / "model.gguf"
    path.parent.mkdir()
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(2)
    w.add_feed_forward_length([64, 64])
    w.add_expert_count(8)
    w.add_expert_used_count(2)
    w.add_expert_group_count(4)
    w.add_expert_group_used_count(2)
    w.add_rope_freq_base(1e6)
    w.add_add_bos_token(True)
    w.add_token_list(["a", "é", "😀", "x" * 200])
    w.add_token_merges(["a é"])
    w.add_tensor("a", np.ones((4, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    rep = scan_tree(path.parent, options=FAST)
    assert _clean(rep), _msgs(rep)


@pytest.mark.parametrize(("case", "check_id"), [
    ("used-above-experts", "gguf.key-type"), ("duplicate-token", "gguf.duplicate"),
    ("nul-token", "gguf.key-name"),
])
def test_llama_server_aborts_where_the_scanner_blocks(llama_server_bin: Path, tmp_path: Path,
                                                      case: str, check_id: str) -> None:
    """The oracle: llama-server dies on SIGABRT (a GGML_ASSERT in load_hparams or the vocab)."""
    extra = {"used-above-experts": [*_ABORTS["used-above-experts"], _tokens(b"a", b"b")],
             "duplicate-token": [_tokens(b"a", b"b", b"a")],
             "nul-token": [_tokens(b"a", b"b", b"a\x00x")]}[case]
    kv = [_u32("llama.context_length", 64), _u32("llama.embedding_length", 32),
          _u32("llama.block_count", 1), _u32("llama.feed_forward_length", 64),
          _u32("llama.attention.head_count", 4),
          ("llama.attention.layer_norm_rms_epsilon", _F32, struct.pack("<f", 1e-5)),
          ("tokenizer.ggml.model", _STR, _s("gpt2")),
          ("tokenizer.ggml.merges", _ARR, _arr(_STR, [_s("a b")])), *extra]
    path = tmp_path / "m" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(_gguf(kv))
    _blocked(scan_tree(path.parent, options=FAST), check_id)
    env = {**os.environ, "LD_LIBRARY_PATH": str(llama_server_bin.parent)}
    proc = subprocess.run([str(llama_server_bin), "-m", str(path), "--host", "127.0.0.1",
                           "--port", "1", "-c", "64", "--offline"], capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert proc.returncode < 0 and "GGML_ASSERT" in proc.stdout + proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(("toks", "bad"), [
    ([b"a", b"b", b"a"], True),
    ([b"", b"[EMPTY_0]"], True),      # llama-vocab names an empty text [EMPTY_<id>]
    ([b"a", b"", b"b", b""], False),
    ([f"t{i}".encode() for i in range(5000)], False),
])
def test_duplicate_token_texts(scan_one: Scan, toks: list[bytes], bad: bool) -> None:
    rep = scan_one("model.gguf", _gguf([_tokens(*toks)]))
    if bad:
        _blocked(rep, "gguf.duplicate")
    else:
        assert _clean(rep), _msgs(rep)


def _string_array(texts: list[bytes]) -> StringArray:
    offsets, parts, at = array("I"), [], 0
    for t in texts:
        offsets.append(at)
        parts.append(struct.pack("<Q", len(t)) + t)
        at += 8 + len(t)
    return StringArray(b"".join(parts), offsets)


@pytest.mark.parametrize("n", [2, _CHUNK, _CHUNK + 1, 2 * _CHUNK + 7])
def test_duplicate_tokens_across_chunks(n: int) -> None:
    """The count and the example hold whatever chunk the repeats fall in, the last texts and
    empty texts (read as [EMPTY_<id>]) included; a vocabulary without repeats reports none."""
    texts = [f"t{i}".encode() for i in range(n)]
    assert _duplicate_tokens(_string_array(texts)) == (0, "")
    texts[-1] = texts[0]
    assert _duplicate_tokens(_string_array(texts)) == (1, "t0")
    texts[-1] = b""
    texts[0] = b"[EMPTY_%d]" % (n - 1)
    assert _duplicate_tokens(_string_array(texts)) == (1, f"[EMPTY_{n - 1}]")
    assert _duplicate_tokens(_string_array([b"x"] * n)) == (n - 1, "x")


# -- 1. safetensors shapes no loader can allocate ------------------------------------------------
@pytest.mark.parametrize(("shape", "dtype", "bad"), [
    ([2**64 - 1, 0], "F16", True),   # the Rust crate reads an empty tensor; numpy refuses
    ([2**62, 4, 0], "F16", True),
    ([0, 2**63], "U8", True),
    ([1] * 33, "F16", True),         # numpy holds 32 (1.x) or 64 (2.x) dims
    ([1] * 200, "U8", True),
    ([2**40, 0], "F16", False),
    ([0, 4096], "BF16", False),
    ([1] * 8, "F16", False),
])
def test_safetensors_unallocatable_shapes(scan_one: Scan, shape: list[int], dtype: str,
                                          bad: bool) -> None:
    n = 0 if 0 in shape else {"F16": 2, "BF16": 2, "U8": 1}[dtype]
    hdr = {"t": {"dtype": dtype, "shape": shape, "data_offsets": [0, n]}}
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, b"\x00" * n))
    if bad:
        _blocked(rep, "safetensors.tensor-shape")
    else:
        assert _clean(rep), _msgs(rep)


def test_safetensors_unallocatable_findings_are_capped(scan_one: Scan) -> None:
    hdr = {f"t{i}": {"dtype": "U8", "shape": [2**63, 0], "data_offsets": [0, 0]}
           for i in range(300)}
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, b""))
    got = [f for f in rep.findings if f.check_id == "safetensors.tensor-shape"]
    assert rep.blocked and len(got) == 51 and "250 more" in got[-1].message


def test_safetensors_library_zero_size_tensors_pass(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    (tmp_path / "m").mkdir()
    save_file({"a": np.zeros((0, 4096), np.float16), "b": np.zeros((3, 0, 2), np.int64),
               "c": np.ones((2,) * 8, np.float32)}, str(tmp_path / "m" / "model.safetensors"))
    assert _clean(scan_tree(tmp_path / "m", options=FAST))


# -- 5. a vocabulary array of another kind never crashes the check -------------------------------
@pytest.mark.parametrize("kv", [
    [_tokens(b"a"), ("tokenizer.ggml.scores", _F32, struct.pack("<f", 1.0))],
    [_tokens(b"a"), ("tokenizer.ggml.token_type", _I32, struct.pack("<i", 1))],
    [_tokens(b"a", b"b"), ("tokenizer.ggml.scores", _ARR, _arr(_STR, [_s("x")]))],
])
def test_vocab_arrays_of_another_kind(scan_one: Scan, kv: list[tuple[str, int, bytes]]) -> None:
    _blocked(scan_one("model.gguf", _gguf(kv)), "gguf.key-type")
    twin = [_tokens(b"a", b"b"), ("tokenizer.ggml.scores", _ARR, _arr(_F32, [b"\0" * 4] * 2)),
            ("tokenizer.ggml.token_type", _ARR, _arr(_I32, [b"\1\0\0\0"] * 2))]
    assert _clean(scan_one("model.gguf", _gguf(twin)))


# -- no false positive: every dtype the safetensors crate defines --------------------------------
_CRATE_DTYPES = {"BOOL": 1, "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75, "U8": 1, "I8": 1,
                 "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
                 "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "C64": 8,
                 "F64": 8, "I64": 8, "U64": 8}


@pytest.mark.parametrize("dtype", sorted(_CRATE_DTYPES))
def test_every_crate_dtype_passes(scan_one: Scan, dtype: str) -> None:
    n = int(4 * _CRATE_DTYPES[dtype])
    hdr = {"w": {"dtype": dtype, "shape": [4], "data_offsets": [0, n]}}
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, b"\x00" * n))
    assert _clean(rep), _msgs(rep)
    hdr["w"]["dtype"] = dtype.lower()  # the crate's names are case-sensitive
    _blocked(scan_one("model.safetensors", corpus.safetensors_bytes(hdr, b"\x00" * n)),
             "safetensors.unknown-dtype")
