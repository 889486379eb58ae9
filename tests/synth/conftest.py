"""Session-wide synthetic pairs (tests/lib/models.py): generated once, shared by the file and
engine tests and by the bench and admit tests that use the same seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle.synth import SynthPair
from tests.lib.models import PairStore


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synth")


@pytest.fixture(scope="session")
def good_pair(synth_pairs: PairStore) -> SynthPair:
    return synth_pairs.get(quality="good", seed=7)


@pytest.fixture(scope="session")
def bad_pair(synth_pairs: PairStore) -> SynthPair:
    return synth_pairs.get(quality="bad", seed=7)


@pytest.fixture(scope="session")
def costly_pair(synth_pairs: PairStore) -> SynthPair:
    return synth_pairs.get(quality="costly", seed=7)
