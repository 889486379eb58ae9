"""The pickle walker's reference semantics: one opcode at a time, on a symbolic stack.

The walker (:mod:`specbundle.scan.pickles.walker`) applies the opcodes checkpoints are made of
inline for speed and hands every other one to :func:`_step`; a test holds the inline ones to
:func:`_step` over mutated pickles. Values are strings, ints, globals, tuples and an opaque
value for everything else; MARKs live beside the stack, as both CPython unpicklers keep them.
"""

from __future__ import annotations

import pickle
import pickletools
from dataclasses import dataclass, field

__all__ = ["Item", "PickleProblem"]

_STRING_OPS = frozenset({"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
                         "SHORT_BINUNICODE", "BINUNICODE8"})
_INT_OPS = frozenset({"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_BYTES_OPS = frozenset({"BINBYTES", "SHORT_BINBYTES", "BINBYTES8"})
_FORBIDDEN_OPS = frozenset({"EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER"})
# Every opcode of protocols 0-5 as of CPython 3.11; a newer one is "unknown" and blocked.
_KNOWN_OPS = frozenset(op.name for op in pickletools.opcodes)


class _Opaque:
    """A stack value the walker does not model.

    Its repr is its label, never the default ``<... at 0x...>``: findings quote stack values as
    evidence, and a memory address would make two scans of the same bytes report differently.
    """

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"<{self.label}>"


_OPAQUE = _Opaque("opaque")
# a bytes literal (BINBYTES...): the one opaque value a bytes call may take
_BYTES = _Opaque("bytes")


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
    # (position, length) of every FRAME: where they end is checked against the opcodes after
    # the walk (walker._frame_problems), as a reader that buffers whole frames reads them
    frames: list[tuple[int, int]] = field(default_factory=list)
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

    def call(self, fn: Item, args: Item, opname: str) -> Item:
        """``fn(*args)``: a resolved global, called the way torch.save's output calls it (for an
        allowed global; any other is a problem already); the call's value."""
        if not isinstance(fn, _Global):
            self.problem("pickle.unresolved-call", f"{opname} on a callable that is not a global")
            return _OPAQUE
        why = _call_problem(fn.name, args) if fn.name in self.allowed else None
        if why:
            self.problem("pickle.call-not-allowed", f"{opname} calls {fn.name} {why}")
        return _BYTES if fn.name in _BYTES_CALLS and not why else _OPAQUE


# -- call rules ----------------------------------------------------------------------------------
# Being on the allow-list says a global may appear; these rules say how it may be called, for the
# globals where that matters. Storage classes, torch.Tensor, Parameter, dtypes and layouts are
# operands (a persistent id's type, _rebuild_from_type_v2's class), never called by torch.save's
# output: ``torch.Tensor(10**12)`` allocates memory of any size (torch 2.13 runs it even with
# weights_only=True), so a call of one is refused. Bytes constructors take text or a bytes
# literal, never a size; ``_codecs.encode`` looks its codec up by name, so only the latin-1 that
# pickle itself writes (protocol 2's bytes). A function that calls an argument
# (``_rebuild_from_type_v2``, ``_rebuild_wrapper_subclass``) must name a tensor rebuilder and a
# tensor class, not any allowed callable with any arguments (which would bypass the rules here).
_LATIN1 = frozenset({"latin1", "latin-1"})
_TENSOR_REBUILDERS = frozenset(f"torch._utils._rebuild_{n}" for n in (
    "tensor", "tensor_v2", "tensor_v3", "parameter", "parameter_with_state", "qtensor",
    "sparse_tensor", "nested_tensor", "meta_tensor_no_storage", "wrapper_subclass"))
_TENSOR_CLASSES = frozenset({"torch.Tensor", "torch.nn.parameter.Parameter"})
# The globals torch.save's output calls; any other ``torch.*`` global is an operand.
_TORCH_CALLABLES = _TENSOR_REBUILDERS | {"torch._tensor._rebuild_from_type_v2", "torch.Size",
                                         "torch.device", "torch.serialization._get_layout"}
_BYTES_CALLS = frozenset({"builtins.bytearray", "__builtin__.bytearray", "builtins.bytes",
                          "__builtin__.bytes", "_codecs.encode"})


def _call_problem(name: str, args: Item) -> str | None:
    """Why calling the global ``name`` with ``args`` is not what a checkpoint does, or None."""
    if name.startswith("torch.") and name not in _TORCH_CALLABLES:
        return "(an operand: torch.save never calls it)"
    if name == "_codecs.encode":
        ok = (isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], str)
              and args[1] in _LATIN1)
        return None if ok else "with arguments other than (text, 'latin1')"
    if name in _BYTES_CALLS:
        ok = isinstance(args, tuple) and (args == () or (
            len(args) <= 2 and (isinstance(args[0], str) or args[0] is _BYTES)
            and (len(args) == 1 or args[1] in _LATIN1)))
        return None if ok else "with arguments other than text or a bytes literal"
    if name == "torch._tensor._rebuild_from_type_v2":  # calls func(*args), then a class
        func, cls, inner = (args[0], args[1], args[2]) if isinstance(args, tuple) and len(
            args) == 4 else (None, None, None)
        if not (isinstance(func, _Global) and func.name in _TENSOR_REBUILDERS
                and isinstance(cls, _Global) and cls.name in _TENSOR_CLASSES):
            return "with something other than a tensor rebuilder and tensor class"
        return _call_problem(func.name, inner)
    if name == "torch._utils._rebuild_wrapper_subclass":
        ok = (isinstance(args, tuple) and len(args) > 0 and isinstance(args[0], _Global)
              and args[0].name in _TENSOR_CLASSES)
        return None if ok else "with a class that is not a tensor class"
    return None


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
            st.call(g, tuple(st.pop_mark()), name)
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
    elif name == "FRAME":
        st.frames.append((st.pos, _int(arg)))
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
        args = st.pop()
        st.stack.append(st.call(st.pop(), args, name))
    elif name in ("NEWOBJ", "NEWOBJ_EX"):
        if name == "NEWOBJ_EX":
            st.pop()
        args = st.pop()
        # cls.__new__(cls, *args[, **kwargs]): keyword arguments make the arguments unknown
        st.call(st.pop(), args if name == "NEWOBJ" else _OPAQUE, name)
        st.stack.append(_OPAQUE)
    elif name == "OBJ":
        items = st.pop_mark()
        st.call(items[0] if items else _OPAQUE, tuple(items[1:]), name)
        st.stack.append(_OPAQUE)
    elif name in _BYTES_OPS:
        st.stack.append(_BYTES)
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

