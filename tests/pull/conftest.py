"""A real loopback hub (olah serving local git repos) and tiny model repos to pull from."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from specbundle.localhub import LocalHub, publish_repo, serve_hub
from tests.lib.models import make_model_dir
from tests.lib.specs import spec_text

# moved to tests/lib/models.py and tests/lib/specs.py; re-exported until every module is ported
__all__ = ["make_model_dir", "spec_text"]

_counter = itertools.count()


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHub]:
    root = tmp_path_factory.mktemp("hub")
    with serve_hub(root) as h:
        yield h


@pytest.fixture
def repo_name() -> str:
    return f"org/model-{next(_counter)}"


@pytest.fixture
def published(hub: LocalHub, tmp_path: Path, repo_name: str) -> tuple[str, str]:
    """A repo on the hub with one commit on main and tag v1; returns (repo, sha)."""
    src = make_model_dir(tmp_path / "src")
    sha = publish_repo(hub.root, repo_name, src, tags=("v1",))
    return repo_name, sha
