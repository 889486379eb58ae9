"""A complete chain of custody per test (tests/lib/chain.py), over the session's small pair."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lib.chain import Chain, build_chain
from tests.lib.models import PairStore
from tests.lib.policy import policy_for, policy_yaml

# moved to tests/lib/chain.py and tests/lib/policy.py; re-exported until every module is ported
__all__ = ["Chain", "build_chain", "policy_for", "policy_yaml"]


@pytest.fixture
def chain(tmp_path: Path, synth_pairs: PairStore) -> Chain:
    """A fresh complete chain per test (tests tamper with the mirror, never the models)."""
    return build_chain(tmp_path, pair=synth_pairs.small(0))
