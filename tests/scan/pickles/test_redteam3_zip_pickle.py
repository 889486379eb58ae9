"""Third red-team round of issue 11 (classes 1 and 4) on zip checkpoints and pickles: each class
has its attack, generated here, and the benign twin that must still pass. Nothing here is ever
unpickled; the attacks were checked against torch 2.13 and CPython's C unpickler out of tree.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from specbundle.scan import ScanReport, Severity
from specbundle.scan.pickles.walker import TORCH_ALLOWED, walk_pickle
from tests.lib import corpus
from tests.lib.corpus import _bu, _global
from tests.scan.conftest import ids

Scan = Callable[..., ScanReport]

_MAGIC_OPS = b"\x8a\x0a" + corpus.LEGACY_MAGIC.to_bytes(10, "little") + b"."
_PROTO = b"\x80\x02M\xe9\x03."
_SYS_INFO = b"\x80\x02}q\x00(X\r\x00\x00\x00little_endianq\x01\x88u."
_KEYS_0 = b"\x80\x02]q\x00X\x01\x00\x00\x000q\x01a."
# a harmless call standing for any payload (the walker blocks the global either way)
_EVIL = b"\x80\x02" + _global("builtins", "print") + _bu("PWNED") + b"\x85R."


def _byte_state_dict(n: int) -> bytes:
    """``OrderedDict(w=_rebuild_tensor_v2(<legacy ByteStorage '0' of n>, 0, (n,), (1,), ...))``."""
    return (b"\x80\x02" + _global("collections", "OrderedDict") + b"q\x00)Rq\x01"
            + _bu("w") + _global("torch._utils", "_rebuild_tensor_v2") + b"q\x02("
            + b"(" + _bu("storage") + _global("torch", "ByteStorage") + _bu("0") + _bu("cpu")
            + b"J" + struct.pack("<i", n) + b"NtQ" + b"K\x00" + b"J" + struct.pack("<i", n)
            + b"\x85" + b"K\x01\x85" + b"\x89" + b"h\x00)R" + b"tRs.")


# -- FRAME: a reader that buffers whole frames reads the file otherwise ------------------------
def _legacy_framed(frame_past_stop: bool, n: int = 40_000) -> bytes:
    """A legacy checkpoint whose magic-number pickle is framed.

    The attack's frame runs past its STOP into the storage data: the walker continues after
    the STOP (a benign state dict), CPython's C unpickler reads the whole frame with one
    ``read`` and torch.load's next ``pickle.load`` starts at the frame's end, inside the byte
    storage, where a second set of pickles waits (torch 2.13, weights_only=False: it runs).
    The twin frames the magic pickle as a pickler does: the frame ends right after STOP.
    """
    hidden = _PROTO + _SYS_INFO + _EVIL + _KEYS_0
    store = b"\x00" * (n - len(hidden)) + hidden
    rest = _PROTO + _SYS_INFO + _byte_state_dict(n) + _KEYS_0 + struct.pack("<q", n)
    length = len(_MAGIC_OPS) + (len(rest) + n - len(hidden) if frame_past_stop else 0)
    return b"\x80\x02\x95" + struct.pack("<Q", length) + _MAGIC_OPS + rest + store


def _straddling(straddle: bool) -> bytes:
    """A raw pickle (torch.load unpickles it for the magic number) with one large frame.

    The attack ends the frame two bytes into a BININT's argument: the walker reads on linearly
    (the rest of the int, then a bytes literal holding the call), the C unpickler drops the
    frame's last two bytes, takes the int from after the frame and runs the call (checked with
    CPython 3.11's ``pickle.load``: it prints). The twin's frame ends between opcodes.
    """
    call = _global("builtins", "print") + _bu("PWNED") + b"\x85R0"
    filler = b"N0" * 10_000
    if not straddle:
        body = filler + b"J\x01\x02\x03\x04" + b"C" + bytes([len(call)]) + call + b"0K\x07."
        return b"\x80\x02\x95" + struct.pack("<Q", len(body)) + body
    body = filler + b"J\x01\x02"
    return (b"\x80\x02\x95" + struct.pack("<Q", len(body)) + body + b"\x03\x04"
            + b"C" + bytes([len(call)]) + call + b"0K\x07.")


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt"])
def test_legacy_frame_running_past_stop_is_refused(scan_one: Scan, name: str) -> None:
    rep = scan_one(name, _legacy_framed(True), allow_pickle=True)
    assert rep.blocked
    assert "pickle.malformed" in ids(rep, Severity.CRITICAL)
    assert any("past STOP" in f.message for f in rep.findings)


def test_legacy_frame_ending_at_stop_passes(scan_one: Scan) -> None:
    rep = scan_one("pytorch_model.bin", _legacy_framed(False), allow_pickle=True)
    assert ids(rep) == set() and not rep.blocked, [f.message for f in rep.findings]


def test_opcode_crossing_a_frame_end_is_refused(scan_one: Scan) -> None:
    rep = scan_one("pytorch_model.bin", _straddling(True), allow_pickle=True)
    assert "pickle.malformed" in ids(rep, Severity.CRITICAL)
    assert any("crosses the end of the frame" in f.message for f in rep.findings)


def test_frame_ending_between_opcodes_passes(scan_one: Scan) -> None:
    rep = scan_one("pytorch_model.bin", _straddling(False), allow_pickle=True)
    assert not rep.blocked, [f.message for f in rep.findings]


@pytest.mark.parametrize(("data", "why"), [
    # a frame opened inside another (the pure-Python unpickler refuses it, C reads past)
    (b"\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00\x95\x02\x00\x00\x00\x00\x00\x00\x00K\x01"
     b".", "inside another frame"),
    (b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01.NN", "past STOP"),
])
def test_frame_shapes_no_pickler_writes_are_refused(data: bytes, why: str) -> None:
    walk = walk_pickle(io.BytesIO(data), TORCH_ALLOWED, max_bytes=1 << 20)
    assert walk.blocked and any(why in p.message for p in walk.reader_problems)


def test_frames_as_picklers_write_them_pass() -> None:
    import pickle

    for obj in ({f"k{i}": [i] * 50 for i in range(3000)}, "s" * 200_000, list(range(70_000))):
        for proto in (4, 5):
            data = pickle.dumps(obj, protocol=proto)
            walk = walk_pickle(io.BytesIO(data), TORCH_ALLOWED, max_bytes=1 << 24)
            assert walk.complete and not walk.reader_problems, (proto, walk.reader_problems)


# -- zip extra fields that rename a member for some readers -------------------------------------
def _zip_with_extra(path: Path, extra: bytes, member: str = "archive/data/1",
                    data: bytes = _EVIL) -> bytes:
    """A torch zip plus one member whose local and central headers carry ``extra``."""
    corpus.torch_zip(path, storages=("0",))
    with zipfile.ZipFile(path, "a") as zf:
        zi = zipfile.ZipInfo(member)
        zi.extra = extra
        zf.writestr(zi, data)
    return path.read_bytes()


def _unicode_path(raw: str, name: str) -> bytes:
    body = struct.pack("<BI", 1, zlib.crc32(raw.encode())) + name.encode()
    return struct.pack("<HH", 0x7075, len(body)) + body


def test_unicode_path_extra_field_is_refused(scan_one: Scan, tmp_path: Path) -> None:
    """Python >= 3.12's zipfile names the member by its Info-ZIP Unicode Path field (the CRC
    of the raw name matches): there ``archive/data/1`` is a second ``archive/data.pkl`` and
    ``zf.read('archive/data.pkl')`` returns the payload; 3.11 and miniz see the raw name."""
    data = _zip_with_extra(tmp_path / "z.bin", _unicode_path("archive/data/1",
                                                             "archive/data.pkl"))
    rep = scan_one("pytorch_model.bin", data, allow_pickle=True)
    assert "pickle.zip-malformed" in ids(rep, Severity.CRITICAL)


@pytest.mark.parametrize("extra", [
    struct.pack("<HH", 0x5455, 5) + b"\x01\x00\x00\x00\x00" * 1,  # Info-ZIP "UT" timestamp
    struct.pack("<HHQ", 0x000A, 8, 0),  # an NTFS-style field: ignored by every reader
])
def test_zip_with_harmless_extra_fields_passes(scan_one: Scan, tmp_path: Path,
                                               extra: bytes) -> None:
    data = _zip_with_extra(tmp_path / "z.bin", extra, "archive/.format_version", b"1")
    rep = scan_one("pytorch_model.bin", data, allow_pickle=True)
    assert ids(rep) == set() and not rep.blocked, [f.message for f in rep.findings]


@pytest.mark.parametrize("extra", [
    struct.pack("<HHI", 0x5455, 4, 0) * 2,  # one tag twice: first or last, reader-dependent
    struct.pack("<HHI", 0x5455, 4, 0) + b"\x00\x00",  # bytes after the last field
])
def test_malformed_extra_block_is_refused(scan_one: Scan, tmp_path: Path, extra: bytes) -> None:
    data = _zip_with_extra(tmp_path / "z.bin", extra, "archive/.format_version", b"1")
    rep = scan_one("pytorch_model.bin", data, allow_pickle=True)
    assert "pickle.zip-malformed" in ids(rep, Severity.CRITICAL)


# -- data.pkl is one pickle ----------------------------------------------------------------------
def test_bytes_after_data_pkl_stop_are_refused(scan_one: Scan, tmp_path: Path) -> None:
    corpus.torch_zip(tmp_path / "z.bin", corpus._state_dict() + _EVIL)
    rep = scan_one("pytorch_model.bin", (tmp_path / "z.bin").read_bytes(), allow_pickle=True)
    assert "pickle.trailing-data" in ids(rep, Severity.HIGH) and rep.blocked


def test_data_pkl_ending_at_its_stop_passes(scan_one: Scan, tmp_path: Path) -> None:
    corpus.torch_zip(tmp_path / "z.bin", corpus._state_dict())
    rep = scan_one("pytorch_model.bin", (tmp_path / "z.bin").read_bytes(), allow_pickle=True)
    assert ids(rep) == set() and not rep.blocked


# -- protocol-0 INT: the C unpickler's strtol reads a leading zero as octal ----------------------
@pytest.mark.parametrize("line", [b"010", b"-010", b"0777", b" 010"])
def test_int_the_c_unpickler_reads_in_another_base_is_refused(scan_one: Scan,
                                                              line: bytes) -> None:
    """``I010`` is 8 to ``pickle.load`` and 10 to genops: a storage size, offset or shape the
    walker checks would not be the one torch uses."""
    rep = scan_one("x.pkl", b"(I" + line + b"\nI1\nt.", allow_pickle=True)
    assert "pickle.malformed" in ids(rep, Severity.CRITICAL)


@pytest.mark.parametrize("line", [b"10", b"0", b"00", b"01", b"-1", b"-01"])
def test_int_read_alike_by_every_unpickler_passes(scan_one: Scan, line: bytes) -> None:
    rep = scan_one("x.pkl", b"(I" + line + b"\nI1\nt.", allow_pickle=True)
    assert not rep.blocked, [f.message for f in rep.findings]


_CALL_AFTER = b"0cbuiltins\nprint\n(S'PWNED'\ntR."


@pytest.mark.parametrize("name", ["notes.txt", "weights", "x.pkl", "pytorch_model.bin"])
@pytest.mark.parametrize("first", [b"I0x1\n", b"I0o7\n", b"S'\xc3\xa9'\n", b"I1\x00junk\n",
                                   b"F1.5\x00x\n", b"L5\x00x\n", b"Vx\np1\x00z\n"])
def test_text_pickle_behind_an_argument_only_genops_refuses_is_a_pickle(
        scan_one: Scan, name: str, first: bytes) -> None:
    """``I0x1`` (strtol base 0), a number cut by a NUL and a UTF-8 ``STRING`` (torch.load
    unpickles with ``encoding="utf-8"``) break genops at once, so the file looked like data;
    torch.load(weights_only=False) reads on and runs the call after it (checked on torch 2.13):
    the file is a pickle, walked and blocked."""
    rep = scan_one(name, first + _CALL_AFTER, allow_pickle=True)
    assert "pickle.global-not-allowed" in ids(rep, Severity.CRITICAL)
    assert "pickle.malformed" in ids(rep, Severity.CRITICAL)


def test_text_with_hex_numbers_stays_text(scan_one: Scan) -> None:
    rep = scan_one("notes.txt", b"I0x1\nS'\xc3\xa9'\nvalues are 0x10 and 0o7\n")
    assert not rep.blocked, [f.message for f in rep.findings]
