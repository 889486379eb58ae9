"""Decode pickle opcodes fast: the same ``(opcode, argument, position)`` stream as
:func:`pickletools.genops`, at several times its speed.

Hand-written because ``genops`` costs ~2-4 microseconds per opcode (a Python-level reader call
per argument and a ``tell`` per opcode), so a hostile 10 MB pickle of small opcodes took
minutes to walk. Here the stream is read in growing blocks into one buffer and the arguments
of the opcodes checkpoints are made of (small ints, memo indices, short strings, frames) are
unpacked in place with precompiled structs; every other opcode's argument goes through the
very ``pickletools`` reader ``genops`` uses, so both decoders agree on every byte (a test keeps
them in lockstep over mutated pickles). One exception: a text argument genops refuses and
``pickle.load`` reads (``I0x1``: ``strtol`` base 0; ``S'\xc3\xa9'`` under torch.load's UTF-8) is
read as the C unpickler reads it and its position recorded (``_Buffer.c_only``), so that no
pickle hides behind a break only genops sees.
"""

from __future__ import annotations

import codecs
import io
import pickletools
import re
import struct
from collections.abc import Iterator
from typing import IO

__all__ = ["BudgetExceeded", "decode_arg", "fast_ops"]

_BY_CODE: dict[int, pickletools.OpcodeInfo] = {ord(op.code): op for op in pickletools.opcodes}
_U1, _U2, _I4, _U4, _U8 = (struct.Struct(f) for f in ("<B", "<H", "<i", "<I", "<Q"))
# opcode byte -> (struct, size) for fixed-size integer arguments
_FIXED: dict[int, tuple[struct.Struct, int]] = {
    ord("K"): (_U1, 1), ord("M"): (_U2, 2), ord("J"): (_I4, 4), ord("q"): (_U1, 1),
    ord("r"): (_U4, 4), ord("h"): (_U1, 1), ord("j"): (_U4, 4), 0x80: (_U1, 1),
    0x95: (_U8, 8),
}
# opcode byte -> (length struct, size) for length-prefixed UTF-8 string arguments
_UNICODE: dict[int, tuple[struct.Struct, int]] = {0x8C: (_U1, 1), ord("X"): (_U4, 4),
                                                   0x8D: (_U8, 8)}
_BLOCK = 1 << 16
# A protocol-0 INT the C unpickler reads otherwise than genops (``I010`` is 8 there, 10 here;
# ``I00``/``I01`` are False/True in both): no pickler writes one; the walker refuses it.
_LEADING_ZERO = re.compile(rb"[-+]?0(?!0$|1$)[0-9_]+")
_WINDOW = 1 << 20  # the walker re-checks its stack, memo and opcode limits at every window
# Per opcode byte: 0 no argument, 1 fixed-size int, 2 length-prefixed UTF-8, 3 any other
# argument (pickletools' reader), -1 unknown opcode. Lists indexed by byte: the hot loop's
# cheapest lookup.
_OPS: list[pickletools.OpcodeInfo] = [pickletools.opcodes[0]] * 256
_KINDS: list[int] = [-1] * 256
_SPECS: list[tuple[struct.Struct, int]] = [(_U1, 1)] * 256
for _code, _op in _BY_CODE.items():
    _OPS[_code] = _op
    if _op.arg is None:
        _KINDS[_code] = 0
    elif _code in _FIXED:
        _KINDS[_code], _SPECS[_code] = 1, _FIXED[_code]
    elif _code in _UNICODE:
        _KINDS[_code], _SPECS[_code] = 2, _UNICODE[_code]
    else:
        _KINDS[_code] = 3


class BudgetExceeded(Exception):
    """The pickle needs more bytes than the read budget."""


class _Buffer:
    """A window on the stream's bytes: ``data`` starts at absolute offset ``base``.

    The walker slides the window over what it has consumed (:meth:`slide`), so memory stays at
    one window and nothing is copied twice; :meth:`need` grows it for an argument that crosses
    its end. ``at_limit`` says a read was cut by the budget, not by the end of the stream.
    """

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream, self.limit, self.data, self.base = stream, limit, b"", 0
        self.eof = self.at_limit = False
        # positions of INT/STRING arguments the C unpickler reads otherwise than genops
        self.c_only: list[int] = []

    def _read(self, want: int) -> bool:
        if self.eof:
            return False
        room = self.limit - self.base - len(self.data)
        if room <= 0:
            self.at_limit = True
            return False
        chunk = self.stream.read(min(room, want))
        if not chunk:
            self.eof = True
            return False
        self.data += chunk
        return True

    def need(self, end: int, *, doubling: bool = False) -> int:
        """At least ``end`` bytes in the window, or the budget's or the stream's error.

        ``doubling`` grows the window geometrically (a reader retried on a longer window).
        """
        while len(self.data) < end:
            grow = max(_BLOCK, len(self.data)) if doubling else _BLOCK
            if not self._read(max(grow, end - len(self.data))):
                if self.at_limit and not self.eof:
                    raise BudgetExceeded
                raise ValueError(f"pickle exhausted before {end - len(self.data)} more bytes")
        return len(self.data)

    def slide(self, p: int, end: int) -> int:
        """Drop the window's bytes before ``p`` and read toward ``end`` (fewer at the end of the
        stream or the budget); the new window length, ``p`` becoming 0."""
        self.base += p
        self.data = self.data[p:]
        want = end - p
        while len(self.data) < want and self._read(max(_WINDOW, want - len(self.data))):
            pass
        return len(self.data)


