"""Decode pickle opcodes fast: the same ``(opcode, argument, position)`` stream as
:func:`pickletools.genops`, at several times its speed.

Hand-written because ``genops`` costs ~2-4 microseconds per opcode (a Python-level reader call
per argument and a ``tell`` per opcode), so a hostile 10 MB pickle of small opcodes took
minutes to walk. Here the stream is read in growing blocks into one buffer and the arguments
of the opcodes checkpoints are made of (small ints, memo indices, short strings, frames) are
unpacked in place with precompiled structs; every other opcode's argument goes through the
very ``pickletools`` reader ``genops`` uses, so both decoders agree on every byte (a test keeps
them in lockstep over mutated pickles).
"""

from __future__ import annotations

import io
import pickletools
import struct
from collections.abc import Iterator
from typing import IO

__all__ = ["BudgetExceeded", "fast_ops"]

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
    """The stream's bytes from its position, read on demand up to ``limit``."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self.stream, self.limit, self.data = stream, limit, b""

    def ensure(self, end: int) -> None:
        while len(self.data) < end:
            if len(self.data) >= self.limit:
                raise BudgetExceeded
            want = min(self.limit - len(self.data), max(_BLOCK, len(self.data), end - len(
                self.data)))
            chunk = self.stream.read(want)
            if not chunk:
                raise ValueError(f"pickle exhausted before {end - len(self.data)} more bytes")
            self.data += chunk


def fast_ops(stream: IO[bytes], limit: int) -> Iterator[tuple[pickletools.OpcodeInfo, object,
                                                               int]]:
    """``(opcode, argument, position)`` from the stream's position up to STOP (inclusive).

    Raises:
        BudgetExceeded: more than ``limit`` bytes would be needed.
        ValueError: unknown opcode or truncated argument (as ``genops``).
    """
    buf = _Buffer(stream, limit)
    ops, kinds, specs = _OPS, _KINDS, _SPECS
    data = buf.data
    p = 0
    while True:
        if p >= len(data):
            buf.ensure(p + 1)
            data = buf.data
        code = data[p]
        kind = kinds[code]
        start = p
        p += 1
        if kind == 0:
            arg: object = None
        elif kind == 1 or kind == 2:
            s, n = specs[code]
            if p + n > len(data):
                buf.ensure(p + n)
                data = buf.data
            arg = s.unpack_from(data, p)[0]
            p += n
            if kind == 2:  # a length, then that many UTF-8 bytes
                length: int = s.unpack_from(data, p - n)[0]
                if p + length > len(data):
                    buf.ensure(p + length)
                    data = buf.data
                arg = str(data[p:p + length], "utf-8", "surrogatepass")
                p += length
        elif kind == 3:
            arg, p = _generic(buf, ops[code], p)
            data = buf.data
        else:
            raise ValueError(f"at position {start}, opcode {bytes([code])!r} unknown")
        yield ops[code], arg, start
        if code == 0x2E:  # STOP
            return


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
            # a reader that ran out of bytes: read more (within the budget) and retry
            if len(buf.data) >= buf.limit:
                raise
            before = len(buf.data)
            try:
                buf.ensure(len(buf.data) + 1)
            except ValueError:
                raise ValueError(f"truncated {op.name} argument at position {p}") from None
            if len(buf.data) == before:
                raise
            continue
        end = view.tell()
        if end > len(buf.data):
            buf.ensure(end)
        return arg, end
