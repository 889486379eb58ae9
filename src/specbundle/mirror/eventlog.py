"""The mirror's event log: one canonical JSON object per line, each chained to the line before.

Framing: a line is committed when its final ``\\n`` is on disk; the audit stage's chain and
checkpoint code read exactly this format. An append writes the whole line with checked
``pwrite`` calls (a short write is continued, a failure truncates the file back to where it
was, so the previous state stays) and fsyncs it. A crash or a full disk mid-line leaves a
torn tail; the next appender (holding the mirror lock) detects it (no final newline, or a
last line that is not a well-formed event), cuts it off and records a ``log-repaired`` event
with the bytes removed, so the log never blocks every later writer.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from specbundle import _faults
from specbundle._fsutil import canonical_json, disk_error
from specbundle.digest import sha256_bytes
from specbundle.errors import CorruptMirror
from specbundle.strict import MalformedDocument, loads_json, read_mirror_file

__all__ = ["GENESIS", "MAX_LOG_BYTES", "REPAIR_EVENT", "append_event", "read_chain", "read_events",
           "read_log"]

GENESIS = "0" * 64
REPAIR_EVENT = "log-repaired"
_BLOCK = 64 * 1024
_MAX_LINE = 64 * 1024 * 1024
#: The largest event log any reader loads (a bound, so a planted device cannot exhaust memory).
MAX_LOG_BYTES = 512 * 1024 * 1024

_faults.register("log.half-written", "log.written", "log.repair-truncated")


def _event(raw: bytes) -> dict[str, Any] | None:
    """A line parsed as an event, or None if it is not one."""
    try:
        ev = loads_json(raw, max_bytes=_MAX_LINE, what="event")
    except MalformedDocument:
        return None
    if not isinstance(ev, dict) or not isinstance(ev.get("seq"), int):
        return None
    return ev


def _last_lines(fd: int, size: int, n: int) -> list[tuple[int, bytes]]:
    """The last ``n`` segments (offset, bytes incl. newline) of the file; the last may be torn."""
    pos, buf = size, b""
    while pos > 0 and buf.count(b"\n") <= n:
        start = max(0, pos - _BLOCK)
        buf = os.pread(fd, pos - start, start) + buf
        pos = start
    segs: list[tuple[int, bytes]] = []
    off = pos
    for piece in buf.splitlines(keepends=True):
        segs.append((off, piece))
        off += len(piece)
    if pos > 0:
        segs = segs[1:]  # the first piece may start mid-line
    return segs[-n:]


def _write_all(fd: int, data: bytes, offset: int, path: Path) -> None:
    """Write every byte at ``offset`` or restore the file to ``offset`` and raise."""
    done = 0
    try:
        while done < len(data):
            if done == 0 and len(data) > 1:
                half = len(data) // 2
                done += os.pwrite(fd, data[:half], offset)
                _faults.point("log.half-written")
                continue
            n = os.pwrite(fd, data[done:], offset + done)
            if n <= 0:
                raise OSError(28, "short write")
            done += n
        os.fsync(fd)
    except OSError as err:
        os.ftruncate(fd, offset)
        raise disk_error(err, path, need=len(data), what="appending to the event log") from err


def _repair(fd: int, size: int, path: Path) -> tuple[int, dict[str, Any] | None, bytes,
                                                     dict[str, Any] | None]:
    """Find the log's good end; returns (end offset, last event, its bytes, repair info)."""
    segs = _last_lines(fd, size, 3) if size else []
    cut_from: int | None = None
    while segs:
        off, raw = segs[-1]
        ev = _event(raw.rstrip(b"\n")) if raw.endswith(b"\n") else None
        if ev is not None:
            break
        if cut_from is not None and raw.endswith(b"\n"):
            # more than the last line is damaged: that is not a torn append
            raise CorruptMirror(f"event log {path} is corrupt before its last line "
                                f"(byte {off})", hint="restore it from a backup")
        cut_from = off
        segs.pop()
    repair = None
    if cut_from is not None:
        removed = os.pread(fd, size - cut_from, cut_from)
        os.ftruncate(fd, cut_from)
        os.fsync(fd)
        _faults.point("log.repair-truncated")
        repair = {"truncated_at": cut_from, "removed_bytes": len(removed),
                  "removed_sha256": sha256_bytes(removed)}
        size = cut_from
    if not segs:
        return size, None, b"", repair
    off, raw = segs[-1]
    return size, _event(raw.rstrip(b"\n")), raw.rstrip(b"\n"), repair


