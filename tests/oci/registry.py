"""Moved to tests/lib/registry.py; kept importable for modules not yet ported."""

from tests.lib.registry import REGISTRY_BIN, Registry, registry_available, run_registry  # noqa: F401
