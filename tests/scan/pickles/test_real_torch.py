"""The scanner against real torch.save output, and the zip ambiguities torch itself was seen to
read differently from zipfile.

The fixtures in data/torch/ were written by torch 2.13.0 (data/torch/make_fixtures.py); these
tests need no torch. The hand-built archives below are the classes that torch.load
(weights_only=False, torch 2.13.0) was run on with a harmless ``builtins.print`` payload where
zipfile reads the benign pickle: each note says what torch did.
"""

from __future__ import annotations

import shutil
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from specbundle.scan import ScanReport, Severity, scan_tree
from tests.lib import corpus
from tests.scan import zipcraft
from tests.scan.conftest import FAST, ids

DATA = Path(__file__).parent.parent / "data" / "torch"
CLEAN = sorted(p.name for p in DATA.iterdir()
               if p.suffix in (".pt", ".bin") and p.name not in ("whole_module.pt",
                                                                 "uint16_legacy.pt"))
ZIPS = [n for n in CLEAN if zipfile.is_zipfile(DATA / n)]


def _scan(tmp_path: Path, name: str, data: bytes, *, allow: bool = True) -> ScanReport:
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes(data)
    return scan_tree(d, allow_pickle=allow, options=FAST)


def _members(name: str) -> list[zipcraft.Member]:
    with zipfile.ZipFile(DATA / name) as zf:
        return [zipcraft.Member(i.filename, zf.read(i)) for i in zf.infolist()]


# -- real torch.save output passes where pickles are allowed -----------------------------------
def test_fixtures_are_what_the_tests_expect() -> None:
    assert len(CLEAN) >= 14 and len(ZIPS) >= 9
    assert all((DATA / n).stat().st_size < 20_000 for n in CLEAN)


@pytest.mark.parametrize("name", CLEAN)
def test_real_checkpoint_scans_clean_where_pickles_are_allowed(tmp_path: Path,
                                                               name: str) -> None:
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(DATA / name, d / name)
    rep = scan_tree(d, allow_pickle=True, options=FAST)
    assert ids(rep) == set(), [(f.check_id, f.message) for f in rep.findings]
    assert not rep.blocked
    assert "pickle.allowed" in ids(rep, Severity.INFO)


@pytest.mark.parametrize("name", CLEAN)
def test_real_checkpoint_is_blocked_where_pickles_are_not(tmp_path: Path, name: str) -> None:
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(DATA / name, d / name)
    rep = scan_tree(d, allow_pickle=False, options=FAST)
    assert rep.blocked and ids(rep) == {"pickle.not-allowed"}


@pytest.mark.parametrize(("name", "check"), [
    ("whole_module.pt", "pickle.global-not-allowed"),  # a pickled nn.Linear: its class
    # legacy format with torch.storage.UntypedStorage: torch's legacy loader fails on it
    ("uint16_legacy.pt", "pickle.persistent-id"),
])
def test_real_checkpoint_that_must_not_pass(tmp_path: Path, name: str, check: str) -> None:
    rep = _scan(tmp_path, name, (DATA / name).read_bytes())
    assert rep.blocked and check in ids(rep, Severity.CRITICAL)


@pytest.mark.parametrize("name", ZIPS)
def test_hand_built_torch_layout_is_byte_for_byte_torchs(name: str) -> None:
    """zipcraft.torch_writer_layout (the benign reference of the red-team tests) is exactly
    what torch 2.13 writes: descriptors, FB padding, empty members, zip64 end records."""
    assert zipcraft.torch_writer_layout(_members(name)) == (DATA / name).read_bytes()


def test_real_checkpoint_re_laid_out_passes(tmp_path: Path) -> None:
    """The same members in zipfile's plain layout (no descriptors, no padding) still pass."""
    data = zipcraft.build(_members("eagle_bf16.pt"))
    assert ids(_scan(tmp_path, "eagle_bf16.pt", data)) == set()


# -- storages: torch.load(mmap=True) reads declared bytes from where the data starts ------------
def _tamper_storage(name: str, *, method: int = 0, extra: bytes = b"") -> bytes:
    ms = _members(name)
    st = next(m for m in ms if "/data/" in m.name and m.data)
    st.data += extra
    st.method = method
    return zipcraft.build(ms)


@pytest.mark.parametrize(("method", "extra", "why"), [
    # torch 2.13: default load inflates it; mmap=True reads the deflate stream as the weights
    (8, b"", "compressed"),
    # torch 2.13: default load raises on the size; mmap=True reads the declared bytes only
    (0, b"\x00" * 8, "holds"),
])
def test_storage_read_two_ways_by_torch_is_refused(tmp_path: Path, method: int, extra: bytes,
                                                   why: str) -> None:
    rep = _scan(tmp_path, "eagle_bf16.pt", _tamper_storage("eagle_bf16.pt", method=method,
                                                           extra=extra))
    assert rep.blocked
    assert any(f.check_id == "pickle.zip-storage" and why in f.message and
               f.severity.rank >= Severity.HIGH.rank for f in rep.findings)


