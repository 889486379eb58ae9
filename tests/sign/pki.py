"""Moved to tests/lib/pki.py; kept importable for modules not yet ported."""

from tests.lib.pki import DAY, NOW, Ca, pem, write_pem  # noqa: F401
