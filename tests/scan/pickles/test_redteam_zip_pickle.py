"""Red-team classes of issue 11 for zip checkpoints and pickles: each fix has its attack and the
benign twin that must still pass. Nothing here is ever unpickled; archives are built by hand.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from specbundle.scan import ScanReport, Severity, scan_tree
from specbundle.scan.pickles.walker import looks_like_pickle
from specbundle.scan.pickles.zipwalk import ZipAmbiguity, verify_crcs, walk_zip
from specbundle.scan.sniff import FileKind, sniff_bytes
from tests.lib import corpus
from tests.scan import zipcraft
from tests.scan.conftest import FAST, ids

Scan = Callable[..., ScanReport]
_EVIL = corpus.reduce_pickle("posix", "system")
_SD = corpus._state_dict()
_MAGIC = b"\x80\x02\x8a\x0a" + corpus.LEGACY_MAGIC.to_bytes(10, "little") + b"."
_PROTO = b"\x80\x02M\xe9\x03."
_SYS_INFO = b"\x80\x02}q\x00(X\r\x00\x00\x00little_endianq\x01\x88u."


def _legacy(keys: bytes, data: bytes) -> bytes:
    """A legacy torch.save file around the one-tensor state dict (storage '0': 4 floats)."""
    return _MAGIC + _PROTO + _SYS_INFO + _SD + keys + data


_KEYS_0 = b"\x80\x02]q\x00X\x01\x00\x00\x000q\x01a."
_DATA_0 = (4).to_bytes(8, "little") + b"\x00" * 16  # element count, then 4 float32


# -- zips are walked whatever their name ---------------------------------------------------------
@pytest.mark.parametrize("name", ["model.PT", "pytorch_model.BIN", "weights.zip"])
@pytest.mark.parametrize("allow", [True, False])
def test_zip_checkpoint_is_walked_whatever_its_suffix(tmp_path: Path, name: str,
                                                      allow: bool) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.torch_zip(d / name, _EVIL, storages=())
    rep = scan_tree(d, allow_pickle=allow, options=FAST)
    assert rep.blocked
    assert "pickle.global-not-allowed" in ids(rep, Severity.CRITICAL)
    assert allow or "pickle.not-allowed" in ids(rep)


def test_benign_zip_with_upper_case_suffix_passes(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.torch_zip(d / "model.PT")
    rep = scan_tree(d, allow_pickle=True, options=FAST)
    assert ids(rep) == set() and not rep.blocked


# -- broken text pickles that call before they break ---------------------------------------------
# STACK_GLOBAL needs no PROTO; a BINPUT whose index is a UTF-8 lead byte makes the opcode bytes
# valid UTF-8 (q\xc2\x93 is U+0093), so the file reads as text.
_SG_TEXT = b"Vos\nVsystem\nq\xc2\x93Vid\nq\xc3\x85R"


@pytest.mark.parametrize(("name", "data"), [
    ("notes.txt", _SG_TEXT + b"!not a pickle from here on\n"),
    ("README.md", _SG_TEXT),
    ("notes.txt", b"(S'id'\nios\nsystem\n!broken"),  # INST resolves and calls in one opcode
    ("notes.txt", b"cos\nsystem\n(]e!broken"),  # APPENDS calls the global's extend
])
def test_text_pickle_that_calls_before_breaking_is_a_pickle(scan_one: Scan, name: str,
                                                            data: bytes) -> None:
    data.decode("utf-8")  # really text
    assert sniff_bytes(data, len(data)) is FileKind.PICKLE
    rep = scan_one(name, data)
    assert rep.blocked
    assert {"files.magic-mismatch", "pickle.global-not-allowed"} <= ids(rep)


@pytest.mark.parametrize("data", [
    b"cat\ndog\nbird\n",  # GLOBAL then BUILD: one item on the stack, nothing is called
    b"cat\ndog\n",
    b"(a list of things\n",
    b"Please read\nthis\n",
])
def test_text_that_parses_a_few_opcodes_stays_text(scan_one: Scan, data: bytes) -> None:
    assert sniff_bytes(data, len(data)) is FileKind.TEXT
    assert ids(scan_one("notes.txt", data)) == set()


def test_stream_still_parsing_at_the_sniff_budget_is_a_pickle() -> None:
    data = b"S'" + b"a" * 5000 + b"'\n0cos\nsystem\n(S'id'\ntR."
    assert looks_like_pickle(io.BytesIO(data), max_bytes=1000)
    assert not looks_like_pickle(io.BytesIO(b"hello " * 1000), max_bytes=1000)


# -- legacy checkpoints: a tar reading, and bytes behind the storages ---------------------------
def _tar_polyglot() -> bytes:
    """Legacy pickles whose first 512 bytes are also a valid tar header: torch.load takes the
    tar branch and unpickles its 'storages' member; the scanner walked the legacy pickles."""
    members = io.BytesIO()
    with tarfile.open(fileobj=members, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for n in ("storages", "tensors", "pickle"):
            info = tarfile.TarInfo(n)
            info.size = len(_EVIL)
            t.addfile(info, io.BytesIO(_EVIL))
    pre = _MAGIC + _PROTO + b"\x80\x02X"
    pre += struct.pack("<I", 512 - len(pre) - 4)  # sys_info: a string over the tar header
    tail = b"." + _SD + b"\x80\x02]q\x00."
    hdr = bytearray(members.getvalue()[:512])
    hdr[:len(pre)] = pre
    hdr[len(pre):100] = b"A" * (100 - len(pre))
    hdr[124:136] = b"%011o\x00" % len(tail)  # the first member's data is the pickles' tail
    hdr[148:156] = b" " * 8
    hdr[148:156] = b"%06o\x00 " % sum(hdr)
    return bytes(hdr) + tail + b"\x00" * (-len(tail) % 512) + members.getvalue()


def test_legacy_pickle_that_is_also_a_tar_is_refused(scan_one: Scan) -> None:
    data = _tar_polyglot()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as t:  # the reading torch takes
        assert "storages" in t.getnames()
    rep = scan_one("pytorch_model.bin", data, allow_pickle=True)
    assert "pickle.tar-ambiguous" in ids(rep, Severity.CRITICAL)


@pytest.mark.parametrize("tail", [b"\x7fELF\x02\x01\x01" + b"\x00" * 60, b"A",
                                  b"PK\x05\x06" + b"\x00" * 18])
def test_bytes_after_legacy_storages_are_refused(scan_one: Scan, tail: bytes) -> None:
    rep = scan_one("pytorch_model.bin", _legacy(_KEYS_0, _DATA_0 + tail), allow_pickle=True)
    assert "pickle.trailing-data" in ids(rep, Severity.HIGH)


def test_bytes_after_keyless_legacy_pickles_are_bounded(scan_one: Scan) -> None:
    keyless = corpus.legacy_checkpoint(_SD)  # no key listed: torch reads no storage data
    rep = scan_one("pytorch_model.bin", keyless + b"\x7fELF" + b"\x00" * 60, allow_pickle=True)
    assert "pickle.trailing-data" in ids(rep, Severity.HIGH)
    assert ids(scan_one("pytorch_model.bin", keyless, allow_pickle=True)) == set()


@pytest.mark.parametrize(("keys", "data"), [
    (b"\x80\x02]q\x00X\x01\x00\x00\x001q\x01a.", _DATA_0),  # key of no storage
    (_KEYS_0, (5).to_bytes(8, "little") + b"\x00" * 20),  # element count disagrees
    (_KEYS_0, (4).to_bytes(8, "little") + b"\x00" * 8),  # storage cut short
    (b"\x80\x02h\x00.", _DATA_0),  # not a plain list of strings
])
def test_legacy_storage_data_must_follow_the_keys(scan_one: Scan, keys: bytes,
                                                  data: bytes) -> None:
    rep = scan_one("pytorch_model.bin", _legacy(keys, data), allow_pickle=True)
    assert rep.blocked


def test_legacy_checkpoint_laid_out_as_torch_writes_it_passes(scan_one: Scan) -> None:
    rep = scan_one("pytorch_model.bin", _legacy(_KEYS_0, _DATA_0), allow_pickle=True)
    assert ids(rep) == set() and not rep.blocked


# -- zip structure: readings miniz and zipfile do not share -------------------------------------
def _members(**knobs: object) -> list[zipcraft.Member]:
    ms = zipcraft.torch_members(_SD)
    for k, v in knobs.items():
        setattr(ms[0], k, v)
    return ms


_AMBIGUOUS_ZIPS = {
    # miniz takes the DOS directory bit for a directory and extracts nothing into torch's buffer
    "dos-directory-bit": (_members(ext_attr=0x10), None),
    # zipfile reads the zip64 record 56 bytes before the locator, miniz where the locator says
    "zip64-extensible-data": (_members(), zipcraft.Layout(zip64=True,
                                                          zip64_extensible=b"\x00" * 16)),
    "disk-0xffff": (_members(disk=0xFFFF), None),  # miniz refuses, zipfile ignores
    "backslash-name": ([*_members(), zipcraft.Member("archive\\data.pkl", _EVIL)], None),
    "local-zip64-lies": (_members(local_extra=struct.pack("<HHQQ", 1, 16, 3, 3)), None),
}


@pytest.mark.parametrize("case", sorted(_AMBIGUOUS_ZIPS))
def test_zip_read_two_ways_is_refused(scan_one: Scan, case: str) -> None:
    members, layout = _AMBIGUOUS_ZIPS[case]
    rep = scan_one("pytorch_model.bin", zipcraft.build(members, layout), allow_pickle=True)
    assert "pickle.zip-malformed" in ids(rep, Severity.CRITICAL), [f.message for f in
                                                                   rep.findings]


def test_zip_with_consistent_local_zip64_field_passes(scan_one: Scan) -> None:
    extra = struct.pack("<HHQQ", 1, 16, len(_SD), len(_SD))
    rep = scan_one("pytorch_model.bin", zipcraft.build(_members(local_extra=extra)),
                   allow_pickle=True)
    assert ids(rep) == set()


def test_crc_walk_inflates_in_bounded_chunks(tmp_path: Path) -> None:
    """A member inflating to many chunks (and a bomb's worth of output per input chunk) is
    verified chunk by chunk: nothing is lost between the output cap and the next read."""
    path = tmp_path / "z.bin"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data/0", b"\x00" * 3_000_000)
        zf.writestr("archive/data/1", bytes(range(256)) * 4000)
    archive = walk_zip(path)
    for chunk in (1 << 10, 1 << 16, 1 << 20):
        verify_crcs(path, archive, chunk=chunk)


def test_crc_walk_still_refuses_a_wrong_crc_in_chunks(tmp_path: Path) -> None:
    data = b"\x00" * 100_000
    members = [zipcraft.Member("archive/data/0", data, method=8)]
    raw = bytearray(zipcraft.build(members))
    cd = raw.rfind(b"PK\x01\x02")
    raw[cd + 16:cd + 20] = struct.pack("<I", zlib.crc32(data) ^ 1)
    lh = raw.find(b"PK\x03\x04")
    raw[lh + 14:lh + 18] = struct.pack("<I", zlib.crc32(data) ^ 1)
    path = tmp_path / "z.bin"
    path.write_bytes(bytes(raw))
    with pytest.raises(ZipAmbiguity, match="CRC"):
        verify_crcs(path, walk_zip(path), chunk=1 << 10)


# -- numpy -----------------------------------------------------------------------------------------
def test_npy_of_a_version_numpy_does_not_read_is_malformed(scan_one: Scan) -> None:
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }"
    header += b" " * (-(12 + len(header) + 1) % 64) + b"\n"
    data = b"\x93NUMPY\x09\x00" + struct.pack("<I", len(header)) + header + b"\x00" * 4
    assert "pickle.malformed" in ids(scan_one("x.npy", data, allow_pickle=True))


def test_bytes_after_an_object_npy_pickle_are_reported(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    corpus.npy_object(d / "x.npy", b"\x80\x02N." + b"\x7fELF")
    assert "pickle.trailing-data" in ids(scan_tree(d, allow_pickle=True, options=FAST))


def test_zip_laid_out_as_torch_writes_it_passes_and_its_evil_twin_blocks(scan_one: Scan,
                                                                        tmp_path: Path) -> None:
    """miniz's own layout (descriptors, FB padding, zip64 records) is the benign reference: the
    hardening above must not refuse it, and the same layout around a payload is blocked."""
    members = [zipcraft.Member("pytorch_model/data.pkl", _SD),
               zipcraft.Member("pytorch_model/byteorder", b"little"),
               zipcraft.Member("pytorch_model/data/0", b"\x00" * 16),
               zipcraft.Member("pytorch_model/version", b"3\n"),
               zipcraft.Member("pytorch_model/.data/serialization_id", b"1234567890")]
    data = zipcraft.torch_writer_layout(members)
    (tmp_path / "probe.zip").write_bytes(data)
    with zipfile.ZipFile(tmp_path / "probe.zip") as zf:
        assert zf.read("pytorch_model/data.pkl") == _SD and zf.testzip() is None
    assert ids(scan_one("pytorch_model.bin", data, allow_pickle=True)) == set()
    members[0] = zipcraft.Member("pytorch_model/data.pkl", _EVIL)
    rep = scan_one("pytorch_model.bin", zipcraft.torch_writer_layout(members), allow_pickle=True)
    assert "pickle.global-not-allowed" in ids(rep, Severity.CRITICAL)