def test_short_storage_is_refused(tmp_path: Path) -> None:
    ms = _members("views.pt")
    st = next(m for m in ms if m.name.endswith("/data/0"))
    st.data = st.data[:-4]  # torch mmap=True reads on into the next member's header
    assert "pickle.zip-storage" in ids(_scan(tmp_path, "views.pt", zipcraft.build(ms)),
                                       Severity.HIGH)


# -- zip classes torch 2.13 was run on ------------------------------------------------------------
_BENIGN = corpus._state_dict()


def _payload(length: int) -> bytes:
    """``builtins.print('MARKER')`` padded (a popped string) to ``length`` bytes."""
    core = b"cbuiltins\nprint\nq\x00X\x06\x00\x00\x00MARKER\x85R."
    pad = length - 2 - len(core) - 6
    return b"\x80\x02X" + struct.pack("<I", pad) + b"p" * pad + b"0" + core


_EVIL = _payload(len(_BENIGN))
_REST = [("archive/byteorder", b"little"), ("archive/data/0", b"\x00" * 16),
         ("archive/version", b"3\n")]


def _raw(locals_: list[tuple[str, bytes]], cds: list[list[int]], *, eocd_cd: int = 0,
         z64_cd: int | None = None, z64_ext: bytes = b"", count: int | None = None) -> bytes:
    """Stored members, then central directories (lists of member indices); the classic end
    record names ``cds[eocd_cd]`` (with ``count`` entries), a zip64 one ``cds[z64_cd]``."""
    out, offs = bytearray(), []
    for name, data in locals_:
        offs.append(len(out))
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, zlib.crc32(data),
                           len(data), len(data), len(name), 0) + name.encode() + data
    pos, size = [], []
    for cd in cds:
        pos.append(len(out))
        for i in cd:
            name, data = locals_[i]
            out += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0,
                               zlib.crc32(data), len(data), len(data), len(name), 0, 0, 0, 0,
                               0, offs[i]) + name.encode()
        size.append(len(out) - pos[-1])
    if z64_cd is not None:
        rec, n = len(out), len(cds[z64_cd])
        out += struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44 + len(z64_ext), 45, 45, 0, 0, n,
                           n, size[z64_cd], pos[z64_cd]) + z64_ext
        out += struct.pack("<4sIQI", b"PK\x06\x07", 0, rec, 1)
    n = len(cds[eocd_cd]) if count is None else count
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, size[eocd_cd], pos[eocd_cd], 0)
    return bytes(out)


_TWO = [("archive/data.pkl", _BENIGN), *_REST, ("archive/data.pkl", _EVIL)]
_TWO_CASE = [("archive/data.pkl", _BENIGN), *_REST, ("archive/DATA.pkl", _EVIL)]

# case -> (archive, what torch 2.13 read; zipfile read the benign pickle or refused the file)
_TORCH_CONFIRMED: dict[str, bytes] = {
    # an evil zip of the same layout prepended: miniz reads offsets as written (the evil
    # members), zipfile corrects for the prefix (the benign ones); torch ran the payload
    "prepended-twin": zipcraft.build(zipcraft.torch_members(_EVIL))
    + zipcraft.build(zipcraft.torch_members(_BENIGN)),
    # two members of one name: zipfile takes the last, torch the first: torch ran the payload
    "duplicate-name": _raw(_TWO, [[4, 1, 2, 3, 0]]),
    # names equal ignoring case: torch's lookup ignores case and took the evil one
    "case-duplicate": _raw(_TWO_CASE, [[4, 0, 1, 2, 3]]),
    # the end record counts 4 of 5 entries: zipfile reads 5 (the last data.pkl wins), torch
    # reads 4 (the benign one): two readings either way round
    "entry-count-short": _raw(_TWO, [[0, 1, 2, 3, 4]], count=4),
    # a zip64 end record with extensible data: torch follows the locator to the evil
    # directory (zipfile looks 56 bytes before the locator and fails)
    "zip64-extensible": _raw(_TWO, [[0, 1, 2, 3], [4, 1, 2, 3]], z64_cd=1,
                             z64_ext=b"\x00" * 16),
    # zip64 and classic end records naming two directories: torch takes the zip64 one
    "zip64-shadow": _raw(_TWO, [[4, 1, 2, 3], [0, 1, 2, 3]], eocd_cd=1, z64_cd=0),
}


@pytest.mark.parametrize("case", sorted(_TORCH_CONFIRMED))
def test_zip_torch_reads_differently_is_refused(tmp_path: Path, case: str) -> None:
    rep = _scan(tmp_path, "pytorch_model.bin", _TORCH_CONFIRMED[case])
    assert rep.blocked
    assert "pickle.zip-malformed" in ids(rep, Severity.CRITICAL), [f.message for f in
                                                                   rep.findings]


