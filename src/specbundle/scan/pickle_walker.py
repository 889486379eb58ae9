"""Walk a pickle's opcodes symbolically, without unpickling, and collect what it would call.

Hand-written (with pickletools' opcode table and argument readers) because no maintained
library implements an *allow-list* walk that resolves ``STACK_GLOBAL`` operands through the
memo (picklescan and modelscan are deny-lists; fickling is LGPL and reads whole files). The
walker keeps a tiny symbolic stack (strings, ints, globals, tuples, opaque values) so that
every callable a ``REDUCE``/``NEWOBJ``/``OBJ``/``INST`` would invoke is known by name;
anything it cannot resolve, an unknown opcode or a broken stream is reported, never guessed.
This module is the fast walk and its limits; the one-opcode semantics it inlines are
:mod:`specbundle.scan.pickle_semantics`.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import IO

from specbundle.scan.pickle_ops import _I4, _OPS, _U4, BudgetExceeded, _Buffer, decode_arg, fast_ops
from specbundle.scan.pickle_semantics import (
    _MAX_PROBLEMS,
    _OPAQUE,
    PickleProblem,
    _Global,
    _State,
    _step,
    _TooManyProblems,
    _top_at,
)

__all__ = [
    "NUMPY_ALLOWED",
    "STORAGE_TYPES",
    "TORCH_ALLOWED",
    "PickleProblem",
    "PickleWalk",
    "looks_like_pickle",
    "walk_pickle",
]

_STORAGE_NAMES = (
    "Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool",
    "ComplexFloat", "ComplexDouble", "QInt8", "QUInt8", "QInt32", "QUInt4x2", "QUInt2x4",
    "Float8_e4m3fn", "Float8_e5m2",
)
STORAGE_TYPES: frozenset[str] = frozenset(
    {f"torch.{n}Storage" for n in _STORAGE_NAMES} | {"torch.UntypedStorage"}
)
_DTYPES = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
           "uint8", "bool", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128")

# What real PyTorch state dicts reference (torch.load(weights_only=True) semantics, narrowed
# to what LLM checkpoints use). Everything else is blocked, whatever it is.
TORCH_ALLOWED: frozenset[str] = frozenset(
    {
        "collections.OrderedDict",
        "torch._utils._rebuild_tensor",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        "torch._utils._rebuild_parameter_with_state",
        "torch._tensor._rebuild_from_type_v2",
        "torch.Tensor",
        "torch.nn.parameter.Parameter",
        "torch.Size",
        "torch.device",
        "torch.serialization._get_layout",
        "torch.strided",
    }
    | STORAGE_TYPES
    | {f"torch.{d}" for d in _DTYPES}
)

# An object-dtype .npy pickles the array itself; its elements must need no global at all.
NUMPY_ALLOWED: frozenset[str] = frozenset(
    {"numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
     "numpy.ndarray", "numpy.dtype"}
)

# Opcode bytes the hot loop of _run applies inline: one opaque push (BINFLOAT with its 8
# bytes), and the pops to the newest mark.
_PUSH_OPAQUE_CODES = frozenset(b"N\x88\x89]}\x8fG")
_MARK_POP_CODES = frozenset(b"ue\x90ld\x91")
_MEMO_CODES = frozenset(b"qhrj")
# Far above real checkpoints (a state dict's stack stays shallow; its memo grows with the
# number of tensors), low enough that a hostile stream cannot exhaust the scanner's memory.
_MAX_STACK = 1_000_000
_MAX_MEMO = 4_000_000
_MAX_OPS = 16_000_000  # ~50 MB of small opcodes, seconds to walk; beyond: too large to analyse


@dataclass(frozen=True)
class PickleWalk:
    """Result of walking one pickle stream."""

    globals: tuple[tuple[str, int], ...]
    problems: tuple[PickleProblem, ...]
    persistent_ids: tuple[tuple[object, ...], ...]
    end: int
    complete: bool
    root: object = None

    @property
    def blocked(self) -> bool:
        """Whether anything in this stream blocks it."""
        return bool(self.problems)



def _limits(st: _State, count: int) -> bool:
    if len(st.stack) > _MAX_STACK or len(st.memo) > _MAX_MEMO or count > _MAX_OPS:
        st.problem("pickle.budget", "too large to analyse: opcodes, stack or memo beyond the "
                   "walker's limits")
        return True
    return False


def _run(st: _State, buf: _Buffer) -> tuple[bool, object]:
    """The walk proper: decode and apply opcodes until STOP; ``(complete, root)``.

    One loop that decodes in place and applies the opcodes checkpoints are made of inline
    (the same effects as :func:`_step`, which a test holds it to): a generator per opcode and
    a dispatch by name cost ~2 us per opcode, which put a 10 MB pickle of small opcodes at
    tens of seconds. Everything else is decoded by :func:`decode_arg` and goes through
    :func:`_step`. Limits are checked once per window (at most ``_WINDOW`` opcodes apart) and
    after every opcode of the slow path (which may grow the window).
    """
    stack, memo, marks = st.stack, st.memo, st.marks
    data, p, fence, count, base = buf.data, 0, 0, 0, 0
    n = len(data)
    i4, u4 = _I4.unpack_from, _U4.unpack_from
    opaque, mark_pop = _OPAQUE, _MARK_POP_CODES
    push = stack.append  # bound once: the stack list is never replaced during a walk
    try:
        while True:
            if p + 9 > n:  # every inline opcode's fixed part fits in 9 bytes: slide the window
                n = buf.slide(p, p + 9)
                data, base, p = buf.data, buf.base, 0
                st.pos = base
                if _limits(st, count):
                    return False, None
                if n == 0:
                    buf.need(1)  # raises: the budget's error or the stream's end
            # the inner loop runs while every inline opcode's fixed part fits the window; at
            # the stream's end (fewer than 9 bytes left) one opcode per turn of the outer loop
            lim = n - 9 if p + 9 <= n else p
            while p <= lim:
                code = data[p]  # the opcode's position is p - 1 from here on
                p += 1
                count += 1
                if code == 0x8C:  # SHORT_BINUNICODE
                    end = p + 1 + data[p]
                    if end > n:
                        n = buf.need(end)
                        data, lim = buf.data, n - 9
                    try:  # strict UTF-8 is a subset of surrogatepass, and 4x cheaper to call
                        s = data[p + 1:end].decode()
                    except UnicodeDecodeError:
                        s = str(data[p + 1:end], "utf-8", "surrogatepass")
                    push(s)
                    if end < n and data[end] == 0x94:  # MEMOIZE follows nearly every protocol-4
                        memo[len(memo)] = s  # string: taken here, one loop turn per pair
                        count += 1
                        end += 1
                    p = end
                elif code == 0x4B:  # BININT1
                    push(data[p])
                    p += 1
                elif code == 0x4A:  # BININT
                    push(i4(data, p)[0])
                    p += 4
                elif code == 0x4D:  # BININT2
                    push(data[p] | data[p + 1] << 8)
                    p += 2
                elif code == 0x94:  # MEMOIZE (after a string: taken with it above)
                    memo[len(memo)] = (stack[-1] if len(stack) > fence
                                       else _top_at(st, base + p - 1, "MEMOIZE"))
                elif code == 0x28:  # MARK
                    fence = len(stack)
                    marks.append(fence)
                elif code in mark_pop:  # SETITEMS APPENDS ADDITEMS / LIST DICT FROZENSET
                    if not marks:
                        st.pos = base + p - 1
                        st.pop_mark()
                    else:
                        del stack[marks.pop():]
                    fence = marks[-1] if marks else 0
                    if code == 0x75 or code == 0x65 or code == 0x90:
                        if len(stack) <= fence or type(stack[-1]) is _Global:
                            st.pos = base + p - 1
                            st.container(_OPS[code].name)
                    else:
                        push(opaque)
                elif code in _MEMO_CODES:  # BINPUT BINGET (1-byte index), LONG_ (4-byte)
                    if code == 0x71 or code == 0x68:
                        idx, p = data[p], p + 1
                        at = base + p - 2
                    else:
                        idx, p = u4(data, p)[0], p + 4
                        at = base + p - 5
                    if code == 0x71 or code == 0x72:
                        memo[idx] = (stack[-1] if len(stack) > fence
                                     else _top_at(st, at, _OPS[code].name))
                    elif idx in memo:
                        push(memo[idx])
                    else:
                        st.pos = at
                        _step(st, _OPS[code], idx)
                elif code == 0x95:  # FRAME
                    p += 8
                elif code in _PUSH_OPAQUE_CODES:
                    push(opaque)
                    p += 8 if code == 0x47 else 0  # BINFLOAT
                elif code == 0x2E:  # STOP
                    st.pos = base + p - 1
                    top = st.pop()
                    return True, top if isinstance(top, (int, str)) else None
                else:
                    st.pos = base + p - 1
                    arg, p = decode_arg(buf, code, p)
                    data, n = buf.data, len(buf.data)
                    lim = n - 9
                    _step(st, _OPS[code], arg)
                    fence = marks[-1] if marks else 0
                    if _limits(st, count):
                        return False, None
    except _TooManyProblems:
        raise  # st.pos is the position of the problem that overflowed
    except BaseException:
        # a decode that failed left p just after the opcode's byte (every inline decode
        # advances p after reading); a failed read at a window's first byte left p at 0
        st.pos = base + max(p - 1, 0)
        raise


def walk_pickle(stream: IO[bytes], allowed: frozenset[str], *, max_bytes: int) -> PickleWalk:
    """Walk one pickle from the stream's position up to its STOP (or the first error).

    Args:
        stream: a binary stream positioned at the pickle's first byte (needs ``tell``).
        allowed: fully qualified globals that may appear.
        max_bytes: read budget; a longer stream is reported, not followed.

    Returns:
        The globals, problems and persistent ids seen; ``end`` is the offset after STOP
        relative to the start position.
    """
    st = _State(allowed)
    origin = stream.tell()
    complete = False
    root: object = None
    buf = _Buffer(stream, max_bytes)
    try:
        complete, root = _run(st, buf)
    except BudgetExceeded:
        st.problems.append(PickleProblem(
            "pickle.budget", f"pickle too large to analyse (over the {max_bytes}-byte budget)",
            st.pos))
    except _TooManyProblems:
        st.problems.append(PickleProblem(
            "pickle.malformed", f"more than {_MAX_PROBLEMS} problems; walk stopped", st.pos))
    except (ValueError, UnicodeError, EOFError, OverflowError, struct.error, IndexError) as err:
        if buf.at_limit and isinstance(err, (struct.error, IndexError)):
            msg, check = f"pickle too large to analyse (over the {max_bytes}-byte budget)", \
                "pickle.budget"
        else:
            msg, check = f"broken pickle stream: {err}", "pickle.malformed"
        st.problems.append(PickleProblem(check, msg, st.pos))
    if not complete and not any(p.check_id in ("pickle.malformed", "pickle.budget")
                                for p in st.problems):
        st.problems.append(PickleProblem("pickle.malformed", "stream ended before STOP", st.pos))
    end = st.pos + 1 if complete else st.pos
    stream.seek(origin + end)  # the decoder reads ahead; callers continue after the STOP
    return PickleWalk(tuple(st.globals), tuple(st.problems), tuple(st.pids), end, complete,
                      root)


# Text fails to parse as pickle opcodes within a few bytes (text made only of opcode letters,
# such as "aaaa", parses on but never reaches STOP); the whole stream is followed, not a byte
# window, so one huge string opcode cannot push the evidence out of sight. A stream that parses
# for this many opcodes without ending is treated as a pickle (and the walk reports its size).
_SNIFF_OPS = 2_000_000
_CALL_OPS = frozenset({"REDUCE", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "BUILD"})


def looks_like_pickle(data: bytes | IO[bytes], *, truncated: bool = False,
                      max_bytes: int = 1 << 30) -> bool:
    """Whether a stream (or bytes) is a pickle, protocol 0/1 text pickles included.

    True when it parses to STOP, parses :data:`_SNIFF_OPS` opcodes without error, or parses a
    GLOBAL/INST and a call before breaking (a nullifAI-style broken pickle).
    ``truncated`` says bytes were cut from the end (a break there is no evidence against).
    """
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    ops, saw_global, saw_call = 0, False, False
    try:
        for op, _arg, _pos in fast_ops(stream, max_bytes):
            ops += 1
            if op.name == "STOP":
                return ops >= 2
            saw_call = saw_call or (saw_global and op.name in _CALL_OPS)
            saw_global = saw_global or op.name in ("GLOBAL", "INST")
            if ops >= _SNIFF_OPS:
                return True
    except BudgetExceeded:
        return ops >= 2
    except (ValueError, UnicodeError, EOFError, OverflowError, struct.error, IndexError):
        # broken after a global and a call: the call already ran when a loader gets here
        return saw_global and (saw_call or (truncated and ops >= 3))
    return False
