"""Walk a pickle's opcodes symbolically, without unpickling, and collect what it would call.

Hand-written on top of :func:`pickletools.genops` because no maintained library implements an
*allow-list* walk that resolves ``STACK_GLOBAL`` operands through the memo (picklescan and
modelscan are deny-lists; fickling is LGPL and reads whole files). The walker keeps a tiny
symbolic stack (strings, ints, globals, tuples, opaque values) so that every callable a
``REDUCE``/``NEWOBJ``/``OBJ``/``INST`` would invoke is known by name; anything it cannot resolve,
an unknown opcode or a broken stream is reported, never guessed.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
from dataclasses import dataclass, field
from typing import IO

from specbundle.scan.pickle_ops import _I4, _OPS, _U4, BudgetExceeded, _Buffer, decode_arg, fast_ops

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

_STRING_OPS = frozenset({"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
                         "SHORT_BINUNICODE", "BINUNICODE8"})
_INT_OPS = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
# Opcode bytes the hot loop of _run applies inline: one opaque push (BINFLOAT with its 8
# bytes), and the pops to the newest mark.
_PUSH_OPAQUE_CODES = frozenset(b"N\x88\x89]}\x8fG")
_MARK_POP_CODES = frozenset(b"ue\x90ld\x91")
_FORBIDDEN_OPS = frozenset({"EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER"})
# Every opcode of protocols 0-5 as of CPython 3.11; a newer one is "unknown" and blocked.
_KNOWN_OPS = frozenset(op.name for op in pickletools.opcodes)
# Far above real checkpoints (a state dict's stack stays shallow; its memo grows with the
# number of tensors), low enough that a hostile stream cannot exhaust the scanner's memory.
_MAX_STACK = 1_000_000
_MAX_MEMO = 4_000_000
_MAX_OPS = 16_000_000  # ~50 MB of small opcodes, seconds to walk; beyond: too large to analyse


class _Opaque:
    """A stack value the walker does not model."""


_OPAQUE = _Opaque()


@dataclass(frozen=True)
class _Global:
    name: str


Item = object  # str | int | _Global | tuple[Item, ...] | _Opaque | _Mark


@dataclass(frozen=True)
class PickleProblem:
    """Something in the stream that blocks it: check id, message, byte position."""

    check_id: str
    message: str
    pos: int


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


class _TooManyProblems(Exception):
    pass


_MAX_PROBLEMS = 32  # one stream is blocked by its first problem; the rest is evidence


@dataclass
class _State:
    allowed: frozenset[str]
    stack: list[Item] = field(default_factory=list)
    # MARK positions kept beside the stack, as both CPython unpicklers do: a pop below the
    # newest mark is an underflow, and a mark pop is one slice, not a loop
    marks: list[int] = field(default_factory=list)
    memo: dict[int, Item] = field(default_factory=dict)
    globals: list[tuple[str, int]] = field(default_factory=list)
    problems: list[PickleProblem] = field(default_factory=list)
    pids: list[tuple[object, ...]] = field(default_factory=list)
    pos: int = 0

    def problem(self, check_id: str, message: str) -> None:
        if len(self.problems) >= _MAX_PROBLEMS:
            raise _TooManyProblems
        self.problems.append(PickleProblem(check_id, message, self.pos))

    def fence(self) -> int:
        return self.marks[-1] if self.marks else 0

    def pop(self) -> Item:
        if len(self.stack) <= self.fence():
            self.problem("pickle.malformed", "stack underflow")
            return _OPAQUE
        return self.stack.pop()

    def pop_mark(self) -> list[Item]:
        if not self.marks:
            self.problem("pickle.malformed", "no MARK on the stack")
            items = self.stack[:]
            self.stack.clear()
            return items
        m = self.marks.pop()
        items = self.stack[m:]
        del self.stack[m:]
        return items

    def container(self, opname: str) -> None:
        """The object an APPEND/SETITEM-family opcode mutates: present, and not a global."""
        if len(self.stack) <= self.fence():
            self.problem("pickle.malformed", f"{opname} without a container")
        elif isinstance(self.stack[-1], _Global):
            self.problem("pickle.opcode-not-allowed",
                         f"{opname} on a global (calls a module object's methods)")

    def add_global(self, name: str) -> _Global:
        self.globals.append((name, self.pos))
        if name not in self.allowed:
            self.problem("pickle.global-not-allowed", f"global {name} is not on the allow-list")
        return _Global(name)

    def require_callable(self, item: Item, opname: str) -> None:
        if not isinstance(item, _Global):
            self.problem("pickle.unresolved-call", f"{opname} on a callable that is not a global")


def _int(arg: object) -> int:
    return arg if isinstance(arg, int) else -1


def _top(st: _State, opname: str) -> Item:
    """The stack's top above the newest mark (what MEMOIZE/PUT/DUP read)."""
    if len(st.stack) <= st.fence():
        st.problem("pickle.malformed", f"{opname} on an empty stack")
        return _OPAQUE
    return st.stack[-1]


