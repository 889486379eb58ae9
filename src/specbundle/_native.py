"""Pick a module's compiled twin, but only one built from exactly the module's current bytes.

The build (``hatch_build.py``) compiles a few hot pure-Python modules with mypyc into a twin
named ``<module>_native`` that records the SHA-256 of the source it was compiled from. Python
would happily import a stale twin after the source changed (an edited checkout, a partial
upgrade), silently running code nobody reviewed; here a twin is used only when its digest
matches the source file next to it, and the pure module otherwise: both do the same thing, the
twin only faster. ``SPECBUNDLE_PURE_PYTHON=1`` forces the pure modules; callers read it at each
call (:func:`pure_forced`), so one process can run both builds (the tests do).
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from types import ModuleType

__all__ = ["PURE_ENV", "pure_forced", "twin"]

PURE_ENV = "SPECBUNDLE_PURE_PYTHON"


def _source_digest(module: ModuleType) -> str | None:
    origin = getattr(module.__spec__, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    try:
        return hashlib.sha256(Path(origin).read_bytes()).hexdigest()
    except OSError:
        return None


def pure_forced() -> bool:
    """Whether the environment asks for the pure modules now (``SPECBUNDLE_PURE_PYTHON``)."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def twin(module: ModuleType) -> ModuleType:
    """``module``'s compiled twin when one matches its source, else ``module`` itself."""
    if pure_forced():
        return module
    try:
        native = importlib.import_module(module.__name__ + "_native")
    except ImportError:  # not built (no compiler, an sdist, another interpreter): pure Python
        return module
    except Exception:  # noqa: BLE001 - a twin that breaks at import must not break specbundle
        return module
    digest = getattr(native, "SOURCE_DIGEST", None)
    if not isinstance(digest, str) or digest != _source_digest(module):
        return module
    return native
