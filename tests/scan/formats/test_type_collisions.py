"""A safetensors length can spell another format's magic: the type comes from the structure
that parses, and bytes that parse as both are a polyglot, refused under any name."""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from specbundle.scan import ScanReport, Severity, scan_tree
from specbundle.scan.sniff import FileKind, sniff, sniff_bytes
from specbundle.synth import make_eagle3_head
from specbundle.synth.weights import Shape
from tests.lib import corpus
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]
_BLOCKING = ("files.", "pickle.", "safetensors.")


def _header(first_key: str = "w") -> bytes:
    hdr, _ = corpus.f16_header((first_key, (2,)))
    return json.dumps({first_key: hdr[first_key], "__metadata__": {"format": "pt"}}).encode()


def _sized(n: int) -> bytes:
    """A valid safetensors file whose header is exactly ``n`` bytes (spaces pad it)."""
    return struct.pack("<Q", n) + _header().ljust(n, b" ") + b"\x00" * 4


def _loads_as_safetensors(path: Path) -> bool:
    with safe_open(str(path), framework="numpy") as f:
        return bool(np.array_equal(f.get_tensor("w"), np.zeros(2, np.float16)))


@pytest.mark.parametrize("n", [0x280, 0x380, 0x480, 0x580,   # pickle PROTO 2..5
                               0x5A4D,                       # "MZ"
                               0x2123,                       # "#!" with no interpreter
                               0x088B1F,                     # gzip, deflate method
                               0x2E4E])                      # "N.": a pickle of None
def test_a_length_that_spells_a_magic_is_still_safetensors(scan_one: Scan, tmp_path: Path,
                                                           n: int) -> None:
    data = _sized(n)
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    assert _loads_as_safetensors(path)
    assert sniff(path) is FileKind.SAFETENSORS
    rep = scan_one("model.safetensors", data)
    assert [f.check_id for f in rep.findings if f.check_id.startswith(_BLOCKING)] == []


def test_the_generators_eagle3_head_scans_clean(tmp_path: Path) -> None:
    head = make_eagle3_head(tmp_path / "head", Shape())  # the defaults: a 0x580-byte header
    st = (head / "model.safetensors").read_bytes()
    assert st[:2] == b"\x80\x05"
    assert sniff(head / "model.safetensors") is FileKind.SAFETENSORS
    rep = scan_tree(head, options=FAST)
    assert ids(rep, Severity.LOW) == set()


def _binbytes_polyglot() -> bytes:
    """BINBYTES whose 4-byte length is the low bytes of the safetensors length, whose data
    runs into the JSON, and a STOP that is the first character of a tensor name."""
    hdr = _header(".w")
    n = 0x42 + (5 << 8)  # "B", length 5: the data is bytes 5..9, STOP at byte 10
    data = struct.pack("<Q", n) + hdr.ljust(n, b" ") + b"\x00" * 4
    assert data[:1] == b"B" and data[10:11] == b"."
    return data


def _proto_polyglot() -> bytes:
    """PROTO 2, BINBYTES of 3 bytes over the end of the length, STOP in the JSON."""
    raw = b"\x80\x02\x42\x03\x00\x00\x00\x00"
    (n,) = struct.unpack("<Q", raw)
    return raw + _header(".w").ljust(n, b" ") + b"\x00" * 4


@pytest.mark.parametrize("make", [_binbytes_polyglot, _proto_polyglot])
@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model.bin"])
def test_a_pickle_that_is_also_safetensors_is_refused(scan_one: Scan, tmp_path: Path,
                                                      make: Callable[[], bytes],
                                                      name: str) -> None:
    data = make()
    path = tmp_path / "polyglot"
    path.write_bytes(data)
    assert pickle.loads(data).endswith(b'\x00{"')  # the pickle reading: bytes, then STOP
    with safe_open(str(path), framework="numpy") as f:  # and the safetensors reading holds
        assert list(f.keys()) == [".w"]
    assert sniff(path) is FileKind.POLYGLOT
    rep = scan_one(name, data, allow_pickle=True)
    assert "files.polyglot" in ids(rep, Severity.CRITICAL)


def test_its_twin_with_a_broken_pickle_is_safetensors(scan_one: Scan) -> None:
    data = bytearray(_binbytes_polyglot())
    data[10:11] = b"w"  # no opcode: the pickle breaks where the polyglot had STOP
    assert sniff_bytes(bytes(data), len(data)) is FileKind.SAFETENSORS
    rep = scan_one("model.safetensors", bytes(data))
    assert "files.polyglot" not in ids(rep, Severity.INFO)


def test_a_script_that_is_also_safetensors_is_refused(scan_one: Scan) -> None:
    raw = b"#!/\x00\x00\x00\x00\x00"  # an interpreter name, "/"
    (n,) = struct.unpack("<Q", raw)
    data = raw + _header().ljust(n, b" ") + b"\x00" * 4
    assert sniff_bytes(data[:4096], len(data)) is FileKind.SCRIPT  # the head alone: the magic
    rep = scan_one("model.safetensors", data)
    assert "files.polyglot" in ids(rep, Severity.CRITICAL)


def test_a_magic_whose_safetensors_reading_fails_keeps_its_kind() -> None:
    broken = b"\x80\x02\x00\x00\x00\x00\x00\x00{ not json" + b" " * 0x276
    assert sniff_bytes(broken, len(broken)) is FileKind.PICKLE
    assert sniff_bytes(b"MZ" + b"\x00" * 100, 102) is FileKind.PE
