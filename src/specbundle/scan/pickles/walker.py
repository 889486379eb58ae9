"""Walk a pickle's opcodes symbolically, without unpickling, and collect what it would call.

Hand-written (with pickletools' opcode table and argument readers) because no maintained
library implements an *allow-list* walk that resolves ``STACK_GLOBAL`` operands through the
memo (picklescan and modelscan are deny-lists; fickling is LGPL and reads whole files). The
walker keeps a tiny symbolic stack (strings, ints, globals, tuples, opaque values) so that
every callable a ``REDUCE``/``NEWOBJ``/``OBJ``/``INST`` would invoke is known by name;
anything it cannot resolve, an unknown opcode or a broken stream is reported, never guessed.
This module is the fast walk and its limits; the one-opcode semantics it inlines are
:mod:`specbundle.scan.pickles.semantics`.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import IO

from specbundle import _native
from specbundle.scan.pickles import loop as pickle_loop
from specbundle.scan.pickles.ops import BudgetExceeded, _Buffer, fast_ops
from specbundle.scan.pickles.semantics import (
    _MAX_PROBLEMS,
    PickleProblem,
    _Global,
    _State,
    _step,
    _TooManyProblems,
)

__all__ = [
    "LEGACY_STORAGE_TYPES",
    "NATIVE",
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
# Storage classes a persistent id may name (never called: torch.load reads their ``dtype``).
# torch.save pickles a tensor of a dtype with no typed storage class (uint16/32/64, the fnuz and
# e8m0 float8s, float4, complex32) as ``torch.storage.UntypedStorage`` of its bytes; only the zip
# loader reads that (the legacy loader fails on it), so the legacy set leaves it out.
LEGACY_STORAGE_TYPES: frozenset[str] = frozenset(
    {f"torch.{n}Storage" for n in _STORAGE_NAMES} | {"torch.UntypedStorage"}
)
STORAGE_TYPES: frozenset[str] = LEGACY_STORAGE_TYPES | {"torch.storage.UntypedStorage"}
# Every torch.dtype of torch 2.13 (module constants: resolving one calls nothing).
_DTYPES = ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64",
           "uint8", "uint16", "uint32", "uint64", "bool", "complex32", "complex64",
           "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
           "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8", "qint32", "quint4x2",
           "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
           *(f"int{i}" for i in range(1, 8)), *(f"uint{i}" for i in range(1, 8)))
# Quantization schemes (constants, an argument of _rebuild_qtensor).
_QSCHEMES = ("per_tensor_affine", "per_channel_affine", "per_channel_affine_float_qparams",
             "per_tensor_symmetric", "per_channel_symmetric")

# What real torch.save output references (checked against torch 2.13's own writer; see
# tests/scan/pickles/test_real_torch.py), a subset of torch.load(weights_only=True)'s list:
# data-only reconstructors and constants. Everything else is blocked, whatever it is. Which of
# these may be *called*, and with what, is narrowed further by semantics' call rules (a storage
# class or torch.Tensor is an operand, never a callee; _codecs.encode only decodes latin-1).
TORCH_ALLOWED: frozenset[str] = frozenset(
    {
        # containers and plain values (protocol 2 spells builtins ``__builtin__``; Python maps
        # it to builtins for protocols < 3 and fails to import it above)
        "collections.OrderedDict",  # state_dict() and its ``_metadata`` attribute
        "collections.Counter",  # a dict subclass: counts, calls nothing
        "builtins.set", "__builtin__.set",  # a set value (protocols < 4)
        "builtins.frozenset", "__builtin__.frozenset",
        "builtins.complex", "__builtin__.complex",  # a complex value
        "builtins.bytearray", "__builtin__.bytearray",  # bytearray (protocols < 5)
        "__builtin__.bytes",  # b"" (protocol 2: bytes() with no argument)
        "_codecs.encode",  # any other bytes (protocol 2: encode(text, "latin1"))
        # tensors: storage + offset + size + stride (+ dtype, quantizer, layout) to a tensor
        "torch._utils._rebuild_tensor",  # torch < 0.4
        "torch._utils._rebuild_tensor_v2",  # every dtype with a typed storage class
        "torch._utils._rebuild_tensor_v3",  # dtypes without one (uint16, float8_e8m0fnu...)
        "torch._utils._rebuild_parameter",
        "torch._utils._rebuild_parameter_with_state",  # a Parameter with attributes
        "torch._tensor._rebuild_from_type_v2",  # a tensor with attributes (rebuilder checked)
        "torch._utils._rebuild_meta_tensor_no_storage",  # device="meta": sizes, no data
        "torch._utils._rebuild_qtensor",  # quantized tensors
        "torch._utils._rebuild_sparse_tensor",  # COO/CSR/CSC/BSR/BSC from their tensors
        "torch._utils._rebuild_nested_tensor",  # nested tensors from buffer and sizes
        "torch._utils._rebuild_wrapper_subclass",  # a wrapper subclass (its class checked)
        "torch.Tensor",
        "torch.nn.parameter.Parameter",
        "torch.Size",
        "torch.device",
        "torch.serialization._get_layout",  # a layout by name from torch's own table
        "torch.strided",
    }
    | STORAGE_TYPES
    | {f"torch.{d}" for d in _DTYPES}
    | {f"torch.{q}" for q in _QSCHEMES}
)

# An object-dtype .npy pickles the array itself; its elements must need no global at all.
NUMPY_ALLOWED: frozenset[str] = frozenset(
    {"numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
     "numpy.ndarray", "numpy.dtype"}
)

# Far above real checkpoints (a state dict's stack stays shallow; its memo grows with the
# number of tensors), low enough that a hostile stream cannot exhaust the scanner's memory.
_MAX_STACK = 1_000_000
_MAX_MEMO = 4_000_000
_MAX_OPS = 16_000_000  # ~50 MB of small opcodes, seconds to walk; beyond: too large to analyse
# The hot loop: its mypyc-compiled twin when the build made one from the current source (the
# pure loop whenever SPECBUNDLE_PURE_PYTHON is set, read at each walk).
_LOOP = _native.twin(pickle_loop)
NATIVE: bool = _LOOP is not pickle_loop


@dataclass(frozen=True)
class PickleWalk:
    """Result of walking one pickle stream."""

    globals: tuple[tuple[str, int], ...]
    problems: tuple[PickleProblem, ...]
    persistent_ids: tuple[tuple[object, ...], ...]
    end: int
    complete: bool
    root: object = None
    # what CPython's C unpickler reads otherwise than the opcode-by-opcode walk (frames that do
    # not tile the opcodes, text arguments only it reads), kept apart from ``problems``, which
    # are the one-opcode semantics of :mod:`.semantics`
    reader_problems: tuple[PickleProblem, ...] = ()

    @property
    def blocked(self) -> bool:
        """Whether anything in this stream blocks it."""
        return bool(self.problems or self.reader_problems)



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
    loop = pickle_loop if _native.pure_forced() else _LOOP
    try:
        complete, root = loop.run(st, buf, (_MAX_STACK, _MAX_MEMO, _MAX_OPS))
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
    reader = [PickleProblem("pickle.malformed", "a text argument the C unpickler reads otherwise "
                            "than genops (a number in another base or cut at a NUL, UTF-8 "
                            "STRING)", pos)
              for pos in buf.c_only]
    if complete and st.frames and not _tiled(st.frames, end):
        stream.seek(origin)
        reader += _frame_problems(stream, end)
    stream.seek(origin + end)  # the decoder reads ahead; callers continue after the STOP
    return PickleWalk(tuple(st.globals), tuple(st.problems), tuple(st.pids), end, complete,
                      root, tuple(reader[:_MAX_PROBLEMS]))


def _tiled(frames: list[tuple[int, int]], end: int) -> bool:
    """Whether the frames the walk met lie back to back and the last ends right after STOP,
    as a pickler writes them when no large bytes go unframed: then every frame ends where the
    walk decoded the next FRAME (an opcode boundary), and the second pass
    (:func:`_frame_problems`, opcode by opcode at genops' speed) has nothing to find."""
    at = frames[0][0]
    for pos, size in frames:
        if pos != at:
            return False
        at = pos + 9 + size
    return at == end


def _frame_problems(stream: IO[bytes], end: int) -> tuple[PickleProblem, ...]:
    """Frames that do not tile the opcodes as a pickler writes them, in a complete pickle of
    ``end`` bytes from the stream's position.

    CPython's C unpickler (``pickle.load``, torch.load's default) reads a frame too large for
    its prefetch with one ``read`` of the frame's length and continues from the file after it:
    bytes of a frame that runs past STOP are skipped by the next load from the same file (a
    legacy checkpoint's next pickle then starts inside what the walker read as storage data),
    and an opcode that crosses a frame's end is read from after the frame, skipping the rest
    of its buffer. The pure-Python unpickler refuses both, as it refuses a frame inside a frame;
    picklers end every frame at an opcode boundary, the last one right after STOP.
    """
    out: list[PickleProblem] = []
    active: int | None = None  # where the current frame ends
    try:
        for op, arg, pos in fast_ops(stream, end):
            if active is not None and pos >= active:
                if pos > active:
                    out.append(PickleProblem("pickle.malformed", "an opcode crosses the end of "
                                             f"the frame at {active} (frame readers skip bytes)",
                                             pos))
                active = None
            if op.name == "FRAME":
                if active is not None:
                    out.append(PickleProblem("pickle.malformed", "FRAME inside another frame",
                                             pos))
                active = pos + 9 + (arg if isinstance(arg, int) else 0)
            elif op.name == "STOP":
                if active is not None and active != pos + 1:
                    out.append(PickleProblem(
                        "pickle.malformed", f"frame runs {active - pos - 1} bytes past STOP (the "
                        "next load from the file starts at the frame's end)", pos))
                break
            if len(out) >= _MAX_PROBLEMS:
                break
    except (*_BROKEN, BudgetExceeded) as err:  # the walk read it to STOP: not expected
        out.append(PickleProblem("pickle.malformed", f"frames unreadable: {err}", 0))
    return tuple(out)


# Text fails to parse as pickle opcodes within a few bytes (text made only of opcode letters,
# such as "aaaa", parses on but never reaches STOP); the whole stream is followed, not a byte
# window, so one huge string opcode cannot push the evidence out of sight. A stream that parses
# for this many opcodes without ending is treated as a pickle (and the walk reports its size).
_SNIFF_OPS = 2_000_000
_CALL_OPS = frozenset({"REDUCE", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "BUILD"})
# Every opcode that resolves a global (imports a module): STACK_GLOBAL needs no PROTO, so a
# text file can carry it (after a lead byte taken as an argument: ``q\xc2\x93`` is valid UTF-8).
_GLOBAL_OPS = frozenset({"GLOBAL", "INST", "STACK_GLOBAL"})
_CONTAINER_OPS = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS"})
_BROKEN = (ValueError, UnicodeError, EOFError, OverflowError, struct.error, IndexError)


def looks_like_pickle(data: bytes | IO[bytes], *, truncated: bool = False,
                      max_bytes: int = 1 << 30) -> bool:
    """Whether a stream (or bytes) is a pickle, protocol 0/1 text pickles included.

    True when it parses to STOP, parses :data:`_SNIFF_OPS` opcodes without error, or calls a
    resolved global before breaking (a nullifAI-style broken pickle: the call already ran when a
    loader reaches the break), judged on the stack the unpickler would have.
    ``truncated`` says bytes were cut from the end (a break there is no evidence against).
    """
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    origin = stream.tell()
    ops, saw_global, saw_call = 0, False, False
    try:
        for op, _arg, _pos in fast_ops(stream, max_bytes):
            ops += 1
            if op.name == "STOP":
                return ops >= 2
            saw_global = saw_global or op.name in _GLOBAL_OPS
            saw_call = saw_call or (saw_global and op.name in _CALL_OPS | _CONTAINER_OPS)
            if ops >= _SNIFF_OPS:
                return True
    except BudgetExceeded:
        return True  # still parsing as a pickle where the budget ends: too large to tell
    except _BROKEN:
        if truncated and saw_global and ops >= 3:
            return True  # cut by the caller's window after a global: evidence enough
        if saw_call:  # a candidate: replay it on a symbolic stack (rare, and short)
            stream.seek(origin)
            return _calls_before_break(stream, max_bytes)
    return False


def _calls_before_break(stream: IO[bytes], max_bytes: int) -> bool:
    """Whether a stream that breaks first calls a resolved global (REDUCE, NEWOBJ, OBJ, INST,
    BUILD or a container opcode on it), with the stack depth and marks the unpickler checks
    before it calls: text that merely parses as a few opcodes (``cat\ndog\nbird``) is not a
    pickle, a broken pickle whose call ran is."""
    st = _State(frozenset())
    try:
        for op, arg, _pos in fast_ops(stream, max_bytes):
            if _calls(st, op.name):
                return True
            _step(st, op, arg)
            if any(p.check_id == "pickle.malformed" for p in st.problems):
                return False  # the unpickler raises here, before any later call
            st.problems.clear()  # unlisted globals are expected here, not problems
    except (*_BROKEN, BudgetExceeded, _TooManyProblems):
        pass
    return False


def _calls(st: _State, name: str) -> bool:
    """Whether the opcode ``name``, applied to this state, calls code of a resolved global."""
    stack, fence = st.stack, st.fence()
    depth = len(stack) - fence
    if name == "INST":
        return bool(st.marks)  # resolves its class, then calls it with the items of a mark
    if name == "OBJ":
        return bool(st.marks) and len(stack) > st.marks[-1] and isinstance(
            stack[st.marks[-1]], _Global)
    below = {"REDUCE": 2, "NEWOBJ": 2, "BUILD": 2, "NEWOBJ_EX": 3, "APPEND": 2, "SETITEM": 3}
    if name in below:
        n = below[name]
        return depth >= n and isinstance(stack[-n], _Global)
    if name in _CONTAINER_OPS:  # APPENDS SETITEMS ADDITEMS: the object below the newest mark
        return bool(st.marks) and st.marks[-1] > (st.marks[-2] if len(st.marks) > 1 else 0) \
            and isinstance(stack[st.marks[-1] - 1], _Global)
    return False
