"""Pickle-bearing files: torch zip checkpoints, legacy torch files, raw pickles, object .npy.

Whatever the name, a file whose bytes are a pickle (or a torch zip) is walked opcode by opcode
with :mod:`specbundle.scan.pickles.walker` against an explicit allow-list; nothing is ever
unpickled. Policy on top: pickles are blocked unless the spec allows them, and never admitted
next to safetensors of the same weights (pull does not mirror them then).
"""

from __future__ import annotations

import io
import re
import struct
import tarfile
import tokenize
import zipfile
import zlib
from collections.abc import Iterator
from typing import ClassVar

import numpy as np
from numpy.lib import format as npformat

from specbundle.scan.findings import CheckOutcome, Finding, Severity, finding
from specbundle.scan.interface import Check, CheckContext
from specbundle.scan.inventory import ArtifactTree, TreeFile
from specbundle.scan.pickles.ops import BudgetExceeded, fast_ops
from specbundle.scan.pickles.walker import (
    LEGACY_STORAGE_TYPES,
    NUMPY_ALLOWED,
    STORAGE_TYPES,
    TORCH_ALLOWED,
    PickleWalk,
    walk_pickle,
)
from specbundle.scan.pickles.zipwalk import (
    ZipAmbiguity,
    ZipArchive,
    ZipEntry,
    read_member,
    verify_crcs,
    walk_zip,
)
from specbundle.scan.sniff import FileKind
from specbundle.strict import open_regular

__all__ = ["PickleCheck"]

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PICKLES = 4  # protocol version, sys info, the object, storage keys
_ZIP_META = re.compile(r"^(version|byteorder|\.data/version|\.data/serialization_id|"
                       r"\.format_version|\.storage_alignment)$")
_ZIP_STORAGE = re.compile(r"^data/([A-Za-z0-9_]+)$")
_MAX_STACKED = 8
# What zipfile raises on hostile archives (CRC, header/name mismatch, unsupported versions).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError,
               OSError, ValueError, EOFError, zlib.error, struct.error)
# What numpy's header parser raises on a hostile .npy header (it tokenizes a dict literal).
_NPY_ERRORS = (ValueError, TypeError, SyntaxError, tokenize.TokenError, EOFError,
               OverflowError, MemoryError, struct.error)


def _walk_findings(rel: str, walk: PickleWalk, where: str = "") -> Iterator[Finding]:
    for p in (*walk.problems, *walk.reader_problems):
        yield finding(p.check_id, Severity.CRITICAL, p.message + where, rel, pos=p.pos)


def _zipfile_differs(f: TreeFile, archive: ZipArchive) -> str | None:
    """Python's zipfile is the second reader: it must see exactly the walker's entries."""
    try:
        with open_regular(f.path, follow=True) as fh, zipfile.ZipFile(fh) as zf:
            theirs = [(i.filename, i.header_offset, i.compress_size, i.file_size, i.CRC)
                      for i in zf.infolist()]
    except _ZIP_ERRORS as err:
        return f"zipfile cannot read the archive: {type(err).__name__}: {err}"
    ours = [(e.name, e.header_offset, e.csize, e.usize, e.crc) for e in archive.entries]
    if theirs != ours:
        return "zipfile reads different members than the raw structure says"
    return None


def _storage_key(pid: tuple[object, ...], legacy: bool) -> str | None:
    """The storage key of a torch persistent id, or None if the id is not of that shape."""
    ok_len, types = ((5, 6), LEGACY_STORAGE_TYPES) if legacy else ((5,), STORAGE_TYPES)
    if (len(pid) in ok_len and pid[0] == "storage" and isinstance(pid[2], str)
            and isinstance(pid[3], str) and isinstance(pid[4], int)
            and getattr(pid[1], "name", None) in types):
        return pid[2]
    return None


_TAR_BLOCK = 512
# Bytes per element of each storage type (torch._utils._element_size); every other storage
# type's elements are bytes (Byte, Char, Bool, QInt8, QUInt8, QUInt4x2,
# QUInt2x4, the float8s, and UntypedStorage, whose count is its size in bytes).
_ELEMENT_SIZE: dict[str, int] = {
    "Double": 8, "Long": 8, "ComplexFloat": 8, "ComplexDouble": 16, "Float": 4, "Int": 4,
    "QInt32": 4, "Half": 2, "BFloat16": 2, "Short": 2,
}


def _is_tar(head: bytes) -> bool:
    """Whether ``tarfile`` accepts the first block as a tar header.

    ``torch.load`` tries the legacy tar format first on any non-zip file (``tarfile.open``
    succeeds on a valid first header, whatever follows) and unpickles its ``storages`` member:
    a pickle that is also a tar has two readings.
    """
    try:
        tarfile.TarInfo.frombuf(head, tarfile.ENCODING, "surrogateescape")
    except (tarfile.TarError, ValueError, OverflowError, UnicodeError):
        return False
    return True


def _storage_shape(pid: tuple[object, ...]) -> tuple[int, int]:
    """(element size, number of elements) of a legacy storage persistent id."""
    name = str(getattr(pid[1], "name", ""))
    kind = name.removeprefix("torch.").removesuffix("Storage")
    return _ELEMENT_SIZE.get(kind, 1), pid[4] if isinstance(pid[4], int) else -1


def _string_list(fh: io.BufferedReader, size: int) -> list[str] | None:
    """The strings of a pickled flat list of strings (legacy storage keys), or None if the
    stream is anything else (then nothing can say where its storage data lies)."""
    keys: list[str] = []
    try:
        for op, arg, _pos in fast_ops(fh, size):
            if op.name in _KEY_STRING_OPS and isinstance(arg, str):
                keys.append(arg)
            elif op.name == "STOP":
                return keys
            elif op.name not in _KEY_LIST_OPS:
                return None
    except (ValueError, UnicodeError, EOFError, OverflowError, struct.error, IndexError,
            BudgetExceeded):
        return None
    return None


_KEY_STRING_OPS = frozenset({"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE",
                             "STRING", "BINSTRING", "SHORT_BINSTRING"})
_KEY_LIST_OPS = frozenset({"PROTO", "FRAME", "EMPTY_LIST", "MARK", "APPEND", "APPENDS", "LIST",
                           "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"})


def _legacy_data_problem(fh: io.BufferedReader, start: int, size: int,
                         keys: list[str] | None, storages: dict[str, tuple[int, int]]
                         ) -> str | None:
    """Why the bytes after a legacy checkpoint's pickles are not exactly its storage data.

    ``torch.load`` reads, for each listed key in order, an int64 element count equal to the
    storage's declared one and that many elements; bytes after the last storage are read by no
    one (a payload behind valid headers). With no key listed it reads no data at all: the rest
    is then bounded by what the declared storages could hold.
    """
    if keys is None:
        return "the storage key list is not a plain list of strings"
    if not keys:
        bound = sum(8 + max(n, 0) * el for el, n in storages.values())
        return (f"{size - start} bytes after the pickles, more than the declared storages "
                f"hold ({bound})") if size - start > bound else None
    pos = start
    for key in keys:
        if key not in storages:
            return f"key {key!r} is not a storage of the checkpoint"
        el, numel = storages[key]
        fh.seek(pos)
        head = fh.read(8)
        if len(head) < 8 or int.from_bytes(head, "little") != numel:
            return f"storage {key!r} does not start with its element count ({numel})"
        pos += 8 + numel * el
        if pos > size:
            return f"storage {key!r} runs past the end of the file"
    return f"{size - pos} bytes after the last storage" if pos != size else None


