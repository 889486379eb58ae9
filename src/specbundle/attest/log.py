"""The per-bundle append-only attestation log: ``bundles/<name>/attestations.jsonl``.

One DSSE envelope per line (the in-toto bundle layout, ``application/vnd.in-toto.bundle``),
canonical JSON, appended with ``O_APPEND`` + fsync and never rewritten. The log sits outside
every signed file set. It is not authenticated as a whole (lines can be dropped or replayed),
which is why verification counts *signed* statements per policy rather than trusting the file.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from specbundle._fsutil import disk_error, open_dir
from specbundle.attest.dsse import Envelope
from specbundle.errors import BundleNotFound, CorruptMirror, VerificationError
from specbundle.mirror import Mirror
from specbundle.mirror.eventlog import MAX_LOG_BYTES
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file

__all__ = ["ATTESTATIONS_FILE", "append_attestation", "append_lines", "attestations_path",
           "check_attestation_log", "read_attestations"]

ATTESTATIONS_FILE = "attestations.jsonl"


def attestations_path(mirror: Mirror, bundle: str) -> Path:
    """Where a bundle's attestation log lives."""
    return mirror.bundle_dir(bundle) / ATTESTATIONS_FILE


def _committed_end(data: bytes, where: str) -> int:
    """Byte offset after the last committed line; every committed line must be an envelope.

    A fragment after the last newline is a torn append (never committed, cut at the next
    append). A malformed *committed* line fails closed: appending after it would bury damage
    that may hide a statement (restore the log first).
    """
    end = data.rfind(b"\n") + 1
    for no, raw in enumerate(data[:end].split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            Envelope.from_json(loads_json(raw, what="attestation"))
        except (ValueError, VerificationError):
            raise CorruptMirror(f"{where} line {no} is not a well-formed attestation; "
                                "refusing to append after it",
                                hint="restore the log from a backup") from None
    return end


def check_attestation_log(mirror: Mirror, bundle: str) -> None:
    """Refuse up front (before a writer commits anything) a log no append may extend."""
    where = f"bundles/{bundle}/{ATTESTATIONS_FILE}"
    try:
        data = read_mirror_file(attestations_path(mirror, bundle), max_bytes=MAX_LOG_BYTES,
                                what=where)
    except FileNotFoundError:
        return
    except MalformedDocument as err:
        raise CorruptMirror(f"bundles/{bundle}/{err}") from None
    _committed_end(data, where)


def append_attestation(mirror: Mirror, bundle: str, envelope: Envelope) -> int:
    """Append one envelope and return its 1-based line number (see :func:`append_lines`)."""
    if not (mirror.bundle_dir(bundle) / "bundle.json").is_file():
        raise BundleNotFound(f"no bundle named {bundle!r} in mirror {mirror.root}")
    return append_lines(mirror, bundle, [envelope.to_line()])


def append_lines(mirror: Mirror, bundle: str, lines: Sequence[bytes]) -> int:
    """Append envelope lines (each already checked) and return the last one's line number.

    Call under ``mirror.lock()`` (like ``append_event``). The log is opened relative to the
    bundle folder's checked fd, no-follow, and must be a regular file. A torn last line left
    by a crash is cut first (it was never committed); a malformed committed line refuses the
    append.

    Raises:
        CorruptMirror: the log is not a regular file, too large, or malformed before its tail.
    """
    where = f"bundles/{bundle}/{ATTESTATIONS_FILE}"
    with open_dir(mirror.root, f"bundles/{bundle}") as dfd:
        try:
            fd = os.open(ATTESTATIONS_FILE, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC | os.O_NONBLOCK, 0o644, dir_fd=dfd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENXIO):
                raise CorruptMirror(f"{where} is not a regular file",
                                    hint="restore the log from a backup") from None
            raise disk_error(err, mirror.root / where, what="opening") from err
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptMirror(f"{where} is not a regular file",
                                hint="restore the log from a backup")
        if st.st_size > MAX_LOG_BYTES:
            raise CorruptMirror(f"{where} is larger than {MAX_LOG_BYTES} bytes")
        existing = os.pread(fd, st.st_size, 0)
        end = _committed_end(existing, where)
        data = b"".join(ln + b"\n" for ln in lines)
        try:
            if end < len(existing):
                os.ftruncate(fd, end)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as err:
            os.ftruncate(fd, end)
            raise disk_error(err, mirror.root / where, need=len(data),
                             what="appending to") from err
    finally:
        os.close(fd)
    return existing[:end].count(b"\n") + len(lines)


def read_attestations(
    mirror: Mirror, bundle: str, *, problems: list[str] | None = None
) -> tuple[Envelope, ...]:
    """All envelopes in log order (an absent log is empty).

    A malformed line raises :class:`VerificationError` naming the line, unless ``problems`` is
    given: then the line's description is appended there and reading continues.
    """
    try:
        data = read_mirror_file(attestations_path(mirror, bundle), max_bytes=MAX_LOG_BYTES,
                                what=f"bundles/{bundle}/{ATTESTATIONS_FILE}")
    except FileNotFoundError:
        return ()
    except (MalformedDocument, OSError) as err:
        msg = str(err) if isinstance(err, MalformedDocument) else (
            f"{ATTESTATIONS_FILE} is unreadable: {err.strerror}")
        if problems is None:
            raise VerificationError(msg) from None
        problems.append(msg)
        return ()
    out: list[Envelope] = []
    for no, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append(Envelope.from_json(loads_json(raw, what="attestation")))
        except (ValueError, VerificationError) as err:
            msg = f"{ATTESTATIONS_FILE} line {no}: {err}"
            if problems is None:
                raise VerificationError(msg) from err
            problems.append(msg)
    return tuple(out)