def _top_at(st: _State, pos: int, opname: str) -> Item:
    st.pos = pos
    return _top(st, opname)


def _step(st: _State, op: pickletools.OpcodeInfo, arg: object) -> None:
    """Every opcode's effect: the reference semantics the hot loop of :func:`_run` inlines."""
    name = op.name
    if name not in _KNOWN_OPS:
        st.problem("pickle.unknown-opcode", f"opcode {name} is not known to the walker")
        return
    if name in _FORBIDDEN_OPS:
        st.problem("pickle.opcode-not-allowed", f"opcode {name} is never used by checkpoints")
    if name in _STRING_OPS:
        st.stack.append(arg if isinstance(arg, str) else _OPAQUE)
    elif name in _INT_OPS:
        st.stack.append(arg if isinstance(arg, int) else _OPAQUE)
    elif name in _PUT_OPS or name == "MEMOIZE":
        idx = len(st.memo) if name == "MEMOIZE" else _int(arg)
        st.memo[idx] = _top(st, name)
    elif name in _GET_OPS:
        if _int(arg) not in st.memo:
            st.problem("pickle.malformed", f"memo key {arg} read before it was written")
        st.stack.append(st.memo.get(_int(arg), _OPAQUE))
    elif name in ("GLOBAL", "INST"):
        module, _, attr = str(arg).partition(" ")
        g = st.add_global(f"{module}.{attr}")
        if name == "INST":
            st.pop_mark()
            st.stack.append(_OPAQUE)
        else:
            st.stack.append(g)
    elif name == "STACK_GLOBAL":
        name_item, mod_item = st.pop(), st.pop()
        if isinstance(mod_item, str) and isinstance(name_item, str):
            st.stack.append(st.add_global(f"{mod_item}.{name_item}"))
        else:
            st.problem("pickle.unresolved-global", "STACK_GLOBAL operands are not constants")
            st.stack.append(_OPAQUE)
    elif name == "PROTO":
        if _int(arg) > pickle.HIGHEST_PROTOCOL:
            st.problem("pickle.malformed", f"unsupported pickle protocol {arg}")
    else:
        _step_structural(st, op, arg)


def _step_structural(st: _State, op: pickletools.OpcodeInfo, arg: object) -> None:
    name = op.name
    if name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"):
        n = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3, "EMPTY_TUPLE": 0}.get(name)
        items = st.pop_mark() if n is None else list(reversed([st.pop() for _ in range(n)]))
        st.stack.append(tuple(items))
    elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
        st.pop_mark()
        st.container(name)
    elif name in ("APPEND", "SETITEM"):
        for _ in range(1 if name == "APPEND" else 2):
            st.pop()
        st.container(name)
    elif name in ("LIST", "DICT", "FROZENSET"):
        st.pop_mark()
        st.stack.append(_OPAQUE)
    elif name == "MARK":
        st.marks.append(len(st.stack))
    elif name == "REDUCE":
        st.pop()
        st.require_callable(st.pop(), name)
        st.stack.append(_OPAQUE)
    elif name in ("NEWOBJ", "NEWOBJ_EX"):
        if name == "NEWOBJ_EX":
            st.pop()
        st.pop()
        st.require_callable(st.pop(), name)
        st.stack.append(_OPAQUE)
    elif name == "OBJ":
        items = st.pop_mark()
        st.require_callable(items[0] if items else _OPAQUE, name)
        st.stack.append(_OPAQUE)
    elif name == "BINPERSID":
        pid = st.pop()
        st.pids.append(pid if isinstance(pid, tuple) else (pid,))
        st.stack.append(_OPAQUE)
    elif name == "PERSID":
        st.pids.append((arg,))
        st.stack.append(_OPAQUE)
    elif name == "BUILD":
        st.pop()
        if len(st.stack) > st.fence() and isinstance(st.stack[-1], _Global):
            st.problem("pickle.opcode-not-allowed", "BUILD on a global (mutates a module object)")
    elif name == "DUP":
        st.stack.append(_top(st, name))
    elif name == "POP_MARK":
        st.pop_mark()
    else:
        _generic(st, op)


