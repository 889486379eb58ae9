"""A registry per test module and signed bundles built the way the sign/verify tests do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specbundle.oci import RegistryBackend, RegistryOptions, parse_reference
from tests.lib.registry import Registry, registry_available, run_registry

_OPEN: list[RegistryBackend] = []


def backend(ref: str, **opts: Any) -> RegistryBackend:
    """A registry client closed when the test ends (its pooled sockets are not left to the
    garbage collector, where they would surface as ResourceWarnings in a later test)."""
    store = RegistryBackend(parse_reference(ref), RegistryOptions(**opts))
    _OPEN.append(store)
    return store


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


@pytest.fixture(scope="module")
def registry(module_tmp: Path) -> Iterator[Registry]:
    if not registry_available():
        pytest.skip("docker-registry not installed (ci/install-registry.sh)")
    with run_registry(module_tmp) as reg:
        yield reg
