"""Fixtures for render tests: a mirror holding a bundle stored from placeholder files.

Files and commits are fixed (tests/lib/bundles.py), so rendered manifests are byte-stable
across runs once the mirror root is replaced by :data:`GOLDEN_ROOT`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specbundle.mirror import Mirror
from specbundle.record import BundleRecord
from tests.lib.bundles import (
    DIGEST,
    DRAFT_COMMIT,
    GOLDEN_ROOT,
    TARGET_COMMIT,
    BundleFactory,
    make_artifact,
    make_bundle,
)
from tests.lib.specs import BASE_SPEC, spec_dict

# moved to tests/lib/bundles.py and tests/lib/specs.py; re-exported until every module is ported
_artifact = make_artifact
__all__ = ["BASE_SPEC", "DIGEST", "DRAFT_COMMIT", "GOLDEN_ROOT", "TARGET_COMMIT", "BundleFactory",
           "make_bundle", "spec_dict"]


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    """An empty mirror."""
    return Mirror.open(tmp_path / "mirror", create=True)


@pytest.fixture
def bundle(mirror: Mirror) -> BundleFactory:
    """Factory: ``bundle(**spec_changes)`` stores a bundle and returns its record."""
    def make(draft_config: dict[str, Any] | None = None, **changes: Any) -> BundleRecord:
        return make_bundle(mirror, spec_dict(**changes), draft_config)
    return make