def _generic(st: _State, op: pickletools.OpcodeInfo) -> None:
    """Apply an opcode's declared stack effect with opaque values."""
    before = list(op.stack_before)
    if pickletools.markobject in before:
        below = before.index(pickletools.markobject)
        st.pop_mark()
        for _ in range(below):
            st.pop()
    else:
        for _ in before:
            st.pop()
    for _kind in op.stack_after:
        st.stack.append(_OPAQUE)


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
    try:
        while True:
            if p + 9 > n:  # every inline opcode's fixed part fits in 9 bytes
                n = buf.slide(p, p + 9)
                data, base, p = buf.data, buf.base, 0
                st.pos = base
                if _limits(st, count):
                    return False, None
                if n == 0:
                    buf.need(1)  # raises: the budget's error or the stream's end
            code = data[p]  # the opcode's position is p - 1 from here on
            p += 1
            count += 1
            if code == 0x8C:  # SHORT_BINUNICODE
                end = p + 1 + data[p]
                if end > n:
                    n = buf.need(end)
                    data = buf.data
                try:  # strict UTF-8 is a subset of surrogatepass, and 4x cheaper to call
                    stack.append(data[p + 1:end].decode())
                except UnicodeDecodeError:
                    stack.append(str(data[p + 1:end], "utf-8", "surrogatepass"))
                p = end
            elif code == 0x94:  # MEMOIZE
                memo[len(memo)] = (stack[-1] if len(stack) > fence
                                   else _top_at(st, base + p - 1, "MEMOIZE"))
            elif code == 0x4B:  # BININT1
                stack.append(data[p])
                p += 1
            elif code == 0x4A:  # BININT
                stack.append(i4(data, p)[0])
                p += 4
            elif code == 0x4D:  # BININT2
                stack.append(data[p] | data[p + 1] << 8)
                p += 2
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
                    stack.append(opaque)
            elif code == 0x71 or code == 0x68:  # BINPUT / BINGET
                idx = data[p]
                p += 1
                if code == 0x71:
                    memo[idx] = (stack[-1] if len(stack) > fence
                                 else _top_at(st, base + p - 2, "BINPUT"))
                elif idx in memo:
                    stack.append(memo[idx])
                else:
                    st.pos = base + p - 2
                    _step(st, _OPS[code], idx)
            elif code == 0x72 or code == 0x6A:  # LONG_BINPUT / LONG_BINGET
                idx = u4(data, p)[0]
                p += 4
                if code == 0x72:
                    memo[idx] = (stack[-1] if len(stack) > fence
                                 else _top_at(st, base + p - 5, "LONG_BINPUT"))
                elif idx in memo:
                    stack.append(memo[idx])
                else:
                    st.pos = base + p - 5
                    _step(st, _OPS[code], idx)
            elif code == 0x95:  # FRAME
                p += 8
            elif code in _PUSH_OPAQUE_CODES:
                stack.append(opaque)
                p += 8 if code == 0x47 else 0  # BINFLOAT
            elif code == 0x2E:  # STOP
                st.pos = base + p - 1
                top = st.pop()
                return True, top if isinstance(top, (int, str)) else None
            else:
                st.pos = base + p - 1
                arg, p = decode_arg(buf, code, p)
                data, n = buf.data, len(buf.data)
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
