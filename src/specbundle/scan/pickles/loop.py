"""The pickle walker's hot loop, kept apart so that it can run compiled.

Pure Python it walks ~15 MB/s of small opcodes; the build compiles an exact copy of this file
with mypyc (``hatch_build.py``: no hand-written C, the same typed source) to ~3x that, and
:mod:`specbundle._native` uses the copy only when its recorded digest matches this file's bytes,
so an edited source never runs stale compiled code. Everything here must stay valid for mypyc:
typed locals, no dynamic tricks. :mod:`specbundle.scan.pickles.walker` is the API.
"""

from __future__ import annotations

from specbundle.scan.pickles.ops import _I4, _OPS, _U4, _U8, _Buffer, decode_arg
from specbundle.scan.pickles.semantics import (
    _OPAQUE,
    _Global,
    _State,
    _step,
    _TooManyProblems,
    _top_at,
)

# Opcode bytes the hot loop of run applies inline: one opaque push (BINFLOAT with its 8
# bytes), and the pops to the newest mark.
_PUSH_OPAQUE_CODES = frozenset(b"N\x88\x89]}\x8fG")
_MARK_POP_CODES = frozenset(b"ue\x90ld\x91")
_MEMO_CODES = frozenset(b"qhrj")


def _limits(st: _State, count: int, caps: tuple[int, int, int]) -> bool:
    if len(st.stack) > caps[0] or len(st.memo) > caps[1] or count > caps[2]:
        st.problem("pickle.budget", "too large to analyse: opcodes, stack or memo beyond the "
                   "walker's limits")
        return True
    return False


def run(st: _State, buf: _Buffer, caps: tuple[int, int, int]) -> tuple[bool, object]:
    """The walk proper: decode and apply opcodes until STOP; ``(complete, root)``.

    ``caps`` are the stack, memo and opcode-count limits.

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
                if _limits(st, count, caps):
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
                elif code == 0x95:  # FRAME: its extent is checked after the walk
                    st.frames.append((base + p - 1, int(_U8.unpack_from(data, p)[0])))
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
                    if _limits(st, count, caps):
                        return False, None
    except _TooManyProblems:
        raise  # st.pos is the position of the problem that overflowed
    except BaseException:
        # a decode that failed left p just after the opcode's byte (every inline decode
        # advances p after reading); a failed read at a window's first byte left p at 0
        st.pos = base + max(p - 1, 0)
        raise
