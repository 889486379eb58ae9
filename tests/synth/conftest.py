"""Session-wide synthetic pairs: generated once, shared by the file and engine tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbundle.synth import SynthPair, make_pair


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synth")


@pytest.fixture(scope="session")
def good_pair(synth_root: Path) -> SynthPair:
    return make_pair(synth_root / "good", quality="good", seed=7)


@pytest.fixture(scope="session")
def bad_pair(synth_root: Path) -> SynthPair:
    return make_pair(synth_root / "bad", quality="bad", seed=7)


@pytest.fixture(scope="session")
def costly_pair(synth_root: Path) -> SynthPair:
    return make_pair(synth_root / "costly", quality="costly", seed=7)
