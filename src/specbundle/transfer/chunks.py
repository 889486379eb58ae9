"""Fixed-size chunking of a transfer set for removable media.

The parts are laid end to end as one byte stream and cut every ``chunk_size`` bytes into
``chunks/chunk-NNNNN``; the index records each part's offset and each chunk's sha256. No
archive format is needed (and none can smuggle paths): a part is just a byte range.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from specbundle.digest import BLOCK_SIZE
from specbundle.errors import VerificationError
from specbundle.strict import MalformedDocument, open_regular
from specbundle.transfer.index import Chunk

__all__ = ["CHUNK_DIR", "ChunkWriter", "parse_size", "read_blocks", "read_range"]

CHUNK_DIR = "chunks"
_SIZE = re.compile(r"^(\d+)\s*([kmgt]?)(i?b)?$", re.IGNORECASE)
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``4G``, ``512M``, ``700MiB``, ``1048576`` -> bytes (binary multiples)."""
    m = _SIZE.match(text.strip())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a size like 4G, 512M or 1048576")
    return int(m.group(1)) * _MULT[m.group(2).lower()]


class ChunkWriter:
    """Append bytes; a new chunk file starts every ``chunk_size`` bytes."""

    def __init__(self, out_dir: Path, chunk_size: int) -> None:
        self.dir = out_dir / CHUNK_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.size = chunk_size
        self.offset = 0
        self.chunks: list[Chunk] = []
        self._fh: BinaryIO | None = None
        self._h = hashlib.sha256()
        self._n = 0

    def _roll(self) -> None:
        if self._fh is not None:
            self._fh.close()
            name = f"chunk-{len(self.chunks):05d}"
            self.chunks.append(Chunk(name, self._n, self._h.hexdigest()))
        self._fh, self._h, self._n = None, hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        """Add bytes to the stream."""
        view = memoryview(data)
        while view:
            if self._fh is None:
                self._fh = (self.dir / f"chunk-{len(self.chunks):05d}").open("wb")
            take = min(len(view), self.size - self._n)
            self._fh.write(view[:take])
            self._h.update(view[:take])
            self._n += take
            self.offset += take
            view = view[take:]
            if self._n == self.size:
                self._roll()

    def close(self) -> list[Chunk]:
        """Finish the last chunk and return them all."""
        if self._fh is not None:
            self._roll()
        return self.chunks


def _open(path: Path) -> BinaryIO:
    """A transfer-set or mirror file, opened only if it is a regular file (never a link,
    FIFO or device: those would hang or never end the read)."""
    try:
        return open_regular(path)
    except MalformedDocument as err:
        raise VerificationError(str(err), hint="the transfer set or mirror was tampered with") \
            from None


def read_blocks(path: Path, progress: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """A file's bytes in large blocks, reporting progress."""
    with _open(path) as fh:
        while block := fh.read(BLOCK_SIZE):
            if progress is not None:
                progress(len(block))
            yield block


def read_range(
    src_dir: Path, chunk_size: int, offset: int, size: int,
    progress: Callable[[int], None] | None = None,
) -> Iterator[bytes]:
    """Yield ``size`` bytes of the chunk stream starting at ``offset``."""
    left = size
    while left:
        idx, within = divmod(offset, chunk_size)
        with _open(src_dir / CHUNK_DIR / f"chunk-{idx:05d}") as fh:
            fh.seek(within)
            take = min(left, chunk_size - within)
            while take:
                block = fh.read(min(take, BLOCK_SIZE))
                if not block:
                    raise EOFError(f"chunk-{idx:05d} is shorter than the index says")
                if progress is not None:
                    progress(len(block))
                yield block
                take -= len(block)
                left -= len(block)
                offset += len(block)