def test_a_wrong_crc_is_refused_though_torch_reads_it(tmp_path: Path) -> None:
    """torch 2.13 skips CRCs (it ran a payload whose CRC was wrong); zipfile refuses the file."""
    raw = bytearray(zipcraft.build(zipcraft.torch_members(_BENIGN)))
    for sig, at in ((b"PK\x03\x04", 14), (b"PK\x01\x02", 16)):
        pos = raw.find(sig)
        raw[pos + at:pos + at + 4] = struct.pack("<I", zlib.crc32(_BENIGN) ^ 1)
    assert "pickle.zip-malformed" in ids(_scan(tmp_path, "pytorch_model.bin", bytes(raw)))


# -- call rules: allowed globals called only the way torch.save's output calls them ------------
_G = corpus._global
_BU = corpus._bu


def _ckpt(body: bytes) -> bytes:
    """A checkpoint (torch's layout) whose data.pkl is ``{'v': <body>}``, no storages."""
    pkl = b"\x80\x02}" + _BU("v") + body + b"s."
    return zipcraft.torch_writer_layout([
        zipcraft.Member("archive/data.pkl", pkl), zipcraft.Member("archive/byteorder", b"little"),
        zipcraft.Member("archive/version", b"3\n")])


_ENC = _G("_codecs", "encode") + _BU("ab") + _BU("latin1") + b"\x86R"


@pytest.mark.parametrize("body", [
    _ENC,  # bytes at protocol 2
    _G("__builtin__", "bytearray") + _ENC + b"\x85R",  # bytearray at protocol 2
    _G("builtins", "bytearray") + b"C\x02ab\x85R",  # bytearray at protocol 3/4
    _G("__builtin__", "bytes") + b")R",  # b"" at protocol 2
    _G("__builtin__", "set") + b"](K\x01K\x02e\x85R",
    _G("builtins", "complex") + b"K\x01K\x02\x86R",
    _G("torch", "Size") + b"(K\x02K\x03t\x85R",
    _G("torch", "device") + _BU("cuda") + b"K\x01\x86R",
], ids=["encode", "bytearray-p2", "bytearray-p4", "bytes-empty", "set", "complex", "size",
        "device"])
def test_values_torch_save_writes_pass(tmp_path: Path, body: bytes) -> None:
    assert ids(_scan(tmp_path, "pytorch_model.bin", _ckpt(body))) == set()


@pytest.mark.parametrize("body", [
    _G("torch", "FloatStorage") + b"J\x00\xca\x9a\x3b\x85R",  # a storage of 10**9 floats
    _G("torch", "Tensor") + b"J\x00\xca\x9a\x3b\x85R",  # the legacy constructor: a size
    _G("torch", "Tensor") + b"J\x00\xca\x9a\x3b\x85\x81",  # NEWOBJ: Tensor.__new__(size)
    _G("builtins", "bytearray") + b"J\x00\xca\x9a\x3b\x85R",  # 1 GB of zeros
    _G("builtins", "bytearray") + _G("torch", "Size") + b"(K\x01t\x85R\x85R",  # an opaque
    _G("_codecs", "encode") + _BU("ab") + _BU("bz2_codec") + b"\x86R",  # a codec by name
    _G("_codecs", "encode") + _BU("ab") + b"\x85R",
    # _rebuild_from_type_v2 calls its first argument: only a tensor rebuilder, and that one
    # under its own rules
    _G("torch._tensor", "_rebuild_from_type_v2") + b"(" + _G("builtins", "bytearray")
    + _G("torch", "Tensor") + b"J\x00\xca\x9a\x3b\x85}tR",
    _G("torch._tensor", "_rebuild_from_type_v2") + b"(" + _G("torch._utils",
                                                              "_rebuild_wrapper_subclass")
    + _G("torch", "Tensor") + _G("builtins", "set") + b"\x85}tR",
    _G("torch._tensor", "_rebuild_from_type_v2") + b"(" + _G("torch._utils", "_rebuild_tensor_v2")
    + _G("collections", "OrderedDict") + b")}tR",
], ids=["storage-call", "tensor-call", "tensor-newobj", "bytearray-size", "bytearray-opaque",
        "encode-codec", "encode-one-arg", "from-type-bytearray", "from-type-wrapper-set",
        "from-type-class"])
def test_allowed_globals_called_otherwise_are_refused(tmp_path: Path, body: bytes) -> None:
    rep = _scan(tmp_path, "pytorch_model.bin", _ckpt(body))
    assert rep.blocked and "pickle.call-not-allowed" in ids(rep, Severity.CRITICAL), [
        (f.check_id, f.message) for f in rep.findings]