class PickleCheck(Check):
    """Allow-list walk of every pickle stream; policy on pickles in the tree."""

    family = "pickle"
    rules: ClassVar[dict[str, str]] = {
        "pickle.global-not-allowed": "A global outside the PyTorch checkpoint allow-list",
        "pickle.unresolved-global": "STACK_GLOBAL operands the walker cannot resolve",
        "pickle.unresolved-call": "A call whose callable is not a resolved global",
        "pickle.call-not-allowed": "An allowed global called in a way torch.save never writes "
                                   "(a storage class called, bytes of a size, a codec by name)",
        "pickle.opcode-not-allowed": "An opcode checkpoints never use (EXT*, buffers)",
        "pickle.unknown-opcode": "An opcode the walker does not know",
        "pickle.malformed": "Broken or truncated pickle stream",
        "pickle.budget": "Pickle larger than the scan budget",
        "pickle.trailing-data": "Bytes after the pickle's STOP, or after a legacy checkpoint's "
                                "storage data",
        "pickle.tar-ambiguous": "A pickle that is also a tar archive (torch.load reads the tar)",
        "pickle.persistent-id": "Persistent id that is not a torch storage reference",
        "pickle.zip-malformed": "Malformed zip checkpoint, or one zip readers read differently",
        "pickle.zip-member": "Zip member that is not part of a torch state dict",
        "pickle.zip-storage": "Storage referenced but missing, or stored but unreferenced",
        "pickle.npy-object": "numpy array with object dtype (needs unpickling to load)",
        "pickle.npy-size": "numpy array whose data does not fill the file exactly",
        "pickle.not-allowed": "Pickle file while the spec does not allow pickles",
        "pickle.redundant": "Pickle weights next to safetensors (must not be mirrored)",
        "pickle.allowed": "Pickle passed the allow-list and the spec allows it (recorded)",
    }

    def run(self, ctx: CheckContext) -> CheckOutcome:
        """Walk every pickle-bearing file of every tree."""
        out: list[Finding] = []
        for tree in ctx.trees:
            for f in tree.files:
                out.extend(x.with_role(tree.role) for x in self._file(ctx, tree, f))
        return CheckOutcome.of(out)

    def _file(self, ctx: CheckContext, tree: ArtifactTree, f: TreeFile) -> Iterator[Finding]:
        kind = ctx.kind(f.path)
        budget = ctx.options.max_pickle_bytes
        if kind is FileKind.PICKLE:
            found = list(self._raw(f, budget))
        elif kind is FileKind.ZIP:
            # torch.load opens any name (``model.PT``, ``weights.Bin``, ``x.zip``): a zip is
            # walked as a checkpoint whatever its suffix says
            found = list(self._zip(f, budget))
        elif kind is FileKind.NUMPY:
            found = list(self._npy(f, budget))
            if not found or all(x.check_id == "pickle.npy-size" for x in found):
                yield from found  # a plain array: no pickle inside, but it must be whole
                return
        else:
            return
        yield from found
        if not tree.allow_pickle:
            yield finding("pickle.not-allowed", Severity.HIGH,
                          "pickle-bearing file; the spec does not allow pickles", f.rel)
        elif ".safetensors" in tree.suffixes:
            yield finding("pickle.redundant", Severity.HIGH,
                          "pickle next to safetensors weights; it must not be mirrored", f.rel)
        elif not found:
            yield finding("pickle.allowed", Severity.INFO,
                          "pickle passed the allow-list walk (allowed by the spec)", f.rel)

    def _raw(self, f: TreeFile, budget: int) -> Iterator[Finding]:
        with open_regular(f.path, follow=True) as fh:
            if _is_tar(fh.read(_TAR_BLOCK)):
                yield finding("pickle.tar-ambiguous", Severity.CRITICAL,
                              "the file is also a tar archive: torch.load reads it as a legacy "
                              "tar checkpoint, not as the pickle walked here", f.rel)
            fh.seek(0)
            first = walk_pickle(fh, TORCH_ALLOWED, max_bytes=budget)
            yield from _walk_findings(f.rel, first)
            if not first.complete:
                return
            if first.root == _LEGACY_MAGIC:
                yield from self._legacy(f, fh, budget)
                return
            if fh.read(1):
                yield finding("pickle.trailing-data", Severity.HIGH,
                              "bytes after the pickle's STOP", f.rel, end=first.end)
                fh.seek(first.end)
                yield from self._stacked(f, fh, budget)
            for pid in first.persistent_ids:
                yield finding("pickle.persistent-id", Severity.HIGH,
                              "persistent id in a plain pickle", f.rel, pid=repr(pid)[:200])

    def _stacked(self, f: TreeFile, fh: io.BufferedReader, budget: int) -> Iterator[Finding]:
        """Walk pickles stacked after the first, for evidence (they block anyway)."""
        for i in range(_MAX_STACKED):
            start = fh.tell()
            if fh.read(1)[:1] != b"\x80":
                return
            fh.seek(start)
            walk = walk_pickle(fh, TORCH_ALLOWED, max_bytes=budget)
            yield from _walk_findings(f.rel, walk, f" (stacked pickle {i + 2})")
            if not walk.complete:
                return
            fh.seek(start + walk.end)

    def _legacy(self, f: TreeFile, fh: io.BufferedReader, budget: int) -> Iterator[Finding]:
        """Legacy torch.save: magic, protocol, sys info, object, storage keys, raw data."""
        start = fh.tell()
        storages: dict[str, tuple[int, int]] = {}
        keys: list[str] | None = None
        for i in range(_LEGACY_PICKLES):
            fh.seek(start)
            walk = walk_pickle(fh, TORCH_ALLOWED, max_bytes=budget)
            yield from _walk_findings(f.rel, walk, f" (legacy pickle {i + 2})")
            if not walk.complete:
                return
            for pid in walk.persistent_ids:
                key = _storage_key(pid, legacy=True)
                if key is None:
                    yield finding("pickle.persistent-id", Severity.CRITICAL,
                                  "persistent id is not a torch storage", f.rel,
                                  pid=repr(pid)[:200])
                elif storages.setdefault(key, _storage_shape(pid)) != _storage_shape(pid):
                    yield finding("pickle.persistent-id", Severity.HIGH,
                                  f"storage {key!r} is declared with two sizes", f.rel)
            if i == _LEGACY_PICKLES - 1:
                fh.seek(start)
                keys = _string_list(fh, walk.end)
            start += walk.end
        why = _legacy_data_problem(fh, start, f.size, keys, storages)
        if why:
            yield finding("pickle.trailing-data", Severity.HIGH,
                          f"legacy checkpoint storage data: {why}", f.rel, end=start)

    def _zip(self, f: TreeFile, budget: int) -> Iterator[Finding]:
        try:
            archive = walk_zip(f.path)
            verify_crcs(f.path, archive)
            problem = _zipfile_differs(f, archive)
        except ZipAmbiguity as err:
            yield finding("pickle.zip-malformed", Severity.CRITICAL,
                          f"ambiguous or malformed zip: {err}", f.rel)
            return
        if problem:
            yield finding("pickle.zip-malformed", Severity.CRITICAL, problem, f.rel)
            return
        pkl = [e for e in archive.entries
               if e.name.endswith("/data.pkl") and e.name.count("/") == 1]
        if len(pkl) != 1:
            yield finding("pickle.zip-member", Severity.HIGH,
                          "zip is not a torch checkpoint (one <dir>/data.pkl)", f.rel)
            return
        prefix = pkl[0].name.rsplit("/", 1)[0] + "/"
        stored: dict[str, ZipEntry] = {}
        for e in archive.entries:
            n = e.name
            rel = n[len(prefix):] if n.startswith(prefix) else None
            m = _ZIP_STORAGE.match(rel) if rel is not None else None
            if m:
                stored[m.group(1)] = e
            elif rel != "data.pkl" and not (rel is not None and _ZIP_META.match(rel)):
                yield finding("pickle.zip-member", Severity.HIGH,
                              f"unexpected member {n!r}", f.rel, member=n)
        if pkl[0].usize > budget:
            yield finding("pickle.budget", Severity.HIGH,
                          "data.pkl too large to analyse (over the pickle budget)", f.rel)
            return
        try:
            data = read_member(f.path, pkl[0], budget)
        except (ZipAmbiguity, OSError) as err:
            yield finding("pickle.zip-malformed", Severity.CRITICAL,
                          f"data.pkl unreadable: {err}", f.rel)
            return
        walk = walk_pickle(io.BytesIO(data), TORCH_ALLOWED, max_bytes=budget)
        yield from _walk_findings(f.rel, walk, " (in data.pkl)")
        if walk.complete and walk.end != len(data):
            # torch.save writes data.pkl as one pickle; bytes after its STOP are read by no
            # loader here, a stacked pickle for whatever reader walks on
            yield finding("pickle.trailing-data", Severity.HIGH,
                          f"{len(data) - walk.end} bytes after data.pkl's STOP", f.rel,
                          end=walk.end)
        yield from self._zip_storages(f.rel, walk, stored)

    @staticmethod
    def _zip_storages(rel: str, walk: PickleWalk, stored: dict[str, ZipEntry]
                      ) -> Iterator[Finding]:
        """Every storage referenced is stored, and stored as torch.save stores it.

        torch.load reads a storage two ways: inflated and checked against the size data.pkl
        declares (the default), or, with ``mmap=True`` (transformers passes it for zip
        checkpoints), as that many raw bytes from where the member's data starts, whatever its
        size or compression: a deflated member or one whose size is not the declared one reads
        differently in each (checked against torch 2.13). torch.save stores every storage,
        uncompressed, at its size.
        """
        referenced: dict[str, tuple[int, int]] = {}
        for pid in walk.persistent_ids:
            key = _storage_key(pid, legacy=False)
            if key is None:
                yield finding("pickle.persistent-id", Severity.CRITICAL,
                              "persistent id is not a torch storage", rel, pid=repr(pid)[:200])
            elif referenced.setdefault(key, _storage_shape(pid)) != _storage_shape(pid):
                yield finding("pickle.persistent-id", Severity.HIGH,
                              f"storage {key!r} is declared with two sizes", rel)
        for key in sorted(referenced.keys() & stored.keys()):
            el, numel = referenced[key]
            e = stored[key]
            if e.method != 0:
                yield finding("pickle.zip-storage", Severity.HIGH,
                              f"storage {key} is compressed: torch.load(mmap=True) would read "
                              "its compressed bytes as the tensor's", rel)
            elif e.usize != el * numel:
                yield finding("pickle.zip-storage", Severity.HIGH,
                              f"storage {key} holds {e.usize} bytes, data.pkl declares "
                              f"{el * numel}: torch.load(mmap=True) would read other bytes",
                              rel)
        for key in sorted(referenced.keys() - stored.keys()):
            yield finding("pickle.zip-storage", Severity.HIGH, f"storage {key} is missing", rel)
        for key in sorted(stored.keys() - referenced.keys()):
            yield finding("pickle.zip-storage", Severity.MEDIUM,
                          f"storage {key} is not referenced by data.pkl", rel)

    def _npy(self, f: TreeFile, budget: int) -> Iterator[Finding]:
        with open_regular(f.path, follow=True) as fh:
            try:
                version = npformat.read_magic(fh)
                if version not in ((1, 0), (2, 0), (3, 0)):  # what numpy.load reads
                    raise ValueError(f"unsupported format version {version}")
                reader = (npformat.read_array_header_1_0 if version == (1, 0)
                          else npformat.read_array_header_2_0)
                shape, _order, dtype = reader(fh)
            except _NPY_ERRORS as err:
                yield finding("pickle.malformed", Severity.HIGH, f"bad .npy header: {err}", f.rel)
                return
            if not np.dtype(dtype).hasobject:
                # coverage: the array's bytes fill the file exactly (nothing rides behind it)
                want = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
                if f.size - fh.tell() != want:
                    yield finding("pickle.npy-size", Severity.HIGH,
                                  f"array data is {f.size - fh.tell()} bytes, its header says "
                                  f"{want}", f.rel)
                return
            yield finding("pickle.npy-object", Severity.HIGH,
                          "object-dtype array: loading it unpickles its contents", f.rel)
            start = fh.tell()
            walk = walk_pickle(fh, NUMPY_ALLOWED, max_bytes=budget)
        yield from _walk_findings(f.rel, walk, " (npy object payload)")
        if walk.complete and start + walk.end != f.size:
            yield finding("pickle.trailing-data", Severity.HIGH,
                          "bytes after the object array's pickle", f.rel, end=start + walk.end)
