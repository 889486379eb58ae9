"""A strict walk of a zip archive's raw structure (PyTorch checkpoints are zips).

Hand-written over the raw bytes on purpose: Python's :mod:`zipfile` is one of the readers being
compared (the scanner would otherwise see what ``zipfile`` sees), miniz (what ``torch.load``
uses) is the other, and the two disagree on ambiguous archives: ``zipfile`` trusts the zip64
locator and corrects for prepended bytes, miniz scans backwards for the last end record and
reads offsets as written. So an archive is accepted only when it has exactly one reading: one
end record (and at most one zip64 record/locator pair, consistent with it), a central
directory that ends where the end records begin, local headers that repeat the central ones,
entries that tile the file from byte 0 with nothing before, between or overlapping them, no
two names equal ignoring case, stored or deflated members only, no encryption. Anything else
raises :class:`ZipAmbiguity`; nothing is ever extracted except on request, within a budget.

Checked against torch 2.13's reader with a harmless payload (tests/scan/pickles/test_real_torch.py):
it ran a pickle zipfile did not see for a prepended twin archive, a duplicate name (torch takes
the first, zipfile the last), names equal ignoring case (torch's lookup ignores case), an end
record counting fewer entries than the directory holds, and a zip64 record zipfile does not
find (extensible data) or that names another directory than the classic record; it reads a
member whose CRC is wrong (no CRC check), whose local header names another member or whose
local sizes lie; it reads zeros for a member with the DOS directory bit; it refuses backslash
names, disk 0xFFFF and bzip2. Gaps between members it reads as zipfile does: refused all the
same (bytes no reader reads; torch never writes them). torch.save writes none of these.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from specbundle.strict import open_regular

__all__ = ["ZipAmbiguity", "ZipArchive", "ZipEntry", "read_member", "verify_crcs", "walk_zip"]

_EOCD = b"PK\x05\x06"
_Z64_REC = b"PK\x06\x06"
_Z64_LOC = b"PK\x06\x07"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_DESCRIPTOR = b"PK\x07\x08"
_SIGNATURES = (_EOCD, _Z64_REC, _Z64_LOC, _CENTRAL, _LOCAL)
_U16, _U32 = 0xFFFF, 0xFFFFFFFF
_METHODS = {0: "stored", 8: "deflate"}  # what miniz and zipfile both read
# Flag bits a checkpoint may carry: deflate options (1, 2), data descriptor (3), UTF-8 (11).
_ALLOWED_FLAGS = 0x0002 | 0x0004 | 0x0008 | 0x0800
_MAX_ENTRIES = 1 << 20


class ZipAmbiguity(Exception):
    """The archive is malformed or has more than one reading."""


@dataclass(frozen=True)
class ZipEntry:
    """One member as the central directory and its local header agree it is."""

    name: str
    method: int
    crc: int
    csize: int
    usize: int
    header_offset: int
    data_offset: int
    end: int  # after the data and any data descriptor


@dataclass(frozen=True)
class ZipArchive:
    """The entries of an unambiguous archive, in central-directory order."""

    entries: tuple[ZipEntry, ...]
    size: int


# Extra fields that give a member another name for some readers: Python >= 3.12's zipfile
# takes the Info-ZIP Unicode Path field (0x7075) for the name when its CRC matches the raw name
# (3.11 and miniz ignore it), so one archive names two different members data.pkl.
_RENAMING_EXTRAS = {0x7075: "Info-ZIP Unicode Path"}


def _extra_fields(extra: bytes, where: str) -> dict[int, bytes]:
    """The fields of an extra block by tag: the block must be exactly a run of well-formed
    fields, no tag twice (readers that take the first and those that take the last differ), and
    no field that renames the member for some readers."""
    out: dict[int, bytes] = {}
    i = 0
    while i < len(extra):
        if i + 4 > len(extra):
            raise ZipAmbiguity(f"{where}: extra field has trailing bytes")
        tag, n = struct.unpack_from("<HH", extra, i)
        if i + 4 + n > len(extra):
            raise ZipAmbiguity(f"{where}: extra field runs past its length")
        if tag in out:
            raise ZipAmbiguity(f"{where}: extra field {tag:#06x} appears twice")
        if tag in _RENAMING_EXTRAS:
            raise ZipAmbiguity(f"{where}: {_RENAMING_EXTRAS[tag]} extra field (renames the "
                               "member for some zip readers)")
        out[tag] = extra[i + 4:i + 4 + n]
        i += 4 + n
    return out


def _zip64_extra(extra: bytes, want: list[str], where: str = "central header") -> dict[str, int]:
    """Values of the zip64 extra field (0x0001) for the fields whose 32-bit slot is full."""
    field = _extra_fields(extra, where).get(1)
    if field is None:
        if want:
            raise ZipAmbiguity("32-bit size or offset is saturated but there is no zip64 field")
        return {}
    if not want:
        return {}
    if len(field) < 8 * len(want):
        raise ZipAmbiguity("zip64 extra field is too short")
    vals = struct.unpack_from(f"<{len(want)}Q", field)
    return dict(zip(want, vals, strict=True))


def _name(raw: bytes) -> str:
    # zipfile decodes non-UTF-8-flagged names as cp437, miniz keeps the bytes: only ASCII
    # names read the same everywhere; zipfile on Windows turns a backslash into a slash, miniz
    # and torch never do (torch's writer splits the archive name on both), so no backslash.
    if not raw or any(b < 0x20 or b > 0x7E for b in raw) or b"\\" in raw:
        raise ZipAmbiguity(f"member name {raw[:80]!r} is empty, not printable ASCII or has a "
                           "backslash")
    return raw.decode("ascii")


def _local_zip64(extra: bytes) -> bytes | None:
    """The data of the zip64 field (0x0001) of a local extra field, if it has one."""
    return _extra_fields(extra, "local header").get(1)


def _end_records(mm: mmap.mmap | bytes, size: int) -> tuple[int, int, int, int]:
    """Locate the end record(s): returns (entries, cd_size, cd_offset, records_start)."""
    if size < 22:
        raise ZipAmbiguity("too short for an end-of-central-directory record")
    lo = max(0, size - 22 - _U16)
    tail = bytes(mm[lo:size])
    # miniz takes the last signature in the file; zipfile the one whose comment ends the file:
    # only an archive where both are the same record has one reading.
    pos = tail.rfind(_EOCD)
    if pos < 0 or pos + 22 > len(tail) or \
            pos + 22 + struct.unpack_from("<H", tail, pos + 20)[0] != len(tail):
        raise ZipAmbiguity("no end-of-central-directory record ending the file")
    eocd = lo + pos
    (_sig, disk, cd_disk, n_disk, n_total, cd_size, cd_off,
     _clen) = struct.unpack_from("<4sHHHHIIH", tail, pos)
    if any(s in tail[pos + 22:] for s in _SIGNATURES):
        raise ZipAmbiguity("the archive comment holds another zip record")
    start = eocd
    if eocd >= 20 and mm[eocd - 20:eocd - 16] == _Z64_LOC:
        _s, z_disk, z_off, z_disks = struct.unpack_from("<4sIQI", bytes(mm[eocd - 20:eocd]))
        if z_disk != 0 or z_disks != 1:
            raise ZipAmbiguity("multi-disk zip64 archive")
        if z_off + 56 > eocd - 20 or mm[z_off:z_off + 4] != _Z64_REC:
            raise ZipAmbiguity("zip64 locator does not point at a zip64 end record")
        rec = bytes(mm[z_off:z_off + 56])
        (_s, rec_size, _made, _need, r_disk, r_cd_disk, r_n_disk, r_n_total, r_cd_size,
         r_cd_off) = struct.unpack("<4sQHHIIQQQQ", rec)
        if z_off + 12 + rec_size != eocd - 20:
            raise ZipAmbiguity("zip64 locator and zip64 end record disagree on its position")
        if rec_size != 44:
            # zipfile assumes no extensible data and reads the record 56 bytes before the
            # locator; miniz follows the locator: with extensible data they read two records
            raise ZipAmbiguity("zip64 end record with extensible data")
        if r_disk or r_cd_disk or r_n_disk != r_n_total:
            raise ZipAmbiguity("multi-disk zip64 archive")
        for name, classic, full, sentinel in (
                ("entries", n_total, r_n_total, _U16), ("entries on disk", n_disk, r_n_disk, _U16),
                ("directory size", cd_size, r_cd_size, _U32),
                ("directory offset", cd_off, r_cd_off, _U32)):
            if classic != sentinel and classic != full:
                raise ZipAmbiguity(f"zip64 and classic end records disagree on the {name}")
        n_total, cd_size, cd_off, start = r_n_total, r_cd_size, r_cd_off, z_off
    elif _U32 in (cd_size, cd_off) or _U16 in (n_total, n_disk):
        raise ZipAmbiguity("saturated end record without a zip64 locator")
    elif disk or cd_disk or n_disk != n_total:
        raise ZipAmbiguity("multi-disk archive")
    if cd_off + cd_size != start:
        raise ZipAmbiguity("the central directory does not end where the end records begin "
                           "(prepended or inserted bytes)")
    if any(bytes(mm[cd_off:start]).find(s) >= 0 for s in (_EOCD, _Z64_REC, _Z64_LOC)):
        raise ZipAmbiguity("more than one end-of-central-directory or zip64 record")
    if n_total > _MAX_ENTRIES:
        raise ZipAmbiguity(f"{n_total} entries: too many to analyse")
    return n_total, cd_size, cd_off, start


def _central(mm: mmap.mmap | bytes, n_total: int, cd_size: int, cd_off: int) -> list[tuple[
        str, int, int, int, int, int, int, bytes]]:
    out = []
    pos, end = cd_off, cd_off + cd_size
    for _ in range(n_total):
        if pos + 46 > end or mm[pos:pos + 4] != _CENTRAL:
            raise ZipAmbiguity("central directory entry count and size disagree")
        (_s, _made, _need, flags, method, _t, _d, crc, csize, usize, nlen, xlen, clen,
         disk, _ia, ext_attr, off) = struct.unpack("<4sHHHHHHIIIHHHHHII", bytes(mm[pos:pos + 46]))
        if pos + 46 + nlen + xlen + clen > end:
            raise ZipAmbiguity("central directory entry runs past the directory")
        raw = bytes(mm[pos + 46:pos + 46 + nlen])
        extra = bytes(mm[pos + 46 + nlen:pos + 46 + nlen + xlen])
        want = [k for k, v in (("usize", usize), ("csize", csize), ("off", off)) if v == _U32]
        z64 = _zip64_extra(extra, want, f"{raw[:80]!r}: central header")
        usize, csize, off = z64.get("usize", usize), z64.get("csize", csize), z64.get("off", off)
        if disk != 0:  # miniz refuses 0xFFFF (a zip64 disk number), zipfile ignores it
            raise ZipAmbiguity("multi-disk member")
        if ext_attr & 0x10:
            # miniz takes the DOS directory attribute for a directory and "extracts" nothing,
            # leaving torch's buffer as it was, while zipfile reads the member's bytes
            raise ZipAmbiguity(f"{raw[:80]!r}: member has the directory attribute")
        out.append((_name(raw), flags, method, crc, csize, usize, off, raw))
        pos += 46 + nlen + xlen + clen
    if pos != end:
        raise ZipAmbiguity("bytes inside the central directory after its last entry")
    return out


def _local(mm: mmap.mmap | bytes, size: int, name: str, flags: int, method: int, crc: int,
           csize: int, usize: int, off: int, raw: bytes) -> ZipEntry:
    if off + 30 > size or mm[off:off + 4] != _LOCAL:
        raise ZipAmbiguity(f"{name}: no local header where the central directory points")
    (_s, _need, lflags, lmethod, _t, _d, lcrc, lcsize, lusize, nlen,
     xlen) = struct.unpack("<4sHHHHHIIIHH", bytes(mm[off:off + 30]))
    if bytes(mm[off + 30:off + 30 + nlen]) != raw:
        raise ZipAmbiguity(f"{name}: local header names another member")
    if lflags != flags or lmethod != method:
        raise ZipAmbiguity(f"{name}: local and central headers disagree on flags or method")
    data = off + 30 + nlen + xlen
    extra = bytes(mm[off + 30 + nlen:data])
    _extra_fields(extra, f"{name}: local header")
    if flags & 0x0008:
        if (lcrc, lcsize, lusize) != (0, 0, 0) and (lcrc, lcsize, lusize) != (
                crc, min(csize, _U32), min(usize, _U32)):
            raise ZipAmbiguity(f"{name}: local header sizes disagree with the central ones")
        end = data + csize
        d = bytes(mm[end:end + 24])
        if d[:4] == _DESCRIPTOR:
            d, end = d[4:], end + 4
        wide = len(d) >= 20 and struct.unpack_from("<IQQ", d) == (crc, csize, usize)
        if wide:
            end += 20
        elif len(d) >= 12 and struct.unpack_from("<III", d) == (crc, csize, usize):
            end += 12
        else:
            raise ZipAmbiguity(f"{name}: data descriptor disagrees with the central header")
    else:
        want = [k for k, v in (("usize", lusize), ("csize", lcsize)) if v == _U32]
        z64 = _zip64_extra(extra, want, f"{name}: local header")
        if (lcrc, z64.get("csize", lcsize), z64.get("usize", lusize)) != (crc, csize, usize):
            raise ZipAmbiguity(f"{name}: local header crc or sizes disagree with the central ones")
        field = _local_zip64(extra)
        # a local zip64 field always holds both sizes (a streaming reader takes them from it)
        if field is not None and (len(field) < 16 or struct.unpack_from("<QQ", field) != (
                usize, csize)):
            raise ZipAmbiguity(f"{name}: local zip64 field disagrees with the central sizes")
        end = data + csize
    if end > size:
        raise ZipAmbiguity(f"{name}: member data runs past the end of the file")
    return ZipEntry(name, method, crc, csize, usize, off, data, end)


def _walk(mm: mmap.mmap | bytes, size: int) -> ZipArchive:
    n_total, cd_size, cd_off, _start = _end_records(mm, size)
    entries: list[ZipEntry] = []
    seen: dict[str, str] = {}
    for name, flags, method, crc, csize, usize, off, raw in _central(mm, n_total, cd_size,
                                                                      cd_off):
        if flags & ~_ALLOWED_FLAGS:
            raise ZipAmbiguity(f"{name}: encrypted or unknown flag bits {flags:#06x}")
        if method not in _METHODS:
            raise ZipAmbiguity(f"{name}: unsupported compression method {method}")
        if method == 0 and csize != usize:
            raise ZipAmbiguity(f"{name}: stored member with two different sizes")
        folded = name.casefold()
        if folded in seen:
            raise ZipAmbiguity(f"member names {seen[folded]!r} and {name!r} are equal "
                               "ignoring case")
        seen[folded] = name
        entries.append(_local(mm, size, name, flags, method, crc, csize, usize, off, raw))
    pos = 0
    for e in sorted(entries, key=lambda e: e.header_offset):
        if e.header_offset < pos:
            raise ZipAmbiguity(f"{e.name}: overlaps the previous member")
        if e.header_offset > pos:
            raise ZipAmbiguity(("bytes before the first local header" if pos == 0 else
                                f"{e.header_offset - pos} bytes between members")
                               + f" (at {pos})")
        pos = e.end
    if pos != cd_off:
        raise ZipAmbiguity(f"{cd_off - pos} bytes between the last member and the directory"
                           if pos < cd_off else "the last member overlaps the directory")
    return ZipArchive(tuple(entries), size)


def walk_zip(path: Path) -> ZipArchive:
    """The archive's single reading, or :class:`ZipAmbiguity` saying why there is none."""
    with open_regular(path, follow=True) as fh:
        size = fh.seek(0, 2)
        if size < 22:
            raise ZipAmbiguity("too short to be a zip archive")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _walk(mm, size)