def decode_arg(buf: _Buffer, code: int, p: int) -> tuple[object, int]:
    """The argument of the opcode ``code`` whose argument starts at ``p``; ``(arg, next)``.

    Raises:
        ValueError: unknown opcode or truncated argument (as ``genops``).
    """
    kind = _KINDS[code]
    if kind == 0:
        return None, p
    if kind == 1 or kind == 2:
        s, n = _SPECS[code]
        buf.need(p + n)
        value: int = s.unpack_from(buf.data, p)[0]
        p += n
        if kind == 1:
            return value, p
        buf.need(p + value)  # a length, then that many UTF-8 bytes
        raw = buf.data[p:p + value]
        try:  # strict UTF-8 is a subset of surrogatepass, and 4x cheaper to call
            return raw.decode(), p + value
        except UnicodeDecodeError:
            return str(raw, "utf-8", "surrogatepass"), p + value
    if kind == 3:
        return _generic(buf, _OPS[code], p)
    raise ValueError(f"at position {p - 1}, opcode {bytes([code])!r} unknown")


def fast_ops(stream: IO[bytes], limit: int) -> Iterator[tuple[pickletools.OpcodeInfo, object,
                                                               int]]:
    """``(opcode, argument, position)`` from the stream's position up to STOP (inclusive).

    Raises:
        BudgetExceeded: more than ``limit`` bytes would be needed.
        ValueError: unknown opcode or truncated argument (as ``genops``).
    """
    buf = _Buffer(stream, limit)
    p = 0
    while True:
        if p + 9 > len(buf.data):
            buf.slide(p, p + 9)
            p = 0
        buf.need(p + 1)
        code = buf.data[p]
        arg, nxt = decode_arg(buf, code, p + 1)
        yield _OPS[code], arg, buf.base + p
        if code == 0x2E:  # STOP
            return
        p = nxt


def _c_only_arg(buf: _Buffer, op: pickletools.OpcodeInfo,
                p: int) -> tuple[object, int] | None:
    """A text argument genops refuses and the C unpickler reads, as ``(value, next)``; None
    for any other. Numbers end at a NUL for C (``I1\\x00junk`` is 1); INT is read by
    ``strtol`` base 0, then ``int(s, 0)`` (``I0x1``, ``I0o7``); STRING has its escapes undone,
    then is decoded with the load's encoding, UTF-8 under torch.load (genops: ASCII only)."""
    if op.name not in _C_TEXT_OPS:
        return None
    nl = buf.data.find(b"\n", p)
    if nl < 0:
        return None
    line = buf.data[p:nl]
    try:
        if op.name == "STRING":
            if len(line) < 2 or line[:1] != line[-1:] or line[:1] not in (b"'", b'"'):
                return None
            return codecs.escape_decode(line[1:-1])[0].decode("utf-8"), nl + 1
        if op.name == "LONG" and line.endswith(b"L"):
            line = line[:-1]
        text = line.split(b"\x00", 1)[0]
        if op.name == "FLOAT":
            return float(text), nl + 1
        return int(text, 0 if op.name == "INT" else 10), nl + 1
    except ValueError:  # UnicodeDecodeError included
        return None


_C_TEXT_OPS = frozenset({"INT", "LONG", "FLOAT", "PUT", "GET", "STRING"})


def _generic(buf: _Buffer, op: pickletools.OpcodeInfo, p: int) -> tuple[object, int]:
    """Any other argument, through ``pickletools``' own reader (exact ``genops`` semantics)."""
    if op.arg is None:
        return None, p
    while True:
        view = io.BytesIO(buf.data)
        view.seek(p)
        try:
            arg = op.arg.reader(view)
        except ValueError:
            c_only = _c_only_arg(buf, op, p)
            if c_only is not None:  # genops breaks here, pickle.load reads on: so does the walk
                buf.c_only.append(buf.base + p - 1)
                return c_only
            # a reader that ran out of bytes: read more (within the budget) and retry; out of
            # budget is "too large to tell", not "broken" (a huge STRING line hides what follows)
            if buf.base + len(buf.data) >= buf.limit:
                raise BudgetExceeded from None
            before = len(buf.data)
            try:
                buf.need(len(buf.data) + 1, doubling=True)
            except ValueError:
                raise ValueError(f"truncated {op.name} argument at position {p}") from None
            if len(buf.data) == before:
                raise
            continue
        end = view.tell()
        if end > len(buf.data):
            buf.need(end)
        if op.name == "INT" and _LEADING_ZERO.fullmatch(buf.data[p:end].strip()):
            buf.c_only.append(buf.base + p - 1)  # genops' value kept; the walker reports it
        return arg, end