def append_event(path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Append ``entry`` (seq, prev filled in) after repairing a torn tail; caller holds the lock."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise CorruptMirror(f"event log {path} is not a regular file",
                                hint="restore it from a backup")
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CorruptMirror(f"event log {path} is a symbolic link",
                                hint="restore it from a backup") from None
        raise disk_error(err, path, what="opening the event log") from err
    try:
        try:  # damage before the tail: never extend a log that is corrupt
            read_events(path)
        except CorruptMirror as err:
            raise CorruptMirror(f"event log {path} is corrupt before its last line: "
                                f"{err.message}", hint="restore it from a backup") from None
        end, last, last_raw, repair = _repair(fd, os.fstat(fd).st_size, path)
        prev = sha256_bytes(last_raw) if last is not None else GENESIS
        seq = int(last["seq"]) + 1 if last is not None else 0
        out = b""
        if repair is not None:
            fix = {"seq": seq, "time": entry["time"], "type": REPAIR_EVENT, "bundle": None,
                   "data": repair, "prev": prev}
            line = canonical_json(fix)
            out += line + b"\n"
            prev, seq = sha256_bytes(line), seq + 1
        done = {**entry, "seq": seq, "prev": prev}
        out += canonical_json(done) + b"\n"
        _write_all(fd, out, end, path)
        _faults.point("log.written")
        return done
    finally:
        os.close(fd)


def read_log(path: Path) -> bytes:
    """The log's bytes (empty when absent): a regular file, not a link, at most
    :data:`MAX_LOG_BYTES` (a link to ``/dev/zero`` or a FIFO is a corrupt mirror).

    Raises:
        CorruptMirror: the log is not a regular file, is a link, or is too large.
    """
    try:
        return read_mirror_file(path, max_bytes=MAX_LOG_BYTES, what=path.name)
    except FileNotFoundError:
        return b""
    except MalformedDocument as err:
        raise CorruptMirror(f"event log {path}: {err}",
                            hint="restore it from a backup") from None
    except OSError as err:
        raise CorruptMirror(f"event log {path} is unreadable: {err.strerror}") from None


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every committed event, oldest first; a torn tail (repaired at the next append) is left out.

    Raises:
        CorruptMirror: a committed line that is not a well-formed event.
    """
    data = read_log(path)
    lines = data.split(b"\n")
    body, tail = lines[:-1], lines[-1]  # ``tail`` is b"" unless the last line is torn
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(body):
        if not raw.strip():
            continue
        ev = _event(raw)
        if ev is None:
            if i == len(body) - 1 and not tail:
                break  # a torn last line that happens to end in a newline
            raise CorruptMirror(f"event log {path}: line {i + 1} is not a well-formed event",
                                hint="restore it from a backup")
        out.append(ev)
    return out


def read_chain(path: Path) -> tuple[list[dict[str, Any]], tuple[int, str] | None]:
    """Every committed event *and* the log's head (seq, line digest), checking the hash chain.

    What a verifier reads revocations from: a line deleted, edited or reordered anywhere
    breaks the chain, so dropping a revocation line is an error, never a quieter log (a cut
    tail is caught by the operator's recorded head, :mod:`specbundle.verify.floors`).

    Raises:
        CorruptMirror: a line is malformed or does not chain to the line before it.
    """
    out: list[dict[str, Any]] = []
    prev, head = GENESIS, None
    lines = read_log(path).split(b"\n")
    body = lines[:-1]
    for i, raw in enumerate(body):
        ev = _event(raw)
        if ev is None:
            if i == len(body) - 1:
                break  # a torn last line (repaired by the next appender)
            raise CorruptMirror(f"event log {path}: line {i + 1} is not a well-formed event",
                                hint="restore it; `specbundle audit log --verify` names it")
        want = head[0] + 1 if head is not None else 0
        if ev["seq"] != want or ev.get("prev") != prev:
            raise CorruptMirror(
                f"event log {path}: line {i + 1} (seq {ev['seq']}) does not chain to the line "
                "before it: an entry was deleted, edited or reordered",
                hint="restore it; `specbundle audit log --verify` names the entry")
        prev = sha256_bytes(raw)
        head = (int(ev["seq"]), prev)
        out.append(ev)
    return out, head