def read_member(path: Path, entry: ZipEntry, budget: int) -> bytes:
    """One member's bytes, inflated within ``budget`` and checked against its CRC."""
    if entry.usize > budget:
        raise ZipAmbiguity(f"{entry.name}: {entry.usize} bytes, over the {budget}-byte budget")
    with open_regular(path, follow=True) as fh:
        fh.seek(entry.data_offset)
        raw = fh.read(entry.csize)
    if entry.method == 8:
        d = zlib.decompressobj(-15)
        try:
            data = d.decompress(raw, entry.usize + 1)
        except zlib.error as err:
            raise ZipAmbiguity(f"{entry.name}: bad deflate stream: {err}") from None
        if not d.eof or d.unconsumed_tail or d.unused_data:
            raise ZipAmbiguity(f"{entry.name}: deflate stream does not end with the member")
    else:
        data = raw
    if len(data) != entry.usize or zlib.crc32(data) != entry.crc:
        raise ZipAmbiguity(f"{entry.name}: size or CRC does not match the header")
    return data


def verify_crcs(path: Path, archive: ZipArchive, *, chunk: int = 1 << 20) -> None:
    """Every member's bytes against its CRC and size, streamed (one read of the file).

    ``zipfile`` refuses a member whose CRC is wrong, a reader that skips the check returns the
    bytes: a wrong CRC is two readings of one archive.
    """
    with open_regular(path, follow=True) as fh:
        for e in archive.entries:
            fh.seek(e.data_offset)
            crc, size, left = 0, 0, e.csize
            inflate = zlib.decompressobj(-15) if e.method == 8 else None
            while left:
                raw = fh.read(min(chunk, left))
                if not raw:
                    raise ZipAmbiguity(f"{e.name}: member data is cut short")
                left -= len(raw)
                if inflate is None:
                    crc, size = zlib.crc32(raw, crc), size + len(raw)
                    if size > e.usize:
                        raise ZipAmbiguity(f"{e.name}: member data exceeds its declared size")
                    continue
                pending, full = raw, True
                while pending or full:
                    # at most one chunk out per call (a bomb's declared size is no memory
                    # budget); what the cap leaves unconsumed or unflushed comes next turn
                    cap = min(chunk, e.usize - size + 1)
                    try:
                        out = inflate.decompress(pending, cap)
                    except zlib.error as err:
                        raise ZipAmbiguity(f"{e.name}: bad deflate stream: {err}") from None
                    pending, full = inflate.unconsumed_tail, len(out) == cap
                    crc, size = zlib.crc32(out, crc), size + len(out)
                    if size > e.usize:
                        raise ZipAmbiguity(f"{e.name}: inflates past its declared size")
            if inflate is not None and (not inflate.eof or inflate.unused_data):
                raise ZipAmbiguity(f"{e.name}: deflate stream does not end with the member")
            if size != e.usize or crc != e.crc:
                raise ZipAmbiguity(f"{e.name}: size or CRC does not match the header")
