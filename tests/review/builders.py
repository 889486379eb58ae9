"""Moved to tests/lib/versions.py; kept importable for modules not yet ported."""

from tests.lib.versions import Versions

__all__ = ["Versions"]
