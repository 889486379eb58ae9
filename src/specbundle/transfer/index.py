"""The signed transfer index: what a transfer set holds, in which version, with which digests.

The index is an in-toto statement (``transfer-index/v1``) in a DSSE envelope, written as
``index.json`` at the top of the transfer set. Its subjects are the artifacts' OMS roots and
commits; its predicate lists every part (path, size, sha256; the byte offset when chunked) and,
for a chunked set, every chunk. The ``version`` is a per-bundle counter that only grows, which
is what lets the importing side refuse a replayed older index (TUF's rollback rule, without TUF).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from specbundle import __version__, ids
from specbundle.attest import Statement, Subject
from specbundle.attest.models import (
    LogHead,
    TransferChunk,
    TransferChunking,
    TransferIndexV1,
    TransferPart,
)
from specbundle.digest import is_sha256
from specbundle.errors import VerificationError

__all__ = ["INDEX_FILE", "Chunk", "Part", "TransferIndex", "safe_part_path"]

INDEX_FILE = "index.json"


def safe_part_path(path: str) -> str:
    """``objects/<sha256>`` or ``bundle/<relative path>``; anything else is refused."""
    try:
        ids.check_rel_path(path)
        head, _, rest = path.partition("/")
        if head == "objects":
            ids.check_digest(rest)
        elif head != "bundle" or not rest:
            raise ValueError("not under objects/ or bundle/")
    except ValueError as err:
        raise VerificationError(f"transfer index names an unsafe part path {path!r}: "
                                f"{err}") from None
    return path


@dataclass(frozen=True)
class Part:
    """One file of the set; ``offset`` is its start in the chunk stream (chunked sets only)."""

    path: str
    size: int
    sha256: str
    offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        d: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256}
        if self.offset is not None:
            d["offset"] = self.offset
        return d


@dataclass(frozen=True)
class Chunk:
    """One piece of a split set (for removable media)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class TransferIndex:
    """The parsed predicate of a transfer index."""

    bundle: str
    version: int
    created: str
    parts: tuple[Part, ...]
    chunk_size: int | None = None
    chunks: tuple[Chunk, ...] = ()
    #: Signed revocation envelopes of the exporting mirror's log (each verified on import).
    revocations: tuple[dict[str, Any], ...] = ()
    #: The exporting mirror's event-log head (``seq``, ``digest``): a floor for its log.
    log_head: dict[str, Any] | None = None

    def statement(self, subjects: Sequence[Subject]) -> Statement:
        """The statement to sign."""
        head = LogHead.model_validate(self.log_head) if self.log_head is not None else None
        predicate = TransferIndexV1(
            bundle=self.bundle, version=self.version, time_created=self.created,
            tool_version=__version__, revocations=list(self.revocations), log_head=head,
            parts=[TransferPart.model_validate(p.to_json()) for p in self.parts])
        if self.chunk_size is not None:
            predicate = predicate.model_copy(update={"chunking": TransferChunking(
                chunk_size=self.chunk_size,
                chunks=[TransferChunk(name=c.name, size=c.size, sha256=c.sha256)
                        for c in self.chunks])})
        return Statement.of(subjects, predicate)

    @classmethod
    def from_statement(cls, st: Statement) -> TransferIndex:
        """Validate a signed index predicate; any defect is a :class:`VerificationError`."""
        p = st.typed_as(TransferIndexV1)
        try:
            parts = tuple(Part(safe_part_path(x.path), x.size, x.sha256, x.offset)
                          for x in p.parts)
            ch = p.chunking
            chunks = tuple(Chunk(c.name, c.size, c.sha256) for c in ch.chunks) if ch else ()
            idx = cls(ids.check_bundle_name(p.bundle), p.version, p.time_created, parts,
                      ch.chunk_size if ch else None, chunks, tuple(p.revocations),
                      p.log_head.to_json() if p.log_head else None)
        except ValueError as err:
            raise VerificationError(f"transfer index predicate is malformed: {err}") from err
        bad = [x.path for x in idx.parts if not is_sha256(x.sha256) or x.size < 0]
        bad += [x.path for x in idx.parts
                if x.path.startswith("objects/") and x.path[8:] != x.sha256]
        bad += [c.name for c in idx.chunks if not is_sha256(c.sha256)
                or PurePosixPath(c.name).name != c.name]
        if bad or idx.version < 1 or len({x.path for x in idx.parts}) != len(idx.parts):
            raise VerificationError(f"transfer index is inconsistent: {bad or 'version/paths'}")
        return idx
