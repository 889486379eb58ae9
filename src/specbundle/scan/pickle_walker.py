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
import pickletools
import struct
from dataclasses import dataclass, field
from typing import IO

from specbundle.scan.pickle_ops import BudgetExceeded, fast_ops

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
# Opcodes whose whole effect is one push (of their int/str argument, or of an opaque value),
# or a pop to the mark: handled inline by walk_pickle.
_PUSH_ARG = frozenset({"BININT1", "BININT2", "BININT", "SHORT_BINUNICODE", "BINUNICODE",
                       "BINUNICODE8"})
_PUSH_OPAQUE = frozenset({"NONE", "NEWTRUE", "NEWFALSE", "EMPTY_LIST", "EMPTY_DICT",
                          "EMPTY_SET", "BINFLOAT"})
_MARK_POP = frozenset({"APPENDS", "SETITEMS", "ADDITEMS", "LIST", "DICT"})
_FORBIDDEN_OPS = frozenset({"EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER"})
# Every opcode of protocols 0-5 as of CPython 3.11; a newer one is "unknown" and blocked.
_KNOWN_OPS = frozenset(op.name for op in pickletools.opcodes)
# Far above real checkpoints (a state dict's stack stays shallow; its memo grows with the
# number of tensors), low enough that a hostile stream cannot exhaust the scanner's memory.
_MAX_STACK = 1_000_000
_MAX_MEMO = 4_000_000
_MAX_OPS = 2_000_000  # ~65 000 tensors of torch data.pkl; beyond: too large to analyse


class _Opaque:
    """A stack value the walker does not model."""


class _Mark:
    """The MARK sentinel."""


_OPAQUE = _Opaque()
_MARK = _Mark()


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
    memo: dict[int, Item] = field(default_factory=dict)
    globals: list[tuple[str, int]] = field(default_factory=list)
    problems: list[PickleProblem] = field(default_factory=list)
    pids: list[tuple[object, ...]] = field(default_factory=list)
    pos: int = 0

    def problem(self, check_id: str, message: str) -> None:
        if len(self.problems) >= _MAX_PROBLEMS:
            raise _TooManyProblems
        self.problems.append(PickleProblem(check_id, message, self.pos))

    def pop(self) -> Item:
        if not self.stack or self.stack[-1] is _MARK:
            self.problem("pickle.malformed", "stack underflow")
            return _OPAQUE
        return self.stack.pop()

    def pop_mark(self) -> list[Item]:
        items: list[Item] = []
        while self.stack and self.stack[-1] is not _MARK:
            items.append(self.stack.pop())
        if not self.stack:
            self.problem("pickle.malformed", "no MARK on the stack")
        else:
            self.stack.pop()
        items.reverse()
        return items

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


def _step(st: _State, op: pickletools.OpcodeInfo, arg: object) -> None:
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
        st.memo[idx] = st.stack[-1] if st.stack else _OPAQUE
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
    else:
        _step_structural(st, op, arg)


def _step_structural(st: _State, op: pickletools.OpcodeInfo, arg: object) -> None:
    name = op.name
    if name in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE"):
        n = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3, "EMPTY_TUPLE": 0}.get(name)
        items = st.pop_mark() if n is None else list(reversed([st.pop() for _ in range(n)]))
        st.stack.append(tuple(items))
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
        if st.stack and isinstance(st.stack[-1], _Global):
            st.problem("pickle.opcode-not-allowed", "BUILD on a global (mutates a module object)")
    elif name == "DUP":
        st.stack.append(st.stack[-1] if st.stack else _OPAQUE)
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
    for kind in op.stack_after:
        st.stack.append(_MARK if kind is pickletools.markobject else _OPAQUE)


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
    try:
        stack, memo = st.stack, st.memo
        for n_ops, (op, arg, pos) in enumerate(fast_ops(stream, max_bytes)):
            st.pos = pos
            name = op.name
            # hot opcodes of checkpoints first (same effect as _step, without its dispatch)
            if name in _PUSH_ARG:
                stack.append(arg if type(arg) is int or type(arg) is str else _OPAQUE)
            elif name in _PUSH_OPAQUE:
                stack.append(_OPAQUE)
            elif name == "MARK":
                stack.append(_MARK)
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1] if stack else _OPAQUE
            elif name in _MARK_POP:
                st.pop_mark()
                if name == "LIST" or name == "DICT":
                    stack.append(_OPAQUE)
            elif name == "STOP":
                top = st.pop()
                root = top if isinstance(top, (int, str)) else None
                complete = True
                break
            else:
                _step(st, op, arg)
            if not n_ops & 0xFF and (len(stack) > _MAX_STACK or len(memo) > _MAX_MEMO
                                      or n_ops > _MAX_OPS):
                st.problem("pickle.budget", "too large to analyse: opcodes, stack or memo beyond "
                           "the walker's limits")
                break
    except BudgetExceeded:
        st.problems.append(PickleProblem(
            "pickle.budget", f"pickle too large to analyse (over the {max_bytes}-byte budget)",
            st.pos))
    except _TooManyProblems:
        st.problems.append(PickleProblem(
            "pickle.malformed", f"more than {_MAX_PROBLEMS} problems; walk stopped", st.pos))
    except (ValueError, UnicodeError, EOFError, OverflowError, struct.error, IndexError) as err:
        st.problems.append(PickleProblem("pickle.malformed", f"broken pickle stream: {err}",
                                         st.pos))
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
