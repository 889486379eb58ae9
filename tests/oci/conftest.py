"""A registry per test module and signed bundles built the way the sign/verify tests do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.oci.registry import Registry, registry_available, run_registry


@pytest.fixture(scope="module")
def registry(module_tmp: Path) -> Iterator[Registry]:
    if not registry_available():
        pytest.skip("docker-registry not installed (ci/install-registry.sh)")
    with run_registry(module_tmp) as reg:
        yield reg
