"""Moved to tests/_sglang.py; kept importable for modules not yet ported."""

from tests._sglang import (  # noqa: F401
    LAUNCH,
    MAIN,
    PYTHON,
    ROOT,
    VENV,
    algorithms,
    choices,
    flags,
    needs_sglang,
    resolve,
)
