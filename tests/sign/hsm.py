"""Moved to tests/lib/hsm.py; kept importable for modules not yet ported."""

from tests.lib.hsm import HAVE_SOFTHSM, MODULE, PIN, init_token  # noqa: F401
