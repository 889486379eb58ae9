"""Named commit points and a test hook that kills the process at one of them.

Every multi-step write (pull, import, export, sign, gc, log append) calls :func:`point` at each
step whose crash must leave the old or the new state visible and nothing else. In production
the call is one environment lookup. The fault-injection tests set
``SPECBUNDLE_CRASH_AT=<name>`` (optionally ``<name>:<n>`` for the n-th time the point is
reached) and the process dies there with ``os._exit(137)``, exactly as ``kill -9`` would:
no ``finally`` block, no atexit handler, no flush.

Points are named ``<stage>.<step>`` (``pull.object-renamed``, ``import.ref-flipped``);
:data:`REGISTERED` lists every name the code declares, so a test can iterate all of them and a
typo in a test fails loudly instead of never firing. In-process tests may also :func:`hook` a
point to act at that exact moment (a race: swap a folder for a link between check and use).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator

__all__ = ["ENV", "REGISTERED", "hook", "point", "register"]

ENV = "SPECBUNDLE_CRASH_AT"
REGISTERED: set[str] = set()
_counts: dict[str, int] = {}
_lock = threading.Lock()
_hooks: dict[str, Callable[[object], None]] = {}


def register(*names: str) -> None:
    """Declare commit points (at import time of the module that owns them)."""
    REGISTERED.update(names)


@contextlib.contextmanager
def hook(name: str, fn: Callable[[object], None]) -> Iterator[None]:
    """Call ``fn(detail)`` whenever ``point(name, detail)`` is reached in this process (tests)."""
    if name not in REGISTERED:
        raise KeyError(f"no commit point named {name!r}")
    _hooks[name] = fn
    try:
        yield
    finally:
        _hooks.pop(name, None)


def point(name: str, detail: object = None) -> None:
    """A commit point: dies here when ``SPECBUNDLE_CRASH_AT`` names it (tests only)."""
    fn = _hooks.get(name)
    if fn is not None:
        fn(detail)
    want = os.environ.get(ENV)
    if not want:
        return
    target, _, nth = want.partition(":")
    if target != name:
        return
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        hit = _counts[name]
    if hit >= (int(nth) if nth.isdigit() else 1):
        os._exit(137)
