"""A registry per test module and signed bundles built the way the sign/verify tests do."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.oci.registry import Registry, registry_available, run_registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if not registry_available():
        pytest.skip("docker-registry not installed (ci/install-registry.sh)")
    with run_registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg
