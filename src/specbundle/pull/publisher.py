"""Publishers' own signatures on the way in: a repo's OMS ``model.sig`` checked during pull.

Pull declares what it needs (:class:`PublisherCheck`); the trust policy implements it (the
``publishers:`` section, :mod:`specbundle.verify.publishers`) and the CLI wires the two, so
pull never imports a later stage. The order keeps the mirror clean:

1. the small ``model.sig`` is read into memory (bounded), never into the store;
2. the check verifies it (or refuses a repo the policy says must be signed) before any file
   is fetched; every selected file must be one the signature lists, with the hub's declared
   sha256 equal to the signed one where the hub declares it;
3. after the transfer, every fetched digest must equal the signed one, before the record
   that would make the files visible is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from specbundle.errors import VerificationError
from specbundle.pull.interface import ModelSource, RemoteFile, ResolvedRevision
from specbundle.record import FileEntry, Publisher

__all__ = ["SIGNATURE_FILE", "PublisherCheck", "PublisherVerdict", "check_fetched",
           "check_listing", "read_signature"]

SIGNATURE_FILE = "model.sig"
_MAX_SIG = 1 << 20


@dataclass(frozen=True)
class PublisherVerdict:
    """A verified publisher signature: who signed, and the file digests it vouches for."""

    publisher: Publisher
    digests: Mapping[str, str]


class PublisherCheck(Protocol):
    """The policy's publisher rules, as pull uses them."""

    def check(self, repo: str, signature: bytes | None) -> PublisherVerdict | None:
        """Verify ``signature`` (the repo's model.sig, None when absent) for ``repo``.

        Returns None when no rule names the repo (or an optional rule and no signature).

        Raises:
            VerificationError: the rule requires a signature and there is none, or it fails.
        """
        ...


def read_signature(source: ModelSource, resolved: ResolvedRevision,
                   listed: Sequence[RemoteFile]) -> bytes | None:
    """The repo's ``model.sig`` bytes (in memory, at most 1 MiB), or None when it has none."""
    f = next((x for x in listed if x.path == SIGNATURE_FILE), None)
    if f is None:
        return None
    if f.size is not None and f.size > _MAX_SIG:
        raise VerificationError(f"{resolved.repo}: {SIGNATURE_FILE} is larger than {_MAX_SIG} "
                                "bytes")
    buf = bytearray()

    def sink(_ranged: bool) -> _Write:
        buf.clear()
        return _Write(buf)

    source.fetch(resolved, f, 0, sink)
    return bytes(buf)


class _Write:
    def __init__(self, buf: bytearray) -> None:
        self._buf = buf

    def __call__(self, chunk: bytes) -> None:
        self._buf += chunk
        if len(self._buf) > _MAX_SIG:
            raise VerificationError(f"{SIGNATURE_FILE} is larger than {_MAX_SIG} bytes")


def check_listing(repo: str, verdict: PublisherVerdict, wanted: Sequence[RemoteFile]) -> None:
    """Every file pull is about to fetch is signed, with the hub's sha256 where it has one."""
    for f in wanted:
        if f.path == SIGNATURE_FILE:
            continue
        signed = verdict.digests.get(f.path)
        if signed is None:
            raise VerificationError(f"{repo}: {f.path} is not covered by the publisher's "
                                    f"signature ({verdict.publisher.identity})")
        if f.lfs_sha256 and f.lfs_sha256 != signed:
            raise VerificationError(f"{repo}: {f.path} on the hub has sha256 {f.lfs_sha256}, "
                                    f"the publisher signed {signed}")


def check_fetched(repo: str, verdict: PublisherVerdict, entries: Sequence[FileEntry]) -> None:
    """The fetched bytes are the ones the publisher signed (checked before the commit)."""
    for e in entries:
        if e.path == SIGNATURE_FILE:
            continue
        signed = verdict.digests.get(e.path)
        if signed != e.sha256:
            raise VerificationError(f"{repo}: {e.path} has sha256 {e.sha256}, the publisher "
                                    f"signed {signed}")
