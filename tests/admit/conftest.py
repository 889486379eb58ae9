"""Admit fixtures: the session's bench pairs and a session folder for signed bundles."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lib.bundles import Signed, signed_bundle  # moved to tests/lib/bundles.py
from tests.lib.models import bench_pairs

__all__ = ["Signed", "bench_pairs", "signed_bundle"]


@pytest.fixture(scope="session")
def admit_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("admit")
