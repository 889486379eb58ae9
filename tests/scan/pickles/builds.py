"""The pickle walker's two builds, chosen the way a user chooses them."""

from __future__ import annotations

import pytest

from specbundle import _native
from specbundle.scan.pickles import loop as pickle_loop


def use_build(loop: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the walker run ``loop``: ``SPECBUNDLE_PURE_PYTHON`` for the pure loop, unset for
    the build the install made (the compiled twin where there is one)."""
    if loop is pickle_loop:
        monkeypatch.setenv(_native.PURE_ENV, "1")
    else:
        monkeypatch.delenv(_native.PURE_ENV, raising=False)
