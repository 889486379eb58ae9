"""Zip archives written byte by byte, so that a test can make two zip readers disagree.

``zipfile`` cannot write an ambiguous archive (it is one of the readers under test), so the
records are packed here by hand; every knob produces one class of parser differential.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

_U32 = 0xFFFFFFFF


@dataclass
class Member:
    """One member: name, bytes, method; knobs that make its headers lie."""

    name: str
    data: bytes
    method: int = 0
    local_name: str | None = None  # a local header naming something else
    local_size_delta: int = 0  # a local header with another size
    local_extra: bytes = b""  # the local header's extra field
    ext_attr: int = 0  # central external attributes (0x10: the DOS directory bit)
    disk: int = 0  # central "disk number start"


@dataclass
class Layout:
    """Knobs of the archive as a whole."""

    prefix: bytes = b""  # bytes before the first local header
    gap: bytes = b""  # bytes between the first and second member
    overlap: bool = False  # the second central entry points into the first member
    zip64: bool = False  # write a zip64 end record and locator
    zip64_cd_delta: int = 0  # zip64 record's directory offset disagrees with the classic one
    zip64_extensible: bytes = b""  # "extensible data" at the end of the zip64 end record
    second_eocd: bool = False  # a second end record after the first
    comment: bytes = b""
    extra_cd: list[Member] = field(default_factory=list)  # a second, shadow directory


def _local(m: Member, csize: int, crc: int) -> bytes:
    name = (m.local_name or m.name).encode()
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, m.method, 0, 0, crc,
                       csize + m.local_size_delta, len(m.data) + m.local_size_delta,
                       len(name), len(m.local_extra)) + name + m.local_extra


def _central(m: Member, csize: int, crc: int, offset: int) -> bytes:
    name = m.name.encode()
    return struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, m.method, 0, 0, crc,
                       csize, len(m.data), len(name), 0, 0, m.disk, 0, m.ext_attr,
                       offset) + name


def _payload(m: Member) -> bytes:
    if m.method == 8:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(m.data) + c.flush()
    return m.data


def _directory(members: list[Member], offsets: list[int]) -> bytes:
    out = b""
    for m, off in zip(members, offsets, strict=True):
        out += _central(m, len(_payload(m)), zlib.crc32(m.data), off)
    return out


def build(members: list[Member], layout: Layout | None = None) -> bytes:
    """The archive's bytes."""
    lay = layout or Layout()
    out = bytearray(lay.prefix)
    offsets: list[int] = []
    for i, m in enumerate(members):
        if i == 1:
            out += lay.gap
        offsets.append(len(out))
        payload = _payload(m)
        out += _local(m, len(payload), zlib.crc32(m.data)) + payload
    if lay.overlap and len(offsets) > 1:
        offsets[1] = offsets[0] + 4
    if lay.prefix:
        offsets = [o - len(lay.prefix) for o in offsets]  # as a writer unaware of the prefix
    shadow_off = len(out)
    shadow = _directory(lay.extra_cd, offsets[:len(lay.extra_cd)]) if lay.extra_cd else b""
    out += shadow
    cd_off = len(out)
    cd = _directory(members, offsets)
    out += cd
    n = len(members)
    if lay.zip64:
        rec_off = len(out)
        z64_cd = (shadow_off if lay.extra_cd else cd_off) + lay.zip64_cd_delta
        z64_size = len(shadow) if lay.extra_cd else len(cd)
        out += struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44 + len(lay.zip64_extensible), 45,
                           45, 0, 0, n, n, z64_size, z64_cd) + lay.zip64_extensible
        out += struct.pack("<4sIQI", b"PK\x06\x07", 0, rec_off, 1)
    cd_field = cd_off - len(lay.prefix) if lay.prefix else cd_off
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(cd), cd_field,
                       len(lay.comment)) + lay.comment
    out += eocd
    if lay.second_eocd:
        out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(cd), cd_off, 0)
    return bytes(out)


def torch_members(data_pkl: bytes) -> list[Member]:
    """The members of a minimal torch checkpoint around ``data_pkl``."""
    return [Member("archive/data.pkl", data_pkl), Member("archive/byteorder", b"little"),
            Member("archive/data/0", b"\x00" * 16), Member("archive/version", b"3\n")]


def torch_writer_layout(members: list[Member], *, wide: bool = False) -> bytes:
    """The archive as torch.save's miniz writer lays it out (stored records, zip64 end records).

    Each local header has the data-descriptor and UTF-8 flags (0x0808), zero sizes, a zero DOS
    date, and an ``FB`` extra field that pads the data to a 64-byte boundary; a data descriptor
    follows each member (with 32-bit sizes; ``wide``: the zip64 form torch writes past 4 GiB)
    except an empty one, which has only the UTF-8 flag and its (zero) sizes;
    the end has a zip64 end record and locator before the classic end record. Byte for byte
    what torch 2.13 writes (tests/scan/pickles/test_real_torch.py holds it to a real file).
    """
    out = bytearray()
    cd = bytearray()
    for m in members:
        name = m.name.encode()
        off = len(out)
        start = off + 30 + len(name) + 4
        pad = -start % 64
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        crc = zlib.crc32(m.data)
        flags = 0x0808 if m.data else 0x0800  # an empty member has no descriptor
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 0, flags, 0, 0, 0, 0, 0, 0,
                           len(name), len(extra)) + name + extra + m.data
        if m.data:
            out += struct.pack("<4sIQQ" if wide else "<4sIII", b"PK\x07\x08", crc,
                               len(m.data), len(m.data))
        cd += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 0, 0, flags, 0, 0, 0,
                          crc, len(m.data), len(m.data), len(name), 0, 0, 0, 0, 0, off) + name
    cd_off = len(out)
    out += cd
    n = len(members)
    rec_off = len(out)
    out += struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 0x031E, 45, 0, 0, n, n, len(cd), cd_off)
    out += struct.pack("<4sIQI", b"PK\x06\x07", 0, rec_off, 1)
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(cd), cd_off, 0)
    return bytes(out)
